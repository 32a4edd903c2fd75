"""The stream's deltas read without a model apiece reach the assembler as the SDK's would.

`defect_core/providers/anthropic/stream_events.py` builds a known `content_block_delta` from
the parsed JSON itself and every other event with the SDK's public model of its type. These
tests check the promises that make that safe: `StreamAssembler` reads the same from either, on
every delta kind; a delta of another shape takes the SDK's model; every other event is the
very object the SDK's own stream builds (its `construct_type` over `RawMessageStreamEvent`,
the reference here), and an event of an unknown type is skipped by the assembler either way.
The last one streams a reply with every kind of block from the strict fake API on 127.0.0.1
through the real SDK both ways (`messages.create`, and `create_stream` read with
`stream_event`) and compares what the assembler made of each.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from typing import Any

import pytest

from defect_core.config import Settings
from defect_core.providers.anthropic import anthropic_provider
from defect_core.providers.anthropic.call import create_stream
from defect_core.providers.anthropic.provider import AnthropicProvider
from defect_core.providers.anthropic.stream import StreamAssembler
from defect_core.providers.anthropic.stream_events import (
    ContentDelta,
    OtherEvent,
    content_delta,
    stream_event,
)
from defect_fakeapi import DEFAULT_API_KEY, FakeProvider, Reply

DELTAS = [
    {"type": "text_delta", "text": "héllo <b>"},
    {"type": "thinking_delta", "thinking": "let me see"},
    {"type": "input_json_delta", "partial_json": '{"key": "v'},
    {"type": "signature_delta", "signature": "c2lnbmVk"},
]
"""One delta of each kind the assembler reads."""

READ = ("text", "thinking", "partial_json", "signature")


def _sdk_event(data: dict[str, Any]) -> Any:
    from anthropic._models import construct_type
    from anthropic.types import RawMessageStreamEvent

    return construct_type(type_=RawMessageStreamEvent, value=data)


@pytest.mark.parametrize("delta", DELTAS, ids=[d["type"] for d in DELTAS])
def test_a_known_delta_reads_as_the_sdk_event_does(delta: dict[str, Any]) -> None:
    data = {"type": "content_block_delta", "index": 3, "delta": delta}
    ours, theirs = stream_event(data), _sdk_event(data)
    assert isinstance(ours, ContentDelta)
    assert (ours.type, ours.index, ours.delta.type) == (
        theirs.type,
        theirs.index,
        theirs.delta.type,
    )
    field = next(name for name in READ if name in delta)
    assert getattr(ours.delta, field) == getattr(theirs.delta, field) == delta[field]


@pytest.mark.parametrize(
    "data",
    [
        {"type": "content_block_delta", "index": 0, "delta": {"type": "citations_delta"}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": 5}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta"}},
        {"type": "content_block_delta", "index": True, "delta": DELTAS[0]},
        {"type": "content_block_delta", "index": "0", "delta": DELTAS[0]},
        {"type": "content_block_delta", "index": 0, "delta": "text"},
        {"type": "content_block_stop", "index": 0},
        {"type": "message_stop"},
        ["content_block_delta"],
    ],
)
def test_any_other_shape_is_left_to_the_sdk(data: Any) -> None:
    assert content_delta(data) is None
    if isinstance(data, dict):
        built = stream_event(data)
        assert not isinstance(built, ContentDelta)
        assert type(built) is type(_sdk_event(data))
        assert built == _sdk_event(data)


USAGE = {
    "input_tokens": 12,
    "output_tokens": 3,
    "cache_read_input_tokens": 5,
    "server_tool_use": {"web_search_requests": 1},
}
EVENTS: list[dict[str, Any]] = [
    {
        "type": "message_start",
        "message": {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-x",
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": USAGE,
        },
    },
    {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    {
        "type": "content_block_start",
        "index": 1,
        "content_block": {"type": "tool_use", "id": "toolu_1", "name": "n", "input": {}},
    },
    {
        "type": "content_block_start",
        "index": 2,
        "content_block": {
            "type": "web_search_tool_result",
            "tool_use_id": "srvtoolu_1",
            "content": [
                {
                    "type": "web_search_result",
                    "url": "https://e.x",
                    "title": "t",
                    "encrypted_content": "e",
                    "page_age": None,
                },
            ],
        },
    },
    {"type": "content_block_start", "index": 3, "content_block": {"type": "new_block_kind"}},
    {"type": "content_block_stop", "index": 0},
    {
        "type": "message_delta",
        "delta": {"stop_reason": "end_turn", "stop_sequence": None},
        "usage": {"output_tokens": 9},
    },
    {"type": "message_stop"},
]


@pytest.mark.parametrize("data", EVENTS, ids=[f"{e['type']}-{i}" for i, e in enumerate(EVENTS)])
def test_every_other_event_is_the_object_the_sdk_builds(data: dict[str, Any]) -> None:
    built, theirs = stream_event(data), _sdk_event(data)
    assert type(built) is type(theirs) and built == theirs


def test_an_event_of_an_unknown_type_is_skipped_either_way() -> None:
    data = {"type": "message_annotation", "note": {"x": 1}}
    built = stream_event(data)
    assert isinstance(built, OtherEvent) and built.type == "message_annotation"
    for event in (built, _sdk_event(data)):
        assembler = StreamAssembler(max_tokens=10)
        assert assembler.feed(event) == []
        assert (assembler.started, assembler.stopped, assembler.blocks) == (False, False, {})


@pytest.fixture
async def provider(
    fake_provider: FakeProvider, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[AnthropicProvider]:
    for name in list(os.environ):
        if name.startswith(("ANTHROPIC_", "DEFECT_", "OTEL_")):
            monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("ANTHROPIC_API_KEY", DEFAULT_API_KEY)
    opened = anthropic_provider(Settings(provider="anthropic", base_url=fake_provider.url))
    yield opened
    await opened.aclose()


async def _assembled(stream: Any, read: Any = None) -> tuple[list[Any], list[str], Any]:
    """What the assembler made of a stream (each item read with `read`, when given): its
    chunks, the event types, the message."""
    assembler = StreamAssembler(max_tokens=4096)
    chunks: list[Any] = []
    kinds: list[str] = []
    async for item in stream:
        event = read(item) if read is not None else item
        kinds.append(type(event).__name__)
        chunks.extend(assembler.feed(event))
    await stream.close()
    return chunks, kinds, assembler.finish("req")


@pytest.mark.anyio
async def test_a_streamed_reply_assembles_the_same_through_either_build(
    fake_provider: FakeProvider, provider: AnthropicProvider
) -> None:
    client, _ = await provider._ready()
    reply = Reply.thinking(
        "first I think",
        Reply.tool_use("toolu_01", "lookup", {"key": "a value"}, text_before="some text here"),
    )
    fake_provider.enqueue(reply, reply)
    body = {
        "model": provider.default_model(),
        "max_tokens": 4096,
        "messages": [{"role": "user", "content": "hello"}],
        "thinking": {"type": "enabled", "budget_tokens": 2048},
        "tools": [{"name": "lookup", "description": "d", "input_schema": {"type": "object"}}],
    }
    sdk_chunks, sdk_kinds, sdk_message = await _assembled(
        await client.messages.create(**body, stream=True)
    )
    our_chunks, our_kinds, our_message = await _assembled(
        await create_stream(client, body), stream_event
    )
    assert our_chunks == sdk_chunks and our_message == sdk_message
    assert {"ThinkingDelta", "TextDelta", "ToolInputDelta"} <= {
        type(c).__name__ for c in our_chunks
    }
    # Every delta took the light path; every other event is still the SDK's own.
    deltas = [i for i, k in enumerate(sdk_kinds) if k == "RawContentBlockDeltaEvent"]
    assert deltas and all(our_kinds[i] == "ContentDelta" for i in deltas)
    assert [k for k in our_kinds if k != "ContentDelta"] == [
        k for k in sdk_kinds if k != "RawContentBlockDeltaEvent"
    ]
    assert not any(r.rejected for r in fake_provider.requests)
