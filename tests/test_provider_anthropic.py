"""Claude on the Anthropic API and on Bedrock, through the real SDK, against the strict fake.

Every request goes over HTTP on 127.0.0.1 to `defect_fakeapi` (the strict fake API), which validates
it like the real API (tool pairing, thinking signatures, cache breakpoints, Bedrock's
envelope) and answers like the real service, faults included. The retry and guard behaviour
is driven through the real turn runner (`DefaultAgentCore`), so what is pinned down is what a
user gets: a retried failure is invisible, a failure after output ends the turn with a clear
error that says whether retrying may help, nothing partial reaches history, no cut tool call
runs, and the next prompt in the same session is accepted by the strict validator.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest

from defect_core.config import Settings
from defect_core.events import AgentEvent, AgentTextDelta, AgentThoughtDelta, TurnEnded, TurnFailed
from defect_core.model import (
    Message,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolSpec,
    ToolUseBlock,
    message_to_dict,
)
from defect_core.providers.anthropic import (
    BEDROCK_ANTHROPIC_VERSION,
    AnthropicProvider,
    anthropic_provider,
    bedrock_provider,
    classify_status_error,
    encode_request,
    retry_after_seconds,
)
from defect_core.providers.base import (
    Completed,
    CredentialsMissing,
    ModelRequest,
    ProviderError,
    StreamChunk,
    TextDelta,
    ThinkingDelta,
    ToolInputDelta,
    ToolUseStarted,
)
from defect_core.session import Backends, DefaultAgentCore, DefaultSession, TurnError
from defect_core.tools.base import Safety, ToolCallView, ToolContext, ToolOutput
from defect_fakeapi import (
    DEFAULT_API_KEY,
    DEFAULT_AWS_ACCESS_KEY_ID,
    DEFAULT_AWS_SECRET_KEY,
    FakeProvider,
    Reply,
    count_cache_breakpoints,
    validate_request,
)

pytestmark = pytest.mark.anyio

REPO = Path(__file__).resolve().parents[1]
LOOKUP_SCHEMA = {
    "type": "object",
    "properties": {"key": {"type": "string"}},
    "required": ["key"],
}


# --- support --------------------------------------------------------------------------------


class LookupTool:
    """A read-only tool that touches nothing and records its calls."""

    name = "lookup"
    description = "Look a key up."
    input_schema = LOOKUP_SCHEMA
    safety = Safety.READ_ONLY
    kind = "read"

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def describe(self, args: dict[str, Any], ctx: ToolContext) -> ToolCallView:
        return ToolCallView(title=f"lookup {args.get('key')}", kind="read")

    async def preview(self, args: dict[str, Any], ctx: ToolContext) -> tuple[()]:
        return ()

    def permission_key(self, args: dict[str, Any]) -> str:
        return self.name

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        self.calls.append(args)
        return ToolOutput(f"value of {args.get('key')}")


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No real credentials, profiles or endpoints leak into a test."""
    for name in list(os.environ):
        if name.startswith(("ANTHROPIC_", "AWS_", "DEFECT_")):
            monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


_OPEN: list[AnthropicProvider] = []


def new_anthropic(settings: Settings) -> AnthropicProvider:
    provider = anthropic_provider(settings)
    _OPEN.append(provider)
    return provider


def new_bedrock(settings: Settings) -> AnthropicProvider:
    provider = bedrock_provider(settings)
    _OPEN.append(provider)
    return provider


@pytest.fixture(autouse=True)
async def close_providers() -> AsyncIterator[None]:
    """Close each test's SDK clients on the test's own event loop (the SDK would otherwise
    close them from a later test's loop, on sockets of a loop that no longer exists)."""
    yield
    while _OPEN:
        await _OPEN.pop().aclose()


@pytest.fixture
def api_key(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("ANTHROPIC_API_KEY", DEFAULT_API_KEY)
    return DEFAULT_API_KEY


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", DEFAULT_AWS_ACCESS_KEY_ID)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", DEFAULT_AWS_SECRET_KEY)
    monkeypatch.setenv("AWS_REGION", "us-east-1")


def fast_settings(fake: FakeProvider, **overrides: Any) -> Settings:
    base = Settings(
        provider="anthropic",
        base_url=fake.url,
        bedrock_base_url=fake.url,
        retries=3,
        retry_base_delay=0.001,
        retry_max_delay=0.05,
        read_timeout=5.0,
        reasoning_effort="off",
    )
    return base.with_overrides(**overrides)


def user(text: str) -> Message:
    return Message(role="user", content=(TextBlock(text=text),))


def simple_request(provider: AnthropicProvider, **overrides: Any) -> ModelRequest:
    fields: dict[str, Any] = {
        "model": provider.default_model(),
        "system": "You are a test.",
        "messages": [user("hello")],
        "tools": (ToolSpec("lookup", "Look a key up.", LOOKUP_SCHEMA),),
        "max_tokens": 4096,
    }
    fields.update(overrides)
    return ModelRequest(**fields)


async def collect(provider: AnthropicProvider, request: ModelRequest) -> list[StreamChunk]:
    return [chunk async for chunk in provider.stream(request)]


class Harness:
    """One session of the real runner on a provider, with a recording tool."""

    def __init__(self, session: DefaultSession, tool: LookupTool) -> None:
        self.session = session
        self.tool = tool

    async def prompt(self, text: str) -> tuple[str | TurnError, list[AgentEvent]]:
        events: list[AgentEvent] = []
        receive = self.session.subscribe()
        outcome: str | TurnError

        async def drain() -> None:
            async for event in receive:
                events.append(event)
                if isinstance(event, TurnEnded | TurnFailed):
                    return

        with anyio.fail_after(20):
            async with anyio.create_task_group() as tg:
                tg.start_soon(drain)
                try:
                    outcome = await self.session.run_turn([TextBlock(text=text)])
                except TurnError as failure:
                    outcome = failure
        receive.close()
        return outcome, events

    def history(self) -> list[Message]:
        return self.session.history_snapshot()


