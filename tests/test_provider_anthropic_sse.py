"""defect's own SSE reader yields what the SDK's reader yields, and raises what it raises.

`defect_core/providers/anthropic/sse.py` splits the response's bytes into events itself and
`call.stream_batches` uses it where the SDK would run its plain `SSEDecoder`. The first tests
hold it against the SDK's own `SSEDecoder` (the reference, not a copy of it) on streams with
every line ending, comments, multi-line data, pings and unnamed events, cut into reads at
every byte. The others stream replies from the strict fake API on 127.0.0.1 through the real
SDK both ways - the stream `create_stream` returns iterated by the SDK, and read with
`stream_batches` - and compare the events, and the exception of an `error` event, and pin
that the SDK this project installs takes defect's reader on the Anthropic API route. The last
ones read the body through httpx's public reader over plain HTTP and TLS: the connection is
kept alive after, and a connection dropped mid-body raises what the SDK's iteration raises.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from defect_core.config import Settings
from defect_core.providers.anthropic import anthropic_provider
from defect_core.providers.anthropic.call import create_stream, stream_batches
from defect_core.providers.anthropic.provider import AnthropicProvider
from defect_core.providers.anthropic.sse import SseReader, read_events
from defect_fakeapi import DEFAULT_API_KEY, FakeProvider, Reply
from tests.support.tls import self_signed

STREAMS = [
    b'event: message_start\ndata: {"a": 1}\n\nevent: ping\ndata: {}\n\n'
    b'event: content_block_delta\ndata: {"t": "h\xc3\xa9llo"}\n\n',
    b"event: x\r\ndata: one\r\ndata: two\r\n\r\n: a comment\r\nevent:y\r\ndata:3\r\n\r\n",
    b"event: cr\rdata: only\r\r\r\revent: mixed\ndata: m\r\n\rdata: unnamed\n\n",
    b"data: no name\n\nevent: e\nid: 7\nretry: 10\nfoo: bar\ndata:  two spaces\n\n\n\n",
    b"event: e\ndata:\n\nevent: f\ndata: last, never ended\n",
    b"event: g\ndata: ended by a last cr\n\r",
]


def _sdk_events(stream: bytes) -> list[tuple[str, str]]:
    """What the SDK's `SSEDecoder` makes of `stream` (in one read), named events only (the
    SDK's stream skips the others)."""
    from anthropic._streaming import SSEDecoder

    return [(e.event, e.data) for e in SSEDecoder().iter_bytes(iter([stream])) if e.event]


def _ours(reads: list[bytes]) -> list[tuple[str, str]]:
    reader = SseReader()
    events = [event for read in reads for event in reader.feed(read)]
    return events + reader.finish()


@pytest.mark.parametrize("stream", STREAMS, ids=range(len(STREAMS)))
def test_events_match_the_sdk_decoder_wherever_the_reads_split(stream: bytes) -> None:
    expected = _sdk_events(stream)
    assert expected  # every stream has events to compare
    assert _ours([stream]) == expected
    for cut in range(1, len(stream)):
        assert _ours([stream[:cut], stream[cut:]]) == expected, cut
    assert _ours([stream[i : i + 1] for i in range(len(stream))]) == expected


ONE_EVENT_READS = [
    b'event: message_start\ndata: {"a": 1}\n\n',
    b"event: a:b\ndata: x: y\n\n",
    b"event:  spaced\ndata:  two\n\n",
    b"event: \ndata: unnamed\n\n",
    b"event: e\ndata: \n\n",
    b"event: e\ndata: one\ndata: two\n\n",
    b"event: e\ndata:tight\n\n",
    b"event: e\r\ndata: crlf\r\n\r\n",
    b"event: ping\ndata: {}\n\n",
]


def test_reads_of_one_event_each_match_the_sdk_decoder() -> None:
    # Each read is one whole event, as the API writes one per HTTP chunk: the reader's
    # shortcut for such a read must say what the line-by-line path and the SDK say.
    expected = _sdk_events(b"".join(ONE_EVENT_READS))
    assert _ours(ONE_EVENT_READS) == expected
    assert ("", "unnamed") not in expected and ("a:b", "x: y") in expected


def test_a_single_event_read_that_is_not_utf8_fails_as_the_sdk_does() -> None:
    reader = SseReader()
    assert reader.feed(b"event: a\ndata: 1\n\n") == [("a", "1")]
    assert reader.feed(b"event: b\ndata: \xff\n\n") == []
    assert isinstance(reader.error, UnicodeDecodeError)


@pytest.mark.anyio
async def test_a_line_that_is_not_utf8_stops_the_stream_at_the_read_that_held_it() -> None:
    # One plain event, then the bad line, in one read: the event is handed over and the
    # error raised before any later read is taken.
    reads = [b'event: a\ndata: {"n": 1}\n\nevent: b\ndata: \xff\n\n', b"event: c\ndata: {}\n\n"]
    taken: list[bytes] = []

    async def body() -> AsyncIterator[bytes]:
        for read in reads:
            taken.append(read)
            yield read

    seen: list[Any] = []
    with pytest.raises(UnicodeDecodeError):
        async for batch in read_events(body(), lambda m, b: RuntimeError(m), 200):
            seen.extend(batch)
    assert seen == [{"n": 1}]
    assert taken == reads[:1]


