"""Tests for the strict fake provider, driven through the real `anthropic` SDK.

Owns: the evidence that `FakeProvider` looks like the Anthropic API and like Bedrock to the
SDK the agent uses (`_strict_response_validation=True` everywhere), that every scripted fault
surfaces the way docs/provider-wire.md says the real one does, and that the CLI serves a script
to another process.

Invariant: no test here mocks the SDK or the HTTP stack; a test passes only when real bytes
crossed a real socket and the SDK accepted (or raised on) them.

Why: every later test of the agent trusts this fake; if it drifted from the real wire, those
tests would certify behaviour that fails in production.
"""

from __future__ import annotations

import base64
import json
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import anyio
import httpx2
import pytest
from botocore.eventstream import EventStreamBuffer

from defect_fakeapi import (
    DEFAULT_API_KEY,
    DEFAULT_AWS_ACCESS_KEY_ID,
    FakeProvider,
    Reply,
    RequestRecord,
    TextBlock,
    ToolUseBlock,
    estimate_tokens,
    load_script,
    write_script,
)
from defect_fakeapi.eventstream import chunk_frame, decode_frames, exception_frame

REPO = Path(__file__).resolve().parents[1]
HI: list[Any] = [{"role": "user", "content": "hi"}]
READ_TOOL: list[Any] = [{"name": "read", "input_schema": {"type": "object"}}]
THINK: Any = {"type": "enabled", "budget_tokens": 1024}


async def answered(fake: FakeProvider, count: int = 1) -> list[RequestRecord]:
    """The requests once the fake has finished answering them (its records are completed on
    the server's thread, after the client may already have seen the end of the stream)."""
    return await anyio.to_thread.run_sync(fake.wait_for_requests, count)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def fake() -> Iterator[FakeProvider]:
    with FakeProvider() as provider:
        yield provider


def client(fake: FakeProvider, **options: Any) -> anthropic.AsyncAnthropic:
    options.setdefault("max_retries", 0)
    return anthropic.AsyncAnthropic(
        base_url=fake.url, api_key=DEFAULT_API_KEY, _strict_response_validation=True, **options
    )


def bedrock(fake: FakeProvider, **options: Any) -> anthropic.AsyncAnthropicBedrock:
    options.setdefault("aws_access_key", DEFAULT_AWS_ACCESS_KEY_ID)
    options.setdefault("max_retries", 0)
    return anthropic.AsyncAnthropicBedrock(
        aws_secret_key="secret",
        aws_region="us-east-1",
        base_url=fake.url,
        _strict_response_validation=True,
        **options,
    )


async def stream_final(sdk: anthropic.AsyncAnthropic, **params: Any) -> Any:
    async with sdk.messages.stream(model="claude-test", max_tokens=4096, **params) as s:
        return await s.get_final_message()


def raw_post(fake: FakeProvider, body: Any, **headers: str) -> httpx2.Response:
    base = {"x-api-key": DEFAULT_API_KEY, "anthropic-version": "2023-06-01"}
    base.update({k.replace("_", "-"): v for k, v in headers.items()})
    with httpx2.Client(base_url=fake.url, timeout=5) as http:
        return http.post("/v1/messages", json=body, headers=base)


def sse_events(payload: str) -> list[tuple[str, dict[str, Any]]]:
    events: list[tuple[str, dict[str, Any]]] = []
    for frame in payload.split("\n\n"):
        if not frame.strip():
            continue
        lines = dict(line.split(": ", 1) for line in frame.split("\n"))
        events.append((lines["event"], json.loads(lines["data"])))
    return events


# ------------------------------------------------------------------ Anthropic: happy paths


