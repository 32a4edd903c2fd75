"""Context management: keep a long session inside its model's window, and say where it stands.

Owns `Compactor`, which the turn runner consults before every model request, and the
pure pieces it is made of: micro-compaction, the choice of a summary boundary, the summary
request and message, and the `/context` report. The brief's wording (`summary_brief.py`) and
the request-size ruler (`history.overhead_tokens`) live below the providers, which read them
too (the offline model answers a summary request), so no provider imports this module.

Three levels, by how full the window is (fractions of the model's context window):
- micro (≥ `micro`): no model call. Old, large tool results outside the most recent turns
  are replaced by a short placeholder saying the output was cleared and the tool can be run
  again. Ids and error flags are kept, the list keeps its length, and it is idempotent.
- background (≥ `soft`): at most one summarisation runs off the turn's critical path, on a
  snapshot. Its result is written back with `History.splice_prefix`, so the messages the turn
  appended meanwhile survive (docs/architecture.md, Storage).
- full (≥ `hard`, or `/compact`): the turn waits for a summary before its next request.

Invariants:
- A boundary never separates a `tool_use` from its results and prefers the start of a user
  turn; the summary replaces exactly the messages before it.
- The summarisation request is built through `repair_outbound`, like every request.
- A failed compaction is logged and skipped, never fatal: the turn goes on (and the provider's
  own "prompt is too long" error would then be reported as such).
- The stored history is checkpointed after every rewrite, so a load restores the compacted
  history; the transcript (what replay shows) is never rewritten.
- Estimates: the history's own (real baseline + chars/4 delta) once a model call has
  reported usage since the last rewrite; before that, chars/4 of the messages plus the system
  prompt and tool definitions, which a real baseline already includes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from defect_core.events import (
    AgentEvent,
    TextDisplay,
    ToolCallStarted,
    ToolCallUpdated,
    UsageReported,
)
from defect_core.history import History, estimate_message_tokens, overhead_tokens
from defect_core.integrity import repair_outbound
from defect_core.log import get_logger
from defect_core.model import (
    ImageBlock,
    JsonPart,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolSpec,
    ToolUseBlock,
)
from defect_core.providers.base import (
    Completed,
    LlmProvider,
    ModelRequest,
    ProviderError,
)
from defect_core.summary_brief import MERGE_INSTRUCTIONS, SUMMARY_INSTRUCTIONS

log = get_logger("defect.compaction")

CLEARED_PREFIX = "[output cleared to save context"
SUMMARY_OPEN = "<conversation-summary>"
SUMMARY_CLOSE = "</conversation-summary>"


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
    """Index of the first message of the last `turns` user turns (prompts, not results)."""
    seen = 0
    for index in range(len(messages) - 1, -1, -1):
        if _is_turn_start(messages[index]):
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
    prefix: list[Message],
    *,
    model: str,
    system: str,
    max_tokens: int,
    focus: str = "",
    tools: tuple[ToolSpec, ...] = (),
) -> ModelRequest:
    """The request that summarises `prefix`: the conversation's own system prompt and tool
    list, so the provider's prompt cache serves the whole prefix it has already seen (a
    request without the tools starts a different prefix and pays for the conversation
    again), and the brief as the last user message (the brief says not to call tools)."""
    instructions = SUMMARY_INSTRUCTIONS
    if prefix and is_summary(prefix[0]):
        instructions += "\n\n" + MERGE_INSTRUCTIONS.format(open=SUMMARY_OPEN, close=SUMMARY_CLOSE)
    if focus:
        instructions += f"\n\nThe user asks the summary to focus on: {focus}"
    messages = repair_outbound(
        [*prefix, Message(role="user", content=(TextBlock(text=instructions),))]
    )
    return ModelRequest(
        model=model,
        system=system,
        messages=messages,
        tools=tools,
        max_tokens=min(max_tokens, 8_192),
        thinking_budget=None,
    )


async def summarise(provider: LlmProvider, request: ModelRequest) -> str:
    completed: Completed | None = None
    async for chunk in provider.stream(request):
        if isinstance(chunk, Completed):
            completed = chunk
    if completed is None:
        raise ProviderError("the summary stream ended without a complete message")
    text = completed.message.text().strip()
    if not text:
        raise ProviderError("the model returned an empty summary")
    return text


# --- the /context report ------------------------------------------------------------------


def context_report(messages: list[Message], used: int, window: int, overhead: int) -> str:
    tally = {"tool results": 0, "tool calls": 0, "text": 0, "thinking": 0, "images": 0}
    for message in messages:
        for block in message.content:
            if isinstance(block, ToolResultBlock):
                tally["tool results"] += estimate_message_tokens(
                    Message(role="user", content=(block,))
                )
            elif isinstance(block, ToolUseBlock):
                tally["tool calls"] += (len(block.name) + len(json.dumps(block.input))) // 4
            elif isinstance(block, TextBlock):
                tally["text"] += len(block.text) // 4
            elif isinstance(block, ThinkingBlock):
                tally["thinking"] += len(block.thinking) // 4
            elif isinstance(block, ImageBlock):
                tally["images"] += 2_000
    share = 100 * used / window if window else 0.0
    lines = [
        f"Context: ~{used:,} of {window:,} tokens used ({share:.1f}%), {len(messages)} messages.",
        "",
        "What takes space (estimated):",
        f"- system prompt and tool definitions: ~{overhead:,}",
    ]
    for name, tokens in sorted(tally.items(), key=lambda kv: -kv[1]):
        if tokens:
            lines.append(f"- {name}: ~{tokens:,}")
    if messages and is_summary(messages[0]):
        lines.append("")
        lines.append("The conversation has been compacted: it starts with a summary.")
    return "\n".join(lines)


# --- the compactor --------------------------------------------------------------------------

Publish = Callable[[AgentEvent], Awaitable[None]]
Checkpoint = Callable[[list[Message]], Awaitable[None]]
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
        checkpoint: Checkpoint,
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
        self._checkpoint = checkpoint
        self.thresholds = thresholds or Thresholds()
        self._calibrated = False
        self._background: asyncio.Task[None] | None = None
        self._counter = 0

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

    def estimate(self, system: str, tools: tuple[ToolSpec, ...]) -> int:
        used = self._history.token_estimate() or 0
        return used if self._calibrated else used + overhead_tokens(system, tools)

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
    ) -> None:
        t = self.thresholds
        used = self.estimate(system, tools)
        if used >= t.micro * window:
            rewritten = micro_compact(self._history.snapshot(), t)
            if rewritten is not None:
                before = used
                self._history.replace(rewritten)
                self._calibrated = False
                await self._checkpoint(self._history.snapshot())
                used = self.estimate(system, tools)
                log.info("micro_compaction", tokens_before=before, tokens_after=used)
        if used >= t.hard * window:
            if self._background is not None:
                await asyncio.shield(self._background)
                used = self.estimate(system, tools)
            if used >= t.hard * window:
                await self.compact(
                    model=model,
                    system=system,
                    tools=tools,
                    max_tokens=max_tokens,
                    window=window,
                    reason="the context is nearly full",
                )
        elif used >= t.soft * window and self._background is None:
            snapshot = self._history.snapshot()
            self._background = asyncio.create_task(
                self._background_compaction(snapshot, model, system, tools, max_tokens, window),
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
    ) -> CompactionReport | None:
        """Summarise now (the turn waits). Shown as a `think` tool call; None if skipped."""
        if self._background is not None:
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
        snapshot = self._history.snapshot()
        before = self.estimate(system, tools)
        report = await self._summarise_into_history(
            snapshot, model, system, tools, max_tokens, window, "full", before, focus
        )
        if report is None:
            await self._publish(
                ToolCallUpdated(
                    call_id,
                    status="failed",
                    content=(
                        TextDisplay(
                            "Compaction skipped: nothing to summarise, or the "
                            "summary request failed (see the log)."
                        ),
                    ),
                )
            )
            return None
        report = CompactionReport(
            "full", before, self.estimate(system, tools), report.messages_summarised
        )
        await self._publish(
            ToolCallUpdated(
                call_id,
                status="completed",
                content=(
                    TextDisplay(
                        f"Summarised {report.messages_summarised} messages: "
                        f"~{report.tokens_before:,} → ~{report.tokens_after:,} tokens."
                    ),
                ),
            )
        )
        await self._publish(UsageReported(used=report.tokens_after, size=window))
        return report

    async def _background_compaction(
        self,
        snapshot: list[Message],
        model: str,
        system: str,
        tools: tuple[ToolSpec, ...],
        max_tokens: int,
        window: int,
    ) -> None:
        try:
            before = self.estimate(system, tools)
            report = await self._summarise_into_history(
                snapshot, model, system, tools, max_tokens, window, "background", before, ""
            )
            if report is not None:
                await self._publish(UsageReported(used=self.estimate(system, tools), size=window))
        except Exception:
            log.exception("background_compaction_crashed")
        finally:
            self._background = None

    async def _summarise_into_history(
        self,
        snapshot: list[Message],
        model: str,
        system: str,
        tools: tuple[ToolSpec, ...],
        max_tokens: int,
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
        prefix = snapshot[:boundary]
        if self._before_compact is not None:
            extra = await self._before_compact(kind, focus)
            focus = "\n".join(f for f in (focus, extra) if f)
        if self._outbound is not None:
            prefix = self._outbound(prefix)
        request = summary_request(
            prefix, model=model, system=system, max_tokens=max_tokens, focus=focus, tools=tools
        )
        try:
            text = await summarise(self._provider, request)
        except ProviderError as err:
            log.warning("compaction_failed", kind=kind, error=err.message, retryable=err.retryable)
            return None
        # No await between the splice, the snapshot and the checkpoint's submission: the
        # store sees this rewrite in the same order as the history's appends.
        dropped = self._history.splice_prefix(boundary, summary_message(text))
        self._calibrated = False
        await self._checkpoint(self._history.snapshot())
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


_SLASH = re.compile(r"^/(?P<name>[A-Za-z0-9][A-Za-z0-9_.:-]*)(?:\s+(?P<args>.*))?$", re.S)


def parse_slash_command(text: str) -> tuple[str, str] | None:
    """`/name args` → (name, args), for a prompt that is a slash command."""
    match = _SLASH.match(text.strip())
    if match is None:
        return None
    return match.group("name"), (match.group("args") or "").strip()
