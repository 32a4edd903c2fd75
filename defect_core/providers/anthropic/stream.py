"""One streamed response, assembled: deltas to show as they arrive, one message at the end.

Owns `StreamAssembler`, which is fed the SDK's stream events (`message_start`,
`content_block_start/delta/stop`, `message_delta`, `message_stop`) one at a time, returns the
chunks to forward (`TextDelta`, `ThinkingDelta`, `ToolUseStarted`, `ToolInputDelta`, and for
the API's own web search `ServerToolStarted` once its input is whole and `ServerToolFinished`
when its result arrives), and at the end (`finish`) builds the one `Completed` message - or
refuses to.

Invariants (docs/architecture.md, Integrity: the stream-error guard):
- `Completed` is built only for a stream that reached `message_stop` (or a final
  `message_delta` with a stop reason, then a clean end) with every content block closed and
  every tool input parsed as a JSON object. Otherwise `finish` raises `ProviderError`; the
  deltas already returned were only shown, so no partial assistant message reaches history and
  no half-streamed tool call can run. `max_tokens` inside a tool input is its own, final kind.
- Thinking is kept byte-exact (text and signature): the API refuses edited thinking.
- A delta for a block that was never opened, or is closed, is a malformed stream, not data.
- Pure: events in, chunks out; no SDK import (events are read by attribute), no I/O.

- Server-side blocks are kept as they came: a `server_tool_use` streams its input like a
  client tool's (`input_json_delta`), a `web_search_tool_result` arrives whole in its
  `content_block_start`. A server tool input that does not parse is a malformed stream.
  Other server-side blocks (never requested) are known by index and dropped.

Why a room of its own: the guard is the part most worth testing alone.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from defect_core.log import get_logger
from defect_core.model import (
    ContentBlock,
    Message,
    RedactedThinkingBlock,
    ServerToolUseBlock,
    TextBlock,
    ThinkingBlock,
    ToolUseBlock,
    WebSearchResultBlock,
)
from defect_core.providers.anthropic.errors import malformed
from defect_core.providers.anthropic_wire import decode_search_content
from defect_core.providers.base import (
    Completed,
    ProviderError,
    ServerToolFinished,
    ServerToolStarted,
    StopReason,
    StreamChunk,
    TextDelta,
    ThinkingDelta,
    ToolInputDelta,
    ToolUseStarted,
    Usage,
)

__all__ = ["StreamAssembler"]


def _fields(hit: Any) -> dict[str, Any]:
    """A search hit of the SDK's stream (an object) as the wire's mapping."""
    return {
        "type": getattr(hit, "type", None),
        "url": getattr(hit, "url", None),
        "title": getattr(hit, "title", None),
        "encrypted_content": getattr(hit, "encrypted_content", None),
        "page_age": getattr(hit, "page_age", None),
    }


log = get_logger("defect.provider")

_STOP_REASONS: frozenset[str] = frozenset(
    {
        "end_turn",
        "max_tokens",
        "stop_sequence",
        "tool_use",
        "pause_turn",
        "refusal",
        "model_context_window_exceeded",
    }
)


@dataclass
class _Block:
    kind: str
    text: list[str] = field(default_factory=list)
    signature: list[str] = field(default_factory=list)
    data: str = ""
    tool_id: str = ""
    tool_name: str = ""
    start_input: dict[str, Any] = field(default_factory=dict)
    closed: bool = False
    parsed: dict[str, Any] | None = None
    parse_error: str | None = None
    result: WebSearchResultBlock | None = None


class StreamAssembler:
    """Turns the stream's events into deltas as they arrive and, at the end, into one
    well-formed message - or a `ProviderError` when the stream did not really finish."""

    def __init__(self, *, max_tokens: int) -> None:
        self.max_tokens = max_tokens
        self.started = False
        self.stopped = False
        self.stop_reason: str | None = None
        self.blocks: dict[int, _Block] = {}
        self.usage: dict[str, int] = {}
        self.model: str | None = None

    def feed(self, event: Any) -> list[StreamChunk]:
        """The chunks to forward for one SDK stream event (usually zero or one)."""
        kind = event.type
        if kind == "content_block_delta":
            return self._delta(event.index, event.delta)
        if kind == "content_block_start":
            return self._start(event.index, event.content_block)
        if kind == "content_block_stop":
            return self._stop(event.index)
        if kind == "message_start":
            self.started = True
            self.model = getattr(event.message, "model", None)
            self._record_usage(event.message.usage)
        elif kind == "message_delta":
            reason = getattr(event.delta, "stop_reason", None)
            if reason is not None:
                self.stop_reason = str(reason)
            if event.usage is not None:
                self._record_usage(event.usage)
        elif kind == "message_stop":
            self.stopped = True
        return []

    def _record_usage(self, usage: Any) -> None:
        for name in (
            "input_tokens",
            "output_tokens",
            "cache_creation_input_tokens",
            "cache_read_input_tokens",
        ):
            value = getattr(usage, name, None)
            if isinstance(value, int):
                self.usage[name] = value
        searches = getattr(getattr(usage, "server_tool_use", None), "web_search_requests", None)
        if isinstance(searches, int):
            self.usage["web_search_requests"] = searches

    def _start(self, index: int, block: Any) -> list[StreamChunk]:
        kind = block.type
        if index in self.blocks:
            raise malformed(f"content block {index} started twice")
        if kind == "text":
            entry = _Block("text")
            self.blocks[index] = entry
            if block.text:
                entry.text.append(block.text)
                return [TextDelta(block.text)]
            return []
        if kind == "thinking":
            entry = _Block("thinking")
            if block.thinking:
                entry.text.append(block.thinking)
            if getattr(block, "signature", None):
                entry.signature.append(block.signature)
            self.blocks[index] = entry
            return [ThinkingDelta(block.thinking)] if block.thinking else []
        if kind == "redacted_thinking":
            self.blocks[index] = _Block("redacted_thinking", data=block.data)
            return []
        if kind == "tool_use":
            start_input = block.input if isinstance(block.input, dict) else {}
            self.blocks[index] = _Block(
                "tool_use", tool_id=block.id, tool_name=block.name, start_input=start_input
            )
            return [ToolUseStarted(block.id, block.name)]
        if kind == "server_tool_use":
            start_input = block.input if isinstance(block.input, dict) else {}
            self.blocks[index] = _Block(
                "server_tool_use", tool_id=block.id, tool_name=block.name, start_input=start_input
            )
            return []
        if kind == "web_search_tool_result":
            content = block.content
            if not isinstance(content, list):
                content = {"type": getattr(content, "type", None), "error_code": content.error_code}
            else:
                content = [_fields(hit) for hit in content]
            try:
                result = WebSearchResultBlock(
                    tool_use_id=block.tool_use_id, content=decode_search_content(content)
                )
            except (ValueError, AttributeError) as exc:
                raise malformed(f"a web search result that cannot be read: {exc}") from None
            self.blocks[index] = _Block("web_search_tool_result", result=result)
            return [ServerToolFinished(result)]
        # Other server-side blocks (code execution, ...) are never requested; keep the index
        # known so its deltas are not taken for a malformed stream.
        self.blocks[index] = _Block(f"ignored:{kind}")
        return []

    def _delta(self, index: int, delta: Any) -> list[StreamChunk]:
        entry = self.blocks.get(index)
        if entry is None or entry.closed:
            raise malformed(f"a delta for content block {index}, which is not open")
        kind = delta.type
        if kind == "text_delta" and delta.text:
            entry.text.append(delta.text)
            return [TextDelta(delta.text)]
        if kind == "thinking_delta" and delta.thinking:
            entry.text.append(delta.thinking)
            return [ThinkingDelta(delta.thinking)]
        if kind == "input_json_delta" and delta.partial_json:
            entry.text.append(delta.partial_json)
            if entry.kind == "server_tool_use":
                return []  # shown whole, once its input is complete
            return [ToolInputDelta(entry.tool_id, delta.partial_json)]
        if kind == "signature_delta":
            entry.signature.append(delta.signature)
        return []

    def _stop(self, index: int) -> list[StreamChunk]:
        entry = self.blocks.get(index)
        if entry is None:
            raise malformed(f"content block {index} stopped without a start")
        entry.closed = True
        if entry.kind not in ("tool_use", "server_tool_use"):
            return []
        raw = "".join(entry.text)
        if not raw.strip():
            entry.parsed = dict(entry.start_input)
        else:
            try:
                value = json.loads(raw)
            except json.JSONDecodeError as exc:
                entry.parse_error = f"{exc.msg} at character {exc.pos}"
                value = None
            if isinstance(value, dict):
                entry.parsed = value
            elif entry.parse_error is None:
                entry.parse_error = f"the input is a JSON {type(value).__name__}, not an object"
        if entry.kind == "tool_use":
            return []
        if entry.parsed is None:
            raise malformed(f"the provider's {entry.tool_name} input is not a JSON object")
        use = ServerToolUseBlock(id=entry.tool_id, name=entry.tool_name, input=entry.parsed)
        return [ServerToolStarted(use)]

    def finish(self, request_id: str | None) -> Completed:
        """The whole message, or `ProviderError` when the stream did not finish cleanly."""
        cleanly_ended = self.stop_reason is not None and all(b.closed for b in self.blocks.values())
        if not self.started or not (self.stopped or cleanly_ended) or self.stop_reason is None:
            raise ProviderError(
                "the model's response stream ended before the message was complete "
                "(no message_stop); the partial reply was not kept",
                kind="stream_incomplete",
                retryable=True,
                request_id=request_id,
            )
        broken = [b for b in self.blocks.values() if b.kind == "tool_use" and b.parsed is None]
        if broken:
            names = ", ".join(b.tool_name for b in broken)
            if self.stop_reason == "max_tokens":
                raise ProviderError(
                    f"the model's output was cut off by max_tokens ({self.max_tokens}) inside a "
                    f"tool call ({names}), so the call was not run; raise max_tokens "
                    "(`max_tokens` in .defect/config.toml or DEFECT_MAX_TOKENS) or ask for "
                    "smaller steps",
                    kind="max_tokens_in_tool_input",
                    retryable=False,
                    request_id=request_id,
                )
            detail = "; ".join(f"{b.tool_name}: {b.parse_error or 'not closed'}" for b in broken)
            raise ProviderError(
                f"the model sent a tool call whose input is not valid JSON ({detail}); "
                "the call was not run",
                kind="malformed_tool_input",
                retryable=True,
                request_id=request_id,
            )
        content: list[ContentBlock] = []
        for index in sorted(self.blocks):
            block = self._block(self.blocks[index])
            if block is not None:
                content.append(block)
        reason = self.stop_reason
        if reason not in _STOP_REASONS:
            log.info("unknown_stop_reason", stop_reason=reason, request_id=request_id)
            reason = "end_turn"
        usage = Usage(
            input_tokens=self.usage.get("input_tokens", 0),
            output_tokens=self.usage.get("output_tokens", 0),
            cache_creation_input_tokens=self.usage.get("cache_creation_input_tokens", 0),
            cache_read_input_tokens=self.usage.get("cache_read_input_tokens", 0),
            web_search_requests=self.usage.get("web_search_requests", 0),
        )
        stop: StopReason = reason  # type: ignore[assignment]
        return Completed(
            message=Message(role="assistant", content=tuple(content)),
            stop_reason=stop,
            usage=usage,
            request_id=request_id,
        )

    @staticmethod
    def _block(entry: _Block) -> ContentBlock | None:
        if entry.kind == "text":
            text = "".join(entry.text)
            return TextBlock(text=text) if text else None
        if entry.kind == "thinking":
            # Byte-exact: the API refuses a thinking block whose text or signature changed.
            return ThinkingBlock(
                thinking="".join(entry.text), signature="".join(entry.signature) or None
            )
        if entry.kind == "redacted_thinking":
            return RedactedThinkingBlock(data=entry.data)
        if entry.kind == "tool_use":
            return ToolUseBlock(id=entry.tool_id, name=entry.tool_name, input=entry.parsed or {})
        if entry.kind == "server_tool_use":
            return ServerToolUseBlock(
                id=entry.tool_id, name=entry.tool_name, input=entry.parsed or {}
            )
        return entry.result
