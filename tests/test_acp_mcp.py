"""MCP servers given in `session/new` through the real `defect acp` process: their tools run
in a turn, a failing server is reported without blocking the session, and no server process
outlives `session/close` or the agent. Servers start in the background: `session/new` answers
while one is still starting (asserted by order: a server held by a gate file the test creates
later), the first prompt waits for it and says so, a failure reaches the editor at once, and
the tools that join keep the prompt cache's prefix."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from acp import schema as s

from defect_fakeapi import DEFAULT_API_KEY, FakeProvider, PromptCache, Reply
from tests.support.acp_harness import Agent, script_env, spawn_defect

pytestmark = pytest.mark.anyio

SERVERS = Path(__file__).resolve().parent / "mcp_servers"


def stdio(name: str, script: str, **env: str) -> s.McpServerStdio:
    return s.McpServerStdio(
        name=name,
        command=sys.executable,
        args=[str(SERVERS / script)],
        env=[s.EnvVariable(name=k, value=v) for k, v in env.items()],
    )


def stored_servers(tmp_path: Path, session_id: str) -> list[dict[str, Any]]:
    import sqlite3

    db = sqlite3.connect(f"file:{tmp_path / 'state' / 'sessions.sqlite3'}?mode=ro", uri=True)
    try:
        (raw,) = db.execute(
            "SELECT CAST(mcp_servers AS TEXT) FROM sessions WHERE id = ?", (session_id,)
        ).fetchone()
    finally:
        db.close()
    servers: list[dict[str, Any]] = json.loads(raw)
    return servers


def alive(pid: int) -> bool:
    """Running, as opposed to gone or a zombie nobody reaped yet (an orphan, in a container
    whose first process does not reap)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


async def wait_gone(pid: int, seconds: float = 10.0) -> bool:
    with anyio.move_on_after(seconds):
        while alive(pid):
            await anyio.sleep(0.05)
    return not alive(pid)


async def read_pid(path: Path, seconds: float = 20.0) -> int:
    """The pid a server wrote to `path`, once it has (it starts in the background)."""
    with anyio.move_on_after(seconds):
        while not path.exists() or not path.read_text().strip():
            await anyio.sleep(0.05)
    return int(path.read_text())


async def test_mcp_tools_run_in_a_turn_and_servers_stop_with_the_session(tmp_path: Path) -> None:
    pid_file = tmp_path / "echo.pid"
    replies = [
        {"tool_calls": [{"name": "mcp__echo__echo", "input": {"text": "over ACP"}}]},
        {"text": "the server echoed"},
    ]
    async with spawn_defect(env=script_env(tmp_path, replies)) as agent:
        init = await agent.initialize()
        caps = init.agent_capabilities
        assert caps is not None and caps.mcp_capabilities is not None
        assert caps.mcp_capabilities.http and caps.mcp_capabilities.sse
        response = await agent.conn.new_session(
            cwd=str(tmp_path),
            mcp_servers=[
                stdio("echo", "echo_server.py", ECHO_PID_FILE=str(pid_file)),
                stdio("broken", "broken_server.py"),
            ],
        )
        sid = response.session_id
        assert (await agent.prompt(sid, "echo please")).stop_reason == "end_turn"
        calls = [u for _, u in agent.client.updates if u.session_update == "tool_call"]
        assert calls and calls[0].kind == "read", "a read-only MCP tool runs without asking"
        finals = [
            u
            for _, u in agent.client.updates
            if u.session_update == "tool_call_update" and u.status == "completed"
        ]
        assert any("echo: over ACP" in json.dumps(f.model_dump(mode="json")) for f in finals)
        assert "broken" in agent.client.text(sid), "the failed server is reported to the user"
        pid = int(pid_file.read_text())
        assert alive(pid)
        stored = stored_servers(tmp_path, sid)
        assert [server["name"] for server in stored] == ["echo", "broken"]
        assert stored[0]["env"] == ["ECHO_PID_FILE"], "names only: values may be secrets"
        assert str(pid_file) not in json.dumps(stored)
        await agent.conn.close_session(session_id=sid)
        assert await wait_gone(pid), "session/close stops the session's servers"
        agent.assert_schema_clean()


