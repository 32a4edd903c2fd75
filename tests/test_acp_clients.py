"""defect in the hands of real clients and of people: terminals started the way Zed and acpx
start them (exec `command` with `args`, no shell), a replay that still shows what a command
printed after a restart, a stdin that is a TTY, `/dev/null`, closed or write-only, broken
configuration files, bad log levels, the missing-credentials hint, session titles, and the
`make run` demo. Every test drives the real `defect acp` process."""

from __future__ import annotations

import asyncio
import os
import pty
import subprocess
import sys
import tty
from pathlib import Path
from typing import Any

import pytest
from acp import RequestError

from tests.support.acp_harness import (
    REPO,
    RecordingClient,
    agent_env,
    script_env,
    spawn_defect,
)

pytestmark = pytest.mark.anyio

PIPELINE = "echo 'hello world' | tr a-z A-Z && printf '%s\\n' \"two words\""
"""Arguments, a pipe, `&&` and both kinds of quotes: what a shell-less exec breaks."""


def _bash_script(command: str) -> list[dict[str, Any]]:
    return [
        {"text": "Running it.", "tool_calls": [{"name": "bash", "input": {"command": command}}]},
        {"text": "Ran it."},
    ]


def _final_updates(client: RecordingClient, sid: str) -> list[Any]:
    return [
        u
        for session, u in client.updates
        if session == sid
        and u.session_update in ("tool_call", "tool_call_update")
        and u.status in ("completed", "failed")
    ]


def _content_text(update: Any) -> str:
    parts: list[str] = []
    for item in update.content or []:
        inner = getattr(item, "content", None)
        if getattr(inner, "type", None) == "text":
            parts.append(inner.text)
    return "\n".join(parts)


# --- terminals ---------------------------------------------------------------------------------


