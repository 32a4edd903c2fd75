"""`defect exec`, as a real subprocess: one turn (or a goal) without an editor.

The answer goes to stdout and the tool activity to stderr; `--output json` and `stream-json`
print JSON lines; the exit status says how the turn ended; a question the mode would ask is
denied (unless `--mode yolo`); `--goal` reaches a scripted goal in N rounds or runs out of them;
the session is saved where an editor's would be; and configured MCP servers start in the
background, the turn waiting for them and saying once which one failed.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from defect_core.store import SqliteStore
from tests.support.acp_harness import REPO, agent_env


def defect_exec(
    tmp_path: Path,
    replies: list[dict[str, Any]],
    *args: str,
    user_config: str = "",
    **env: str,
) -> subprocess.CompletedProcess[str]:
    """Run `defect exec ARGS` in `tmp_path/work` with the offline model playing `replies`."""
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    script = tmp_path / "script.json"
    script.write_text(json.dumps(replies))
    config_home = tmp_path / "xdg"
    (config_home / "defect").mkdir(parents=True, exist_ok=True)
    (config_home / "defect" / "config.toml").write_text(user_config)
    environment = agent_env(
        DEFECT_SCRIPT=str(script),
        DEFECT_STATE_DIR=str(tmp_path / "state"),
        XDG_CONFIG_HOME=str(config_home),
        DEFECT_LOG_LEVEL="warning",
        **env,
    )
    return subprocess.run(
        [sys.executable, "-m", "defect_acp", "exec", *args],
        cwd=work,
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def json_lines(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines()]


def test_the_answer_goes_to_stdout_and_the_tool_activity_to_stderr(tmp_path: Path) -> None:
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "notes.txt").write_text("remember the milk\n")
    replies = [
        {
            "text": "Reading. ",
            "tool_calls": [{"name": "read_file", "input": {"path": "notes.txt"}}],
        },
        {"text": "It says: remember the milk."},
    ]
    run = defect_exec(tmp_path, replies, "What do the notes say?")
    assert run.returncode == 0, run.stderr
    assert run.stdout == "Reading. It says: remember the milk.\n"
    assert "→ Read notes.txt" in run.stderr and "✓ Read notes.txt" in run.stderr
    assert "remember the milk." not in run.stderr

    saved = SqliteStore(tmp_path / "state" / "sessions.sqlite3")
    try:
        [summary] = saved.list(str(tmp_path / "work"), None).sessions
        stored = saved.load(summary.id)
    finally:
        saved.close()
    assert summary.id.startswith("exec-")
    assert [m.role for m in stored.transcript] == ["user", "assistant", "user", "assistant"]


def test_json_outputs_are_json_lines_ending_with_the_result(tmp_path: Path) -> None:
    replies = [
        {"tool_calls": [{"name": "glob", "input": {"pattern": "*"}, "id": "toolu_glob"}]},
        {"text": "Nothing here."},
    ]
    stream = defect_exec(tmp_path, replies, "--output", "stream-json", "List the files")
    assert stream.returncode == 0, stream.stderr
    events = json_lines(stream.stdout)
    kinds = [e["type"] for e in events]
    assert kinds[0] == "tool_call" and events[0]["id"] == "toolu_glob"
    assert events[0]["name"] == "glob" and events[0]["input"] == {"pattern": "*"}
    assert "tool_call_update" in kinds and "text" in kinds
    result = events[-1]
    assert kinds.count("result") == 1 and result["type"] == "result"
    assert result["stop_reason"] == "end_turn" and result["exit_code"] == 0
    assert result["text"] == "Nothing here." and result["usage"]["requests"] == 2

    single = defect_exec(tmp_path, [{"text": "Hello."}], "--output", "json", "Hi")
    [only] = json_lines(single.stdout)
    assert only["type"] == "result" and only["text"] == "Hello." and only["goal"] is None


def test_a_question_the_mode_would_ask_is_denied_unless_yolo(tmp_path: Path) -> None:
    replies = [
        {"tool_calls": [{"name": "write_file", "input": {"path": "out.txt", "content": "x\n"}}]},
        {"text": "Done or not."},
    ]
    denied = defect_exec(tmp_path, replies, "Write out.txt")
    assert denied.returncode == 0, denied.stderr
    assert not (tmp_path / "work" / "out.txt").exists()
    assert "denied: Write out.txt" in denied.stderr and "--mode yolo" in denied.stderr

    allowed = defect_exec(tmp_path, replies, "--mode", "yolo", "Write out.txt")
    assert allowed.returncode == 0, allowed.stderr
    assert (tmp_path / "work" / "out.txt").read_text() == "x\n"
    assert "denied" not in allowed.stderr


def test_exit_codes_say_how_the_turn_ended(tmp_path: Path) -> None:
    loop = [{"tool_calls": [{"name": "glob", "input": {"pattern": "*"}}]}] * 3
    limited = defect_exec(tmp_path, loop, "Go", DEFECT_MAX_TURN_REQUESTS="2")
    assert limited.returncode == 3, limited.stderr

    failing = [{"error": {"message": "the model is gone", "kind": "api_error"}}]
    failed = defect_exec(tmp_path, failing, "Go", DEFECT_RETRIES="0")
    assert failed.returncode == 1
    assert "the model is gone" in failed.stderr and failed.stdout == ""

    cut = defect_exec(tmp_path, [{"text": "Half a", "stop_reason": "max_tokens"}], "Go")
    assert cut.returncode == 4 and cut.stdout == "Half a\n"

    usage = defect_exec(tmp_path, [], "")
    assert usage.returncode == 2 and "give a prompt" in usage.stderr

    broken = defect_exec(tmp_path, [], "Go", user_config="modle = 1\n")
    assert broken.returncode == 2 and "line 1: modle: unknown key" in broken.stderr


def test_a_goal_is_reached_in_three_rounds(tmp_path: Path) -> None:
    replies = [
        {"text": "Round one: looked around."},
        {"text": "Round two: fixed half."},
        {"tool_calls": [{"name": "goal_done", "input": {"summary": "All fixed."}}]},
        {"text": "All fixed."},
    ]
    run = defect_exec(tmp_path, replies, "--output", "json", "--goal", "fix everything")
    assert run.returncode == 0, run.stderr
    [result] = json_lines(run.stdout)
    assert result["stop_reason"] == "end_turn"
    assert result["goal"] == {
        "objective": "fix everything",
        "max_rounds": 20,
        "round": 3,
        "outcome": "reached",
        "summary": "All fixed.",
    }
    for n in (1, 2, 3):
        assert f"Goal round {n}/20" in run.stderr
    assert "Goal round 4/20" not in run.stderr


def test_a_goal_out_of_rounds_exits_3(tmp_path: Path) -> None:
    replies = [{"text": "Still at it."}] * 3
    run = defect_exec(
        tmp_path, replies, "--goal", "count the stars", user_config="goal_max_rounds = 2\n"
    )
    assert run.returncode == 3, run.stderr
    assert run.stdout == "Still at it.Still at it.\n"
    assert "Goal round 2/2" in run.stderr


def test_mcp_servers_start_in_the_background_and_a_failure_is_said_once(
    tmp_path: Path,
) -> None:
    servers = REPO / "tests" / "mcp_servers"
    user_config = "".join(
        f'[mcp.servers.{name}]\ncommand = "{sys.executable}"\nargs = ["{servers / script}"]\n'
        for name, script in (("echo", "echo_server.py"), ("broken", "broken_server.py"))
    )
    replies = [
        {"tool_calls": [{"name": "mcp__echo__echo", "input": {"text": "from exec"}}]},
        {"text": "The server echoed."},
    ]
    run = defect_exec(tmp_path, replies, "Echo something.", user_config=user_config)
    assert run.returncode == 0, run.stderr
    assert run.stdout == "The server echoed.\n"
    assert "✓ echo: echo (text=from exec)" in run.stderr, run.stderr
    # Told once (the log line on stderr says `mcp_server_failed`, not this sentence), whether
    # the failure came before the session opened or while the turn waited.
    told = "> MCP server 'broken' failed to start: exited during start-up: broken_server:"
    assert run.stderr.count(told) == 1, run.stderr


def test_exec_runs_from_a_repository_checkout() -> None:
    help_text = subprocess.run(
        [sys.executable, "-m", "defect_acp", "exec", "--help"],
        cwd=REPO,
        env=agent_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert "--goal" in help_text and "130 cancelled" in help_text


def test_sigint_cancels_the_turn_and_exits_130(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    script = tmp_path / "script.json"
    script.write_text(json.dumps([{"text": "counting " * 200, "chunk_delay_ms": 50}]))
    proc = subprocess.Popen(
        [sys.executable, "-m", "defect_acp", "exec", "Count slowly"],
        cwd=work,
        env=agent_env(DEFECT_SCRIPT=str(script), DEFECT_STATE_DIR=str(tmp_path / "state")),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.read(9) == "counting "  # the turn is streaming
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130
    assert rest.count("counting") < 199, "the stream stopped when cancelled"