def test_raw_stream_has_event_lines_in_the_real_order(fake: FakeProvider) -> None:
    fake.enqueue(Reply.text("hello"))
    response = raw_post(fake, {"model": "m", "max_tokens": 5, "messages": HI, "stream": True})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.headers["request-id"].startswith("req_")
    names = [name for name, _ in sse_events(response.text)]
    assert names == [
        "message_start",
        "content_block_start",
        "ping",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert all(name == data["type"] for name, data in sse_events(response.text))


@pytest.mark.anyio
async def test_text_reply(fake: FakeProvider) -> None:
    fake.enqueue(Reply.text("Hello from the fake, in several chunks."))
    async with (
        client(fake) as sdk,
        sdk.messages.stream(model="claude-test", max_tokens=64, messages=HI) as s,
    ):
        pieces = [text async for text in s.text_stream]
        message = await s.get_final_message()
    assert len(pieces) > 1
    assert "".join(pieces) == "Hello from the fake, in several chunks."
    assert message.stop_reason == "end_turn"
    assert message.model == "claude-test"
    assert message.id.startswith("msg_")
    assert (await answered(fake))[0].outcome == "completed"
    fake.assert_script_consumed()


@pytest.mark.anyio
async def test_create_with_stream_true(fake: FakeProvider) -> None:
    fake.enqueue(Reply.text("hi").without_ping())
    async with client(fake) as sdk:
        stream = await sdk.messages.create(
            model="claude-test", max_tokens=64, messages=HI, stream=True
        )
        kinds = [event.type async for event in stream]
    assert kinds == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]


@pytest.mark.anyio
async def test_tool_use_input_is_streamed_in_chunks(fake: FakeProvider) -> None:
    tool_input = {"path": "src/app.py", "lines": [1, 2, 3], "opts": {"follow": True, "n": None}}
    fake.enqueue(Reply.tool_use("toolu_01abc", "read", tool_input, text_before="Reading."))
    async with (
        client(fake) as sdk,
        sdk.messages.stream(model="claude-test", max_tokens=64, messages=HI, tools=READ_TOOL) as s,
    ):
        events = [event async for event in s]
        message = await s.get_final_message()
    partials = [
        e.delta.partial_json
        for e in events
        if e.type == "content_block_delta" and e.delta.type == "input_json_delta"
    ]
    assert len(partials) >= 3
    assert json.loads("".join(partials)) == tool_input
    assert message.stop_reason == "tool_use"
    assert [b.type for b in message.content] == ["text", "tool_use"]
    use = message.content[1]
    assert use.type == "tool_use"
    assert (use.id, use.name, use.input) == ("toolu_01abc", "read", tool_input)


@pytest.mark.anyio
async def test_thinking_signature_round_trip(fake: FakeProvider) -> None:
    fake.enqueue(
        Reply.thinking("I should read the file.", Reply.tool_use("toolu_01", "read", {"p": 1})),
        Reply.text("Done."),
    )
    async with client(fake) as sdk:
        first = await stream_final(sdk, messages=HI, thinking=THINK, tools=READ_TOOL)
        thinking_block = first.content[0]
        assert thinking_block.type == "thinking"
        assert thinking_block.thinking == "I should read the file."
        assert thinking_block.signature == fake.sign("I should read the file.")
        replay: list[Any] = [
            *HI,
            {
                "role": "assistant",
                "content": [
                    {
                        "type": "thinking",
                        "thinking": thinking_block.thinking,
                        "signature": thinking_block.signature,
                    },
                    {"type": "tool_use", "id": "toolu_01", "name": "read", "input": {"p": 1}},
                ],
            },
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_01"}]},
        ]
        second = await stream_final(sdk, messages=replay, thinking=THINK, tools=READ_TOOL)
        assert second.content[0].type == "text"

        replay[1]["content"][0]["thinking"] = "I should read the file!"
        with pytest.raises(anthropic.BadRequestError) as info:
            await stream_final(sdk, messages=replay, thinking=THINK, tools=READ_TOOL)
    assert "messages.1.content.0: `thinking` or `redacted_thinking` blocks in the latest " in (
        info.value.message
    )
    assert fake.requests[-1].rejected


@pytest.mark.anyio
async def test_usage_fields(fake: FakeProvider) -> None:
    fake.enqueue(
        Reply.text("cached").with_usage(
            input_tokens=12,
            output_tokens=7,
            cache_creation_input_tokens=300,
            cache_read_input_tokens=4000,
        )
    )
    async with client(fake) as sdk:
        message = await stream_final(sdk, messages=HI)
    usage = message.usage
    assert (usage.input_tokens, usage.output_tokens) == (12, 7)
    assert usage.cache_creation_input_tokens == 300
    assert usage.cache_read_input_tokens == 4000


