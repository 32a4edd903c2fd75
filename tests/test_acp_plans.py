"""Plans through the real `defect acp` process: `update_plan` → ACP `plan` updates.

The strict fake API checks every request and lets the tests read what the model was sent (the
tool, its schema, the confirmation it reads back); the harness validates every agent message
against the vendored ACP schema, the `plan` updates included. A restart of the process proves
the plan was stored: `session/load` replays it after the history.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from acp import schema as s

from defect_fakeapi import DEFAULT_API_KEY, FakeProvider, Reply
from defect_fakeapi.script import TextBlock, ToolUseBlock
from tests.support.acp_harness import Agent, RecordingClient, agent_env, spawn_defect

pytestmark = pytest.mark.anyio

FIRST = [
    {"content": "Read the failing test", "priority": "high", "status": "in_progress"},
    {"content": "Fix the parser", "priority": "medium", "status": "pending"},
]
SECOND = [
    {"content": "Read the failing test", "priority": "high", "status": "completed"},
    {"content": "Fix the parser", "priority": "medium", "status": "in_progress"},
    {"content": "Run the whole suite", "priority": "low", "status": "pending"},
]


def plan_env(fake: FakeProvider, tmp_path: Path) -> dict[str, str]:
    return agent_env(
        DEFECT_PROVIDER="anthropic",
        ANTHROPIC_BASE_URL=fake.url,
        ANTHROPIC_API_KEY=DEFAULT_API_KEY,
        DEFECT_REASONING_EFFORT="off",
        DEFECT_STATE_DIR=str(tmp_path / "state"),
    )


def plans(client: RecordingClient, sid: str) -> list[list[dict[str, str]]]:
    """Every `plan` update the editor got, as plain entries."""
    return [
        [e.model_dump(mode="json", exclude_none=True) for e in u.entries]
        for session, u in client.updates
        if session == sid and u.session_update == "plan"
    ]


def cards(client: RecordingClient, sid: str) -> dict[str, list[Any]]:
    """The tool-call updates the editor got, by call id."""
    out: dict[str, list[Any]] = {}
    for session, u in client.updates:
        if session == sid and u.session_update in ("tool_call", "tool_call_update"):
            out.setdefault(u.tool_call_id, []).append(u)
    return out


def results(body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The tool results of a request's last message, by call id."""
    return {
        b["tool_use_id"]: b
        for b in body["messages"][-1]["content"]
        if isinstance(b, dict) and b.get("type") == "tool_result"
    }


def result_text(block: dict[str, Any]) -> str:
    content = block["content"]
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content)


async def load(agent: Agent, sid: str, cwd: Path) -> None:
    await agent.initialize()
    await agent.conn.load_session(cwd=str(cwd), session_id=sid, mcp_servers=[])


