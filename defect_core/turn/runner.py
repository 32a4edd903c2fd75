"""The turn runner: one user prompt → model requests and tool calls → a stop reason.

Owns the loop of a turn and the order of its phases (the package docstring,
`defect_core/turn/__init__.py`, lists them and the hook points they leave): it commits what
becomes history and decides when the turn ends. What each phase does inside lives beside it:
the model request in `request.py`, the tool calls in `calls.py`.

Invariants:
- Only a `Completed` reply becomes history (docs/architecture.md, Integrity): a failed, cut or
  stalled stream leaves no assistant message and runs no tool. What was streamed stays shown.
- Commits are shielded from cancellation: a cancel never leaves a half-written message.
  Committing an assistant message and announcing its tool calls is one shielded step
  (`_commit_reply`), and from there each call is owed exactly one final status and one
  result (`calls.finish`); on cancel the calls not finished get an error result, so the
  results message is still committed whole, whatever moment the cancel lands at (only a kill
  of the process, or a store that fails, can leave an orphan `tool_use`, which the outbound
  repair handles).
- A message the store cannot save stops the turn with `TurnError` naming the reason
  (`kind: storage`): the turn never goes on past a message that is not durable.
- At most `max_turn_requests` model requests per turn.
- The runner knows no wire format and no front end: it speaks `LlmProvider`, `Tool` and
  `AgentEvent`, and reaches its session only through `TurnDeps`.
"""

from __future__ import annotations

import anyio

from defect_core.errors import SessionNotFound, StorageError, TurnError
from defect_core.events import MessageCommitted, UsageReported, UserPromptCommitted
from defect_core.integrity import drop_malformed_tool_uses
from defect_core.model import ContentBlock, Message, ToolUseBlock
from defect_core.providers.base import Completed
from defect_core.turn import calls as tool_calls
from defect_core.turn.calls import ToolCall
from defect_core.turn.deps import TurnConfig, TurnDeps, TurnResult
from defect_core.turn.request import context_used, fit_context_window, stop_reason, stream_reply


class TurnRunner:
    """Runs one turn of a session, with what the session gives it (`TurnDeps`)."""

    def __init__(self, deps: TurnDeps) -> None:
        self._deps = deps

    async def run(self, prompt: list[ContentBlock], config: TurnConfig) -> TurnResult:
        result = TurnResult(stop_reason="end_turn")
        await self._commit_prompt(prompt)
        paused = False  # the last reply paused (`pause_turn`): the next request continues it
        while True:
            if result.requests >= config.max_turn_requests:
                result.stop_reason = "max_turn_requests"
                return result
            result.requests += 1
            await fit_context_window(self._deps, config)
            completed = await stream_reply(self._deps, config, paused=paused)
            self._account(completed, result)
            calls = await self._commit_reply(_runnable(completed), config)
            paused = completed.stop_reason == "pause_turn" and not calls
            # `_run_tools` is entered with no suspension point after `_commit_reply`, so a
            # cancel lands inside its `try`, whose `finally` commits a result for every call.
            if calls:
                await self._run_tools(calls, config)
                continue
            if paused:
                continue  # the API paused a long server-tool turn: send it back as it is
            result.stop_reason = stop_reason(completed.stop_reason)
            return result

    # --- the phases, in order ----------------------------------------------------------------

    async def _commit_prompt(self, prompt: list[ContentBlock]) -> None:
        user_message = Message(role="user", content=tuple(prompt))
        with anyio.CancelScope(shield=True):
            await self._save(user_message)
            await self._deps.publish(UserPromptCommitted(user_message))

    def _account(self, completed: Completed, result: TurnResult) -> None:
        """Add the reply's usage to the turn's, and tell the history its real input size."""
        result.usage = result.usage + completed.usage
        self._deps.history.record_input_tokens(completed.usage.prompt_tokens)
        if self._deps.compactor is not None:
            self._deps.compactor.calibrated()

    async def _commit_reply(self, message: Message, config: TurnConfig) -> list[ToolCall]:
        """Commit the assistant message, report the window's use and announce its tool calls,
        as one shielded step: once the message is history, each call is owed a result."""
        calls = [tool_calls.prepare(self._deps, use) for use in message.tool_uses()]
        with anyio.CancelScope(shield=True):
            if message.content:
                await self._save(message)
                await self._deps.publish(MessageCommitted(message))
            used = context_used(self._deps, config)
            await self._deps.publish(UsageReported(used=used, size=config.context_window))
            for call in calls:
                await tool_calls.announce(self._deps, call)
        return calls

    async def _run_tools(self, calls: list[ToolCall], config: TurnConfig) -> None:
        """Decide each announced call in order, then run the approved ones concurrently;
        whatever happens, the results are committed (`_commit_results`)."""
        try:
            for call in calls:
                await tool_calls.decide(self._deps, call, config)
            async with anyio.create_task_group() as tg:
                for call in calls:
                    if call.approved:
                        tg.start_soon(tool_calls.execute, self._deps, call, config.context_window)
        finally:
            with anyio.CancelScope(shield=True):
                await self._commit_results(calls)

    async def _commit_results(self, calls: list[ToolCall]) -> None:
        """Settle the calls that did not finish (cancelled), then commit every result as one
        user message, in `tool_use` order."""
        for call in calls:
            if call.result is None:
                await tool_calls.settle_cancelled(self._deps, call)
        results = Message(
            role="user", content=tuple(c.result for c in calls if c.result is not None)
        )
        await self._save(results)
        await self._deps.publish(MessageCommitted(results))

    # --- commits ----------------------------------------------------------------------------

    async def _save(self, message: Message) -> None:
        """Commit `message`; a store that cannot take it stops the turn with the reason (the
        turn never goes on past a message that is not saved, and the client is told why)."""
        try:
            await self._deps.commit(message)
        except (StorageError, SessionNotFound) as exc:  # not found: deleted by another process
            raise TurnError(
                f"{exc} (the turn was stopped: its conversation could not be saved)",
                {"kind": "storage", "retryable": True},
            ) from exc


def _runnable(completed: Completed) -> Message:
    """The reply as it may become history: malformed tool uses dropped, and none at all when
    `max_tokens` cut the reply (a tool input cut short must never run; what was said stays)."""
    message = drop_malformed_tool_uses(completed.message)
    if completed.stop_reason == "max_tokens" and message.tool_uses():
        message = Message(
            role="assistant",
            content=tuple(b for b in message.content if not isinstance(b, ToolUseBlock)),
        )
    return message
