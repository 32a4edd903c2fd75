"""A session's file checkpoints: captured during each prompt, kept with the session, pruned.

Owns `SessionCheckpoints`, the session's side of `defect_core/checkpoints/`:
- `begin` opens a prompt's `Checkpointer`; `wrap` gives a tool call a context whose file
  door (`CheckpointingFs`) and shell (`CheckpointingShell`) capture before they change
  anything, whichever backend (local, or the editor's) is underneath;
- `committed` names the prompt the checkpoint belongs to (its message id, from the
  store's log), `tool_done` saves the partial checkpoint after each tool call, `batch_done`
  starts storing the captured contents on a worker thread once a batch of tool calls is over
  (overlapping the next model request), `stored_since` records them once the model has
answered (before the next batch runs), and `end` finishes the checkpoint, saves it, and
  prunes the state directory to the configured budget (saying so when it drops anything);
- `records` reads them back for `/rewind` (`rewind.py`); `forget_session` deletes a session
  with the blobs only its checkpoints used; `sweep_leftovers`, when a session is loaded,
  removes the temporaries a killed write or restore left where its checkpoints say defect
  wrote and where its interrupted calls were writing (`tools.beneath.sweep_temporaries`:
  only defect's own, of a process that is gone).

Invariants:
- Crash-safe: each save is one transaction (`SqliteStore.save_file_checkpoint`), and a blob
  is durable before a checkpoint naming it is saved (`Checkpointer.flush`), so a kill -9 at
  any point leaves the previous checkpoint of the prompt or the new one, whole.
- Checkpoints live in the store beside the session (deleted with it) and their contents in
  the state directory's blob store, never in the user's repository.
- A failure to checkpoint never stops a turn: it is logged and the user is told once.
- Without a store (library use) nothing is captured: there is nowhere to keep it.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import os
import posixpath
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import anyio

from defect_core.checkpoints import (
    BlobStore,
    Budget,
    Checkpoint,
    Checkpointer,
    CheckpointingFs,
    CheckpointUsage,
    plan_prune,
)
from defect_core.checkpoints.shell import CheckpointingShell
from defect_core.errors import StorageError
from defect_core.events import AgentEvent, Notice
from defect_core.log import get_logger
from defect_core.model import Message, ToolResultBlock
from defect_core.store import AsyncStore, FileCheckpointRecord
from defect_core.store.paths import default_state_dir
from defect_core.tools.base import ToolContext
from defect_core.tools.beneath import sweep_temporaries

log = get_logger("defect.checkpoints")

MessageId = tuple[str, int]
"""A message's name in the store: `(session id, seq)`."""


def state_dir_of(store: AsyncStore) -> Path:
    """The state directory the store's database lives in (blobs go beside it)."""
    path = getattr(store.store, "path", None)
    return Path(path).parent if path is not None else default_state_dir()


