"""Every `git` command defect runs itself, run so that the repository cannot run a program.

Owns `run_git`, the one way defect starts `git` of its own accord (the environment facts of
`prompt/environment.py`, the work-tree snapshots of `checkpoints/gitsnap.py`), and the list
of what it neutralises, stated here once. The model's own `bash` commands are not run here:
they are the model's, and the permission policy judges them.

Why: a repository is untrusted input. Its `.git/config` (shipped in a tarball, copied with a
directory, or written by a prompt-injected model) and its `.gitattributes` can make a plain
`git status` run any command: an fsmonitor hook, a clean filter, a lazy fetch through a
remote helper. defect runs `git` at the first prompt of every session, in every mode,
without asking anyone, so none of that may ever run.

Invariant: a command run here starts no program named by the repository, by the user's
inherited `GIT_*` variables, or by any configuration file. Each call:
- drops every inherited `GIT_*` variable (`GIT_DIR`, `GIT_WORK_TREE`, `GIT_INDEX_FILE`,
  `GIT_CONFIG_COUNT`/`_KEY_n`/`_VALUE_n`, `GIT_CONFIG_PARAMETERS`, `GIT_EXTERNAL_DIFF`,
  `GIT_SSH`, `GIT_SSH_COMMAND`, `GIT_PAGER`, `GIT_EDITOR`, `GIT_ASKPASS`, `GIT_TRACE*`,
  ...) and `SSH_ASKPASS`, except the three that only say which files are the user's own
  configuration (`GIT_CONFIG_GLOBAL`, `GIT_CONFIG_SYSTEM`, `GIT_CONFIG_NOSYSTEM`); then sets
  its own: `GIT_TERMINAL_PROMPT=0`, `GIT_OPTIONAL_LOCKS=0` (git never takes the user's index
  lock nor rewrites the index's stat cache), `GIT_NO_LAZY_FETCH=1`,
  `GIT_NO_REPLACE_OBJECTS=1`, `GIT_PAGER=cat`, `LC_ALL=C`. The configuration files read are
  git's usual ones (system, global, the repository's): the user's own are kept, since
  `core.excludesFile` decides what is untracked, but every key below is overridden
  whichever file sets it;
- passes `--no-pager --no-optional-locks --no-replace-objects` and these fixed overrides
  (`-c`, the command line's scope, which wins over every file): `core.fsmonitor=false`,
  `core.hooksPath=/dev/null`, `core.pager=cat`, `core.editor=:`, `core.askPass=`,
  `core.sshCommand=`, `credential.helper=` (an empty value clears the helpers),
  `core.untrackedCache=false`, `log.showSignature=false` (no `gpg.program`),
  `submodule.recurse=false`, `status.submoduleSummary=false`, `gc.auto=0`,
  `maintenance.auto=false`, `protocol.allow=never` and `protocol.<name>.allow=never` for git's
  transports (no fetch, so no `core.sshCommand`, remote helper or `uploadpack`),
  `safe.bareRepository=explicit` (a bare repository planted in the tree is not entered),
  `color.ui=never`, `core.quotepath=off`;
- reads the names of every configuration key first (`git config --list --name-only`, which
  runs nothing) and overrides each key that names a program per driver or per protocol:
  `filter.<driver>.clean|smudge|process` set empty (git then applies no filter) and
  `filter.<driver>.required=false`, `protocol.<name>.allow=never`. A key whose name cannot be
  written as `-c name=value` (a `=` or a line break in it) makes the call refuse
  (`GitRefused`) rather than run unprotected;
- adds per subcommand the flags that turn off the rest (`SUBCOMMAND_FLAGS`):
  `--no-ext-diff` (no `diff.external`, no `diff.<driver>.command`), `--no-textconv` (no
  `diff.<driver>.textconv`), `--no-show-signature`, `--ignore-submodules=all` (a submodule's
  git would read the submodule's own drivers, which were not listed).
  Aliases need nothing: git runs a built-in subcommand before any alias of its name, and
  only built-in subcommands are run here. An empty `diff.external` or textconv would be run
  as a command of that name, hence flags, not overrides, for those.

Limits: the key names are read just before the command; a driver defined in between (only
by something already running commands beside this one) is not overridden. Nothing here
reads a patch (`-p`), which is where textconv and external diffs act.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

FIXED_OVERRIDES: tuple[tuple[str, str], ...] = (
    ("core.fsmonitor", "false"),
    ("core.hooksPath", "/dev/null"),
    ("core.pager", "cat"),
    ("core.editor", ":"),
    ("core.askPass", ""),
    ("core.sshCommand", ""),
    ("credential.helper", ""),
    ("core.untrackedCache", "false"),
    ("log.showSignature", "false"),
    ("submodule.recurse", "false"),
    ("status.submoduleSummary", "false"),
    ("gc.auto", "0"),
    ("maintenance.auto", "false"),
    ("protocol.allow", "never"),
    *(
        (f"protocol.{name}.allow", "never")
        for name in ("file", "git", "ssh", "http", "https", "ext", "fd")
    ),
    ("safe.bareRepository", "explicit"),
    ("color.ui", "never"),
    ("core.quotepath", "off"),
)
"""Overrides every call carries, whatever the configuration holds."""

SUBCOMMAND_FLAGS: dict[str, tuple[str, ...]] = {
    "status": ("--ignore-submodules=all",),
    "diff-files": ("--no-ext-diff", "--no-textconv", "--ignore-submodules=all"),
    "log": ("--no-ext-diff", "--no-textconv", "--no-show-signature"),
}
"""Flags put right after the subcommand's name, for the subcommands that take them."""

