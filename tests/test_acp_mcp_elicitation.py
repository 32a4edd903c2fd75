"""MCP servers' elicitation through the real `defect acp` process: a server's tool asks the user
(`ctx.elicit`, `ctx.elicit_url` of the `mcp` SDK), the question reaches the client named by its
server (an ACP form where the client has forms, else a permission question for a single
choice, else refused saying why), and the client's answer reaches the server (the tool's
result shows what the server got). In `defect exec` no one is asked. One test drives the hub
in process, to give a call a time-out shorter than the user's answer."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from acp import schema as s

from defect_core.events import AgentEvent, Answer, Question
from defect_core.mcp import McpHub, McpServerSpec
from defect_core.tools.backends import LocalFsBackend, LocalShellBackend
from defect_core.tools.base import ToolContext
from tests.support.acp_harness import Agent, RecordingClient, script_env, spawn_defect
from tests.test_acp_trust import make_project, user_config
from tests.test_exec import defect_exec, json_lines

pytestmark = pytest.mark.anyio

SERVER = Path(__file__).resolve().parent / "mcp_servers" / "ask_server.py"


def replies(tool: str) -> list[dict[str, Any]]:
    return [
        {"tool_calls": [{"name": f"mcp__ask__{tool}", "input": {}, "id": "toolu_mcp"}]},
        {"text": "Done."},
    ]


def result_of(agent: Agent) -> str:
    """What the MCP tool's card shows at its end: the server's result."""
    finals = [
        u
        for _, u in agent.client.updates
        if u.session_update == "tool_call_update"
        and u.tool_call_id == "toolu_mcp"
        and u.status in ("completed", "failed")
    ]
    assert len(finals) == 1, finals
    return json.dumps(finals[0].model_dump(mode="json"))


async def call(tmp_path: Path, tool: str, client: RecordingClient, *caps: str) -> Agent:
    async with spawn_defect(env=script_env(tmp_path, replies(tool)), client=client) as agent:
        await agent.initialize(elicitation=caps)
        response = await agent.conn.new_session(
            cwd=str(tmp_path),
            mcp_servers=[
                s.McpServerStdio(name="ask", command=sys.executable, args=[str(SERVER)], env=[])
            ],
        )
        assert (await agent.prompt(response.session_id, "ask")).stop_reason == "end_turn"
        return agent


def accept(content: dict[str, Any]) -> Any:
    return lambda _message, _mode: s.AcceptElicitationResponse(action="accept", content=content)


async def test_a_servers_form_reaches_the_client_named_by_its_server_and_the_answer_returns(
    tmp_path: Path,
) -> None:
    client = RecordingClient(elicitation=accept({"name": "Ada", "age": 36}))
    agent = await call(tmp_path, "profile", client, "form")
    [(message, mode)] = client.elicitations
    assert message == "MCP server 'ask' asks: Who are you?"
    assert isinstance(mode, s.ElicitationFormSessionMode) and mode.tool_call_id == "toolu_mcp"
    assert set(mode.requested_schema.properties) == {"name", "age"}
    assert "server got: Ada, 36" in result_of(agent)


async def test_a_decline_reaches_the_server(tmp_path: Path) -> None:
    agent = await call(tmp_path, "pick_colour", RecordingClient(), "form")
    assert len(agent.client.elicitations) == 1
    assert "server got: decline" in result_of(agent)


async def test_a_single_choice_falls_back_to_permission_options(tmp_path: Path) -> None:
    client = RecordingClient(permission=lambda _request: "answer-1")
    agent = await call(tmp_path, "pick_colour", client)
    [request] = client.permission_requests
    assert [o.name for o in request.options] == ["red", "blue", "Don't answer"]
    assert request.tool_call.title == "MCP server 'ask' asks: Which colour?"
    assert "server got: blue" in result_of(agent)


async def test_a_form_the_client_cannot_show_is_refused_saying_why(tmp_path: Path) -> None:
    client = RecordingClient()
    agent = await call(tmp_path, "profile", client)
    assert client.elicitations == [] and client.permission_requests == []
    text = result_of(agent)
    assert "elicitation failed" in text and "the editor has no forms" in text


async def test_a_page_to_open_goes_to_a_client_with_url_elicitation(tmp_path: Path) -> None:
    client = RecordingClient(elicitation=accept({}))
    agent = await call(tmp_path, "sign_in", client, "form", "url")
    [(message, mode)] = client.elicitations
    assert message == "MCP server 'ask' asks: Sign in to continue"
    assert isinstance(mode, s.ElicitationUrlSessionMode)
    assert str(mode.url) == "https://auth.example/sign-in?state=abc"
    assert mode.elicitation_id == "sign-in-1"
    assert "server got: accept" in result_of(agent)
    assert client.completed == ["sign-in-1"], "the server's completion reaches the editor"


async def test_a_page_to_open_is_refused_on_a_client_without_url_elicitation(
    tmp_path: Path,
) -> None:
    client = RecordingClient(elicitation=accept({}))
    agent = await call(tmp_path, "sign_in", client, "form")
    assert client.elicitations == []
    text = result_of(agent)
    assert "elicitation failed" in text and "cannot open a page" in text


def test_exec_asks_no_one_and_the_server_is_told(tmp_path: Path) -> None:
    config = f'[mcp.servers.ask]\ncommand = "{sys.executable}"\nargs = ["{SERVER}"]\n'
    done = defect_exec(
        tmp_path, replies("pick_colour"), "--output", "stream-json", "ask", user_config=config
    )
    assert done.returncode == 0, done.stderr
    events = json_lines(done.stdout)
    updates = [e for e in events if e["type"] == "tool_call_update" and e["id"] == "toolu_mcp"]
    text = json.dumps(updates[-1])
    assert "elicitation failed" in text and "without an editor" in text


async def test_a_cancelled_turn_withdraws_the_servers_question_and_tells_it(
    tmp_path: Path,
) -> None:
    gate = asyncio.Event()
    client = RecordingClient(permission_gate=gate)  # the form is never answered
    env = script_env(tmp_path, replies("pick_colour"))
    async with spawn_defect(env=env, client=client) as agent:
        await agent.initialize(elicitation=("form",))
        response = await agent.conn.new_session(
            cwd=str(tmp_path),
            mcp_servers=[
                s.McpServerStdio(name="ask", command=sys.executable, args=[str(SERVER)], env=[])
            ],
        )
        sid = response.session_id
        prompt = asyncio.create_task(agent.prompt(sid, "ask"))
        await client.wait_for(lambda: bool(client.elicitations))
        await agent.conn.cancel(session_id=sid)
        assert (await prompt).stop_reason == "cancelled"

        def told() -> list[str]:  # logged by the server's task: it may follow the answer
            return [line for line in agent.stderr().splitlines() if "mcp_elicitation" in line]

        with anyio.move_on_after(20):
            while not told():
                await anyio.sleep(0.05)
        assert told() and "cancel" in told()[-1] and "its tool call ended" in told()[-1]
        gate.set()


async def test_a_question_with_no_turn_running_reaches_the_client_scoped_to_the_session(
    tmp_path: Path,
) -> None:
    trigger, out = tmp_path / "trigger", tmp_path / "out.json"
    ask_later = {
        "name": "mcp__ask__ask_later",
        "input": {"trigger": str(trigger), "out": str(out)},
        "id": "toolu_mcp",
    }
    client = RecordingClient(elicitation=accept({"ok": True}))
    env = script_env(tmp_path, [{"tool_calls": [ask_later]}, {"text": "Done."}])
    async with spawn_defect(env=env, client=client) as agent:
        await agent.initialize(elicitation=("form",))
        response = await agent.conn.new_session(
            cwd=str(tmp_path),
            mcp_servers=[
                s.McpServerStdio(name="ask", command=sys.executable, args=[str(SERVER)], env=[])
            ],
        )
        sid = response.session_id
        assert (await agent.prompt(sid, "ask later")).stop_reason == "end_turn"
        assert client.elicitations == []
        trigger.write_text("now")  # the turn has ended: no tool call runs
        await client.wait_for(lambda: bool(client.elicitations), timeout=30)
        [(message, mode)] = client.elicitations
        assert message == "MCP server 'ask' asks: Still there?"
        assert isinstance(mode, s.ElicitationFormSessionMode)
        assert mode.session_id == sid and mode.tool_call_id is None
        with anyio.move_on_after(30):
            while not out.exists() or not out.read_text():
                await anyio.sleep(0.05)
        assert json.loads(out.read_text()) == {"action": "accept", "content": {"ok": True}}


async def test_a_trusted_projects_server_asks_through_the_session_too(tmp_path: Path) -> None:
    project = make_project(
        tmp_path / "cloned", mcp={"ask": {"command": sys.executable, "args": [str(SERVER)]}}
    )
    home = tmp_path / "xdg"
    user_config(home, "")
    env = script_env(tmp_path, replies("pick_colour"), XDG_CONFIG_HOME=str(home))
    client = RecordingClient(elicitation=accept({"colour": "red"}))
    async with spawn_defect(env=env, client=client) as agent:
        await agent.initialize(elicitation=("form",))
        sid = await agent.new_session(project)
        assert (await agent.prompt(sid, "/trust")).stop_reason == "end_turn"
        assert (await agent.prompt(sid, "ask")).stop_reason == "end_turn"
        [(message, _mode)] = client.elicitations
        assert message == "MCP server 'ask' asks: Which colour?"
        assert "server got: red" in result_of(agent)


async def test_the_calls_time_out_waits_while_the_user_answers(tmp_path: Path) -> None:
    """In process, with the real server: a call whose time-out is shorter than the user's
    answer still gets the answer: its time-out is held while the question is open."""
    spec = McpServerSpec(name="ask", transport="stdio", command=sys.executable, args=(str(SERVER),))
    hub = await McpHub.connect([spec], tmp_path, timeout=20, call_timeout=0.5)
    answered = anyio.Event()

    async def slow_user(question: Question) -> Answer:
        await anyio.sleep(1.5)  # three times the call's time-out
        answered.set()
        return Answer("accept", {"colour": "blue"}, via="form")

    async def tell(_event: AgentEvent) -> None:
        return None

    hub.ask_with(slow_user, tell)
    context = ToolContext(
        session_id="s",
        cwd=tmp_path,
        fs=LocalFsBackend(),
        shell=LocalShellBackend(),
        tool_call_id="toolu_slow",
    )
    try:
        [tool] = [t for t in hub.tools if t.name == "mcp__ask__pick_colour"]
        output = await tool.run({}, context)
        assert answered.is_set() and not output.is_error
        assert output.content == "server got: blue"
    finally:
        await hub.aclose()