@pytest.mark.anyio
async def test_default_usage_is_the_request_estimate(fake: FakeProvider) -> None:
    fake.enqueue(Reply.text("x" * 40))
    messages: list[Any] = [{"role": "user", "content": "a fairly long question " * 20}]
    async with client(fake) as sdk:
        message = await stream_final(sdk, messages=messages)
    assert message.usage.input_tokens == estimate_tokens(fake.requests[0].body)
    assert message.usage.input_tokens > 100
    assert message.usage.output_tokens == 10


@pytest.mark.anyio
async def test_count_tokens(fake: FakeProvider) -> None:
    async with client(fake) as sdk:
        counted = await sdk.messages.count_tokens(model="claude-test", messages=HI)
    assert counted.input_tokens == estimate_tokens({"messages": HI})
    assert fake.requests[0].route == "count_tokens"


# ------------------------------------------------------------------ Anthropic: rejections


@pytest.mark.anyio
async def test_orphan_tool_use_is_a_400_with_the_api_message(fake: FakeProvider) -> None:
    fake.enqueue(Reply.text("never sent"))
    messages: list[Any] = [
        *HI,
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "toolu_A", "name": "read", "input": {}}],
        },
        {"role": "user", "content": "what happened?"},
    ]
    async with client(fake) as sdk:
        with pytest.raises(anthropic.BadRequestError) as info:
            await stream_final(sdk, messages=messages, tools=READ_TOOL)
    expected = (
        "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: "
        "toolu_A. Each `tool_use` block must have a corresponding `tool_result` block in the "
        "next message."
    )
    error = info.value
    assert isinstance(error.body, dict)
    assert error.body["type"] == "error"
    assert error.body["error"] == {"type": "invalid_request_error", "message": expected}
    assert error.body["request_id"].startswith("req_")
    assert error.request_id == error.body["request_id"]
    record = fake.requests[0]
    assert record.rejected and record.status == 400 and record.error_message == expected
    assert fake.pending == 1  # a rejected request consumes no scripted reply


@pytest.mark.anyio
async def test_wrong_api_key_is_401(fake: FakeProvider) -> None:
    fake.enqueue(Reply.text("never sent"))
    sdk = anthropic.AsyncAnthropic(base_url=fake.url, api_key="sk-wrong", max_retries=0)
    async with sdk:
        with pytest.raises(anthropic.AuthenticationError) as info:
            await stream_final(sdk, messages=HI)
    assert isinstance(info.value.body, dict)
    assert info.value.body["error"]["type"] == "authentication_error"
    assert fake.requests[0].headers["authorization"] == "Bearer sk-wrong"
    assert fake.pending == 1


def test_x_api_key_and_version_header_are_checked(fake: FakeProvider) -> None:
    body = {"model": "m", "max_tokens": 5, "messages": HI, "stream": True}
    wrong = raw_post(fake, body, x_api_key="nope")
    assert wrong.status_code == 401
    assert wrong.json()["error"] == {"type": "authentication_error", "message": "invalid x-api-key"}
    with httpx2.Client(base_url=fake.url) as http:
        missing = http.post("/v1/messages", json=body, headers={"x-api-key": DEFAULT_API_KEY})
    assert missing.status_code == 400
    assert missing.json()["error"]["message"] == "anthropic-version: header is required"


def test_non_streaming_requests_are_refused(fake: FakeProvider) -> None:
    fake.enqueue(Reply.text("never sent"))
    response = raw_post(fake, {"model": "m", "max_tokens": 5, "messages": HI})
    assert response.status_code == 400
    assert "stream: true" in response.json()["error"]["message"]
    assert fake.pending == 1


@pytest.mark.anyio
async def test_empty_script_is_a_500_the_sdk_does_not_retry(fake: FakeProvider) -> None:
    async with client(fake, max_retries=2) as sdk:
        with pytest.raises(anthropic.InternalServerError) as info:
            await stream_final(sdk, messages=HI)
    assert "script exhausted" in info.value.message
    assert len(fake.requests) == 1
    assert (await answered(fake))[0].outcome == "exhausted"


@pytest.mark.anyio
async def test_default_reply_answers_an_empty_script() -> None:
    with FakeProvider(default_reply=Reply.text("default")) as fake:
        async with client(fake) as sdk:
            for _ in range(2):
                message = await stream_final(sdk, messages=HI)
                assert message.content[0].type == "text"
                assert message.content[0].text == "default"


