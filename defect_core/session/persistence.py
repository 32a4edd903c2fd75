"""What a session writes to the store besides its messages, and what it does when that fails.

Owns `ReplayStateWriter` — the writes of what a replay shows (tool-call states, title, mode,
options, "always" answers, the plan, the compacted history: `write_back`) —,
`server_summary`, what the store keeps of an MCP server, and `ToolCallSnapshots` (what a
replay shows of the stored tool calls). The messages themselves are written by the session's
`_commit` (`state.py`), whose failure stops the turn.

Invariants:
- A write of replay state never stops the session (what the model sees is the message log),
  but it is never silent either: the failure is logged, and the user is told with a warning
  `Notice` — once, until a write works again.
- Writes are shielded from cancellation: a cancelled turn does not leave half its state
  unsaved.
- Without a store (library use, unit tests) every write is a no-op.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import anyio

from defect_core.errors import SessionNotFound, StorageError
from defect_core.events import AgentEvent, Notice
from defect_core.log import get_logger
from defect_core.mcp.spec import McpServerSpec
from defect_core.model import Message
from defect_core.session.protocol import StoredToolCalls, ToolCallSnapshot
from defect_core.store import AsyncStore, ToolCallRecord, stored_mcp_server

log = get_logger("defect.agent")


class ReplayStateWriter:
    def __init__(
        self,
        session_id: str,
        store: AsyncStore | None,
        publish: Callable[[AgentEvent], Awaitable[None]],
    ) -> None:
        self._session_id = session_id
        self._store = store
        self._publish = publish
        self._failing = False

    async def update(self, **fields: Any) -> None:
        """Save changed session fields (`SessionRecord` names: title, mode, config, ...)."""
        if self._store is not None:
            await self._save(self._store.update(self._session_id, **fields))

    async def tool_call(self, record: ToolCallRecord) -> None:
        if self._store is not None:
            await self._save(self._store.upsert_tool_call(record))

    async def plan(self, plan: list[dict[str, Any]]) -> None:
        """The session's plan changed (`plan.py`): the store keeps the latest."""
        if self._store is not None:
            await self._save(self._store.save_plan(self._session_id, plan))

    async def write_back(self, history: list[Message]) -> None:
        """Compaction rewrote the history: the store keeps it (the transcript is untouched)."""
        if self._store is not None:
            with anyio.CancelScope(shield=True):
                await self._store.write_back(self._session_id, history)

    async def _save(self, write: Awaitable[Any]) -> None:
        try:
            with anyio.CancelScope(shield=True):
                await write
        except (StorageError, SessionNotFound) as exc:
            log.warning("store_write_failed", session_id=self._session_id, error=str(exc))
            if not self._failing:
                self._failing = True
                text = f"defect could not save this session's state: {exc}"
                await self._publish(Notice(text, level="warning"))
            return
        self._failing = False


def server_summary(spec: McpServerSpec) -> dict[str, Any]:
    """What the store keeps of an MCP server: enough to say which it was, no secrets
    (`store.stored_mcp_server`: env and header names only, arguments and URL redacted; the
    editor sends the servers again on load, so nothing is restarted from it)."""
    summary: dict[str, Any] = {"name": spec.name, "transport": spec.transport}
    if spec.transport == "stdio":
        summary["command"] = spec.command
        summary["args"] = list(spec.args)
        summary["env"] = [name for name, _ in spec.env]
    else:
        summary["url"] = spec.url
        summary["headers"] = [name for name, _ in spec.headers]
    return stored_mcp_server(summary)


class ToolCallSnapshots(StoredToolCalls):
    """What a front end replays of each tool call (`DefaultSession.tool_calls`): a read-only
    view of the records it is given, each turned into its `ToolCallSnapshot` when it is
    looked up (a long session has tens of thousands; a replay looks each up once)."""

    def __init__(self, records: dict[str, ToolCallRecord]) -> None:
        self._records = records

    def __getitem__(self, call_id: str) -> ToolCallSnapshot:
        r = self._records[call_id]
        return ToolCallSnapshot(
            tool_call_id=call_id,
            title=r.title,
            kind=r.kind,
            status=r.status,
            content=r.displays(),
            locations=r.location_values(),
            raw_input=r.raw_input,
            raw_output=r.raw_output,
        )

    def record(self, call_id: str) -> ToolCallRecord | None:
        """The stored record of `call_id` as it is (None: no such call), for a front end
        that writes what it shows straight from it (`defect_acp/cards.py`)."""
        return self._records.get(call_id)

    def get(self, call_id: str, default: Any = None) -> Any:  # Mapping's, without its raise
        return self[call_id] if call_id in self._records else default

    def __iter__(self) -> Iterator[str]:
        return iter(self._records)

    def __len__(self) -> int:
        return len(self._records)
