"""The turn runner: one user prompt → model requests and tool calls → a stop reason.

Owns the loop of a turn and the order of its phases (the package docstring,
`defect_core/turn/__init__.py`, lists them and the hook points they leave): it commits what
becomes history and decides when the turn ends. What each phase does inside lives beside it:
the model request in `request.py`, the tool calls in `call_steps.py`.

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
- At most `max_turn_requests` model requests per round, and at most `max_rounds` rounds: a
  turn starts a new round only when a `before_turn_end` hook sends it round again (a goal's
  "keep working"), and each round's note is committed as a user message before it starts.
- Hooks (`TurnDeps.hooks`) are asked at their phases and never stop a turn by failing: a
  `user_prompt` denial ends the turn `refusal` before any request, with the reason shown;
  their context is committed with the prompt, or as a user-side note before a request.
- Only the prompt starts a turn: every other user message the turn commits is tool results
  or marked as inside it (`Message.inside_turn`: a steer, or a note of hooks, finished
  background tasks or a new round), so `/rewind` offers only the prompt as a point to go
  back to, and going back before it takes the whole turn away.
- The runner knows no wire format and no front end: it speaks `LlmProvider`, `Tool` and
  `AgentEvent`, and reaches its session only through `TurnDeps`.
"""

from __future__ import annotations

import anyio

from defect_core.errors import SessionNotFound, StorageError, TurnError
from defect_core.events import MessageCommitted, Notice, UsageReported, UserPromptCommitted
from defect_core.hooks.engine import Verdict
from defect_core.integrity import drop_malformed_tool_uses
from defect_core.model import ContentBlock, Message, TextBlock, ToolUseBlock
from defect_core.provenance import stamp_origin
from defect_core.providers.base import Completed
from defect_core.turn import call_steps as tool_calls
from defect_core.turn.call_steps import ToolCall
from defect_core.turn.deps import TurnConfig, TurnDeps, TurnResult
from defect_core.turn.request import context_used, fit_context_window, stop_reason, stream_reply