async def test_servers_stop_when_the_agent_exits(tmp_path: Path) -> None:
    pid_file = tmp_path / "echo.pid"
    async with spawn_defect(env=script_env(tmp_path, [])) as agent:
        await agent.initialize()
        await agent.conn.new_session(
            cwd=str(tmp_path),
            mcp_servers=[stdio("echo", "echo_server.py", ECHO_PID_FILE=str(pid_file))],
        )
        pid = await read_pid(pid_file)  # the server starts in the background
        assert alive(pid)
    assert await wait_gone(pid), "closing stdin ends the agent and its servers"


# --- servers start in the background --------------------------------------------------------


def update_messages(agent: Agent, sid: str, needle: str) -> list[int]:
    """Where on the wire the agent's `session/update`s for `sid` that mention `needle` are."""
    return [
        i
        for i, (side, message) in enumerate(agent.wire.messages)
        if side == "agent"
        and message.get("method") == "session/update"
        and message["params"]["sessionId"] == sid
        and needle in json.dumps(message["params"]["update"])
    ]


def answer_index(agent: Agent, sid: str) -> int:
    """Where on the wire the answer that gave the editor `sid` is."""
    (index,) = [
        i
        for i, (side, message) in enumerate(agent.wire.messages)
        if side == "agent" and (message.get("result") or {}).get("sessionId") == sid
    ]
    return index


async def test_session_new_answers_while_a_server_starts_and_the_first_prompt_waits(
    tmp_path: Path,
) -> None:
    gate, pid_file = tmp_path / "slow.go", tmp_path / "slow.pid"
    replies = [
        {"tool_calls": [{"name": "mcp__slow__echo", "input": {"text": "at last"}}]},
        {"text": "the slow server echoed"},
    ]
    async with spawn_defect(env=script_env(tmp_path, replies)) as agent:
        await agent.initialize()
        response = await agent.conn.new_session(
            cwd=str(tmp_path),
            mcp_servers=[
                stdio(
                    "slow", "echo_server.py", ECHO_WAIT_FOR=str(gate), ECHO_PID_FILE=str(pid_file)
                )
            ],
        )
        sid = response.session_id
        # Answered while the server cannot have answered `initialize`: it serves only once
        # `gate` exists, and nothing has created it yet.
        pid = await read_pid(pid_file)
        assert alive(pid) and not gate.exists()
        prompt = asyncio.create_task(agent.prompt(sid, "echo please"))
        waiting = "Waiting for MCP server 'slow' to start"
        await agent.client.wait_for(lambda: waiting in agent.client.text(sid), timeout=30)
        assert not prompt.done(), "the prompt waits for the server still starting"
        gate.touch()
        assert (await prompt).stop_reason == "end_turn"
        finals = [
            u
            for _, u in agent.client.updates
            if u.session_update == "tool_call_update" and u.status == "completed"
        ]
        assert any("echo: at last" in json.dumps(f.model_dump(mode="json")) for f in finals)
        text = agent.client.text(sid)
        assert text.index(waiting) < text.index("the slow server echoed")
        assert "failed to start" not in text
        assert answer_index(agent, sid) < update_messages(agent, sid, waiting)[0]


async def test_a_failing_server_is_told_to_the_editor_at_once_and_once(tmp_path: Path) -> None:
    gate = tmp_path / "late.go"
    async with spawn_defect(env=script_env(tmp_path, [])) as agent:
        await agent.initialize()
        response = await agent.conn.new_session(
            cwd=str(tmp_path),
            mcp_servers=[
                stdio("early", "broken_server.py"),
                stdio("late", "broken_server.py", BROKEN_WAIT_FOR=str(gate)),
            ],
        )
        sid = response.session_id
        early = "MCP server 'early' failed to start: exited during start-up"
        await agent.client.wait_for(lambda: early in agent.client.text(sid), timeout=30)
        assert "'late'" not in agent.client.text(sid), "still starting: nothing to tell yet"
        # What follows the answer does not wait for a server either.
        await agent.client.wait_for(lambda: "available_commands_update" in agent.client.kinds(sid))
        assert not gate.exists()
        gate.touch()  # only now can it fail: after the answer, with no prompt in sight
        late = "MCP server 'late' failed to start: exited during start-up"
        await agent.client.wait_for(lambda: late in agent.client.text(sid), timeout=30)
        text = agent.client.text(sid)
        assert text.count("MCP server 'early'") == 1 and text.count("MCP server 'late'") == 1
        assert "cannot load config" in text, "the reason is the server's own last words"
        answered = answer_index(agent, sid)
        told = update_messages(agent, sid, "failed to start")
        assert len(told) == 2 and all(i > answered for i in told)
        assert not [m for _, m in agent.wire.messages if m.get("method") == "session/prompt"]


