"""`SessionPlan`: a session's current plan — what `update_plan` last sent, kept and shown.

Owns the session's latest plan, what the `update_plan` tool (`tools/plan.py`, offered by
`toolset.py`) replaces it with (`replace`), and the plan's JSON form in the store
(`plan_to_json` / `plan_from_json`: the `session_plans` table, migration 4 in
`defect_core/store/migrations.py`).

Invariants:
- A new plan is saved before it is published: a session killed right after the user saw a
  plan loads with that plan, and `session/load` shows it again (`defect_acp/updates.py`).
- Only the latest plan is kept: it is the whole plan each time, so it is all a replay needs.
- The plan follows the conversation: when `/rewind` moves the session to another branch, the
  plan becomes the last one `update_plan` set on that branch (`follow`), none if it set none.
- A stored plan that cannot be read (a damaged row, or a shape a newer defect wrote) is logged
  and dropped, never a reason to refuse the session: the plan is a view, the messages are the
  truth. A plan that cannot be saved is a warning to the user (`persistence.py`), never the
  end of the turn.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, get_args

from defect_core.errors import StorageError
from defect_core.events import AgentEvent, PlanEntry, PlanPriority, PlanStatus, PlanUpdated
from defect_core.log import get_logger
from defect_core.model import Message, ToolResultBlock, ToolUseBlock
from defect_core.store import AsyncStore
from defect_core.tools.plan import UPDATE_PLAN

log = get_logger("defect.agent")

_PRIORITIES = frozenset(get_args(PlanPriority))
_STATUSES = frozenset(get_args(PlanStatus))


class SessionPlan:
    def __init__(
        self,
        session_id: str,
        save: Callable[[list[dict[str, Any]]], Awaitable[None]],
        publish: Callable[[AgentEvent], Awaitable[None]],
    ) -> None:
        self._session_id = session_id
        self._save = save
        """Writes the plan's JSON (`ReplayStateWriter.plan`, `persistence.py`)."""
        self._publish = publish
        self.entries: tuple[PlanEntry, ...] = ()
        """The current plan (empty: none)."""

    async def replace(self, entries: tuple[PlanEntry, ...]) -> None:
        self.entries = entries
        await self._save(plan_to_json(entries))
        await self._publish(PlanUpdated(entries))

    async def follow(self, transcript: Sequence[Message]) -> None:
        """Take the plan of the branch `transcript` is (after a rewind); saved and shown when
        it differs."""
        entries = plan_of(transcript, self._session_id)
        if entries != self.entries:
            await self.replace(entries)

    async def load(self, store: AsyncStore) -> None:
        """Read the stored plan (a loaded session's replay shows it)."""
        try:
            data = await store.plan(self._session_id)
        except StorageError as exc:
            log.warning("plan_not_loaded", session_id=self._session_id, error=str(exc))
            return
        self.entries = plan_from_json(data, self._session_id)


def plan_of(transcript: Sequence[Message], session_id: str = "") -> tuple[PlanEntry, ...]:
    """The plan a branch ends with: the input of its last `update_plan` call that was not
    refused (`()`: none)."""
    refused = {
        b.tool_use_id
        for m in transcript
        for b in m.content
        if isinstance(b, ToolResultBlock) and b.is_error
    }
    for message in reversed(transcript):
        kept = [
            b
            for b in message.content
            if isinstance(b, ToolUseBlock)
            and b.name == UPDATE_PLAN
            and b.id not in refused
            and isinstance(b.input, dict)
        ]
        if kept:
            return plan_from_json(kept[-1].input.get("entries", []), session_id)
    return ()


def plan_to_json(entries: tuple[PlanEntry, ...]) -> list[dict[str, Any]]:
    return [{"content": e.content, "priority": e.priority, "status": e.status} for e in entries]


def plan_from_json(data: list[Any], session_id: str = "") -> tuple[PlanEntry, ...]:
    """The plan a store row holds; `()` (logged) when it is not one this defect can read."""
    try:
        entries = tuple(
            PlanEntry(str(item["content"]), item["priority"], item["status"]) for item in data
        )
    except (KeyError, TypeError) as exc:
        log.warning("stored_plan_unreadable", session_id=session_id, error=repr(exc))
        return ()
    if any(e.priority not in _PRIORITIES or e.status not in _STATUSES for e in entries):
        log.warning("stored_plan_unreadable", session_id=session_id, error="unknown value")
        return ()
    return entries
