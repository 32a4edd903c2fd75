"""Context management: keep a long session inside its model's window, and say where it stands.

Owns `Compactor`, which the turn runner consults before every model request, and the
pure pieces it is made of: micro-compaction, the choice of a summary boundary, the summary
request and message. The brief's wording (`summary_brief.py`) and
the request-size ruler (`history.overhead_tokens`) live below the providers, which read them
too (the offline model answers a summary request), so no provider imports this module.

Three levels, by how full the window is (fractions of the model's context window):
- micro (≥ `micro`): no model call. Old, large tool results outside the most recent turns
  are replaced by a short placeholder saying the output was cleared and the tool can be run
  again. Ids and error flags are kept, the list keeps its length, and it is idempotent. It
  rewrites the cached prefix from the first cleared result on (`first_clearable`: requests
  keep the prefix before it cached), so it runs only when it frees `micro_batch` of the window
  at once, clears all it can then (not to recur as each turn leaves the protected tail), and
  never while a background summary, whose splice rewrites the prefix anyway, is in flight.
- background (≥ `soft`): at most one summarisation runs off the turn's critical path, on a
  snapshot. Its result is written back with `History.splice_prefix`, so the messages the turn
  appended meanwhile survive (docs/architecture.md, Storage). A prefix is cached once a
  response to it has begun: the summary waits for the reply of the request it starts beside
  (`reply_began`), and does not start right after a rewrite (it would write it a second time).
- full (≥ `hard`, or `/compact`): the turn waits for a summary before its next request.

Invariants:
- A boundary never separates a `tool_use` from its results and prefers the start of a user
  turn; the summary replaces exactly the messages before it.
- The summarisation request is built through `repair_outbound`, like every request, and is
  the turn's own request (system prompt, tools, thinking, the whole conversation) with the
  instruction as its last user message, saying which latest messages are kept: the API then
  reads the conversation from its prompt cache instead of writing it again (as Claude Code's
  cache-safe compaction does). When the window leaves no room for that and the summary, only
  the messages summarised are sent (read as far as an earlier request cached them). A reply
  that calls a tool anyway gives its text; one with no text is asked again without tools.
- A failed compaction is logged and skipped, never fatal: the turn goes on (and the provider's
  own "prompt is too long" error would then be reported as such).
- The compacted history is written back to the store after every rewrite (`write_back`), so
  a load restores it; the transcript (what replay shows) is never rewritten.
- Estimates: the history's own (real baseline + chars/4 delta) once a model call has
  reported usage since the last rewrite; before that, chars/4 of the messages plus the system
  prompt and tool definitions, which a real baseline already includes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace

from defect_core.events import (
    AgentEvent,
    TextDisplay,
    ToolCallStarted,
    ToolCallUpdated,
    ToolStatus,
    UsageReported,
)
from defect_core.history import History, estimate_message_tokens, overhead_tokens
from defect_core.integrity import repair_outbound
from defect_core.log import get_logger
from defect_core.model import JsonPart, Message, TextBlock, ToolResultBlock, ToolSpec, ToolUseBlock
from defect_core.providers.base import (
    Completed,
    HostedWebSearch,
    LlmProvider,
    ModelRequest,
    ProviderError,
)
from defect_core.summary_brief import KEPT_INSTRUCTIONS, MERGE_INSTRUCTIONS, SUMMARY_INSTRUCTIONS

log = get_logger("defect.compaction")

CLEARED_PREFIX = "[output cleared to save context"
SUMMARY_OPEN = "<conversation-summary>"
SUMMARY_CLOSE = "</conversation-summary>"
SUMMARY_MAX_TOKENS = 8_192
"""What a summary may take, beyond the thinking budget it shares with the turn's requests."""
SUMMARY_MARGIN = 1_024
"""Room for the instruction and the estimate's error, when the whole conversation is sent."""


@dataclass(frozen=True, slots=True)
class Thresholds:
    micro: float = 0.50
    soft: float = 0.70
    hard: float = 0.85
    keep_recent: float = 0.25
    """Fraction of the window the kept tail (after a summary) may take."""
    micro_keep_turns: int = 2
    """Tool results of the last N user turns are never cleared."""
    micro_min_chars: int = 2_000
    """Only results at least this large are cleared."""
    micro_batch: float = 0.10
    """Micro-compaction runs only when it frees at least this share of the window at once."""
    max_result_share: float = 0.5
    """A single tool result larger than this share of the window is refused."""


