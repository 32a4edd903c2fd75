"""The hosted web search on the wire: the blocks, the tool definition, the stream.

Owns the evidence that `server_tool_use` and `web_search_tool_result` blocks survive every
hop faithfully - the model's JSON form (the store's), the Anthropic wire encoder and decoder,
the stream assembler fed by the real SDK from the strict fake - and that the request offers
the API's web search as the last tool, carrying the last-tool cache breakpoint, with bytes that
do not change from one request to the next.

Invariant: streams come from `defect_fakeapi` over 127.0.0.1 through the real `anthropic` SDK;
the next request is built from what was assembled and must pass the fake's validation.

Why: a search block altered on the way back (an encrypted content, a pairing) makes the API
refuse every later request of the session.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Iterator

import pytest

from defect_core.config import Settings
from defect_core.integrity import repair_outbound
from defect_core.model import (
    Message,
    ServerToolUseBlock,
    TextBlock,
    ToolSpec,
    WebSearchError,
    WebSearchHit,
    WebSearchResultBlock,
    message_from_json,
    message_to_json,
)
from defect_core.providers.anthropic import anthropic_provider
from defect_core.providers.anthropic.provider import AnthropicProvider
from defect_core.providers.anthropic.request import encode_request
from defect_core.providers.anthropic_wire import decode_assistant_content, encode_message
from defect_core.providers.base import (
    Completed,
    HostedWebSearch,
    ModelRequest,
    ServerToolFinished,
    ServerToolStarted,
    StreamChunk,
    hosted_capabilities,
)
from defect_fakeapi import DEFAULT_API_KEY, FakeProvider, Reply, SearchHit, validate_request

pytestmark = pytest.mark.anyio

SEARCH = HostedWebSearch(max_uses=3, blocked_domains=("example.net",))
USE = ServerToolUseBlock(id="srvtoolu_01abc", name="web_search", input={"query": "acp"})
HIT = WebSearchHit(
    url="https://agentclientprotocol.com",
    title="Agent Client Protocol",
    encrypted_content="EqOpaque/+=",
    page_age="April 1, 2025",
)
RESULT = WebSearchResultBlock(tool_use_id=USE.id, content=(HIT,))
ERROR = WebSearchResultBlock(
    tool_use_id="srvtoolu_01err", content=WebSearchError(error_code="unavailable")
)
SEARCHED = Message(role="assistant", content=(USE, RESULT, TextBlock(text="It is a protocol.")))


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith(("ANTHROPIC_", "AWS_", "DEFECT_")):
            monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("ANTHROPIC_API_KEY", DEFAULT_API_KEY)


@pytest.fixture
def fake() -> Iterator[FakeProvider]:
    with FakeProvider() as provider:
        yield provider


@pytest.fixture
async def provider(fake: FakeProvider) -> AsyncIterator[AnthropicProvider]:
    settings = Settings(provider="anthropic", base_url=fake.url, retries=0, reasoning_effort="off")
    made = anthropic_provider(settings)
    yield made
    await made.aclose()


def user(text: str) -> Message:
    return Message(role="user", content=(TextBlock(text=text),))


def request(messages: list[Message], search: HostedWebSearch | None = SEARCH) -> ModelRequest:
    return ModelRequest(
        model="claude-test",
        system="You are a test.",
        messages=repair_outbound(messages),
        tools=(ToolSpec("read_file", "Read a file.", {"type": "object"}),),
        max_tokens=1024,
        web_search=search,
    )


# --- the blocks ------------------------------------------------------------------------------


def test_blocks_round_trip_through_json() -> None:
    message = Message(role="assistant", content=(USE, RESULT, ERROR))
    assert message_from_json(message_to_json(message)) == message


def test_blocks_round_trip_through_the_wire() -> None:
    message = Message(role="assistant", content=(USE, RESULT, TextBlock(text="t"), ERROR))
    wire = encode_message(message)
    assert wire["content"][0] == {
        "type": "server_tool_use",
        "id": "srvtoolu_01abc",
        "name": "web_search",
        "input": {"query": "acp"},
    }
    assert wire["content"][1]["content"][0]["encrypted_content"] == "EqOpaque/+="
    assert wire["content"][3]["content"] == {
        "type": "web_search_tool_result_error",
        "error_code": "unavailable",
    }
    assert decode_assistant_content(wire["content"]) == message


# --- the request -----------------------------------------------------------------------------


def test_the_search_tool_is_last_and_carries_the_tool_breakpoint() -> None:
    body = encode_request(request([user("hi")]))
    assert [t.get("type") for t in body["tools"]] == [None, "web_search_20250305"]
    assert body["tools"][-1] == {
        "type": "web_search_20250305",
        "name": "web_search",
        "max_uses": 3,
        "blocked_domains": ["example.net"],
        "cache_control": {"type": "ephemeral"},
    }
    assert "cache_control" not in body["tools"][0]
    validate_request(body)


def test_the_tools_are_the_same_bytes_request_after_request() -> None:
    first = encode_request(request([user("hi")]))
    later = encode_request(request([user("hi"), SEARCHED, user("and then?")]))
    assert json.dumps(first["tools"]) == json.dumps(later["tools"])


def test_no_search_tool_without_delegation() -> None:
    body = encode_request(request([user("hi")], search=None))
    assert all(t.get("type") is None for t in body["tools"])


def test_only_the_anthropic_route_runs_the_search() -> None:
    settings = Settings(provider="anthropic")
    from defect_core.providers.anthropic import bedrock_provider
    from defect_core.providers.scripted import ScriptedProvider

    assert hosted_capabilities(anthropic_provider(settings)) == {"web_search"}
    assert hosted_capabilities(bedrock_provider(settings)) == frozenset()
    assert hosted_capabilities(ScriptedProvider()) == frozenset()


# --- the stream ------------------------------------------------------------------------------


async def collect(provider: AnthropicProvider, req: ModelRequest) -> list[StreamChunk]:
    return [chunk async for chunk in provider.stream(req)]


async def test_a_streamed_search_is_assembled_faithfully(
    fake: FakeProvider, provider: AnthropicProvider
) -> None:
    hits = [
        SearchHit("https://a.example/x", "Page X", page_age="1 day ago"),
        SearchHit("https://b.example", "B"),
    ]
    fake.enqueue(Reply.web_search("acp spec", hits, text_after="Found two pages."))
    chunks = await collect(provider, request([user("search it")]))
    started = [c for c in chunks if isinstance(c, ServerToolStarted)]
    finished = [c for c in chunks if isinstance(c, ServerToolFinished)]
    assert [s.block.input for s in started] == [{"query": "acp spec"}]
    assert len(finished) == 1 and finished[0].block.tool_use_id == started[0].block.id
    assert chunks.index(started[0]) < chunks.index(finished[0])
    completed = chunks[-1]
    assert isinstance(completed, Completed)
    use, result, text = completed.message.content
    assert use == started[0].block and result == finished[0].block
    assert isinstance(result, WebSearchResultBlock) and isinstance(result.content, tuple)
    assert [(h.url, h.title, h.page_age) for h in result.content] == [
        ("https://a.example/x", "Page X", "1 day ago"),
        ("https://b.example", "B", None),
    ]
    assert completed.usage.web_search_requests == 1
    assert text == TextBlock(text="Found two pages.")
    # The history, stored and read back, makes a request the strict fake accepts.
    stored = message_from_json(message_to_json(completed.message))
    fake.enqueue(Reply.text("ok"))
    chunks = await collect(provider, request([user("search it"), stored, user("thanks")]))
    assert isinstance(chunks[-1], Completed)
    sent = fake.requests[1].body["messages"][1]["content"]
    assert [b["type"] for b in sent] == ["server_tool_use", "web_search_tool_result", "text"]
    # Sent back byte-exact: the encrypted content the fake minted comes back unchanged.
    streamed_hits = [h["encrypted_content"] for h in sent[1]["content"]]
    assert streamed_hits == [h.encrypted_content for h in result.content]
    assert not fake.requests[1].rejected


async def test_a_search_error_is_assembled(fake: FakeProvider, provider: AnthropicProvider) -> None:
    fake.enqueue(Reply.web_search("q", error_code="too_many_requests", text_after="Later."))
    chunks = await collect(provider, request([user("search it")]))
    completed = chunks[-1]
    assert isinstance(completed, Completed)
    result = completed.message.content[1]
    assert isinstance(result, WebSearchResultBlock)
    assert result.content == WebSearchError(error_code="too_many_requests")
