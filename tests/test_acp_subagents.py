"""Subagents (`spawn_agent`) and background tasks through the real `defect acp` process.

The strict fake API answers parent and children alike and checks every request; `Agents`
routes each request to the script of whoever asks (a subagent's system prompt names it,
`defect_core/agents/child.py`), so the order in which concurrent agents ask never matters.

Covered: a foreground child returns only its answer, in a context of its own, with its progress
streamed on the parent's call; a child is refused (not asked) what the parent would be asked;
the depth limit (`subagent_max_depth`) and a profile's tool allow-list; a cancel during a
foreground child; background tasks — started at once, outcome delivered before the next
request, inspected and cancelled, limited (`background_max_tasks`), cancelled by
`session/close`; and a kill -9 while a child works, then load and a valid next request.
"""

from __future__ import annotations

import asyncio
import collections
import json
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from defect_fakeapi import DEFAULT_API_KEY, FakeProvider, Reply
from defect_fakeapi.script import RequestRecord, ToolUseBlock
from tests.support.acp_harness import Agent, agent_env, spawn_defect

pytestmark = pytest.mark.anyio

TIMEOUT = 20.0
DENIED = "a subagent cannot ask for it"


def subagent_env(fake: FakeProvider, tmp_path: Path, user_config: str = "") -> dict[str, str]:
    config_home = tmp_path / "xdg"
    (config_home / "defect").mkdir(parents=True, exist_ok=True)
    (config_home / "defect" / "config.toml").write_text(user_config, encoding="utf-8")
    return agent_env(
        DEFECT_PROVIDER="anthropic",
        ANTHROPIC_BASE_URL=fake.url,
        ANTHROPIC_API_KEY=DEFAULT_API_KEY,
        DEFECT_REASONING_EFFORT="off",
        DEFECT_STATE_DIR=str(tmp_path / "state"),
        XDG_CONFIG_HOME=str(config_home),
    )


def system_text(body: dict[str, Any]) -> str:
    system = body.get("system", "")
    if isinstance(system, str):
        return system
    return "".join(block.get("text", "") for block in system)


def asker(body: dict[str, Any]) -> str:
    """Who made a request: `parent`, or the subagent profile its system prompt names."""
    text = system_text(body)
    marker = "You are the subagent `"
    if marker not in text:
        return "parent"
    return text.split(marker, 1)[1].split("`", 1)[0]


class Agents:
    """The fake's script, per agent: each request takes the next reply of whoever asks."""

    def __init__(self, fake: FakeProvider) -> None:
        self.fake = fake
        self.queues: dict[str, collections.deque[Reply]] = collections.defaultdict(
            collections.deque
        )
        self.seen: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)

    def script(self, agent: str, *replies: Reply) -> None:
        self.queues[agent].extend(replies)
        self.fake.enqueue(*[self._answer] * len(replies))

    def _answer(self, record: RequestRecord) -> Reply:
        who = asker(record.body)
        self.seen[who].append(record.body)
        if not self.queues[who]:
            raise AssertionError(f"no reply scripted for {who}")
        return self.queues[who].popleft()


def tool_names(body: dict[str, Any]) -> list[str]:
    return [tool["name"] for tool in body.get("tools", [])]


def results_of(body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The tool results of the request's last user message, by call id."""
    content = body["messages"][-1]["content"]
    return {
        b["tool_use_id"]: b
        for b in content
        if isinstance(content, list) and b.get("type") == "tool_result"
    }


def result_text(result: dict[str, Any]) -> str:
    content = result["content"]
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content)


def updates_of(agent: Agent, sid: str, call_id: str) -> list[Any]:
    return [
        u
        for s_id, u in agent.client.updates
        if s_id == sid
        and u.session_update in ("tool_call", "tool_call_update")
        and u.tool_call_id == call_id
    ]


def shown(update: Any) -> str:
    return "\n".join(c.content.text for c in update.content or [] if hasattr(c.content, "text"))


def spawn(call_id: str, task: str, *, agent: str = "general", background: bool = False) -> Reply:
    args: dict[str, Any] = {"agent": agent, "task": task}
    if background:
        args["run_in_background"] = True
    return Reply.tool_use(call_id, "spawn_agent", args)


async def wait_until(predicate: Callable[[], bool], agent: Agent) -> None:
    await agent.client.wait_for(predicate, timeout=TIMEOUT)


async def asked(fake: FakeProvider, count: int) -> None:
    """Wait until the fake has received `count` requests (answered or still streaming)."""
    await asyncio.to_thread(fake.wait_until, lambda records: len(records) >= count, TIMEOUT)