GLOBAL_FLAGS = ("--no-pager", "--no-optional-locks", "--no-replace-objects")

_DROPPED = ("SSH_ASKPASS",)
_KEPT = ("GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM", "GIT_CONFIG_NOSYSTEM")
"""Which files hold the user's configuration: theirs to choose; what they set is overridden."""
_SET = {
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_OPTIONAL_LOCKS": "0",
    "GIT_NO_LAZY_FETCH": "1",
    "GIT_NO_REPLACE_OBJECTS": "1",
    "GIT_PAGER": "cat",
    "LC_ALL": "C",
}


class GitRefused(OSError):
    """The repository's configuration could not be read, or not safely overridden."""


def git_env() -> dict[str, str]:
    """The environment every git command of defect's runs in: the process's own without any
    `GIT_*` variable but `_KEPT`, plus the fixed settings above."""
    env = {
        k: v
        for k, v in os.environ.items()
        if (k in _KEPT or not k.startswith("GIT_")) and k not in _DROPPED
    }
    env.update(_SET)
    return env


def driver_overrides(config_names: Sequence[str]) -> list[tuple[str, str]]:
    """The overrides for the per-driver and per-protocol keys among `config_names` (as
    `git config --list --name-only` prints them: section and variable in lower case)."""
    out: list[tuple[str, str]] = []
    for name in dict.fromkeys(config_names):
        section, _, rest = name.partition(".")
        _, dot, variable = rest.rpartition(".")
        if not dot:
            continue
        if section == "filter" and variable in ("clean", "smudge", "process"):
            out.append((name, ""))
        elif section == "filter" and variable == "required":
            out.append((name, "false"))
        elif section == "protocol" and variable == "allow":
            out.append((name, "never"))
    for name, _ in out:
        if "=" in name or "\n" in name or "\r" in name:
            raise GitRefused(f"git configuration key {name!r} cannot be overridden")
    return out


def _overrides(pairs: Sequence[tuple[str, str]]) -> list[str]:
    return [arg for key, value in pairs for arg in ("-c", f"{key}={value}")]


def _argv(args: Sequence[str], extra: Sequence[tuple[str, str]]) -> list[str]:
    if not args:
        raise ValueError("a git subcommand is required")
    sub, *rest = args
    return [
        "git",
        *GLOBAL_FLAGS,
        *_overrides(FIXED_OVERRIDES),
        *_overrides(extra),
        sub,
        *SUBCOMMAND_FLAGS.get(sub, ()),
        *rest,
    ]


def _run(
    args: Sequence[str], extra: Sequence[tuple[str, str]], cwd: Path, timeout: float
) -> subprocess.CompletedProcess[bytes]:
    argv, sub = _argv(args, extra), args[0]
    if timeout <= 0:
        raise GitRefused(f"no time left for git {sub}")
    try:
        return subprocess.run(
            argv,
            cwd=cwd,
            env=git_env(),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise GitRefused(f"git {sub} timed out after {timeout:.1f} s") from exc


def run_git(cwd: Path, *args: str, timeout: float) -> subprocess.CompletedProcess[bytes]:
    """Run `git <args>` in `cwd` with everything above; `timeout` bounds both processes.

    Returns the completed process (its return code is the caller's to judge). Raises
    `GitRefused` (an `OSError`) when the configuration cannot be read or overridden, or the
    time ran out, and `OSError` when git cannot be started."""
    deadline = time.monotonic() + timeout
    listing = _run(("config", "--list", "--name-only", "-z"), (), cwd, timeout)
    if listing.returncode != 0:
        raise GitRefused(
            "git could not read its configuration: "
            + listing.stderr.decode(errors="replace").strip()
        )
    names = [n for n in os.fsdecode(listing.stdout).split("\0") if n]
    extra = driver_overrides(names)
    return _run(args, extra, cwd, deadline - time.monotonic())