@pytest.mark.parametrize("through_shell", [False, True], ids=["exec-style", "shell-style"])
async def test_terminal_commands_run_on_exec_style_and_shell_style_clients(
    tmp_path: Path, through_shell: bool
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    client = RecordingClient(terminal_through_shell=through_shell)
    env = script_env(tmp_path, _bash_script(PIPELINE))
    async with spawn_defect(env=env, client=client) as agent:
        await agent.initialize(terminal=True)
        sid = await agent.new_session(work)
        assert (await agent.prompt(sid, "run it")).stop_reason == "end_turn"
        creates = [params for method, params in client.reverse_calls if method == "terminal/create"]
        assert creates == [{"command": "/bin/sh", "args": ["-c", PIPELINE], "cwd": str(work)}]
        final = _final_updates(client, sid)
        assert [u.status for u in final] == ["completed"]
        agent.assert_schema_clean()
    # The model read what the command printed, through the editor's terminal.
    assert "HELLO WORLD\ntwo words" in _model_saw(tmp_path)


def _model_saw(tmp_path: Path) -> str:
    """Every tool result stored for the sessions under `tmp_path/state`."""
    import sqlite3

    db = sqlite3.connect(tmp_path / "state" / "sessions.sqlite3")
    try:
        rows = db.execute("SELECT * FROM messages").fetchall()
    finally:
        db.close()
    import json

    return "\n".join(
        json.dumps(json.loads(cell), ensure_ascii=False).replace("\\n", "\n")
        for row in rows
        for cell in row
        if isinstance(cell, str) and cell.startswith("{")
    )


async def test_the_terminal_shell_is_configurable(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    client = RecordingClient()
    env = script_env(tmp_path, _bash_script("echo $0"), DEFECT_TERMINAL_SHELL="/bin/bash")
    async with spawn_defect(env=env, client=client) as agent:
        await agent.initialize(terminal=True)
        sid = await agent.new_session(work)
        assert (await agent.prompt(sid, "run it")).stop_reason == "end_turn"
        creates = [params for method, params in client.reverse_calls if method == "terminal/create"]
        assert creates[0]["command"] == "/bin/bash"
        assert creates[0]["args"] == ["-c", "echo $0"]


@pytest.mark.parametrize("terminal", [True, False], ids=["editor-terminal", "local-shell"])
async def test_a_load_after_restart_still_shows_what_the_command_printed(
    tmp_path: Path, terminal: bool
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    command = "echo printed-before-the-restart | tr a-z A-Z"
    async with spawn_defect(env=script_env(tmp_path, _bash_script(command))) as first:
        await first.initialize(terminal=terminal)
        sid = await first.new_session(work)
        assert (await first.prompt(sid, "run it")).stop_reason == "end_turn"

    client = RecordingClient()
    async with spawn_defect(env=script_env(tmp_path), client=client) as second:
        await second.initialize(terminal=terminal)
        await second.conn.load_session(cwd=str(work), session_id=sid, mcp_servers=[])
        calls = [u for _, u in client.updates if u.session_update == "tool_call"]
        assert [c.status for c in calls] == ["completed"]
        assert "PRINTED-BEFORE-THE-RESTART" in _content_text(calls[0])
        # Never a reference to a terminal that died with the first process.
        kinds = [getattr(item, "type", None) for item in calls[0].content or []]
        assert "terminal" not in kinds
        second.assert_schema_clean()


# --- stdin of every kind -----------------------------------------------------------------------


def _defect(*args: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "defect_cli", *args],
        env=kwargs.pop("env", agent_env()),
        cwd=str(REPO),
        capture_output=True,
        text=True,
        timeout=60,
        **kwargs,
    )


def test_stdin_at_eof_exits_zero_without_a_traceback() -> None:
    for stdin in (subprocess.DEVNULL, b""):
        if isinstance(stdin, bytes):
            done = _defect("acp", input=stdin.decode())
        else:
            done = _defect("acp", stdin=stdin)
        assert done.returncode == 0, done.stderr
        assert "Traceback" not in done.stderr
        assert done.stdout == ""


def test_a_file_of_requests_on_stdin_is_served(tmp_path: Path) -> None:
    requests = tmp_path / "requests.jsonl"
    requests.write_text(
        '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}\n'
    )
    with requests.open("rb") as stdin:
        done = _defect("acp", stdin=stdin)
    assert done.returncode == 0, done.stderr
    assert '"protocolVersion":1' in done.stdout.replace(" ", "")


def test_a_closed_stdin_is_one_clear_line() -> None:
    done = _defect("acp", stdin=None, preexec_fn=lambda: os.close(0))
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "defect: standard input is closed; defect acp reads JSON-RPC from it "
        "(an editor starts it with a pipe on stdin)"
    ]


def test_a_write_only_stdin_is_one_clear_line(tmp_path: Path) -> None:
    target = tmp_path / "sink"
    fd = os.open(target, os.O_WRONLY | os.O_CREAT)
    try:
        done = _defect("acp", stdin=fd)
    finally:
        os.close(fd)
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "open for writing only" in lines[0]


async def test_a_person_at_a_terminal_is_told_what_this_is_then_served() -> None:
    master, slave = pty.openpty()
    tty.setraw(slave)
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "defect_cli",
        "acp",
        stdin=slave,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=agent_env(DEFECT_LOG_LEVEL="error"),
        cwd=str(REPO),
    )
    os.close(slave)
    try:
        assert proc.stdout is not None and proc.stderr is not None
        notice = await asyncio.wait_for(proc.stderr.readline(), 30)
        assert b"Agent Client Protocol (JSON-RPC) on stdin/stdout" in notice
        assert b"launched by an editor" in notice and b"README.md" in notice
        request = b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}'
        os.write(master, request + b"\n")
        answer = await asyncio.wait_for(proc.stdout.readline(), 30)
        assert b'"id":1' in answer.replace(b" ", b"") and b"agentInfo" in answer
    finally:
        os.close(master)
        if proc.returncode is None:
            proc.terminate()
        await asyncio.wait_for(proc.wait(), 30)


# --- flags -------------------------------------------------------------------------------------


def test_bad_log_levels_are_refused_with_the_valid_list() -> None:
    flag = _defect("acp", "--log-level", "loud", stdin=subprocess.DEVNULL)
    assert flag.returncode == 2
    assert "invalid log level 'loud'" in flag.stderr
    assert "debug, info, warning, error" in flag.stderr
    env = _defect("acp", env=agent_env(DEFECT_LOG_LEVEL="loud"), stdin=subprocess.DEVNULL)
    assert env.returncode == 2
    assert env.stderr.strip() == (
        "defect: DEFECT_LOG_LEVEL='loud' is not a log level: choose one of debug, info, "
        "warning, error"
    )