async def test_plans_reach_the_editor_as_plan_updates_and_a_load_replays_the_latest(
    fake_provider: FakeProvider, tmp_path: Path
) -> None:
    fake_provider.enqueue(
        Reply.tool_use("toolu_plan1", "update_plan", {"entries": FIRST}, text_before="A plan.")
    )
    fake_provider.enqueue(Reply.tool_use("toolu_plan2", "update_plan", {"entries": SECOND}))
    fake_provider.enqueue(Reply.text("Working on the parser now."))
    fake_provider.enqueue(Reply.text("Still here."))
    async with spawn_defect(env=plan_env(fake_provider, tmp_path)) as agent:
        await agent.initialize()
        sid = await agent.new_session(tmp_path)
        assert (await agent.prompt(sid, "fix the parser bug")).stop_reason == "end_turn"
        assert plans(agent.client, sid) == [FIRST, SECOND]
        # The plan update is the visible thing: no tool-call card for a plan that went through.
        assert "toolu_plan1" not in cards(agent.client, sid)
        assert "toolu_plan2" not in cards(agent.client, sid)
        assert agent.client.permission_requests == []
        agent.assert_schema_clean()

    first, second, third = (r.body for r in fake_provider.requests[:3])
    (tool,) = [t for t in first["tools"] if t["name"] == "update_plan"]
    entry = tool["input_schema"]["properties"]["entries"]["items"]
    assert entry["required"] == ["content", "priority", "status"]
    assert entry["properties"]["status"]["enum"] == ["pending", "in_progress", "completed"]
    system = "".join(b["text"] for b in first["system"])
    assert "- update_plan: For multi-step work" in system
    assert "exactly one step in_progress" in system
    # The model reads a short confirmation, not its plan echoed back.
    assert result_text(results(second)["toolu_plan1"]) == (
        "Plan updated: 2 steps (0 completed, 1 in progress, 1 pending)."
    )
    assert result_text(results(third)["toolu_plan2"]) == (
        "Plan updated: 3 steps (1 completed, 1 in progress, 1 pending)."
    )

    # A new process: the plan was stored with the session, and the load shows it again.
    async with spawn_defect(env=plan_env(fake_provider, tmp_path)) as again:
        await load(again, sid, tmp_path)
        kinds = again.client.kinds(sid)
        assert kinds[0] == "user_message_chunk" and kinds[-1] == "plan"
        assert plans(again.client, sid) == [SECOND], "only the latest plan, after the history"
        assert cards(again.client, sid) == {}, "a replay shows no card for a plan either"
        assert again.client.text(sid).endswith("Working on the parser now.")
        assert (await again.prompt(sid, "go on")).stop_reason == "end_turn"
        again.assert_schema_clean()
    fourth = fake_provider.requests[3].body
    assert [b["type"] for b in fourth["messages"][1]["content"]] == ["text", "tool_use"]


async def test_an_invalid_plan_is_refused_with_a_clear_error_and_the_plan_stays(
    fake_provider: FakeProvider, tmp_path: Path
) -> None:
    bad = {"entries": [{"content": "Fix it", "status": "done"}]}
    fake_provider.enqueue(Reply.tool_use("toolu_ok", "update_plan", {"entries": FIRST}))
    fake_provider.enqueue(Reply.tool_use("toolu_bad", "update_plan", bad))
    fake_provider.enqueue(Reply.text("I will fix the plan."))
    async with spawn_defect(env=plan_env(fake_provider, tmp_path)) as agent:
        await agent.initialize()
        sid = await agent.new_session(tmp_path)
        assert (await agent.prompt(sid, "plan it")).stop_reason == "end_turn"
        assert plans(agent.client, sid) == [FIRST], "the refused plan was never shown"
        # A refused call gets its card, failed with why, so the user sees what happened.
        start, *rest = cards(agent.client, sid)["toolu_bad"]
        assert (start.session_update, start.kind) == ("tool_call", "think")
        assert start.title == "Update plan"
        assert rest[-1].status == "failed"
        shown = rest[-1].content[0].content.text
        assert shown.startswith("invalid arguments for update_plan: ")
        agent.assert_schema_clean()
    refused = results(fake_provider.requests[2].body)["toolu_bad"]
    assert refused["is_error"] is True
    assert result_text(refused) == (
        "invalid arguments for update_plan: entries.0.priority: Field required; "
        "entries.0.status: Input should be 'pending', 'in_progress' or 'completed'"
    )
    async with spawn_defect(env=plan_env(fake_provider, tmp_path)) as again:
        await load(again, sid, tmp_path)
        assert plans(again.client, sid) == [FIRST], "the stored plan is the last valid one"
        replayed = cards(again.client, sid)
        assert list(replayed) == ["toolu_bad"] and replayed["toolu_bad"][0].status == "failed"
        again.assert_schema_clean()