async def test_closing_a_session_while_its_server_starts_leaves_no_process(
    tmp_path: Path,
) -> None:
    gate, pid_file, child_file = (tmp_path / n for n in ("never.go", "slow.pid", "child.pid"))
    async with spawn_defect(env=script_env(tmp_path, [])) as agent:
        await agent.initialize()
        response = await agent.conn.new_session(
            cwd=str(tmp_path),
            mcp_servers=[
                stdio(
                    "slow",
                    "echo_server.py",
                    ECHO_WAIT_FOR=str(gate),
                    ECHO_PID_FILE=str(pid_file),
                    ECHO_CHILD_PID_FILE=str(child_file),
                )
            ],
        )
        pid, child = await read_pid(pid_file), await read_pid(child_file)
        assert alive(pid) and alive(child), "started, and still starting (no gate)"
        await agent.conn.close_session(session_id=response.session_id)
        assert await wait_gone(pid), "session/close stops a server still starting"
        assert await wait_gone(child), "and what it started"
        assert not gate.exists()


async def wait_logged(agent: Agent, event: str, server: str, seconds: float = 30.0) -> None:
    """Wait until the agent's log (JSON lines on its stderr) says `event` of `server`."""

    def said() -> bool:
        for line in agent.stderr().splitlines():
            with contextlib.suppress(ValueError):
                entry = json.loads(line)
                if entry.get("event") == event and entry.get("server") == server:
                    return True
        return False

    with anyio.move_on_after(seconds):
        while not said():
            await anyio.sleep(0.05)
    assert said(), f"the agent never logged {event} for {server}"


async def test_server_tools_follow_the_built_in_ones_and_keep_the_cached_prefix(
    tmp_path: Path,
) -> None:
    """Each server's tools join once, after the built-in ones, in the order the servers became
    ready; every request's tool list extends the one before, so each request reads the whole
    of the one before from the (simulated) prompt cache."""
    gate = tmp_path / "alpha.go"
    with FakeProvider(prompt_cache=PromptCache()) as fake:
        fake.enqueue(
            Reply.tool_use(None, "mcp__alpha__echo", {"text": "one"}),
            Reply.tool_use(None, "mcp__zulu__echo", {"text": "two"}),
            Reply.text("Both servers echoed."),
            Reply.text("Still both."),
        )
        env = script_env(
            tmp_path,
            DEFECT_PROVIDER="anthropic",
            ANTHROPIC_BASE_URL=fake.url,
            ANTHROPIC_API_KEY=DEFAULT_API_KEY,
            DEFECT_REASONING_EFFORT="off",
        )
        async with spawn_defect(env=env) as agent:
            await agent.initialize()
            response = await agent.conn.new_session(
                cwd=str(tmp_path),
                mcp_servers=[
                    stdio("alpha", "echo_server.py", ECHO_WAIT_FOR=str(gate)),
                    stdio("zulu", "echo_server.py"),
                ],
            )
            sid = response.session_id
            await wait_logged(agent, "mcp_server_connected", "zulu")
            prompt = asyncio.create_task(agent.prompt(sid, "Echo with both."))
            waiting = "Waiting for MCP server 'alpha' to start"
            await agent.client.wait_for(lambda: waiting in agent.client.text(sid), timeout=30)
            gate.touch()
            assert (await prompt).stop_reason == "end_turn"
            assert (await agent.prompt(sid, "And now?")).stop_reason == "end_turn"
            await anyio.to_thread.run_sync(fake.wait_for_requests, len(fake.requests))
    records = fake.requests
    assert len(records) == 4 and not any(r.rejected for r in records)
    lists = [[t["name"] for t in r.body["tools"]] for r in records]
    first = lists[0]
    servers = [name.split("__")[1] for name in first if name.startswith("mcp__")]
    # In the order the servers became ready: neither the order given nor the names' order.
    assert servers == ["zulu"] * 11 + ["alpha"] * 11, servers
    built_in = first[: len(first) - len(servers)]
    assert "read_file" in built_in and not any(n.startswith("mcp__") for n in built_in)
    systems = [json.dumps(r.body["system"]) for r in records]
    assert "come from MCP servers" in systems[0], "their guidance, from the first request"
    assert systems == [systems[0]] * len(systems)
    for before, now in itertools.pairwise(lists):
        assert now[: len(before)] == before, "a later list extends, never reorders"
    usage = [r.cache_usage for r in records]
    for before_usage, now_usage in itertools.pairwise(usage):
        assert before_usage is not None and now_usage is not None
        assert now_usage.cache_read_input_tokens == before_usage.total, "the prefix is kept"


