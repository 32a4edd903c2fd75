"""One streamed Chat Completions answer, assembled: deltas to show, one message at the end.

Owns `ChatAssembler`, fed the chunks of one stream (as dicts) one at a time: it returns the
chunks to forward (`ThinkingDelta` for `reasoning_content` / `reasoning`, `TextDelta` for
`content`, `ToolUseStarted` once a call's id and name are known, `ToolInputDelta` for each
`arguments` fragment), and at the end (`finish`) builds the one `Completed` message, or
refuses to.

Invariants (docs/architecture.md, Integrity: the stream-error guard):
- `Completed` is built only for a stream that sent its `finish_reason`; a stream that ends
  before (cut, or a server that died) is a retryable `stream_incomplete`: the deltas already
  returned were only shown, and no half-streamed call can run.
- Tool calls are assembled per `index`, whatever the interleaving; their `arguments` parsed
  as a JSON object at the end. Under `length` the calls stay (the runner runs none of a reply
  cut by `max_tokens`); otherwise a call whose arguments are not a JSON object fails the
  stream as `malformed_tool_input` (retryable), as on the Messages wire; a call the server
  sent without a name is kept nameless, for `integrity.drop_malformed_tool_uses` to drop.
- Ids are legal on both wires when they enter history: a server's id in a shape the Messages
  wire forbids (`functions.bash:0`) or over 40 characters is mapped (`openai_wire.chat_call_id`,
  the one mapping); a call without an id gets one.
- Usage is the Messages accounting: `prompt_tokens` less `cached_tokens` as input, the cached
  ones as cache reads; a server that sends none reports zeros.
- Reasoning is kept as unsigned thinking: shown and stored, never sent to any wire again.
- Pure: chunks in, chunks out; no SDK import, no I/O.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field
from typing import Any

from defect_core.log import get_logger
from defect_core.model import ContentBlock, Message, TextBlock, ThinkingBlock, ToolUseBlock
from defect_core.providers.base import (
    Completed,
    ProviderError,
    StopReason,
    StreamChunk,
    TextDelta,
    ThinkingDelta,
    ToolInputDelta,
    ToolUseStarted,
    Usage,
)
from defect_core.providers.openai_wire import chat_call_id

__all__ = ["ChatAssembler", "stop_reason_of"]

log = get_logger("defect.provider")

_STOP: dict[str, StopReason] = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "length": "max_tokens",
    "content_filter": "refusal",
}


def stop_reason_of(finish_reason: str, *, has_calls: bool) -> StopReason:
    """The Messages stop reason of a `finish_reason` (`stop` with calls: `tool_use`)."""
    reason = _STOP.get(finish_reason)
    if reason is None:
        log.info("unknown_finish_reason", finish_reason=finish_reason)
        reason = "end_turn"
    if reason == "end_turn" and has_calls:
        return "tool_use"  # servers that say `stop` after calling tools
    return reason


@dataclass
class _Call:
    id: str = ""
    name: str = ""
    started: bool = False
    arguments: list[str] = field(default_factory=list)


class ChatAssembler:
    """Feed it each chunk of a stream (`feed`), then ask for the message (`finish`)."""

    def __init__(self, *, max_tokens: int, provider: str) -> None:
        self.max_tokens = max_tokens
        self.provider = provider
        self.thinking: list[str] = []
        self.text: list[str] = []
        self.calls: dict[int, _Call] = {}
        self.finish_reason: str | None = None
        self.usage = Usage()

    def feed(self, chunk: dict[str, Any]) -> list[StreamChunk]:
        out: list[StreamChunk] = []
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self.usage = _usage(usage)
        for choice in chunk.get("choices") or ():
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            reasoning = delta.get("reasoning_content") or delta.get("reasoning")
            if isinstance(reasoning, str) and reasoning:
                self.thinking.append(reasoning)
                out.append(ThinkingDelta(reasoning))
            content = delta.get("content")
            if isinstance(content, str) and content:
                self.text.append(content)
                out.append(TextDelta(content))
            for fragment in delta.get("tool_calls") or ():
                out.extend(self._call(fragment))
            if choice.get("finish_reason"):
                self.finish_reason = str(choice["finish_reason"])
        return out

    def _call(self, fragment: dict[str, Any]) -> list[StreamChunk]:
        index = fragment.get("index", len(self.calls))
        call = self.calls.setdefault(int(index), _Call())
        if fragment.get("id"):
            call.id = chat_call_id(str(fragment["id"]))
        function = fragment.get("function") or {}
        if function.get("name"):
            call.name = call.name or str(function["name"])
        out: list[StreamChunk] = []
        if not call.started and call.name:
            call.id = call.id or f"call_{secrets.token_hex(12)}"
            call.started = True
            out.append(ToolUseStarted(call.id, call.name))
            out.extend(ToolInputDelta(call.id, piece) for piece in call.arguments)
        piece = function.get("arguments")
        if isinstance(piece, str) and piece:
            call.arguments.append(piece)
            if call.started:
                out.append(ToolInputDelta(call.id, piece))
        return out

    def finish(self, request_id: str | None) -> Completed:
        """The whole message, or `ProviderError` when the stream did not finish."""
        if self.finish_reason is None:
            raise ProviderError(
                f"{self.provider}: the response stream ended before the answer was complete "
                "(no finish_reason); the partial reply was not kept",
                kind="stream_incomplete",
                retryable=True,
                request_id=request_id,
            )
        stop = stop_reason_of(self.finish_reason, has_calls=bool(self.calls))
        content: list[ContentBlock] = []
        thinking = "".join(self.thinking)
        if thinking.strip():
            content.append(ThinkingBlock(thinking=thinking))
        text = "".join(self.text)
        if text:
            content.append(TextBlock(text=text))
        broken: list[str] = []
        for index in sorted(self.calls):
            call = self.calls[index]
            raw = "".join(call.arguments)
            try:
                value = json.loads(raw) if raw.strip() else {}
            except ValueError:
                value = None
            if not isinstance(value, dict):
                if stop != "max_tokens":
                    broken.append(call.name or f"call {index}")
                value = {}
            content.append(
                ToolUseBlock(
                    id=call.id or f"call_{secrets.token_hex(12)}", name=call.name, input=value
                )
            )
        if broken:
            raise ProviderError(
                f"the model sent a tool call whose arguments are not a JSON object "
                f"({', '.join(broken)}); the call was not run",
                kind="malformed_tool_input",
                retryable=True,
                request_id=request_id,
            )
        return Completed(
            message=Message(role="assistant", content=tuple(content)),
            stop_reason=stop,
            usage=self.usage,
            request_id=request_id,
        )


def _usage(usage: dict[str, Any]) -> Usage:
    prompt = _int(usage.get("prompt_tokens"))
    details = usage.get("prompt_tokens_details")
    cached = _int(details.get("cached_tokens")) if isinstance(details, dict) else 0
    cached = min(cached, prompt)
    return Usage(
        input_tokens=prompt - cached,
        output_tokens=_int(usage.get("completion_tokens")),
        cache_read_input_tokens=cached,
    )


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0
