"""The `search` tool: a regex over file contents and/or a glob over file names, gitignore-aware.

Owns the walk of the project tree (`walk_files`), the `.gitignore` matcher (`IgnoreRules`),
glob matching, the content scan, and the caps on what the model gets back.

Invariants:
- What git would ignore is not searched: `.gitignore` files at every level (last matching
  pattern wins, `!` re-includes, trailing `/` means directories only, a `/` at the start or
  in the middle anchors a pattern to its file's directory, `**` spans directories), plus
  `.git/info/exclude`; a directory that is ignored is not entered, as in git. `.git` itself
  is never searched. Rules apply whether or not the tree is a git repository.
- Symbolic links are not followed (neither files nor directories), so a search cannot leave
  the workspace through a link nor loop; binary files (a NUL byte in the first 8 KiB), files
  that are not UTF-8 and files over `MAX_FILE_BYTES` are skipped and counted.
- Results are capped (`max_results`, line text `MAX_LINE_CHARS`) and a marker says so; paths
  are relative to the project root, ready for `read_file`.
- Matching takes time linear in the file's size, whatever the pattern: the regex engine is
  RE2 (`google-re2`), not Python's backtracking `re`, where a pattern such as `(a+)+$` over a
  line of `a`s runs for ages holding the GIL — freezing every session of the process, with
  no way to cancel it. With RE2, each file is one bounded step (files over
  `MAX_FILE_BYTES` are skipped), and the scan checks for a cancel or the deadline between
  files. RE2 has no lookaround and no backreferences: such a pattern is a clear tool error.

Why it reads the disk directly rather than through `ctx.fs`: a search touches thousands of
files and is read-only; asking the editor for each one (`fs/read_text_file`) would be slow by
orders of magnitude. The editor and the agent share the machine, so what the search sees is
the saved state of the files — unsaved buffer changes are seen by `read_file`, not here.
It must work without `rg` or `git` on the PATH, so it uses neither.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
from pydantic import Field

from defect_core.events import ToolDisplay, ToolKind
from defect_core.tools.base import (
    Safety,
    ToolCallView,
    ToolContext,
    ToolError,
    ToolOutput,
    input_schema,
)
from defect_core.tools.workspace import ToolArgs, display_path, parse_args, resolve_path

DEFAULT_MAX_RESULTS = 200
MAX_RESULTS = 2000
MAX_LINE_CHARS = 300
MAX_FILE_BYTES = 2 * 1024 * 1024
SEARCH_DEADLINE = 30.0
"""Seconds after which a search stops and reports what it found so far."""
_SNIFF = 8192
_SKIP_DIRS = frozenset({".git"})


# --- gitignore --------------------------------------------------------------------------------


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


def _compile(sources: list[str]) -> re.Pattern[str] | None:
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
                    _compile([r for r, p, d in current if not p and not d]),
                    _compile([r for r, p, d in current if not p and d]),
                    _compile([r for r, p, d in current if p and not d]),
                    _compile([r for r, p, d in current if p and d]),
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


def _inherited_rules(root: str, workspace: str) -> tuple[IgnoreRules, str]:
    """Rules from the ignore files above `root` (up to the repository or workspace top),
    and `root`'s own path relative to that top, with a trailing `/` (or `""`)."""
    top = _repo_root(root)
    if top is None:
        top = workspace if root == workspace or root.startswith(workspace + os.sep) else root
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


# --- globs ------------------------------------------------------------------------------------


def _expand_braces(pattern: str) -> list[str]:
    """`*.{ts,tsx}` → [`*.ts`, `*.tsx`] (nested braces too)."""
    m = re.search(r"\{([^{}]*)\}", pattern)
    if m is None:
        return [pattern]
    out: list[str] = []
    for alt in m.group(1).split(","):
        out.extend(_expand_braces(pattern[: m.start()] + alt + pattern[m.end() :]))
    return out


@dataclass(frozen=True, slots=True)
class GlobFilter:
    """A file-name glob: on the base name when it has no `/`, else on the relative path."""

    by_name: re.Pattern[str] | None
    by_path: re.Pattern[str] | None

    @classmethod
    def parse(cls, glob: str) -> GlobFilter:
        names: list[str] = []
        paths: list[str] = []
        for alt in _expand_braces(glob):
            alt = alt.removeprefix("./")
            (paths if "/" in alt.rstrip("/") else names).append(translate_glob(alt.strip("/")))
        return cls(_compile(names), _compile(paths))

    def matches(self, rel: str, shown: str) -> bool:
        """`rel` is relative to the search root, `shown` to the project: a path glob may
        be written either way."""
        if self.by_name is not None and self.by_name.fullmatch(rel.rsplit("/", 1)[-1]):
            return True
        if self.by_path is None:
            return False
        return self.by_path.fullmatch(rel) is not None or self.by_path.fullmatch(shown) is not None