async def test_load_resume_and_fork_answer_while_their_servers_start(tmp_path: Path) -> None:
    """Each way of opening a stored session starts its servers in the background too."""
    gate = tmp_path / "never.go"  # never created: the servers never answer `initialize`
    async with spawn_defect(env=script_env(tmp_path, [])) as agent:
        await agent.initialize()
        sid = await agent.new_session(tmp_path)
        await agent.conn.close_session(session_id=sid)

        def server(method: str) -> s.McpServerStdio:
            pid_file = tmp_path / f"{method}.pid"
            return stdio(
                method, "echo_server.py", ECHO_WAIT_FOR=str(gate), ECHO_PID_FILE=str(pid_file)
            )

        await agent.conn.load_session(
            cwd=str(tmp_path), session_id=sid, mcp_servers=[server("load")]
        )
        loaded = await read_pid(tmp_path / "load.pid")
        assert alive(loaded) and not gate.exists(), "answered while its server starts"
        await agent.conn.close_session(session_id=sid)
        assert await wait_gone(loaded)
        await agent.conn.resume_session(
            cwd=str(tmp_path), session_id=sid, mcp_servers=[server("resume")]
        )
        forked = await agent.conn.fork_session(
            cwd=str(tmp_path), session_id=sid, mcp_servers=[server("fork")]
        )
        pids = [await read_pid(tmp_path / f"{m}.pid") for m in ("resume", "fork")]
        assert all(alive(pid) for pid in pids) and not gate.exists()
        for session_id in (sid, forked.session_id):
            await agent.conn.close_session(session_id=session_id)
        assert all([await wait_gone(pid) for pid in pids])


async def test_a_prompt_waiting_for_a_server_can_be_cancelled(tmp_path: Path) -> None:
    """The wait is part of the turn: `session/cancel` ends it (`cancelled`), and the next
    prompt waits again and then has the server's tools."""
    gate = tmp_path / "slow.go"
    replies = [
        {"tool_calls": [{"name": "mcp__slow__echo", "input": {"text": "second try"}}]},
        {"text": "echoed on the second try"},
    ]
    async with spawn_defect(env=script_env(tmp_path, replies)) as agent:
        await agent.initialize()
        slow = stdio("slow", "echo_server.py", ECHO_WAIT_FOR=str(gate))
        response = await agent.conn.new_session(cwd=str(tmp_path), mcp_servers=[slow])
        sid = response.session_id
        waiting = "Waiting for MCP server 'slow' to start"
        first = asyncio.create_task(agent.prompt(sid, "echo please"))
        await agent.client.wait_for(lambda: waiting in agent.client.text(sid), timeout=30)
        await agent.conn.cancel(session_id=sid)
        assert (await first).stop_reason == "cancelled"
        assert not gate.exists(), "cancelled while the server was still starting"
        second = asyncio.create_task(agent.prompt(sid, "echo, again"))
        await agent.client.wait_for(lambda: agent.client.text(sid).count(waiting) == 2, timeout=30)
        gate.touch()
        assert (await second).stop_reason == "end_turn"
        assert "echoed on the second try" in agent.client.text(sid)
        finals = [
            u
            for _, u in agent.client.updates
            if u.session_update == "tool_call_update" and u.status == "completed"
        ]
        assert any("echo: second try" in json.dumps(f.model_dump(mode="json")) for f in finals)
        assert "failed to start" not in agent.client.text(sid)
