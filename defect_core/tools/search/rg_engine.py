"""ripgrep as a prefilter: which files the exact scan must read, found at native speed.

Owns `ripgrep_binary()` (the `rg` installed beside defect, or on the PATH) and
`candidates()`: an `rg --files-with-matches --multiline` run over the search root that lists
every file the Python scan (`matching.scan`) could act on — a file that matches the pattern, or
that holds a NUL byte or a byte over 0x7F (so every binary and every non-UTF-8 file the scan
would skip and count is among them) — in the walk's order (`walk_order`), and the number of
files over the size limit, which rg leaves out (counted by a listing run alongside).

Why a prefilter rather than rg's own output: the scan's rules (RE2 syntax, the 8 KiB binary
sniff, UTF-8 only, the 2 MB limit, the caps, the report) stay the only rules. rg only spares
the scan the files that cannot change its result, and walks and reads them in parallel, in
native code, outside the GIL. The results are those of the Python engine by construction,
provided rg's pattern matches at least where RE2's does. rg runs in multiline mode, as the
scan matches RE2 over the whole file with `(?m)`: a match may cross a line end in both;
`translate_pattern` rewrites the classes whose meaning differs (RE2's `\\w`, `\\d`,
`\\s`, `\\b` are ASCII; Rust's are Unicode) and gives up (None: the Python engine runs) on
what Rust's syntax lacks (`\\C`, `\\Q...\\E`, octal escapes, an unknown escape).

Invariants:
- rg runs with `--no-config` (no user configuration changes what it searches) and the
  walk's scope: hidden files included, `.git` never entered, symbolic links not followed,
  `.gitignore` and `.git/info/exclude` applied whether or not the tree is a repository, no
  global, parent or `.ignore` files. That is the walk's scope only when the root is the top
  the walk reads ignore files from (the repository's root, or the workspace outside a
  repository): `candidates` is used there only (`ignore.ignore_top`); elsewhere the Python
  engine runs.
- Output is read as it arrives, so the memory held is the candidate list, not rg's output
  buffer; a cancel (`stop`) or the deadline kills rg at once.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

__all__ = ["Candidates", "candidates", "ripgrep_binary", "translate_pattern", "walk_order"]

_CLASSES = {  # RE2's ASCII classes, in Rust syntax (outside / inside a bracket class)
    "w": ("[[:word:]]", "[:word:]"),
    "W": ("[^[:word:]]", "[^[:word:]]"),
    "d": ("[0-9]", "0-9"),
    "D": ("[^0-9]", "[^0-9]"),
    "s": ("[\\t\\n\\f\\r ]", "\\t\\n\\f\\r "),
    "S": ("[^\\t\\n\\f\\r ]", "[^\\t\\n\\f\\r ]"),
}
_SAME = set("AazftnrvpPx.*+?()[]{}|^$\\-/ ") | set("0123456789")  # escapes both read alike
_PREFILTER = ("(?-u:\\x00)", "(?-u:[\\x80-\\xff])")


def ripgrep_binary() -> str | None:
    """The `rg` of the `ripgrep` wheel installed beside this Python, else one on the PATH."""
    beside = Path(sys.executable).with_name("rg")
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("rg")


def translate_pattern(pattern: str) -> str | None:
    """The RE2 `pattern` in Rust's syntax, matching at least where RE2 matches within a line;
    None when there is no such translation (the caller uses the Python engine)."""
    out: list[str] = []
    in_class = False
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "\\":
            if i + 1 >= n:
                return None
            e = pattern[i + 1]
            if e in _CLASSES:
                out.append(_CLASSES[e][1 if in_class else 0])
            elif e in "bB" and not in_class:
                out.append(f"(?-u:\\{e})")
            elif e in "CQE" or e.isdigit():
                return None  # a single byte, quoting, octal: not in Rust's syntax
            elif e in _SAME or not e.isalnum():
                out.append(c + e)
            else:
                return None
            i += 2
            continue
        if in_class:
            if c == "]" and out[-1] not in ("[", "[^"):
                in_class = False
            elif c == "[" and pattern.startswith("[:", i):
                end = pattern.find(":]", i + 2)
                if end < 0:
                    return None
                out.append(pattern[i : end + 2])
                i = end + 2
                continue
            elif c == "[":
                out.append("\\[")
                i += 1
                continue
            out.append(c)
            i += 1
            continue
        if c == "[":
            in_class = True
            out.append("[")
            i += 1
            if i < n and pattern[i] == "]":
                out.append("\\]")
                i += 1
            continue
        out.append(c)
        i += 1
    if in_class:
        return None
    return "(?m)" + "".join(out)


def walk_order(rel: str) -> tuple[tuple[int, str], ...]:
    """The sort key that puts paths in `ignore.walk_files` order (depth first, names in
    order, a directory's files before its subdirectories)."""
    parts = rel.split("/")
    return (*((1, p) for p in parts[:-1]), (0, parts[-1]))


class Candidates(NamedTuple):
    files: list[tuple[str, str]]  # (absolute path, path relative to the root), walk order
    large: int  # files in scope over the size limit (rg does not read them)


def candidates(
    rg: str,
    root: str,
    pattern: str,
    case_insensitive: bool,
    max_bytes: int,
    stop: threading.Event,
    deadline: float,
) -> Candidates | None:
    """The files the scan must read, and how many files over `max_bytes` were left out;
    None when rg failed (the caller uses the Python engine).

    Two rg run at once: the search over the files up to `max_bytes` (with `--stats`, which
    counts the files it searched) and a listing of every file in scope, whose count less
    the searched ones is the number of large files."""
    scope = [
        "--no-config", "--null", "--hidden", "--no-require-git", "--no-ignore-global",
        "--no-ignore-dot", "--no-ignore-parent", "--no-messages", "--glob", "!.git",
    ]  # fmt: skip
    search = [rg, *scope, "--files-with-matches", "--text", "--multiline", "--stats"]
    search += ["--max-filesize", str(max_bytes)]
    if case_insensitive:
        search.append("--ignore-case")
    for p in (*_PREFILTER, pattern):
        search += ["-e", p]
    try:
        listing = subprocess.Popen(
            [rg, *scope, "--files", "--", "."],
            cwd=root,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
    except OSError:
        return None
    try:
        found, stats = _run([*search, "--", "."], root, stop, deadline)
        in_scope = sum(chunk.count(b"\0") for chunk in _chunks(listing, stop, deadline))
    finally:
        _end(listing)
    searched = _files_searched(stats)
    if found is None or searched is None or listing.returncode != 0:
        return None
    rels = sorted((os.fsdecode(r).removeprefix("./") for r in found), key=walk_order)
    return Candidates([(os.path.join(root, r), r) for r in rels], max(in_scope - searched, 0))


def _run(
    command: list[str], root: str, stop: threading.Event, deadline: float
) -> tuple[list[bytes] | None, bytes]:
    """rg's NUL-separated records and the text after the last one (its `--stats`)."""
    try:
        proc = subprocess.Popen(
            command, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
        )
    except OSError:
        return None, b""
    found: list[bytes] = []
    tail = b""
    try:
        for chunk in _chunks(proc, stop, deadline):
            records = (tail + chunk).split(b"\0")
            tail = records.pop()
            found.extend(records)
    finally:
        _end(proc)
    if stop.is_set() or time.monotonic() > deadline or proc.returncode not in (0, 1):
        return None, b""
    return found, tail


def _files_searched(stats: bytes) -> int | None:
    match = re.search(rb"^(\d+) files searched$", stats, re.MULTILINE)
    return int(match.group(1)) if match else None


def _end(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()


def _chunks(
    proc: subprocess.Popen[bytes], stop: threading.Event, deadline: float
) -> Iterator[bytes]:
    assert isinstance(proc.stdout, io.BufferedReader)
    read = proc.stdout.read1
    while True:
        data: bytes = read(1 << 16)
        if not data or stop.is_set() or time.monotonic() > deadline:
            return
        yield data