def test_dash_capital_v_prints_the_version() -> None:
    short, long = _defect("-V"), _defect("--version")
    assert short.returncode == 0 and short.stdout.startswith("defect ")
    assert short.stdout == long.stdout


# --- broken configuration files ----------------------------------------------------------------


def _user_config(tmp_path: Path, text: str) -> tuple[dict[str, str], Path]:
    config_home = tmp_path / "config"
    (config_home / "defect").mkdir(parents=True)
    path = config_home / "defect" / "config.toml"
    path.write_text(text)
    return script_env(tmp_path, XDG_CONFIG_HOME=str(config_home)), path


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('model = "x"\n\nmax_tokens = "lots"\n', "line 3: max_tokens: must be an integer"),
        ('provider = "scripted"\n[anthropic]\nbase_url = 7\n', "line 3: anthropic.base_url"),
        ("provider = 'scripted'\ncolour = 'blue'\n", "line 2: colour: unknown key"),
        ("provider = \n", "is not valid TOML: Invalid value (at line 1, column 12)"),
    ],
    ids=["wrong-type", "wrong-type-in-table", "unknown-key", "invalid-toml"],
)
async def test_a_broken_user_config_is_told_by_every_session_request(
    tmp_path: Path, text: str, expected: str
) -> None:
    env, path = _user_config(tmp_path, text)
    work = tmp_path / "work"
    work.mkdir()
    async with spawn_defect(env=env) as agent:
        init = await agent.initialize()
        assert init.agent_info is not None and init.agent_info.name == "defect"
        for call in (
            lambda: agent.conn.new_session(cwd=str(work), mcp_servers=[]),
            lambda: agent.conn.load_session(cwd=str(work), session_id="sess_x", mcp_servers=[]),
            lambda: agent.conn.resume_session(cwd=str(work), session_id="sess_x", mcp_servers=[]),
        ):
            with pytest.raises(RequestError) as err:
                await call()
            if err.value.code == -32002:  # load/resume of an unknown id: not found first
                continue
            assert err.value.code == -32602
            assert str(path) in str(err.value) and expected in str(err.value)
        agent.assert_schema_clean()


async def test_loading_a_stored_session_names_the_broken_user_config(tmp_path: Path) -> None:
    env, path = _user_config(tmp_path, 'provider = "scripted"\n')
    work = tmp_path / "work"
    work.mkdir()
    async with spawn_defect(env=env) as agent:
        await agent.initialize()
        sid = await agent.new_session(work)
        assert (await agent.prompt(sid, "hello")).stop_reason == "end_turn"
    path.write_text('provider = "scripted"\nmax_tokens = -1\n')
    async with spawn_defect(env=env) as agent:
        await agent.initialize()
        for method in (agent.conn.load_session, agent.conn.resume_session):
            with pytest.raises(RequestError) as err:
                await method(cwd=str(work), session_id=sid, mcp_servers=[])
            assert err.value.code == -32602
            assert f"{path}, line 2: max_tokens" in str(err.value)