# --- foreground -------------------------------------------------------------------------------


async def test_a_foreground_child_works_in_its_own_context_and_returns_only_its_answer(
    fake_provider: FakeProvider, tmp_path: Path
) -> None:
    (tmp_path / "notes.txt").write_text("the answer is 42\n", encoding="utf-8")
    agents = Agents(fake_provider)
    agents.script("parent", spawn("toolu_spawn", "Find the answer in notes.txt."))
    agents.script(
        "general",
        Reply.tool_use("toolu_c1", "read_file", {"path": "notes.txt"}),
        Reply.text("The answer is 42 (notes.txt, line 1)."),
    )
    agents.script("parent", Reply.text("The subagent says 42."))
    async with spawn_defect(env=subagent_env(fake_provider, tmp_path)) as agent:
        await agent.initialize()
        sid = await agent.new_session(tmp_path)
        response = await agent.prompt(sid, "What is the answer? Use a subagent.")
        assert response.stop_reason == "end_turn"
        calls = updates_of(agent, sid, "toolu_spawn")
        assert calls[0].session_update == "tool_call" and calls[0].kind == "think"
        assert calls[0].title.startswith("general: Find the answer")
        progress = [shown(u) for u in calls[1:] if u.content]
        assert any("✓ Read notes.txt" in text for text in progress), progress
        assert calls[-1].status == "completed"
        assert "The answer is 42 (notes.txt, line 1)." in shown(calls[-1])
        # the child's own tool call reached the editor only inside the parent's call
        assert not updates_of(agent, sid, "toolu_c1")
    fake_provider.assert_script_consumed()
    first_child = agents.seen["general"][0]
    assert [m["role"] for m in first_child["messages"]] == ["user"]
    assert "Find the answer in notes.txt." in json.dumps(first_child["messages"])
    assert "What is the answer?" not in json.dumps(first_child["messages"]), "parent context"
    assert "spawn_agent" not in tool_names(first_child), "depth 1: no grandchildren"
    assert "inspect_background_task" not in tool_names(first_child)
    assert "update_plan" not in tool_names(first_child), "the one plan is the session agent's"
    assert {"read_file", "search", "bash"} <= set(tool_names(first_child))
    parent_tools = tool_names(agents.seen["parent"][0])
    assert {"spawn_agent", "inspect_background_task", "cancel_background_task"} <= set(parent_tools)
    assert "update_plan" in parent_tools
    spawn_tool = next(t for t in agents.seen["parent"][0]["tools"] if t["name"] == "spawn_agent")
    assert "- general: A general-purpose agent" in spawn_tool["description"]
    result = results_of(agents.seen["parent"][1])["toolu_spawn"]
    assert result_text(result) == "The answer is 42 (notes.txt, line 1)."
    assert not result.get("is_error")


async def test_a_child_is_refused_what_the_parent_would_have_been_asked(
    fake_provider: FakeProvider, tmp_path: Path
) -> None:
    agents = Agents(fake_provider)
    agents.script("parent", spawn("toolu_spawn", "Write hello into out.txt."))
    agents.script(
        "general",
        Reply.tool_use("toolu_w", "write_file", {"path": "out.txt", "content": "hello\n"}),
        Reply.text("I could not write out.txt: I am not allowed to."),
    )
    agents.script("parent", Reply.text("The subagent was not allowed to write."))
    async with spawn_defect(env=subagent_env(fake_provider, tmp_path)) as agent:
        await agent.initialize()
        sid = await agent.new_session(tmp_path)
        response = await agent.prompt(sid, "Have a subagent write the file.")
        assert response.stop_reason == "end_turn"
        assert agent.client.permission_requests == [], "a child never asks the user"
        final = updates_of(agent, sid, "toolu_spawn")[-1]
        assert final.status == "completed"
        assert "✗ Write out.txt" in shown(final)
    assert not (tmp_path / "out.txt").exists()
    denied = results_of(agents.seen["general"][1])["toolu_w"]
    assert denied["is_error"] is True and DENIED in result_text(denied)
    fake_provider.assert_script_consumed()