class SessionCheckpoints:
    def __init__(
        self,
        session_id: str,
        cwd: Path,
        store: AsyncStore | None,
        budget: Budget,
        publish: Callable[[AgentEvent], Awaitable[None]],
    ) -> None:
        self._session_id = session_id
        self._cwd = cwd
        self._store = store
        self._budget = budget
        self._publish = publish
        self.blobs = BlobStore.in_state_dir(state_dir_of(store)) if store else None
        self._current: Checkpointer | None = None
        self._meta: dict[str, Any] = {}
        self._flush: concurrent.futures.Future[None] | None = None
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._saved: tuple[Any, ...] | None = None
        self._failing = False

    # --- one prompt ------------------------------------------------------------------------

    def begin(self) -> None:
        if self.blobs is None:
            return
        self._current = Checkpointer(
            self._cwd, self.blobs, turn_id=uuid.uuid4().hex, session_id=self._session_id
        )
        self._meta, self._saved, self._flush = {}, None, None

    async def committed(self, message: Message, message_id: MessageId) -> None:
        """A message of the turn is in the log. The first is the prompt the checkpoint
        belongs to; tool results end a batch of tool calls."""
        if self._current is None:
            return
        if not self._meta:
            self._meta = {"prompt": list(message_id)}
        if any(isinstance(b, ToolResultBlock) for b in message.content):
            self.batch_done()
        else:
            await self.stored_since()

    def wrap(self, ctx: ToolContext) -> ToolContext:
        checkpointer = self._current
        if checkpointer is None:
            return ctx
        return dataclasses.replace(
            ctx,
            fs=CheckpointingFs(ctx.fs, checkpointer),
            shell=CheckpointingShell(ctx.shell, checkpointer),
        )

    async def tool_done(self) -> None:
        """Save what is captured so far (only when it changed)."""
        if self._current is not None:
            await self._save(self._current.partial())

    def batch_done(self) -> None:
        """A batch of tool calls is over: store its captured contents on a worker thread,
        while the next model request runs."""
        checkpointer = self._current
        if checkpointer is None or (self._flush is not None and not self._flush.done()):
            return
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="checkpoint")
        self._flush = self._pool.submit(checkpointer.flush)

    async def stored_since(self) -> None:
        """The model answered after a batch: wait for that batch's flush (started when the
        batch ended, so normally done by now) and save the partial checkpoint, so the
        contents are recorded before the next batch of tools runs."""
        flush, self._flush = self._flush, None
        if self._current is None or flush is None:
            return
        with anyio.CancelScope(shield=True):
            try:
                await anyio.to_thread.run_sync(flush.result)
            except OSError as exc:
                await self._failed(exc)
                return
            await self._save(self._current.partial())

    async def end(self) -> None:
        """Finish the prompt's checkpoint (storing what is pending), save it, prune."""
        checkpointer, self._current = self._current, None
        if checkpointer is None:
            return
        with anyio.CancelScope(shield=True):
            try:
                checkpoint = await anyio.to_thread.run_sync(checkpointer.finish)
            except OSError as exc:
                await self._failed(exc)
                return
            if checkpoint.entries or checkpoint.notes:
                await self._save(checkpoint)
                await self.prune()

    async def save_rewind(self, checkpoint: Checkpoint) -> None:
        """Keep what a restore overwrote (`restore`'s recorder), so it can be undone."""
        await self._save(checkpoint, {"rewind": True}, force=True)

    async def _save(
        self, checkpoint: Checkpoint, meta: dict[str, Any] | None = None, *, force: bool = False
    ) -> None:
        if self._store is None:
            return
        key = (checkpoint.turn_id, checkpoint.finished, checkpoint.entries, checkpoint.notes)
        if not force and (key == self._saved or not (checkpoint.entries or checkpoint.notes)):
            return
        body = dataclasses.replace(checkpoint, meta=meta if meta is not None else self._meta)
        record = FileCheckpointRecord(
            session_id=self._session_id,
            turn_id=checkpoint.turn_id,
            created_at=checkpoint.created_at,
            finished=checkpoint.finished,
            body=body.to_json(),
        )
        try:
            with anyio.CancelScope(shield=True):
                await self._store.save_file_checkpoint(record)
        except StorageError as exc:
            await self._failed(exc)
            return
        self._saved = key
        self._failing = False

    async def _failed(self, exc: Exception) -> None:
        log.warning("checkpoint_failed", session_id=self._session_id, error=str(exc))
        if not self._failing:
            self._failing = True
            text = f"defect could not save this prompt's file checkpoint: {exc}"
            await self._publish(Notice(text, level="warning"))

    # --- reading and pruning ---------------------------------------------------------------

    async def records(self) -> list[Checkpoint]:
        """This session's checkpoints, oldest first (unreadable ones are skipped)."""
        if self._store is None:
            return []
        out = []
        for record in await self._store.file_checkpoints(self._session_id):
            try:
                out.append(Checkpoint.from_json(record.body))
            except ValueError as exc:
                log.warning("checkpoint_unreadable", turn_id=record.turn_id, error=str(exc))
        return out

    async def prune(self) -> None:
        """Keep every session's checkpoints within the budget, oldest dropped first; then
        sweep the blobs nothing references. Says so when anything was dropped."""
        store, blobs = self._store, self.blobs
        if store is None or blobs is None:
            return
        records = await store.file_checkpoints()
        usages, live = [], set()
        for record in records:
            try:
                digests = Checkpoint.from_json(record.body).blob_digests()
            except ValueError:
                digests = set()
            live |= digests
            usages.append(
                CheckpointUsage(
                    f"{record.session_id}/{record.turn_id}", record.created_at, frozenset(digests)
                )
            )
        sizes = await anyio.to_thread.run_sync(lambda: {d: blobs.stored_size(d) for d in live})
        plan = plan_prune(usages, sizes, self._budget, time.time())
        if not plan.drop:
            return
        by_session: dict[str, list[str]] = {}
        for key in plan.drop:
            session_id, turn_id = key.split("/", 1)
            by_session.setdefault(session_id, []).append(turn_id)
        for session_id, turn_ids in by_session.items():
            await store.delete_file_checkpoints(session_id, turn_ids)
        await sweep(store, blobs)
        await self._publish(Notice(f"Checkpoints: {plan.summary()}."))

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None


