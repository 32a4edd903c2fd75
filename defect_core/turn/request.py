"""One model request of a turn: fit the context window, build the request, stream the reply.

Owns the steps between the history and a `Completed` reply: `fit_context_window` (the
compactor's turn before each request), `build_request`, and `stream_reply`, which forwards
text and thinking deltas as they arrive and retries what may be retried. A failure it cannot
recover from becomes a `TurnError` carrying the provider's error data.

Invariants:
- Every request is built from `repair_outbound(history.snapshot())`, never from anything else
  (less the thinking another provider or model signed: `provenance.py`). It names where the
  history will next be rewritten (`ModelRequest.cache_anchor`, from the compactor), so the
  prompt cache keeps the prefix before it.
- Only a `Completed` chunk ends a stream: a stream that ends without one is an error
  (`stream_incomplete`, retryable), so a cut stream never becomes history.
- Retries (bounded, exponential backoff with jitter or the server's `retry-after`) happen only
  before any output of that attempt was forwarded; the backoff sleep is cancellable.
- A prompt the model refuses as too long is compacted and retried once; a second refusal is
  reported as it is. A compaction that fails before a request never stops the turn.
- The provider's own tool calls (its web search) are shown as they happen, as tool calls of
  kind `search` (`defect_core/hosted.py` words them); each one shown ends `completed` or
  `failed`, also when the stream breaks before its result (it then never becomes history).
- After a `pause_turn` reply the request is the history as it is (`paused=True`): the API
  continues the paused assistant message instead of answering a new user message.
- The compactor is told when the reply has begun, or the call is over without one
  (`Compactor.reply_began`): a background summary waits for it, so that it reads this
  request's prefix from the prompt cache instead of writing it a second time.
"""

from __future__ import annotations

import contextlib
import random

import anyio

from defect_core.compaction import Compactor, first_clearable
from defect_core.errors import TurnError
from defect_core.events import (
    AgentTextDelta,
    AgentThoughtDelta,
    TextDisplay,
    ToolCallStarted,
    ToolCallUpdated,
    TurnStopReason,
)
from defect_core.hosted import search_outcome, search_title
from defect_core.integrity import repair_outbound
from defect_core.log import get_logger
from defect_core.model import Message, ToolResultBlock
from defect_core.provenance import own_thinking_only
from defect_core.providers.base import (
    CONTEXT_OVERFLOW,
    Completed,
    ModelRequest,
    ProviderError,
    ServerToolFinished,
    ServerToolStarted,
    TextDelta,
    ThinkingDelta,
    ToolInputDelta,
    ToolUseStarted,
)
from defect_core.turn.deps import TurnConfig, TurnDeps

log = get_logger("defect.turn")


# --- the context window -------------------------------------------------------------------


async def fit_context_window(deps: TurnDeps, config: TurnConfig) -> None:
    """Compact if the window is filling up; a failure here never stops the turn."""
    if deps.compactor is None:
        return
    try:
        await deps.compactor.before_request(
            model=config.model,
            system=config.system_prompt,
            tools=deps.tools.specs(),
            max_tokens=config.max_tokens,
            window=config.context_window,
            thinking_budget=config.thinking_budget,
            web_search=config.web_search,
        )
    except anyio.get_cancelled_exc_class():
        raise
    except Exception:
        log.exception("context_management_failed", session_id=config.session_id)


async def shrink_context_window(deps: TurnDeps, config: TurnConfig) -> bool:
    """The model refused the prompt as too long: summarise now; True if it did."""
    if deps.compactor is None:
        return False
    report = await deps.compactor.compact(
        model=config.model,
        system=config.system_prompt,
        tools=deps.tools.specs(),
        max_tokens=config.max_tokens,
        window=config.context_window,
        reason="the model said the prompt is too long",
        thinking_budget=config.thinking_budget,
        web_search=config.web_search,
    )
    return report is not None


def context_used(deps: TurnDeps, config: TurnConfig) -> int:
    """The tokens the next request would use, as far as the session can tell."""
    if deps.compactor is None:
        return deps.history.token_estimate() or 0
    return deps.compactor.estimate(config.system_prompt, deps.tools.specs())


# --- the request and its reply ------------------------------------------------------------


def outbound_history(deps: TurnDeps, config: TurnConfig) -> list[Message]:
    """The history as this turn's model may see it: without the thinking another provider or
    model signed (the session may have switched since; `provenance.py`)."""
    history = deps.history.snapshot()
    selection = config.selection
    if selection is None:
        return history
    return own_thinking_only(history, selection, config.unstamped_provider)