async def test_the_depth_limit_and_a_profiles_tool_allow_list(
    fake_provider: FakeProvider, tmp_path: Path
) -> None:
    agents_dir = tmp_path / ".defect" / "agents"
    agents_dir.mkdir(parents=True)
    (agents_dir / "scout.md").write_text(
        "---\ndescription: Looks things up, read-only\ntools: [read_file, search, spawn_agent]\n"
        "max_requests: 3\n---\nYou look things up and report what you found.\n",
        encoding="utf-8",
    )
    (tmp_path / ".git").mkdir()  # the project root whose .defect/ holds the profile
    agents = Agents(fake_provider)
    agents.script("parent", spawn("toolu_s1", "Look up the version.", agent="scout"))
    agents.script("scout", spawn("toolu_s2", "Look deeper.", agent="general"))
    agents.script("general", Reply.text("Deep answer."))
    agents.script("scout", Reply.text("Version 3, from deeper down."))
    agents.script("parent", Reply.text("Version 3."))
    env = subagent_env(fake_provider, tmp_path, "subagent_max_depth = 2\n")
    async with spawn_defect(env=env) as agent:
        await agent.initialize()
        sid = await agent.new_session(tmp_path)
        assert (await agent.prompt(sid, "Which version?")).stop_reason == "end_turn"
    fake_provider.assert_script_consumed()
    spawn_tool = next(t for t in agents.seen["parent"][0]["tools"] if t["name"] == "spawn_agent")
    assert "- scout: Looks things up, read-only" in spawn_tool["description"]
    assert sorted(tool_names(agents.seen["scout"][0])) == ["read_file", "search", "spawn_agent"]
    assert "You look things up" in system_text(agents.seen["scout"][0])
    grandchild = tool_names(agents.seen["general"][0])
    assert "spawn_agent" not in grandchild, "depth 2 reached: no further spawn_agent"
    assert "bash" not in grandchild, "a grandchild has no more tools than its parent"
    assert result_text(results_of(agents.seen["scout"][1])["toolu_s2"]) == "Deep answer."


async def test_no_spawn_agent_at_depth_zero(fake_provider: FakeProvider, tmp_path: Path) -> None:
    fake_provider.enqueue(Reply.text("Alone."))
    env = subagent_env(fake_provider, tmp_path, "subagent_max_depth = 0\n")
    async with spawn_defect(env=env) as agent:
        await agent.initialize()
        sid = await agent.new_session(tmp_path)
        assert (await agent.prompt(sid, "hi")).stop_reason == "end_turn"
    names = tool_names(fake_provider.requests[-1].body)
    assert "read_file" in names
    assert not {"spawn_agent", "inspect_background_task", "cancel_background_task"} & set(names)


async def test_a_cancel_during_a_foreground_child_ends_every_call_and_the_next_turn_is_valid(
    fake_provider: FakeProvider, tmp_path: Path
) -> None:
    (tmp_path / "a.txt").write_text("a\n", encoding="utf-8")
    agents = Agents(fake_provider)
    agents.script("parent", spawn("toolu_spawn", "Read a.txt, then think long."))
    agents.script(
        "general",
        Reply.tool_use("toolu_c1", "read_file", {"path": "a.txt"}),
        Reply.text("never finished").stall(1),
    )
    agents.script("parent", Reply.text("Starting over."))
    async with spawn_defect(env=subagent_env(fake_provider, tmp_path)) as agent:
        await agent.initialize()
        sid = await agent.new_session(tmp_path)
        turn = asyncio.create_task(agent.prompt(sid, "Delegate it."))
        await asked(fake_provider, 3)
        await agent.conn.cancel(session_id=sid)
        assert (await asyncio.wait_for(turn, TIMEOUT)).stop_reason == "cancelled"
        final = updates_of(agent, sid, "toolu_spawn")[-1]
        assert final.status == "failed"
        assert any("✓ Read a.txt" in shown(u) for u in updates_of(agent, sid, "toolu_spawn"))
        assert (await agent.prompt(sid, "Try again later.")).stop_reason == "end_turn"
    fake_provider.assert_script_consumed()
    after = agents.seen["parent"][-1]
    assert "cancelled" in result_text(results_of_anywhere(after, "toolu_spawn"))
    with sqlite3.connect(f"file:{tmp_path / 'state' / 'sessions.sqlite3'}?mode=ro", uri=True) as db:
        (status,) = db.execute("SELECT status FROM subagents").fetchone()
        logged = db.execute("SELECT body FROM subagent_messages ORDER BY seq").fetchall()
    assert status == "cancelled"
    # the child's log: the task, its read, the read's result (its cut stream never became one)
    assert [json.loads(b)["role"] for (b,) in logged] == ["user", "assistant", "user"]