async def test_read_only_mode_still_keeps_a_plan_and_more_than_one_step_in_progress_is_noted(
    fake_provider: FakeProvider, tmp_path: Path
) -> None:
    two_at_once = [{**entry, "status": "in_progress"} for entry in FIRST]
    fake_provider.enqueue(
        Reply.of(
            [
                TextBlock("Planning, then writing."),
                ToolUseBlock("toolu_plan", "update_plan", {"entries": two_at_once}),
                ToolUseBlock("toolu_write", "write_file", {"path": "x.txt", "content": "x\n"}),
            ]
        )
    )
    fake_provider.enqueue(Reply.text("Only the plan went through."))
    async with spawn_defect(env=plan_env(fake_provider, tmp_path)) as agent:
        await agent.initialize()
        sid = await agent.new_session(tmp_path)
        await agent.conn.set_session_mode(session_id=sid, mode_id="read-only")
        assert (await agent.prompt(sid, "plan and write")).stop_reason == "end_turn"
        assert plans(agent.client, sid) == [two_at_once]
        assert agent.client.permission_requests == []
        assert cards(agent.client, sid)["toolu_write"][-1].status == "failed"
        agent.assert_schema_clean()
    assert not (tmp_path / "x.txt").exists()
    sent = results(fake_provider.requests[1].body)
    assert sent["toolu_write"]["is_error"] is True
    assert "read-only mode" in result_text(sent["toolu_write"])
    assert sent["toolu_plan"].get("is_error") in (None, False)
    assert result_text(sent["toolu_plan"]) == (
        "Plan updated: 2 steps (0 completed, 2 in progress, 0 pending). Note: 2 steps are "
        "in_progress; keep exactly one in_progress and mark finished steps completed."
    )


async def test_an_empty_plan_clears_it_for_the_editor_and_for_a_load(
    fake_provider: FakeProvider, tmp_path: Path
) -> None:
    fake_provider.enqueue(Reply.tool_use("toolu_1", "update_plan", {"entries": FIRST}))
    fake_provider.enqueue(Reply.tool_use("toolu_2", "update_plan", {"entries": []}))
    fake_provider.enqueue(Reply.text("No plan needed after all."))
    async with spawn_defect(env=plan_env(fake_provider, tmp_path)) as agent:
        await agent.initialize()
        sid = await agent.new_session(tmp_path)
        assert (await agent.prompt(sid, "hm")).stop_reason == "end_turn"
        assert plans(agent.client, sid) == [FIRST, []]
    assert result_text(results(fake_provider.requests[2].body)["toolu_2"]) == "Plan cleared."
    async with spawn_defect(env=plan_env(fake_provider, tmp_path)) as again:
        await load(again, sid, tmp_path)
        assert "plan" not in again.client.kinds(sid)
        assert again.client.text(sid).endswith("No plan needed after all.")


def test_a_plan_update_is_a_schema_valid_acp_plan() -> None:
    # The projection alone, for the shape: the tests above see it on the wire.
    from defect_acp.projection import event_to_update
    from defect_core.events import PlanEntry, PlanUpdated

    update = event_to_update(PlanUpdated((PlanEntry("Step", "high", "in_progress"),)))
    assert isinstance(update, s.AgentPlanUpdate)
    assert update.model_dump(mode="json", by_alias=True, exclude_none=True) == {
        "sessionUpdate": "plan",
        "entries": [{"content": "Step", "priority": "high", "status": "in_progress"}],
    }


