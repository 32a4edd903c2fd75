"""`defect exec --input-format stream-json`: the prompt, then steers, as JSON lines on stdin.

Through the real process and the strict fake API: a message written while a long command runs
reaches the model after the command's result, in the same user message, on the next request;
a bad line is one line on stderr and loses nothing else; a message written after the turn
ended runs as a turn of its own, and the run ends at the end of input. The timing is the
test's: the command waits for a file the test writes, and the model's second answer is only
asked for once the test has seen what it waits for.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from defect_cli.exec_input import BadLine, parse_line
from defect_core.model import TextBlock
from defect_fakeapi import DEFAULT_API_KEY, FakeProvider, Reply
from tests.support.acp_harness import agent_env

TIMEOUT = 30.0


def user_line(text: str) -> str:
    return json.dumps({"type": "user", "message": {"role": "user", "content": text}}) + "\n"


def start(tmp_path: Path, fake: FakeProvider, *extra: str) -> subprocess.Popen[str]:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    env = agent_env(
        DEFECT_PROVIDER="anthropic",
        ANTHROPIC_BASE_URL=fake.url,
        ANTHROPIC_API_KEY=DEFAULT_API_KEY,
        DEFECT_STATE_DIR=str(tmp_path / "state"),
        DEFECT_RETRIES="0",
        XDG_CONFIG_HOME=str(tmp_path / "xdg"),
    )
    args = ["--input-format", "stream-json", "--output-format", "stream-json", "--mode", "yolo"]
    return subprocess.Popen(
        [sys.executable, "-m", "defect_cli", "exec", *args, *extra],
        cwd=work,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for(what: str, check: Any) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def model_calls(fake: FakeProvider) -> list[Any]:
    return [r for r in fake.requests if r.route == "anthropic"]


def test_a_steer_on_stdin_reaches_the_model_after_the_commands_result(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    command = "touch started; while [ ! -f go ]; do sleep 0.02; done; echo built"
    with FakeProvider() as fake:
        fake.enqueue(Reply.tool_use(None, "bash", {"command": command}), Reply.text("Both."))
        proc = start(tmp_path, fake)
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(user_line("Build it."))
        proc.stdin.flush()
        wait_for("the command to run", (work / "started").exists)
        proc.stdin.write("this is not json\n")
        proc.stdin.write(user_line("Then run the tests."))
        proc.stdin.flush()
        seen: list[dict[str, Any]] = []
        while not any(e.get("type") == "steer" for e in seen):  # the steer is stored
            line = proc.stdout.readline()
            assert line, "exec ended before it took the steer"
            seen.append(json.loads(line))
        (work / "go").write_text("")
        out, err = proc.communicate(timeout=TIMEOUT)  # closes stdin: the end of input
        assert proc.returncode == 0, err
        events = seen + [json.loads(line) for line in out.splitlines()]
        assert events[-1]["type"] == "result" and events[-1]["stop_reason"] == "end_turn"
        assert "defect exec: stdin line 2: not JSON" in err
        calls = model_calls(fake)
        assert len(calls) == 2 and all(not r.rejected for r in calls)
        last = calls[1].body["messages"][-1]
        assert [b["type"] for b in last["content"]] == ["tool_result", "text"]
        assert last["content"][1]["text"] == "Then run the tests."
        assert "built" in json.dumps(last["content"][0])


def test_a_message_after_the_turn_runs_as_a_turn_and_input_end_ends_the_run(
    tmp_path: Path,
) -> None:
    with FakeProvider() as fake:
        fake.enqueue(Reply.text("First."), Reply.text("Second."))
        proc = start(tmp_path, fake)
        assert proc.stdin is not None
        proc.stdin.write(user_line("One."))
        proc.stdin.flush()
        fake.wait_until(lambda rs: any(r.route == "anthropic" and r.done.is_set() for r in rs))
        proc.stdin.write(user_line("Two."))
        out, err = proc.communicate(timeout=TIMEOUT)  # closes stdin: the end of input
        assert proc.returncode == 0, err
        texts = "".join(e["text"] for e in map(json.loads, out.splitlines()) if e["type"] == "text")
        assert texts == "First.Second."
        second = model_calls(fake)[1].body["messages"]
        assert [m["role"] for m in second] == ["user", "assistant", "user"]


def test_no_message_on_stdin_is_a_usage_error(tmp_path: Path) -> None:
    with FakeProvider() as fake:
        proc = start(tmp_path, fake)
        _, err = proc.communicate("", timeout=TIMEOUT)
        assert proc.returncode == 2
        assert "no message on stdin" in err
        dash = start(tmp_path, fake, "-")
        _, err = dash.communicate(user_line("hi"), timeout=TIMEOUT)
        assert dash.returncode == 2 and "stdin holds messages" in err
        assert model_calls(fake) == []


def test_a_line_is_a_user_message_or_says_why_not() -> None:
    assert parse_line(user_line("hi")) == [TextBlock(text="hi")]
    blocks = [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]
    line = json.dumps({"type": "user", "message": {"role": "user", "content": blocks}})
    assert parse_line(line) == [TextBlock(text="a"), TextBlock(text="b")]
    assert parse_line("   \n") is None
    for bad, why in (
        ("[1]", "expected"),
        ('{"type": "assistant"}', "expected"),
        ('{"type": "user", "message": {"role": "user", "content": 3}}', "content"),
        ('{"type": "user", "message": {"role": "user", "content": " "}}', "empty"),
        ('{"type": "user", "message": {"content": [{"type": "video"}]}}', "content[0]"),
    ):
        try:
            parse_line(bad)
        except BadLine as exc:
            assert why in str(exc)
        else:
            raise AssertionError(f"{bad} was taken")