@dataclass(frozen=True, slots=True)
class CompactionReport:
    kind: str
    tokens_before: int
    tokens_after: int
    messages_summarised: int


# --- micro-compaction ---------------------------------------------------------------------


def micro_compact(messages: list[Message], thresholds: Thresholds) -> list[Message] | None:
    """Clear old large tool results; None when nothing changes. Same length, same ids.

    One cheap pass finds the messages worth rewriting (exact type checks, no allocation);
    only those are rebuilt, so a history with nothing left to clear costs a scan.
    """
    protected_from = _start_of_recent_turns(messages, thresholds.micro_keep_turns)
    targets = [
        index
        for index in range(protected_from)
        if messages[index].role == "user" and _has_clearable(messages[index], thresholds)
    ]
    if not targets:
        return None
    wanted = {
        b.tool_use_id for i in targets for b in messages[i].content if type(b) is ToolResultBlock
    }
    names: dict[str, tuple[str, dict[str, object]]] = {}
    for message in messages[: targets[-1]]:
        if message.role == "assistant":
            for b in message.content:
                if type(b) is ToolUseBlock and b.id in wanted:
                    names[b.id] = (b.name, b.input)
    out = list(messages)
    for index in targets:
        blocks = []
        for block in messages[index].content:
            if isinstance(block, ToolResultBlock) and _clearable(block, thresholds):
                name, args = names.get(block.tool_use_id, ("the tool", {}))
                block = ToolResultBlock(
                    tool_use_id=block.tool_use_id,
                    content=_cleared_text(name, args, _result_chars(block)),
                    is_error=block.is_error,
                )
            blocks.append(block)
        out[index] = Message(role="user", content=tuple(blocks))
    return out


def micro_gain(messages: list[Message], thresholds: Thresholds) -> int:
    """About how many tokens `micro_compact` would free now (0: nothing to clear)."""
    protected_from = _start_of_recent_turns(messages, thresholds.micro_keep_turns)
    gain = 0
    for message in messages[:protected_from]:
        if message.role != "user":
            continue
        for block in message.content:
            if type(block) is ToolResultBlock and _clearable(block, thresholds):
                gain += max(0, _result_chars(block) - _CLEARED_CHARS) // 4
    return gain


def first_clearable(messages: list[Message], thresholds: Thresholds) -> str | None:
    """The id of the first result `micro_compact` clears, now or once it is old."""
    for message in messages:
        for block in message.content if message.role == "user" else ():
            if type(block) is ToolResultBlock and _clearable(block, thresholds):
                return block.tool_use_id
    return None


_CLEARED_CHARS = 300
"""About the length of a placeholder (`_cleared_text`)."""


def _has_clearable(message: Message, thresholds: Thresholds) -> bool:
    for block in message.content:
        if type(block) is ToolResultBlock and _clearable(block, thresholds):
            return True
    return False


def _clearable(block: ToolResultBlock, thresholds: Thresholds) -> bool:
    if isinstance(block.content, str) and block.content.startswith(CLEARED_PREFIX):
        return False
    return _result_chars(block) >= thresholds.micro_min_chars


def _result_chars(block: ToolResultBlock) -> int:
    if isinstance(block.content, str):
        return len(block.content)
    total = 0
    for part in block.content:
        if isinstance(part, TextBlock):
            total += len(part.text)
        elif isinstance(part, JsonPart):
            total += len(json.dumps(part.value))
        else:
            total += 8_000  # an image: always worth clearing
    return total


def _cleared_text(name: str, args: dict[str, object], chars: int) -> str:
    brief = json.dumps(args, ensure_ascii=False)
    if len(brief) > 200:
        brief = brief[:197] + "…"
    return (
        f"{CLEARED_PREFIX}: {chars} characters from {name} {brief}. "
        "Run the tool again if you need this output.]"
    )


def _start_of_recent_turns(messages: list[Message], turns: int) -> int:
    """Index of the first message of the last `turns` user turns: prompts, not results, nor
    a steer or note committed inside a turn (`Message.inside_turn`), which belongs to the
    turn it joined."""
    seen = 0
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if message.inside_turn is None and _is_turn_start(message):
            seen += 1
            if seen >= turns:
                return index
    return 0


def _is_turn_start(message: Message) -> bool:
    return message.role == "user" and not any(
        isinstance(b, ToolResultBlock) for b in message.content
    )


# --- summaries ----------------------------------------------------------------------------


