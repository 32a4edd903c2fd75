"""`AsyncStore`: a `SessionStore` for the event loop, every call run on one worker thread.

Owns the hand-off between the asyncio loop and a synchronous store: which calls are writes,
the order of calls, and what a cancellation does to a call in flight. The worker thread itself
(`defect-store`), and the group commit of writes queued behind each other, are `writer.py`'s.

Invariants:
- Calls happen in call order: each call is submitted to the one worker at the moment it is
  awaited, before the caller first yields, so the store sees them in the order history did.
- The disk is never touched on the loop: a slow fsync (docs/architecture.md, Storage) delays
  the caller only, and concurrent writes (several sessions streaming) share one commit.
- A write's caller resumes only once its row is durable (its group committed); a write that
  fails, fails its own caller only.
- A cancel never loses or half-writes a commit: each await is shielded (anyio and asyncio), so
  a cancelled caller waits until its call is done, then sees the cancellation.
- A load with `on_part` is one call on the worker (one read transaction); its parts are
  awaited on the loop in order while the worker reads on, all of them before it returns, and
  the worker reads at most `PARTS_AHEAD` parts ahead of them (it waits meanwhile): the
  messages parsed for a replay are not all alive at once when the replay is the slower.
  `on_part` must therefore not wait on another call of this store.
- After `aclose` every call raises `StorageError`; `aclose` finishes every submitted call first.

Why a door rather than an async store: SQLite is synchronous, and one worker thread both keeps
writes ordered and keeps the loop free. Requires the asyncio backend (the ACP SDK's loop).
"""

from __future__ import annotations

import asyncio
import builtins
import functools
import threading
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

import anyio

from defect_core.errors import StorageError
from defect_core.listing import SessionPage
from defect_core.model import Message
from defect_core.store.protocol import SessionStore
from defect_core.store.records import (
    BranchPart,
    FileCheckpointRecord,
    SessionRecord,
    StoredSession,
    SubagentRecord,
    ToolCallRecord,
)
from defect_core.store.writer import GroupWriter

_T = TypeVar("_T")

PARTS_AHEAD = 2
"""Parts of a load decoded and not yet awaited by its `on_part`, at most."""


