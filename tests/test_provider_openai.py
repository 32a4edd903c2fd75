"""The OpenAI-compatible provider (`defect_core/providers/openai_compat/`) through the real
`openai` SDK against the strict fake Chat Completions API, and its configuration.

What is proven: a streamed answer becomes the same chunks and `Completed` message the turn
runner gets from Claude (thinking from `reasoning_content`, text, parallel tool calls
assembled per index, usage with cached tokens, the stop reasons), ids a server mints in
shapes the Messages wire forbids are mapped, failures are classified (429 with its
`retry-after`, a cut stream, a missing key), only the parameters a model takes are sent, the
model list comes from `GET /v1/models`, a `[providers.NAME]` table of `kind = "openai"` is
parsed strictly, and nothing of the SDK is imported until the first call.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from defect_core.config import ConfigError, ModelSettings, ProviderSpec, Settings
from defect_core.config.providers import parse_providers, provider_settings
from defect_core.model import (
    ImageBlock,
    Message,
    TextBlock,
    ToolResultBlock,
    ToolSpec,
    ToolUseBlock,
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
from defect_core.providers.openai_compat import OpenAICompatProvider
from defect_core.providers.registry import build_named
from defect_fakeapi import (
    DEFAULT_API_KEY,
    FakeProvider,
    Reply,
    Usage,
    validate_chat_request,
)
from defect_fakeapi import (
    TextBlock as FakeText,
)
from defect_fakeapi import (
    ThinkingBlock as FakeThinking,
)
from defect_fakeapi import (
    ToolUseBlock as FakeToolUse,
)

pytestmark = pytest.mark.anyio

PNG = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6"
    "kgAAAABJRU5ErkJggg=="
)
TOOLS = (
    ToolSpec("bash", "Run a command", {"type": "object", "properties": {}}),
    ToolSpec("read_file", "Read a file", {"type": "object", "properties": {}}),
)


@pytest.fixture
def fake() -> Iterator[FakeProvider]:
    with FakeProvider() as provider:
        yield provider


def spec_for(fake: FakeProvider, **changes: Any) -> ProviderSpec:
    base = ProviderSpec(
        "local",
        "openai",
        "test",
        api_key_env="LOCAL_KEY",
        base_url=f"{fake.url}/v1",
        models=("tiny-coder", "tiny-reasoner"),
        model_settings=(
            ("tiny-coder", ModelSettings(context_window=32_768, max_output_tokens=4_096)),
            ("tiny-reasoner", ModelSettings(reasoning=True, images=True)),
        ),
    )
    return dataclasses.replace(base, **changes)


def provider_for(spec: ProviderSpec) -> OpenAICompatProvider:
    settings = Settings(providers={spec.name: spec}, read_timeout=10.0)
    built = build_named(spec, settings)
    assert isinstance(built, OpenAICompatProvider)
    return built


@pytest.fixture
def provider(fake: FakeProvider, monkeypatch: pytest.MonkeyPatch) -> OpenAICompatProvider:
    monkeypatch.setenv("LOCAL_KEY", DEFAULT_API_KEY)
    return provider_for(spec_for(fake))


def request(*messages: Message, model: str = "tiny-coder", **extra: Any) -> ModelRequest:
    history = list(messages) or [Message(role="user", content=(TextBlock(text="go"),))]
    return ModelRequest(model=model, system="be brief", messages=history, tools=TOOLS, **extra)


async def collect(provider: OpenAICompatProvider, req: ModelRequest) -> list[StreamChunk]:
    return [chunk async for chunk in provider.stream(req)]


@pytest.mark.parametrize("dialect", ["openai", "llama.cpp"])
async def test_a_streamed_coding_answer_becomes_the_runner_s_chunks_and_message(
    fake: FakeProvider, provider: OpenAICompatProvider, dialect: str
) -> None:
    fake.enqueue(
        dataclasses.replace(
            Reply.of(
                [
                    FakeThinking("plan"),
                    FakeText("Both at once."),
                    FakeToolUse("call_a", "bash", {"command": "ls -la"}),
                    FakeToolUse("call_b", "read_file", {"path": "notes.txt"}),
                ],
                usage=Usage(input_tokens=30, output_tokens=9, cache_read_input_tokens=70),
            ),
            chunk_size=4,
            chat_dialect=dialect,  # llama.cpp's shapes too (defect_fakeapi/chat_stream.py)
        )
    )
    chunks = await collect(provider, request())
    assert "".join(c.text for c in chunks if isinstance(c, ThinkingDelta)) == "plan"
    assert "".join(c.text for c in chunks if isinstance(c, TextDelta)) == "Both at once."
    assert [(c.id, c.name) for c in chunks if isinstance(c, ToolUseStarted)] == [
        ("call_a", "bash"),
        ("call_b", "read_file"),
    ]
    for call_id, expected in (("call_a", {"command": "ls -la"}), ("call_b", {"path": "notes.txt"})):
        pieces = [
            c.partial_json for c in chunks if isinstance(c, ToolInputDelta) and c.id == call_id
        ]
        assert len(pieces) > 1 and json.loads("".join(pieces)) == expected
    completed = chunks[-1]
    assert isinstance(completed, Completed)
    assert completed.stop_reason == "tool_use"
    assert [b.type for b in completed.message.content] == [
        "thinking",
        "text",
        "tool_use",
        "tool_use",
    ]
    assert completed.usage.input_tokens == 30
    assert completed.usage.cache_read_input_tokens == 70
    assert completed.usage.output_tokens == 9
    body = fake.requests[0].body
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["max_tokens"] == 4_096  # the model's max_output_tokens caps the request's
    assert "reasoning_effort" not in body
    assert [t["function"]["name"] for t in body["tools"]] == ["bash", "read_file"]


@pytest.mark.parametrize(
    ("stop_reason", "expected"),
    [("end_turn", "end_turn"), ("max_tokens", "max_tokens"), ("refusal", "refusal")],
)
async def test_finish_reasons_map_to_the_runner_s_stop_reasons(
    fake: FakeProvider, provider: OpenAICompatProvider, stop_reason: str, expected: str
) -> None:
    fake.enqueue(Reply.text("x", stop_reason=stop_reason))
    completed = (await collect(provider, request()))[-1]
    assert isinstance(completed, Completed) and completed.stop_reason == expected


async def test_a_server_s_illegal_ids_are_mapped_consistently(
    fake: FakeProvider, provider: OpenAICompatProvider
) -> None:
    fake.enqueue(Reply.tool_use("functions.bash:0", "bash", {"command": "ls"}))
    fake.enqueue(Reply.tool_use("functions.bash:0", "bash", {"command": "ls"}))
    first = (await collect(provider, request()))[-1]
    second = (await collect(provider, request()))[-1]
    assert isinstance(first, Completed) and isinstance(second, Completed)
    (call,) = first.message.tool_uses()
    assert call.id.startswith("call_") and call.id == second.message.tool_uses()[0].id
    assert len(call.id) <= 40 and ":" not in call.id and "." not in call.id


async def test_an_id_over_40_characters_is_mapped_in_the_outbound_copy_only(
    fake: FakeProvider, provider: OpenAICompatProvider
) -> None:
    long_id = "toolu_" + "a" * 50
    history = [
        Message(role="user", content=(TextBlock(text="go"),)),
        Message(role="assistant", content=(ToolUseBlock(id=long_id, name="bash", input={}),)),
        Message(
            role="user",
            content=(ToolResultBlock(tool_use_id=long_id, content="ok"), TextBlock(text="more")),
        ),
    ]
    fake.enqueue(Reply.text("done"))
    await collect(provider, request(*history))
    sent = fake.requests[0].body["messages"]
    assert fake.requests[0].rejected is False
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "tool", "user"]
    mapped = sent[2]["tool_calls"][0]["id"]
    assert mapped != long_id and len(mapped) <= 40 and sent[3]["tool_call_id"] == mapped
    assert history[1].content[0].id == long_id  # the history keeps its own id


async def test_a_429_is_retryable_with_the_server_s_wait(
    fake: FakeProvider, provider: OpenAICompatProvider
) -> None:
    fake.enqueue(Reply.error(429, "Rate limit reached", retry_after=3))
    with pytest.raises(ProviderError) as caught:
        await collect(provider, request())
    assert caught.value.retryable and caught.value.retry_after == 3.0
    assert caught.value.status == 429 and caught.value.kind == "rate_limited"


async def test_a_stream_cut_mid_tool_call_is_incomplete_and_retryable(
    fake: FakeProvider, provider: OpenAICompatProvider
) -> None:
    reply = dataclasses.replace(
        Reply.tool_use("call_1", "bash", {"command": "ls -la /"}), chunk_size=3
    )
    fake.enqueue(reply.cut(4))
    chunks: list[StreamChunk] = []
    with pytest.raises(ProviderError) as caught:
        async for chunk in provider.stream(request()):
            chunks.append(chunk)
    assert caught.value.kind == "stream_incomplete" and caught.value.retryable
    assert not any(isinstance(c, Completed) for c in chunks)
    assert any(isinstance(c, ToolInputDelta) for c in chunks)


async def test_an_answer_without_a_role_chunk_is_assembled(
    fake: FakeProvider, provider: OpenAICompatProvider
) -> None:
    # llama.cpp's server sends no role chunk when the answer opens inside a character.
    fake.enqueue(dataclasses.replace(Reply.text("🌌 night"), chat_dialect="llama.cpp"))
    chunks = await collect(provider, request())
    assert "".join(c.text for c in chunks if isinstance(c, TextDelta)) == "🌌 night"
    completed = chunks[-1]
    assert isinstance(completed, Completed) and completed.stop_reason == "end_turn"
    assert [b.type for b in completed.message.content] == ["text"]


async def test_a_server_ignoring_include_usage_reports_zero_usage(
    fake: FakeProvider, provider: OpenAICompatProvider
) -> None:
    fake.enqueue(dataclasses.replace(Reply.text("hi"), chat_usage=False))
    completed = (await collect(provider, request()))[-1]
    assert isinstance(completed, Completed) and completed.usage.prompt_tokens == 0


async def test_arguments_that_are_not_json_fail_the_stream_as_malformed(
    fake: FakeProvider, provider: OpenAICompatProvider
) -> None:
    broken = FakeToolUse("call_1", "bash", {}, raw_json='{"command": ')
    fake.enqueue(Reply.of([broken], stop_reason="tool_use"))
    with pytest.raises(ProviderError) as caught:
        await collect(provider, request())
    assert caught.value.kind == "malformed_tool_input" and caught.value.retryable


async def test_reasoning_effort_only_to_a_reasoning_model_and_images_only_where_taken(
    fake: FakeProvider, provider: OpenAICompatProvider
) -> None:
    image = ImageBlock(media_type="image/png", data=PNG)
    history = Message(role="user", content=(TextBlock(text="look"), image))
    fake.enqueue(Reply.text("a"), Reply.text("b"), Reply.text("c"))
    await collect(provider, request(history, model="tiny-reasoner", thinking_budget=2_048))
    await collect(provider, request(history, model="tiny-reasoner"))
    await collect(provider, request(history, thinking_budget=8_192))
    reasoner, reasoner_off, coder = (r.body for r in fake.requests)
    assert all(not r.rejected for r in fake.requests)
    assert reasoner["reasoning_effort"] == "low" and "max_tokens" not in reasoner
    assert "reasoning_effort" not in reasoner_off and "reasoning_effort" not in coder
    assert reasoner["messages"][1]["content"][1]["image_url"]["url"].startswith("data:image/png")
    assert (
        coder["messages"][1]["content"]
        == "look\n\n[image removed: this model is configured without images]"
    )


async def test_a_model_without_tools_gets_none_and_the_conversation_says_why(
    fake: FakeProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOCAL_KEY", DEFAULT_API_KEY)
    spec = spec_for(fake, model_settings=(("tiny-coder", ModelSettings(tools=False)),))
    fake.enqueue(Reply.text("no tools here"))
    await collect(provider_for(spec), request())
    body = fake.requests[0].body
    assert "tools" not in body
    assert "configured without tools" in body["messages"][0]["content"]


async def test_a_missing_key_names_its_variable_and_no_key_is_needed_without_one(
    fake: FakeProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LOCAL_KEY", raising=False)
    with pytest.raises(CredentialsMissing) as caught:
        await collect(provider_for(spec_for(fake)), request())
    assert "LOCAL_KEY" in caught.value.message
    fake.chat_key_required = False
    fake.enqueue(Reply.text("local"))
    completed = (await collect(provider_for(spec_for(fake, api_key_env="")), request()))[-1]
    assert isinstance(completed, Completed)


async def test_the_model_list_comes_from_the_server(
    fake: FakeProvider, provider: OpenAICompatProvider
) -> None:
    assert [m.id for m in provider.models()] == ["tiny-coder", "tiny-reasoner"]
    assert provider.models()[0].context_window == 32_768
    fake.chat_models = ["served-a", "tiny-coder"]
    listed = await provider.list_models()
    assert [m.id for m in listed] == ["served-a", "tiny-coder"]
    assert listed[1].context_window == 32_768
    assert provider.hosted_capabilities == frozenset()


def test_every_request_built_passes_the_strict_validator(fake: FakeProvider) -> None:
    from defect_core.providers.openai_compat import encode_request

    spec = spec_for(fake)
    history = [
        Message(role="user", content=(TextBlock(text="go"),)),
        Message(
            role="assistant",
            content=(
                TextBlock(text="two"),
                ToolUseBlock(id="call_1", name="bash", input={"command": "ls"}),
                ToolUseBlock(id="call_2", name="bash", input={"command": "pwd"}),
            ),
        ),
        Message(
            role="user",
            content=(
                ToolResultBlock(tool_use_id="call_1", content="a"),
                ToolResultBlock(tool_use_id="call_2", content="b", is_error=True),
            ),
        ),
    ]
    body = encode_request(spec, request(*history))
    assert validate_chat_request(body) is body
    assert [m["role"] for m in body["messages"]] == ["system", "user", "assistant", "tool", "tool"]
    assert body["messages"][4]["content"] == "Error: b"


# --- configuration ----------------------------------------------------------------------------


def test_a_providers_table_of_kind_openai_is_parsed_strictly(tmp_path: Path) -> None:
    table = {
        "local": {
            "kind": "openai",
            "base_url": "http://127.0.0.1:8080/v1",
            "models": ["tiny-coder"],
            "model_settings": {
                "tiny-coder": {
                    "context_window": 32768,
                    "max_output_tokens": 4096,
                    "tools": True,
                    "images": False,
                    "reasoning": False,
                }
            },
        }
    }
    spec = parse_providers(table, "config.toml")["local"]
    assert spec.kind == "openai" and spec.api_key_env == ""
    assert spec.model_settings == (
        ("tiny-coder", ModelSettings(context_window=32768, max_output_tokens=4096)),
    )
    settings = provider_settings(Settings(providers={"local": spec}), spec)
    assert settings.providers["local"] is spec
    for bad, problem in (
        ({"tiny-coder": {"context_window": 0}}, "positive integer"),
        ({"tiny-coder": {"tools": "yes"}}, "true or false"),
        ({"tiny-coder": {"vision": True}}, "unknown key 'vision'"),
    ):
        broken = {"local": {**table["local"], "model_settings": bad}}
        with pytest.raises(ConfigError) as caught:
            parse_providers(broken, "config.toml")
        assert "providers.local.model_settings" in str(caught.value) and problem in str(
            caught.value
        )
    with pytest.raises(ConfigError) as caught:
        parse_providers({"x": {"kind": "anthropic", "model_settings": {}}}, "config.toml")
    assert "not a setting of a anthropic provider" in str(caught.value)
    with pytest.raises(ConfigError) as caught:
        parse_providers({"x": {"kind": "openai", "base_url": "http://h/v1"}}, "config.toml")
    assert "providers.x.models" in str(caught.value) and "lists its models" in str(caught.value)


def test_nothing_of_the_sdk_is_imported_until_warmed_or_called() -> None:
    code = (
        "import sys\n"
        "from defect_core.config import ProviderSpec, Settings\n"
        "from defect_core.providers.registry import build_named\n"
        "spec = ProviderSpec('local', 'openai', 't', api_key_env='', models=('m',))\n"
        "p = build_named(spec, Settings(providers={'local': spec}))\n"
        "assert p.default_model() == 'm'\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('openai', 'httpx2')))\n"
        "p.warm(); p.warm()\n"
        "from defect_core.providers.openai_compat import provider\n"
        "assert provider._preload is not None and provider._preload.wait(60)\n"
        "print('openai' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parents[1],
    )
    assert out.stdout.split() == ["[]", "True"]  # nothing until used; `warm` starts it


# --- the assembler alone: shapes some servers send -------------------------------------------


def chunk(**delta: Any) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": None}]}


def finish(reason: str) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": {}, "finish_reason": reason}]}


def test_a_call_without_a_name_is_left_to_the_runner_s_filter() -> None:
    from defect_core.integrity import drop_malformed_tool_uses
    from defect_core.providers.openai_compat import ChatAssembler

    assembler = ChatAssembler(max_tokens=100, provider="local")
    fed = assembler.feed(
        chunk(tool_calls=[{"index": 0, "id": "c1", "function": {"arguments": "{}"}}])
    )
    fed += assembler.feed(chunk(content="done"))
    fed += assembler.feed(finish("stop"))
    assert not any(isinstance(c, ToolUseStarted) for c in fed)
    completed = assembler.finish(None)
    assert completed.stop_reason == "tool_use"
    kept = drop_malformed_tool_uses(completed.message)
    assert [b.type for b in kept.content] == ["text"]


def test_arguments_before_the_name_and_a_missing_id_are_assembled() -> None:
    from defect_core.providers.openai_compat import ChatAssembler

    assembler = ChatAssembler(max_tokens=100, provider="local")
    fed = assembler.feed(chunk(tool_calls=[{"index": 0, "function": {"arguments": '{"pa'}}]))
    assert fed == []
    fed = assembler.feed(
        chunk(
            tool_calls=[{"index": 0, "function": {"name": "read_file", "arguments": 'th": "a"}'}}]
        )
    )
    started = fed[0]
    assert isinstance(started, ToolUseStarted) and started.id.startswith("call_")
    assert [c.partial_json for c in fed[1:] if isinstance(c, ToolInputDelta)] == [
        '{"pa',
        'th": "a"}',
    ]
    assembler.feed({"choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 2}})
    assembler.feed(finish("tool_calls"))
    completed = assembler.finish("req_1")
    (call,) = completed.message.tool_uses()
    assert call.id == started.id and call.input == {"path": "a"}
    assert completed.usage.input_tokens == 10 and completed.request_id == "req_1"


def test_a_reply_cut_by_length_inside_a_call_keeps_it_for_the_runner_to_withhold() -> None:
    from defect_core.providers.openai_compat import ChatAssembler

    assembler = ChatAssembler(max_tokens=100, provider="local")
    assembler.feed(
        chunk(
            tool_calls=[{"index": 0, "id": "c1", "function": {"name": "bash", "arguments": '{"co'}}]
        )
    )
    assembler.feed(finish("length"))
    completed = assembler.finish(None)
    assert completed.stop_reason == "max_tokens" and completed.message.tool_uses()[0].input == {}
