"""`/goal` through the real `defect acp` process, with the strict fake API checking requests.

The model is offered `goal_done` only while a goal runs; a turn that would end without it goes
round again with a "Keep working towards" note, the editor sees "Goal round N/M" for each round,
and the prompt answers `end_turn` once `goal_done` was called — or `max_turn_requests` when the
rounds ran out (`goal_max_rounds`). A cancel stops the goal at once.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from acp import schema as s

from defect_fakeapi import DEFAULT_API_KEY, FakeProvider, Reply
from tests.support.acp_harness import agent_env, spawn_defect

pytestmark = pytest.mark.anyio


def goal_env(fake: FakeProvider, tmp_path: Path, user_config: str = "") -> dict[str, str]:
    config_home = tmp_path / "xdg"
    (config_home / "defect").mkdir(parents=True, exist_ok=True)
    (config_home / "defect" / "config.toml").write_text(user_config, encoding="utf-8")
    return agent_env(
        DEFECT_PROVIDER="anthropic",
        ANTHROPIC_BASE_URL=fake.url,
        ANTHROPIC_API_KEY=DEFAULT_API_KEY,
        DEFECT_REASONING_EFFORT="off",
        XDG_CONFIG_HOME=str(config_home),
    )


def tool_names(body: dict[str, Any]) -> list[str]:
    return [tool.get("name") for tool in body.get("tools", [])]


def last_user_text(body: dict[str, Any]) -> str:
    content = body["messages"][-1]["content"]
    if isinstance(content, str):
        return content
    return "\n".join(block.get("text", "") for block in content if block["type"] == "text")


async def test_a_goal_goes_round_until_goal_done_and_the_editor_sees_each_round(
    fake_provider: FakeProvider, tmp_path: Path
) -> None:
    fake_provider.enqueue(Reply.text("I looked at the tests."))
    fake_provider.enqueue(Reply.text("I fixed one of two."))
    fake_provider.enqueue(Reply.tool_use("toolu_done", "goal_done", {"summary": "Both fixed."}))
    fake_provider.enqueue(Reply.text("The tests pass now."))
    fake_provider.enqueue(Reply.text("Plain answer."))
    async with spawn_defect(env=goal_env(fake_provider, tmp_path)) as agent:
        await agent.initialize()
        sid = await agent.new_session(tmp_path)
        await agent.client.wait_for(lambda: "available_commands_update" in agent.client.kinds(sid))
        commands = [
            u.available_commands
            for s_id, u in agent.client.updates
            if s_id == sid and u.session_update == "available_commands_update"
        ][-1]
        assert "goal" in {c.name for c in commands}
        response = await agent.prompt(sid, "/goal make the tests pass")
        assert response.stop_reason == "end_turn"
        text = agent.client.text(sid)
        assert "Goal round 1/20: make the tests pass" in text
        assert "Goal round 2/20" in text and "Goal round 3/20" in text
        assert "Goal round 4/20" not in text
        done = [
            u
            for s_id, u in agent.client.updates
            if s_id == sid
            and u.session_update == "tool_call_update"
            and u.tool_call_id == "toolu_done"
        ]
        assert done[-1].status == "completed"

        after = await agent.prompt(sid, "Anything else?")
        assert after.stop_reason == "end_turn"
        agent.assert_schema_clean()
    first, second, third, fourth, plain = fake_provider.requests[-5:]
    assert "make the tests pass" in last_user_text(first.body) and "goal_done" in last_user_text(
        first.body
    )
    for request in (first, second, third, fourth):
        assert "goal_done" in tool_names(request.body)
    assert last_user_text(second.body).startswith("Keep working towards: make the tests pass")
    assert last_user_text(third.body).startswith("Keep working towards: make the tests pass")
    assert fourth.body["messages"][-1]["content"][0]["type"] == "tool_result"
    assert "goal_done" not in tool_names(plain.body), "goal_done exists only while a goal runs"


async def test_a_goal_out_of_rounds_answers_max_turn_requests(
    fake_provider: FakeProvider, tmp_path: Path
) -> None:
    for n in range(3):
        fake_provider.enqueue(Reply.text(f"Still working ({n})."))
    async with spawn_defect(
        env=goal_env(fake_provider, tmp_path, "goal_max_rounds = 2\n")
    ) as agent:
        await agent.initialize()
        sid = await agent.new_session(tmp_path)
        response = await agent.prompt(sid, "/goal reach the moon")
        assert response.stop_reason == "max_turn_requests"
        assert "Goal round 2/2" in agent.client.text(sid)
        usage = await agent.prompt(sid, "/goal")  # no objective: the usage, no model call
        assert usage.stop_reason == "end_turn" and "Usage: /goal <objective>" in agent.client.text(
            sid
        )
        agent.assert_schema_clean()
    assert len(fake_provider.requests) == 2


async def test_a_cancel_stops_a_goal_at_once(fake_provider: FakeProvider, tmp_path: Path) -> None:
    fake_provider.enqueue(Reply.text("Round one."))
    fake_provider.enqueue(Reply.text("A very slow second round " * 40).slow(0.05))
    async with spawn_defect(env=goal_env(fake_provider, tmp_path)) as agent:
        await agent.initialize()
        sid = await agent.new_session(tmp_path)
        prompt = asyncio.ensure_future(agent.prompt(sid, "/goal write a novel"))
        await agent.client.wait_for(lambda: "A very slow" in agent.client.text(sid))
        await agent.conn.cancel(session_id=sid)
        response = await prompt
        assert response.stop_reason == "cancelled"
        agent.assert_schema_clean()
    assert len(fake_provider.requests) == 2
    assert isinstance(response, s.PromptResponse)


async def test_the_offline_model_reaches_a_goal_by_calling_goal_done(tmp_path: Path) -> None:
    # No script: the built-in demo behaviour, as `make run` and a first try meet it.
    (tmp_path / "notes.txt").write_text("one\n")
    env = agent_env(DEFECT_STATE_DIR=str(tmp_path / "state"))
    async with spawn_defect(env=env, cwd=tmp_path) as agent:
        await agent.initialize()
        sid = await agent.new_session(tmp_path)
        response = await agent.prompt(sid, "/goal survey this workspace")
        assert response.stop_reason == "end_turn"
        text = agent.client.text(sid)
        assert "Goal round 1/20: survey this workspace" in text
        assert "Goal round 2/20" not in text and "The goal is reached." in text
        calls = {
            u.tool_call_id: u.title
            for s_id, u in agent.client.updates
            if s_id == sid and u.session_update == "tool_call"
        }
        assert sorted(calls.values()) == ["Find files '*'", "Goal reached"]
        finals = {
            calls[u.tool_call_id]: u.status
            for s_id, u in agent.client.updates
            if s_id == sid and u.session_update == "tool_call_update" and u.status
            if u.status in ("completed", "failed")
        }
        assert finals == {"Find files '*'": "completed", "Goal reached": "completed"}
        agent.assert_schema_clean()
