"""What a running search has found so far: the first hits, for the user to see at once.

Owns `Preview`: the scan (in its worker thread) adds the lines it finds; the tool (on the
event loop) reads a snapshot and streams it as the call's progress (`tool.py`), so the first
results show while a search over a big tree is still reading files.

Invariants:
- Bounded: it keeps the first `PREVIEW_LINES` lines and counts the rest, whatever the tree.
- Thread-safe: `add` and `snapshot` take one lock, held for a few list operations only.
- News is pushed, not polled for: a reader waiting for the next `add` is called back once
  (`on_next_add`), from the scan's thread, outside the lock.
- Its text is valid Unicode: names that are not UTF-8 show U+FFFD where their bytes were.
- Display only: the model reads the final answer (in walk order, capped, with its notes),
  never the preview, whose lines are in the order they were found.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

PREVIEW_LINES = 20


class Preview:
    def __init__(self, limit: int = PREVIEW_LINES) -> None:
        self._limit = limit
        self._lock = threading.Lock()
        self._lines: list[str] = []
        self._matches = 0
        self._files = 0
        self._version = 0
        self._on_next_add: Callable[[], object] | None = None

    def add(self, lines: Sequence[str], files: int = 0) -> None:
        """Record `lines` found in `files` more files."""
        with self._lock:
            room = self._limit - len(self._lines)
            if room > 0:
                self._lines.extend(lines[:room])
            self._matches += len(lines)
            self._files += files
            self._version += 1
            tell, self._on_next_add = self._on_next_add, None
        if tell is not None:
            tell()

    def on_next_add(self, tell: Callable[[], object] | None) -> None:
        """Call `tell` (once, from the thread that adds) at the next `add`; None forgets it."""
        with self._lock:
            self._on_next_add = tell

    def clear(self) -> None:
        """Forget what was found (the search starts again another way)."""
        with self._lock:
            self._lines.clear()
            self._matches = self._files = 0
            self._version += 1

    @property
    def version(self) -> int:
        """Grows with every `add`: a reader compares it to know whether there is news."""
        return self._version

    def snapshot(self, files_only: bool) -> str | None:
        """The progress text: how much was found so far, then the first lines; None before
        the first."""
        with self._lock:
            lines, matches, files = list(self._lines), self._matches, self._files
        if not matches:
            return None
        if files_only:
            head = f"Searching… {_count(files, 'file')} found so far"
        else:
            head = (
                f"Searching… {_count(matches, 'matching line')} in {_count(files, 'file')} so far"
            )
        more = ["…"] if matches > len(lines) else []
        text = "\n".join([head + ":", *lines, *more])
        # A file name that is not UTF-8 arrives with surrogate escapes: shown as U+FFFD, as
        # the final answer shows it (a lone surrogate is not text any JSON writer accepts).
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"