def test_defect_exec_streams_each_plan_as_a_json_line_and_shows_it_on_stderr(
    tmp_path: Path,
) -> None:
    replies = [
        {"tool_calls": [{"name": "update_plan", "input": {"entries": FIRST}}]},
        {"tool_calls": [{"name": "update_plan", "input": {"entries": SECOND}}]},
        {"text": "Planned."},
    ]
    script = tmp_path / "script.json"
    script.write_text(json.dumps(replies))
    done = subprocess.run(
        [sys.executable, "-m", "defect_cli", "exec", "--output", "stream-json", "plan it"],
        cwd=tmp_path,
        env=agent_env(
            DEFECT_SCRIPT=str(script),
            DEFECT_STATE_DIR=str(tmp_path / "state"),
            DEFECT_LOG_LEVEL="warning",
        ),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert [line["entries"] for line in lines if line["type"] == "plan"] == [FIRST, SECOND]
    assert lines[-1]["type"] == "result" and lines[-1]["text"] == "Planned."
    assert "plan: ✓ Read the failing test · ▶ Fix the parser · ○ Run the whole suite" in done.stderr


async def test_the_plan_follows_the_conversation_through_a_rewind_and_its_undo(
    fake_provider: FakeProvider, tmp_path: Path
) -> None:
    """`/rewind N conversation` moves the session to the branch before prompt N: the plan
    becomes that branch's last plan (shown, and what a load replays); undo brings the later
    plan back."""
    fake_provider.enqueue(Reply.tool_use("toolu_p1", "update_plan", {"entries": FIRST}))
    fake_provider.enqueue(Reply.text("Planned."))
    fake_provider.enqueue(Reply.tool_use("toolu_p2", "update_plan", {"entries": SECOND}))
    fake_provider.enqueue(Reply.text("Moved on."))
    async with spawn_defect(env=plan_env(fake_provider, tmp_path)) as agent:
        await agent.initialize()
        sid = await agent.new_session(tmp_path)
        assert (await agent.prompt(sid, "plan the fix")).stop_reason == "end_turn"
        assert (await agent.prompt(sid, "go on")).stop_reason == "end_turn"
        assert plans(agent.client, sid) == [FIRST, SECOND]
        assert (await agent.prompt(sid, "/rewind 2 conversation")).stop_reason == "end_turn"
        assert plans(agent.client, sid)[-1] == FIRST, "the branch before prompt 2 had FIRST"
        agent.assert_schema_clean()
    async with spawn_defect(env=plan_env(fake_provider, tmp_path)) as again:
        await load(again, sid, tmp_path)
        assert plans(again.client, sid) == [FIRST]
        assert (await again.prompt(sid, "/rewind undo")).stop_reason == "end_turn"
        assert plans(again.client, sid)[-1] == SECOND
        again.assert_schema_clean()


async def test_a_fork_before_a_prompt_gets_the_plan_its_branch_ended_with(
    fake_provider: FakeProvider, tmp_path: Path
) -> None:
    """`/fork 2` keeps the conversation up to before prompt 2: a load of the fork shows the
    plan that conversation had (FIRST), while the origin keeps SECOND."""
    fake_provider.enqueue(Reply.tool_use("toolu_p1", "update_plan", {"entries": FIRST}))
    fake_provider.enqueue(Reply.text("Planned."))
    fake_provider.enqueue(Reply.tool_use("toolu_p2", "update_plan", {"entries": SECOND}))
    fake_provider.enqueue(Reply.text("Moved on."))
    async with spawn_defect(env=plan_env(fake_provider, tmp_path)) as agent:
        await agent.initialize()
        sid = await agent.new_session(tmp_path)
        assert (await agent.prompt(sid, "plan the fix")).stop_reason == "end_turn"
        assert (await agent.prompt(sid, "go on")).stop_reason == "end_turn"
        assert (await agent.prompt(sid, "/fork 2")).stop_reason == "end_turn"
        answer = agent.client.text(sid)
        fork = answer[answer.index("new session") :].split(": ", 1)[1].split()[0]
        assert fork.startswith("sess_") and fork != sid
    async with spawn_defect(env=plan_env(fake_provider, tmp_path)) as again:
        await load(again, fork, tmp_path)
        assert plans(again.client, fork) == [FIRST]
        await again.conn.load_session(cwd=str(tmp_path), session_id=sid, mcp_servers=[])
        assert plans(again.client, sid) == [SECOND]
        again.assert_schema_clean()