@pytest.mark.anyio
async def test_responder_builds_the_reply_from_the_request(fake: FakeProvider) -> None:
    def echo(record: RequestRecord) -> Reply:
        return Reply.text(f"you said {record.messages[-1]['content']}")

    fake.enqueue(echo)
    async with client(fake) as sdk:
        message = await stream_final(sdk, messages=HI)
    assert message.content[0].type == "text"
    assert message.content[0].text == "you said hi"


# ------------------------------------------------------------------ Anthropic: faults


@pytest.mark.anyio
async def test_overloaded_then_success_with_one_retry(fake: FakeProvider) -> None:
    fake.enqueue(Reply.overloaded(retry_after_ms=20), Reply.text("second time lucky"))
    async with client(fake, max_retries=1) as sdk:
        message = await stream_final(sdk, messages=HI)
    assert message.content[0].type == "text"
    assert message.content[0].text == "second time lucky"
    first, second = fake.requests
    assert (first.status, first.outcome, first.error_type) == (
        529,
        "http_error",
        "overloaded_error",
    )
    assert second.headers["x-stainless-retry-count"] == "1"


@pytest.mark.anyio
async def test_rate_limit_error_carries_retry_after_ms(fake: FakeProvider) -> None:
    fake.enqueue(Reply.rate_limited(retry_after_ms=1500))
    async with client(fake) as sdk:
        with pytest.raises(anthropic.RateLimitError) as info:
            await stream_final(sdk, messages=HI)
    assert info.value.response.headers["retry-after-ms"] == "1500"
    assert info.value.response.headers["request-id"].startswith("req_")
    assert isinstance(info.value.body, dict)
    assert info.value.body["error"]["type"] == "rate_limit_error"


@pytest.mark.parametrize(
    ("status", "error_class"),
    [
        (400, anthropic.BadRequestError),
        (401, anthropic.AuthenticationError),
        (403, anthropic.PermissionDeniedError),
        (404, anthropic.NotFoundError),
        (500, anthropic.InternalServerError),
    ],
)
@pytest.mark.anyio
async def test_scripted_http_errors_map_to_sdk_classes(
    fake: FakeProvider, status: int, error_class: type[anthropic.APIStatusError]
) -> None:
    fake.enqueue(Reply.error(status, "scripted"))
    async with client(fake) as sdk:
        with pytest.raises(error_class) as info:
            await stream_final(sdk, messages=HI)
    assert info.value.status_code == status
    assert isinstance(info.value.body, dict)
    assert info.value.body["error"]["message"] == "scripted"


@pytest.mark.anyio
async def test_error_event_mid_stream(fake: FakeProvider) -> None:
    fake.enqueue(Reply.text("partial answer that breaks").error_mid_stream(3))
    async with client(fake, max_retries=2) as sdk:
        with pytest.raises(anthropic.APIStatusError) as info:
            await stream_final(sdk, messages=HI)
    assert info.value.status_code == 200
    assert isinstance(info.value.body, dict)
    assert info.value.body["error"] == {"type": "overloaded_error", "message": "Overloaded"}
    assert len(fake.requests) == 1  # not retried
    assert (await answered(fake))[0].outcome == "stream_error"


@pytest.mark.anyio
async def test_clean_cut_leaves_stop_reason_none(fake: FakeProvider) -> None:
    fake.enqueue(Reply.text("this answer is cut off in the middle").cut(4))
    async with client(fake) as sdk:
        message = await stream_final(sdk, messages=HI)
    assert message.stop_reason is None
    assert message.content[0].type == "text"
    assert 0 < len(message.content[0].text) < len("this answer is cut off in the middle")
    assert (await answered(fake))[0].outcome == "cut"


@pytest.mark.anyio
async def test_abrupt_cut_raises_a_protocol_error(fake: FakeProvider) -> None:
    fake.enqueue(Reply.text("dropped connection").cut(2, abrupt=True))
    async with client(fake) as sdk:
        with pytest.raises(httpx2.RemoteProtocolError):
            await stream_final(sdk, messages=HI)