def test_every_event_complete_in_a_read_comes_out_of_that_read() -> None:
    reader = SseReader()
    first = reader.feed(b"event: a\ndata: 1\n\nevent: b\ndata: 2\n\nevent: c\nda")
    assert first == [("a", "1"), ("b", "2")]
    assert reader.feed(b"ta: 3\n\n") == [("c", "3")]


async def _read_all(stream: bytes) -> tuple[list[Any], BaseException | None]:
    """What `read_events` hands over for `stream` (in one read), and what it raised."""

    async def body() -> AsyncIterator[bytes]:
        yield stream

    def make_error(message: str, body: object) -> Exception:
        return RuntimeError(message, body)

    seen: list[Any] = []
    try:
        async for batch in read_events(body(), make_error, 200):
            seen.extend(batch)
    except Exception as exc:
        return seen, exc
    return seen, None


GOOD = b'event: a\ndata: {"n": 1}\n\nevent: ping\ndata: {}\n\n'


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("bad", "raised"),
    [
        (b'event: error\ndata: {"type": "error"}\n\n', RuntimeError),
        (b"event: b\ndata: {not json\n\n", ValueError),
        (b"event: b\ndata: \xff\n\n", UnicodeDecodeError),
    ],
    ids=["error event", "not json", "not utf-8"],
)
async def test_a_failure_comes_after_the_events_before_it_even_in_one_read(
    bad: bytes, raised: type[Exception]
) -> None:
    seen, error = await _read_all(GOOD + bad + GOOD)
    assert seen == [{"n": 1}]
    assert isinstance(error, raised)


@pytest.mark.anyio
async def test_an_error_event_is_raised_as_the_sdk_words_it() -> None:
    _, error = await _read_all(b'event: error\ndata: {"type": "error"}\n\n')
    assert error is not None and error.args == ("{'type': 'error'}", {"type": "error"})
    _, error = await _read_all(b"event: error\ndata: not json\n\n")
    assert error is not None and error.args == ("not json", "not json")
    _, error = await _read_all(b"event: error\n\n")
    assert error is not None and error.args == ("Error code: 200", "")


def test_a_line_that_is_not_utf8_fails_as_the_sdk_does() -> None:
    stream = b"event: a\ndata: \xff\n\n"
    with pytest.raises(UnicodeDecodeError):
        _sdk_events(stream)
    reader = SseReader()
    assert reader.feed(stream) == []
    assert isinstance(reader.error, UnicodeDecodeError)


def _isolated(monkeypatch: pytest.MonkeyPatch, *also: str) -> None:
    """No provider setting, tracer or `also` variable of the environment the tests run in:
    the fake's key only."""
    for name in list(os.environ):
        if name.startswith(("ANTHROPIC_", "DEFECT_", "OTEL_", *also)):
            monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("ANTHROPIC_API_KEY", DEFAULT_API_KEY)