# --- the scan ---------------------------------------------------------------------------------


@dataclass
class ScanResult:
    lines: list[str] = field(default_factory=list)
    """What the model reads: `path:line: text`, or a path per file for a glob-only search."""
    files_matched: int = 0
    matches: int = 0
    capped: bool = False
    binary: int = 0
    large: int = 0
    stopped: bool = False


Regex = Any
"""A compiled RE2 pattern over UTF-8 bytes (`compile_pattern`); the binding is untyped."""


def compile_pattern(pattern: str, case_insensitive: bool = False) -> Regex:
    """RE2 over UTF-8 bytes, `^`/`$` at line boundaries. `ToolError` says what is wrong."""
    import re2  # on the first search, not on the session/new path

    options = re2.Options()
    options.log_errors = False  # the error reaches the model; no stray line on stderr
    options.case_sensitive = not case_insensitive
    try:
        return re2.compile(b"(?m)" + pattern.encode("utf-8", "surrogatepass"), options)
    except (re2.error, UnicodeError) as exc:
        detail = exc.args[0] if exc.args else exc
        if isinstance(detail, bytes):
            detail = detail.decode("utf-8", "replace")
        raise ToolError(
            f"invalid regular expression {pattern!r}: {detail} (the syntax is RE2: like "
            "Python's, without lookaround or backreferences)"
        ) from None


def scan(
    files: Iterator[tuple[str, str]],
    shown_prefix: str,
    regex: Regex | None,
    glob: GlobFilter | None,
    max_results: int,
    stop: threading.Event,
    deadline: float,
) -> ScanResult:
    """Search `files`; stops at `max_results` lines, at `stop`, or at `deadline`."""
    result = ScanResult()
    checked = 0
    for full, rel in files:
        checked += 1
        if checked % 256 == 0 and (stop.is_set() or time.monotonic() > deadline):
            result.stopped = True
            break
        shown = shown_prefix + rel
        if glob is not None and not glob.matches(rel, shown):
            continue
        if regex is None:
            # Listing names is cheap: keep counting past the cap so the total is known.
            result.files_matched += 1
            if len(result.lines) < max_results:
                result.lines.append(shown)
            else:
                result.capped = True
            continue
        text = _text_of(full, result)
        if text is None:
            continue
        if not _grep(text, regex, shown, result, max_results):
            break
    return result


def _text_of(full: str, result: ScanResult) -> bytes | None:
    # os.read sized by fstat: a buffered `read(MAX_FILE_BYTES)` allocates the whole maximum
    # for every file, which made a 20k-file scan four times slower.
    try:
        fd = os.open(full, os.O_RDONLY)
        try:
            size = os.fstat(fd).st_size
            if size > MAX_FILE_BYTES:
                result.large += 1
                return None
            data = os.read(fd, size + 1)
        finally:
            os.close(fd)
    except OSError:
        return None
    if b"\x00" in data[:_SNIFF]:
        result.binary += 1
        return None
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        result.binary += 1
        return None
    return data


def _grep(text: bytes, regex: Regex, shown: str, result: ScanResult, max_results: int) -> bool:
    """Add the matching lines of one file; False once the cap is reached."""
    if regex.search(text) is None:  # the common case, in one call
        return True
    found = False
    line_no = 1
    counted_to = 0
    next_line_start = -1
    for m in regex.finditer(text):
        start = m.start()
        if start < next_line_start:
            continue  # another match on a line already reported
        if len(result.lines) >= max_results:
            result.capped = True
            return False
        line_no += text.count(b"\n", counted_to, start)
        counted_to = start
        line_start = text.rfind(b"\n", 0, start) + 1
        end = text.find(b"\n", start)
        next_line_start = len(text) + 1 if end < 0 else end + 1
        line = text[line_start : None if end < 0 else end].rstrip(b"\r").decode("utf-8")
        if len(line) > MAX_LINE_CHARS:
            line = line[:MAX_LINE_CHARS] + "…"
        result.lines.append(f"{shown}:{line_no}: {line}")
        result.matches += 1
        found = True
    if found:
        result.files_matched += 1
    return True


# --- the tool ---------------------------------------------------------------------------------


class SearchArgs(ToolArgs):
    pattern: str | None = Field(default=None, description="Regex to find in file contents.")
    glob: str | None = Field(default=None, description="File name or path glob.")
    path: str | None = Field(
        default=None, description="Directory or file to search, relative to the project root."
    )
    case_insensitive: bool = False
    max_results: int = Field(default=DEFAULT_MAX_RESULTS, ge=1, le=MAX_RESULTS)


