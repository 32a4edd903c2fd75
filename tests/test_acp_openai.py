"""An OpenAI-compatible provider through the real `defect acp` process and the strict fakes.

A user configuration names `[providers.local]` (`kind = "openai"`, on the fake Chat
Completions API) and `[providers.alpha]` (Claude, on the fake Messages API). What an editor
sees and what each fake is sent: a coding turn with parallel tool calls, streamed, with its
usage; a switch Claude → local → Claude in one session with every request valid on its wire
(ids a chat server mints in a shape the Messages wire forbids included); a cancel mid-stream,
a 429 and a cut stream, each leaving the next request legal; a hosted web search delegated to
the chat provider failing `session/new` with the adjudication message. Every message is
checked against the ACP schema.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from acp import RequestError

from defect_fakeapi import FakeProvider, Reply, TextBlock, ToolUseBlock, Usage
from tests.support.acp_harness import Agent, agent_env, spawn_defect

pytestmark = pytest.mark.anyio

ALPHA_KEY = "sk-ant-api03-alpha-test-key"
LOCAL_KEY = "sk-local-test-key"


@pytest.fixture
def alpha() -> Iterator[FakeProvider]:
    with FakeProvider(api_key=ALPHA_KEY) as fake:
        yield fake


@pytest.fixture
def chat() -> Iterator[FakeProvider]:
    with FakeProvider(api_key=LOCAL_KEY) as fake:
        yield fake


def configure(tmp_path: Path, alpha: FakeProvider, chat: FakeProvider, *, default: str) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    (work / "notes.txt").write_text("remember the milk\n")
    (work / "todo.txt").write_text("buy bread\n")
    user = tmp_path / "xdg" / "defect" / "config.toml"
    user.parent.mkdir(parents=True)
    user.write_text(
        f'provider = "{default}"\nretry_base_delay = 0.01\nretry_max_delay = 0.05\n\n'
        f'[providers.alpha]\nkind = "anthropic"\nbase_url = "{alpha.url}"\n'
        'api_key_env = "ALPHA_KEY"\nmodels = ["claude-sonnet-5-5"]\n\n'
        f'[providers.local]\nkind = "openai"\nbase_url = "{chat.url}/v1"\n'
        'api_key_env = "LOCAL_KEY"\nmodels = ["tiny-coder", "tiny-reasoner"]\n\n'
        '[providers.local.model_settings."tiny-coder"]\n'
        "context_window = 32768\nmax_output_tokens = 4096\n"
    )
    return work


def env_for(tmp_path: Path, **extra: str) -> dict[str, str]:
    return agent_env(
        ALPHA_KEY=ALPHA_KEY,
        LOCAL_KEY=LOCAL_KEY,
        DEFECT_STATE_DIR=str(tmp_path / "state"),
        XDG_CONFIG_HOME=str(tmp_path / "xdg"),
        **extra,
    )


async def settled(*fakes: FakeProvider) -> None:
    for fake in fakes:
        await anyio.to_thread.run_sync(fake.wait_for_requests, len(fake.requests))


def assert_all_accepted(*fakes: FakeProvider) -> None:
    for fake in fakes:
        for record in fake.requests:
            assert record.rejected is False, (record.route, record.error_message)


def read_both(first_id: str = "call_n1", second_id: str = "call_t2") -> Reply:
    """Two read_file calls at once, their arguments cut small and interleaved."""
    reply = Reply.of(
        [
            TextBlock("Reading both."),
            ToolUseBlock(first_id, "read_file", {"path": "notes.txt"}),
            ToolUseBlock(second_id, "read_file", {"path": "todo.txt"}),
        ],
        usage=Usage(input_tokens=40, output_tokens=12, cache_read_input_tokens=60),
    )
    return dataclasses.replace(reply, chunk_size=4)


def tool_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in body["messages"] if m["role"] == "tool"]


async def open_session(agent: Agent, work: Path) -> str:
    await agent.initialize()
    return await agent.new_session(work)


async def test_a_coding_turn_with_parallel_tool_calls_on_the_chat_wire(
    alpha: FakeProvider, chat: FakeProvider, tmp_path: Path
) -> None:
    work = configure(tmp_path, alpha, chat, default="local")
    chat.enqueue(read_both(), Reply.text("Milk and bread."))
    async with spawn_defect(env=env_for(tmp_path)) as agent:
        sid = await open_session(agent, work)
        assert (await agent.prompt(sid, "what do I need?")).stop_reason == "end_turn"
        await settled(chat)
        assert agent.client.text(sid).endswith("Milk and bread.")
        kinds = agent.client.kinds(sid)
        assert kinds.count("tool_call") == 2 and "usage_update" in kinds
        agent.assert_schema_clean()

    assert_all_accepted(chat)
    assert alpha.requests == []
    first, second = (r.body for r in chat.requests)
    assert first["model"] == "tiny-coder" and first["max_tokens"] == 4096
    assert "reasoning_effort" not in first
    assert {t["function"]["name"] for t in first["tools"]} >= {"read_file"}
    assistant = second["messages"][-3]
    assert [c["id"] for c in assistant["tool_calls"]] == ["call_n1", "call_t2"]
    results = tool_messages(second)
    assert [m["tool_call_id"] for m in results] == ["call_n1", "call_t2"]
    assert "remember the milk" in results[0]["content"]
    assert "buy bread" in results[1]["content"]


async def test_a_switch_from_claude_to_the_chat_wire_and_back_keeps_each_request_legal(
    alpha: FakeProvider, chat: FakeProvider, tmp_path: Path
) -> None:
    work = configure(tmp_path, alpha, chat, default="alpha")
    alpha.enqueue(
        Reply.thinking("claude plans", Reply.tool_use(None, "read_file", {"path": "notes.txt"})),
        Reply.text("Claude read it."),
    )
    # Ids as some servers mint them: a shape the Messages wire forbids.
    chat.enqueue(
        read_both("functions.read_file:0", "functions.read_file:1"), Reply.text("Chat read both.")
    )
    alpha.enqueue(Reply.text("Claude again."))
    async with spawn_defect(env=env_for(tmp_path)) as agent:
        sid = await open_session(agent, work)
        assert (await agent.prompt(sid, "read the notes")).stop_reason == "end_turn"
        await agent.conn.set_config_option(
            session_id=sid, config_id="model", value="local/tiny-coder"
        )
        assert (await agent.prompt(sid, "now both files")).stop_reason == "end_turn"
        await agent.conn.set_config_option(
            session_id=sid, config_id="model", value="alpha/claude-sonnet-5-5"
        )
        assert (await agent.prompt(sid, "and back")).stop_reason == "end_turn"
        assert agent.client.text(sid).endswith("Claude again.")
        await settled(alpha, chat)
        agent.assert_schema_clean()

    assert_all_accepted(alpha, chat)
    assert [r.route for r in chat.requests] == ["chat", "chat"]
    at_chat = chat.requests[0].body
    assert "claude plans" not in str(at_chat)  # Claude's thinking never crosses
    claude_calls = [m for m in at_chat["messages"] if m.get("tool_calls")]
    assert len(claude_calls) == 1 and len(tool_messages(at_chat)) == 1
    back = alpha.requests[-1].body
    uses = [
        b
        for m in back["messages"]
        if m["role"] == "assistant"
        for b in m["content"]
        if b["type"] == "tool_use"
    ]
    assert len(uses) == 3  # Claude's call and both of the chat model's, none dropped
    assert all(":" not in u["id"] and "." not in u["id"] for u in uses)
    answered = {
        b["tool_use_id"]
        for m in back["messages"]
        if m["role"] == "user"
        for b in (m["content"] if isinstance(m["content"], list) else [])
        if b["type"] == "tool_result"
    }
    assert answered == {u["id"] for u in uses}


async def test_cancel_mid_stream_and_faults_leave_the_next_request_legal(
    alpha: FakeProvider, chat: FakeProvider, tmp_path: Path
) -> None:
    work = configure(tmp_path, alpha, chat, default="local")
    stalled = dataclasses.replace(
        Reply.tool_use("call_s1", "read_file", {"path": "notes.txt"}), chunk_size=3
    ).stall(5)
    cut = dataclasses.replace(
        Reply.tool_use("call_c1", "read_file", {"path": "todo.txt"}), chunk_size=3
    ).cut(5)
    chat.enqueue(
        stalled,
        Reply.error(429, "Rate limit reached for requests", retry_after=1),
        Reply.text("After the wait."),
        cut,
        Reply.text("After the cut."),
    )
    async with spawn_defect(env=env_for(tmp_path)) as agent:
        sid = await open_session(agent, work)
        first = asyncio.create_task(agent.prompt(sid, "read the notes"))
        await anyio.to_thread.run_sync(
            lambda: chat.wait_until(lambda rs: bool(rs) and rs[0].events_sent >= 5, 20)
        )
        await agent.conn.cancel(session_id=sid)
        assert (await first).stop_reason == "cancelled"

        assert (await agent.prompt(sid, "try again")).stop_reason == "end_turn"
        assert agent.client.text(sid).endswith("After the wait.")
        assert (await agent.prompt(sid, "and the todo")).stop_reason == "end_turn"
        assert agent.client.text(sid).endswith("After the cut.")
        await settled(chat)
        agent.assert_schema_clean()

    assert_all_accepted(chat)
    outcomes = [r.outcome for r in chat.requests]
    assert outcomes[1:] == ["http_error", "completed", "cut", "completed"]
    for record in chat.requests[1:]:
        # The cancelled call never became history: no call without its answer was sent.
        assert not any(m.get("tool_calls") for m in record.body["messages"])


async def test_hosted_search_delegated_to_the_chat_provider_fails_session_new(
    alpha: FakeProvider, chat: FakeProvider, tmp_path: Path
) -> None:
    work = configure(tmp_path, alpha, chat, default="local")
    config = tmp_path / "xdg" / "defect" / "config.toml"
    config.write_text(
        config.read_text() + '\n[providers.local.capabilities.web_search]\nmode = "delegate"\n'
    )
    async with spawn_defect(env=env_for(tmp_path)) as agent:
        await agent.initialize()
        with pytest.raises(RequestError) as caught:
            await agent.conn.new_session(cwd=str(work), mcp_servers=[])
    message = str(caught.value.data or caught.value)
    assert "web_search capability is unsatisfied: provider `local`" in message
    assert "[providers.local.capabilities.web_search]" in message


def model_values(agent: Agent, sid: str) -> set[str]:
    """The model picker's values in the latest `config_option_update` (empty before one)."""
    updates = [
        u
        for s, u in agent.client.updates
        if s == sid and u.session_update == "config_option_update"
    ]
    if not updates:
        return set()
    for option in updates[-1].config_options:
        option = getattr(option, "root", option)
        if option.id == "model":
            return {
                o.value
                for group in option.options
                for o in getattr(getattr(group, "root", group), "options", [group])
            }
    return set()