class AsyncStore:
    """A `SessionStore` for the event loop: every call runs on one dedicated worker thread.

    One thread keeps calls in the order they were awaited (the call is handed to the worker
    before the caller first yields) and keeps the disk off the loop; writes queued behind each
    other commit together (`GroupWriter`). Each await is shielded: a cancelled caller waits
    until its write is durable, then sees the cancellation, so a submitted append always lands
    whole. Requires the asyncio backend (the ACP SDK's loop).
    """

    def __init__(self, store: SessionStore) -> None:
        self.store = store
        self._writer = GroupWriter(store)
        self._closed = False

    async def _call(self, fn: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        """A read: runs alone, after every call submitted before it."""
        return await self._run(functools.partial(fn, *args, **kwargs), write=False)

    async def _write(self, fn: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        """A write: durable when this returns; may share its transaction with its neighbours."""
        return await self._run(functools.partial(fn, *args, **kwargs), write=True)

    async def _run(self, fn: Callable[[], _T], *, write: bool) -> _T:
        if self._closed:
            raise StorageError("the session store is closed")
        future = self._writer.submit(fn, write=write)  # submitted now, in call order
        with anyio.CancelScope(shield=True):
            # asyncio.shield: even a native task.cancel() cannot cancel the job itself
            # (wrap_future would otherwise propagate the cancel to a job still queued).
            result = await asyncio.shield(asyncio.wrap_future(future))
        return result

    async def create(self, record: SessionRecord) -> None:
        await self._write(self.store.create, record)

    async def update(self, session_id: str, **fields: Any) -> None:
        await self._write(self.store.update, session_id, **fields)

    async def append_message(self, session_id: str, message: Message) -> int:
        return await self._write(self.store.append_message, session_id, message)

    async def upsert_tool_call(self, record: ToolCallRecord) -> None:
        await self._write(self.store.upsert_tool_call, record)

    async def write_back(
        self, session_id: str, history: builtins.list[Message], covers_seq: int | None = None
    ) -> int:
        # A copy: the caller's list may change while the worker is still writing this one.
        snapshot = builtins.list(history)
        return await self._write(self.store.write_back, session_id, snapshot, covers_seq)

    async def save_file_checkpoint(self, record: FileCheckpointRecord) -> None:
        await self._write(self.store.save_file_checkpoint, record)

    async def file_checkpoints(
        self, session_id: str | None = None
    ) -> builtins.list[FileCheckpointRecord]:
        return await self._call(self.store.file_checkpoints, session_id)

    async def delete_file_checkpoints(self, session_id: str, turn_ids: Iterable[str]) -> int:
        return await self._write(self.store.delete_file_checkpoints, session_id, list(turn_ids))

    async def save_subagent(self, record: SubagentRecord) -> None:
        await self._write(self.store.save_subagent, record)

    async def append_subagent_message(
        self, session_id: str, tool_call_id: str, message: Message
    ) -> int:
        return await self._write(
            self.store.append_subagent_message, session_id, tool_call_id, message
        )

    async def subagents(self, session_id: str) -> builtins.list[SubagentRecord]:
        return await self._call(self.store.subagents, session_id)

    async def save_plan(self, session_id: str, plan: builtins.list[dict[str, Any]]) -> None:
        await self._write(self.store.save_plan, session_id, list(plan))

    async def plan(self, session_id: str) -> builtins.list[dict[str, Any]]:
        return await self._call(self.store.plan, session_id)

    async def rewind(self, session_id: str, keep: int | None) -> None:
        await self._write(self.store.rewind, session_id, keep)

    async def fork(self, origin: str, record: SessionRecord, keep: int | None = None) -> None:
        await self._write(self.store.fork, origin, record, keep)

    async def load(
        self,
        session_id: str,
        on_part: Callable[[BranchPart], Awaitable[None]] | None = None,
        *,
        calls: bool = True,
    ) -> StoredSession:
        """The session; with `on_part`, each part of its branch is awaited on the loop as
        soon as the worker has decoded it, while the worker reads on, and every part has
        been awaited when this returns (or raises: a corrupt row after some parts). Without
        `calls`, no tool-call records come back (`SessionStore.load`; `tool_calls` reads
        them)."""
        if on_part is None:
            return await self._call(self.store.load, session_id, calls=calls)
        loop = asyncio.get_running_loop()
        parts: asyncio.Queue[BranchPart | None] = asyncio.Queue()
        room = threading.Semaphore(PARTS_AHEAD)
        stopped = False  # no more parts are awaited: the worker must not wait for room

        def hand_over(part: BranchPart) -> None:  # on the worker thread
            room.acquire()
            if stopped:
                room.release()
                return
            loop.call_soon_threadsafe(parts.put_nowait, part)

        def load() -> StoredSession:
            try:
                return self.store.load(session_id, hand_over, calls=calls)
            finally:
                loop.call_soon_threadsafe(parts.put_nowait, None)

        if self._closed:
            raise StorageError("the session store is closed")
        loading = self._writer.submit(load, write=False)  # submitted now, in call order
        try:
            while (part := await parts.get()) is not None:
                await on_part(part)
                room.release()
        finally:
            stopped = True
            room.release()  # a worker waiting for room goes on (and finds `stopped`)
            # Handing parts over stops with the first that fails; the load itself runs on
            # (it holds the worker) and is awaited, so its own error is not lost.
            with anyio.CancelScope(shield=True):
                stored = await asyncio.shield(asyncio.wrap_future(loading))
        return stored

    async def tool_calls(
        self, session_id: str, ids: Iterable[str] | None = None
    ) -> dict[str, ToolCallRecord]:
        """`SessionStore.tool_calls`, on the worker: behind every write awaited before it."""
        wanted = None if ids is None else list(ids)
        return await self._call(self.store.tool_calls, session_id, wanted)

    async def exists(self, session_id: str) -> bool:
        return await self._call(self.store.exists, session_id)

    async def list(
        self, cwd: str | None = None, cursor: str | None = None, limit: int = 50
    ) -> SessionPage:
        return await self._call(self.store.list, cwd, cursor, limit)

    async def delete(self, session_id: str) -> None:
        await self._write(self.store.delete, session_id)

    async def latest_for_cwd(self, cwd: str) -> str | None:
        return await self._call(self.store.latest_for_cwd, cwd)

    async def aclose(self) -> None:
        """Finish every submitted call, close the store and stop the worker. Idempotent."""
        if self._closed:
            return
        future = self._writer.close(self.store.close)  # after every call submitted before
        self._closed = True
        with anyio.CancelScope(shield=True):
            await asyncio.shield(asyncio.wrap_future(future))

    async def __aenter__(self) -> AsyncStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