@pytest.mark.anyio
async def test_stall_raises_read_timeout(fake: FakeProvider) -> None:
    fake.enqueue(Reply.text("stalls after the first delta").stall(3))
    async with client(fake, timeout=0.3) as sdk:
        started = time.monotonic()
        with pytest.raises(httpx2.ReadTimeout):
            await stream_final(sdk, messages=HI)
    assert time.monotonic() - started < 3
    record = fake.wait_for_requests(1)[0]
    assert record.events_sent == 3
    assert record.outcome == "client_disconnected"


@pytest.mark.anyio
async def test_stop_is_prompt_during_a_stall() -> None:
    fake = FakeProvider().start()
    fake.enqueue(Reply.text("stall forever").stall(2))
    errors: list[BaseException] = []

    async def consume() -> None:
        try:
            async with client(fake, timeout=30) as sdk:
                await stream_final(sdk, messages=HI)
        except Exception as err:
            errors.append(err)

    async with anyio.create_task_group() as tg:
        tg.start_soon(consume)
        await anyio.to_thread.run_sync(
            fake.wait_until, lambda records: bool(records) and records[0].events_sent >= 2
        )
        started = time.monotonic()
        await anyio.to_thread.run_sync(fake.stop)
        assert time.monotonic() - started < 1.5
    assert errors and isinstance(errors[0], httpx2.RemoteProtocolError | httpx2.ReadError)
    assert (await answered(fake))[0].outcome == "stalled"


@pytest.mark.anyio
async def test_slow_stream_notices_a_client_that_hangs_up(fake: FakeProvider) -> None:
    fake.enqueue(Reply.text("word " * 40).slow(0.05))
    async with (
        client(fake) as sdk,
        sdk.messages.stream(model="claude-test", max_tokens=64, messages=HI) as s,
    ):
        async for _ in s.text_stream:
            break
    record = await anyio.to_thread.run_sync(fake.wait_for_requests, 1)
    assert record[0].client_disconnected
    assert record[0].events_sent < 10


@pytest.mark.anyio
async def test_max_tokens_cuts_the_tool_input(fake: FakeProvider) -> None:
    tool_input = {"path": "a.txt", "content": "x" * 50}
    fake.enqueue(Reply.max_tokens_tool_use("toolu_cut", "write", tool_input, keep_chars=25))
    tools: list[Any] = [{"name": "write", "input_schema": {"type": "object"}}]
    async with client(fake) as sdk:
        stream = await sdk.messages.create(
            model="claude-test", max_tokens=64, messages=HI, tools=tools, stream=True
        )
        events = [event async for event in stream]
    partial = "".join(
        e.delta.partial_json
        for e in events
        if e.type == "content_block_delta" and e.delta.type == "input_json_delta"
    )
    assert partial == json.dumps(tool_input)[:25]
    with pytest.raises(json.JSONDecodeError):
        json.loads(partial)
    stop = [e for e in events if e.type == "message_delta"]
    assert stop[0].delta.stop_reason == "max_tokens"


@pytest.mark.anyio
async def test_fixture_from_support_module(fake_provider: FakeProvider, fake_api_key: str) -> None:
    fake_provider.enqueue(Reply.text("via fixture"))
    sdk = anthropic.AsyncAnthropic(base_url=fake_provider.url, api_key=fake_api_key, max_retries=0)
    async with sdk:
        message = await stream_final(sdk, messages=HI)
    assert message.content[0].type == "text"
    assert message.content[0].text == "via fixture"


# ------------------------------------------------------------------ Bedrock


BEDROCK_MODEL = "anthropic.claude-sonnet-4-5-20250929-v1:0"


@pytest.mark.anyio
async def test_bedrock_text_reply(fake: FakeProvider) -> None:
    fake.enqueue(Reply.text("Hello from Bedrock, chunked."))
    async with (
        bedrock(fake) as sdk,
        sdk.messages.stream(model=BEDROCK_MODEL, max_tokens=64, messages=HI) as s,
    ):
        message = await s.get_final_message()
    assert message.content[0].type == "text"
    assert message.content[0].text == "Hello from Bedrock, chunked."
    assert message.stop_reason == "end_turn"
    record = fake.requests[0]
    assert record.route == "bedrock"
    assert record.path == f"/model/{BEDROCK_MODEL}/invoke-with-response-stream"
    assert record.model == BEDROCK_MODEL
    assert record.body["anthropic_version"] == "2026-10-21"
    assert "model" not in record.body and "stream" not in record.body


