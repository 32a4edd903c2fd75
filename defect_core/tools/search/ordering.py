"""The scan of files that arrive in any order, answering as if they came in the walk's order.

Owns `scan_in_any_order`: rg lists its candidates as its threads find them (`rg_engine`),
and sorting that list before scanning would make the first result wait for the whole walk.
This scan reads each candidate as it arrives, and keeps what it found per file, so the
answer is the one `matching.scan` gives over the same files sorted by `walk_order`.

Invariants:
- The result equals `scan` over the same files sorted by `walk_order`: the same lines in the
  same order, the same cap (and the file it falls in, which is not counted as matched, as in
  `scan`), the same counts of skipped files before that point.
- The hits kept are bounded by the cap, not by the tree: once the kept files hold more
  lines than `max_results`, the files after the one holding the line past the cap are
  dropped, and a file arriving after it in walk order is not even read.
- Files are read as they come only until the cap is reached; the ones that come after and
  may still count are read once rg is done, in walk order, up to the cap point. A pattern
  found in every file of a 200k-file tree reads about twice `max_results` files, not all,
  at the cost of holding the waiting files' names (as a sorted candidate list would).
- Every line found is offered to the `Preview` as it is found (in arrival order), so the
  tool can show the first hits while the search runs.
"""

from __future__ import annotations

import bisect
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from defect_core.tools.search.ignore import walk_order
from defect_core.tools.search.matching import (
    GlobFilter,
    Regex,
    ScanResult,
    grep_file,
    text_of,
)
from defect_core.tools.search.preview import Preview


@dataclass(order=True, slots=True)
class _Hits:
    key: str
    lines: list[str] = field(compare=False)


@dataclass(slots=True)
class _Kept:
    """The files with hits up to the cap point, in walk order, and the skipped files read
    (those past the final cap point are left out of the counts at the end)."""

    limit: int  # lines that make the cap certain: max_results + 1
    hits: list[_Hits] = field(default_factory=list)
    lines: int = 0
    binary: list[str] = field(default_factory=list)
    undecodable: list[str] = field(default_factory=list)
    large: list[str] = field(default_factory=list)

    def full(self) -> bool:
        return self.lines >= self.limit

    def beyond(self, key: str) -> bool:
        """Whether a file at `key` comes after the cap point, so cannot change the answer."""
        return self.full() and key > self.hits[-1].key

    def add(self, hits: _Hits) -> None:
        bisect.insort(self.hits, hits)
        self.lines += len(hits.lines)
        while self.lines - len(self.hits[-1].lines) >= self.limit:
            self.lines -= len(self.hits.pop().lines)


def scan_in_any_order(
    root: str,
    rels: Iterator[str],
    shown_prefix: str,
    regex: Regex,
    glob: GlobFilter | None,
    max_results: int,
    stop: threading.Event,
    deadline: float,
    preview: Preview | None = None,
) -> ScanResult:
    """`matching.scan` of the files at `rels` (relative to `root`) in walk order, reading
    them in the order they come until the cap is reached, then the rest that may still
    count, in walk order."""
    kept = _Kept(max_results + 1)
    later: list[str] = []
    checked = 0
    for rel in rels:
        checked += 1
        if checked % 256 == 0 and (stop.is_set() or time.monotonic() > deadline):
            return _in_walk_order(kept, max_results, stopped=True)
        shown = shown_prefix + rel
        if glob is not None and not glob.matches(rel, shown):
            continue
        key = walk_order(rel)
        if kept.beyond(key):
            continue
        if kept.full():
            # The cap is reached: whether this file counts depends on files still to come.
            # Read it only if it does, in walk order once rg is done, where the first file
            # past the cap point ends the scan.
            later.append(rel)
            continue
        _read(root, rel, key, shown, regex, kept, preview)
    later.sort(key=walk_order)
    for n, rel in enumerate(later, 1):
        if n % 256 == 0 and (stop.is_set() or time.monotonic() > deadline):
            return _in_walk_order(kept, max_results, stopped=True)
        key = walk_order(rel)
        if kept.beyond(key):
            break
        _read(root, rel, key, shown_prefix + rel, regex, kept, preview)
    return _in_walk_order(kept, max_results)


def _read(
    root: str,
    rel: str,
    key: str,
    shown: str,
    regex: Regex,
    kept: _Kept,
    preview: Preview | None,
) -> None:
    seen = ScanResult()
    text = text_of(os.path.join(root, rel), seen, regex)
    if text is None:  # skipped (and maybe counted), or gone since rg listed it
        if seen.binary:
            kept.binary.append(key)
        elif seen.undecodable:
            kept.undecodable.append(key)
        elif seen.large:
            kept.large.append(key)
        return
    grep_file(text, regex, shown, seen, kept.limit)
    if seen.lines:
        kept.add(_Hits(key, seen.lines))
        if preview is not None:
            preview.add(seen.lines, files=1)


def _in_walk_order(kept: _Kept, max_results: int, stopped: bool = False) -> ScanResult:
    result = ScanResult(stopped=stopped)
    cap_at: str | None = None
    for hits in kept.hits:
        room = max_results - len(result.lines)
        result.lines.extend(hits.lines[:room])
        result.matches += min(room, len(hits.lines))
        if len(hits.lines) > room:
            result.capped = True
            cap_at = hits.key
            break
        result.files_matched += 1
    result.binary = sum(1 for k in kept.binary if cap_at is None or k < cap_at)
    result.undecodable = sum(1 for k in kept.undecodable if cap_at is None or k < cap_at)
    result.large = sum(1 for k in kept.large if cap_at is None or k < cap_at)
    return result
