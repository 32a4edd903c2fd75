"""A scripted `Reply` as the chunks a Chat Completions server streams, and their SSE lines.

Owns `build_chunks` (the `chat.completion.chunk` objects of one answer, in the real order) and
`encode_chunk` / `DONE` (the `data: {json}` lines, then `data: [DONE]`), plus `completion`, the
non-streamed answer of the same reply.

The real shapes, kept here:
- the first chunk carries `delta: {"role": "assistant", "content": ""}`;
- a `ThinkingBlock` streams as `reasoning_content` deltas (DeepSeek's field; `reasoning`,
  OpenRouter's, when the fake plays that server: `FakeProvider.chat_reasoning_field`), text
  as `content` deltas, both cut into `Reply.chunk_size` characters;
- a tool call opens with `{"index", "id", "type": "function", "function": {"name",
  "arguments": ""}}`, then its `arguments` arrive in fragments of `chunk_size` characters (cut
  anywhere, inside a JSON string or a number too); the calls of one answer are interleaved
  fragment by fragment, each delta naming its `index`;
- the last choice chunk has `finish_reason` (`stop`, `tool_calls`, `length`,
  `content_filter`, from the reply's stop reason) and an empty delta;
- with `stream_options.include_usage` every chunk has `"usage": null` and one more chunk
  follows with `choices: []` and the usage (`prompt_tokens` counting the cached ones,
  `prompt_tokens_details.cached_tokens`), unless the reply plays a server that ignores it
  (`Reply.chat_usage=False`).

llama.cpp's server (`Reply.chat_dialect="llama.cpp"`, seen by `scripts/real_server_check.py`)
differs from the above in shape only: the role chunk's `content` is null, and there is no role
chunk at all when the answer opens with a character outside ASCII (the server's first token
is then part of a character, and its first chunk carries the whole character); a choice has no
`logprobs` key and a chunk no `"usage": null`; a message has no `refusal`; the usage has no
`completion_tokens_details` nor `audio_tokens`, and a `timings` object stands beside it (in the
usage chunk and the non-streamed body; on the finishing chunk when no usage chunk follows).

Invariant: the fault positions of a reply (`cut_after`, `stall_after`) count these chunks, the
role chunk (where there is one) being chunk 1, as they count events on the Messages wire.

Why: an agent's assembly of fragments is only proven against fragments cut the way servers
cut them.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

from defect_fakeapi.script import (
    Reply,
    TextBlock,
    ThinkingBlock,
    ToolUseBlock,
    random_id,
)

__all__ = [
    "DONE",
    "LLAMA_CPP",
    "REASONING_FIELDS",
    "build_chunks",
    "completion",
    "encode_chunk",
    "finish_reason",
]

LLAMA_CPP = "llama.cpp"

DONE = b"data: [DONE]\n\n"

_FINISH = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "refusal": "content_filter",
}


def finish_reason(reply: Reply) -> str:
    """The `finish_reason` of `reply`'s stop reason."""
    return _FINISH.get(reply.stop_reason or "end_turn", "stop")


def _pieces(text: str, size: int) -> list[str]:
    size = max(1, size)
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def _arguments(block: ToolUseBlock) -> str:
    if block.raw_json is not None:
        return block.raw_json
    return json.dumps(dict(block.input), separators=(",", ":"))


def usage_of(reply: Reply, estimated: int) -> dict[str, Any]:
    """The `usage` object of an answer: the reply's counts, else `estimated` prompt tokens."""
    fresh = reply.usage.input_tokens if reply.usage.input_tokens is not None else estimated
    cached = reply.usage.cache_read_input_tokens
    output = reply.usage.output_tokens if reply.usage.output_tokens is not None else 12
    if reply.chat_dialect == LLAMA_CPP:
        return {
            "completion_tokens": output,
            "prompt_tokens": fresh + cached,
            "total_tokens": fresh + cached + output,
            "prompt_tokens_details": {"cached_tokens": cached},
        }
    return {
        "prompt_tokens": fresh + cached,
        "completion_tokens": output,
        "total_tokens": fresh + cached + output,
        "prompt_tokens_details": {"cached_tokens": cached, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0},
    }


REASONING_FIELDS = ("reasoning_content", "reasoning")
"""The fields servers stream reasoning in: DeepSeek's (and vLLM's), OpenRouter's."""


def _timings(reply: Reply, estimated: int) -> dict[str, Any]:
    """llama.cpp's `timings` beside the usage (the figures are made up; the keys are its)."""
    usage = usage_of(reply, estimated)
    return {
        "cache_n": usage["prompt_tokens_details"]["cached_tokens"],
        "prompt_n": usage["prompt_tokens"] - usage["prompt_tokens_details"]["cached_tokens"],
        "prompt_ms": 1.0,
        "predicted_n": usage["completion_tokens"],
        "predicted_ms": 1.0,
    }


