"""The hosted web search through the real `defect acp` process, against the strict fake API.

What an editor sees and what the API is sent when `[capabilities.web_search] mode =
"delegate"`: the request offers the API's `web_search` tool, each search the API runs shows
as a tool call of kind `search` (the query in its title, the result titles and URLs in its
content, `failed` with the error code or when the stream breaks), the history keeps the
search blocks so the next request carries them and the strict fake accepts it, a paused turn
is continued as it is, a `session/load` replays the search, and a provider that cannot search
refuses `session/new` with the capability, the provider and both fixes named. Every message
the agent writes is checked against the ACP schema.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from acp import RequestError

from defect_fakeapi import DEFAULT_API_KEY, FakeProvider, Reply, SearchHit
from tests.support.acp_harness import Agent, RecordingClient, agent_env, spawn_defect

pytestmark = pytest.mark.anyio

DELEGATE = '[capabilities.web_search]\nmode = "delegate"\nmax_uses = 2\n'
HITS = [
    SearchHit("https://agentclientprotocol.com/overview", "ACP overview", page_age="2 days ago"),
    SearchHit("https://github.com/agentclientprotocol", "ACP on GitHub"),
]


def workspace(tmp_path: Path, config: str | None = DELEGATE) -> Path:
    """A workspace with `config` as its own `.defect/config.toml`, trusted by the user's file
    (`tmp_path/xdg`, where `env_for` points)."""
    work = tmp_path / "work"
    (work / ".defect").mkdir(parents=True)
    if config is not None:
        (work / ".defect" / "config.toml").write_text(config)
    user = tmp_path / "xdg" / "defect" / "config.toml"
    user.parent.mkdir(parents=True)
    user.write_text(f'trusted_projects = ["{work}"]\n')
    return work


def env_for(fake: FakeProvider, tmp_path: Path, **extra: str) -> dict[str, str]:
    extra.setdefault("DEFECT_PROVIDER", "anthropic")
    return agent_env(
        ANTHROPIC_BASE_URL=fake.url,
        ANTHROPIC_API_KEY=DEFAULT_API_KEY,
        DEFECT_REASONING_EFFORT="off",
        DEFECT_STATE_DIR=str(tmp_path / "state"),
        XDG_CONFIG_HOME=str(tmp_path / "xdg"),
        **extra,
    )


async def settled(fake: FakeProvider) -> None:
    await anyio.to_thread.run_sync(fake.wait_for_requests, len(fake.requests))


async def start(agent: Agent, cwd: Path) -> str:
    await agent.initialize()
    return await agent.new_session(cwd)


def search_updates(client: RecordingClient) -> list[Any]:
    return [
        u
        for _, u in client.updates
        if u.session_update in ("tool_call", "tool_call_update")
        and (u.session_update == "tool_call_update" or u.kind == "search")
    ]


def shown_text(update: Any) -> str:
    return "\n".join(c.content.text for c in update.content or [] if hasattr(c, "content"))


def search_tool(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [t for t in body.get("tools", []) if t.get("type") == "web_search_20250305"]


async def test_a_delegated_search_is_shown_kept_and_sent_back(
    fake_provider: FakeProvider, tmp_path: Path
) -> None:
    work = workspace(tmp_path)
    fake_provider.enqueue(
        Reply.web_search("agent client protocol", HITS, text_after="ACP is a protocol."),
        Reply.text("You are welcome."),
    )
    async with spawn_defect(env=env_for(fake_provider, tmp_path)) as agent:
        sid = await start(agent, work)
        assert (await agent.prompt(sid, "what is ACP?")).stop_reason == "end_turn"
        # The request offered the API's search, last among the tools, with the tool breakpoint.
        first = fake_provider.requests[0].body
        assert search_tool(first) == [
            {
                "type": "web_search_20250305",
                "name": "web_search",
                "max_uses": 2,
                "cache_control": {"type": "ephemeral"},
            }
        ]
        assert first["tools"][-1]["type"] == "web_search_20250305"
        # The editor saw the search: started with its query, completed with titles and URLs.
        started, finished = search_updates(agent.client)
        assert started.session_update == "tool_call" and started.kind == "search"
        assert started.title == "Web search: agent client protocol"
        assert started.status == "in_progress"
        assert finished.tool_call_id == started.tool_call_id
        assert finished.status == "completed"
        text = shown_text(finished)
        assert "[ACP overview](https://agentclientprotocol.com/overview)" in text
        assert "[ACP on GitHub](https://github.com/agentclientprotocol)" in text
        assert agent.client.text(sid) == "ACP is a protocol."
        # The next request carries the search blocks as they came, and the fake accepts it.
        assert (await agent.prompt(sid, "thanks")).stop_reason == "end_turn"
        await settled(fake_provider)
        second = fake_provider.requests[1]
        assert not second.rejected
        replayed = second.body["messages"][1]["content"]
        assert [b["type"] for b in replayed] == [
            "server_tool_use",
            "web_search_tool_result",
            "text",
        ]
        assert replayed[0]["id"] == started.tool_call_id
        assert [h["url"] for h in replayed[1]["content"]] == [h.url for h in HITS]
        assert json_equal(second.body["tools"], first["tools"])
        agent.assert_schema_clean()

    # A reload replays the search from the stored blocks.
    client = RecordingClient()
    async with spawn_defect(env=env_for(fake_provider, tmp_path), client=client) as again:
        await again.initialize()
        await again.conn.load_session(cwd=str(work), session_id=sid, mcp_servers=[])
        calls = [u for _, u in client.updates if u.session_update == "tool_call"]
        assert [(c.kind, c.status, c.title) for c in calls] == [
            ("search", "completed", "Web search: agent client protocol")
        ]
        assert "https://agentclientprotocol.com/overview" in shown_text(calls[0])
        again.assert_schema_clean()


def json_equal(a: Any, b: Any) -> bool:
    import json

    return json.dumps(a) == json.dumps(b)


async def test_a_search_error_shows_as_failed_with_its_code(
    fake_provider: FakeProvider, tmp_path: Path
) -> None:
    work = workspace(tmp_path)
    fake_provider.enqueue(
        Reply.web_search("too much", error_code="max_uses_exceeded", text_after="No more.")
    )
    async with spawn_defect(env=env_for(fake_provider, tmp_path)) as agent:
        sid = await start(agent, work)
        assert (await agent.prompt(sid, "search")).stop_reason == "end_turn"
        started, finished = search_updates(agent.client)
        assert started.title == "Web search: too much"
        assert finished.status == "failed"
        assert "max_uses_exceeded" in shown_text(finished)
        agent.assert_schema_clean()


async def test_a_stream_cut_during_a_search_then_the_next_prompt_works(
    fake_provider: FakeProvider, tmp_path: Path
) -> None:
    work = workspace(tmp_path)
    # Events: message_start, the search's start, two input deltas, its stop - then the cut,
    # before the result arrives.
    fake_provider.enqueue(
        Reply.web_search("acp spec", HITS, text_after="never").cut(5),
        Reply.text("Back again."),
    )
    async with spawn_defect(env=env_for(fake_provider, tmp_path)) as agent:
        sid = await start(agent, work)
        with pytest.raises(RequestError) as err:
            await agent.prompt(sid, "search it")
        assert err.value.data["retryable"] is True
        started, finished = search_updates(agent.client)
        assert started.title == "Web search: acp spec"
        assert finished.status == "failed" and "interrupted" in shown_text(finished)
        assert (await agent.prompt(sid, "again")).stop_reason == "end_turn"
        await settled(fake_provider)
        retry = fake_provider.requests[-1]
        assert not retry.rejected
        sent = [b["type"] for m in retry.body["messages"] for b in m["content"]]
        assert "server_tool_use" not in sent and "web_search_tool_result" not in sent
        agent.assert_schema_clean()


async def test_a_paused_turn_is_continued_as_it_is(
    fake_provider: FakeProvider, tmp_path: Path
) -> None:
    work = workspace(tmp_path)
    fake_provider.enqueue(
        Reply.web_search(
            "first", HITS[:1], text_after="Still searching. ", stop_reason="pause_turn"
        ),
        Reply.text("Finished."),
    )
    async with spawn_defect(env=env_for(fake_provider, tmp_path)) as agent:
        sid = await start(agent, work)
        assert (await agent.prompt(sid, "long search")).stop_reason == "end_turn"
        await settled(fake_provider)
        continued = fake_provider.requests[1]
        assert not continued.rejected
        last = continued.body["messages"][-1]
        assert last["role"] == "assistant"
        assert [b["type"] for b in last["content"]] == [
            "server_tool_use",
            "web_search_tool_result",
            "text",
        ]
        assert last["content"][-1]["text"] == "Still searching."
        assert agent.client.text(sid) == "Still searching. Finished."
        agent.assert_schema_clean()


async def test_disabled_by_default_sends_no_server_tool(
    fake_provider: FakeProvider, tmp_path: Path
) -> None:
    work = workspace(tmp_path, config=None)
    fake_provider.enqueue(Reply.text("plain"))
    async with spawn_defect(env=env_for(fake_provider, tmp_path)) as agent:
        sid = await start(agent, work)
        assert (await agent.prompt(sid, "hi")).stop_reason == "end_turn"
        assert search_tool(fake_provider.requests[0].body) == []
        agent.assert_schema_clean()


@pytest.mark.parametrize("provider", ["bedrock", "scripted"])
async def test_delegate_on_a_provider_that_cannot_search_refuses_the_session(
    fake_provider: FakeProvider, tmp_path: Path, provider: str
) -> None:
    work = workspace(tmp_path)
    async with spawn_defect(
        env=env_for(fake_provider, tmp_path, DEFECT_PROVIDER=provider)
    ) as agent:
        await agent.initialize()
        with pytest.raises(RequestError) as err:
            await agent.new_session(work)
        message = str(err.value)
        assert err.value.code == -32602
        assert f"web_search capability is unsatisfied: provider `{provider}`" in message
        assert f'[{provider}.capabilities.web_search] mode = "disabled"' in message
        assert "use a provider that supports it (anthropic)" in message
        assert fake_provider.requests == []
        agent.assert_schema_clean()


async def test_delegate_only_where_supported_lets_bedrock_run_without_it(
    fake_provider: FakeProvider, tmp_path: Path
) -> None:
    config = DELEGATE + '\n[bedrock.capabilities.web_search]\nmode = "disabled"\n'
    work = workspace(tmp_path, config)
    async with spawn_defect(
        env=env_for(fake_provider, tmp_path, DEFECT_PROVIDER="bedrock")
    ) as agent:
        sid = await start(agent, work)
        assert sid


async def test_both_domain_lists_fail_the_session_naming_the_file(
    fake_provider: FakeProvider, tmp_path: Path
) -> None:
    config = DELEGATE + 'allowed_domains = ["a.org"]\nblocked_domains = ["b.org"]\n'
    work = workspace(tmp_path, config)
    async with spawn_defect(env=env_for(fake_provider, tmp_path)) as agent:
        await agent.initialize()
        with pytest.raises(RequestError) as err:
            await agent.new_session(work)
        message = str(err.value)
        assert "config.toml, line 5: capabilities.web_search.blocked_domains" in message
        assert "allowed_domains and blocked_domains cannot both be set" in message
        agent.assert_schema_clean()
