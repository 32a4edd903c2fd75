"""Which files a search considers: the walk of the project tree and the `.gitignore` rules.

Owns `walk_files`, the gitignore matcher (`parse_ignore`, `IgnoreRules`) and the glob
translation both it and the file-name filter use (`translate_glob`).

Invariants:
- What git would ignore is not walked: `.gitignore` files at every level (last matching
  pattern wins, `!` re-includes, trailing `/` means directories only, a `/` at the start or
  in the middle anchors a pattern to its file's directory, `**` spans directories), plus
  `.git/info/exclude`; a directory that is ignored is not entered, as in git. `.git` itself
  is never walked. Rules apply whether or not the tree is a git repository.
- Symbolic links are not followed (neither files nor directories), so a search cannot leave
  the workspace through a link nor loop.
- The order is stable: depth first, entries by name, a directory's files before its
  subdirectories.

Why not `git ls-files` or `rg --files`: the search must work without `git` or `rg` on the
PATH, and in trees that are not repositories.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass

_SKIP_DIRS = frozenset({".git"})


def translate_glob(pattern: str) -> str:
    """A regex (for `fullmatch`) equivalent to a gitignore/glob pattern over `/` paths.

    `*` and `?` stay within a path segment, `[...]` is a character class (`!` or `^` negates),
    a leading `**/` matches any directories, a trailing `/**` everything inside, `/**/` zero or
    more directories; a backslash escapes the next character.
    """
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "*":
            if pattern.startswith("**", i) and (i == 0 or pattern[i - 1] == "/"):
                j = i + 2
                if j == n:
                    out.append(".*")
                    i = j
                    continue
                if pattern[j] == "/":
                    out.append("(?:.*/)?")
                    i = j + 1
                    continue
            while i + 1 < n and pattern[i + 1] == "*":
                i += 1
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            j = i + 1
            negate = j < n and pattern[j] in "!^"
            j += negate
            end = pattern.find("]", j + 1 if j < n and pattern[j] == "]" else j)
            if end < 0:
                out.append(re.escape(c))
            else:
                body = "".join("\\" + ch if ch in "\\[]^" else ch for ch in pattern[j:end])
                out.append(("[^/" if negate else "[") + body + "]")
                i = end
        elif c == "\\" and i + 1 < n:
            i += 1
            out.append(re.escape(pattern[i]))
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


@dataclass(frozen=True, slots=True)
class _Run:
    """Consecutive patterns of one ignore file with the same sign, compiled together."""

    negate: bool
    by_name: re.Pattern[str] | None
    by_name_dirs: re.Pattern[str] | None
    by_path: re.Pattern[str] | None
    by_path_dirs: re.Pattern[str] | None

    def matches(self, sub: str, name: str, is_dir: bool) -> bool:
        if self.by_name is not None and self.by_name.fullmatch(name):
            return True
        if self.by_path is not None and self.by_path.fullmatch(sub):
            return True
        if not is_dir:
            return False
        if self.by_name_dirs is not None and self.by_name_dirs.fullmatch(name):
            return True
        return self.by_path_dirs is not None and self.by_path_dirs.fullmatch(sub) is not None


def compile_alternatives(sources: list[str]) -> re.Pattern[str] | None:
    return re.compile("|".join(f"(?:{s})" for s in sources)) if sources else None


def parse_ignore(text: str) -> list[_Run]:
    """The runs of one `.gitignore` (or `info/exclude`) file, in file order."""
    runs: list[_Run] = []
    current: list[tuple[str, bool, bool]] = []  # (regex, by_path, dir_only)
    sign = False

    def flush() -> None:
        if current:
            runs.append(
                _Run(
                    sign,
                    compile_alternatives([r for r, p, d in current if not p and not d]),
                    compile_alternatives([r for r, p, d in current if not p and d]),
                    compile_alternatives([r for r, p, d in current if p and not d]),
                    compile_alternatives([r for r, p, d in current if p and d]),
                )
            )
            current.clear()

    for raw in text.splitlines():
        line = raw
        if not line or line.startswith("#"):
            continue
        while line.endswith(" ") and not line.endswith("\\ "):
            line = line[:-1]
        negate = line.startswith("!")
        if negate:
            line = line[1:]
        dir_only = line.endswith("/")
        line = line.rstrip("/")
        if not line:
            continue
        by_path = "/" in line
        line = line.lstrip("/")
        if negate != sign:
            flush()
            sign = negate
        current.append((translate_glob(line), by_path, dir_only))
    flush()
    return runs


@dataclass(frozen=True, slots=True)
class IgnoreRules:
    """The ignore files in force for one directory, outermost first: (base, runs) pairs.

    `base` is the directory of the file, relative to the walk's root, with a trailing `/`
    (or `""` for the root); patterns match paths relative to it.
    """

    layers: tuple[tuple[str, tuple[_Run, ...]], ...] = ()

    def extended(self, base: str, runs: list[_Run]) -> IgnoreRules:
        return IgnoreRules((*self.layers, (base, tuple(runs)))) if runs else self

    def ignored(self, rel: str, name: str, is_dir: bool) -> bool:
        """Whether the entry at `rel` (relative to the walk's root) is ignored."""
        for base, runs in reversed(self.layers):
            sub = rel[len(base) :]
            for run in reversed(runs):
                if run.matches(sub, name, is_dir):
                    return not run.negate
        return False


def _read_ignore(path: str) -> list[_Run]:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return parse_ignore(f.read())
    except OSError:
        return []


def _repo_root(start: str) -> str | None:
    d = start
    while True:
        if os.path.exists(os.path.join(d, ".git")):
            return d
        parent = os.path.dirname(d)
        if parent == d:
            return None
        d = parent


def ignore_top(root: str, workspace: str) -> str:
    """The directory whose ignore files are the first `walk_files(root, ...)` reads: the
    repository's root, else the workspace (when `root` is inside it), else `root`."""
    top = _repo_root(root)
    if top is None:
        top = workspace if root == workspace or root.startswith(workspace + os.sep) else root
    return top


def _inherited_rules(root: str, workspace: str) -> tuple[IgnoreRules, str]:
    """Rules from the ignore files above `root` (up to the repository or workspace top),
    and `root`'s own path relative to that top, with a trailing `/` (or `""`)."""
    top = ignore_top(root, workspace)
    rules = IgnoreRules().extended("", _read_ignore(os.path.join(top, ".git", "info", "exclude")))
    if root == top:
        return rules, ""
    parts = os.path.relpath(root, top).split(os.sep)
    d, rel = top, ""
    for part in parts:
        rules = rules.extended(rel, _read_ignore(os.path.join(d, ".gitignore")))
        d = os.path.join(d, part)
        rel += part + "/"
    return rules, rel


def walk_order(rel: str) -> str:
    """The sort key that puts paths relative to the root in `walk_files` order (depth first,
    names in order, a directory's files before its subdirectories).

    A string, compared as strings are: each directory is "\\x02" + name + "\\x00", the file
    "\\x01" + name. At the first component two paths differ in, a file ("\\x01") sorts before
    a directory ("\\x02"), and names compare as names, the "\\x00" ending a directory's
    name before any character of a longer one (no name holds a NUL). One string per path,
    not a tuple of tuples: the search sorts and compares hundreds of thousands of them."""
    head, _, name = rel.rpartition("/")
    if not head:
        return "\x01" + name
    return "".join(f"\x02{part}\x00" for part in head.split("/")) + "\x01" + name


def walk_files(
    root: str, workspace: str, stop: threading.Event | None = None
) -> Iterator[tuple[str, str]]:
    """(absolute path, path relative to `root`) of every file a search should consider.

    Depth first, entries in name order (files of a directory before its subdirectories).
    """
    rules, prefix = _inherited_rules(root, workspace)
    stack: list[tuple[str, str, IgnoreRules]] = [(root, "", rules)]
    while stack:
        if stop is not None and stop.is_set():
            return
        directory, rel, rules = stack.pop()
        try:
            with os.scandir(directory) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError:
            continue
        if any(e.name == ".gitignore" for e in entries):
            rules = rules.extended(
                prefix + rel, _read_ignore(os.path.join(directory, ".gitignore"))
            )
        subdirs: list[tuple[str, str, IgnoreRules]] = []
        for entry in entries:
            name = entry.name
            if name in _SKIP_DIRS:
                continue
            try:
                if entry.is_symlink():
                    continue
                is_dir = entry.is_dir(follow_symlinks=False)
            except OSError:
                continue
            entry_rel = rel + name
            if rules.ignored(prefix + entry_rel, name, is_dir):
                continue
            if is_dir:
                subdirs.append((entry.path, entry_rel + "/", rules))
            elif entry.is_file(follow_symlinks=False):
                yield entry.path, entry_rel
        stack.extend(reversed(subdirs))
