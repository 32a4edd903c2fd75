"""The turn runner: one user prompt → model requests and tool calls → a stop reason.

Owns the loop docs/architecture.md "The life of a turn" describes: commit the prompt → build the
request through
`repair_outbound` → stream (deltas forwarded at once) → commit the assistant message →
announce each tool call → decide permissions (policy, or ask the user) → run the approved
calls concurrently → commit all results as one user message in `tool_use` order → repeat,
within `max_turn_requests`.

Invariants:
- Every request is built from `repair_outbound(history.snapshot())`, never from anything else.
- Only a `Completed` stream becomes history (docs/architecture.md, Integrity): a failed, cut or
  stalled
  stream leaves no assistant message and runs no tool. What was streamed stays shown.
- Commits are shielded from cancellation: a cancel never leaves a half-written message.
  Committing an assistant message and announcing its tool calls is one shielded step, and
  from there each call is owed exactly one final status and one result: `_finish` sets the
  result and reports the final `completed`/`failed` update as one step a cancel cannot split,
  and on cancel the calls not finished get an error result, so the results message is still
  committed whole, whatever moment the cancel lands at (only a kill of the process, or a
  store that fails, can leave an orphan `tool_use`, which the outbound repair handles).
- A message the store cannot save stops the turn with `TurnError` naming the reason
  (`kind: storage`): the turn never goes on past a message that is not durable.
- Retries (bounded, exponential backoff with jitter or the server's `retry-after`) happen only
  before any output of that attempt was forwarded; the backoff sleep is cancellable.
- The runner knows no wire format and no front end: it speaks `LlmProvider`, `Tool` and
  `AgentEvent`.
"""

from __future__ import annotations

import contextlib
import json
import random
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio

from defect_core import policy
from defect_core.compaction import Compactor
from defect_core.errors import SessionNotFound, StorageError, TurnError
from defect_core.events import (
    AgentEvent,
    AgentTextDelta,
    AgentThoughtDelta,
    MessageCommitted,
    PermissionRequested,
    TextDisplay,
    ToolCallStarted,
    ToolCallUpdated,
    TurnStopReason,
    UsageReported,
    UserPromptCommitted,
)
from defect_core.history import History
from defect_core.integrity import drop_malformed_tool_uses, repair_outbound
from defect_core.log import get_logger
from defect_core.model import (
    ContentBlock,
    JsonPart,
    Message,
    ResultPart,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from defect_core.providers.base import (
    CONTEXT_OVERFLOW,
    Completed,
    LlmProvider,
    ModelRequest,
    ProviderError,
    TextDelta,
    ThinkingDelta,
    ToolInputDelta,
    ToolUseStarted,
    Usage,
)
from defect_core.tools.base import (
    Tool,
    ToolCallView,
    ToolContext,
    ToolError,
    ToolOutput,
    ToolRegistry,
)

log = get_logger("defect.turn")

MAX_RESULT_CHARS = 100_000
"""A tool result larger than this is cut with a marker before it reaches the model."""

CANCELLED_RESULT_TEXT = "tool call cancelled by the user before it finished"

Publish = Callable[[AgentEvent], Awaitable[None]]
Commit = Callable[[Message], Awaitable[None]]
PermissionWaiter = Callable[[PermissionRequested], Awaitable[str | None]]


@dataclass(frozen=True, slots=True)
class TurnConfig:
    """Everything a turn runs with, snapshotted when it starts."""

    session_id: str
    model: str
    system_prompt: str
    mode: str
    max_tokens: int
    max_turn_requests: int
    thinking_budget: int | None
    context_window: int
    retries: int = 4
    retry_base_delay: float = 1.0
    retry_max_delay: float = 30.0


@dataclass
class TurnResult:
    stop_reason: TurnStopReason
    usage: Usage = field(default_factory=Usage)
    requests: int = 0


@dataclass
class _Call:
    use: ToolUseBlock
    tool: Tool | None
    view: ToolCallView
    args: dict[str, Any]
    result: ToolResultBlock | None = None
    """Set, with the final status reported, exactly once (`TurnRunner._finish`)."""
    approved: bool = False


class TurnRunner:
    """Runs turns for one session. Stateless between turns except what it is given."""

    def __init__(
        self,
        *,
        history: History,
        provider: LlmProvider,
        tools: ToolRegistry,
        publish: Publish,
        commit: Commit,
        ask_permission: PermissionWaiter,
        make_context: Callable[[str], ToolContext],
        rules: policy.PermissionRules,
        on_rules_changed: Callable[[], Awaitable[None]],
        on_cancel_requested: Callable[[], None],
        context: Compactor | None = None,
    ) -> None:
        self._context = context
        self._history = history
        self._provider = provider
        self._tools = tools
        self._publish = publish
        self._commit = commit
        self._ask_permission = ask_permission
        self._make_context = make_context
        self._rules = rules
        self._rules_changed = on_rules_changed
        self._cancel = on_cancel_requested

    async def run(self, prompt: list[ContentBlock], config: TurnConfig) -> TurnResult:
        result = TurnResult(stop_reason="end_turn")
        user_message = Message(role="user", content=tuple(prompt))
        with anyio.CancelScope(shield=True):
            await self._save(user_message)
            await self._publish(UserPromptCommitted(user_message))

        while True:
            if result.requests >= config.max_turn_requests:
                result.stop_reason = "max_turn_requests"
                return result
            result.requests += 1
            await self._manage_context(config)
            completed = await self._request(config)
            result.usage = result.usage + completed.usage
            self._history.record_input_tokens(completed.usage.prompt_tokens)
            if self._context is not None:
                self._context.calibrated()

            message = drop_malformed_tool_uses(completed.message)
            if completed.stop_reason == "max_tokens" and message.tool_uses():
                # A tool input cut by max_tokens must never run; keep what was said.
                message = Message(
                    role="assistant",
                    content=tuple(b for b in message.content if not isinstance(b, ToolUseBlock)),
                )
            calls = [self._prepare(use) for use in message.tool_uses()]
            # One shielded step: once the assistant message is history, each of its tool calls
            # is announced and owes a result. `_run_tools` is entered with no suspension point
            # in between, so a cancel lands inside its `try`, whose `finally` pays that debt.
            with anyio.CancelScope(shield=True):
                if message.content:
                    await self._save(message)
                    await self._publish(MessageCommitted(message))
                used = self._used(config)
                await self._publish(UsageReported(used=used, size=config.context_window))
                for call in calls:
                    await self._announce(call)
            if calls:
                await self._run_tools(calls, config)
                continue
            if completed.stop_reason == "pause_turn":
                continue
            result.stop_reason = _stop_reason(completed.stop_reason)
            return result

    # --- context ----------------------------------------------------------------------------

    async def _manage_context(self, config: TurnConfig) -> None:
        """Compact if the window is filling up; a failure here never stops the turn."""
        if self._context is None:
            return
        try:
            await self._context.before_request(
                model=config.model,
                system=config.system_prompt,
                tools=self._tools.specs(),
                max_tokens=config.max_tokens,
                window=config.context_window,
            )
        except anyio.get_cancelled_exc_class():
            raise
        except Exception:
            log.exception("context_management_failed", session_id=config.session_id)

    async def _shrink(self, config: TurnConfig) -> bool:
        """The model refused the prompt as too long: summarise now; True if it did."""
        if self._context is None:
            return False
        report = await self._context.compact(
            model=config.model,
            system=config.system_prompt,
            tools=self._tools.specs(),
            max_tokens=config.max_tokens,
            window=config.context_window,
            reason="the model said the prompt is too long",
        )
        return report is not None

    def _used(self, config: TurnConfig) -> int:
        if self._context is None:
            return self._history.token_estimate() or 0
        return self._context.estimate(config.system_prompt, self._tools.specs())

    # --- the model request ------------------------------------------------------------------

    def _build_request(self, config: TurnConfig) -> ModelRequest:
        return ModelRequest(
            model=config.model,
            system=config.system_prompt,
            messages=repair_outbound(self._history.snapshot()),
            tools=self._tools.specs(),
            max_tokens=config.max_tokens,
            thinking_budget=config.thinking_budget,
        )

    async def _request(self, config: TurnConfig) -> Completed:
        request = self._build_request(config)
        attempt = 0
        compacted = False
        while True:
            forwarded = False
            try:
                # aclosing: a stream left early (cancel, failure) closes its response now.
                async with contextlib.aclosing(self._provider.stream(request)) as stream:
                    async for chunk in stream:
                        if isinstance(chunk, TextDelta):
                            forwarded = True
                            await self._publish(AgentTextDelta(chunk.text))
                        elif isinstance(chunk, ThinkingDelta):
                            forwarded = True
                            await self._publish(AgentThoughtDelta(chunk.text))
                        elif isinstance(chunk, ToolUseStarted | ToolInputDelta):
                            pass  # not shown to the user: a retry after it stays invisible
                        elif isinstance(chunk, Completed):
                            log.debug(
                                "model_call_completed",
                                session_id=config.session_id,
                                stop_reason=chunk.stop_reason,
                                request_id=chunk.request_id,
                                attempt=attempt + 1,
                            )
                            return chunk
                raise ProviderError(
                    "the model's stream ended without a complete message",
                    kind="stream_incomplete",
                    retryable=True,
                )
            except ProviderError as err:
                log.warning(
                    "model_call_failed",
                    session_id=config.session_id,
                    attempt=attempt + 1,
                    error=err.message,
                    kind=err.kind,
                    status=err.status,
                    request_id=err.request_id,
                    retryable=err.retryable,
                    output_forwarded=forwarded,
                )
                if err.retryable and not forwarded and attempt < config.retries:
                    delay = _backoff(attempt, err.retry_after, config)
                    attempt += 1
                    await anyio.sleep(delay)
                    continue
                if err.kind == CONTEXT_OVERFLOW and not compacted and await self._shrink(config):
                    compacted = True  # once: a second refusal is reported as it is
                    request = self._build_request(config)
                    continue
                data = err.to_data()
                if forwarded and err.retryable:
                    data["partialOutputShown"] = True
                raise TurnError(err.message, data, auth=err.kind == "auth_required") from err

    # --- commits ----------------------------------------------------------------------------

    async def _save(self, message: Message) -> None:
        """Commit `message`; a store that cannot take it stops the turn with the reason (the
        turn never goes on past a message that is not saved, and the client is told why)."""
        try:
            await self._commit(message)
        except (StorageError, SessionNotFound) as exc:  # not found: deleted by another process
            raise TurnError(
                f"{exc} (the turn was stopped: its conversation could not be saved)",
                {"kind": "storage", "retryable": True},
            ) from exc

    # --- tools ------------------------------------------------------------------------------

    async def _announce(self, call: _Call) -> None:
        await self._publish(
            ToolCallStarted(
                tool_call_id=call.use.id,
                name=call.use.name,
                title=call.view.title,
                kind=call.view.kind,
                raw_input=call.use.input,
                locations=call.view.locations,
                content=call.view.content,
            )
        )

    async def _run_tools(self, calls: list[_Call], config: TurnConfig) -> None:
        """Decide and run announced calls; whatever happens, each ends with exactly one final
        status and one result, and the results are committed as one message."""
        try:
            for call in calls:
                await self._decide(call, config)
            async with anyio.create_task_group() as tg:
                for call in calls:
                    if call.approved:
                        tg.start_soon(self._execute, call, config.context_window)
        finally:
            with anyio.CancelScope(shield=True):
                for call in calls:
                    if call.result is None:
                        await self._finish(
                            call,
                            _error_result(call.use.id, CANCELLED_RESULT_TEXT),
                            ToolCallUpdated(
                                call.use.id, status="failed", content=(TextDisplay("Cancelled."),)
                            ),
                        )
                results = Message(
                    role="user", content=tuple(c.result for c in calls if c.result is not None)
                )
                await self._save(results)
                await self._publish(MessageCommitted(results))

    async def _finish(self, call: _Call, result: ToolResultBlock, final: ToolCallUpdated) -> None:
        """Give `call` its result and report its final status, as one step a cancel cannot
        split: the result and the update the client sees go together, so the `finally` of
        `_run_tools` never leaves a call unreported nor reports one twice."""
        call.result = result
        with anyio.CancelScope(shield=True):
            await self._publish(final)

    def _prepare(self, use: ToolUseBlock) -> _Call:
        tool = self._tools.get(use.name)
        if tool is None:
            view = ToolCallView(title=use.name, kind="other")
            return _Call(use, None, view, use.input)
        try:
            view = tool.describe(use.input, self._make_context(use.id))
        except Exception as exc:  # a describe bug must not break the turn
            log.warning("tool_describe_failed", tool=use.name, error=str(exc))
            view = ToolCallView(title=use.name, kind=tool.kind)
        return _Call(use, tool, view, use.input)

    async def _decide(self, call: _Call, config: TurnConfig) -> None:
        tool = call.tool
        if tool is None:
            available = ", ".join(sorted(t.name for t in self._tools)) or "none"
            await self._fail(call, f"unknown tool: {call.use.name} (available tools: {available})")
            return
        key = _permission_key(tool, call.args)
        decision = policy.decide(config.mode, tool.safety, tool.kind, key, self._rules)
        if isinstance(decision, policy.Deny):
            await self._fail(call, decision.reason)
            return
        if isinstance(decision, policy.Ask):
            try:
                preview = await tool.preview(call.args, self._make_context(call.use.id))
            except ToolError as exc:
                await self._fail(call, str(exc))
                return
            except Exception as exc:
                log.warning("tool_preview_failed", tool=tool.name, error=str(exc))
                preview = ()
            answer = await self._ask_permission(
                PermissionRequested(
                    tool_call_id=call.use.id,
                    title=call.view.title,
                    kind=call.view.kind,
                    raw_input=call.args,
                    options=policy.PERMISSION_OPTIONS,
                    content=preview or call.view.content,
                    locations=call.view.locations,
                )
            )
            if answer is None:
                # The client cancelled the question: the turn ends as `cancelled`.
                self._cancel()
                await anyio.sleep_forever()
            if answer in (policy.ALLOW_ALWAYS, policy.REJECT_ALWAYS):
                self._rules.remember(key, allow=answer == policy.ALLOW_ALWAYS)
                await self._rules_changed()
            if answer not in (policy.ALLOW_ONCE, policy.ALLOW_ALWAYS):
                await self._fail(call, "the user rejected this tool call")
                return
        call.approved = True

    async def _execute(self, call: _Call, window: int) -> None:
        assert call.tool is not None
        await self._publish(ToolCallUpdated(call.use.id, status="in_progress"))
        ctx = self._make_context(call.use.id)
        try:
            output = await call.tool.run(call.args, ctx)
        except ToolError as exc:
            output = ToolOutput(str(exc), is_error=True, display=(TextDisplay(str(exc)),))
        except anyio.get_cancelled_exc_class():
            raise
        except Exception as exc:
            log.exception("tool_crashed", tool=call.tool.name)
            text = f"{call.tool.name} failed: {type(exc).__name__}: {exc}"
            output = ToolOutput(text, is_error=True, display=(TextDisplay(text),))
        content = _cap(output.content)
        chars = len(_display_text(content))
        if self._context is not None and self._context.result_too_large(chars, window):
            text = (
                f"{call.tool.name} produced about {chars // 4:,} tokens of output, more than the "
                f"context window ({window:,} tokens) can hold alongside the conversation. "
                "Ask for less: read a range of lines, filter or page the command's output, or "
                "search more specifically."
            )
            content, output = text, ToolOutput(text, is_error=True, display=(TextDisplay(text),))
        # The tool has done its work: from here on a cancel changes nothing of its outcome.
        await self._finish(
            call,
            ToolResultBlock(tool_use_id=call.use.id, content=content, is_error=output.is_error),
            ToolCallUpdated(
                call.use.id,
                status="failed" if output.is_error else "completed",
                content=output.display or (TextDisplay(_display_text(content)),),
                locations=output.locations,
                raw_output=output.raw_output,
            ),
        )

    async def _fail(self, call: _Call, message: str) -> None:
        await self._finish(
            call,
            _error_result(call.use.id, message),
            ToolCallUpdated(call.use.id, status="failed", content=(TextDisplay(message),)),
        )


def _permission_key(tool: Tool, args: dict[str, Any]) -> str:
    """The key an "always" answer is remembered under: the tool's name, or `tool:detail`
    (e.g. `bash:git status`) so details of different tools never collide."""
    try:
        key = tool.permission_key(args)
    except Exception:
        return tool.name
    return key if key == tool.name else f"{tool.name}:{key}"


def _error_result(tool_use_id: str, text: str) -> ToolResultBlock:
    return ToolResultBlock(tool_use_id=tool_use_id, content=_as_text(text), is_error=True)


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _as_text(text: str) -> str:
    """`text` without lone surrogates (U+FFFD in their place): a file name that is not UTF-8
    reaches Python as one (`surrogateescape`), and such a result could be neither stored nor
    sent, which would fail the turn over a name in a listing."""
    return _LONE_SURROGATE.sub("\ufffd", text)


def _stop_reason(provider_reason: str) -> TurnStopReason:
    if provider_reason in ("max_tokens", "model_context_window_exceeded"):
        return "max_tokens"
    if provider_reason == "refusal":
        return "refusal"
    return "end_turn"


def _backoff(attempt: int, retry_after: float | None, config: TurnConfig) -> float:
    if retry_after is not None and retry_after >= 0:
        return float(min(retry_after, config.retry_max_delay))
    base = config.retry_base_delay * (2**attempt)
    return float(min(config.retry_max_delay, base * (0.5 + random.random() / 2)))


def _cap(content: str | tuple[ResultPart, ...]) -> str | tuple[ResultPart, ...]:
    if isinstance(content, str):
        return _cap_text(content)
    return tuple(
        TextBlock(text=_cap_text(p.text)) if isinstance(p, TextBlock) else p for p in content
    )


def _cap_text(text: str) -> str:
    text = _as_text(text)
    if len(text) <= MAX_RESULT_CHARS:
        return text
    half = MAX_RESULT_CHARS // 2
    cut = len(text) - 2 * half
    return f"{text[:half]}\n[... {cut} characters truncated ...]\n{text[-half:]}"


def _display_text(content: str | tuple[ResultPart, ...]) -> str:
    if isinstance(content, str):
        return content
    parts = []
    for p in content:
        if isinstance(p, TextBlock):
            parts.append(p.text)
        elif isinstance(p, JsonPart):
            parts.append(json.dumps(p.value, indent=2))
    return "\n".join(parts)