def results_of_anywhere(body: dict[str, Any], call_id: str) -> dict[str, Any]:
    for message in body["messages"]:
        content = message["content"]
        if isinstance(content, list):
            for block in content:
                if block.get("type") == "tool_result" and block["tool_use_id"] == call_id:
                    return dict(block)
    raise AssertionError(f"no result for {call_id}")


# --- background tasks -------------------------------------------------------------------------


def task_ended(agent: Agent, sid: str, call_id: str) -> Callable[[], bool]:
    """The editor has been told that the task started by `call_id` ended."""

    def ended() -> bool:
        return any(
            isinstance(u.raw_output, dict)
            and u.raw_output.get("status") != "running"
            and "task_id" in u.raw_output
            and "status" in u.raw_output
            for u in updates_of(agent, sid, call_id)
        )

    return ended


def last_user_text(body: dict[str, Any]) -> str:
    content = body["messages"][-1]["content"]
    if isinstance(content, str):
        return content
    return "\n".join(b.get("text", "") for b in content if b.get("type") == "text")


async def test_a_background_outcome_reaches_the_model_before_its_next_request(
    fake_provider: FakeProvider, tmp_path: Path
) -> None:
    agents = Agents(fake_provider)
    agents.script("parent", spawn("toolu_bg", "Count the files.", background=True))
    agents.script("parent", Reply.text("It runs in the background."))
    agents.script("general", Reply.text("Background finding: 7 files."))
    agents.script("parent", Reply.text("Seven files."), Reply.text("Anything else?"))
    async with spawn_defect(env=subagent_env(fake_provider, tmp_path)) as agent:
        await agent.initialize()
        sid = await agent.new_session(tmp_path)
        assert (await agent.prompt(sid, "Count the files, in the background.")).stop_reason == (
            "end_turn"
        )
        await wait_until(task_ended(agent, sid, "toolu_bg"), agent)  # survived its turn's end
        final = updates_of(agent, sid, "toolu_bg")[-1]
        assert final.status == "completed"
        assert "Background task t1 completed: Background finding: 7 files." in shown(final)
        assert (await agent.prompt(sid, "How many?")).stop_reason == "end_turn"
        assert (await agent.prompt(sid, "Thanks.")).stop_reason == "end_turn"
    fake_provider.assert_script_consumed()
    started = result_text(results_of(agents.seen["parent"][1])["toolu_bg"])
    assert started.startswith("Started background task t1 (general: Count the files.)")
    delivered = last_user_text(agents.seen["parent"][2])
    assert delivered.startswith("How many?")
    assert '<background-task id="t1" status="completed">' in delivered
    assert "Background finding: 7 files." in delivered
    assert "<background-task" not in last_user_text(agents.seen["parent"][3]), "told once"


async def test_a_background_task_is_inspected_then_cancelled(
    fake_provider: FakeProvider, tmp_path: Path
) -> None:
    (tmp_path / "a.txt").write_text("a\n", encoding="utf-8")
    agents = Agents(fake_provider)
    agents.script("parent", spawn("toolu_bg", "Survey everything.", background=True))
    agents.script(
        "general",
        Reply.tool_use("toolu_c1", "read_file", {"path": "a.txt"}),
        Reply.text("never finished").stall(1),
    )
    async with spawn_defect(env=subagent_env(fake_provider, tmp_path)) as agent:
        await agent.initialize()
        sid = await agent.new_session(tmp_path)
        agents.script("parent", Reply.text("Started."))
        assert (await agent.prompt(sid, "Survey, in the background.")).stop_reason == "end_turn"
        await asked(fake_provider, 4)  # the child's second request is in flight
        agents.script(
            "parent",
            Reply.tool_use("toolu_list", "inspect_background_task", {}),
            Reply.tool_use("toolu_one", "inspect_background_task", {"task_id": "t1"}),
            Reply.tool_use("toolu_cancel", "cancel_background_task", {"task_id": "t1"}),
            Reply.text("Cancelled it."),
            Reply.text("Nothing pending."),
        )
        assert (await agent.prompt(sid, "Stop it.")).stop_reason == "end_turn"
        final = updates_of(agent, sid, "toolu_bg")[-1]
        assert final.status == "failed" and "Background task t1 cancelled" in shown(final)
        assert (await agent.prompt(sid, "Anything left?")).stop_reason == "end_turn"
    fake_provider.assert_script_consumed()
    bodies = agents.seen["parent"]
    listing = result_text(results_of(bodies[3])["toolu_list"])
    assert listing.startswith("t1  running") and "general: Survey everything." in listing
    one = result_text(results_of(bodies[4])["toolu_one"])
    assert "(1 tool call)" in one and "✓ Read a.txt" in one
    assert result_text(results_of(bodies[5])["toolu_cancel"]) == "Task t1 is cancelled."
    assert "<background-task" not in json.dumps(bodies[-1]), "the model cancelled it itself"


