"""ripgrep as a prefilter: which files the exact scan must read, found at native speed.

Owns `ripgrep_binary()` (the `rg` installed beside defect, or on the PATH) and `RgSearch`:
an `rg --count --max-count 1 --multiline` run over the search root that lists every file the
Python scan (`matching.scan`) could act on — a file that matches the pattern (a file that is
not UTF-8 is counted when it does), or that holds a NUL byte (so every binary the scan would
skip and count is among them) — as rg finds them, in no set order (`ordering` gives the walk's
answer from them), and the files over the size limit, which rg leaves out (named in its
debug log). `candidates()` is the same list, whole and in the walk's order.

Why a prefilter rather than rg's own output: the scan's rules (RE2 syntax, the 8 KiB binary
sniff, UTF-8 only, the 2 MB limit, the caps, the report) stay the only rules. rg only spares
the scan the files that cannot change its result, and walks and reads them in parallel, in
native code, outside the GIL. The results are those of the Python engine by construction,
provided rg's pattern matches at least where RE2's does — in the bytes of a file that is
not UTF-8 too, where neither engine's classes match a stray byte. rg runs in multiline
mode, as the scan matches RE2 over the whole file with `(?m)`: a match may cross a line end
in both; `translate_pattern` rewrites the classes whose meaning differs (RE2's `\\w`,
`\\d`, `\\s`, `\\b` are ASCII; Rust's are Unicode) and gives up (None: the Python engine
runs) on what Rust's syntax lacks (`\\C`, `\\Q...\\E`, octal escapes, an unknown escape).

Why the NUL pattern rides in the same rg as the user's rather than in a second rg of its own:
a second rg walks, opens and reads the whole tree again — close to twice rg's CPU time for
the search, on cores the first rg already fills, so its first hits come no sooner and the
whole search takes longer (`scripts/bench_search.py` measures both). One byte beside the
user's pattern keeps rg on its literal fast path; a class of bytes would not: a pattern for
every byte over 0x7F (to list every file that is not UTF-8, matching or not) made rg a
fifth to a half slower on the benchmark's tree and on Python's standard library, which is
why `matching` counts only the non-UTF-8 files that hold a match.

Invariants:
- rg runs with `--no-config` (no user configuration changes what it searches) and the
  walk's scope: hidden files included, `.git` never entered, symbolic links not followed,
  `.gitignore` and `.git/info/exclude` applied whether or not the tree is a repository, no
  global, parent or `.ignore` files. That is the walk's scope only when the root is the top
  the walk reads ignore files from (the repository's root, or the workspace outside a
  repository): rg is used there only (`ignore.ignore_top`); elsewhere the Python engine
  runs.
- The large files are rg's only when its debug log was read whole and names each of them
  exactly (`large` is None otherwise, and the walk answers): a log entry is one file, so a
  run of rg that logs nothing cannot pass for a tree without large files; an entry a name's
  line feed splits is joined again, and a name the log writes lossily (not UTF-8) is found
  among its directory's entries, or, when none or several match, the walk answers. They
  are named, not only counted, so that a capped search counts those before its cap point
  only, as the walk does.
- Output is read as it arrives and handed on one candidate at a time, so nothing grows with
  the tree here; a cancel (`stop`) or the deadline ends the run, and `close` kills rg.
"""

from __future__ import annotations

import os
import re
import selectors
import shutil
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

from defect_core.tools.search.ignore import walk_order

__all__ = [
    "Candidates",
    "RgSearch",
    "candidates",
    "ripgrep_binary",
    "translate_pattern",
]

_CLASSES = {  # RE2's ASCII classes, in Rust syntax (outside / inside a bracket class)
    "w": ("[[:word:]]", "[:word:]"),
    "W": ("[^[:word:]]", "[^[:word:]]"),
    "d": ("[0-9]", "0-9"),
    "D": ("[^0-9]", "[^0-9]"),
    "s": ("[\\t\\n\\f\\r ]", "\\t\\n\\f\\r "),
    "S": ("[^\\t\\n\\f\\r ]", "[^\\t\\n\\f\\r ]"),
}
_SAME = set("AazftnrvpPx.*+?()[]{}|^$\\-/ ") | set("0123456789")  # escapes both read alike
_BINARY = "(?-u:\\x00)"
"""A NUL byte: the file may be a binary, which the scan counts whatever the pattern."""


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


