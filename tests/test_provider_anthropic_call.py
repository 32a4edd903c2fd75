"""The streamed call without the SDK's messages resource sends what `messages.create` sends.

`defect_core/providers/anthropic/call.py` posts through the SDK client itself (so that the
first prompt does not import the messages resource and the types it drags in). These tests
send the same body both ways, through the real SDK and the strict fake API on 127.0.0.1, on
both routes, and compare what arrived byte for byte, and what the SDK was asked (its request
options: path, headers, extra body, timeout). An SDK release that changes
`create` fails here. With a tracer provider set the call is `messages.create` itself (its
spans are the SDK's), and the switch of the SDK's internals (`DEFECT_PRIVATE_PATHS`) changes
nothing of the call. The last tests check that a call hands the event loop back between the
phases of building its request, between closing its stream and assembling the message, and
after a delta that came alone, before the next read of the body.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest

from defect_core.config import Settings
from defect_core.model import Message, TextBlock
from defect_core.providers.anthropic import anthropic_provider, bedrock_provider, call, lazy_sdk
from defect_core.providers.anthropic.call import create_stream, ordered_body
from defect_core.providers.anthropic.provider import AnthropicProvider
from defect_core.providers.anthropic.request import encode_request, route_options
from defect_core.providers.anthropic.stream import StreamAssembler
from defect_core.providers.base import Completed, ModelRequest, TextDelta, ToolSpec
from defect_fakeapi import (
    DEFAULT_API_KEY,
    DEFAULT_AWS_ACCESS_KEY_ID,
    DEFAULT_AWS_SECRET_KEY,
    FakeProvider,
    Reply,
)

pytestmark = pytest.mark.anyio

# Bedrock signs each request with the time: these differ between any two requests.
_SIGNED = {"authorization", "x-amz-date"}
_OPTION_FIELDS = ("method", "url", "headers", "extra_json", "timeout")


@pytest.fixture(autouse=True)
def credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    for name in list(os.environ):
        if name.startswith(("ANTHROPIC_", "AWS_", "DEFECT_", "OTEL_")):
            monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("ANTHROPIC_API_KEY", DEFAULT_API_KEY)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", DEFAULT_AWS_ACCESS_KEY_ID)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", DEFAULT_AWS_SECRET_KEY)
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


@pytest.fixture
async def opened() -> AsyncIterator[list[AnthropicProvider]]:
    providers: list[AnthropicProvider] = []
    yield providers
    for provider in providers:
        await provider.aclose()


def _request(provider: AnthropicProvider) -> ModelRequest:
    schema = {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]}
    return ModelRequest(
        model=provider.default_model(),
        system="You are a test.",
        messages=[Message(role="user", content=(TextBlock(text="hello"),))],
        tools=(ToolSpec("lookup", "Look a key up.", schema),),
        max_tokens=4096,
        thinking_budget=2048,
    )


async def _drain(stream: Any) -> None:
    async for _ in stream:
        pass
    await stream.close()


def _given(value: Any) -> Any:
    """An option as the SDK reads it: a header `create` marks `omit` is left out, and any
    `NotGiven` (whose instances never compare equal) is one value."""
    from anthropic._types import NotGiven, Omit

    if isinstance(value, NotGiven):
        return "not given"
    if isinstance(value, dict):
        return {k: v for k, v in value.items() if not isinstance(v, Omit)}
    return value


@pytest.mark.parametrize("route", ["anthropic", "bedrock"])
async def test_the_call_sends_what_messages_create_sends(
    fake_provider: FakeProvider, opened: list[AnthropicProvider], route: str
) -> None:
    settings = Settings(
        provider=route, base_url=fake_provider.url, bedrock_base_url=fake_provider.url
    )
    build = anthropic_provider if route == "anthropic" else bedrock_provider
    provider = build(settings)
    opened.append(provider)
    body = encode_request(_request(provider))
    assert "thinking" in body and "tools" in body and "system" in body

    asked = await _sent_both_ways(fake_provider, provider, body)

    sdk, ours = fake_provider.requests[-2:]
    assert (ours.method, ours.path, ours.route) == (sdk.method, sdk.path, sdk.route)
    first, second = asked
    for field in _OPTION_FIELDS:
        assert _given(getattr(second, field)) == _given(getattr(first, field)), field


def test_the_body_keeps_creates_key_order() -> None:
    body = {"tools": [], "model": "m", "system": "s", "messages": [], "max_tokens": 1}
    assert list(ordered_body(body)) == [
        "max_tokens",
        "messages",
        "model",
        "stream",
        "system",
        "tools",
    ]
    assert ordered_body(body)["stream"] is True


def _run(code: str) -> Any:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def test_a_tracer_provider_set_is_seen() -> None:
    # A fresh interpreter: the tracer provider is process-wide and can be set only once.
    result = _run(
        """
        import json
        from defect_core.providers.anthropic import call
        before = call._traced()
        from opentelemetry import trace
        trace.set_tracer_provider(trace.NoOpTracerProvider())
        print(json.dumps([before, call._traced()]))
        """
    )
    assert result == [False, True]


async def _sent_both_ways(
    fake_provider: FakeProvider, provider: AnthropicProvider, body: dict[str, Any]
) -> list[Any]:
    """Send `body` through `messages.create` and through `create_stream`; the options the
    client was asked to send (the second is `create_stream`'s), after checking that the fake
    received the same bytes and headers both times. `messages.create` goes through a copy of
    the client on the SDK's own HTTP client, without the request hook defect's has
    (`client.hand_back_the_loop`): the hook must not change a byte either."""
    client, modules = await provider._ready()
    plain_http = modules.anthropic.DefaultAsyncHttpxClient(timeout=client.timeout)
    plain = client.with_options(http_client=plain_http)
    assert not plain_http.event_hooks["request"] and client._client.event_hooks["request"]
    asked: list[Any] = []

    def record(into: Any) -> None:
        request = into.request

        async def recording(*args: Any, **kwargs: Any) -> Any:
            asked.append(args[1] if len(args) > 1 else kwargs["options"])
            return await request(*args, **kwargs)

        into.request = recording

    record(plain)
    record(client)
    options = route_options(provider.route)
    fake_provider.enqueue(Reply.text("one"), Reply.text("two"))
    try:
        await _drain(await plain.messages.create(**body, stream=True, **options))
    finally:
        await plain_http.aclose()
    await _drain(await create_stream(client, body, **options))
    sdk, ours = fake_provider.requests[-2:]
    assert ours.raw_body == sdk.raw_body
    assert {k: v for k, v in ours.headers.items() if k not in _SIGNED} == {
        k: v for k, v in sdk.headers.items() if k not in _SIGNED
    }
    assert not sdk.rejected and not ours.rejected
    return asked


def _on_route(
    route: str, fake_provider: FakeProvider, opened: list[AnthropicProvider]
) -> AnthropicProvider:
    """A provider of `route` (anthropic or bedrock) against the fake, closed after the test."""
    settings = Settings(
        provider=route, base_url=fake_provider.url, bedrock_base_url=fake_provider.url
    )
    provider = (anthropic_provider if route == "anthropic" else bedrock_provider)(settings)
    opened.append(provider)
    return provider


@pytest.mark.parametrize("route", ["anthropic", "bedrock"])
async def test_the_api_route_sends_the_body_encoded_once_and_bedrock_lets_the_sdk_encode(
    fake_provider: FakeProvider, opened: list[AnthropicProvider], route: str
) -> None:
    provider = _on_route(route, fake_provider, opened)
    request = _request(provider)
    # Text the encoder could write otherwise: non-ASCII, escapes, separators, a line separator.
    odd = 'héllo — "quoted" \\ back\tslash\n\u2028 \U0001f600 {"a": 1, "b": [1, 2]}'
    request.messages[0] = Message(role="user", content=(TextBlock(text=odd),))
    body = encode_request(request)

    sdk, ours = await _sent_both_ways(fake_provider, provider, body)

    assert (
        odd in json.loads(fake_provider.requests[-1].raw_body)["messages"][0]["content"][0]["text"]
    )
    assert sdk.content is None and sdk.json_data is not None
    if route == "anthropic":
        # The body went as the bytes `create` would have sent, not as data for the SDK to copy.
        assert isinstance(ours.content, bytes) and ours.json_data is None
        assert ours.content == fake_provider.requests[-1].raw_body
    else:
        # Bedrock's client rewrites the body (the model goes into the path): it gets the data.
        assert ours.content is None and ours.json_data is not None


async def test_a_body_with_values_only_the_sdk_encodes_is_left_to_the_sdk(
    fake_provider: FakeProvider, opened: list[AnthropicProvider]
) -> None:
    from types import MappingProxyType

    provider = anthropic_provider(Settings(provider="anthropic", base_url=fake_provider.url))
    opened.append(provider)
    body = encode_request(_request(provider))
    # A mapping that is not a dict, in a tool's schema: the SDK copies it into a dict first.
    schema = body["tools"][0]["input_schema"]
    body["tools"][0]["input_schema"] = MappingProxyType(schema)

    _, ours = await _sent_both_ways(fake_provider, provider, body)

    assert ours.content is None and ours.json_data is not None
    sent = json.loads(fake_provider.requests[-1].raw_body)
    assert sent["tools"][0]["input_schema"] == schema


class Ticker:
    """Counts how many times another task got the event loop (`ticks`), while running."""

    def __init__(self) -> None:
        self.ticks = 0
        self._stopped = anyio.Event()

    async def run(self) -> None:
        while not self._stopped.is_set():
            self.ticks += 1
            await anyio.lowlevel.checkpoint()

    def stop(self) -> None:
        self._stopped.set()


@pytest.mark.parametrize("route", ["anthropic", "bedrock"])
async def test_the_request_is_built_in_slices_with_the_loop_handed_back_between(
    fake_provider: FakeProvider,
    opened: list[AnthropicProvider],
    route: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Another task (another session's stream, in the agent) runs between the encoding, the
    # SDK's request build and httpx's send: none of them holds the event loop for the rest.
    provider = _on_route(route, fake_provider, opened)
    client, _ = await provider._ready()
    body = encode_request(_request(provider))
    # A first request pays the client's one-time waits (the SDK looks its platform up in a
    # worker thread); the second is built as every later one is.
    fake_provider.enqueue(Reply.text("one"), Reply.text("two"))
    await _drain(await create_stream(client, body, **route_options(provider.route)))
    ticker = Ticker()
    seen: dict[str, int] = {}
    encoded = call._encoded

    def encoding(client: Any, body: dict[str, Any], extra_body: object) -> bytes | None:
        seen["encoding"] = ticker.ticks
        return encoded(client, body, extra_body)

    post = client.post

    async def posting(*args: Any, **kwargs: Any) -> Any:
        seen["building"] = ticker.ticks
        return await post(*args, **kwargs)

    async def sending(request: Any) -> None:  # runs after defect's hook, just before sending
        seen["sending"] = ticker.ticks

    client.post = posting
    monkeypatch.setattr(call, "_encoded", encoding)
    client._client.event_hooks["request"].append(sending)
    try:
        async with anyio.create_task_group() as group:
            group.start_soon(ticker.run)
            await anyio.lowlevel.checkpoint()
            started = ticker.ticks
            stream = await create_stream(client, body, **route_options(provider.route))
            ticker.stop()
    finally:
        client._client.event_hooks["request"].remove(sending)
    await _drain(stream)
    assert started < seen["encoding"] < seen["building"] < seen["sending"], (started, seen)
    assert not fake_provider.requests[-1].rejected


async def test_the_loop_is_handed_back_between_closing_the_stream_and_assembling_the_message(
    fake_provider: FakeProvider, opened: list[AnthropicProvider], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A stream's end (the response closed, then the message assembled and committed) is not
    # one stretch either: another task runs between the close and the assembly.
    from anthropic._streaming import AsyncStream

    provider = anthropic_provider(Settings(provider="anthropic", base_url=fake_provider.url))
    opened.append(provider)
    ticker = Ticker()
    seen: dict[str, int] = {}
    close = AsyncStream.close
    finish = StreamAssembler.finish

    async def closing(self: Any) -> None:
        await close(self)
        seen["closed"] = ticker.ticks

    def finishing(self: StreamAssembler, request_id: str | None) -> Completed:
        seen["assembling"] = ticker.ticks
        return finish(self, request_id)

    fake_provider.enqueue(Reply.text("hello there"))
    chunks: list[Any] = []
    monkeypatch.setattr(AsyncStream, "close", closing)
    monkeypatch.setattr(StreamAssembler, "finish", finishing)
    async with anyio.create_task_group() as group:
        group.start_soon(ticker.run)
        async for chunk in provider.stream(_request(provider)):
            chunks.append(chunk)
        ticker.stop()
    assert isinstance(chunks[-1], Completed) and chunks[-1].message.text() == "hello there"
    assert seen["closed"] < seen["assembling"], seen


async def test_a_delta_that_came_alone_is_let_out_before_the_next_read(
    fake_provider: FakeProvider, opened: list[AnthropicProvider], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The fake waits far longer than QUIET_GAP before each event, and the loop has nothing
    # else to do: once a delta is handed on, the task it woke (the one writing the update to
    # the editor, in the agent) runs before the provider asks the body for its next piece.
    from defect_core.providers.anthropic import provider as provider_module

    provider = anthropic_provider(Settings(provider="anthropic", base_url=fake_provider.url))
    opened.append(provider)
    wake, woken = anyio.create_memory_object_stream[None](64)
    ran = 0
    log: list[tuple[str, int]] = []
    batches_of = provider_module.stream_batches

    async def writer() -> None:
        nonlocal ran
        async with woken:
            async for _ in woken:
                ran += 1

    async def watched(stream: Any, client: Any) -> AsyncIterator[list[Any]]:
        batches = batches_of(stream, client)
        try:
            while True:
                log.append(("ask", ran))
                try:
                    batch = await batches.__anext__()
                except StopAsyncIteration:
                    return
                yield batch
        finally:
            await batches.aclose()

    fake_provider.enqueue(Reply.text("one two three four five six").slow(0.02))
    monkeypatch.setattr(provider_module, "stream_batches", watched)
    async with anyio.create_task_group() as group:
        group.start_soon(writer)
        async with wake:
            async for chunk in provider.stream(_request(provider)):
                if isinstance(chunk, TextDelta):
                    log.append(("delta", ran))
                    wake.send_nowait(None)
    pairs = [(a[1], b[1]) for a, b in itertools.pairwise(log) if (a[0], b[0]) == ("delta", "ask")]
    assert len(pairs) > 1, log
    assert all(asked > handed for handed, asked in pairs), log


@pytest.mark.parametrize("route", ["anthropic", "bedrock"])
async def test_traced_the_call_is_messages_create_and_the_switch_changes_nothing_of_it(
    fake_provider: FakeProvider,
    opened: list[AnthropicProvider],
    monkeypatch: pytest.MonkeyPatch,
    route: str,
) -> None:
    # With a tracer provider set, the call is the SDK's own `messages.create`, iterated by the
    # SDK (its spans are the SDK's); with none, the call posts through the client whatever
    # `DEFECT_PRIVATE_PATHS` says. The reply streams the same every way: the same chunks, the
    # same message, the same request byte for byte.
    from anthropic.resources.messages import AsyncMessages

    settings = Settings(
        provider=route, base_url=fake_provider.url, bedrock_base_url=fake_provider.url
    )
    provider = (anthropic_provider if route == "anthropic" else bedrock_provider)(settings)
    opened.append(provider)
    created: list[bool] = []
    create = AsyncMessages.create

    async def counting(self: Any, *args: Any, **kwargs: Any) -> Any:
        created.append(kwargs.get("stream") is True)
        return await create(self, *args, **kwargs)

    monkeypatch.setattr(AsyncMessages, "create", counting)
    reply = Reply.thinking(
        "first I think",
        Reply.tool_use("toolu_01", "lookup", {"key": "a value"}, text_before="some text hére"),
    )
    ways = [("on", False), ("off", False), ("on", True)]
    fake_provider.enqueue(*[reply] * len(ways))
    streamed: list[list[Any]] = []
    for switch, traced in ways:
        monkeypatch.setenv(lazy_sdk.SWITCH, switch)
        monkeypatch.setattr(call, "_traced", lambda traced=traced: traced)
        assert lazy_sdk.enabled() is (switch == "on")
        streamed.append([chunk async for chunk in provider.stream(_request(provider))])
        assert created == ([True] if traced else [])
    on, off, traced_chunks = streamed
    assert isinstance(on[-1], Completed) and on[-1].stop_reason == "tool_use"
    for other in (off, traced_chunks):
        assert isinstance(other[-1], Completed) and other[-1].message == on[-1].message
        assert [type(c) for c in other] == [type(c) for c in on]
        assert other[:-1] == on[:-1]
    requests = fake_provider.requests[-len(ways) :]
    assert not any(r.rejected for r in requests)
    assert len({r.raw_body for r in requests}) == 1  # the same request, byte for byte