def choose_boundary(messages: list[Message], keep_tokens: int) -> int:
    """How many leading messages to summarise, keeping about `keep_tokens` of recent context.

    The kept tail starts at a user message that is not a tool-result batch (so no tool_use is
    separated from its results), preferring the most recent turn start that keeps the tail
    within budget; at least one turn is always kept. 0 means nothing worth summarising.
    """
    starts = [i for i, m in enumerate(messages) if i > 0 and _is_turn_start(m)]
    if not starts:
        return 0
    tail = 0
    tails: dict[int, int] = {}
    position = len(messages)
    for start in reversed(starts):
        for m in messages[start:position]:
            tail += estimate_message_tokens(m)
        position = start
        tails[start] = tail
    fitting = [s for s in starts if tails[s] <= keep_tokens]
    boundary = min(fitting) if fitting else starts[-1]
    return boundary if boundary >= 2 else 0


def is_summary(message: Message) -> bool:
    return message.role == "user" and message.text().startswith(SUMMARY_OPEN)


def summary_message(text: str) -> Message:
    body = text.strip() or "(the summary was empty)"
    return Message(
        role="user",
        content=(
            TextBlock(
                text=f"{SUMMARY_OPEN}\nThis session was compacted; this summary replaces the "
                f"earlier conversation.\n\n{body}\n{SUMMARY_CLOSE}"
            ),
        ),
    )


def summary_request(
    conversation: list[Message],
    *,
    model: str,
    system: str,
    max_tokens: int,
    focus: str = "",
    tools: tuple[ToolSpec, ...] = (),
    thinking_budget: int | None = None,
    web_search: HostedWebSearch | None = None,
    kept: int = 0,
) -> ModelRequest:
    """The request that summarises `conversation` but its last `kept` messages: the turn's
    request shape (`system`, `tools`, `web_search`, `thinking_budget`: the prompt cache's key
    up to the messages) and the whole conversation, with the instruction (saying where the
    summary stops) as the last user message, so that all of it is read from the cache: the
    last request sent it. The output is capped, leaving the thinking budget as it is (a
    changed budget would miss)."""
    instructions = SUMMARY_INSTRUCTIONS
    if kept:
        start = " ".join(conversation[-kept].text().split())
        start = f"«{start[:80]}»" if start else "(no text)"
        instructions += "\n\n" + KEPT_INSTRUCTIONS.format(count=kept, start=start)
    if conversation and is_summary(conversation[0]):
        instructions += "\n\n" + MERGE_INSTRUCTIONS.format(open=SUMMARY_OPEN, close=SUMMARY_CLOSE)
    if focus:
        instructions += f"\n\nThe user asks the summary to focus on: {focus}"
    messages = repair_outbound(
        [*conversation, Message(role="user", content=(TextBlock(text=instructions),))]
    )
    return ModelRequest(
        model=model,
        system=system,
        messages=messages,
        tools=tools,
        max_tokens=min(max_tokens, SUMMARY_MAX_TOKENS + (thinking_budget or 0)),
        thinking_budget=thinking_budget,
        web_search=web_search,
    )


async def summarise(provider: LlmProvider, request: ModelRequest) -> str:
    """The summary the model writes for `request`. A reply that calls a tool anyway gives its
    text; one with nothing but tool calls is asked again without tools (the cached prefix is
    then lost, but the summary is made)."""
    message = await _reply(provider, request)
    text = message.text().strip()
    if not text and message.tool_uses() and (request.tools or request.web_search):
        log.warning("summary_called_a_tool", tools=[u.name for u in message.tool_uses()])
        message = await _reply(provider, replace(request, tools=(), web_search=None))
        text = message.text().strip()
    if not text:
        raise ProviderError("the model returned an empty summary")
    return text


async def _reply(provider: LlmProvider, request: ModelRequest) -> Message:
    completed: Completed | None = None
    async for chunk in provider.stream(request):
        if isinstance(chunk, Completed):
            completed = chunk
    if completed is None:
        raise ProviderError("the summary stream ended without a complete message")
    return completed.message


# --- the compactor --------------------------------------------------------------------------

Publish = Callable[[AgentEvent], Awaitable[None]]
WriteBack = Callable[[list[Message]], Awaitable[None]]
"""Keeps the compacted history (`ReplayStateWriter.write_back`, `session/persistence.py`)."""
BeforeCompact = Callable[[str, str], Awaitable[str]]
"""Told the kind and the reason of a summary about to be made; what to focus on besides."""
AfterCompact = Callable[[CompactionReport], Awaitable[None]]
"""Told of a summary that was made."""


