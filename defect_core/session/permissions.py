"""A session's permission memory and its open questions to the user.

Owns `SessionPermissions`: the session's "always" answers (`policy.PermissionRules`, restored
from the store — answers stored by an earlier version that the current rules would not grant
are dropped and named in `dropped_notice`, read by the user when the session opens — and
saved by the session, `state.py`, whenever the turn runner changes them), and the hand-off
of a `PermissionRequested` between the turn that asks and whoever answers it (the ACP bridge
calls `Session.resolve_permission`).

Invariants:
- Each question waits for exactly one answer, keyed by its tool call: an answer for a call
  that is not waiting (late, duplicated, unknown) is logged and ignored, never applied to
  another call.
- Closing the session answers every open question with None (cancelled), so no turn waits for
  ever on a client that went away.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio

from defect_core import policy
from defect_core.events import AgentEvent, PermissionRequested
from defect_core.log import get_logger

log = get_logger("defect.agent")


class SessionPermissions:
    def __init__(
        self,
        session_id: str,
        stored: dict[str, Any] | None,
        publish: Callable[[AgentEvent], Awaitable[None]],
    ) -> None:
        self._session_id = session_id
        restored = policy.restore_rules(stored)
        self.rules = restored.rules
        self.dropped = restored.dropped
        """Stored answers not restored (`dropped_notice` says so when the session opens)."""
        self._publish = publish
        self._pending: dict[str, tuple[anyio.Event, list[str | None]]] = {}

    async def ask(self, request: PermissionRequested) -> str | None:
        """Publish the question and wait for its answer (None: cancelled)."""
        event = anyio.Event()
        answer: list[str | None] = [None]
        self._pending[request.tool_call_id] = (event, answer)
        try:
            await self._publish(request)
            await event.wait()
        finally:
            self._pending.pop(request.tool_call_id, None)
        return answer[0]

    def resolve(self, tool_call_id: str, option_id: str | None) -> None:
        pending = self._pending.get(tool_call_id)
        if pending is None:
            log.warning(
                "permission_answer_ignored", session_id=self._session_id, tool_call_id=tool_call_id
            )
            return
        event, answer = pending
        answer[0] = option_id
        event.set()

    def cancel_all(self) -> None:
        """Answer every open question with None."""
        for event, answer in list(self._pending.values()):
            answer[0] = None
            event.set()

    def dropped_notice(self) -> str | None:
        """What the user reads about stored "always" answers that were not restored."""
        if not self.dropped:
            return None
        shown = ", ".join(f"`{d}`" for d in self.dropped[:10])
        more = f" and {len(self.dropped) - 10} more" if len(self.dropped) > 10 else ""
        return (
            f'This session remembered "always" answers that no longer apply, because defect '
            f"now remembers only what a command showed (see docs/permissions.md): {shown}"
            f"{more}. They were dropped; defect will ask again."
        )
