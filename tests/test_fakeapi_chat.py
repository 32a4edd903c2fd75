"""The strict fake Chat Completions API (`defect_fakeapi/chat*.py`): its rules and its stream.

The validator is proven rule by rule on minimal bodies (each broken one gets OpenAI's error,
with its `param` and `code`; a legal one passes), and the routes through the real `openai`
SDK over HTTP: streamed chunks in the real shapes (role chunk, fragments interleaved by index,
`finish_reason`, the `choices: []` usage chunk), the non-streamed answer, the model list, a
400 that consumes no scripted reply, a 429 with `retry-after`, a cut stream, a server that
ignores `include_usage`, and the bearer-token check.
"""

from __future__ import annotations

import dataclasses
import json
import urllib.request
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from defect_fakeapi import (
    DEFAULT_API_KEY,
    ChatWireError,
    FakeProvider,
    Reply,
    TextBlock,
    ThinkingBlock,
    ToolUseBlock,
    Usage,
    validate_chat_request,
)


def body(*messages: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"model": "tiny-coder", "messages": list(messages), **extra}


def user(text: str = "hi") -> dict[str, Any]:
    return {"role": "user", "content": text}


def calls(*ids: str, arguments: Any = "{}") -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": i, "type": "function", "function": {"name": "bash", "arguments": arguments}}
            for i in ids
        ],
    }


def tool(call_id: str, text: str = "ok") -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": text}


def rejected(request: dict[str, Any], **kw: Any) -> ChatWireError:
    with pytest.raises(ChatWireError) as caught:
        validate_chat_request(request, **kw)
    return caught.value


# --- the rules, one by one --------------------------------------------------------------------


def test_a_legal_tool_round_passes() -> None:
    request = body(
        {"role": "system", "content": "be brief"},
        user(),
        calls("call_1", "call_2", arguments='{"command": "ls"}'),
        tool("call_1"),
        tool("call_2"),
        {"role": "user", "content": [{"type": "text", "text": "and?"}]},
        stream=True,
        stream_options={"include_usage": True},
    )
    assert validate_chat_request(request) is request


def test_a_tool_message_answering_no_call_is_refused() -> None:
    err = rejected(body(user(), tool("call_9")))
    assert "must be a response to a preceeding message with 'tool_calls'" in err.message
    assert err.param == "messages.[1].role"
    assert err.envelope()["error"]["type"] == "invalid_request_error"


def test_a_tool_message_after_an_intervening_user_message_is_refused() -> None:
    err = rejected(body(user(), calls("call_1"), user("wait"), tool("call_1")))
    assert "must be followed by tool messages" in err.message


def test_an_unanswered_call_is_refused_with_its_id() -> None:
    err = rejected(body(user(), calls("call_1", "call_2"), tool("call_1"), user("next")))
    assert err.message.startswith(
        "An assistant message with 'tool_calls' must be followed by tool messages responding "
        "to each 'tool_call_id'."
    )
    assert err.message.endswith("call_2")
    assert err.param == "messages.[1].role"


def test_an_unanswered_call_at_the_end_is_refused() -> None:
    assert "call_1" in rejected(body(user(), calls("call_1"))).message


def test_a_call_answered_twice_is_refused() -> None:
    err = rejected(body(user(), calls("call_1"), tool("call_1"), tool("call_1")))
    assert "preceeding message" in err.message


def test_an_unknown_role_is_refused() -> None:
    err = rejected(body(user(), {"role": "robot", "content": "x"}))
    assert err.code == "invalid_value"
    assert err.param == "messages[1].role"


def test_arguments_that_are_not_a_string_are_refused() -> None:
    err = rejected(body(user(), calls("call_1", arguments={"command": "ls"}), tool("call_1")))
    assert err.code == "invalid_type"
    assert err.param == "messages[1].tool_calls[0].function.arguments"


def test_arguments_that_are_not_json_are_refused() -> None:
    err = rejected(body(user(), calls("call_1", arguments='{"command": "l'), tool("call_1")))
    assert "not valid JSON" in err.message


def test_a_tool_call_id_over_40_characters_is_refused() -> None:
    long_id = "call_" + "x" * 36
    assert validate_chat_request(body(user(), calls("call_" + "x" * 35), tool("call_" + "x" * 35)))
    err = rejected(body(user(), calls(long_id), tool(long_id)))
    assert err.code == "string_above_max_length"
    assert "maximum length 40, but got a string with length 41" in err.message


def test_a_duplicate_call_id_is_refused() -> None:
    err = rejected(body(user(), calls("call_1"), tool("call_1"), calls("call_1"), tool("call_1")))
    assert "Duplicate value" in err.message


def test_thinking_fields_never_pass_on_a_message() -> None:
    message = {"role": "assistant", "content": "x", "reasoning_content": "hmm"}
    assert "'reasoning_content' was unexpected" in rejected(body(user(), message, user())).message