async def harness(provider: AnthropicProvider, settings: Settings, cwd: Path) -> Harness:
    tool = LookupTool()
    core = DefaultAgentCore(settings, provider=provider, tools=lambda: [tool])  # type: ignore[list-item]
    backends = Backends(fs=None, shell=None)  # type: ignore[arg-type]
    session = await core.create_session("sess-1", cwd, backends)
    return Harness(session, tool)


def shown_text(events: list[AgentEvent]) -> str:
    return "".join(e.text for e in events if isinstance(e, AgentTextDelta))


def assistant_texts(history: list[Message]) -> list[str]:
    return [m.text() for m in history if m.role == "assistant"]


async def wait_requests(fake: FakeProvider, count: int) -> None:
    await anyio.to_thread.run_sync(fake.wait_for_requests, count)


async def assert_next_prompt_works(h: Harness, fake: FakeProvider) -> None:
    """After a failure, the same session takes the next prompt and the API accepts it."""
    fake.enqueue(Reply.text("back to normal"))
    outcome, events = await h.prompt("try again")
    assert outcome == "end_turn"
    assert shown_text(events) == "back to normal"
    await wait_requests(fake, len(fake.requests))  # the fake marks the record after writing
    last = fake.requests[-1]
    assert last.rejected is False, last.error_message
    assert last.outcome == "completed"


# --- the request body -----------------------------------------------------------------------


async def test_encoding_places_at_most_four_breakpoints_never_on_thinking() -> None:
    history = [
        user("first question"),
        Message(
            role="assistant",
            content=(
                ThinkingBlock(thinking="hm", signature="sig"),
                ToolUseBlock(id="toolu_1", name="lookup", input={"key": "a"}),
            ),
        ),
        Message(
            role="user",
            content=(ToolResultBlock(tool_use_id="toolu_1", content="A"),),
        ),
        Message(
            role="assistant",
            content=(
                ThinkingBlock(thinking="hm2", signature="sig2"),
                ToolUseBlock(id="toolu_2", name="lookup", input={"key": "b"}),
            ),
        ),
        Message(
            role="user",
            content=(
                ToolResultBlock(tool_use_id="toolu_2", content="B"),
                TextBlock(text="and also this"),
            ),
        ),
    ]
    request = ModelRequest(
        model="m",
        system="system prompt",
        messages=history,
        tools=(ToolSpec("lookup", "d", LOOKUP_SCHEMA), ToolSpec("other", "d", LOOKUP_SCHEMA)),
        max_tokens=8000,
        thinking_budget=2048,
    )
    body = encode_request(request)
    assert count_cache_breakpoints(body) == 4
    assert "cache_control" in body["tools"][-1] and "cache_control" not in body["tools"][0]
    assert body["system"] == [
        {"type": "text", "text": "system prompt", "cache_control": {"type": "ephemeral"}}
    ]
    marked = [
        (m, b)
        for m, message in enumerate(body["messages"])
        for b, block in enumerate(message["content"])
        if "cache_control" in block
    ]
    assert marked == [(2, 0), (4, 1)]  # the last block of the last two user messages
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert "temperature" not in body
    # the encoder never edits the model's message values
    assert "cache_control" not in message_to_dict(history[4])["content"][1]


def tool_loop(steps: int, calls: int) -> list[Message]:
    """A prompt, then `steps` rounds of `calls` parallel tool calls and their results."""
    history = [user("look everything up")]
    for step in range(steps):
        ids = [f"toolu_{step}_{c}" for c in range(calls)]
        history.append(
            Message(
                role="assistant",
                content=tuple(ToolUseBlock(id=i, name="lookup", input={"key": i}) for i in ids),
            )
        )
        history.append(
            Message(
                role="user", content=tuple(ToolResultBlock(tool_use_id=i, content=i) for i in ids)
            )
        )
    return history


def marked_blocks(body: dict[str, Any]) -> list[tuple[int, int]]:
    return [
        (m, b)
        for m, message in enumerate(body["messages"])
        for b, block in enumerate(message["content"])
        if "cache_control" in block
    ]


async def test_the_second_message_breakpoint_keeps_the_prefix_before_the_cache_anchor() -> None:
    """The previous user message is within the newest breakpoint's 20-block look-back: its
    breakpoint would read nothing more, so it goes on the last block before the anchor (the
    first result a micro-compaction will clear), keeping that prefix cached."""
    history = tool_loop(12, 1)
    tools = (ToolSpec("lookup", "d", LOOKUP_SCHEMA),)
    plain = encode_request(ModelRequest("m", "system", history, tools, 8000))
    assert marked_blocks(plain) == [(22, 0), (24, 0)]
    body = encode_request(ModelRequest("m", "system", history, tools, 8000, cache_anchor=4))
    assert marked_blocks(body) == [(3, 0), (24, 0)], "the tool call before message 4"
    assert count_cache_breakpoints(body) == 4
    validate_request(body)
    late = encode_request(ModelRequest("m", "system", history, tools, 8000, cache_anchor=24))
    assert marked_blocks(late) == [(23, 0), (24, 0)], "also right before the newest"