def build_chunks(
    reply: Reply,
    *,
    model: str,
    include_usage: bool,
    estimated_tokens: int,
    reasoning_field: str = "reasoning_content",
) -> list[dict[str, Any]]:
    """Every chunk of `reply`'s answer, in the order the server sends them."""
    if reasoning_field not in REASONING_FIELDS:
        raise ValueError(f"no server streams reasoning as {reasoning_field!r}")
    ident = random_id("chatcmpl-")
    created = int(time.time())
    with_usage = include_usage and reply.chat_usage
    llama = reply.chat_dialect == LLAMA_CPP

    def chunk(delta: Mapping[str, Any], finish: str | None = None) -> dict[str, Any]:
        choice: dict[str, Any] = {"index": 0, "delta": dict(delta), "finish_reason": finish}
        if not llama:
            choice["logprobs"] = None
        data: dict[str, Any] = {
            "id": ident,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "system_fingerprint": "fp_fake",
            "choices": [choice],
        }
        if with_usage and not llama:
            data["usage"] = None
        return data

    first = reply.blocks[0] if reply.blocks else None
    opens_mid_character = llama and isinstance(first, TextBlock) and not first.text[:1].isascii()
    chunks = (
        []
        if opens_mid_character
        else [chunk({"role": "assistant", "content": None if llama else ""})]
    )
    calls: list[ToolUseBlock] = []
    for block in reply.blocks:
        if isinstance(block, ThinkingBlock):
            for piece in _pieces(block.thinking, reply.chunk_size):
                chunks.append(chunk({reasoning_field: piece}))
        elif isinstance(block, TextBlock):
            for piece in _pieces(block.text, reply.chunk_size):
                chunks.append(chunk({"content": piece}))
        elif isinstance(block, ToolUseBlock):
            calls.append(block)
    fragments = [_pieces(_arguments(call), reply.chunk_size) for call in calls]
    for index, call in enumerate(calls):
        opening = {
            "index": index,
            "id": call.id,
            "type": "function",
            "function": {"name": call.name, "arguments": ""},
        }
        chunks.append(chunk({"tool_calls": [opening]}))
    for step in range(max((len(f) for f in fragments), default=0)):
        for index, pieces in enumerate(fragments):
            if step < len(pieces) and pieces[step]:
                delta = {"index": index, "function": {"arguments": pieces[step]}}
                chunks.append(chunk({"tool_calls": [delta]}))
    chunks.append(chunk({}, finish_reason(reply)))
    if llama and not with_usage:
        chunks[-1]["timings"] = _timings(reply, estimated_tokens)
    if with_usage:
        last: dict[str, Any] = {
            "id": ident,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "system_fingerprint": "fp_fake",
            "choices": [],
            "usage": usage_of(reply, estimated_tokens),
        }
        if llama:
            last["timings"] = _timings(reply, estimated_tokens)
        chunks.append(last)
    return chunks


def encode_chunk(data: Mapping[str, Any]) -> bytes:
    """One SSE event: `data: {json}` and a blank line (servers send no `event:` line)."""
    return b"data: " + json.dumps(data, separators=(",", ":")).encode("utf-8") + b"\n\n"


def completion(
    reply: Reply,
    *,
    model: str,
    estimated_tokens: int,
    reasoning_field: str = "reasoning_content",
) -> dict[str, Any]:
    """The non-streamed answer (`stream` absent or false) of `reply`."""
    text = "".join(b.text for b in reply.blocks if isinstance(b, TextBlock))
    reasoning = "".join(b.thinking for b in reply.blocks if isinstance(b, ThinkingBlock))
    calls = [
        {
            "id": b.id,
            "type": "function",
            "function": {"name": b.name, "arguments": _arguments(b)},
        }
        for b in reply.blocks
        if isinstance(b, ToolUseBlock)
    ]
    llama = reply.chat_dialect == LLAMA_CPP
    message: dict[str, Any] = {"role": "assistant", "content": text or None}
    if not llama:
        message["refusal"] = None
    if reasoning:
        message[reasoning_field] = reasoning
    if calls:
        message["tool_calls"] = calls
    finish = finish_reason(reply)
    choice: dict[str, Any] = {"index": 0, "message": message, "finish_reason": finish}
    if not llama:
        choice["logprobs"] = None
    body: dict[str, Any] = {
        "id": random_id("chatcmpl-"),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "system_fingerprint": "fp_fake",
        "choices": [choice],
        "usage": usage_of(reply, estimated_tokens),
    }
    if llama:
        body["timings"] = _timings(reply, estimated_tokens)
    return body
