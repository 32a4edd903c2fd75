"""Secrets through the real `defect acp` process: commands, hooks and MCP servers run without
the provider key and secret-looking variables (unless the user's own file passes one), the
editor's terminal is told to unset them, an MCP server's secrets never reach the session
database, and what a failing server printed reaches neither the editor, the model nor the log
with a secret in it."""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path
from typing import Any

import pytest
from acp import schema as s

from defect_fakeapi import DEFAULT_API_KEY, FakeProvider, Reply
from tests.mcp_servers.broken_server import LEAKED_TOKEN
from tests.support.acp_harness import Agent, RecordingClient, agent_env, script_env, spawn_defect

pytestmark = pytest.mark.anyio

SERVERS = Path(__file__).resolve().parent / "mcp_servers"
PROVIDER_KEY = "sk-ant-test-" + "Kq7Zr2Lm9Xw4Tp1Vn8Bc"
FOO_TOKEN = "foo-token-" + "4f9e1d7c2b8a"


def _bash(command: str) -> list[dict[str, Any]]:
    return [
        {"tool_calls": [{"name": "bash", "input": {"command": command}}]},
        {"text": "Done."},
    ]


def _user_config(home: Path, text: str) -> Path:
    path = home / "defect" / "config.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return home


def _database_text(tmp_path: Path) -> str:
    """Every cell of every table of the session database, as text."""
    db = sqlite3.connect(f"file:{tmp_path / 'state' / 'sessions.sqlite3'}?mode=ro", uri=True)
    try:
        tables = [row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        cells = [
            cell.decode(errors="replace") if isinstance(cell, bytes) else str(cell)
            for table in tables
            for row in db.execute(f'SELECT * FROM "{table}"')
            for cell in row
        ]
    finally:
        db.close()
    assert "sessions" in tables and cells, "the database holds the session"
    return "\n".join(cells)


def _editor_saw(agent: Agent) -> str:
    """Everything the agent sent the editor, as one text."""
    return "\n".join(json.dumps(message) for message in agent.wire.from_agent())


def _tool_output(agent: Agent, sid: str) -> str:
    return "\n".join(
        json.dumps(u.model_dump(mode="json"))
        for session, u in agent.client.updates
        if session == sid and u.session_update == "tool_call_update"
    )


async def _yolo_prompt(agent: Agent, work: Path, text: str = "run it") -> str:
    sid = await agent.new_session(work)
    await agent.conn.set_session_mode(session_id=sid, mode_id="yolo")
    assert (await agent.prompt(sid, text)).stop_reason == "end_turn"
    return sid


@pytest.mark.parametrize("passed", [False, True], ids=["default", "passed-by-the-user"])
async def test_commands_hooks_and_configured_servers_run_without_the_secrets(
    tmp_path: Path, passed: bool
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    hook_env, server_env = tmp_path / "hook-env.txt", tmp_path / "server-env.json"
    config = f"""
[[hooks.user_prompt]]
command = "env > '{hook_env}'"

[mcp.servers.echo]
command = "{sys.executable}"
args = ["{SERVERS / "echo_server.py"}"]
env = {{ ECHO_ENV_FILE = "{server_env}", SERVER_TOKEN = "${{FOO_TOKEN}}" }}
"""
    if passed:
        config += '\n[command_environment]\npass = ["FOO_TOKEN"]\n'
    env = script_env(
        tmp_path,
        _bash("env"),
        ANTHROPIC_API_KEY=PROVIDER_KEY,
        FOO_TOKEN=FOO_TOKEN,
        XDG_CONFIG_HOME=str(_user_config(tmp_path / "xdg", config)),
    )
    async with spawn_defect(env=env) as agent:
        await agent.initialize()
        sid = await _yolo_prompt(agent, work)
        shown = _tool_output(agent, sid)
        logged = agent.stderr()
        agent.assert_schema_clean()
    assert "PATH=" in shown, "the command printed its environment"
    hook_saw = hook_env.read_text()
    server_saw = json.loads(server_env.read_text())
    assert "DEFECT_HOOK_EVENT=user_prompt" in hook_saw and "PATH" in server_saw
    for what, text in (("the model", _database_text(tmp_path)), ("the editor", shown)):
        assert PROVIDER_KEY not in text, f"{what} saw the provider key"
        assert (FOO_TOKEN in text) is passed, f"{what}: FOO_TOKEN only when the user passes it"
    assert PROVIDER_KEY not in hook_saw and "ANTHROPIC_API_KEY" not in server_saw
    assert (f"FOO_TOKEN={FOO_TOKEN}" in hook_saw) is passed
    assert ("FOO_TOKEN" in server_saw) is passed
    assert server_saw["SERVER_TOKEN"] == FOO_TOKEN, "a server's own env is kept as configured"
    assert FOO_TOKEN not in logged and PROVIDER_KEY not in logged, "values are never logged"


async def test_the_editors_terminal_is_told_to_unset_the_secrets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The editor's terminal has the editor's environment (here: this test's, which the
    exec-style client passes on), where the same secrets usually are."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", PROVIDER_KEY)
    monkeypatch.setenv("FOO_TOKEN", FOO_TOKEN)
    work = tmp_path / "work"
    work.mkdir()
    client = RecordingClient()  # exec-style: `command` with `args`, no shell, like Zed
    env = script_env(tmp_path, _bash("env"), ANTHROPIC_API_KEY=PROVIDER_KEY, FOO_TOKEN=FOO_TOKEN)
    async with spawn_defect(env=env, client=client) as agent:
        await agent.initialize(terminal=True)
        sid = await _yolo_prompt(agent, work)
        shown = _tool_output(agent, sid)
        agent.assert_schema_clean()
    (create,) = [params for method, params in client.reverse_calls if method == "terminal/create"]
    assert create["command"] == "/usr/bin/env"
    args = create["args"]
    assert args[-3:] == ["/bin/sh", "-c", "env"]
    assert args[:-3:2] == ["-u"] * (len(args) // 2 - 1), "only `-u NAME` pairs before the shell"
    assert {"ANTHROPIC_API_KEY", "FOO_TOKEN"} <= set(args[1:-3:2])
    assert PROVIDER_KEY not in json.dumps(client.reverse_calls), "names are sent, never values"
    model_saw = _database_text(tmp_path)  # the terminal's output, as the tool result
    assert "PATH=" in model_saw, "the command printed its environment"
    for text in (model_saw, shown):
        assert PROVIDER_KEY not in text and FOO_TOKEN not in text


async def test_an_mcp_servers_secrets_are_not_stored(tmp_path: Path) -> None:
    arg_token = "ghp_" + "ArgumentToken0123456789abcdefXYZ"
    flag_value = "plain-value-after-a-flag"
    env_value = "env-value-" + "9a8b7c6d5e"
    query_token = "QueryToken" + "0123456789"
    header_token = "HeaderToken" + "0123456789"
    env = script_env(tmp_path, [])
    async with spawn_defect(env=env) as agent:
        await agent.initialize()
        response = await agent.conn.new_session(
            cwd=str(tmp_path),
            mcp_servers=[
                s.McpServerStdio(
                    name="echo",
                    command=sys.executable,
                    args=[
                        str(SERVERS / "echo_server.py"),
                        f"--token={arg_token}",
                        "--api-key",
                        flag_value,
                    ],
                    env=[s.EnvVariable(name="ECHO_SECRET", value=env_value)],
                ),
                s.HttpMcpServer(
                    type="http",
                    name="remote",
                    url=f"http://127.0.0.1:9/mcp?token={query_token}",
                    headers=[s.HttpHeader(name="Authorization", value=f"Bearer {header_token}")],
                ),
            ],
        )
        sid = response.session_id
        # The unreachable server is reported, in an update after the answer.
        await agent.client.wait_for(lambda: "remote" in agent.client.text(sid))
        editor_saw = _editor_saw(agent)
        logged = agent.stderr()
        agent.assert_schema_clean()
    stored = _database_text(tmp_path)
    secrets = (arg_token, flag_value, env_value, query_token, header_token)
    for secret in secrets:
        assert secret not in stored, f"{secret} is on disk"
        assert secret not in editor_saw, f"{secret} reached the editor"
        assert secret not in logged, f"{secret} was logged"
    db = sqlite3.connect(tmp_path / "state" / "sessions.sqlite3")
    try:
        (raw,) = db.execute("SELECT mcp_servers FROM sessions WHERE id = ?", (sid,)).fetchone()
    finally:
        db.close()
    echo, remote = json.loads(raw)
    assert echo["args"] == [
        str(SERVERS / "echo_server.py"),
        "--token=[redacted]",
        "--api-key",
        "[redacted]",
    ]
    assert echo["env"] == ["ECHO_SECRET"]
    assert remote["url"] == "http://127.0.0.1:9/mcp?token=[redacted]"
    assert remote["headers"] == ["Authorization"]


async def test_what_a_failing_server_printed_reaches_nobody_with_its_secrets(
    fake_provider: FakeProvider, tmp_path: Path
) -> None:
    account = "account-" + "51f0c3a9e7"
    work = tmp_path / "work"
    work.mkdir()
    config = f"""
[mcp.servers.leaky]
command = "{sys.executable}"
args = ["{SERVERS / "broken_server.py"}", "leak"]
env = {{ BROKEN_SECRET = "${{LEAKY_ACCOUNT}}" }}
"""
    fake_provider.enqueue(Reply.text("Noted."))
    env = agent_env(
        DEFECT_PROVIDER="anthropic",
        ANTHROPIC_BASE_URL=fake_provider.url,
        ANTHROPIC_API_KEY=DEFAULT_API_KEY,
        DEFECT_REASONING_EFFORT="off",
        DEFECT_STATE_DIR=str(tmp_path / "state"),
        LEAKY_ACCOUNT=account,
        XDG_CONFIG_HOME=str(_user_config(tmp_path / "xdg", config)),
    )
    async with spawn_defect(env=env) as agent:
        await agent.initialize()
        sid = await agent.new_session(work)
        assert (await agent.prompt(sid, "hello")).stop_reason == "end_turn"
        notice = agent.client.text(sid)
        editor_saw = _editor_saw(agent)
        logged = agent.stderr()
        agent.assert_schema_clean()
    assert "MCP server 'leaky' failed to start" in notice
    assert "token=[redacted]" in notice, "the reason is shown, without its secret"
    model_saw = "\n".join(json.dumps(r.body) for r in fake_provider.requests)
    assert fake_provider.requests, "the model was asked"
    for secret in (LEAKED_TOKEN, account, "abcdef0123456789"):
        assert secret not in editor_saw, f"{secret} reached the editor"
        assert secret not in model_saw, f"{secret} reached the model"
        assert secret not in logged, f"{secret} was logged"
        assert secret not in _database_text(tmp_path), f"{secret} is on disk"
    assert "mcp_server_stderr" in logged, "the server's lines are logged, redacted"
