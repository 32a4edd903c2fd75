"""The search engine: file-name globs, the RE2 content scan, and the caps on what it keeps.

Owns `GlobFilter`, `compile_pattern`, `scan` and its `ScanResult`: given the files the walk
yields, which ones match, and which lines.

Invariants:
- Binary files (a NUL byte in the first 8 KiB), files that are not UTF-8 and files over
  `MAX_FILE_BYTES` are skipped; binary and large files are counted, and a file that is not
  UTF-8 when the pattern matches its bytes (it holds a hit the answer cannot show; counting
  them all would make ripgrep look for every byte over 0x7F, off its literal fast path:
  `rg_engine`); matched lines are cut at `MAX_LINE_CHARS`;
  the scan stops at `max_results` lines (and says so), at a cancel, or at the deadline.
- Matching takes time linear in the file's size, whatever the pattern: the regex engine is
  RE2 (`google-re2`), not Python's backtracking `re`, where a pattern such as `(a+)+$` over a
  line of `a`s runs for ages holding the GIL — freezing every session of the process, with
  no way to cancel it. With RE2, each file is one bounded step, and the scan checks for a
  cancel or the deadline between files. RE2 has no lookaround and no backreferences: such a
  pattern is a clear tool error.

Why it reads the disk directly rather than through `ctx.fs`: a search touches thousands of
files and is read-only; asking the editor for each one (`fs/read_text_file`) would be slow by
orders of magnitude. The editor and the agent share the machine, so what the search sees is
the saved state of the files — unsaved buffer changes are seen by `read_file`, not here.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from defect_core.tools.base import ToolError
from defect_core.tools.search.ignore import compile_alternatives, translate_glob
from defect_core.tools.search.preview import Preview

MAX_LINE_CHARS = 300
MAX_FILE_BYTES = 2 * 1024 * 1024
_SNIFF = 8192


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
        return cls(compile_alternatives(names), compile_alternatives(paths))

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
    undecodable: int = 0
    """Files skipped as not UTF-8 that hold a match (in their bytes)."""
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
    preview: Preview | None = None,
) -> ScanResult:
    """Search `files`; stops at `max_results` lines, at `stop`, or at `deadline`. The lines
    found are offered to `preview` as they are found."""
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
                if preview is not None:
                    preview.add([shown], files=1)
            else:
                result.capped = True
            continue
        text = text_of(full, result, regex)
        if text is None:
            continue
        before = len(result.lines)
        more = grep_file(text, regex, shown, result, max_results)
        if preview is not None and len(result.lines) > before:
            preview.add(result.lines[before:], files=1)
        if not more:
            break
    return result


def text_of(full: str, result: ScanResult, regex: Regex) -> bytes | None:
    """The file's bytes, or None when it is skipped (counted in `result`, a file that is not
    UTF-8 only when `regex` matches its bytes: it is read whole anyway) or unreadable."""
    # os.read sized by fstat: a buffered `read(MAX_FILE_BYTES)` allocates the whole maximum
    # for every file, which made a 20k-file scan four times slower.
    try:
        fd = os.open(full, os.O_RDONLY)
        try:
            size = os.fstat(fd).st_size
            if size > MAX_FILE_BYTES:
                result.large += 1
                return None
            # The sniffed head first: a binary (the images, archives and builds a tree
            # keeps beside its sources) is never read past it.
            data = os.read(fd, min(size + 1, _SNIFF))
            if len(data) == _SNIFF and b"\x00" not in data:
                data += os.read(fd, size + 1 - _SNIFF)
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
        if regex.search(data) is not None:
            result.undecodable += 1
        return None
    return data


def grep_file(text: bytes, regex: Regex, shown: str, result: ScanResult, max_results: int) -> bool:
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
