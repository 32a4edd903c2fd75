"""`/rewind` and the turn a message belongs to, through the real `defect acp` process.

A prompt is a user message that started a turn: a `session/prompt`, or a steer that started a
turn when none ran. What a turn commits inside itself as a user message of its own — a steer
that waited for the answer that would have ended the turn, a hook's note before a request — is
marked as part of that turn (`Message.inside_turn`): `/rewind` does not list it, going back
before its prompt takes it away, and going back before a later prompt keeps it. A session
stored before the mark existed (its bodies without it) lists such a steer as a prompt, as it
always did. A steer's live chunk carries no message id (which message it becomes is settled
only when the turn delivers it); the replay gives it the id of that message.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest

from defect_fakeapi import FakeProvider, Reply
from tests.support.acp_harness import Agent, spawn_defect
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
    wait_turn_ended,
)

pytestmark = pytest.mark.anyio


def stored_users(state: Path, session_id: str) -> list[dict[str, Any]]:
    """The session's stored user messages (JSON bodies), in the log's order."""
    with sqlite3.connect(f"file:{state / 'sessions.sqlite3'}?mode=ro", uri=True) as conn:
        rows = conn.execute(
            "SELECT body FROM messages WHERE session_id = ? ORDER BY seq", (session_id,)
        ).fetchall()
    bodies = [json.loads(body) for (body,) in rows]
    return [b for b in bodies if b["role"] == "user"]


async def rewind_listing(agent: Agent, session_id: str) -> list[str]:
    """The numbered lines `/rewind` answers with."""
    before = len(agent.client.text(session_id))
    response = await asyncio.wait_for(agent.prompt(session_id, "/rewind"), TIMEOUT)
    assert response.stop_reason == "end_turn"
    answer = agent.client.text(session_id)[before:]
    return [line for line in answer.splitlines() if line[:1].isdigit()]


async def steered_turn(
    agent: Agent, fake: FakeProvider, session_id: str, gate: threading.Event
) -> None:
    """Prompt "First.", steer "And this too." while its answer (which ends the turn) is held:
    the steer is committed as a user message of its own, and one more request carries it."""
    turn = asyncio.create_task(agent.prompt(session_id, "First."))
    await wait_calls(fake, 1)
    assert (await steer(agent, session_id, "And this too."))["outcome"] == "injected"
    gate.set()
    assert (await asyncio.wait_for(turn, TIMEOUT)).stop_reason == "end_turn"


async def test_a_steer_of_its_own_is_part_of_its_prompts_turn(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    gate = threading.Event()
    with FakeProvider() as fake:
        fake.enqueue(
            gated(Reply.text("All done."), gate),
            Reply.text("Then also that."),
            Reply.text("Second answer."),
            Reply.text("Next answer."),
            Reply.text("Fresh answer."),
        )
        async with spawn_defect(env=anthropic_env(tmp_path, fake), cwd=work) as agent:
            await agent.initialize()
            session_id = await agent.new_session(work)
            await steered_turn(agent, fake, session_id, gate)
            # No turn runs: this steer starts one, and is a prompt.
            assert (await steer(agent, session_id, "Second."))["outcome"] == "startedNewTurn"
            await wait_turn_ended(agent, 1)

            assert await rewind_listing(agent, session_id) == [
                '2. "Second." — no files changed',
                '1. "First." — no files changed',
            ]
            # Back to before prompt 2: the steer stays, with the turn it came in.
            await asyncio.wait_for(agent.prompt(session_id, "/rewind 2 conversation"), TIMEOUT)
            await asyncio.wait_for(agent.prompt(session_id, "Next."), TIMEOUT)
            said = [t for m in model_calls(fake)[-1].messages for t in texts_of(m["content"])]
            assert said == ["First.", "All done.", "And this too.", "Then also that.", "Next."]
            assert [line.split(" — ")[0] for line in await rewind_listing(agent, session_id)] == [
                '2. "Next."',
                '1. "First."',
            ]
            # Back to before prompt 1: the steer goes with its turn.
            await asyncio.wait_for(agent.prompt(session_id, "/rewind 1 conversation"), TIMEOUT)
            await asyncio.wait_for(agent.prompt(session_id, "Fresh."), TIMEOUT)
            (fresh,) = model_calls(fake)[-1].messages
            assert texts_of(fresh["content"]) == ["Fresh."]
            agent.assert_schema_clean()
        assert_all_accepted(fake)

    users = stored_users(tmp_path / "state", session_id)
    marks = {texts_of(u["content"])[0]: u.get("inside_turn") for u in users}
    assert marks == {
        "First.": None,
        "And this too.": "steer",
        "Second.": None,
        "Next.": None,
        "Fresh.": None,
    }


async def test_a_hook_note_inside_a_turn_is_no_prompt(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    config = tmp_path / "xdg" / "defect" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text('[[hooks.before_request]]\nprompt = "Mind the tests."\n')
    with FakeProvider() as fake:
        fake.enqueue(Reply.text("One."), Reply.text("Two."), Reply.text("Again."))
        env = anthropic_env(tmp_path, fake, XDG_CONFIG_HOME=str(tmp_path / "xdg"))
        async with spawn_defect(env=env, cwd=work) as agent:
            await agent.initialize()
            session_id = await agent.new_session(work)
            await asyncio.wait_for(agent.prompt(session_id, "First."), TIMEOUT)
            await asyncio.wait_for(agent.prompt(session_id, "Second."), TIMEOUT)
            listing = await rewind_listing(agent, session_id)
            assert [line.split(" — ")[0] for line in listing] == ['2. "Second."', '1. "First."']
            await asyncio.wait_for(agent.prompt(session_id, "/rewind 2 conversation"), TIMEOUT)
            await asyncio.wait_for(agent.prompt(session_id, "Again."), TIMEOUT)
            said = [t for m in model_calls(fake)[-1].messages for t in texts_of(m["content"])]
            assert [t for t in said if "Mind the tests." not in t] == ["First.", "One.", "Again."]
            agent.assert_schema_clean()
        assert_all_accepted(fake)
    notes = [u for u in stored_users(tmp_path / "state", session_id) if u.get("inside_turn")]
    assert len(notes) == 3 and {u["inside_turn"] for u in notes} == {"note"}


async def test_a_session_stored_before_the_mark_lists_its_steer_as_a_prompt(
    tmp_path: Path,
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    gate = threading.Event()
    with FakeProvider() as fake:
        fake.enqueue(gated(Reply.text("All done."), gate), Reply.text("Then also that."))
        async with spawn_defect(env=anthropic_env(tmp_path, fake), cwd=work) as agent:
            await agent.initialize()
            session_id = await agent.new_session(work)
            await steered_turn(agent, fake, session_id, gate)
            assert len(await rewind_listing(agent, session_id)) == 1
    # As an older defect stored it: the same body, without the mark.
    with sqlite3.connect(tmp_path / "state" / "sessions.sqlite3") as conn:
        rows = conn.execute("SELECT rowid, body FROM messages").fetchall()
        unmarked = 0
        for rowid, body in rows:
            message = json.loads(body)
            if message.pop("inside_turn", None) is not None:
                unmarked += 1
                conn.execute(
                    "UPDATE messages SET body = ? WHERE rowid = ?", (json.dumps(message), rowid)
                )
        assert unmarked == 1
    with FakeProvider() as fake:
        async with spawn_defect(env=anthropic_env(tmp_path, fake), cwd=work) as agent:
            await agent.initialize()
            await agent.conn.load_session(cwd=str(work), session_id=session_id, mcp_servers=[])
            listing = await rewind_listing(agent, session_id)
            assert [line.split(" — ")[0] for line in listing] == [
                '2. "And this too."',
                '1. "First."',
            ]
            agent.assert_schema_clean()


async def test_a_steer_is_shown_live_without_an_id_and_replayed_with_its_messages(
    tmp_path: Path,
) -> None:
    """docs/acp-additions.md, Message ids: which message a steer becomes is settled only when
    the turn delivers it, so its live chunk has no id; the replay gives it the stored one."""
    work = tmp_path / "work"
    work.mkdir()
    gate = threading.Event()
    with FakeProvider() as fake:
        fake.enqueue(gated(Reply.text("All done."), gate), Reply.text("Then also that."))
        async with spawn_defect(env=anthropic_env(tmp_path, fake), cwd=work) as agent:
            await agent.initialize()
            session_id = await agent.new_session(work)
            await steered_turn(agent, fake, session_id, gate)
            (live,) = [
                u
                for _, u in agent.client.updates
                if u.session_update == "user_message_chunk"
                and getattr(u.content, "text", "") == "And this too."
            ]
            assert live.message_id is None
        async with spawn_defect(env=anthropic_env(tmp_path, fake), cwd=work) as agent:
            await agent.initialize()
            await agent.conn.load_session(cwd=str(work), session_id=session_id, mcp_servers=[])
            ids = {
                u["content"].get("text"): u.get("messageId")
                for u in replayed(agent)
                if u["sessionUpdate"] in ("user_message_chunk", "agent_message_chunk")
            }
            # prompt, answer, the steer as a message of its own, the answer it led to
            assert ids == {
                "First.": f"{session_id}:1",
                "All done.": f"{session_id}:2",
                "And this too.": f"{session_id}:3",
                "Then also that.": f"{session_id}:4",
            }
            agent.assert_schema_clean()
