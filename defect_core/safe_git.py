"""Every `git` command defect runs itself, run so that the repository cannot run a program.

Owns `run_git`, the one way defect starts `git` of its own accord (the environment facts of
`prompt/environment.py`, the work-tree snapshots of `checkpoints/gitsnap.py`), the list of
what it neutralises, stated here once, and the cache of configuration key names that lets a
call start one git process. The model's own `bash` commands are not run here:
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
- knows the names of every configuration key (`git config --list --name-only`, which runs
  nothing) and overrides each key that names a program per driver or per protocol:
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

The listing is cached, so that a call costs one git process, not two (checkpoints run git
around every shell command). The names git prints depend only on the files it reads, so an
entry (per resolved directory and the variables that choose those files, `CACHE_ENTRIES` of
them, least recently used out) is reused only while every one of these files has the same
identity — absent, or device, inode, mode, owner, size, mtime and ctime (which no one can set
back, unlike mtime): the system file (`GIT_CONFIG_SYSTEM` or `/etc/gitconfig`), the user's
(`GIT_CONFIG_GLOBAL`, `$XDG_CONFIG_HOME/git/config`, `~/.config/git/config`, `~/.gitconfig`),
and, for every directory from the working directory up to the root, its `.git` and the
repository that names (a directory, or a `gitdir:` file for a linked work tree or a
submodule): `config`, `config.worktree`, `commondir` and the common directory's the same, plus
what makes git take it as a repository (`HEAD`, `objects`, `refs`), since git walks up past a
repository that stops being one. The listing runs with `--show-origin --show-scope`: a file it
shows git reading that is not in the key is added (the system file of a git built elsewhere),
unless it belongs to a repository the walk did not find (then nothing is cached). A listing is
never cached when it holds an `include.*` or `includeIf.*` key (the included files, and the
conditions, are not in the key), when a file of the key could not be examined, when the key
changed while git listed, or when a file of it changed less than `RACY_NS` ago (a timestamp is
coarse: two same-size writes within one tick look alike). An older git without
`--show-scope` is listed every time. A cache hit stats about two dozen paths.

Limits: the key names are known just before the command; a driver defined in between (only
by something already running commands beside this one) is not overridden. Nor, while an
entry lasts, is a driver written into a system file that this build of git keeps elsewhere
than `/etc/gitconfig` and that held no key when listed (only its owner, root, can write it).
The racy window takes file times from this machine's clock; a network file system whose
server runs more than `RACY_NS` behind narrows it.
Nothing here reads a patch (`-p`), which is where textconv and external diffs act.
"""

from __future__ import annotations

import os
import stat as stat_mod
import subprocess
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
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


# --- the listing's cache ----------------------------------------------------------------

LISTING = ("config", "--list", "--name-only", "-z", "--show-origin", "--show-scope")
"""The key names with the file each came from and its scope (git 2.26 or later)."""
PLAIN_LISTING = ("config", "--list", "--name-only", "-z")
"""The same without origins, for an older git: never cached."""
CACHE_ENTRIES = 16
"""Directories whose listing is kept (least recently used first out)."""
RACY_NS = 2_000_000_000
"""A file changed this recently (or in the future) keeps its listing out of the cache: a
timestamp is coarse (a clock tick, up to 2 s on some file systems), so a second change in the
same tick with the same size would otherwise look like no change."""
_ENV_KEYS = (*_KEPT, "HOME", "XDG_CONFIG_HOME", "PATH")
"""The variables that decide which configuration files (and which git) a listing reads."""

Ident = tuple[int, ...] | None
"""A path's identity for the key: None when absent."""


class _Unkeyable(Exception):
    """A file of the key could not be examined: the listing is not cached."""


def _ident(path: str, *, content: bool = True) -> Ident:
    """`path`'s identity, following links as git does: device, inode, mode and owner and,
    for a file's `content`, its size, mtime and ctime in ns (a directory's own times change
    with every entry made in it, and what git reads in one is keyed by name); None when
    absent. Raises `_Unkeyable` for what cannot be examined or identified."""
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except (OSError, ValueError) as exc:
        raise _Unkeyable(path) from exc
    if not content or stat_mod.S_ISDIR(st.st_mode) or path == os.devnull:
        return (st.st_dev, st.st_ino, st.st_mode, st.st_uid)
    if not stat_mod.S_ISREG(st.st_mode):
        raise _Unkeyable(path)  # a pipe or a device: what it yields has no identity
    return (
        st.st_dev,
        st.st_ino,
        st.st_mode,
        st.st_uid,
        st.st_size,
        st.st_mtime_ns,
        st.st_ctime_ns,
    )


