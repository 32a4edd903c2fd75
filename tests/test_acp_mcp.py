"""MCP servers given in `session/new` through the real `defect acp` process: their tools run
in a turn, a failing server is reported without blocking the session, and no server process
outlives `session/close` or the agent."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from acp import schema as s

from tests.support.acp_harness import script_env, spawn_defect

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
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def wait_gone(pid: int, seconds: float = 10.0) -> bool:
    import anyio

    with anyio.move_on_after(seconds):
        while alive(pid):
            await anyio.sleep(0.05)
    return not alive(pid)


async def read_pid(path: Path, seconds: float = 20.0) -> int:
    """The pid a server wrote to `path`, once it has (it starts in the background)."""
    import anyio

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