async def test_the_previous_user_message_keeps_its_breakpoint_when_out_of_reach() -> None:
    """Twelve parallel calls put the previous user message more than 20 blocks back: its
    breakpoint is what reads the request before, so the anchor gives way."""
    history = tool_loop(3, 12)
    tools = (ToolSpec("lookup", "d", LOOKUP_SCHEMA),)
    body = encode_request(ModelRequest("m", "system", history, tools, 8000, cache_anchor=2))
    assert marked_blocks(body) == [(4, 11), (6, 11)]


async def test_encoding_without_tools_or_system_still_caches_the_conversation() -> None:
    request = ModelRequest(model="m", system="", messages=[user("only")], max_tokens=100)
    body = encode_request(request)
    assert "system" not in body and "tools" not in body and "thinking" not in body
    assert body["messages"][0]["content"][0]["cache_control"] == {"type": "ephemeral"}
    assert count_cache_breakpoints(body) == 1


async def test_thinking_budget_is_kept_within_the_api_bounds_or_left_off() -> None:
    def thinking(budget: int | None, max_tokens: int) -> Any:
        body = encode_request(
            ModelRequest(
                model="m",
                system="",
                messages=[user("x")],
                max_tokens=max_tokens,
                thinking_budget=budget,
            )
        )
        return body.get("thinking")

    assert thinking(None, 16000) is None
    assert thinking(500, 16000) is None
    assert thinking(8192, 4096) == {"type": "enabled", "budget_tokens": 4095}
    assert thinking(2048, 2000) == {"type": "enabled", "budget_tokens": 1999}
    assert thinking(2048, 1024) is None


async def test_thinking_is_left_off_for_a_tool_loop_opened_without_thinking() -> None:
    history = [
        user("q"),
        Message(role="assistant", content=(ToolUseBlock(id="toolu_1", name="lookup"),)),
        Message(role="user", content=(ToolResultBlock(tool_use_id="toolu_1", content="r"),)),
    ]
    body = encode_request(
        ModelRequest(model="m", system="", messages=history, max_tokens=16000, thinking_budget=4096)
    )
    assert "thinking" not in body


# --- error classification -------------------------------------------------------------------


async def test_retry_after_headers_are_read_in_seconds() -> None:
    assert retry_after_seconds({"retry-after-ms": "250"}) == 0.25
    assert retry_after_seconds({"retry-after": "3"}) == 3.0
    assert retry_after_seconds({"retry-after-ms": "100", "retry-after": "9"}) == 0.1
    assert retry_after_seconds({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}) == 0.0
    assert retry_after_seconds({"retry-after": "soon"}) is None
    assert retry_after_seconds({}) is None


@pytest.mark.parametrize(
    ("status", "retryable"),
    [
        (400, False),
        (401, False),
        (403, False),
        (404, False),
        (413, False),
        (408, True),
        (409, True),
        (429, True),
        (500, True),
        (503, True),
        (529, True),
    ],
)
async def test_http_statuses_are_classified(status: int, retryable: bool) -> None:
    body = {"type": "error", "error": {"type": "some_error", "message": "it broke"}}
    err = classify_status_error(status, body, {"request-id": "req_1"}, route="anthropic")
    assert err.retryable is retryable
    assert err.status == status and err.request_id == "req_1"
    assert err.message.startswith(f"{status} some_error: it broke")


async def test_x_should_retry_overrides_the_status() -> None:
    body = {"type": "error", "error": {"type": "api_error", "message": "no"}}
    err = classify_status_error(500, body, {"x-should-retry": "false"}, route="anthropic")
    assert err.retryable is False


async def test_bedrock_http_errors_take_their_type_from_the_header() -> None:
    headers = {
        "x-amzn-errortype": "ThrottlingException:http://internal.amazon.com/coral/",
        "x-amzn-requestid": "uuid-1",
        "retry-after-ms": "40",
    }
    err = classify_status_error(429, {"message": "slow down"}, headers, route="bedrock")
    assert err.message == "429 ThrottlingException: slow down"
    assert (err.kind, err.retryable, err.retry_after, err.request_id) == (
        "ThrottlingException",
        True,
        0.04,
        "uuid-1",
    )


# --- models and laziness --------------------------------------------------------------------


async def test_models_come_from_config_or_the_built_in_lists() -> None:
    anthropic = new_anthropic(Settings())
    assert anthropic.name == "anthropic"
    assert anthropic.default_model().startswith("claude-sonnet")
    assert all(m.context_window for m in anthropic.models())
    bedrock = new_bedrock(Settings(models={"bedrock": ("eu.anthropic.x-v1:0", "arn:y")}))
    assert [m.id for m in bedrock.models()] == ["eu.anthropic.x-v1:0", "arn:y"]
    assert bedrock.default_model() == "eu.anthropic.x-v1:0"
    assert new_bedrock(Settings()).default_model().startswith("us.anthropic.claude-sonnet")


