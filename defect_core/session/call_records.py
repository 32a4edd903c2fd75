"""`SessionToolCalls`: the state of a session's tool calls as its turns change them, and the
records a replay shows, read from the store when it asks.

Owns what a `ToolCallStarted` or `ToolCallUpdated` changes in a call's record (kept, then
written through `ReplayStateWriter.tool_call`), and `snapshots`, every call as a replay
shows it (`DefaultSession.tool_calls`).

Invariants:
- A session holds the records of the calls this process started or changed, and no others:
  a loaded session's past calls are in the store (a long session has tens of thousands, most
  of what a load would hold), read back on demand: all of them for a replay, one when a
  new event changes a call this process has not seen (it is updated from its stored record,
  as if it had been kept).
- A held record is the last written, or the newer when its write failed: `snapshots` lays
  the held records over the stored ones, so a replay shows the session as it is.
- A read that fails is logged and stands for "no record" (the store's failures reach the
  user through the writes, `persistence.py`); it never stops the turn.
- Without a store (library use, unit tests) every record is held, the loaded ones included.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping

from defect_core.errors import SessionNotFound, StorageError
from defect_core.events import AgentEvent, ToolCallStarted, ToolCallUpdated
from defect_core.log import get_logger
from defect_core.session.persistence import ToolCallSnapshots
from defect_core.store import AsyncStore, ToolCallRecord

log = get_logger("defect.agent")


class SessionToolCalls:
    def __init__(
        self,
        session_id: str,
        store: AsyncStore | None,
        write: Callable[[ToolCallRecord], Awaitable[None]],
        loaded: Mapping[str, ToolCallRecord] | None = None,
    ) -> None:
        """`loaded`: the records a load handed over (none when the store keeps them)."""
        self._session_id = session_id
        self._store = store
        self._write = write
        self._held: dict[str, ToolCallRecord] = dict(loaded or {})

    @property
    def held(self) -> Mapping[str, ToolCallRecord]:
        """The records this session holds in memory (those it started or changed)."""
        return self._held

    async def apply(self, event: AgentEvent) -> None:
        """Keep and write what `event` changes of a call's record (a start, an update of a
        call with a record); any other event changes nothing."""
        record: ToolCallRecord | None = None
        if isinstance(event, ToolCallStarted):
            record = ToolCallRecord.started(self._session_id, event)
        elif isinstance(event, ToolCallUpdated):
            previous = self._held.get(event.tool_call_id) or await self._stored(event.tool_call_id)
            record = None if previous is None else previous.updated(event)
        if record is not None:
            self._held[record.tool_call_id] = record
            await self._write(record)

    async def snapshots(self) -> ToolCallSnapshots:
        """Every call as a replay shows it: the stored records, with the held ones over them."""
        records = await self._read(None)
        records.update(self._held)
        return ToolCallSnapshots(records)

    async def _stored(self, call_id: str) -> ToolCallRecord | None:
        return (await self._read([call_id])).get(call_id)

    async def _read(self, ids: list[str] | None) -> dict[str, ToolCallRecord]:
        if self._store is None:
            return {}
        try:
            return await self._store.tool_calls(self._session_id, ids)
        except (StorageError, SessionNotFound) as exc:
            log.warning("tool_calls_unread", session_id=self._session_id, error=str(exc))
            return {}
