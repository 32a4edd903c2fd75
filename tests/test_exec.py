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
    replies: list[dict[str, Any]] | None,
    *args: str,
    user_config: str = "",
    stdin: str | None = None,
    **env: str,
) -> subprocess.CompletedProcess[str]:
    """Run `defect exec ARGS` in `tmp_path/work` with the offline model playing `replies`
    (None: its built-in demo behaviour); `stdin` is written to its standard input (else it
    reads /dev/null)."""
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    script = tmp_path / "script.json"
    script.write_text(json.dumps(replies))
    config_home = tmp_path / "xdg"
    (config_home / "defect").mkdir(parents=True, exist_ok=True)
    (config_home / "defect" / "config.toml").write_text(user_config)
    environment = agent_env(
        **{
            **({"DEFECT_SCRIPT": str(script)} if replies is not None else {}),
            "DEFECT_STATE_DIR": str(tmp_path / "state"),
            "XDG_CONFIG_HOME": str(config_home),
            "DEFECT_LOG_LEVEL": "warning",
            **env,
        }
    )
    return subprocess.run(
        [sys.executable, "-m", "defect_cli", "exec", *args],
        cwd=work,
        env=environment,
        input=stdin,
        stdin=subprocess.DEVNULL if stdin is None else None,
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
    assert run.stdout == "Reading.\n\nIt says: remember the milk.\n"
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
    assert denied.returncode == 6, denied.stderr
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
    assert run.stdout == "Still at it.\n\nStill at it.\n"
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
        [sys.executable, "-m", "defect_cli", "exec", "--help"],
        cwd=REPO,
        env=agent_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert "--goal" in help_text and "130 cancelled" in help_text
    assert "6 every tool call refused" in help_text and "--log-format" in help_text
    top = subprocess.run(
        [sys.executable, "-m", "defect_cli", "--help"],
        cwd=REPO,
        env=agent_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert "DEFECT_TERMINAL_SHELL" in top


def test_sigint_cancels_the_turn_and_exits_130(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    script = tmp_path / "script.json"
    script.write_text(json.dumps([{"text": "counting " * 200, "chunk_delay_ms": 50}]))
    proc = subprocess.Popen(
        [sys.executable, "-m", "defect_cli", "exec", "Count slowly"],
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


def test_a_commands_result_reaches_every_output_whole(tmp_path: Path) -> None:
    command = "printf 'one\\n```\\ntwo\\n'; exit 3"  # a fence inside the output, too
    replies = [
        {"tool_calls": [{"name": "bash", "input": {"command": command}, "id": "toolu_sh"}]},
        {"text": "done"},
    ]
    whole = "one\n```\ntwo\n[exit code: 3]"
    stream = defect_exec(tmp_path, replies, "--mode", "yolo", "--output", "stream-json", "x")
    assert stream.returncode == 0, stream.stderr
    [update] = [e for e in json_lines(stream.stdout) if e["type"] == "tool_call_update"]
    assert update["status"] == "failed" and update["text"] == whole
    [shown] = update["content"]
    assert shown["type"] == "text" and "two\n" in shown["text"]
    [call] = json_lines(stream.stdout)[-1]["tool_calls"]
    assert call["id"] == "toolu_sh" and call["text"] == whole and call["denied"] is False

    single = defect_exec(tmp_path, replies, "--mode", "yolo", "--output", "json", "x")
    [result] = json_lines(single.stdout)
    assert [c["text"] for c in result["tool_calls"]] == [whole]

    text = defect_exec(tmp_path, replies, "--mode", "yolo", "x")
    assert text.returncode == 0 and text.stdout == "done\n"
    assert "✗ printf" in text.stderr
    assert "    one\n    ```\n    two\n    [exit code: 3]\n" in text.stderr


def test_text_mode_cuts_a_long_result_and_says_how_much_is_left_out(tmp_path: Path) -> None:
    replies = [
        {"tool_calls": [{"name": "bash", "input": {"command": "seq 1 50"}}]},
        {"text": "counted"},
    ]
    text = defect_exec(tmp_path, replies, "--mode", "yolo", "Count")
    assert text.returncode == 0, text.stderr
    assert "    20\n" in text.stderr and "    21\n" not in text.stderr
    assert "[… 31 more line(s)" in text.stderr  # 30 numbers and the exit line
    assert "--output stream-json carries the whole result" in text.stderr

    stream = defect_exec(tmp_path, replies, "--mode", "yolo", "--output", "stream-json", "C")
    [update] = [e for e in json_lines(stream.stdout) if e["type"] == "tool_call_update"]
    assert update["text"].splitlines()[-2:] == ["50", "[exit code: 0]"]


def test_the_texts_of_successive_requests_are_separated(tmp_path: Path) -> None:
    replies = [
        {"text": "Let me check.", "tool_calls": [{"name": "glob", "input": {"pattern": "*"}}]},
        {"text": "Three lines."},
    ]
    text = defect_exec(tmp_path, replies, "Check")
    assert text.stdout == "Let me check.\n\nThree lines.\n"
    single = defect_exec(tmp_path, replies, "--output", "json", "Check")
    assert json_lines(single.stdout)[0]["text"] == "Let me check.\n\nThree lines."


def test_the_prompt_can_come_from_stdin(tmp_path: Path) -> None:
    dash = defect_exec(tmp_path, [], "-", stdin="hello from a pipe\n")
    piped = defect_exec(tmp_path, [], stdin="hello from a pipe\n")
    for run in (dash, piped):
        assert run.returncode == 0, run.stderr
        assert run.stdout == "(the script has no more replies)\n"
    saved = SqliteStore(tmp_path / "state" / "sessions.sqlite3")
    try:
        sessions = saved.list(str(tmp_path / "work"), None).sessions
        prompts = [saved.load(s.id).transcript[0].text() for s in sessions]
    finally:
        saved.close()
    assert prompts == ["hello from a pipe\n"] * 2

    empty = defect_exec(tmp_path, [])  # stdin is /dev/null: nothing to read
    assert empty.returncode == 2 and "prompt read from stdin is empty" in empty.stderr


def test_calls_refused_for_want_of_a_person_say_so_and_exit_6(tmp_path: Path) -> None:
    write = {"name": "write_file", "input": {"path": "out.txt", "content": "x\n"}}
    replies = [{"tool_calls": [write]}, {"text": "Could not."}]
    run = defect_exec(tmp_path, replies, "--output", "json", "Write out.txt")
    assert run.returncode == 6, run.stderr
    assert run.stderr.count("Write out.txt") == 2  # announced, then denied once
    assert "the user rejected" not in run.stderr
    assert "every tool call was refused" in run.stderr
    [result] = json_lines(run.stdout)
    assert result["exit_code"] == 6 and result["tool_calls"][0]["denied"] is True
    saved = SqliteStore(tmp_path / "state" / "sessions.sqlite3")
    try:
        [summary] = saved.list(str(tmp_path / "work"), None).sessions
        [told] = saved.load(summary.id).transcript[2].tool_results()
    finally:
        saved.close()
    assert told.is_error and "no one is there to approve it" in str(told.content)
    assert "user rejected" not in str(told.content)

    # One call ran: the run did part of its job, and ends as its turn ended.
    glob = {"name": "glob", "input": {"pattern": "*"}}
    mixed = defect_exec(tmp_path, [{"tool_calls": [glob, write]}, {"text": "Half."}], "Go")
    assert mixed.returncode == 0, mixed.stderr


def test_stderr_is_for_a_person_unless_json_logs_are_asked_for(tmp_path: Path) -> None:
    failing = [{"error": {"message": "the model is gone", "kind": "api_error"}}]
    plain = defect_exec(tmp_path, failing, "Go", DEFECT_RETRIES="0", DEFECT_LOG_LEVEL="")
    assert plain.returncode == 1
    assert plain.stderr == "defect exec: the turn failed: the model is gone\n"

    asked = defect_exec(tmp_path, failing, "--log-level", "warning", "Go", DEFECT_RETRIES="0")
    logged = [line for line in asked.stderr.splitlines() if "model_call_failed" in line]
    assert logged and all(line.startswith("defect: warning: model_call_failed") for line in logged)
    assert not any(line.startswith("{") for line in asked.stderr.splitlines())

    json_logs = defect_exec(
        tmp_path, failing, "--log-format", "json", "Go", DEFECT_RETRIES="0", DEFECT_LOG_LEVEL=""
    )
    records = [json.loads(line) for line in json_logs.stderr.splitlines() if line[:1] == "{"]
    assert [r["event"] for r in records] == ["model_call_failed"]

    # A store that cannot be opened: the session's notice says so, once.
    (tmp_path / "a-file").write_text("")
    unsaved = defect_exec(
        tmp_path,
        [{"text": "Hi."}],
        "Go",
        DEFECT_STATE_DIR=str(tmp_path / "a-file"),
        DEFECT_LOG_LEVEL="",
    )
    assert unsaved.returncode == 0 and unsaved.stdout == "Hi.\n"
    assert unsaved.stderr.count("cannot be opened for writing") == 1
    assert unsaved.stderr.startswith("> This session is not being saved")


def test_a_bad_log_level_or_an_unknown_model_stops_exec(tmp_path: Path) -> None:
    bad_level = defect_exec(tmp_path, [{"text": "Hi."}], "Go", DEFECT_LOG_LEVEL="loud")
    assert bad_level.returncode == 2 and bad_level.stdout == ""
    assert "DEFECT_LOG_LEVEL='loud' is not a log level" in bad_level.stderr

    unknown = defect_exec(tmp_path, [{"text": "Hi."}], "--model", "gpt-nothing", "Go")
    assert unknown.returncode == 2 and unknown.stdout == ""
    assert "invalid value 'gpt-nothing' for model; choose one of: scripted/offline" in (
        unknown.stderr
    )

    offered = defect_exec(tmp_path, [{"text": "Hi."}], "--model", "offline", "Go")
    assert offered.returncode == 0 and offered.stdout == "Hi.\n"


def test_the_offline_model_reaches_a_goal_with_goal_done(tmp_path: Path) -> None:
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "notes.txt").write_text("one\n")
    run = defect_exec(tmp_path, None, "--output", "json", "--goal", "run `ls` here")
    assert run.returncode == 0, run.stderr
    [result] = json_lines(run.stdout)
    assert result["goal"]["outcome"] == "reached" and result["goal"]["round"] == 1
    assert [c["name"] for c in result["tool_calls"]] == ["bash", "goal_done"]
    # The command of the objective was asked for, and refused: nobody to approve it in `ask`.
    assert result["tool_calls"][0]["denied"] is True
    assert result["goal"]["summary"] == "run `ls` here: done offline (bash failed)."

    allowed = defect_exec(tmp_path, None, "--mode", "yolo", "--goal", "run `ls` here")
    assert allowed.returncode == 0, allowed.stderr
    assert "    notes.txt\n" in allowed.stderr and "Goal round 2/20" not in allowed.stderr
    assert allowed.stdout.endswith("The goal is reached.\n")


def test_a_read_outside_the_workspace_says_how_to_allow_it(tmp_path: Path) -> None:
    (tmp_path / "outside.txt").write_text("far away\n")
    read = {"name": "read_file", "input": {"path": "../outside.txt"}}
    replies = [{"tool_calls": [read]}, {"text": "Refused."}]
    run = defect_exec(tmp_path, replies, "--output", "stream-json", "Read it")
    [update] = [e for e in json_lines(run.stdout) if e["type"] == "tool_call_update"]
    assert update["status"] == "failed"
    assert "set allow_read_outside = true in ~/.config/defect/config.toml" in update["text"]

    allowed = defect_exec(
        tmp_path, replies, "--output", "json", "Read it", user_config="allow_read_outside = true\n"
    )
    [result] = json_lines(allowed.stdout)
    assert "far away" in result["tool_calls"][0]["text"]


def test_a_reader_that_goes_away_cancels_the_run_without_a_traceback(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    script = tmp_path / "script.json"
    script.write_text(json.dumps([{"text": "word " * 2000, "chunk_delay_ms": 1}]))
    proc = subprocess.Popen(
        [sys.executable, "-m", "defect_cli", "exec", "--output", "stream-json", "Talk"],
        cwd=work,
        env=agent_env(DEFECT_SCRIPT=str(script), DEFECT_STATE_DIR=str(tmp_path / "state")),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stderr is not None
        assert json.loads(proc.stdout.readline())["type"] == "text"  # `| head -1`
        proc.stdout.close()
        errors = proc.stderr.read()
        proc.wait(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130
    assert "Traceback" not in errors and "BrokenPipeError" not in errors


def test_trust_project_applies_the_projects_settings_and_without_it_stderr_says_what_not(
    tmp_path: Path,
) -> None:
    work = tmp_path / "work"
    (work / ".defect").mkdir(parents=True)
    marker = tmp_path / "mcp-ran"
    server = {"command": "/bin/sh", "args": ["-c", f"touch '{marker}'"]}
    (work / ".mcp.json").write_text(json.dumps({"mcpServers": {"x": server}}))
    (work / ".defect" / "config.toml").write_text("allow_read_outside = true\n")

    run = defect_exec(tmp_path, [{"text": "ok"}], "hi")
    assert run.returncode == 0, run.stderr
    assert not marker.exists(), "an untrusted project's server ran under exec"
    assert "mcpServers.x (.mcp.json): the project is not trusted" in run.stderr
    assert "allow_read_outside (.defect/config.toml): the project is not trusted" in run.stderr
    assert "--trust-project" in run.stderr

    run = defect_exec(tmp_path, [{"text": "ok"}], "--trust-project", "hi")
    assert run.returncode == 0, run.stderr
    assert marker.exists(), "--trust-project starts the project's servers"
    assert "not trusted" not in run.stderr
    assert not (tmp_path / "xdg" / "defect" / "trust.toml").exists(), "nothing is recorded"
