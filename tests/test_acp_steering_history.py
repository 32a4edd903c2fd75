"""Steers in the stored history, through the real `defect acp` process: kill, replay, rewind, fork.

- kill -9 right after `injected` (the model's stream held open, so the turn never delivered
  the steer): a new process loads the session, the replay shows the steer, and the next
  request is legal and carries it, and `/rewind` lists it with its prompt's turn;
- a steer delivered during a tool call is replayed where it joined the history (after the
  call's card, before the answer it led to), `/rewind` lists it as part of its prompt's turn
  (not a prompt of its own) and takes it away with that turn, and a fork keeps it.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest

from defect_fakeapi import FakeProvider, Reply
from tests.support.acp_harness import spawn_defect
from tests.support.steering import (
    TIMEOUT,
    anthropic_env,
    assert_all_accepted,
    gated,
    model_calls,
    replayed,
    steer,
    texts_of,
    wait_calls,
    wait_in_progress,
    waiting_command,
)

pytestmark = pytest.mark.anyio

Json = dict[str, Any]


def shown(updates: list[Json]) -> list[tuple[str, str]]:
    """(kind, text) of the messages a replay shows, tool calls as ("tool_call", title)."""
    out: list[tuple[str, str]] = []
    for u in updates:
        kind = u["sessionUpdate"]
        if kind in ("user_message_chunk", "agent_message_chunk"):
            out.append((kind, u["content"].get("text", "")))
        elif kind == "tool_call":
            out.append((kind, u["title"]))
    return out


def stored_texts(state: Path, session_id: str) -> list[str]:
    with sqlite3.connect(f"file:{state / 'sessions.sqlite3'}?mode=ro", uri=True) as conn:
        rows = conn.execute(
            "SELECT body FROM messages WHERE session_id = ? ORDER BY seq", (session_id,)
        ).fetchall()
    out: list[str] = []
    for (body,) in rows:
        message = json.loads(body)
        if message["role"] == "user":
            out.extend(texts_of(message["content"]))
    return out


async def test_a_steer_acknowledged_before_a_kill_is_there_after_a_restart(
    tmp_path: Path,
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    gate = threading.Event()
    with FakeProvider() as fake:
        fake.enqueue(gated(Reply.text("never finished"), gate))
        async with spawn_defect(env=anthropic_env(tmp_path, fake), cwd=work) as agent:
            await agent.initialize()
            session_id = await agent.new_session(work)
            turn = asyncio.create_task(agent.prompt(session_id, "Start."))
            await wait_calls(fake, 1)
            assert (await steer(agent, session_id, "Keep this."))["outcome"] == "injected"
            agent.process.send_signal(signal.SIGKILL)
            assert await asyncio.wait_for(agent.process.wait(), TIMEOUT) == -signal.SIGKILL
            with pytest.raises(ConnectionError):
                await asyncio.wait_for(turn, TIMEOUT)
            gate.set()
    with FakeProvider() as fake:
        fake.enqueue(Reply.text("Back."))
        async with spawn_defect(env=anthropic_env(tmp_path, fake), cwd=work) as agent:
            await agent.initialize()
            await agent.conn.load_session(cwd=str(work), session_id=session_id, mcp_servers=[])
            assert [t for k, t in shown(replayed(agent)) if k == "user_message_chunk"] == [
                "Start.",
                "Keep this.",
            ]
            response = await asyncio.wait_for(agent.prompt(session_id, "Again."), TIMEOUT)
            assert response.stop_reason == "end_turn"
            # Committed when the session was loaded, the steer is still its turn's, no prompt.
            before = len(agent.client.text(session_id))
            await asyncio.wait_for(agent.prompt(session_id, "/rewind"), TIMEOUT)
            listing = agent.client.text(session_id)[before:]
            assert '2. "Again."' in listing and '1. "Start."' in listing
            assert "Keep this." not in listing
            agent.assert_schema_clean()
        assert_all_accepted(fake)
        (call,) = model_calls(fake)
        assert [m["role"] for m in call.messages] == ["user"]
        assert texts_of(call.messages[0]["content"]) == ["Start.", "Keep this.", "Again."]
    assert stored_texts(tmp_path / "state", session_id) == ["Start.", "Keep this.", "Again."]


async def test_replay_rewind_and_fork_keep_a_steer_with_its_turn(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    flag = work / "go"
    with FakeProvider() as fake:
        fake.enqueue(
            waiting_command(flag), Reply.text("Done, with the tests."), Reply.text("Forked.")
        )
        async with spawn_defect(env=anthropic_env(tmp_path, fake), cwd=work) as agent:
            await agent.initialize()
            session_id = await agent.new_session(work)
            turn = asyncio.create_task(agent.prompt(session_id, "Build it."))
            await wait_in_progress(agent)
            assert (await steer(agent, session_id, "Run the tests too."))["outcome"] == "injected"
            flag.write_text("")
            assert (await asyncio.wait_for(turn, TIMEOUT)).stop_reason == "end_turn"

            forked = await agent.conn.fork_session(
                session_id=session_id, cwd=str(work), mcp_servers=[]
            )
            response = await asyncio.wait_for(agent.prompt(forked.session_id, "And?"), TIMEOUT)
            assert response.stop_reason == "end_turn"
            fork_call = model_calls(fake)[-1]
            fork_said = [t for m in fork_call.messages for t in texts_of(m["content"])]
            assert "Run the tests too." in fork_said

        async with spawn_defect(env=anthropic_env(tmp_path, fake), cwd=work) as agent:
            await agent.initialize()
            await agent.conn.load_session(cwd=str(work), session_id=session_id, mcp_servers=[])
            kinds = shown(replayed(agent))
            steer_at = kinds.index(("user_message_chunk", "Run the tests too."))
            call_at = next(i for i, (k, _) in enumerate(kinds) if k == "tool_call")
            answer_at = kinds.index(("agent_message_chunk", "Done, with the tests."))
            assert call_at < steer_at < answer_at

            listing = await asyncio.wait_for(agent.prompt(session_id, "/rewind"), TIMEOUT)
            assert listing.stop_reason == "end_turn"
            text = agent.client.text(session_id)
            assert '1. "Build it."' in text and "2." not in text  # the steer is not a prompt
            await asyncio.wait_for(agent.prompt(session_id, "/rewind 1 conversation"), TIMEOUT)
            agent.assert_schema_clean()
        assert_all_accepted(fake)

    with FakeProvider() as fake:
        fake.enqueue(Reply.text("Fresh."))
        async with spawn_defect(env=anthropic_env(tmp_path, fake), cwd=work) as agent:
            await agent.initialize()
            await agent.conn.load_session(cwd=str(work), session_id=session_id, mcp_servers=[])
            assert ("user_message_chunk", "Run the tests too.") not in shown(replayed(agent))
            await asyncio.wait_for(agent.prompt(session_id, "New start."), TIMEOUT)
        (call,) = model_calls(fake)
        assert texts_of(call.messages[0]["content"]) == ["New start."]