async def test_a_reasoning_model_thinks_aloud_and_its_reasoning_never_goes_back(
    alpha: FakeProvider, chat: FakeProvider, tmp_path: Path
) -> None:
    """`reasoning_effort` goes to the model configured as reasoning; its `reasoning_content`
    is shown as thoughts, and is in no later request; the server's model list reaches the
    picker."""
    work = configure(tmp_path, alpha, chat, default="local")
    config = tmp_path / "xdg" / "defect" / "config.toml"
    config.write_text(
        config.read_text()
        + '\n[providers.local.model_settings."tiny-reasoner"]\nreasoning = true\n'
    )
    chat.chat_models = ["tiny-coder", "tiny-reasoner", "served-only"]
    chat.enqueue(
        Reply.thinking(
            "weigh the notes", Reply.tool_use("call_r1", "read_file", {"path": "notes.txt"})
        ),
        Reply.text("Milk."),
    )
    async with spawn_defect(env=env_for(tmp_path, DEFECT_REASONING_EFFORT="high")) as agent:
        sid = await open_session(agent, work)
        await agent.client.wait_for(lambda: "local/served-only" in model_values(agent, sid))
        await agent.conn.set_config_option(
            session_id=sid, config_id="model", value="local/tiny-reasoner"
        )
        assert (await agent.prompt(sid, "what is in the notes?")).stop_reason == "end_turn"
        await settled(chat)
        assert "agent_thought_chunk" in agent.client.kinds(sid)
        agent.assert_schema_clean()

    assert_all_accepted(chat)
    first, second = (r.body for r in chat.requests)
    assert first["model"] == "tiny-reasoner" and first["reasoning_effort"] == "high"
    assert "max_completion_tokens" in first and "max_tokens" not in first
    assert "weigh the notes" not in str(second)
