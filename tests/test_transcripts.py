"""The transcript suite (tests/transcripts/*.jsonl) and the transcript runner and recorder.

Every transcript in tests/transcripts/ is played against the real `defect acp` over stdio on
the offline model, with every agent message checked against the ACP schema on the way. The
runner's own promises are pinned here too: a failing step names its step and line and shows
the expected and the actual message, exit 1; a malformed transcript names its line; a hanging
one fails at its timeout and leaves no process behind; a session recorded through the proxy
replays green.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from defect_transcript import (
    Outcome,
    RunOptions,
    TranscriptError,
    Variables,
    load_transcript,
    match,
    parse_transcript,
    run_transcript,
)
from tests.support.acp_harness import REPO, agent_env
from tests.support.acp_schema import acp_schema

pytestmark = pytest.mark.anyio

SUITE = sorted((Path(__file__).parent / "transcripts").glob("*.jsonl"))
HEADER = '{"transcript": 1, "timeout": 10}'
HANDSHAKE = [
    '{"send": {"id": 1, "method": "initialize", "params": {"protocolVersion": 1}}}',
    '{"expect": {"id": 1, "result": {"protocolVersion": 1}}}',
    '{"send": {"id": 2, "method": "session/new", "params": '
    '{"cwd": "${workspace}", "mcpServers": []}}}',
    '{"expect": {"id": 2, "result": {"sessionId": {"$capture": "sid"}}}}',
]


def check_schema(message: dict[str, Any], answered: str | None) -> None:
    acp_schema().check_agent_message(message, answered)


async def play(path: Path, **options: Any) -> tuple[Outcome, str]:
    out = io.StringIO()
    outcome = await run_transcript(path, RunOptions(out=out, on_message=check_schema, **options))
    return outcome, out.getvalue()


def write(path: Path, *lines: str) -> Path:
    path.write_text("\n".join(lines) + "\n")
    return path


def cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "defect_transcript", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        env=agent_env(),
    )


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state != "Z"


# --- the suite ----------------------------------------------------------------------------


def test_the_suite_covers_the_main_flows() -> None:
    names = {p.stem for p in SUITE}
    assert {
        "hello",
        "tool_loop",
        "permissions",
        "cancel",
        "delegated_fs",
        "delegated_terminal",
        "errors",
        "model_error",
        "load_after_kill",
    } <= names


@pytest.mark.parametrize("path", SUITE, ids=[p.stem for p in SUITE])
async def test_transcript(path: Path) -> None:
    outcome, report = await play(path)
    if outcome.status == "skipped":
        pytest.skip(outcome.detail)
    assert outcome.status == "passed", report
    assert not any(alive(pid) for pid in outcome.agent_pids)


# --- the runner ---------------------------------------------------------------------------


async def test_a_failing_expectation_exits_1_naming_the_step_line_expected_and_actual(
    tmp_path: Path,
) -> None:
    path = write(
        tmp_path / "wrong.jsonl",
        HEADER,
        *HANDSHAKE,
        '{"send": {"id": 3, "method": "session/prompt", "params": '
        '{"sessionId": "${sid}", "prompt": [{"type": "text", "text": "hello"}]}}}',
        '{"expect": {"id": 3, "result": {"stopReason": "max_tokens"}}}',
    )
    result = cli("run", str(path))
    assert result.returncode == 1, result.stdout + result.stderr
    out = result.stdout
    assert f"FAIL {path} — step 6 (line 7): expect" in out
    assert 'expected: {"id": 3, "result": {"stopReason": "max_tokens"}}' in out
    assert '"stopReason": "end_turn"' in out.split("actual:", 1)[1]
    assert 'at $.result.stopReason: expected "max_tokens", got "end_turn"' in out
    assert "unexpected message: the agent answered id 3" in out
    assert "0 passed, 1 failed, 0 skipped" in out


async def test_a_malformed_line_is_reported_with_its_line_number(tmp_path: Path) -> None:
    path = write(
        tmp_path / "broken.jsonl",
        "// a comment",
        HEADER,
        '{"send": {"id": 1, "method": "initialize", "params": {}}}',
        '{"expect": {"id": 1,, }}',
    )
    result = cli("run", str(path))
    assert result.returncode == 1
    assert f"{path}:4: not valid JSON" in result.stdout
    with pytest.raises(TranscriptError) as caught:
        load_transcript(path)
    assert caught.value.line == 4


@pytest.mark.parametrize(
    ("lines", "line", "message"),
    [
        (['{"expect": {"id": 1}}', HEADER], 2, "header"),
        (['{"sned": {"method": "x"}}'], 1, "a step needs exactly one of"),
        (['{"expect": {"id": 1}, "timout": 3}'], 1, "unknown key 'timout'"),
        (['{"send": {"method": "x", "params": {"sessionId": "${sid}"}}}'], 1, "${sid} is used"),
        (['{"expect": {"a": {"$regex": "("}}}'], 1, "bad $regex"),
        (['{"expect": {"a": {"$regexp": "x"}}}'], 1, "unknown operator '$regexp'"),
        (['{"reply": {"outcome": "x"}}'], 1, '"result" or "error"'),
        (['{"transcript": 2}', '{"sleep": 1}'], 1, "format version"),
        (
            ['{"transcript": 1, "provider_fake": {"args": "--chat-no-key"}}', '{"sleep": 1}'],
            1,
            '"provider_fake.args" must be a list',
        ),
        (['{"timeout": 3}', '{"sleep": 1}'], 1, '"transcript": 1'),
        (["[1, 2]"], 1, "one JSON object"),
        (["// nothing but a comment"], 1, "no steps"),
    ],
)
def test_malformed_transcripts_name_the_line(lines: list[str], line: int, message: str) -> None:
    with pytest.raises(TranscriptError) as caught:
        parse_transcript("\n".join(lines), "t.jsonl")
    assert caught.value.line == line
    assert message in str(caught.value)
    assert str(caught.value).startswith(f"t.jsonl:{line}: ")


async def test_a_hanging_transcript_fails_at_its_timeout_and_leaves_no_process(
    tmp_path: Path,
) -> None:
    path = write(
        tmp_path / "hangs.jsonl",
        '{"transcript": 1, "offline_script": [{"text": "late", "delay_ms": 60000}]}',
        *HANDSHAKE,
        '{"send": {"id": 3, "method": "session/prompt", "params": '
        '{"sessionId": "${sid}", "prompt": [{"type": "text", "text": "hello"}]}}}',
        '{"expect": {"id": 3, "result": {"stopReason": "end_turn"}}, "timeout": 1}',
    )
    started = time.monotonic()
    outcome, report = await play(path)
    assert outcome.status == "failed"
    assert time.monotonic() - started < 15, (
        "the run must end at the step timeout, not when the model answers (60 s)"
    )
    assert "step 6 (line 7): expect" in report
    assert "timed out after 1 s" in report
    assert outcome.agent_pids and not any(alive(pid) for pid in outcome.agent_pids)


async def test_a_hung_agent_and_its_children_are_killed_with_their_process_group(
    tmp_path: Path,
) -> None:
    pid_file = tmp_path / "child.pid"
    program = (
        "import subprocess, sys, time; "
        "child = subprocess.Popen(['sleep', '60']); "
        "open(sys.argv[1], 'w').write(str(child.pid)); time.sleep(60)"
    )
    header = {"transcript": 1, "timeout": 1, "agent": {"command": ["${python}", "-c", program]}}
    header["agent"]["args"] = [str(pid_file)]
    path = write(
        tmp_path / "silent.jsonl",
        json.dumps(header),
        '{"send": {"id": 1, "method": "initialize", "params": {"protocolVersion": 1}}}',
        '{"expect": {"id": 1, "result": "<any>"}}',
    )
    outcome, report = await play(path)
    assert outcome.status == "failed" and "timed out after 1 s" in report
    assert "actual:   (no message)" in report
    child = int(pid_file.read_text())
    for _ in range(50):
        if not alive(child):
            break
        await asyncio.sleep(0.05)
    assert not alive(child), "the agent's child outlived the run"
    assert not any(alive(pid) for pid in outcome.agent_pids)


async def test_skipped_transcripts_are_reported_and_do_not_fail(tmp_path: Path) -> None:
    skipped = write(tmp_path / "later.jsonl", '{"transcript": 1, "skip": "not yet"}')
    missing = write(
        tmp_path / "needs.jsonl",
        '{"transcript": 1, "requires": ["no_such_module_here"]}',
        '{"sleep": 0}',
    )
    result = cli("run", str(skipped), str(missing))
    assert result.returncode == 0, result.stdout
    assert f"SKIP {skipped}: not yet" in result.stdout
    assert "requires the module no_such_module_here" in result.stdout
    assert "0 passed, 0 failed, 2 skipped" in result.stdout


async def test_an_unexpected_agent_request_fails_and_says_how_to_answer_it(
    tmp_path: Path,
) -> None:
    path = write(
        tmp_path / "unanswered.jsonl",
        '{"transcript": 1, "timeout": 5, "offline_script": [{"tool_calls": '
        '[{"name": "write_file", "input": {"path": "a.txt", "content": "x"}}]}]}',
        *HANDSHAKE,
        '{"send": {"id": 3, "method": "session/prompt", "params": '
        '{"sessionId": "${sid}", "prompt": [{"type": "text", "text": "write"}]}}}',
        '{"expect": {"id": 3, "result": {"stopReason": "end_turn"}}}',
    )
    outcome, report = await play(path)
    assert outcome.status == "failed"
    assert "the agent sent a session/request_permission request" in report
    assert "reply step" in report


def test_patterns_match_partially_and_capture() -> None:
    variables = Variables({"workspace": "/w", "sid": "sess_1"})
    message = {
        "id": 3,
        "result": {"sessionId": "sess_1", "path": "/w/a.txt", "n": 2, "ok": True, "list": [1, 2]},
    }
    assert match({"id": 3}, message, variables) is None
    assert (
        match({"result": {"sessionId": "${sid}", "path": "${workspace}/a.txt"}}, message, variables)
        is None
    )
    assert (
        match({"result": {"n": 2.0, "ok": "<any>", "gone": "<absent>"}}, message, variables) is None
    )
    assert match({"result": {"ok": 1}}, message, variables) is not None, "true is not 1"
    assert match({"result": {"list": [1]}}, message, variables) is not None, "arrays: same length"
    assert match({"result": {"list": {"$contains": [2]}}}, message, variables) is None
    assert match({"result": {"path": {"$regex": "^${workspace}/"}}}, message, variables) is None
    assert match({"result": {"n": {"$type": "integer"}}}, message, variables) is None
    assert match({"result": {"$exact": {"n": 2}}}, message, variables) is not None
    assert match({"result": {"n": {"$any_of": [1, 2]}}}, message, variables) is None
    assert match({"result": {"n": {"$not": 2}}}, message, variables) is not None
    assert match({"result": {"path": {"$eq": "<any>"}}}, message, variables) is not None
    captures: dict[str, Any] = {}
    assert (
        match({"result": {"sessionId": {"$capture": "other"}}}, message, variables, captures)
        is None
    )
    assert captures == {"other": "sess_1"}
    problem = match({"result": {"missing": 1}}, message, variables)
    assert problem is not None and str(problem) == "at $.result.missing: missing"
    assert Variables({"x": {"a": [5]}}).substitute("${x.a.0} and $${x}") == "5 and ${x}"


# --- the recorder -------------------------------------------------------------------------


async def test_the_recorder_proxies_a_client_and_the_recording_replays(tmp_path: Path) -> None:
    """Proxy mode: the test is the editor on the recorder's stdin/stdout, and cancels a turn
    mid-stream; the recording normalises what varies and plays back green."""
    workspace = tmp_path / "project"
    workspace.mkdir()
    script = tmp_path / "script.json"
    words = " ".join(f"w{i}" for i in range(60))
    script.write_text(
        json.dumps(
            [
                {"text": words, "chunk_delay_ms": 40},
                {
                    "text": "Writing.",
                    "tool_calls": [
                        {"name": "write_file", "input": {"path": "a.txt", "content": "x\n"}}
                    ],
                },
                {"text": f"Wrote {workspace}/a.txt for ${{you}}."},
            ]
        )
    )
    out = tmp_path / "recorded.jsonl"
    env = agent_env(DEFECT_SCRIPT=str(script), DEFECT_STATE_DIR=str(tmp_path / "state"))
    stderr = (tmp_path / "stderr.log").open("wb")  # closed once the recorder exits
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "defect_transcript",
        "record",
        "--out",
        str(out),
        "--",
        sys.executable,
        "-m",
        "defect_cli",
        "acp",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=stderr,
        env=env,
        cwd=str(REPO),
    )
    assert proc.stdin is not None and proc.stdout is not None

    async def send(message: dict[str, Any]) -> None:
        assert proc.stdin is not None
        proc.stdin.write((json.dumps({"jsonrpc": "2.0", **message}) + "\n").encode())
        await proc.stdin.drain()

    async def until(predicate: Any) -> dict[str, Any]:
        assert proc.stdout is not None
        async with asyncio.timeout(15):
            while True:
                message = json.loads(await proc.stdout.readline())
                if message.get("method") == "session/request_permission":
                    await send(
                        {
                            "id": message["id"],
                            "result": {
                                "outcome": {"outcome": "selected", "optionId": "allow_once"}
                            },
                        }
                    )
                    continue
                if predicate(message):
                    return message

    def answer(n: int) -> Any:
        return lambda m: m.get("id") == n and "method" not in m

    await send({"id": 1, "method": "initialize", "params": {"protocolVersion": 1}})
    await until(answer(1))
    await send(
        {"id": 2, "method": "session/new", "params": {"cwd": str(workspace), "mcpServers": []}}
    )
    sid = (await until(answer(2)))["result"]["sessionId"]
    prompt = {"sessionId": sid, "prompt": [{"type": "text", "text": "talk"}]}
    await send({"id": 3, "method": "session/prompt", "params": prompt})
    await until(
        lambda m: (
            m.get("params", {}).get("update", {}).get("sessionUpdate") == "agent_message_chunk"
        )
    )
    await send({"method": "session/cancel", "params": {"sessionId": sid}})
    assert (await until(answer(3)))["result"]["stopReason"] == "cancelled"
    prompt = {"sessionId": sid, "prompt": [{"type": "text", "text": "write"}]}
    await send({"id": 4, "method": "session/prompt", "params": prompt})
    assert (await until(answer(4)))["result"]["stopReason"] == "end_turn"
    proc.stdin.close()
    async with asyncio.timeout(20):
        assert await proc.wait() == 0
    stderr.close()
    assert f"wrote {out}" in (tmp_path / "stderr.log").read_text()

    text = out.read_text()
    assert sid not in text, "session ids must be captured, not written literally"
    assert str(workspace) not in text, "workspace paths must become ${workspace}"
    assert '"sessionId": {"$capture": "sid"}' in text
    assert '"toolCallId": {"$capture": "tool1"}' in text
    assert '"cwd": "${workspace}"' in text
    assert '{"notify": {"method": "session/cancel", "params": {"sessionId": "${sid}"}}}' in text
    assert (
        '"reply": {"result": {"outcome": {"outcome": "selected", "optionId": "allow_once"}}}'
        in text
    )
    assert '"to": "session/request_permission"' in text
    assert '{"expect_text": "Wrote ${workspace}/a.txt for $${you}."}' in text
    assert '"version": {"$type": "string"}' in text
    assert text.rstrip().endswith('{"close_stdin": true}\n{"expect_exit": 0}')
    assert '"offline_script"' in text.splitlines()[2]

    outcome, report = await play(out)
    assert outcome.status == "passed", report + "\n\n" + text


async def test_the_recorder_can_spawn_a_scripted_client(tmp_path: Path) -> None:
    client = tmp_path / "client.py"
    client.write_text(
        "import json, sys\n"
        "def send(m):\n"
        "    print(json.dumps({'jsonrpc': '2.0', **m}), flush=True)\n"
        "def answer(n):\n"
        "    for line in sys.stdin:\n"
        "        m = json.loads(line)\n"
        "        if m.get('id') == n and 'method' not in m:\n"
        "            return m\n"
        "send({'id': 1, 'method': 'initialize', 'params': {'protocolVersion': 1}})\n"
        "answer(1)\n"
        "send({'id': 2, 'method': 'session/new', 'params': {'cwd': sys.argv[1], "
        "'mcpServers': []}})\n"
        "sid = answer(2)['result']['sessionId']\n"
        "send({'id': 3, 'method': 'session/prompt', 'params': {'sessionId': sid, "
        "'prompt': [{'type': 'text', 'text': 'hello'}]}})\n"
        "answer(3)\n"
    )
    out = tmp_path / "hello.jsonl"
    env = agent_env(DEFECT_STATE_DIR=str(tmp_path / "state"))
    result = await asyncio.to_thread(
        subprocess.run,
        [
            sys.executable,
            "-m",
            "defect_transcript",
            "record",
            "--out",
            str(out),
            "--client",
            f"{sys.executable} {client} {tmp_path}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "", "the recorder with --client writes nothing on its stdout"
    text = out.read_text()
    assert '{"expect_text": "Hello! I\'m defect\'s offline model. You said: hello"}' in text
    outcome, report = await play(out)
    assert outcome.status == "passed", report + "\n\n" + text