async def test_building_and_listing_models_does_not_import_the_sdk() -> None:
    code = (
        "import sys\n"
        "from defect_core.config import Settings\n"
        "from defect_core.providers.registry import build_provider\n"
        "for name in ('anthropic', 'bedrock'):\n"
        "    p = build_provider(name, Settings())\n"
        "    p.models(); p.default_model()\n"
        "heavy = [m for m in ('anthropic', 'boto3', 'botocore', 'httpx2') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, cwd=REPO, timeout=30)


# --- the Anthropic route, stream by stream --------------------------------------------------


async def test_text_reply_streams_deltas_then_one_completed_message(
    fake_provider: FakeProvider, api_key: str
) -> None:
    fake_provider.enqueue(
        Reply.text("Hello from the fake model, streamed in pieces.").with_usage(
            input_tokens=12,
            output_tokens=9,
            cache_creation_input_tokens=300,
            cache_read_input_tokens=4000,
        )
    )
    provider = new_anthropic(fast_settings(fake_provider))
    chunks = await collect(provider, simple_request(provider))

    deltas = [c for c in chunks if isinstance(c, TextDelta)]
    assert len(deltas) > 1
    assert "".join(d.text for d in deltas) == "Hello from the fake model, streamed in pieces."
    completed = chunks[-1]
    assert isinstance(completed, Completed)
    assert [c for c in chunks if isinstance(c, Completed)] == [completed]
    assert completed.message == Message(
        role="assistant",
        content=(TextBlock(text="Hello from the fake model, streamed in pieces."),),
    )
    assert completed.stop_reason == "end_turn"
    assert completed.usage.cache_read_input_tokens == 4000
    assert completed.usage.cache_creation_input_tokens == 300
    assert completed.usage.prompt_tokens == 4312
    assert completed.usage.output_tokens == 9
    record = fake_provider.requests[-1]
    assert completed.request_id and completed.request_id.startswith("req_")
    assert record.rejected is False
    assert record.body["stream"] is True
    assert record.headers["authorization"] == f"Bearer {DEFAULT_API_KEY}"


async def test_tool_use_is_announced_streamed_and_parsed(
    fake_provider: FakeProvider, api_key: str
) -> None:
    fake_provider.enqueue(
        Reply.tool_use("toolu_01abc", "lookup", {"key": "a" * 40}, text_before="Looking.")
    )
    provider = new_anthropic(fast_settings(fake_provider))
    chunks = await collect(provider, simple_request(provider))
    assert ToolUseStarted("toolu_01abc", "lookup") in chunks
    streamed = "".join(c.partial_json for c in chunks if isinstance(c, ToolInputDelta))
    assert streamed == '{"key": "' + "a" * 40 + '"}'
    completed = chunks[-1]
    assert isinstance(completed, Completed) and completed.stop_reason == "tool_use"
    assert completed.message.content == (
        TextBlock(text="Looking."),
        ToolUseBlock(id="toolu_01abc", name="lookup", input={"key": "a" * 40}),
    )


@pytest.mark.parametrize(
    ("reply", "kind"),
    [
        (Reply.text("partial answer here").error_mid_stream(4), "overloaded_error"),
        (Reply.text("partial answer here").cut(4), "stream_incomplete"),
        (Reply.text("partial answer here").cut(4, abrupt=True), "stream_incomplete"),
        (Reply.text("partial answer here").stall(4), "stall"),
    ],
)
async def test_a_stream_that_does_not_finish_never_completes(
    fake_provider: FakeProvider, api_key: str, reply: Reply, kind: str
) -> None:
    fake_provider.enqueue(reply)
    provider = new_anthropic(fast_settings(fake_provider, read_timeout=0.3))
    chunks: list[StreamChunk] = []
    with pytest.raises(ProviderError) as info:
        async for chunk in provider.stream(simple_request(provider)):
            chunks.append(chunk)
    assert chunks and all(isinstance(c, TextDelta) for c in chunks)
    assert info.value.kind == kind
    assert info.value.retryable is True
    assert info.value.request_id


async def test_a_clean_end_after_the_final_message_delta_is_accepted(
    fake_provider: FakeProvider, api_key: str
) -> None:
    # message_start, block start, 1 delta, block stop, message_delta: then the body ends.
    fake_provider.enqueue(Reply.text("short").cut(5))
    provider = new_anthropic(fast_settings(fake_provider))
    chunks = await collect(provider, simple_request(provider))
    assert isinstance(chunks[-1], Completed) and chunks[-1].message.text() == "short"


async def test_stop_reasons_pass_through(fake_provider: FakeProvider, api_key: str) -> None:
    reasons = ["refusal", "pause_turn", "model_context_window_exceeded", "max_tokens"]
    fake_provider.enqueue(*[Reply.text("x").with_stop_reason(r) for r in reasons])
    provider = new_anthropic(fast_settings(fake_provider))
    for reason in reasons:
        chunks = await collect(provider, simple_request(provider))
        assert isinstance(chunks[-1], Completed) and chunks[-1].stop_reason == reason


async def test_an_unreachable_endpoint_is_a_retryable_connection_error(api_key: str) -> None:
    with FakeProvider() as fake:
        url = fake.url
    provider = new_anthropic(Settings(base_url=url, connect_timeout=2))
    with pytest.raises(ProviderError) as info:
        await collect(provider, simple_request(provider))
    assert (info.value.kind, info.value.retryable) == ("connection", True)


async def test_the_sdk_client_is_created_once_and_reused(
    fake_provider: FakeProvider, api_key: str
) -> None:
    fake_provider.enqueue(Reply.text("one"), Reply.text("two"))
    provider = new_anthropic(fast_settings(fake_provider))
    await collect(provider, simple_request(provider))
    first = provider._client
    await collect(provider, simple_request(provider))
    assert provider._client is first is not None
    await provider.aclose()


async def test_a_provider_reused_on_another_event_loop_opens_a_new_client(
    fake_provider: FakeProvider, api_key: str
) -> None:
    import asyncio

    fake_provider.enqueue(Reply.text("here"), Reply.text("there"), Reply.text("back"))
    provider = new_anthropic(fast_settings(fake_provider))
    await collect(provider, simple_request(provider))
    first = provider._client

    def elsewhere() -> list[StreamChunk]:
        async def main() -> list[StreamChunk]:
            chunks = await collect(provider, simple_request(provider))
            await provider.aclose()
            return chunks

        return asyncio.run(main())

    chunks = await anyio.to_thread.run_sync(elsewhere)
    assert isinstance(chunks[-1], Completed) and chunks[-1].message.text() == "there"
    chunks = await collect(provider, simple_request(provider))  # and back on this loop
    assert isinstance(chunks[-1], Completed) and chunks[-1].message.text() == "back"
    assert provider._client is not first


# --- the Anthropic route through the turn runner --------------------------------------------


async def test_tool_loop_over_several_requests(
    fake_provider: FakeProvider, api_key: str, tmp_path: Path
) -> None:
    fake_provider.enqueue(
        Reply.tool_use(None, "lookup", {"key": "a"}, text_before="First a."),
        Reply.tool_use(None, "lookup", {"key": "b"}),
        Reply.text("a and b are known now."),
    )
    settings = fast_settings(fake_provider)
    h = await harness(new_anthropic(settings), settings, tmp_path)
    outcome, _ = await h.prompt("look up a then b")

    assert outcome == "end_turn"
    assert h.tool.calls == [{"key": "a"}, {"key": "b"}]
    assert len(fake_provider.requests) == 3
    assert all(not r.rejected for r in fake_provider.requests)
    third = fake_provider.requests[2].messages
    assert [m["role"] for m in third] == ["user", "assistant", "user", "assistant", "user"]
    assert third[4]["content"][0]["type"] == "tool_result"
    assert third[4]["content"][0]["content"] == "value of b"
    assert [m.role for m in h.history()] == [
        "user",
        "assistant",
        "user",
        "assistant",
        "user",
        "assistant",
    ]
    fake_provider.assert_script_consumed()


async def test_thinking_is_streamed_and_replayed_byte_exact_across_a_tool_loop(
    fake_provider: FakeProvider, api_key: str, tmp_path: Path
) -> None:
    thought = "The user wants `a`.\nI'll look it up - carefully, ünïcödé and all."
    fake_provider.enqueue(
        Reply.thinking(thought, Reply.tool_use(None, "lookup", {"key": "a"})),
        Reply.thinking("Now I can answer.", Reply.text("a is known.")),
        Reply.thinking("Second turn.", Reply.text("Still fine.")),
    )
    settings = fast_settings(fake_provider, reasoning_effort="low")
    h = await harness(new_anthropic(settings), settings, tmp_path)
    outcome, events = await h.prompt("what is a?")

    assert outcome == "end_turn"
    thoughts = "".join(e.text for e in events if isinstance(e, AgentThoughtDelta))
    assert thoughts == thought + "Now I can answer."
    second = fake_provider.requests[1]
    assert second.rejected is False, second.error_message
    assert second.body["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert second.messages[1]["content"][0] == {
        "type": "thinking",
        "thinking": thought,
        "signature": fake_provider.sign(thought),
    }
    # A later turn replays every signed block from history; the fake checks each signature.
    outcome, _ = await h.prompt("and again")
    assert outcome == "end_turn"
    assert fake_provider.requests[-1].rejected is False


async def test_overloaded_then_rate_limited_then_success_is_invisible(
    fake_provider: FakeProvider, api_key: str, tmp_path: Path
) -> None:
    fake_provider.enqueue(
        Reply.overloaded(retry_after_ms=5),
        Reply.rate_limited(retry_after_ms=5),
        Reply.text("third time lucky"),
    )
    settings = fast_settings(fake_provider)
    h = await harness(new_anthropic(settings), settings, tmp_path)
    outcome, events = await h.prompt("hi")
    assert outcome == "end_turn"
    assert shown_text(events) == "third time lucky"
    assert [r.status for r in fake_provider.requests] == [529, 429, 200]
    assert not any(isinstance(e, TurnFailed) for e in events)


async def test_retries_are_bounded(
    fake_provider: FakeProvider, api_key: str, tmp_path: Path
) -> None:
    fake_provider.enqueue(*[Reply.overloaded(retry_after_ms=1) for _ in range(3)])
    settings = fast_settings(fake_provider, retries=2)
    h = await harness(new_anthropic(settings), settings, tmp_path)
    outcome, _ = await h.prompt("hi")
    assert isinstance(outcome, TurnError)
    assert "529 overloaded_error: Overloaded" in str(outcome)
    assert outcome.data["retryable"] is True
    assert len(fake_provider.requests) == 3
    await assert_next_prompt_works(h, fake_provider)


async def test_stream_error_before_any_output_is_retried(
    fake_provider: FakeProvider, api_key: str, tmp_path: Path
) -> None:
    fake_provider.enqueue(Reply.text("never shown").error_mid_stream(1), Reply.text("fine"))
    settings = fast_settings(fake_provider)
    h = await harness(new_anthropic(settings), settings, tmp_path)
    outcome, events = await h.prompt("hi")
    assert outcome == "end_turn"
    assert shown_text(events) == "fine"
    assert assistant_texts(h.history()) == ["fine"]


async def test_stream_error_after_output_ends_the_turn_and_keeps_history_clean(
    fake_provider: FakeProvider, api_key: str, tmp_path: Path
) -> None:
    fake_provider.enqueue(
        Reply.tool_use(
            None, "lookup", {"key": "a"}, text_before="I will now look it up"
        ).error_mid_stream(5)
    )
    settings = fast_settings(fake_provider)
    h = await harness(new_anthropic(settings), settings, tmp_path)
    outcome, events = await h.prompt("hi")

    assert isinstance(outcome, TurnError)
    assert "overloaded_error: Overloaded" in str(outcome)
    assert outcome.data["retryable"] is True
    assert outcome.data["partialOutputShown"] is True
    assert outcome.data["kind"] == "overloaded_error"
    assert shown_text(events) == "I will now look it up"  # what was shown stays shown
    assert any(isinstance(e, TurnFailed) for e in events)
    assert len(fake_provider.requests) == 1  # output was shown: not retried
    assert [m.role for m in h.history()] == ["user"]
    assert h.tool.calls == []
    await assert_next_prompt_works(h, fake_provider)
    assert all(m["role"] == "user" for m in fake_provider.requests[-1].messages)


async def test_truncated_stream_ends_the_turn_and_the_next_prompt_works(
    fake_provider: FakeProvider, api_key: str, tmp_path: Path
) -> None:
    fake_provider.enqueue(Reply.text("this reply will be cut off in the middle").cut(4))
    settings = fast_settings(fake_provider)
    h = await harness(new_anthropic(settings), settings, tmp_path)
    outcome, events = await h.prompt("hi")
    assert isinstance(outcome, TurnError)
    assert outcome.data["kind"] == "stream_incomplete"
    assert "ended before the message was complete" in str(outcome)
    assert shown_text(events)
    assert assistant_texts(h.history()) == []
    await assert_next_prompt_works(h, fake_provider)


async def test_stall_after_output_times_out_and_the_next_prompt_works(
    fake_provider: FakeProvider, api_key: str, tmp_path: Path
) -> None:
    fake_provider.enqueue(Reply.text("this reply stalls halfway through").stall(4))
    settings = fast_settings(fake_provider, read_timeout=0.3)
    h = await harness(new_anthropic(settings), settings, tmp_path)
    started = time.monotonic()
    outcome, _ = await h.prompt("hi")
    assert time.monotonic() - started < 5
    assert isinstance(outcome, TurnError)
    assert outcome.data["kind"] == "stall" and outcome.data["retryable"] is True
    assert "stalled" in str(outcome)
    assert assistant_texts(h.history()) == []
    await assert_next_prompt_works(h, fake_provider)


async def test_stall_before_output_is_retried(
    fake_provider: FakeProvider, api_key: str, tmp_path: Path
) -> None:
    fake_provider.enqueue(Reply.text("never").stall(1), Reply.text("after the stall"))
    settings = fast_settings(fake_provider, read_timeout=0.3)
    h = await harness(new_anthropic(settings), settings, tmp_path)
    outcome, events = await h.prompt("hi")
    assert outcome == "end_turn" and shown_text(events) == "after the stall"


async def test_max_tokens_inside_a_tool_input_runs_nothing_and_commits_nothing(
    fake_provider: FakeProvider, api_key: str, tmp_path: Path
) -> None:
    fake_provider.enqueue(
        Reply.max_tokens_tool_use(None, "lookup", {"key": "x" * 60}, text_before="Checking.")
    )
    settings = fast_settings(fake_provider)
    h = await harness(new_anthropic(settings), settings, tmp_path)
    outcome, events = await h.prompt("hi")
    assert isinstance(outcome, TurnError)
    assert outcome.data["kind"] == "max_tokens_in_tool_input"
    assert outcome.data["retryable"] is False
    assert outcome.data["requestId"].startswith("req_")
    assert "cut off by max_tokens" in str(outcome) and "lookup" in str(outcome)
    assert h.tool.calls == []
    assert not any(m.tool_uses() for m in h.history())
    assert assistant_texts(h.history()) == []
    assert shown_text(events) == "Checking."
    await assert_next_prompt_works(h, fake_provider)


async def test_bad_request_fails_at_once_with_the_providers_message(
    fake_provider: FakeProvider, api_key: str, tmp_path: Path
) -> None:
    message = "messages.1.content.0: unexpected `tool_use_id` found in `tool_result` blocks"
    fake_provider.enqueue(Reply.error(400, message))
    settings = fast_settings(fake_provider)
    h = await harness(new_anthropic(settings), settings, tmp_path)
    outcome, _ = await h.prompt("hi")
    assert isinstance(outcome, TurnError)
    assert str(outcome) == f"400 invalid_request_error: {message}"
    assert outcome.data["retryable"] is False and outcome.data["status"] == 400
    assert outcome.data["requestId"].startswith("req_")
    assert len(fake_provider.requests) == 1
    await assert_next_prompt_works(h, fake_provider)


async def test_wrong_api_key_fails_at_once_with_the_providers_message(
    fake_provider: FakeProvider, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-wrong")
    settings = fast_settings(fake_provider)
    h = await harness(new_anthropic(settings), settings, tmp_path)
    outcome, _ = await h.prompt("hi")
    assert isinstance(outcome, TurnError)
    assert str(outcome).startswith("401 authentication_error: Invalid bearer token")
    assert "ANTHROPIC_API_KEY" in str(outcome)
    assert outcome.data["retryable"] is False
    assert len(fake_provider.requests) == 1


async def test_missing_api_key_is_auth_required_and_sends_nothing(
    fake_provider: FakeProvider, tmp_path: Path
) -> None:
    settings = fast_settings(fake_provider)
    provider = new_anthropic(settings)
    with pytest.raises(CredentialsMissing) as info:
        await collect(provider, simple_request(provider))
    assert "set ANTHROPIC_API_KEY" in info.value.message
    assert "DEFECT_PROVIDER=bedrock" in info.value.message

    h = await harness(provider, settings, tmp_path)
    outcome, _ = await h.prompt("hi")
    assert isinstance(outcome, TurnError)
    assert outcome.auth is True and outcome.code == "auth_required"
    assert outcome.data["kind"] == "auth_required"
    assert fake_provider.requests == []


async def test_api_key_env_names_the_variable_to_read(
    fake_provider: FakeProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = fast_settings(fake_provider, api_key_env="TEAM_CLAUDE_KEY")
    provider = new_anthropic(settings)
    with pytest.raises(CredentialsMissing, match="TEAM_CLAUDE_KEY"):
        await collect(provider, simple_request(provider))
    monkeypatch.setenv("TEAM_CLAUDE_KEY", DEFAULT_API_KEY)
    fake_provider.enqueue(Reply.text("ok"))
    chunks = await collect(provider, simple_request(provider))
    assert isinstance(chunks[-1], Completed)


async def test_cancel_during_retry_backoff_ends_the_turn_promptly(
    fake_provider: FakeProvider, api_key: str, tmp_path: Path
) -> None:
    fake_provider.enqueue(Reply.overloaded(retry_after_ms=10_000))
    settings = fast_settings(fake_provider, retry_max_delay=30.0)
    h = await harness(new_anthropic(settings), settings, tmp_path)
    result: list[Any] = []

    async def run() -> None:
        result.append(await h.prompt("hi"))

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        await wait_requests(fake_provider, 1)
        await anyio.sleep(0.1)  # the runner is now sleeping out the server's 10 s
        cancelled_at = time.monotonic()
        h.session.cancel_turn()
    assert time.monotonic() - cancelled_at < 1.0
    assert result[0][0] == "cancelled"
    assert len(fake_provider.requests) == 1
    await assert_next_prompt_works(h, fake_provider)


async def test_breakpoints_stay_within_four_over_a_long_session(
    fake_provider: FakeProvider, api_key: str, tmp_path: Path
) -> None:
    settings = fast_settings(fake_provider)
    h = await harness(new_anthropic(settings), settings, tmp_path)
    for n in range(3):
        fake_provider.enqueue(
            Reply.tool_use(None, "lookup", {"key": str(n)}),
            Reply.text(f"answer {n}").with_usage(cache_read_input_tokens=1000 * n),
        )
        outcome, _ = await h.prompt(f"question {n}")
        assert outcome == "end_turn"
    for record in fake_provider.requests:
        assert record.rejected is False
        assert count_cache_breakpoints(record.body) <= 4
    body = fake_provider.requests[-1].body
    assert count_cache_breakpoints(body) == 4
    assert body["tools"][-1]["cache_control"] == {"type": "ephemeral"}
    assert body["system"][-1]["cache_control"] == {"type": "ephemeral"}
    users = [m for m in body["messages"] if m["role"] == "user"]
    assert "cache_control" in users[-1]["content"][-1]
    assert "cache_control" in users[-2]["content"][-1]
    assert sum("cache_control" in b for m in body["messages"] for b in m["content"]) == 2


async def test_switching_the_model_takes_effect_on_the_next_turn(
    fake_provider: FakeProvider, api_key: str, tmp_path: Path
) -> None:
    settings = fast_settings(fake_provider)
    h = await harness(new_anthropic(settings), settings, tmp_path)
    values = [c.value for c in h.session.config_options()[1].choices]
    models = [v.partition("/")[2] for v in values]  # a choice is `provider/model`
    assert len(models) >= 3 and all(v.startswith("anthropic/") for v in values)
    fake_provider.enqueue(Reply.text("one"), Reply.text("two"), Reply.text("three"))
    await h.prompt("first")
    await h.session.set_config_option("model", values[1])
    await h.prompt("second")
    await h.session.set_config_option("model", models[2])  # a bare id, as older clients send
    await h.prompt("third")
    assert [r.body["model"] for r in fake_provider.requests] == models[:3]


# --- the Bedrock route ----------------------------------------------------------------------


@pytest.fixture
def bedrock_settings(fake_provider: FakeProvider, aws_env: None) -> Iterator[Settings]:
    yield fast_settings(fake_provider, provider="bedrock")


async def test_bedrock_text_turn_is_signed_and_enveloped(
    fake_provider: FakeProvider, bedrock_settings: Settings, tmp_path: Path
) -> None:
    fake_provider.enqueue(Reply.text("hello from bedrock"))
    provider = new_bedrock(bedrock_settings)
    h = await harness(provider, bedrock_settings, tmp_path)
    outcome, events = await h.prompt("hi")
    assert outcome == "end_turn"
    assert shown_text(events) == "hello from bedrock"
    record = fake_provider.requests[-1]
    assert record.route == "bedrock" and record.rejected is False
    assert record.model == provider.default_model()
    assert record.body["anthropic_version"] == BEDROCK_ANTHROPIC_VERSION
    assert "model" not in record.body and "stream" not in record.body
    assert record.headers["authorization"].startswith(
        f"AWS4-HMAC-SHA256 Credential={DEFAULT_AWS_ACCESS_KEY_ID}/"
    )
    assert count_cache_breakpoints(record.body) == 3  # tools, system, the one user message


async def test_bedrock_tool_loop_with_thinking_keeps_signatures(
    fake_provider: FakeProvider, bedrock_settings: Settings, tmp_path: Path
) -> None:
    fake_provider.enqueue(
        Reply.thinking("Need a lookup.", Reply.tool_use(None, "lookup", {"key": "z"})),
        Reply.thinking("Got it.", Reply.text("z is known.")),
    )
    settings = bedrock_settings.with_overrides(reasoning_effort="medium")
    h = await harness(new_bedrock(settings), settings, tmp_path)
    outcome, _ = await h.prompt("what is z?")
    assert outcome == "end_turn"
    assert h.tool.calls == [{"key": "z"}]
    second = fake_provider.requests[1]
    assert second.rejected is False, second.error_message
    assert second.body["thinking"]["budget_tokens"] == 8192
    assert second.messages[1]["content"][0]["signature"] == fake_provider.sign("Need a lookup.")


async def test_bedrock_throttling_then_success(
    fake_provider: FakeProvider, bedrock_settings: Settings, tmp_path: Path
) -> None:
    fake_provider.enqueue(
        Reply.rate_limited(retry_after_ms=5),
        Reply.text("x").error_mid_stream(1),  # a throttlingException frame before any output
        Reply.text("through"),
    )
    h = await harness(new_bedrock(bedrock_settings), bedrock_settings, tmp_path)
    outcome, events = await h.prompt("hi")
    assert outcome == "end_turn" and shown_text(events) == "through"
    await wait_requests(fake_provider, 3)
    assert [r.outcome for r in fake_provider.requests] == [
        "http_error",
        "stream_error",
        "completed",
    ]


async def test_bedrock_exception_after_output_ends_the_turn_cleanly(
    fake_provider: FakeProvider, bedrock_settings: Settings, tmp_path: Path
) -> None:
    fake_provider.enqueue(Reply.text("some words before the failure").error_mid_stream(4))
    h = await harness(new_bedrock(bedrock_settings), bedrock_settings, tmp_path)
    outcome, events = await h.prompt("hi")
    assert isinstance(outcome, TurnError)
    assert "throttlingException" in str(outcome)
    assert outcome.data["retryable"] is True and outcome.data["partialOutputShown"] is True
    assert shown_text(events)
    assert assistant_texts(h.history()) == []
    await assert_next_prompt_works(h, fake_provider)


async def test_bedrock_validation_error_fails_at_once(
    fake_provider: FakeProvider, bedrock_settings: Settings, tmp_path: Path
) -> None:
    fake_provider.enqueue(Reply.error(400, "messages.0: bad thing"))
    h = await harness(new_bedrock(bedrock_settings), bedrock_settings, tmp_path)
    outcome, _ = await h.prompt("hi")
    assert isinstance(outcome, TurnError)
    assert str(outcome) == "400 ValidationException: messages.0: bad thing"
    assert outcome.data["retryable"] is False and outcome.data["requestId"]
    assert len(fake_provider.requests) == 1


async def test_bedrock_truncated_stream_and_max_tokens_cut(
    fake_provider: FakeProvider, bedrock_settings: Settings, tmp_path: Path
) -> None:
    fake_provider.enqueue(
        Reply.text("cut short in the middle").cut(4),
        Reply.max_tokens_tool_use(None, "lookup", {"key": "y" * 50}),
    )
    h = await harness(new_bedrock(bedrock_settings), bedrock_settings, tmp_path)
    first, _ = await h.prompt("one")
    second, _ = await h.prompt("two")
    assert isinstance(first, TurnError) and first.data["kind"] == "stream_incomplete"
    assert isinstance(second, TurnError) and second.data["kind"] == "max_tokens_in_tool_input"
    assert h.tool.calls == [] and assistant_texts(h.history()) == []
    await assert_next_prompt_works(h, fake_provider)


async def test_bedrock_without_credentials_says_what_to_set(
    fake_provider: FakeProvider, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    settings = fast_settings(fake_provider, provider="bedrock")
    h = await harness(new_bedrock(settings), settings, tmp_path)
    outcome, _ = await h.prompt("hi")
    assert isinstance(outcome, TurnError) and outcome.auth is True
    for hint in ("AWS_ACCESS_KEY_ID", "AWS_PROFILE", "aws sso login"):
        assert hint in str(outcome)
    assert fake_provider.requests == []


async def test_bedrock_without_a_region_names_aws_region(
    fake_provider: FakeProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", DEFAULT_AWS_ACCESS_KEY_ID)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", DEFAULT_AWS_SECRET_KEY)
    provider = new_bedrock(fast_settings(fake_provider, provider="bedrock"))
    with pytest.raises(CredentialsMissing, match="AWS_REGION"):
        await collect(provider, simple_request(provider))


async def test_bedrock_unknown_profile_is_named(fake_provider: FakeProvider, aws_env: None) -> None:
    settings = fast_settings(fake_provider, provider="bedrock", aws_profile="nope")
    provider = new_bedrock(settings)
    with pytest.raises(CredentialsMissing, match="'nope'"):
        await collect(provider, simple_request(provider))


async def test_bedrock_bearer_token_needs_no_aws_keys(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AWS_BEARER_TOKEN_BEDROCK", "bedrock-api-key-test")
    monkeypatch.setenv("AWS_REGION", "us-west-2")
    with FakeProvider(bedrock_bearer_token="bedrock-api-key-test") as fake:
        fake.enqueue(Reply.text("bearer ok"))
        provider = new_bedrock(fast_settings(fake, provider="bedrock"))
        chunks = await collect(provider, simple_request(provider))
        assert isinstance(chunks[-1], Completed) and chunks[-1].message.text() == "bearer ok"
        assert fake.requests[-1].headers["authorization"] == "Bearer bedrock-api-key-test"


async def test_thinking_deltas_are_forwarded_as_thoughts(
    fake_provider: FakeProvider, api_key: str
) -> None:
    fake_provider.enqueue(Reply.thinking("a long chain of reasoning " * 4, Reply.text("ok")))
    provider = new_anthropic(fast_settings(fake_provider))
    chunks = await collect(provider, simple_request(provider, thinking_budget=2048))
    thought = "".join(c.text for c in chunks if isinstance(c, ThinkingDelta))
    assert thought == "a long chain of reasoning " * 4
    completed = chunks[-1]
    assert isinstance(completed, Completed)
    block = completed.message.content[0]
    assert isinstance(block, ThinkingBlock)
    assert block.signature == fake_provider.sign(thought)