@pytest.fixture
async def provider(
    fake_provider: FakeProvider, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[AnthropicProvider]:
    _isolated(monkeypatch)
    opened = anthropic_provider(Settings(provider="anthropic", base_url=fake_provider.url))
    yield opened
    await opened.aclose()


BODY: dict[str, Any] = {
    "max_tokens": 4096,
    "messages": [{"role": "user", "content": "hello"}],
    "thinking": {"type": "enabled", "budget_tokens": 2048},
    "tools": [{"name": "lookup", "description": "d", "input_schema": {"type": "object"}}],
}


async def _both_ways(client: Any, body: dict[str, Any]) -> tuple[list[Any], list[Any]]:
    """The events of the next two replies (each message's id masked): the SDK's iteration of
    the stream, then `stream_batches`."""
    theirs = [_masked(data) async for data in await create_stream(client, body)]
    stream = await create_stream(client, body)
    batches = stream_batches(stream, client)
    assert batches.ag_code.co_name == "read_events"  # the SDK installed takes our reader
    ours = [_masked(data) async for batch in batches for data in batch]
    await stream.close()
    return theirs, ours


def _masked(event: dict[str, Any]) -> dict[str, Any]:
    if event["type"] == "message_start":
        return {**event, "message": {**event["message"], "id": "msg"}}
    return event


@pytest.mark.anyio
async def test_a_streamed_reply_reads_the_same_as_through_the_sdk(
    fake_provider: FakeProvider, provider: AnthropicProvider
) -> None:
    client, _ = await provider._ready()
    reply = Reply.thinking(
        "first I think",
        Reply.tool_use("toolu_01", "lookup", {"key": "a value"}, text_before="some text hére"),
    )
    fake_provider.enqueue(reply, reply)
    theirs, ours = await _both_ways(client, {"model": provider.default_model(), **BODY})
    assert theirs == ours
    assert {"message_start", "content_block_delta", "message_stop"} <= {e["type"] for e in ours}
    assert not any(r.rejected for r in fake_provider.requests)


@pytest.mark.anyio
async def test_an_error_event_raises_what_the_sdk_raises(
    fake_provider: FakeProvider, provider: AnthropicProvider
) -> None:
    client, sdk = await provider._ready()
    failing = Reply.text("partial answer here").error_mid_stream(3)
    fake_provider.enqueue(failing, failing)
    body = {"model": provider.default_model(), **BODY}
    with pytest.raises(sdk.anthropic.APIStatusError) as sdk_raised:
        async for _ in await client.messages.create(**body, stream=True):
            pass
    stream = await create_stream(client, body)
    seen: list[Any] = []
    with pytest.raises(sdk.anthropic.APIStatusError) as we_raised:
        async for batch in stream_batches(stream, client):
            seen.extend(batch)
    await stream.close()
    theirs, ours = sdk_raised.value, we_raised.value
    assert type(ours) is type(theirs)
    assert (str(ours), ours.body, ours.status_code) == (str(theirs), theirs.body, 200)
    assert ours.body["error"]["type"] == "overloaded_error"
    assert [e["type"] for e in seen][:1] == ["message_start"]


def _local_port(response: Any) -> int:
    """The client-side port of the connection that carried `response`."""
    address = response.extensions["network_stream"].get_extra_info("client_addr")
    return int(address[1])


@pytest.mark.anyio
async def test_the_connection_is_reused_once_a_body_is_read(
    fake_provider: FakeProvider, provider: AnthropicProvider
) -> None:
    client, _ = await provider._ready()
    fake_provider.enqueue(Reply.text("first answer here"), Reply.text("second answer"))
    body = {"model": provider.default_model(), **BODY}
    stream = await create_stream(client, body)
    seen = [data async for batch in stream_batches(stream, client) for data in batch]
    await stream.close()
    assert [e["type"] for e in seen][-1] == "message_stop"
    text = "".join(e["delta"]["text"] for e in seen if e["type"] == "content_block_delta")
    assert text == "first answer here"
    again = await create_stream(client, body)
    assert _local_port(again.response) == _local_port(stream.response)  # kept alive
    await again.close()


@pytest.mark.anyio
async def test_over_tls_the_body_reads_as_through_the_sdk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real API's transport: the SDK's own client over HTTPS (trusting the fake's
    certificate through `SSL_CERT_FILE`, as httpx reads it) gives the events the SDK's own
    iteration gives."""
    _isolated(monkeypatch, "SSL_CERT_")
    tls = self_signed(tmp_path, "127.0.0.1")
    monkeypatch.setenv("SSL_CERT_FILE", str(tls.cert))
    with FakeProvider(tls=tls.server) as fake:
        assert fake.url.startswith("https://")
        provider = anthropic_provider(Settings(provider="anthropic", base_url=fake.url))
        try:
            client, _ = await provider._ready()
            reply = Reply.thinking("first I think", Reply.text("then some text hére " * 20))
            fake.enqueue(reply, reply)
            theirs, ours = await _both_ways(client, {"model": provider.default_model(), **BODY})
        finally:
            await provider.aclose()
    assert theirs == ours
    assert "message_stop" in {e["type"] for e in ours}
    assert not any(r.rejected for r in fake.requests)


@pytest.mark.anyio
async def test_a_connection_dropped_mid_body_raises_what_the_sdk_raises(
    fake_provider: FakeProvider, provider: AnthropicProvider
) -> None:
    client, _ = await provider._ready()
    dropped = Reply.text("partial answer here").cut(4, abrupt=True)
    fake_provider.enqueue(dropped, dropped)
    body = {"model": provider.default_model(), **BODY}
    stream = await create_stream(client, body)
    with pytest.raises(Exception) as sdk_raised:  # which one: compared below
        async for _ in stream:
            pass
    await stream.close()
    stream = await create_stream(client, body)
    with pytest.raises(Exception) as we_raised:
        async for _ in stream_batches(stream, client):
            pass
    await stream.close()
    theirs, ours = sdk_raised.value, we_raised.value
    assert type(ours) is type(theirs) and type(ours).__name__ == "RemoteProtocolError"
    assert str(ours) == str(theirs)


@pytest.mark.anyio
async def test_once_a_call_has_completed_the_sdk_is_out_of_the_collectors_reach(
    fake_provider: FakeProvider, provider: AnthropicProvider
) -> None:
    """A full collection during a stream must not walk the SDK's tens of thousands of
    objects (`client.freeze_once`): once a call has completed, its classes are frozen."""
    import gc

    from defect_core.model import Message, TextBlock
    from defect_core.providers.base import Completed, ModelRequest

    fake_provider.enqueue(Reply.text("done"))
    message = Message(role="user", content=(TextBlock(text="hello"),))
    request = ModelRequest(provider.default_model(), "system", [message])
    chunks = [chunk async for chunk in provider.stream(request)]
    assert isinstance(chunks[-1], Completed)
    _, sdk = await provider._ready()
    client_class, stream_class = sdk.anthropic.AsyncAnthropic, sdk.anthropic.AsyncStream
    assert gc.get_freeze_count() > 0
    assert not any(o is client_class or o is stream_class for o in gc.get_objects())
