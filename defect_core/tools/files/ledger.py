"""The read ledger: what a session last saw of each file, and one lock per file for changes.

Owns `ReadLedger`, kept per session in `ToolContext.settings` under `LEDGER_KEY`.

Invariants:
- A file the session read is remembered by size and mtime, and by a content digest when the
  whole file was seen; `changed` answers from the digest when both sides have the text (a
  `touch` is no change, an unsaved edit in the editor's buffer is one), else from size and
  mtime. A file the session never saw is never "changed".
- Changes to one file are serialised under `lock(path)`, so two calls of one batch never
  clobber each other.

Why: the model edits from what it last read. If the user (or a formatter, or the editor's
unsaved buffer) changed the file since, an exact-match edit may still apply and silently merge
two intents; the write and edit tools refuse and ask for a fresh read instead.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

import anyio

from defect_core.tools.backends import FileStat
from defect_core.tools.base import ToolContext

LEDGER_KEY = "defect.read_ledger"
"""Where the ledger lives in `ToolContext.settings` (the runner shares one dict per session)."""


def _digest(text: str) -> bytes:
    # Trailing line breaks are left out: an editor's windowed read (`fs/read_text_file` with
    # `limit`) may drop the final newline that its whole-file read keeps.
    data = text.rstrip("\r\n").encode("utf-8", "surrogatepass")
    return hashlib.blake2b(data, digest_size=16).digest()


@dataclass(frozen=True, slots=True)
class _Seen:
    size: int
    mtime_ns: int
    digest: bytes | None


@dataclass
class ReadLedger:
    """What this session last saw of each file, and one lock per file for changes."""

    _seen: dict[Path, _Seen] = field(default_factory=dict)
    _locks: dict[Path, anyio.Lock] = field(default_factory=dict)

    @staticmethod
    def of(ctx: ToolContext) -> ReadLedger:
        ledger = ctx.settings.get(LEDGER_KEY)
        if not isinstance(ledger, ReadLedger):
            ledger = ctx.settings[LEDGER_KEY] = ReadLedger()
        return ledger

    def lock(self, path: Path) -> anyio.Lock:
        return self._locks.setdefault(path, anyio.Lock())

    def record(self, path: Path, stat: FileStat | None, text: str | None) -> None:
        """The session saw `path` as `stat`; `text` when it saw the whole file."""
        if stat is None:
            self._seen.pop(path, None)
            return
        digest = _digest(text) if text is not None else None
        self._seen[path] = _Seen(stat.size, stat.mtime_ns, digest)

    def changed(self, path: Path, stat: FileStat | None, text: str | None) -> bool:
        """Whether `path` differs from what the session last saw (False if it never saw it).

        Content decides when both sides have it (a `touch` is no change; an unsaved edit in
        the editor's buffer is one); size and mtime otherwise.
        """
        seen = self._seen.get(path)
        if seen is None:
            return False
        if stat is None:
            return True
        if seen.digest is not None and text is not None:
            return _digest(text) != seen.digest
        return (seen.size, seen.mtime_ns) != (stat.size, stat.mtime_ns)