class Candidates(NamedTuple):
    files: list[tuple[str, str]]  # (absolute path, path relative to the root), walk order
    large: int  # files in scope over the size limit (rg does not read them)


class RgSearch:
    """A running prefilter: the candidate files as rg finds them (`files`), then the files
    over the size limit it left out (`large_files`, and their number, `large`).

    One rg, with `--debug`: its walk logs each file it leaves out for its size ("ignoring
    PATH: N bytes", after the ignore rules, so only files in scope), which names the large
    files without a second walk of the tree; each name is checked against the file (a
    regular file over the limit), as the log writes names lossily. `--count --max-count 1`
    lists a file once, at its first match, as `--files-with-matches` would, but line by
    line (`_records`), and `--line-buffered` hands each line on at once. Both pipes are
    read as they fill, so rg never waits on a full one, and the caller scans the first
    candidates while rg still walks.
    `close` (or leaving the `with` block) kills it if it still runs."""

    def __init__(
        self, rg: str, root: str, pattern: str, case_insensitive: bool, max_bytes: int
    ) -> None:
        command = [
            rg, "--no-config", "--null", "--hidden", "--no-require-git", "--no-ignore-global",
            "--no-ignore-dot", "--no-ignore-parent", "--no-messages", "--glob", "!.git",
            "--count", "--max-count", "1", "--line-buffered", "--text", "--multiline", "--debug",
            "--max-filesize", str(max_bytes),
        ]  # fmt: skip
        if case_insensitive:
            command.append("--ignore-case")
        for p in (_BINARY, pattern):
            command += ["-e", p]
        self.interrupted = False
        """True when a cancel or the deadline ended the run: the files seen are partial."""
        self._root = root
        self._max_bytes = max_bytes
        self._large: list[str] = []
        self._logged = False  # rg's debug log was seen: its large files are all there
        self._exact = True  # every large file the log named was found, and only one
        self._entry: bytes | None = None  # the log's last entry, maybe not whole yet
        self._listed = False  # `files` read rg's output to its end
        self._proc = subprocess.Popen(
            [*command, "--", "."],
            cwd=root,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )

    def __enter__(self) -> RgSearch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        proc = self._proc
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()

    def files(self, stop: threading.Event, deadline: float) -> Iterator[str]:
        """The path of each candidate relative to the root, in rg's order (not the walk's:
        rg searches in parallel); ends when rg is done, or at `stop` or the deadline (then
        `interrupted`)."""
        assert self._proc.stdout is not None and self._proc.stderr is not None
        out, log = self._proc.stdout.fileno(), self._proc.stderr.fileno()
        tails = {out: b"", log: b""}
        with selectors.DefaultSelector() as sel:
            sel.register(out, selectors.EVENT_READ)
            sel.register(log, selectors.EVENT_READ)
            while sel.get_map():
                if stop.is_set() or time.monotonic() > deadline:
                    self.interrupted = True
                    return
                for key, _ in sel.select(_POLL):
                    data = os.read(key.fd, 1 << 16)
                    if not data:
                        sel.unregister(key.fd)
                    elif key.fd == log:
                        lines = (tails[log] + data).split(b"\n")
                        tails[log] = lines.pop()
                        self._read_log(lines)
                    else:
                        paths, tails[out] = _records(tails[out] + data)
                        for path in paths:
                            yield os.fsdecode(path).removeprefix("./")
        self._read_log([tails[log]] if tails[log] else [], end=True)
        self._listed = True

    def _read_log(self, lines: list[bytes], end: bool = False) -> None:
        """Take the whole entries of rg's log in `lines`: an entry is a line that starts
        with "rg: " and the lines after it that do not (a name with a line feed splits its
        entry). The last one waits for the next lines, or for the `end` of the log."""
        for line in lines:
            if line.startswith(b"rg: ") or self._entry is None:
                self._take(self._entry)
                self._entry = line
            else:
                self._entry += b"\n" + line
        if end:
            self._take(self._entry)
            self._entry = None

    def _take(self, entry: bytes | None) -> None:
        if entry is None:
            return
        if not entry.startswith(b"rg: "):
            self._exact = False  # not rg's log as it is known here
        elif entry.startswith(b"rg: DEBUG|"):
            self._logged = True
            if (m := _SKIPPED_LARGE.search(entry)) is not None:
                logged = os.fsdecode(m.group(1)).removeprefix("./")
                rel = _large_on_disk(self._root, logged, self._max_bytes)
                if rel is None:
                    self._exact = False
                else:
                    self._large.append(rel)

    def large(self) -> int | None:
        """Files in scope over the size limit; None when rg failed, was interrupted, or its
        output was not read to the end (its candidates are then not the walk's), or its log
        did not name each large file exactly. Never waits on an rg still writing."""
        found = self.large_files()
        return None if found is None else len(found)

    def large_files(self) -> list[str] | None:
        """The paths (relative to the root) of the files `large` counts, in no set order;
        None when `large` is."""
        if not self._listed or self._proc.wait() not in (0, 1) or not self._logged:
            return None
        return list(self._large) if self._exact else None