@pytest.mark.anyio
async def test_bedrock_tool_use_with_classic_version(fake: FakeProvider) -> None:
    tool_input = {"command": "ls -la", "cwd": "/tmp"}
    fake.enqueue(Reply.tool_use("toolu_bdrk", "bash", tool_input))
    async with (
        bedrock(fake) as sdk,
        sdk.messages.stream(
            model=BEDROCK_MODEL,
            max_tokens=64,
            messages=HI,
            tools=[{"name": "bash", "input_schema": {"type": "object"}}],
            extra_body={"anthropic_version": "bedrock-2023-05-31"},
        ) as s,
    ):
        message = await s.get_final_message()
    assert message.stop_reason == "tool_use"
    use = message.content[0]
    assert use.type == "tool_use"
    assert (use.id, use.input) == ("toolu_bdrk", tool_input)
    assert fake.requests[0].body["anthropic_version"] == "bedrock-2023-05-31"


@pytest.mark.anyio
async def test_bedrock_exception_frame_mid_stream(fake: FakeProvider) -> None:
    fake.enqueue(
        Reply.text("about to be throttled").error_mid_stream(
            3, error_type="rate_limit_error", message="Too many tokens, please wait."
        )
    )
    async with bedrock(fake) as sdk:
        with pytest.raises(anthropic.APIStatusError) as info:
            async with sdk.messages.stream(model=BEDROCK_MODEL, max_tokens=64, messages=HI) as s:
                await s.get_final_message()
    assert info.value.status_code == 200
    assert isinstance(info.value.body, dict)
    assert info.value.body["error"] == {
        "type": "throttlingException",
        "message": "Too many tokens, please wait.",
    }


@pytest.mark.anyio
async def test_bedrock_rejects_unknown_access_key(fake: FakeProvider) -> None:
    async with bedrock(fake, aws_access_key="AKIDOTHER") as sdk:
        with pytest.raises(anthropic.PermissionDeniedError) as info:
            await sdk.messages.create(model=BEDROCK_MODEL, max_tokens=8, messages=HI, stream=True)
    assert info.value.body == {"message": "The security token included in the request is invalid."}
    assert info.value.response.headers["x-amzn-errortype"].startswith("UnrecognizedClientException")


def test_bedrock_checks_the_sigv4_header_shape(fake: FakeProvider) -> None:
    path = f"/model/{BEDROCK_MODEL}/invoke-with-response-stream"
    body = {"anthropic_version": "bedrock-2023-05-31", "max_tokens": 8, "messages": HI}
    signature = "0" * 64
    wrong_service = (
        f"AWS4-HMAC-SHA256 Credential={DEFAULT_AWS_ACCESS_KEY_ID}/20260101/us-east-1/s3/"
        f"aws4_request, SignedHeaders=host;x-amz-date, Signature={signature}"
    )
    with httpx2.Client(base_url=fake.url) as http:
        missing = http.post(path, json=body)
        scoped = http.post(
            path,
            json=body,
            headers={"authorization": wrong_service, "x-amz-date": "20260101T000000Z"},
        )
    assert missing.status_code == 403
    assert missing.json() == {"message": "Missing Authentication Token"}
    assert scoped.status_code == 403
    assert scoped.headers["x-amzn-errortype"].startswith("InvalidSignatureException")
    assert "scoped to correct service: 'bedrock'" in scoped.json()["message"]


@pytest.mark.anyio
async def test_bedrock_validation_error_has_no_error_type(fake: FakeProvider) -> None:
    messages: list[Any] = [{"role": "user", "content": [{"type": "text", "text": ""}]}]
    async with bedrock(fake) as sdk:
        with pytest.raises(anthropic.BadRequestError) as info:
            await sdk.messages.create(
                model=BEDROCK_MODEL, max_tokens=8, messages=messages, stream=True
            )
    assert info.value.body == {"message": "messages: text content blocks must be non-empty"}
    assert info.value.response.headers["x-amzn-errortype"].startswith("ValidationException")