def _pointer(path: str, base: str) -> str | None:
    """The directory a `.git` file (`gitdir: X`) or a `commondir` file names, from `base`."""
    try:
        with open(path, "rb") as f:
            raw = f.read(65_537)
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return None
    except OSError as exc:
        raise _Unkeyable(path) from exc
    if len(raw) > 65_536:
        raise _Unkeyable(path)
    text = os.fsdecode(raw).strip()
    if text.startswith("gitdir:"):
        text = text[len("gitdir:") :].strip()
    return os.path.normpath(os.path.join(base, text)) if text else None


@dataclass
class _Scan:
    """The identity of every file a listing in one directory depends on."""

    key: list[tuple[str, Ident]] = field(default_factory=list)
    user_files: set[str] = field(default_factory=set)
    repo_configs: list[str] = field(default_factory=list)
    walked: list[str] = field(default_factory=list)
    newest_ns: int = 0

    def add(self, path: str, *, content: bool = True) -> Ident:
        ident = _ident(path, content=content)
        self.key.append((path, ident))
        if ident is not None and len(ident) > 4:
            self.newest_ns = max(self.newest_ns, ident[5], ident[6])
        return ident

    def repository(self, gitdir: str, seen: set[str]) -> None:
        """A repository git may pick: its configuration files and what makes it valid to git
        (`HEAD`, `objects`, `refs`, here or in its common directory)."""
        for directory in (gitdir, _pointer(os.path.join(gitdir, "commondir"), gitdir)):
            if directory is None or directory in seen:
                continue
            seen.add(directory)
            self.add(directory, content=False)
            for name in ("HEAD", "commondir", "config", "config.worktree"):
                self.add(os.path.join(directory, name))
            for name in ("objects", "refs"):
                self.add(os.path.join(directory, name), content=False)
            self.repo_configs += [os.path.join(directory, n) for n in ("config", "config.worktree")]


def _user_files(env: dict[str, str | None]) -> list[str]:
    """Every file git may read as the system's or the user's configuration (a superset)."""
    home, xdg = env["HOME"], env["XDG_CONFIG_HOME"]
    files = [env["GIT_CONFIG_SYSTEM"] or "/etc/gitconfig"]
    if env["GIT_CONFIG_GLOBAL"]:
        files.append(env["GIT_CONFIG_GLOBAL"])
    if xdg:
        files.append(os.path.join(xdg, "git", "config"))
    if home:
        files += [os.path.join(home, ".config", "git", "config"), os.path.join(home, ".gitconfig")]
    if not all(os.path.isabs(f) for f in files):
        raise _Unkeyable("a relative configuration path")  # git's own cwd would resolve it
    return files


def _scan(real_cwd: str, env: dict[str, str | None], learned: Sequence[str]) -> _Scan:
    """The key of a listing run in `real_cwd`: the user's files, then, for every directory
    from `real_cwd` up to the root, its `.git` and the repository that names; then the files
    an earlier listing showed git reading beyond those (`learned`)."""
    scan = _Scan()
    for path in _user_files(env):
        scan.add(path)
        scan.user_files.add(path)
    seen: set[str] = set()
    directory = real_cwd
    while True:
        scan.walked.append(directory)
        scan.add(directory, content=False)  # its owner: git's safe.directory check
        dotgit = os.path.join(directory, ".git")
        ident = scan.add(dotgit)
        if ident is not None and stat_mod.S_ISDIR(ident[2]):
            scan.repository(dotgit, seen)
        elif ident is not None:
            gitdir = _pointer(dotgit, directory)
            if gitdir is not None:
                scan.repository(gitdir, seen)
        parent = os.path.dirname(directory)
        if parent == directory:
            break
        directory = parent
    for path in learned:
        scan.add(path)
    return scan


