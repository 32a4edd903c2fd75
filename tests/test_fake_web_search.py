"""The strict fake API and the hosted web search: what it accepts, refuses and streams.

Owns the evidence that `defect_fakeapi` knows the API's web search the way the real service
does: the `web_search_20250305` tool definition (one domain list at most, never an empty one),
the assistant blocks `server_tool_use` / `web_search_tool_result` and their pairing inside the
assistant turn (with the API's own error texts), Bedrock's refusal of the server tool, and a
scripted search streamed to the real `anthropic` SDK, which must parse it.

Invariant: rules are checked through `validate_request` / `validate_bedrock_body` (the code
the fake's HTTP side runs) and streams through real HTTP and the real SDK.

Why: the agent's web search tests trust this fake; a fake that accepted an unpaired search
would let a session-killing 400 through every test.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import pytest

from defect_fakeapi import (
    DEFAULT_API_KEY,
    DEFAULT_AWS_ACCESS_KEY_ID,
    FakeProvider,
    Reply,
    SearchHit,
    WireError,
    load_script,
    validate_bedrock_body,
    validate_request,
    write_script,
)

SEARCH_TOOL: dict[str, Any] = {"type": "web_search_20250305", "name": "web_search", "max_uses": 3}
USE_ID = "srvtoolu_01AbCdEf"
USE = {"type": "server_tool_use", "id": USE_ID, "name": "web_search", "input": {"query": "acp"}}
RESULT = {
    "type": "web_search_tool_result",
    "tool_use_id": USE_ID,
    "content": [
        {
            "type": "web_search_result",
            "url": "https://agentclientprotocol.com",
            "title": "Agent Client Protocol",
            "encrypted_content": "EqABC",
            "page_age": None,
        }
    ],
}


def body(*messages: Any, tools: list[Any] | None = None) -> dict[str, Any]:
    return {
        "model": "claude-test",
        "max_tokens": 1024,
        "messages": list(messages),
        "tools": [SEARCH_TOOL] if tools is None else tools,
    }


def user(text: str = "hi") -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text}]}


def assistant(*blocks: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": list(blocks)}


def refused(request: Any, **options: Any) -> str:
    with pytest.raises(WireError) as caught:
        validate_request(request, **options)
    assert caught.value.status == 400
    return caught.value.message


TEXT = {"type": "text", "text": "found it"}
HI: Any = [user()]
TOOLS: Any = [SEARCH_TOOL]


# ------------------------------------------------------------------ the tool definition


def test_accepts_the_web_search_tool_with_one_domain_list() -> None:
    tool = {
        **SEARCH_TOOL,
        "allowed_domains": ["python.org"],
        "cache_control": {"type": "ephemeral"},
    }
    validate_request(body(user(), tools=[tool]))


def test_refuses_both_domain_lists() -> None:
    tool = {**SEARCH_TOOL, "allowed_domains": ["a.org"], "blocked_domains": ["b.org"]}
    message = refused(body(user(), tools=[tool]))
    assert "Cannot specify both allowed_domains and blocked_domains" in message
    assert message.startswith("tools.0.web_search_20250305")


def test_refuses_an_empty_domain_list() -> None:
    tool = {**SEARCH_TOOL, "blocked_domains": []}
    assert refused(body(user(), tools=[tool])) == (
        "tools.0.web_search_20250305.blocked_domains: Empty list of domains is ambiguous. "
        "Provide at least one domain or null."
    )


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"name": "search"}, "tools.0.web_search_20250305.name: Input should be 'web_search'"),
        ({"max_uses": 0}, "tools.0.web_search_20250305.max_uses: Input should be greater than 0"),
        ({"input_schema": {}}, "tools.0.web_search_20250305.input_schema: Extra inputs"),
        ({"user_location": {"type": "exact"}}, "Input tag 'exact'"),
    ],
)
def test_refuses_a_malformed_tool_definition(change: dict[str, Any], expected: str) -> None:
    assert expected in refused(body(user(), tools=[{**SEARCH_TOOL, **change}]))


# ------------------------------------------------------------------ the blocks and their pairing


def test_accepts_a_search_answered_in_the_same_assistant_message() -> None:
    validate_request(body(user(), assistant(USE, RESULT, TEXT), user("thanks")))


def test_accepts_a_search_answered_across_merged_assistant_messages() -> None:
    validate_request(body(user(), assistant(USE), assistant(RESULT, TEXT), user("thanks")))


def test_accepts_an_error_result() -> None:
    error = {
        **RESULT,
        "content": {"type": "web_search_tool_result_error", "error_code": "unavailable"},
    }
    validate_request(body(user(), assistant(USE, error, TEXT), user("thanks")))


def test_refuses_a_result_without_its_use() -> None:
    message = refused(body(user(), assistant(TEXT, RESULT), user("thanks")))
    assert message == (
        f"messages.1.content.1: unexpected `tool_use_id` found in `web_search_tool_result` "
        f"blocks: {USE_ID}. Each `web_search_tool_result` block must have a corresponding "
        "`server_tool_use` block before it."
    )


def test_refuses_a_result_before_its_use() -> None:
    message = refused(body(user(), assistant(RESULT, USE), user("thanks")))
    assert message.startswith("messages.1.content.0: unexpected `tool_use_id`")


def test_refuses_a_use_without_its_result() -> None:
    message = refused(body(user(), assistant(USE, TEXT), user("thanks")))
    assert message == (
        f"messages.1: `web_search` tool use with id `{USE_ID}` was found without a "
        "corresponding `web_search_tool_result` block"
    )


def test_a_result_in_the_next_user_message_does_not_answer_a_use() -> None:
    message = refused(body(user(), assistant(USE), {"role": "user", "content": [RESULT]}))
    assert "can only be in `assistant` messages" in message
    assert "was found without" in refused(
        body(user(), assistant(USE), user(), assistant(TEXT), user())
    )


def test_server_blocks_are_assistant_only() -> None:
    assert "can only be in `assistant` messages" in refused(
        body({"role": "user", "content": [RESULT]})
    )


def test_server_tool_use_id_pattern() -> None:
    use = {**USE, "id": "toolu_01x"}
    assert "String should match pattern '^srvtoolu_[a-zA-Z0-9_]+$'" in refused(
        body(user(), assistant(use, {**RESULT, "tool_use_id": "toolu_01x"}, TEXT), user())
    )


def test_a_paused_turn_may_end_the_request() -> None:
    validate_request(body(user(), assistant(USE, RESULT)))
    assert "prefill" in refused(body(user(), assistant(TEXT)))


# ------------------------------------------------------------------ Bedrock


def bedrock_body(*messages: Any, tools: list[Any]) -> dict[str, Any]:
    return {
        "anthropic_version": "bedrock-2023-05-31",
        "max_tokens": 1024,
        "messages": list(messages),
        "tools": tools,
    }


def test_bedrock_refuses_the_web_search_tool() -> None:
    with pytest.raises(WireError) as caught:
        validate_bedrock_body(bedrock_body(user(), tools=[SEARCH_TOOL]))
    assert caught.value.error_type == "ValidationException"
    assert caught.value.message == (
        "tools.0: Input tag 'web_search_20250305' found using 'type' does not match any of the "
        "expected tags: 'bash_20250124', 'custom', 'text_editor_20250124'"
    )


def test_bedrock_refuses_server_blocks() -> None:
    tools = [{"name": "read", "input_schema": {"type": "object"}}]
    with pytest.raises(WireError) as caught:
        validate_bedrock_body(
            bedrock_body(user(), assistant(USE, RESULT, TEXT), user(), tools=tools)
        )
    assert caught.value.message.startswith("messages.1.content.0: Input tag 'server_tool_use'")


# ------------------------------------------------------------------ streamed to the real SDK


@pytest.fixture
def fake() -> Iterator[FakeProvider]:
    with FakeProvider() as provider:
        yield provider


def test_a_scripted_search_streams_to_the_sdk(fake: FakeProvider) -> None:
    hits = [SearchHit("https://example.org/a", "Page A", page_age="2 days ago")]
    fake.enqueue(Reply.web_search("acp spec", hits, text_after="Here is what I found."))
    sdk = anthropic.Anthropic(
        base_url=fake.url, api_key=DEFAULT_API_KEY, max_retries=0, _strict_response_validation=True
    )
    with sdk.messages.stream(
        model="claude-test", max_tokens=256, messages=HI, tools=TOOLS
    ) as stream:
        message = stream.get_final_message()
    use, result, text = message.content
    assert use.type == "server_tool_use" and use.input == {"query": "acp spec"}
    assert use.id.startswith("srvtoolu_")
    assert result.type == "web_search_tool_result" and result.tool_use_id == use.id
    assert isinstance(result.content, list)
    assert [(r.url, r.title, r.page_age) for r in result.content] == [
        ("https://example.org/a", "Page A", "2 days ago")
    ]
    assert text.type == "text" and text.text == "Here is what I found."
    assert message.usage.server_tool_use is not None
    assert message.usage.server_tool_use.web_search_requests == 1
    # The conversation sent back as it came is accepted.
    fake.enqueue(Reply.text("ok"))
    sent_back = [b.model_dump(exclude_none=True) for b in message.content]
    conversation: Any = [user(), assistant(*sent_back), user("thanks")]
    with sdk.messages.stream(
        model="claude-test", max_tokens=256, tools=TOOLS, messages=conversation
    ) as again:
        assert again.get_final_message().content[0].type == "text"
    assert not fake.requests[1].rejected


def test_a_scripted_search_error(fake: FakeProvider) -> None:
    fake.enqueue(Reply.web_search("q", error_code="max_uses_exceeded", text_after="No luck."))
    sdk = anthropic.Anthropic(base_url=fake.url, api_key=DEFAULT_API_KEY, max_retries=0)
    with sdk.messages.stream(
        model="claude-test", max_tokens=256, messages=HI, tools=TOOLS
    ) as stream:
        message = stream.get_final_message()
    result = message.content[1]
    assert result.type == "web_search_tool_result"
    assert not isinstance(result.content, list)
    assert result.content.error_code == "max_uses_exceeded"


def test_bedrock_route_refuses_the_tool_over_http(fake: FakeProvider) -> None:
    sdk = anthropic.AnthropicBedrock(
        aws_access_key=DEFAULT_AWS_ACCESS_KEY_ID,
        aws_secret_key="secret",
        aws_region="us-east-1",
        base_url=fake.url,
        max_retries=0,
    )
    with (
        pytest.raises(anthropic.BadRequestError) as caught,
        sdk.messages.stream(
            model="anthropic.claude-test",
            max_tokens=64,
            messages=HI,
            tools=TOOLS,
        ),
    ):
        pass
    assert "Input tag 'web_search_20250305'" in str(caught.value)
    assert fake.requests[0].rejected


def test_search_blocks_round_trip_through_a_json_script(tmp_path: Any) -> None:
    reply = Reply.web_search(
        "q", [SearchHit("https://x.org", "X")], id="srvtoolu_01Q", text_after="t"
    )
    path = tmp_path / "script.json"
    write_script(path, [reply])
    assert load_script(path) == [reply]
