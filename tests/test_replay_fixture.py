"""A session stored before a change replays as it did: `session/load` of the stored fixture
(`tests/fixtures/replay_session.sqlite3`, written by `tests/fixtures/make_replay_session.py`)
through the real `defect acp` process writes exactly the `session/update` lines recorded in
`tests/fixtures/replay_session.golden`, byte for byte and in order.

The fixture holds what a replay shows: user text and an image, thoughts, answer text, tool
calls of several kinds (diffs, a terminal's printed output and one read from the result, an
image, a search), a failed call, an interrupted one, a plan and a refused plan, a provider's
web search, a call with no record, and a subagent's view. The golden lines are what the
code that wrote the fixture replayed: any difference, however small (a key's order, an
escape, a status), is a change an editor reopening an old session would see.

The process reads a copy (a load may migrate the file or leave a journal beside it); its
stdout is read raw, as an editor's pipe gives it, so nothing is parsed and written again.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import sys
from pathlib import Path

import pytest

from defect_core.store import DB_FILENAME
from tests.support.acp_harness import REPO, agent_env

pytestmark = pytest.mark.anyio

FIXTURES = Path(__file__).parent / "fixtures"
DATABASE = FIXTURES / "replay_session.sqlite3"
GOLDEN = FIXTURES / "replay_session.golden"
SESSION_ID = "sess_replay_fixture"
TIMEOUT = 30.0
"""Guard against a hang only: no assertion depends on time."""


async def replayed_lines(tmp_path: Path) -> list[bytes]:
    """The `session/update` lines `session/load` of the fixture writes before its answer."""
    state, cwd = tmp_path / "state", tmp_path / "work"
    state.mkdir()
    cwd.mkdir()
    shutil.copyfile(DATABASE, state / DB_FILENAME)
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "defect_cli",
        "acp",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        env=agent_env(DEFECT_STATE_DIR=str(state)),
        cwd=str(REPO),
    )
    assert proc.stdin is not None and proc.stdout is not None
    requests = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}},
        {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "session/load",
            "params": {"sessionId": SESSION_ID, "cwd": str(cwd), "mcpServers": []},
        },
    ]
    proc.stdin.write(b"".join(json.dumps(r).encode() + b"\n" for r in requests))
    await proc.stdin.drain()
    lines: list[bytes] = []
    try:
        async with asyncio.timeout(TIMEOUT):
            while raw := await proc.stdout.readline():
                message = json.loads(raw)
                if message.get("method") == "session/update":
                    lines.append(raw)
                elif message.get("id") == 2:
                    assert "result" in message, message
                    break
            else:
                raise AssertionError("the agent closed stdout before answering session/load")
    finally:
        proc.stdin.close()
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
    return lines


async def test_a_stored_session_replays_byte_for_byte_as_recorded(tmp_path: Path) -> None:
    golden = GOLDEN.read_bytes().splitlines(keepends=True)
    lines = await replayed_lines(tmp_path)
    assert len(golden) > 20  # the fixture's pieces, not an empty file compared with nothing
    for n, (got, want) in enumerate(zip(lines, golden, strict=False)):
        assert got == want, f"line {n + 1} differs"
    assert len(lines) == len(golden)
