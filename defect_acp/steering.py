"""`_session/steering`: the user's message to a running turn, as the leading ACP agents take it.

Owns the extension request (the SDK hands it to `DefectAgent.ext_method` as
`session/steering`, the wire's leading underscore taken off), its answer and its
advertisement. The shapes are those of `claude-agent-acp` and `codex-acp`:

- `initialize` answers `_meta.steering.supported: true` (`INITIALIZE_META`);
- the request is `{sessionId, prompt: ContentBlock[], _meta?}`, its prompt checked as a
  `session/prompt`'s (`defect_acp/params.py`);
- the answer is `{outcome: "injected"}` when the running turn took it (stored first: a kill
  right after the answer loses nothing, `defect_core/session/steering.py`), delivered to the
  model at the turn's next safe point; `{outcome: "startedNewTurn"}` when no turn ran, after
  starting one with it, whose updates stream as a prompt's would and whose end is told by a
  `session_info_update` carrying `_meta.steering.turnEnded` (`{stopReason}`, or `{error}`):
  no `session/prompt` answer exists for it; `{outcome: "promptRequired", reason:
  "noRunningTurn"}` instead when the client opted in (`_meta.steering.idleBehavior:
  "promptRequired"`, in the request or in `initialize`'s params or client capabilities):
  nothing was kept, the client sends it as a `session/prompt`; `{outcome: "failed"}` when it
  could not be stored (a store that fails: the client still has the message).

Invariants:
- A steer is never dropped and never an error when the session exists: it lands in the running
  turn or in a turn of its own (or, opted in, goes back to the client), exactly one of them
  (`Steering.offer` decides under the turn's own rule). An unknown session is -32002.
- A turn a steer started is the session's only turn: it waits until the turn that refused the
  steer has ended (`Steering.wait_idle`), and a prompt sent meanwhile is refused as any prompt
  during a turn is.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from acp import RequestError
from acp import schema as s
from pydantic import ValidationError

from defect_acp import projection
from defect_acp.updates import SessionPump
from defect_core.log import get_logger
from defect_core.model import ContentBlock
from defect_core.session.protocol import AgentError, Session, StorageError, TurnInProgress

log = get_logger("defect.acp")

METHOD = "session/steering"
"""The request's name as the SDK hands it to `ext_method` (on the wire: `_session/steering`)."""
INITIALIZE_META: dict[str, Any] = {"steering": {"supported": True}}
"""What `initialize` answers in its `_meta`."""
PROMPT_REQUIRED = "promptRequired"


def opts_in(*metas: Any) -> bool:
    """Whether any of these `_meta` objects asks for `promptRequired` when no turn runs."""
    for meta in metas:
        steering = meta.get("steering") if isinstance(meta, dict) else None
        if isinstance(steering, dict) and steering.get("idleBehavior") == PROMPT_REQUIRED:
            return True
    return False


class SteeringRoute:
    """Serves `_session/steering` for one connection."""

    def __init__(
        self,
        session_for: Callable[[str], Session],
        pump_of: Callable[[str], SessionPump | None],
        send_update: Callable[[str, Any], Awaitable[None]],
    ) -> None:
        self._session_for = session_for
        """The open session of an id (-32002 for an unknown one)."""
        self._pump_of = pump_of
        self._send_update = send_update
        self._client_opted_in = False
        """The client asked, at `initialize`, for `promptRequired` when no turn runs."""
        self._turns: set[asyncio.Task[None]] = set()

    def initialized(self, steering: Any, capabilities: s.ClientCapabilities | None) -> None:
        """What `initialize` said: its `_meta.steering` (`steering`), or its capabilities'."""
        caps_meta = capabilities.field_meta if capabilities is not None else None
        self._client_opted_in = opts_in({"steering": steering}, caps_meta)

    async def handle(self, params: dict[str, Any]) -> dict[str, Any]:
        session = self._session_for(str(params.get("sessionId")))
        blocks = _blocks(params)
        try:
            if await session.steering.offer(blocks):
                return {"outcome": "injected"}
        except StorageError as exc:
            log.warning("steer_not_stored", session_id=session.id, error=str(exc))
            return {"outcome": "failed", "reason": str(exc).splitlines()[0]}
        if self._client_opted_in or opts_in(params.get("_meta")):
            return {"outcome": PROMPT_REQUIRED, "reason": "noRunningTurn"}
        await session.steering.wait_idle()
        pump = self._pump_of(session.id)
        if pump is not None:  # the end of the turn that refused the steer is counted first
            await pump.drained()
        task = asyncio.create_task(self._run(session, blocks), name=f"steered-{session.id}")
        self._turns.add(task)
        task.add_done_callback(self._turns.discard)
        await asyncio.sleep(0)  # the turn has begun before the answer leaves
        return {"outcome": "startedNewTurn"}

    async def _run(self, session: Session, blocks: list[ContentBlock]) -> None:
        """The turn a steer started, to its end; the end told as a `session_info_update`
        once every update of the turn has left."""
        pump = self._pump_of(session.id)
        ended_before = pump.turns_ended if pump is not None else 0
        ended: dict[str, Any]
        try:
            while True:
                try:
                    stop = await session.run_turn(blocks)
                    break
                except TurnInProgress:  # a prompt came first: its turn takes the message
                    if await session.steering.offer(blocks):
                        return
                    await session.steering.wait_idle()
            ended = {"stopReason": stop}
        except AgentError as err:
            log.warning("steered_turn_failed", session_id=session.id, error=str(err))
            ended = {"error": str(err).splitlines()[0] if str(err) else type(err).__name__}
        if pump is not None:
            await pump.wait_turn_ended(ended_before + 1)
            if "stopReason" in ended and pump.last_usage is not None:
                ended["usage"] = projection.usage_meta(pump.last_usage)
        update = s.SessionInfoUpdate(
            session_update="session_info_update", field_meta={"steering": {"turnEnded": ended}}
        )
        await self._send_update(session.id, update)

    async def aclose(self, grace: float) -> None:
        """Let the turns steers started end (the process cancels running turns before it
        closes), at most `grace` seconds; then stop what is left."""
        if not self._turns:
            return
        _, left = await asyncio.wait(set(self._turns), timeout=grace)
        for task in left:
            task.cancel()
        await asyncio.gather(*left, return_exceptions=True)


def _blocks(params: dict[str, Any]) -> list[ContentBlock]:
    """The request's prompt as core blocks (checked first as a prompt's: `params.py`)."""
    try:
        request = s.PromptRequest.model_validate(
            {"sessionId": params.get("sessionId"), "prompt": params.get("prompt")}
        )
        return projection.prompt_to_blocks(request.prompt)
    except ValidationError as exc:
        raise RequestError(-32602, f"Invalid params: {exc.errors()[0]['msg']}") from None
    except projection.UnsupportedContent as exc:
        raise RequestError(-32602, str(exc)) from None
