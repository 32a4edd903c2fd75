"""A hostile search through the real `defect acp` process: a catastrophic pattern over a
large tree leaves every other session served, stays cancellable, and its tool call ends in
exactly one final status."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.support.acp_harness import RecordingClient, script_env, spawn_defect

pytestmark = pytest.mark.anyio

CATASTROPHIC = r"(a+)+$"


def _tree(root: Path, files: int = 120, size: int = 400_000) -> None:
    """Files of one long line of `a`s ending in `b`: exponential for a backtracking engine."""
    line = "a" * (size - 2) + "b\n"
    for i in range(files):
        sub = root / f"dir{i % 8}"
        sub.mkdir(parents=True, exist_ok=True)
        (sub / f"f{i}.txt").write_text(line)


async def test_a_catastrophic_search_never_stalls_other_sessions(tmp_path: Path) -> None:
    work = tmp_path / "work"
    _tree(work)
    other = tmp_path / "other"
    other.mkdir()
    replies = [
        {"tool_calls": [{"name": "search", "input": {"pattern": CATASTROPHIC}}]},
        {"text": "searched"},
    ]
    client = RecordingClient()
    async with spawn_defect(env=script_env(tmp_path, replies), client=client) as agent:
        await agent.initialize()
        searching = await agent.new_session(work)
        chatting = await agent.new_session(other)
        search_turn = asyncio.create_task(agent.prompt(searching, "search it"))
        # The script's replies go to whichever session asks first: let the search session
        # take its tool call before the other one asks.
        async with asyncio.timeout(60):
            while not any(
                sid == searching and u.session_update == "tool_call" for sid, u in client.updates
            ):
                await asyncio.sleep(0.01)
        # The other session is served while (or after) the search runs: a frozen process
        # would never answer, and this wait would time out.
        hello = await asyncio.wait_for(agent.prompt(chatting, "hello"), 60)
        assert hello.stop_reason == "end_turn"
        await agent.conn.cancel(session_id=searching)
        done = await asyncio.wait_for(search_turn, 60)
        assert done.stop_reason in ("end_turn", "cancelled")
        finals = [
            u
            for sid, u in client.updates
            if sid == searching
            and u.session_update in ("tool_call", "tool_call_update")
            and u.status in ("completed", "failed")
        ]
        assert len(finals) == 1
        # The session goes on.
        assert (await agent.prompt(searching, "hello")).stop_reason == "end_turn"
        agent.assert_schema_clean()
