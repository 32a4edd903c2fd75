"""Protected paths: files that configure code execution, whose changes are asked every time.

Owns the list (`PROTECTED`, data: each entry a run of path components and why it is
protected), the path matcher (`protected_path`), and the readers that find the paths a call
names: a file tool's path, every string argument of another tool (`protected_in_values`),
and a shell command's words (`protected_in_command`, in `tools/command_paths.py`).

Invariant: a path is judged after the normalisation the file tools apply (`..` and `./`
collapsed, relative to the directory it is resolved from, symlinks followed: both the spelling
and the real path are judged, and either being protected is enough) and case-insensitively on
every system, since a case-insensitive file system makes `.GIT/config` git's own config. An
entry matches anywhere in the path below the workspace (or anywhere in an absolute path
outside it), so a nested repository's or submodule's `.git` is protected too, and so is a
parent directory whose renaming would move a protected path (`.github` for
`.github/workflows`).

Why: the policy (`defect_core/policy.py`) lets no "always" answer and no mode but `yolo` cover
a protected path. An "always allow" given for `write_file NOTES.md` used to let the model
write `.git/config` (`core.fsmonitor` runs a program on the next `git status`), git hooks,
defect's own configuration (hooks, MCP servers), editor tasks, CI definitions and shell
start-up files, unasked.

Besides the list: the directory git's `core.hooksPath` names in the workspace repository's
`.git/config` (read here without running git, at most `MAX_CONFIG_BYTES`).
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from defect_core.config.files import repo_root
from defect_core.tools.shown import visible

MAX_CONFIG_BYTES = 256 * 1024
"""A larger `.git/config` is not read for `core.hooksPath` (the listed hook directories and
`.git/` itself stay protected)."""

MAX_PATH_CHARS = 4096
"""A longer string is not a path (PATH_MAX): only its path-like pieces are judged."""


@dataclass(frozen=True, slots=True)
class Protected:
    """A run of path components (lower case) and why a change to it is asked every time."""

    parts: tuple[str, ...]
    why: str


def _entries(why: str, *names: str) -> tuple[Protected, ...]:
    return tuple(Protected(tuple(n.casefold().split("/")), why) for n in names)


_GIT = "configures git, whose settings (core.fsmonitor, core.hooksPath) and hooks run code"
_HOOKS = "holds git hooks, which run on commit, checkout or push"
_DEFECT = "configures defect: its hooks, commands and MCP servers run code"
_EDITOR = "configures the editor: its tasks, launch and settings files run code"
_ENV = "is loaded by the shell or the editor on entering the directory, and runs code"
_CI = "defines CI jobs, which run code with the repository's secrets"
_SHELL = "is a shell or tool start-up file, run by every new shell or session"

PROTECTED: tuple[Protected, ...] = (
    *_entries(_GIT, ".git", ".gitconfig", ".config/git"),
    *_entries(_HOOKS, ".husky", ".githooks", ".pre-commit-config.yaml", "lefthook.yml",
              ".lefthook.yml"),
    *_entries(_DEFECT, ".defect", ".mcp.json", ".config/defect"),
    *_entries(_EDITOR, ".vscode", ".idea", ".zed", ".devcontainer", ".nvim.lua", ".exrc"),
    *_entries(_ENV, ".envrc"),
    *_entries(_CI, ".github/workflows", ".github/actions", ".gitlab-ci.yml", ".gitlab",
              ".circleci", ".travis.yml", ".buildkite", "azure-pipelines.yml",
              "bitbucket-pipelines.yml", ".drone.yml", ".woodpecker", ".woodpecker.yml",
              "jenkinsfile"),
    *_entries(_SHELL, ".bashrc", ".bash_profile", ".bash_login", ".bash_logout", ".profile",
              ".zshrc", ".zshenv", ".zprofile", ".zlogin", ".zlogout", ".config/fish",
              ".inputrc", ".ssh"),
)  # fmt: skip
"""What is protected, matched component by component anywhere below the workspace.

`.env` is not: it holds values the project's own code reads, and running that code is
already the user's choice; `.envrc` (direnv) runs as the user enters the directory."""

_NAMES = frozenset(p.parts[0] for p in PROTECTED)
"""First components: what a shell word or a glob must mention to touch a protected path."""


def _parts(path: str) -> list[str]:
    return [p.casefold() for p in path.split(os.sep) if p and p != "."]


def _match(parts: list[str]) -> Protected | None:
    """The entry a path (its components, lower case) falls under, or is a parent of."""
    for entry in PROTECTED:
        n = len(entry.parts)
        for i in range(len(parts)):
            window = tuple(parts[i : i + n])
            if window == entry.parts[: len(window)]:
                return entry
    return None


def _inside(path: str, root: str) -> str | None:
    """`path` relative to `root`, or None when it is not beneath it."""
    if path == root:
        return ""
    prefix = root.rstrip(os.sep) + os.sep
    return path[len(prefix) :] if path.startswith(prefix) else None


def _judged(path: str, root: str, real_root: str) -> list[str]:
    """The components of `path` that are matched: those below the workspace, or all of an
    absolute path outside it (whose own location is then no excuse)."""
    for base in (root, real_root):
        rel = _inside(path, base)
        if rel is not None:
            return _parts(rel)
    return _parts(path)