async def test_a_broken_project_config_fails_only_that_projects_sessions(tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    (broken / ".git").mkdir(parents=True)
    (broken / ".defect").mkdir()
    project_file = broken / ".defect" / "config.toml"
    project_file.write_text("max_turn_requests = 0\n")
    (broken / "sub").mkdir()
    healthy = tmp_path / "healthy"
    healthy.mkdir()
    # The agent itself is started inside the broken project, as an editor opened on it does.
    async with spawn_defect(env=script_env(tmp_path), cwd=broken) as agent:
        await agent.initialize()
        with pytest.raises(RequestError) as err:
            await agent.new_session(broken / "sub")
        assert err.value.code == -32602
        assert f"{project_file}, line 1: max_turn_requests" in str(err.value)
        sid = await agent.new_session(healthy)
        assert (await agent.prompt(sid, "hello")).stop_reason == "end_turn"
        agent.assert_schema_clean()


# --- credentials and titles --------------------------------------------------------------------


@pytest.mark.parametrize("chosen_by", ["flag", "environment", "file"])
async def test_the_missing_key_hint_names_what_chose_the_provider(
    tmp_path: Path, chosen_by: str
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    args: tuple[str, ...] = ()
    env = script_env(tmp_path)
    if chosen_by == "flag":
        args, expected = (
            ("--provider", "anthropic"),
            "the --provider flag; or pass --provider bedrock",
        )
    elif chosen_by == "environment":
        env["DEFECT_PROVIDER"] = "anthropic"
        expected = "chosen by DEFECT_PROVIDER; or set DEFECT_PROVIDER=bedrock"
    else:
        env, path = _user_config(tmp_path, 'provider = "anthropic"\n')
        expected = f'chosen by {path}; or set provider = "bedrock" there'
    async with spawn_defect(*args, env=env) as agent:
        await agent.initialize()
        sid = await agent.new_session(work)
        with pytest.raises(RequestError) as err:
            await agent.prompt(sid, "hello")
        assert err.value.code == -32000
        message = str(err.value)
        assert "no Anthropic API key: set ANTHROPIC_API_KEY" in message
        assert expected in message
        agent.assert_schema_clean()


async def test_a_first_prompt_that_failed_leaves_no_title(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    client = RecordingClient()
    async with spawn_defect(
        "--provider", "anthropic", env=script_env(tmp_path), client=client
    ) as a:
        await a.initialize()
        sid = await a.new_session(work)
        with pytest.raises(RequestError):
            await a.prompt(sid, "this prompt never reached a model")
        listed = await a.conn.list_sessions(cwd=str(work))
        assert [(i.session_id, i.title) for i in listed.sessions] == [(sid, None)]
        assert "session_info_update" not in client.kinds(sid)
    # Answered, the prompt names the session.
    async with spawn_defect(env=script_env(tmp_path), client=client) as b:
        await b.initialize()
        sid = await b.new_session(work)
        assert (await b.prompt(sid, "hello there")).stop_reason == "end_turn"
        listed = await b.conn.list_sessions(cwd=str(work))
        titles = {i.session_id: i.title for i in listed.sessions}
        assert titles[sid] == "hello there"
        b.assert_schema_clean()


# --- make run ----------------------------------------------------------------------------------


def test_the_demo_shows_an_editors_view_in_order_and_none_of_its_own_files() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DEFECT_", "ANTHROPIC_"))}
    done = subprocess.run(
        [sys.executable, "scripts/demo_client.py"],
        cwd=str(REPO),
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    order = [
        "> What is in this project?",
        "Let me look around the workspace first.",  # streamed text
        "(pending)",
        ": in_progress",
        ": completed",
        "[stop reason: end_turn",
        "? Allow “Write NOTES.md”?",
        "→ Allow once",
        "> Make a plan, then review this project",
        "Plan\n  ▶ Look at the workspace (high)\n  ○ Decide what to change (medium)\n",
        "Plan\n  ✔ Look at the workspace (high)\n  ▶ Decide what to change (medium)\n",
        "Every step of the plan is done.",
        "> Ask a subagent to survey this workspace",
        "The subagent reported back:\n    `search` returned:\n",
        "> /goal survey this workspace",
        "Goal round 1/20: survey this workspace",
        "  ↳ Goal reached: completed",
        "The goal is reached.\n[stop reason: end_turn",
        "[stop reason: cancelled]",
        "Demo finished: a full offline ACP session.",
    ]
    positions = [out.find(marker) for marker in order]
    assert -1 not in positions, list(zip(order, positions, strict=True))
    assert positions == sorted(positions)
    # A subagent's progress is resent whole on each update: each of its lines is shown once.
    assert out.count("    Let me look around the workspace first.\n") == 1
    assert "Goal round 2/20" not in out
    # The model picker lists more than one provider, and a turn runs on the second one.
    assert "  lab: lab/offline-lab" in out and "  claude: claude/claude-sonnet-5-5" in out
    assert "> hello from the lab" in out
    # The listing is the project's files only: no state database of the demo's own.
    assert "2 files matching '*':\n    README.md\n    src/calc.py\n" in out
    assert ".defect" not in out