@pytest.mark.anyio
async def test_bedrock_scripted_throttling(fake: FakeProvider) -> None:
    fake.enqueue(Reply.error(429, "Too many requests, please wait before trying again."))
    async with bedrock(fake) as sdk:
        with pytest.raises(anthropic.RateLimitError) as info:
            await sdk.messages.create(model=BEDROCK_MODEL, max_tokens=8, messages=HI, stream=True)
    assert info.value.body == {"message": "Too many requests, please wait before trying again."}
    assert info.value.response.headers["x-amzn-errortype"].startswith("ThrottlingException")


# ------------------------------------------------------------------ event-stream framing


def test_frames_parse_with_botocore() -> None:
    event = {
        "type": "content_block_delta",
        "index": 0,
        "delta": {"type": "text_delta", "text": "é"},
    }
    data = chunk_frame(event) + exception_frame("throttlingException", "slow down")
    buffer = EventStreamBuffer()
    buffer.add_data(data[:7])
    assert list(buffer) == []
    buffer.add_data(data[7:])
    chunk, exception = list(buffer)
    assert chunk.headers == {
        ":event-type": "chunk",
        ":content-type": "application/json",
        ":message-type": "event",
    }
    assert json.loads(base64.b64decode(json.loads(chunk.payload)["bytes"])) == event
    assert exception.headers[":message-type"] == "exception"
    assert exception.headers[":exception-type"] == "throttlingException"
    assert json.loads(exception.payload) == {"message": "slow down"}
    decoded = decode_frames(data)
    assert decoded[0].chunk_event() == event


def test_corrupt_frames_are_detected() -> None:
    data = bytearray(chunk_frame({"type": "ping"}))
    data[-6] ^= 0xFF
    with pytest.raises(ValueError, match="message CRC"):
        decode_frames(bytes(data))


# ------------------------------------------------------------------ scripts and the CLI


def test_reply_json_round_trip(tmp_path: Path) -> None:
    replies = [
        Reply.text("a").with_usage(input_tokens=3, cache_read_input_tokens=9),
        Reply.thinking("t", Reply.tool_use("toolu_1", "read", {"p": [1]}, text_before="b")),
        Reply.of([TextBlock("x"), ToolUseBlock("toolu_2", "w", {"a": 1})]).stall(2, seconds=0.1),
        Reply.overloaded(retry_after_ms=5),
        Reply.max_tokens_tool_use("toolu_3", "w", {"content": "abc"}).error_mid_stream(1),
        Reply.text("slow").slow(0.01).cut(3, abrupt=True).without_ping(),
    ]
    script = tmp_path / "script.json"
    write_script(script, replies)
    assert load_script(script) == replies


def test_reply_shorthands() -> None:
    assert Reply.from_dict({"text": "hi"}) == Reply.text("hi")
    use = Reply.from_dict({"tool_use": {"id": "toolu_1", "name": "n", "input": {"a": 1}}})
    assert use == Reply.tool_use("toolu_1", "n", {"a": 1})
    err = Reply.from_dict({"error": {"status": 529, "retry_after_ms": 3}})
    assert err == Reply.overloaded(retry_after_ms=3)
    with pytest.raises(ValueError, match="unknown reply keys"):
        Reply.from_dict({"text": "x", "colour": "red"})


def test_cli_serves_a_script_to_another_process(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps([{"text": "from the CLI"}]), encoding="utf-8")
    log = tmp_path / "requests.jsonl"
    command = [
        sys.executable,
        "-m",
        "defect_fakeapi",
        "--port",
        "0",
        "--script",
        str(script),
        "--request-log",
        str(log),
    ]
    process = subprocess.Popen(
        command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None
        url = process.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:")
        sdk = anthropic.Anthropic(base_url=url, api_key=DEFAULT_API_KEY, max_retries=0)
        with sdk.messages.stream(model="claude-test", max_tokens=8, messages=HI) as s:
            assert s.get_final_text() == "from the CLI"
        with pytest.raises(anthropic.InternalServerError):
            sdk.messages.create(model="claude-test", max_tokens=8, messages=HI, stream=True)
    finally:
        process.terminate()
        rest, _ = process.communicate(timeout=5)
    assert process.returncode == 0
    assert rest == ""
    logged = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]
    assert [entry["outcome"] for entry in logged] == ["completed", "exhausted"]
    assert logged[0]["body"]["messages"] == HI