def _large_on_disk(root: str, logged: str, max_bytes: int) -> str | None:
    """The path of the file over `max_bytes` that rg's log names `logged` (relative to
    `root`); None when there is none, or more than one. The log writes a name that is not
    UTF-8 with U+FFFD for its bad bytes: such a name is matched among its directory's."""
    here = os.fsencode(root)
    parts: list[bytes] = []
    for part in logged.split("/"):
        name = os.fsencode(part)
        if "\ufffd" in part:
            try:
                found = [e for e in os.listdir(here) if e.decode("utf-8", "replace") == part]
            except OSError:
                return None
            if len(found) != 1:
                return None
            name = found[0]
        here = os.path.join(here, name)
        parts.append(name)
    try:
        st = os.lstat(here)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode) or st.st_size <= max_bytes:
        return None
    return os.fsdecode(b"/".join(parts))


def _records(data: bytes) -> tuple[list[bytes], bytes]:
    """The paths of the whole records in `data`, and what is left of an unfinished one.

    A record is `PATH NUL COUNT LF`: a name may hold a line feed but never a NUL, so the
    NUL ends the path and the next line feed the record, whatever the name. (`--null` alone
    prints no line feed, and rg flushes a pipe at line feeds only: the first candidates would
    wait for rg's buffer to fill, which a pattern found in few files never does.)"""
    paths: list[bytes] = []
    start = 0
    while (nul := data.find(b"\0", start)) >= 0 and (end := data.find(b"\n", nul)) >= 0:
        paths.append(data[start:nul])
        start = end + 1
    return paths, data[start:]


def candidates(
    rg: str,
    root: str,
    pattern: str,
    case_insensitive: bool,
    max_bytes: int,
    stop: threading.Event,
    deadline: float,
) -> Candidates | None:
    """Every file the scan must read, in the walk's order, and how many files over
    `max_bytes` were left out; None when rg failed (the caller uses the Python engine)."""
    try:
        run = RgSearch(rg, root, pattern, case_insensitive, max_bytes)
    except OSError:
        return None
    with run:
        found = sorted(run.files(stop, deadline), key=walk_order)
        large = run.large()
    if large is None:
        return None
    return Candidates([(os.path.join(root, rel), rel) for rel in found], large)


_POLL = 0.05
"""Seconds between checks for a cancel or the deadline while rg is silent."""
_SKIPPED_LARGE = re.compile(rb"(?s)\Arg: DEBUG\|ignore::walk\|[^|\n]*?: ignoring (.+): \d+ bytes\Z")
"""The line of rg's debug log for a file its walk leaves out for its size, and its path."""