async def test_the_background_limit_and_session_close_cancelling_a_task(
    fake_provider: FakeProvider, tmp_path: Path
) -> None:
    agents = Agents(fake_provider)
    two = Reply.of(
        [
            ToolUseBlock(
                "toolu_bg1",
                "spawn_agent",
                {"agent": "general", "task": "One.", "run_in_background": True},
            ),
            ToolUseBlock(
                "toolu_bg2",
                "spawn_agent",
                {"agent": "general", "task": "Two.", "run_in_background": True},
            ),
        ],
        stop_reason="tool_use",
    )
    agents.script("parent", two, Reply.text("One of two started."))
    agents.script("general", Reply.text("never finished").stall(0))
    env = subagent_env(fake_provider, tmp_path, "background_max_tasks = 1\n")
    async with spawn_defect(env=env) as agent:
        await agent.initialize()
        sid = await agent.new_session(tmp_path)
        assert (await agent.prompt(sid, "Start both.")).stop_reason == "end_turn"
        await asked(fake_provider, 3)
        await agent.conn.close_session(session_id=sid)
        await wait_until(task_ended(agent, sid, "toolu_bg1"), agent)
        assert updates_of(agent, sid, "toolu_bg1")[-1].status == "failed"
    fake_provider.assert_script_consumed()
    results = results_of(agents.seen["parent"][1])
    assert result_text(results["toolu_bg1"]).startswith("Started background task t1")
    refused = results["toolu_bg2"]
    assert refused["is_error"] is True
    assert "background_max_tasks = 1" in result_text(refused)
    with sqlite3.connect(f"file:{tmp_path / 'state' / 'sessions.sqlite3'}?mode=ro", uri=True) as db:
        rows = db.execute("SELECT tool_call_id, status, background FROM subagents").fetchall()
    assert rows == [("toolu_bg1", "cancelled", 1)]


# --- a kill while a child works -----------------------------------------------------------------


async def test_a_kill_while_a_child_works_leaves_parent_and_child_loadable(
    fake_provider: FakeProvider, tmp_path: Path
) -> None:
    (tmp_path / "a.txt").write_text("a\n", encoding="utf-8")
    agents = Agents(fake_provider)
    agents.script("parent", spawn("toolu_spawn", "Read a.txt and report."))
    agents.script(
        "general",
        Reply.tool_use("toolu_c1", "read_file", {"path": "a.txt"}),
        Reply.text("never finished").stall(1),
    )
    env = subagent_env(fake_provider, tmp_path)
    async with spawn_defect(env=env) as agent:
        await agent.initialize()
        sid = await agent.new_session(tmp_path)
        turn = asyncio.create_task(agent.prompt(sid, "Delegate the report."))
        await asked(fake_provider, 3)
        agent.process.kill()
        await asyncio.wait_for(agent.process.wait(), TIMEOUT)
        with pytest.raises(ConnectionError):
            await asyncio.wait_for(turn, TIMEOUT)
    with sqlite3.connect(f"file:{tmp_path / 'state' / 'sessions.sqlite3'}?mode=ro", uri=True) as db:
        (status,) = db.execute("SELECT status FROM subagents").fetchone()
        child_log = [json.loads(b) for (b,) in db.execute("SELECT body FROM subagent_messages")]
    assert status == "running", "it never ended: the kill came first"
    assert [m["role"] for m in child_log] == ["user", "assistant", "user"]
    agents.script("parent", Reply.text("Back; the subagent was interrupted."))
    async with spawn_defect(env=env) as agent:
        await agent.initialize()
        await agent.conn.load_session(cwd=str(tmp_path), session_id=sid, mcp_servers=[])
        replay = updates_of(agent, sid, "toolu_spawn")
        assert len(replay) == 1 and replay[0].status != "completed"
        assert "✓ read_file a.txt" in shown(replay[0]), "what the child did, from its log"
        assert (await agent.prompt(sid, "Are you back?")).stop_reason == "end_turn"
    fake_provider.assert_script_consumed()
    resumed = agents.seen["parent"][-1]
    interrupted = results_of_anywhere(resumed, "toolu_spawn")
    assert interrupted["is_error"] is True
    assert "interrupted" in result_text(interrupted)