def test_a_body_cut_off_by_a_killed_client_is_not_a_rejection() -> None:
    """A killed agent can die in the middle of sending a request: the API never saw it, so
    the fake records a disconnect, never an `invalid JSON` rejection of the agent's wire."""
    import socket
    import urllib.parse

    with FakeProvider() as fake:
        url = urllib.parse.urlsplit(fake.url)
        body = b'{"model": "m", "max_tokens": 10, "messages": [{"role": "us'
        with socket.create_connection((url.hostname or "127.0.0.1", url.port or 80)) as sock:
            sock.sendall(
                b"POST /v1/messages HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                b"content-length: 500\r\n\r\n" + body
            )
        deadline = time.monotonic() + 10
        while not fake.requests and time.monotonic() < deadline:
            time.sleep(0.01)
        (record,) = fake.requests
        assert record.client_disconnected and not record.rejected
        assert record.outcome == "client_disconnected"


# --- GET /v1/models -------------------------------------------------------------------------


def test_models_are_listed_page_by_page_through_the_sdk(fake_provider: FakeProvider) -> None:
    from defect_fakeapi import model_entry

    fake_provider.models = [model_entry(f"claude-test-{n}") for n in range(7)]
    client = anthropic.Anthropic(api_key=DEFAULT_API_KEY, base_url=fake_provider.url)
    ids = [model.id for model in client.models.list(limit=3)]
    assert ids == [f"claude-test-{n}" for n in range(7)]
    pages = fake_provider.listings
    assert [r.status for r in pages] == [200, 200, 200]  # 3 + 3 + 1, following last_id
    assert fake_provider.requests == []  # listings are not model calls


def test_models_page_has_the_real_shape_and_refusals() -> None:
    from defect_fakeapi import model_entry, models_page
    from defect_fakeapi.models import ModelsQueryError

    models = [model_entry(m) for m in ("a", "b", "c")]
    first = models_page(models, "limit=2")
    assert [m["id"] for m in first["data"]] == ["a", "b"]
    assert (first["has_more"], first["first_id"], first["last_id"]) == (True, "a", "b")
    last = models_page(models, "limit=2&after_id=b")
    assert ([m["id"] for m in last["data"]], last["has_more"]) == (["c"], False)
    before = models_page(models, "limit=1&before_id=c")
    assert ([m["id"] for m in before["data"]], before["has_more"]) == (["b"], True)
    assert models_page([], "")["first_id"] is None
    for query in ("limit=0", "limit=1001", "limit=x", "after_id=zz", "after_id=a&before_id=b"):
        with pytest.raises(ModelsQueryError):
            models_page(models, query)


def test_models_need_the_key_and_can_fail_on_demand(fake_provider: FakeProvider) -> None:
    bad = anthropic.Anthropic(api_key="sk-wrong", base_url=fake_provider.url, max_retries=0)
    with pytest.raises(anthropic.AuthenticationError):
        list(bad.models.list())
    from defect_fakeapi import HttpError

    fake_provider.models_error = HttpError(503, "overloaded_error", "down for the test")
    good = anthropic.Anthropic(api_key=DEFAULT_API_KEY, base_url=fake_provider.url, max_retries=0)
    with pytest.raises(anthropic.APIStatusError) as info:
        list(good.models.list())
    assert info.value.status_code == 503


def test_a_client_that_resets_its_connection_leaves_no_traceback(
    fake: FakeProvider, capfd: pytest.CaptureFixture[str]
) -> None:
    """A client that hangs up with a reset while the fake awaits its next request (a session
    closed mid-keep-alive) is not an error of the fake's: nothing is printed."""
    sock = socket.create_connection(("127.0.0.1", fake.port))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.sendall(b"GET /v1/models HTTP/1.1\r\n")  # half a request: the fake waits for more
    time.sleep(0.2)
    sock.close()  # SO_LINGER 0: the close is a reset
    with httpx2.Client(base_url=fake.url, timeout=5) as http:  # the fake still serves
        headers = {"x-api-key": DEFAULT_API_KEY, "anthropic-version": "2023-06-01"}
        assert http.get("/v1/models", headers=headers).status_code == 200
    assert "Traceback" not in capfd.readouterr().err
