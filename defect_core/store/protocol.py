"""The `SessionStore` protocol: what the runtime may ask of wherever sessions persist.

Owns the contract every store keeps (`SqliteStore` is the one implementation; `AsyncStore`
wraps any of them for the event loop) and `UNSET`, the marker of an `update` field that was
not given.

Invariants every implementation keeps:
- The message log is append-only: `append_message` is atomic (a transaction of its own, or a
  savepoint of a group of writes committed at once, `transactions.py`) and durable when it
  returns; messages are numbered per session (`seq` = 1, 2, …, gap-free).
- History vs transcript: `write_back` records what compaction wrote back without rewriting the
  log, so `load` returns `history` (the last write-back + every message appended after it) and
  `transcript` (the whole original log of the current branch, which `session/load` replays).
- The log is a tree of turns (`tree.py`): `rewind` and `fork` move or share heads, never
  delete a message; a session's branch is what `load` returns.
- Stored as-is, never repaired: an orphan `tool_use` is stored and loaded as an orphan; only
  the copy sent to a provider is made wire-legal (docs/architecture.md, Integrity).
- Faults are per call and never destroy data: errors are `StorageError`s saying what could not
  be done and why, a failed write is rolled back whole, and an unreadable row fails the load of
  its own session only (`CorruptSession`).

Why a protocol: the runtime and the tests depend on this contract, not on SQLite; the methods
are synchronous because the one implementation is, and `AsyncStore` moves them off the loop.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Iterable
from typing import Any, Final, Protocol

from defect_core.listing import SessionPage
from defect_core.model import Message
from defect_core.store.records import (
    BranchPart,
    FileCheckpointRecord,
    SessionRecord,
    StoredSession,
    SubagentRecord,
    ToolCallRecord,
)


class Unset:
    """Marks an `update` field that was not given (`None` is a real value for `title`)."""

    _instance: Unset | None = None

    def __new__(cls) -> Unset:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNSET"


UNSET: Final = Unset()


class SessionStore(Protocol):
    """Where sessions persist. Methods are synchronous; wrap a store in `AsyncStore` to use it
    from the event loop."""

    def create(self, record: SessionRecord) -> None:
        """Store a new session. `DuplicateSessionId` if the id is taken."""
        ...

    def update(
        self,
        session_id: str,
        *,
        title: str | Unset | None = UNSET,
        mode: str | Unset = UNSET,
        model: str | Unset = UNSET,
        provider: str | Unset = UNSET,
        config: dict[str, str] | Unset = UNSET,
        permissions: dict[str, Any] | Unset = UNSET,
        mcp_servers: builtins.list[dict[str, Any]] | Unset = UNSET,
    ) -> None:
        """Change the given fields; always bumps `updated_at`. `SessionNotFound` if unknown."""
        ...

    def append_message(self, session_id: str, message: Message) -> int:
        """Log one message in its own transaction; durable when this returns. Its seq."""
        ...

    def upsert_tool_call(self, record: ToolCallRecord) -> None: ...

    def write_back(
        self, session_id: str, history: builtins.list[Message], covers_seq: int | None = None
    ) -> int:
        """Compaction rewrote the live history: `history` is all of it, covering the log up to
        `covers_seq` (default: the last logged message). Returns the seq covered.

        The default is exact when the store sees writes in the order history saw them: with
        `AsyncStore`, call `append_message` right after `History.append` and `write_back` right
        after `replace`/`splice_prefix` + `snapshot`, with no `await` in between. Otherwise pass
        the seq `append_message` returned for the last message `history` contains.
        """
        ...

    def save_file_checkpoint(self, record: FileCheckpointRecord) -> None:
        """Insert or replace one turn's file checkpoint, atomically."""
        ...

    def file_checkpoints(
        self, session_id: str | None = None
    ) -> builtins.list[FileCheckpointRecord]:
        """A session's file checkpoints (every session's with None), oldest first."""
        ...

    def delete_file_checkpoints(self, session_id: str, turn_ids: Iterable[str]) -> int:
        """Remove these turns' file checkpoints; how many were removed."""
        ...

    def save_subagent(self, record: SubagentRecord) -> None:
        """Insert or update one subagent run (not its messages), in one transaction."""
        ...

    def append_subagent_message(self, session_id: str, tool_call_id: str, message: Message) -> int:
        """Log one message of the subagent started by `tool_call_id`, in its own transaction;
        durable when this returns. Its seq (1, 2, … per subagent)."""
        ...

    def subagents(self, session_id: str) -> builtins.list[SubagentRecord]:
        """The session's subagent runs, oldest first, each with its messages."""
        ...

    def save_plan(self, session_id: str, plan: builtins.list[dict[str, Any]]) -> None:
        """Replace the session's plan (JSON entries, whole) in one transaction; bumps
        `updated_at`. `SessionNotFound` if unknown."""
        ...

    def plan(self, session_id: str) -> builtins.list[dict[str, Any]]:
        """The session's latest plan (`[]`: none); `CorruptSession` if it cannot be read."""

    def rewind(self, session_id: str, keep: int | None) -> None:
        """Move the session's current head back so its branch keeps its first `keep`
        messages; the rest stays stored. `keep=None` undoes the last rewind (twice: redoes).
        `ValueError` when there is nothing to undo or `keep` is past the branch."""
        ...

    def fork(self, origin: str, record: SessionRecord, keep: int | None = None) -> None:
        """Create `record` as a fork of `origin` sharing its branch (or the first `keep`
        messages of it), in one transaction. From then on the two are independent."""
        ...

    def load(
        self,
        session_id: str,
        on_part: Callable[[BranchPart], None] | None = None,
        *,
        calls: bool = True,
    ) -> StoredSession:
        """The session, or `SessionNotFound`; `CorruptSession` if a row cannot be read.
        `on_part` is handed the branch as it is decoded (`BranchPart`), in one consistent
        read, before the load returns (or fails: a corrupt row after some parts). Without
        `calls` its `tool_calls` come back empty (every row still read and checked): a caller
        that reads the records it needs with `tool_calls` does not hold them all."""
        ...

    def tool_calls(
        self, session_id: str, ids: Iterable[str] | None = None
    ) -> dict[str, ToolCallRecord]:
        """The stored records of the session's calls `ids` (an id with none is left out), or
        of every call for None; in stored order. `CorruptSession` if a row cannot be read."""
        ...

    def exists(self, session_id: str) -> bool: ...

    def list(
        self, cwd: str | None = None, cursor: str | None = None, limit: int = 50
    ) -> SessionPage:
        """Newest first (by `updated_at`, then id); pass `next_cursor` back for the next page."""
        ...

    def delete(self, session_id: str) -> None:
        """Remove the session and everything stored with it; an unknown id is not an error."""
        ...

    def latest_for_cwd(self, cwd: str) -> str | None: ...

    def close(self) -> None: ...
