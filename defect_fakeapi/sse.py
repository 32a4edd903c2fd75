"""The SSE events of one scripted reply, in the real API's order.

Owns `build_events`: `message_start`, then per block `content_block_start`, its deltas
(text and thinking in chunks, tool input - a server tool's too - as `input_json_delta`
pieces, the thinking signature; a `web_search_tool_result` arrives whole in its start) and
`content_block_stop`, then `message_delta` (stop reason, usage with `server_tool_use`'s
`web_search_requests` when the reply searched) and `message_stop`. The HTTP handler writes
them as SSE lines, or wraps each in a Bedrock event-stream frame (`defect_fakeapi.eventstream`).

Invariant: the events of a reply are the same for both wires; only the framing differs.

Why: one encoder for both providers keeps the Anthropic and Bedrock paths honest alike.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

from defect_fakeapi.script import (
    RedactedThinkingBlock,
    Reply,
    ServerToolUseBlock,
    TextBlock,
    ThinkingBlock,
    ToolUseBlock,
    WebSearchResultBlock,
    random_id,
)


def _chunks(text: str, size: int) -> Iterator[str]:
    size = max(1, size)
    for start in range(0, len(text), size):
        yield text[start : start + size]


def build_events(
    reply: Reply,
    *,
    model: str,
    input_tokens: int,
    sign: Callable[[str], str],
    bedrock: bool = False,
) -> list[tuple[str, dict[str, Any]]]:
    """The stream events for a reply, in the real order (pings are added by the writer)."""
    usage = reply.usage
    in_tokens = usage.input_tokens if usage.input_tokens is not None else input_tokens
    output_chars = 0
    events: list[tuple[str, dict[str, Any]]] = []
    message_id = random_id("msg_bdrk_01" if bedrock else "msg_01")
    start_usage = {
        "input_tokens": in_tokens,
        "cache_creation_input_tokens": usage.cache_creation_input_tokens,
        "cache_read_input_tokens": usage.cache_read_input_tokens,
        "output_tokens": 1,
    }
    events.append(
        (
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": message_id,
                    "type": "message",
                    "role": "assistant",
                    "model": model,
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": start_usage,
                },
            },
        )
    )

    def delta(index: int, payload: dict[str, Any]) -> None:
        events.append(
            (
                "content_block_delta",
                {"type": "content_block_delta", "index": index, "delta": payload},
            )
        )

    for index, block in enumerate(reply.blocks):
        start: dict[str, Any]
        if isinstance(block, TextBlock):
            start = {"type": "text", "text": ""}
        elif isinstance(block, ThinkingBlock):
            start = {"type": "thinking", "thinking": "", "signature": ""}
        elif isinstance(block, RedactedThinkingBlock):
            start = {"type": "redacted_thinking", "data": block.data}
        elif isinstance(block, ServerToolUseBlock):
            start = {"type": "server_tool_use", "id": block.id, "name": block.name, "input": {}}
        elif isinstance(block, WebSearchResultBlock):
            start = {
                "type": "web_search_tool_result",
                "tool_use_id": block.tool_use_id,
                "content": block.wire_content(),
            }
        else:
            start = {"type": "tool_use", "id": block.id, "name": block.name, "input": {}}
        events.append(
            (
                "content_block_start",
                {"type": "content_block_start", "index": index, "content_block": start},
            )
        )
        if isinstance(block, TextBlock):
            output_chars += len(block.text)
            for piece in _chunks(block.text, reply.chunk_size):
                delta(index, {"type": "text_delta", "text": piece})
        elif isinstance(block, ThinkingBlock):
            output_chars += len(block.thinking)
            for piece in _chunks(block.thinking, reply.chunk_size * 2):
                delta(index, {"type": "thinking_delta", "thinking": piece})
            signature = block.signature if block.signature is not None else sign(block.thinking)
            delta(index, {"type": "signature_delta", "signature": signature})
        elif isinstance(block, ServerToolUseBlock):
            raw = json.dumps(dict(block.input))
            output_chars += len(raw)
            for piece in _chunks(raw, reply.chunk_size):
                delta(index, {"type": "input_json_delta", "partial_json": piece})
        elif isinstance(block, ToolUseBlock):
            raw = block.raw_json if block.raw_json is not None else json.dumps(dict(block.input))
            output_chars += len(raw)
            delta(index, {"type": "input_json_delta", "partial_json": ""})
            for piece in _chunks(raw, reply.chunk_size):
                delta(index, {"type": "input_json_delta", "partial_json": piece})
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))

    out_tokens = (
        usage.output_tokens if usage.output_tokens is not None else max(1, output_chars // 4)
    )
    final_usage: dict[str, Any] = {
        "input_tokens": in_tokens,
        "cache_creation_input_tokens": usage.cache_creation_input_tokens,
        "cache_read_input_tokens": usage.cache_read_input_tokens,
        "output_tokens": out_tokens,
    }
    searches = sum(
        1 for b in reply.blocks if isinstance(b, ServerToolUseBlock) and b.name == "web_search"
    )
    if searches:
        final_usage["server_tool_use"] = {"web_search_requests": searches, "web_fetch_requests": 0}
    events.append(
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": reply.stop_reason, "stop_sequence": reply.stop_sequence},
                "usage": final_usage,
            },
        )
    )
    stop: dict[str, Any] = {"type": "message_stop"}
    if bedrock:
        stop["amazon-bedrock-invocationMetrics"] = {
            "inputTokenCount": in_tokens,
            "outputTokenCount": out_tokens,
            "invocationLatency": 1,
            "firstByteLatency": 1,
        }
    events.append(("message_stop", stop))
    return events