def _learned(records: Sequence[tuple[str, str, str]], scan: _Scan) -> tuple[str, ...] | None:
    """The files beyond `scan`'s that the listing shows git reading (a system file where this
    build of git keeps it), or None when the listing must not be cached: an include (its files
    are not in the key), or a repository's file `scan` did not foresee (git found another
    repository than the walk did)."""
    learned: list[str] = []
    repo_real: set[str] | None = None
    for scope, origin, name in records:
        if name.startswith(("include.", "includeif.")):
            return None
        if scope == "command":
            continue
        if not origin.startswith("file:"):
            return None
        path = origin[len("file:") :]
        if scope in ("system", "global") and os.path.isabs(path):
            if path not in scan.user_files and path not in learned:
                learned.append(path)
            continue
        if scope not in ("local", "worktree"):
            return None
        if repo_real is None:
            repo_real = {os.path.realpath(p) for p in scan.repo_configs}
        bases = [""] if os.path.isabs(path) else scan.walked
        if not any(os.path.realpath(os.path.join(b, path)) in repo_real for b in bases):
            return None
    return tuple(learned)


@dataclass(frozen=True)
class _Entry:
    key: list[tuple[str, Ident]]
    learned: tuple[str, ...]
    overrides: tuple[tuple[str, str], ...]


_cache: OrderedDict[tuple[str, tuple[str | None, ...]], _Entry] = OrderedDict()
_cache_lock = threading.Lock()
_origins_unsupported = False


def clear_listing_cache() -> None:
    """Forget every cached listing."""
    with _cache_lock:
        _cache.clear()


def _records(stdout: bytes, *, with_origins: bool) -> list[tuple[str, str, str]]:
    fields = os.fsdecode(stdout).split("\0")
    if fields and fields[-1] == "":
        fields.pop()
    if not with_origins:
        return [("", "", name) for name in fields if name]
    if len(fields) % 3:
        raise GitRefused("git printed its configuration in an unexpected form")
    return [(fields[i], fields[i + 1], fields[i + 2]) for i in range(0, len(fields), 3)]


def _list(cwd: Path, timeout: float) -> tuple[list[tuple[str, str, str]], bool]:
    """The listing's records, and whether they carry origins."""
    global _origins_unsupported
    with_origins = not _origins_unsupported
    done = _run(LISTING if with_origins else PLAIN_LISTING, (), cwd, timeout)
    if done.returncode != 0 and with_origins and b"show-scope" in done.stderr:
        _origins_unsupported = with_origins = False  # git before 2.26
        done = _run(PLAIN_LISTING, (), cwd, timeout)
    if done.returncode != 0:
        raise GitRefused(
            "git could not read its configuration: " + done.stderr.decode(errors="replace").strip()
        )
    return _records(done.stdout, with_origins=with_origins), with_origins


def config_overrides(cwd: Path, timeout: float) -> list[tuple[str, str]]:
    """The per-driver and per-protocol overrides for a git command run in `cwd`: from the
    cache when no file of the entry's key changed, else from a listing (cached when safe)."""
    env = {name: os.environ.get(name) for name in _ENV_KEYS}
    try:
        real_cwd = os.path.realpath(cwd)
    except (OSError, ValueError):
        real_cwd = ""
    context = (real_cwd, tuple(env.values()))
    with _cache_lock:
        entry = _cache.get(context)
        if entry is not None:
            _cache.move_to_end(context)
    if entry is not None and real_cwd:
        try:
            if _scan(real_cwd, env, entry.learned).key == entry.key:
                return list(entry.overrides)
        except _Unkeyable:
            pass
    started = time.time_ns()
    try:
        before = _scan(real_cwd, env, ()) if real_cwd else None
    except _Unkeyable:
        before = None
    records, with_origins = _list(cwd, timeout)
    overrides = driver_overrides([name for _, _, name in records])
    if before is None or not with_origins:
        return overrides
    learned = _learned(records, before)
    if learned is None:
        return overrides
    try:
        after = _scan(real_cwd, env, learned)
    except _Unkeyable:
        return overrides
    if after.key[: len(before.key)] != before.key or after.newest_ns >= started - RACY_NS:
        return overrides
    with _cache_lock:
        _cache[context] = _Entry(after.key, learned, tuple(overrides))
        _cache.move_to_end(context)
        while len(_cache) > CACHE_ENTRIES:
            _cache.popitem(last=False)
    return overrides


def run_git(cwd: Path, *args: str, timeout: float) -> subprocess.CompletedProcess[bytes]:
    """Run `git <args>` in `cwd` with everything above; `timeout` bounds the whole call (the
    listing too, when it runs).

    Returns the completed process (its return code is the caller's to judge). Raises
    `GitRefused` (an `OSError`) when the configuration cannot be read or overridden, or the
    time ran out, and `OSError` when git cannot be started."""
    deadline = time.monotonic() + timeout
    extra = config_overrides(cwd, timeout)
    return _run(args, extra, cwd, deadline - time.monotonic())