class SearchTool:
    args_model = SearchArgs
    """What `run` validates its arguments with; the input schema is derived from it."""

    @property
    def name(self) -> str:
        return "search"

    @property
    def description(self) -> str:
        return (
            "Search the project: `pattern` is a regular expression (RE2 syntax: like Python's, "
            "without lookaround or backreferences; `\\w` is ASCII, `\\pL` any letter) "
            "matched against file contents, giving "
            "`path:line: text` for each matching line; `glob` "
            "(e.g. `*.py`, `src/**/*.ts`, `*.{js,jsx}`) selects files by name — alone, it lists "
            "the matching files. `path` limits the search to a directory or file. Files that "
            f".gitignore excludes, binary files and files over {MAX_FILE_BYTES >> 20} MB are "
            "skipped. At most "
            f"`max_results` (default {DEFAULT_MAX_RESULTS}) lines are returned."
        )

    @property
    def input_schema(self) -> dict[str, Any]:
        return input_schema(self.args_model)

    @property
    def safety(self) -> Safety:
        return Safety.READ_ONLY

    @property
    def kind(self) -> ToolKind:
        return "search"

    def describe(self, args: dict[str, Any], ctx: ToolContext) -> ToolCallView:
        args = args if isinstance(args, dict) else {}
        pattern, glob, path = args.get("pattern"), args.get("glob"), args.get("path")
        where = ""
        if isinstance(path, str) and path and display_path(path, ctx.cwd) != ".":
            where = f" in {display_path(path, ctx.cwd).rstrip('/')}/"
        if isinstance(pattern, str) and pattern:
            title = f"Search '{pattern}'{where}"
            if isinstance(glob, str) and glob:
                title += f" ({glob})"
        elif isinstance(glob, str) and glob:
            title = f"Find files '{glob}'{where}"
        else:
            title = "Search"
        return ToolCallView(title=title, kind=self.kind)

    async def preview(self, args: dict[str, Any], ctx: ToolContext) -> tuple[ToolDisplay, ...]:
        return ()

    def permission_key(self, args: dict[str, Any]) -> str:
        return self.name

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        a = parse_args(self.args_model, args, self.name)
        if not a.pattern and not a.glob:
            raise ToolError("invalid arguments for search: give a `pattern`, a `glob`, or both")
        regex = compile_pattern(a.pattern, a.case_insensitive) if a.pattern else None
        glob = GlobFilter.parse(a.glob) if a.glob else None
        root = resolve_path(
            a.path or ".", ctx.cwd, write=False, allow_read_outside=ctx.allow_read_outside
        )
        rel_root = display_path(root, ctx.cwd)

        stop = threading.Event()
        try:
            result = await anyio.to_thread.run_sync(
                self._search, root, ctx.cwd, rel_root, regex, glob, a.max_results, stop,
                abandon_on_cancel=True,
            )  # fmt: skip
        finally:
            stop.set()
        return ToolOutput(content=_report(result, a, rel_root, regex is None))

    @staticmethod
    def _search(
        root: Path,
        cwd: Path,
        rel_root: str,
        regex: Regex | None,
        glob: GlobFilter | None,
        max_results: int,
        stop: threading.Event,
    ) -> ScanResult:
        deadline = time.monotonic() + SEARCH_DEADLINE
        if not root.exists():
            raise ToolError(f"path not found: {rel_root}")
        if root.is_file():
            # An explicit file is searched even when ignored; the glob still filters it.
            files: Iterator[tuple[str, str]] = iter([(str(root), root.name)])
            prefix = rel_root[: -len(root.name)] if rel_root.endswith(root.name) else ""
        else:
            files = walk_files(str(root), os.path.abspath(cwd), stop)
            prefix = "" if rel_root == "." else rel_root.rstrip("/") + "/"
        return scan(files, prefix, regex, glob, max_results, stop, deadline)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _report(result: ScanResult, a: SearchArgs, rel_root: str, files_only: bool) -> str:
    where = "" if rel_root == "." else f" in {rel_root}"
    if files_only:
        head = (
            f"{_count(result.files_matched, 'file')} matching '{a.glob}'{where}"
            if result.lines
            else f"No files match '{a.glob}'{where}"
        )
    elif result.lines:
        head = (
            f"{_count(result.matches, 'matching line')} in "
            f"{_count(result.files_matched, 'file')}{where}"
        )
    else:
        head = f"No matches for '{a.pattern}'{where}"
        if a.glob:
            head += f" in files matching '{a.glob}'"
    notes = []
    if result.capped:
        notes.append(
            f"[results capped at {a.max_results}; narrow the search with `path` or `glob`]"
        )
    if result.stopped:
        notes.append(f"[the search stopped after {SEARCH_DEADLINE:g} s; results are partial]")
    skipped = []
    if result.binary:
        skipped.append(f"{result.binary} binary or non-UTF-8")
    if result.large:
        skipped.append(f"{result.large} larger than {MAX_FILE_BYTES >> 20} MB")
    if skipped:
        notes.append(f"[skipped files: {', '.join(skipped)}]")
    return "\n".join([head + (":" if result.lines else ""), *result.lines, *notes])