def test_an_image_only_in_a_user_message() -> None:
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    assert validate_chat_request(body({"role": "user", "content": [image]}))
    err = rejected(body(user(), calls("call_1"), {**tool("call_1"), "content": [image]}))
    assert err.code == "invalid_value"


def test_reasoning_effort_only_to_a_reasoning_model() -> None:
    err = rejected(body(user(), reasoning_effort="low"))
    assert err.code == "unsupported_parameter"
    request = body(user(), reasoning_effort="low")
    assert validate_chat_request(request, reasoning_models={"tiny-coder"})


def test_stream_options_only_with_stream_and_no_unknown_parameter() -> None:
    assert "only allowed when 'stream'" in rejected(body(user(), stream_options={})).message
    assert rejected(body(user(), thinking={"type": "enabled"})).param == "thinking"
    assert rejected(body()).code == "empty_array"


def test_tools_have_legal_unique_names() -> None:
    fn = {"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}
    assert validate_chat_request(body(user(), tools=[fn]))
    assert "repeated" in rejected(body(user(), tools=[fn, fn])).message
    bad = {"type": "function", "function": {"name": "functions.bash"}}
    assert rejected(body(user(), tools=[bad])).param == "tools[0].function.name"


# --- the routes, through the real SDK ---------------------------------------------------------


@pytest.fixture
def fake() -> Iterator[FakeProvider]:
    with FakeProvider() as provider:
        yield provider


def client(fake: FakeProvider, key: str = DEFAULT_API_KEY) -> openai.OpenAI:
    return openai.OpenAI(api_key=key, base_url=f"{fake.url}/v1", max_retries=0)


def parallel_reply() -> Reply:
    return sized(
        Reply.of(
            [
                ThinkingBlock("plan it"),
                TextBlock("Running both."),
                ToolUseBlock("call_a", "bash", {"command": "ls -la"}),
                ToolUseBlock("call_b", "read_file", {"path": "notes.txt"}),
            ],
            usage=Usage(input_tokens=30, output_tokens=9, cache_read_input_tokens=70),
        ),
        5,
    )


def sized(reply: Reply, size: int) -> Reply:
    return dataclasses.replace(reply, chunk_size=size)


def test_a_stream_has_the_real_chunk_shapes(fake: FakeProvider) -> None:
    fake.enqueue(parallel_reply())
    stream = client(fake).chat.completions.create(
        model="tiny-coder",
        messages=[{"role": "user", "content": "go"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = [c.model_dump() for c in stream]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    reasoning = "".join(d.get("reasoning_content") or "" for d in deltas)
    assert reasoning == "plan it"
    assert "".join(d.get("content") or "" for d in deltas) == "Running both."
    fragments = [t for d in deltas for t in d.get("tool_calls") or ()]
    first = [f for f in fragments if f.get("id")]
    assert [(f["index"], f["id"], f["function"]["name"]) for f in first] == [
        (0, "call_a", "bash"),
        (1, "call_b", "read_file"),
    ]
    pieces = [f for f in fragments if not f.get("id")]
    assert [f["index"] for f in pieces[:4]] == [0, 1, 0, 1]  # interleaved by index
    for index, expected in ((0, {"command": "ls -la"}), (1, {"path": "notes.txt"})):
        text = "".join(f["function"]["arguments"] for f in fragments if f["index"] == index)
        assert json.loads(text) == expected
    assert any(p["function"]["arguments"] == '{"com' for p in pieces)  # cut mid-token
    finishing = [c for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
    assert [c["choices"][0]["finish_reason"] for c in finishing] == ["tool_calls"]
    last = chunks[-1]
    assert last["choices"] == []
    assert last["usage"]["prompt_tokens"] == 100
    assert last["usage"]["prompt_tokens_details"]["cached_tokens"] == 70
    assert last["usage"]["completion_tokens"] == 9


def raw_post(fake: FakeProvider, request: dict[str, Any]) -> bytes:
    sent = urllib.request.Request(
        f"{fake.url}/v1/chat/completions",
        data=json.dumps(request).encode(),
        headers={"content-type": "application/json", "authorization": f"Bearer {DEFAULT_API_KEY}"},
    )
    with urllib.request.urlopen(sent, timeout=10) as answer:
        return bytes(answer.read())


def test_a_llama_cpp_reply_has_that_server_s_shapes(fake: FakeProvider) -> None:
    llama = dataclasses.replace(parallel_reply(), chat_dialect="llama.cpp")
    fake.enqueue(llama, llama)
    go = {"model": "tiny-coder", "messages": [{"role": "user", "content": "go"}]}
    raw = raw_post(fake, {**go, "stream": True, "stream_options": {"include_usage": True}})
    lines = [line[len("data: ") :] for line in raw.decode().splitlines() if line]
    assert lines[-1] == "[DONE]"
    chunks = [json.loads(line) for line in lines[:-1]]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": None}
    with_choices = [c for c in chunks if c["choices"]]
    assert all("usage" not in c for c in with_choices)
    assert all("logprobs" not in c["choices"][0] for c in with_choices)
    last = chunks[-1]
    assert last["choices"] == [] and set(last["usage"]) == {
        "completion_tokens",
        "prompt_tokens",
        "total_tokens",
        "prompt_tokens_details",
    }
    assert last["timings"]["cache_n"] == 70 and last["timings"]["prompt_n"] == 30
    fake.enqueue(llama)
    unasked = raw_post(fake, {**go, "stream": True})  # no usage chunk: timings on the last
    finishing = json.loads(unasked.decode().split("data: ")[-2])
    assert finishing["choices"][0]["finish_reason"] == "tool_calls" and "timings" in finishing
    whole = json.loads(raw_post(fake, go))
    assert "refusal" not in whole["choices"][0]["message"]
    assert "logprobs" not in whole["choices"][0] and "timings" in whole


def test_a_llama_cpp_answer_opening_with_an_emoji_has_no_role_chunk(fake: FakeProvider) -> None:
    fake.enqueue(dataclasses.replace(Reply.text("🌌 night"), chat_dialect="llama.cpp"))
    raw = raw_post(fake, {"model": "tiny-coder", "messages": [user()], "stream": True})
    first = json.loads(raw.decode().split("data: ")[1])
    assert first["choices"][0]["delta"] == {"content": "🌌 night"}


def test_a_server_ignoring_include_usage_sends_no_usage_chunk(fake: FakeProvider) -> None:
    fake.enqueue(dataclasses.replace(Reply.text("hi"), chat_usage=False))
    stream = client(fake).chat.completions.create(
        model="tiny-coder",
        messages=[{"role": "user", "content": "go"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert all(c.choices for c in chunks)
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_a_rejected_body_is_the_openai_400_and_consumes_no_reply(fake: FakeProvider) -> None:
    fake.enqueue(Reply.text("kept"))
    with pytest.raises(openai.BadRequestError) as caught:
        client(fake).chat.completions.create(
            model="tiny-coder",
            messages=[{"role": "user", "content": "go"}, tool("call_x")],  # type: ignore[list-item]
        )
    assert caught.value.status_code == 400
    error = caught.value.body
    assert isinstance(error, dict) and "preceeding" in error["message"]
    assert fake.pending == 1
    answer = client(fake).chat.completions.create(
        model="tiny-coder", messages=[{"role": "user", "content": "go"}]
    )
    assert answer.choices[0].message.content == "kept"
    assert answer.usage is not None


def test_a_429_carries_retry_after(fake: FakeProvider) -> None:
    fake.enqueue(Reply.error(429, "slow down", retry_after=7))
    with pytest.raises(openai.RateLimitError) as caught:
        client(fake).chat.completions.create(
            model="tiny-coder", messages=[{"role": "user", "content": "go"}]
        )
    assert caught.value.response.headers["retry-after"] == "7"
    assert caught.value.code == "rate_limit_exceeded"


def test_a_cut_stream_ends_without_finish_reason(fake: FakeProvider) -> None:
    fake.enqueue(parallel_reply().cut(12))
    stream = client(fake).chat.completions.create(
        model="tiny-coder", messages=[{"role": "user", "content": "go"}], stream=True
    )
    chunks = list(stream)
    assert len(chunks) == 12
    assert all(c.choices[0].finish_reason is None for c in chunks)
    assert fake.requests[0].outcome == "cut"


def test_the_model_list_and_the_key(fake: FakeProvider) -> None:
    assert [m.id for m in client(fake).models.list()] == ["tiny-coder", "tiny-reasoner"]
    with pytest.raises(openai.AuthenticationError):
        client(fake, "sk-wrong").models.list()
    fake.chat_key_required = False
    assert next(m.id for m in client(fake, "anything").models.list()) == "tiny-coder"


def test_reasoning_streams_in_the_field_of_the_server_played(fake: FakeProvider) -> None:
    """OpenRouter streams reasoning as `reasoning`, DeepSeek as `reasoning_content`: the fake
    plays either, streamed and whole, and never both."""
    fake.chat_reasoning_field = "reasoning"
    fake.enqueue(Reply.thinking("weigh it", Reply.text("done")), Reply.thinking("again", None))
    stream = client(fake).chat.completions.create(
        model="tiny-coder", messages=[{"role": "user", "content": "go"}], stream=True
    )
    deltas = [c.model_dump()["choices"][0]["delta"] for c in stream if c.choices]
    assert "".join(d.get("reasoning") or "" for d in deltas) == "weigh it"
    assert not any(d.get("reasoning_content") for d in deltas)
    whole = client(fake).chat.completions.create(
        model="tiny-coder", messages=[{"role": "user", "content": "go"}]
    )
    message = whole.choices[0].message.model_dump()
    assert message["reasoning"] == "again" and "reasoning_content" not in message