class TurnRunner:
    """Runs one turn of a session, with what the session gives it (`TurnDeps`)."""

    def __init__(self, deps: TurnDeps) -> None:
        self._deps = deps

    async def run(self, prompt: list[ContentBlock], config: TurnConfig) -> TurnResult:
        result = TurnResult(stop_reason="end_turn")
        if not await self._commit_prompt(prompt):
            result.stop_reason = "refusal"
            return result
        paused = False  # the last reply paused (`pause_turn`): the next request continues it
        rounds, round_requests = 1, 0
        while True:
            if round_requests >= config.max_turn_requests:
                result.stop_reason = "max_turn_requests"
                return result
            result.requests += 1
            round_requests += 1
            await fit_context_window(self._deps, config)
            if not paused:
                await self._before_request(result.requests)
            rewrites = self._deps.compactor.rewrites if self._deps.compactor else 0
            completed = await stream_reply(self._deps, config, paused=paused)
            self._account(completed, result, rewrites)
            calls = await self._commit_reply(_runnable(completed, config), config)
            paused = completed.stop_reason == "pause_turn" and not calls
            # `_run_tools` is entered with no suspension point after `_commit_reply`, so a
            # cancel lands inside its `try`, whose `finally` commits a result for every call.
            if calls:
                await self._run_tools(calls, config)
                continue
            if paused:
                continue  # the API paused a long server-tool turn: send it back as it is
            result.stop_reason = stop_reason(completed.stop_reason)
            if result.stop_reason != "end_turn":
                return result
            steers = self._deps.steers
            if steers is not None and steers.waiting():
                continue  # the user wrote meanwhile: one more request carries it
            verdict = await self._before_turn_end(completed.message, rounds)
            if verdict.stop is not None:
                result.stop_reason = verdict.stop
                return result
            if not verdict.denied:
                if steers is None or steers.close():
                    return result
                continue  # a steer came while the hooks ran
            if rounds >= config.max_rounds:
                result.stop_reason = "max_turn_requests"
                return result
            rounds, round_requests = rounds + 1, 0
            await self._next_round(verdict)

    # --- the phases, in order ----------------------------------------------------------------

    async def _commit_prompt(self, prompt: list[ContentBlock]) -> bool:
        """Commit the prompt, with what the `user_prompt` hooks add; False (nothing
        committed, the reason shown) when a hook refuses it."""
        hooks = self._deps.hooks
        if hooks is not None:
            text = "\n".join(b.text for b in prompt if isinstance(b, TextBlock))
            verdict = await hooks.fire("user_prompt", {"prompt": text})
            if verdict.denied:
                await self._deps.publish(
                    Notice(f"The prompt was refused by a hook: {verdict.reason}", "warning")
                )
                return False
            if verdict.context:
                prompt = [*prompt, hook_note("user_prompt", verdict.context)]
        user_message = Message(role="user", content=tuple(prompt))
        with anyio.CancelScope(shield=True):
            await self._save(user_message)
            await self._deps.publish(UserPromptCommitted(user_message))
        return True

    async def _before_request(self, number: int) -> None:
        """The notes waiting for the model (finished background tasks) and what the
        `before_request` hooks add, committed as one user-side note: after the last results
        message, so the outbound copy merges it behind them, never between a call and its
        result."""
        await self._deliver_steers()
        blocks: list[ContentBlock] = []
        if self._deps.hooks is not None:
            verdict = await self._deps.hooks.fire("before_request", {"request": number})
            if verdict.context:
                blocks.append(hook_note("before_request", verdict.context))
        if self._deps.notes is not None:  # taken with no await before their shielded commit
            blocks = [*self._deps.notes(), *blocks]
        if blocks:
            await self._commit_note(*blocks)

    async def _deliver_steers(self) -> None:
        """The user's messages sent since the last commit, as one user message in the order
        they came (those sent while tools ran joined their results: `_commit_results`): after
        the last results message (the outbound copy merges them behind the results), never
        between a call and its result."""
        steers = self._deps.steers
        if steers is None or not steers.waiting():
            return
        with anyio.CancelScope(shield=True):  # taken and committed as one step
            message = Message(role="user", content=tuple(steers.take()), inside_turn="steer")
            await self._save(message)
            await self._deps.publish(MessageCommitted(message))
            await steers.delivered()

    async def _before_turn_end(self, reply: Message, rounds: int) -> Verdict:
        """The `before_turn_end` hooks: a denial sends the turn round again."""
        if self._deps.hooks is None:
            return Verdict()
        text = "".join(b.text for b in reply.content if isinstance(b, TextBlock))
        return await self._deps.hooks.fire(
            "before_turn_end", {"stop_reason": "end_turn", "round": rounds, "last_message": text}
        )

    async def _next_round(self, verdict: Verdict) -> None:
        """Show the round's announcement and commit its note: why the turn goes on."""
        if verdict.announce:
            await self._deps.publish(Notice(verdict.announce))
        blocks = [TextBlock(text=verdict.reason or "Keep working: a hook asked to go on.")]
        if verdict.context:
            blocks.append(hook_note("before_turn_end", verdict.context))
        await self._commit_note(*blocks)

    async def _commit_note(self, *blocks: ContentBlock) -> None:
        note = Message(role="user", content=blocks, inside_turn="note")
        with anyio.CancelScope(shield=True):
            await self._save(note)
            await self._deps.publish(MessageCommitted(note))

    def _account(self, completed: Completed, result: TurnResult, rewrites: int) -> None:
        """Add the reply's usage to the turn's, and tell the history its real input size -
        unless a compaction rewrote the history while the request ran (`rewrites` changed):
        that size is then the old history's."""
        result.usage = result.usage + completed.usage
        compactor = self._deps.compactor
        if compactor is not None and compactor.rewrites != rewrites:
            return
        self._deps.history.record_input_tokens(completed.usage.prompt_tokens)
        if compactor is not None:
            compactor.calibrated()

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
        steers = self._deps.steers
        scope = anyio.CancelScope()  # a steer may stop the calls running (interrupt_tools)
        try:
            for call in calls:
                await tool_calls.decide(self._deps, call, config)
            with scope:
                if steers is not None:
                    steers.tools_running(scope)
                async with anyio.create_task_group() as tg:
                    for call in calls:
                        if call.approved:
                            tg.start_soon(
                                tool_calls.execute, self._deps, call, config.context_window
                            )
        finally:
            if steers is not None:
                steers.tools_running(None)
            with anyio.CancelScope(shield=True):
                await self._commit_results(calls, steered=scope.cancelled_caught)

    async def _commit_results(self, calls: list[ToolCall], *, steered: bool) -> None:
        """Settle the calls that did not finish (cancelled; `steered`: by a steer, under
        `steering.interrupt_tools`), then commit every result as one user message, in
        `tool_use` order."""
        reason = tool_calls.STEERED_RESULT_TEXT if steered else ""
        for call in calls:
            if call.result is None:
                await tool_calls.settle_cancelled(self._deps, call, reason)
        # The steers sent meanwhile join the results, after them: this is the safe point,
        # and the stored message is the one sent (`/rewind` reads it as the prompt's turn).
        steers = self._deps.steers
        said = steers.take() if steers is not None and steers.waiting() else []
        results = Message(
            role="user",
            content=(*(c.result for c in calls if c.result is not None), *said),
        )
        await self._save(results)
        await self._deps.publish(MessageCommitted(results))
        if said and steers is not None:
            await steers.delivered()

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


def hook_note(event: str, text: str) -> TextBlock:
    """What hooks add to the model's input, marked as theirs."""
    return TextBlock(text=f'<hook-context event="{event}">\n{text}\n</hook-context>')


def _runnable(completed: Completed, config: TurnConfig) -> Message:
    """The reply as it may become history: malformed tool uses dropped, and none at all when
    `max_tokens` cut the reply (a tool input cut short must never run; what was said stays);
    its thinking stamped with the model that signed it (`provenance.py`)."""
    message = drop_malformed_tool_uses(completed.message)
    if config.selection is not None:
        message = stamp_origin(message, config.selection)
    if completed.stop_reason == "max_tokens" and message.tool_uses():
        message = Message(
            role="assistant",
            content=tuple(b for b in message.content if not isinstance(b, ToolUseBlock)),
        )
    return message