def protected_path(raw: str, base: Path, root: Path) -> str | None:
    """Why a change to `raw` (resolved from `base`, in the workspace `root`) is asked every
    time, or None. The reason names the path: "`.git/config` configures git, …"."""
    if not raw or "\x00" in raw:
        return None
    root_s = os.path.abspath(root)
    real_root = os.path.realpath(root_s)
    lexical = os.path.normpath(os.path.join(os.path.abspath(base), os.path.expanduser(raw)))
    real = os.path.realpath(lexical)
    for path in (lexical, real):
        entry = _match(_judged(path, root_s, real_root))
        if entry is not None:
            return _reason(path, root_s, real_root, entry.why)
    hooks = hooks_path(real_root)
    if hooks is not None and _inside(real, hooks) is not None:
        return _reason(lexical, root_s, real_root, "is in git's hooks directory (core.hooksPath)")
    return None


def _reason(path: str, root: str, real_root: str, why: str) -> str:
    shown = path
    for base in (root, real_root):
        rel = _inside(path, base)
        if rel is not None:
            shown = rel or "."
            break
    return f"`{visible(shown)}` {why}: asked every time"


def protected_in_values(values: Any, base: Path, root: Path) -> str | None:
    """Why a call whose arguments are `values` is asked every time: the first string in
    them (at any depth, keys too) that names a protected path, read as a path or split into
    path-like fragments. For tools whose arguments are not known to be paths (MCP tools)."""
    for text in _strings(values):
        for fragment in fragments(text):
            reason = protected_path(fragment, base, root)
            if reason is not None:
                return reason
    return None


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _strings(key)
            yield from _strings(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _strings(item)


_FRAGMENT = re.compile(r"[^\s\"'`=:,;()<>|&{}\[\]$\\]+")


def fragments(text: str) -> Iterable[str]:
    """`text` itself and the path-like pieces in it (split at quotes, `=`, `:`, `,`, shell
    punctuation, whitespace; a short option's attached value), those that mention the
    first component of a protected name."""
    if len(text) <= MAX_PATH_CHARS:
        yield text
    for piece in _FRAGMENT.findall(text):
        if piece != text and _mentions(piece):
            yield piece
            if _SHORT_OPTION.match(piece):
                yield piece[2:]  # `-o.git/config`: the value of a short option


_SHORT_OPTION = re.compile(r"^-[A-Za-z0-9].")


def _mentions(piece: str) -> bool:
    lowered = piece.casefold()
    return any(name in lowered for name in _NAMES) or "hook" in lowered


def glob_matches_protected(word: str) -> bool:
    """A shell glob one of whose components could match a protected name (`.gi?/config`,
    `.[g]it`, `.*`)."""

    for part in word.casefold().split("/"):
        if not part.startswith(".") or not any(c in part for c in "*?["):
            continue
        if any(fnmatch.fnmatchcase(n, part) for n in _DOTTED):
            return True
    return False


_DOTTED = frozenset(n for n in _NAMES if n.startswith("."))
"""The names a glob is matched against: only those starting with a dot, which a shell glob
matches only when it starts with a dot too (`*` is not `.git`), so `ls *` and `*.yml` are
not asked about while `.g*` and `.[g]it` are."""


def hooks_path(real_root: str) -> str | None:
    """The real path of the directory `core.hooksPath` names in the repository holding the
    workspace, if its `.git/config` sets it."""
    repo = repo_root(Path(real_root))
    config = repo / ".git" / "config"
    try:
        st = config.stat()
    except OSError:
        return None
    return _hooks_path(str(config), str(repo), st.st_mtime_ns, st.st_size)


@lru_cache(maxsize=16)
def _hooks_path(config: str, repo: str, _mtime: int, size: int) -> str | None:
    if size > MAX_CONFIG_BYTES:
        return None
    try:
        with open(config, encoding="utf-8", errors="replace") as f:
            text = f.read(MAX_CONFIG_BYTES)
    except OSError:
        return None
    value = _core_hooks_path(text)
    if not value:
        return None
    path = os.path.join(repo, os.path.expanduser(value))
    return os.path.realpath(path)


_SECTION = re.compile(r"^\s*\[\s*([A-Za-z0-9.-]+)(?:\s+\"[^\"]*\")?\s*\]\s*(.*)$")
_ENTRY = re.compile(r"^\s*([A-Za-z][A-Za-z0-9-]*)\s*(?:=\s*(.*?))?\s*$")


def _core_hooks_path(text: str) -> str | None:
    """The last `hooksPath` of a `[core]` section (git's own rule: the last one wins)."""
    section = ""
    found: str | None = None
    for line in text.splitlines():
        header = _SECTION.match(line)
        if header:
            section = header.group(1).casefold()
            line = header.group(2)
            if not line.strip():
                continue
        entry = _ENTRY.match(line.split("#", 1)[0].split(";", 1)[0])
        if section == "core" and entry and entry.group(1).casefold() == "hookspath":
            value = (entry.group(2) or "").strip()
            if len(value) >= 2 and value[0] == value[-1] == '"':
                value = value[1:-1]
            found = value
    return found