class Compactor:
    """Decides, before each request, whether and how to compact one session's history."""

    def __init__(
        self,
        *,
        history: History,
        provider: LlmProvider,
        publish: Publish,
        write_back: WriteBack,
        thresholds: Thresholds | None = None,
        before_compact: BeforeCompact | None = None,
        after_compact: AfterCompact | None = None,
    ) -> None:
        self._before_compact = before_compact
        self._after_compact = after_compact
        """The session's hooks around a summary (`defect_core/hooks/`); failures never reach
        here (the engine skips a failing hook)."""
        self._history = history
        self._provider = provider
        self._outbound: Callable[[list[Message]], list[Message]] | None = None
        self._publish = publish
        self._write_back = write_back
        self.thresholds = thresholds or Thresholds()
        self._calibrated = False
        self._rewritten = False
        """The history was rewritten and no request has been answered since: nothing of the
        new prefix is in the prompt cache yet."""
        self.rewrites = 0
        """How many times the history was rewritten: a reply to a request built before the
        last rewrite measured another history (`TurnRunner` then does not calibrate on it)."""
        self._background: asyncio.Task[None] | None = None
        self.cleared_from: str | None = None  # the first result cleared since the last reply
        self._gate: asyncio.Event | None = None  # the background summary waits on it
        self._counter = 0
        self.failure = ""  # why the last summary request failed ("": it did not)

    def use_provider(
        self, provider: LlmProvider, outbound: Callable[[list[Message]], list[Message]] | None
    ) -> None:
        """Summarise with `provider` from now on (the session switched model), sending it the
        history through `outbound` (the thinking it did not sign left out: `provenance.py`)."""
        self._provider = provider
        self._outbound = outbound

    # --- accounting -------------------------------------------------------------------------

    def calibrated(self) -> None:
        """The runner recorded a real input size (`History.record_input_tokens`)."""
        self._calibrated = True
        self._rewritten = False
        self.cleared_from = None

    def estimate(self, system: str, tools: tuple[ToolSpec, ...]) -> int:
        used = self._history.token_estimate() or 0
        return used if self._calibrated else used + overhead_tokens(system, tools)

    def reply_began(self) -> None:
        """The request after `before_request` began its reply, or is over: a summary may go."""
        if self._gate is not None:
            self._gate.set()

    def result_too_large(self, chars: int, window: int) -> bool:
        return chars // 4 > self.thresholds.max_result_share * window

    # --- before each request ----------------------------------------------------------------

    async def before_request(
        self,
        *,
        model: str,
        system: str,
        tools: tuple[ToolSpec, ...],
        max_tokens: int,
        window: int,
        thinking_budget: int | None = None,
        web_search: HostedWebSearch | None = None,
    ) -> None:
        """Compact as the window requires. The request's shape (all but `window`) is what a
        summary request sends too, so that it reads the conversation from the prompt cache."""
        self.reply_began()  # the request before this one is over
        t = self.thresholds
        shape = ModelRequest(model, system, [], tools, max_tokens, thinking_budget, web_search)
        used = self.estimate(system, tools)
        history = self._history.snapshot()
        idle = self._background is None  # a summary in flight rewrites the prefix anyway
        if idle and used >= t.micro * window and micro_gain(history, t) >= t.micro_batch * window:
            rewritten = micro_compact(history, t)
            if rewritten is not None:
                self.cleared_from = first_clearable(history, t)
                before = used
                self._history.replace(rewritten)
                self._calibrated = False
                self._rewritten = True
                self.rewrites += 1
                await self._write_back(self._history.snapshot())
                used = self.estimate(system, tools)
                log.info("micro_compaction", tokens_before=before, tokens_after=used)
        if used >= t.hard * window:
            if self._background is not None:
                await asyncio.shield(self._background)
                used = self.estimate(system, tools)
            if used >= t.hard * window:
                await self._compact(shape, window, "the context is nearly full", "")
        elif used >= t.soft * window and self._background is None and not self._rewritten:
            snapshot = self._history.snapshot()
            self._gate = asyncio.Event()
            self._background = asyncio.create_task(
                self._background_compaction(snapshot, shape, window, self._gate),
                name="defect-background-compaction",
            )

    # --- full compaction --------------------------------------------------------------------

    async def compact(
        self,
        *,
        model: str,
        system: str,
        tools: tuple[ToolSpec, ...],
        max_tokens: int,
        window: int,
        reason: str,
        focus: str = "",
        thinking_budget: int | None = None,
        web_search: HostedWebSearch | None = None,
    ) -> CompactionReport | None:
        """Summarise now (the turn waits). Shown as a `think` tool call; None if skipped."""
        shape = ModelRequest(model, system, [], tools, max_tokens, thinking_budget, web_search)
        return await self._compact(shape, window, reason, focus)

    async def _compact(
        self, shape: ModelRequest, window: int, reason: str, focus: str
    ) -> CompactionReport | None:
        if self._background is not None:
            self.reply_began()  # nothing is in flight now: the summary need not wait
            await asyncio.shield(self._background)
        self._counter += 1
        call_id = f"compact_{self._counter}"
        await self._publish(
            ToolCallStarted(
                tool_call_id=call_id,
                name="compact",
                title="Compacting the conversation",
                kind="think",
                raw_input={"reason": reason},
                status="in_progress",
            )
        )
        snapshot, self.failure = self._history.snapshot(), ""
        before = self.estimate(shape.system, shape.tools)
        report = await self._summarise_into_history(snapshot, shape, window, "full", before, focus)
        if report is None:  # the turn goes on either way
            failed = f"Compaction failed: the summary request failed: {self.failure}"
            text = failed if self.failure else "Nothing to compact yet: too short to summarise."
            await self._finish_call(call_id, "failed" if self.failure else "completed", text)
            return None
        after = self.estimate(shape.system, shape.tools)
        report = CompactionReport("full", before, after, report.messages_summarised)
        await self._finish_call(
            call_id,
            "completed",
            f"Summarised {report.messages_summarised} messages: "
            f"~{report.tokens_before:,} → ~{report.tokens_after:,} tokens.",
        )
        await self._publish(UsageReported(used=report.tokens_after, size=window))
        return report

    async def _finish_call(self, call_id: str, status: ToolStatus, text: str) -> None:
        await self._publish(ToolCallUpdated(call_id, status=status, content=(TextDisplay(text),)))

    async def _background_compaction(
        self, snapshot: list[Message], shape: ModelRequest, window: int, gate: asyncio.Event
    ) -> None:
        try:
            before = self.estimate(shape.system, shape.tools)
            await gate.wait()
            report = await self._summarise_into_history(
                snapshot, shape, window, "background", before, ""
            )
            if report is not None:
                used = self.estimate(shape.system, shape.tools)
                await self._publish(UsageReported(used=used, size=window))
        except Exception:
            log.exception("background_compaction_crashed")
        finally:
            self._background = None

    async def _summarise_into_history(
        self,
        snapshot: list[Message],
        shape: ModelRequest,
        window: int,
        kind: str,
        before: int,
        focus: str,
    ) -> CompactionReport | None:
        keep = int(self.thresholds.keep_recent * window)
        boundary = choose_boundary(snapshot, keep)
        if boundary == 0:
            log.info("compaction_skipped", kind=kind, reason="nothing to summarise")
            return None
        # The whole conversation, read from the cache, when it leaves room for the summary;
        # else only what is summarised (read as far as an earlier request cached it).
        reply = SUMMARY_MAX_TOKENS + (shape.thinking_budget or 0) + SUMMARY_MARGIN
        whole = before + reply <= window
        conversation = snapshot if whole else snapshot[:boundary]
        if self._before_compact is not None:
            extra = await self._before_compact(kind, focus)
            focus = "\n".join(f for f in (focus, extra) if f)
        if self._outbound is not None:
            conversation = self._outbound(conversation)
        request = summary_request(
            conversation,
            kept=len(snapshot) - boundary if whole else 0,
            model=shape.model,
            system=shape.system,
            max_tokens=shape.max_tokens,
            focus=focus,
            tools=shape.tools,
            thinking_budget=shape.thinking_budget,
            web_search=shape.web_search,
        )
        try:
            text = await summarise(self._provider, request)
        except ProviderError as err:
            log.warning("compaction_failed", kind=kind, error=err.message, retryable=err.retryable)
            self.failure = err.message
            return None
        # No await between the splice, the snapshot and the write-back's submission: the
        # store sees this rewrite in the same order as the history's appends.
        dropped = self._history.splice_prefix(boundary, summary_message(text))
        self._calibrated = False
        self._rewritten = True
        self.rewrites += 1
        await self._write_back(self._history.snapshot())
        log.info("compaction_done", kind=kind, messages=dropped, tokens_before=before)
        report = CompactionReport(kind, before, 0, dropped)
        if self._after_compact is not None:
            await self._after_compact(report)
        return report

    async def aclose(self) -> None:
        task = self._background
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