async def sweep(store: AsyncStore, blobs: BlobStore) -> None:
    """Remove the blobs no stored checkpoint references (after a prune or a delete)."""
    live = await _referenced(store)
    await anyio.to_thread.run_sync(lambda: blobs.sweep(live))


async def forget_session(store: AsyncStore, session_id: str) -> None:
    """Delete the session, then the blobs only its checkpoints referenced."""
    blobs = BlobStore.in_state_dir(state_dir_of(store))
    mine = await _referenced(store, session_id)
    await store.delete(session_id)
    live = await _referenced(store)
    await anyio.to_thread.run_sync(lambda: blobs.discard(mine - live))


async def _referenced(store: AsyncStore, session_id: str | None = None) -> set[str]:
    """The blob digests the stored checkpoints (of one session, or all) reference; a record
    this defect cannot read references nothing."""
    digests: set[str] = set()
    for record in await store.file_checkpoints(session_id):
        try:
            digests |= Checkpoint.from_json(record.body).blob_digests()
        except ValueError:
            continue
    return digests


async def sweep_leftovers(
    store: AsyncStore, session_id: str, cwd: Path, transcript: Sequence[Message]
) -> None:
    """Remove the temporaries killed writes left in the workspace root, in every directory
    the session's checkpoints name (a restore killed midway, a write of an earlier tool call),
    and in those of the calls the transcript's last message left without a result (a write
    killed midway: its record's locations); run when the session is loaded. A failure is
    logged, never raised: it stops no load."""
    last = transcript[-1] if transcript else None
    cut = [] if last is None or last.role != "assistant" else last.tool_uses()
    try:
        records = await store.file_checkpoints(session_id)
        calls = await store.tool_calls(session_id, [use.id for use in cut]) if cut else {}
        paths = [
            place["path"]
            for call in calls.values()
            for place in call.locations
            if isinstance(place.get("path"), str)
        ]
        removed = await anyio.to_thread.run_sync(_sweep, cwd, records, paths)
    except (OSError, StorageError) as exc:
        log.warning("temporaries_not_swept", session_id=session_id, error=str(exc))
        return
    if removed:
        log.info("temporaries_swept", session_id=session_id, paths=removed)


def _sweep(cwd: Path, records: list[FileCheckpointRecord], paths: list[str]) -> list[str]:
    root = os.path.realpath(cwd)
    directories = {""}
    for record in records:
        try:
            checkpoint = Checkpoint.from_json(record.body)
        except ValueError:
            continue
        if os.path.realpath(checkpoint.root) == root:
            directories |= {posixpath.dirname(path) for path in checkpoint.paths()}
    bases = {root.rstrip("/") + "/", os.path.abspath(cwd).rstrip("/") + "/"}
    for path in paths:
        directory = os.path.dirname(os.path.normpath(os.path.join(cwd, path)))
        for base in bases:
            if f"{directory}/".startswith(base):
                directories.add(directory[len(base) :])
    return sweep_temporaries(root, directories)