def build_request(deps: TurnDeps, config: TurnConfig, *, paused: bool = False) -> ModelRequest:
    messages = repair_outbound(outbound_history(deps, config), paused=paused)
    compactor = deps.compactor
    return ModelRequest(
        model=config.model,
        system=config.system_prompt,
        messages=messages,
        tools=deps.tools.specs(),
        max_tokens=config.max_tokens,
        thinking_budget=config.thinking_budget,
        web_search=config.web_search,
        agent=config.agent,
        cache_anchor=None if compactor is None else _cache_anchor(messages, compactor),
    )


def _cache_anchor(messages: list[Message], compactor: Compactor) -> int | None:
    """The message holding the first result the last micro-compaction cleared, until a reply
    was had (the entry before it is what the request after that rewrite reads), else the one
    holding the first result it would clear next (`ModelRequest.cache_anchor`)."""
    for wanted in (compactor.cleared_from, first_clearable(messages, compactor.thresholds)):
        for index, message in enumerate(messages):
            if wanted is not None and any(
                isinstance(b, ToolResultBlock) and b.tool_use_id == wanted for b in message.content
            ):
                return index
    return None


async def stream_reply(deps: TurnDeps, config: TurnConfig, *, paused: bool = False) -> Completed:
    """Send the request built from the history now and stream its reply to the front end;
    the completed reply, or `TurnError` once retries (and one compaction) cannot help.
    `paused`: the last reply paused (`pause_turn`); this request continues it."""
    try:
        return await _stream_with_retries(deps, config, paused)
    finally:
        if deps.compactor is not None:
            deps.compactor.reply_began()


async def _stream_with_retries(deps: TurnDeps, config: TurnConfig, paused: bool) -> Completed:
    request = build_request(deps, config, paused=paused)
    attempt = 0
    compacted = False
    while True:
        forwarded = False
        searching: dict[str, str] = {}  # server tool calls shown and not finished: id → title
        try:
            # aclosing: a stream left early (cancel, failure) closes its response now.
            async with contextlib.aclosing(deps.provider.stream(request)) as stream:
                async for chunk in stream:
                    if deps.compactor is not None:
                        deps.compactor.reply_began()
                    if isinstance(chunk, TextDelta):
                        forwarded = True
                        await deps.publish(AgentTextDelta(chunk.text))
                    elif isinstance(chunk, ThinkingDelta):
                        forwarded = True
                        await deps.publish(AgentThoughtDelta(chunk.text))
                    elif isinstance(chunk, ToolUseStarted | ToolInputDelta):
                        pass  # not shown to the user: a retry after it stays invisible
                    elif isinstance(chunk, ServerToolStarted):
                        forwarded = True
                        await _show_search(deps, chunk, searching)
                    elif isinstance(chunk, ServerToolFinished):
                        forwarded = True
                        await _show_search_result(deps, chunk, searching)
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
            await _abandon_searches(deps, searching)
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
            if (
                err.kind == CONTEXT_OVERFLOW
                and not compacted
                and await shrink_context_window(deps, config)
            ):
                compacted = True  # once: a second refusal is reported as it is
                request = build_request(deps, config, paused=paused)
                continue
            data = err.to_data()
            if forwarded and err.retryable:
                data["partialOutputShown"] = True
            raise TurnError(err.message, data, auth=err.kind == "auth_required") from err


async def _show_search(deps: TurnDeps, chunk: ServerToolStarted, searching: dict[str, str]) -> None:
    use = chunk.block
    searching[use.id] = search_title(use)
    await deps.publish(
        ToolCallStarted(
            tool_call_id=use.id,
            name=use.name,
            title=searching[use.id],
            kind="search",
            raw_input=use.input,
            status="in_progress",
        )
    )


async def _show_search_result(
    deps: TurnDeps, chunk: ServerToolFinished, searching: dict[str, str]
) -> None:
    result = chunk.block
    if searching.pop(result.tool_use_id, None) is None:
        return  # a result for no search shown: the repair drops it from later requests
    succeeded, text = search_outcome(result)
    await deps.publish(
        ToolCallUpdated(
            result.tool_use_id,
            status="completed" if succeeded else "failed",
            content=(TextDisplay(text),),
        )
    )


async def _abandon_searches(deps: TurnDeps, searching: dict[str, str]) -> None:
    """The stream broke: every search shown and not finished ends `failed` (it never becomes
    history, so nothing else would ever close it)."""
    with anyio.CancelScope(shield=True):
        for tool_call_id in list(searching):
            _, text = search_outcome(None)
            await deps.publish(
                ToolCallUpdated(tool_call_id, status="failed", content=(TextDisplay(text),))
            )
    searching.clear()


def stop_reason(provider_reason: str) -> TurnStopReason:
    """The turn's stop reason for a reply that asked for no tool."""
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
