"""`_session/steering` through the real `defect acp` process and the strict fake APIs.

The model is made to wait deterministically: a scripted reply is a responder that blocks until
the test releases it, and the "long tool" is a `bash` command that waits for a file the test
writes. So each steer lands exactly where the test says: during a model stream, during a tool
call, after the answer that would have ended the turn, after the turn has ended. What is
checked is what the strict fake was sent (every request legal; the steers after the tool
results, in order, in one user message — after the `tool` messages on the chat wire), what
the editor was shown (the steer as `user_message_chunk`), and the answer of each request. A
steer the store cannot save (the database held locked by another process) is answered
`failed` and kept nowhere, and the session serves on.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
import threading
from pathlib import Path

import pytest
from acp import RequestError
from acp import schema as s

from defect_fakeapi import FakeProvider, Reply
from tests.support.acp_harness import RecordingClient, spawn_defect
from tests.support.steering import (
    CHAT_KEY,
    TIMEOUT,
    anthropic_env,
    assert_all_accepted,
    chat_env,
    gated,
    model_calls,
    steer,
    texts_of,
    user_chunks,
    wait_calls,
    wait_in_progress,
    wait_turn_ended,
    waiting_command,
)

pytestmark = pytest.mark.anyio


# --- a steer during a stream and one during a tool call ---------------------------------------


async def test_steers_reach_the_model_after_the_tool_results_anthropic(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    flag = work / "go"
    gate = threading.Event()
    with FakeProvider() as fake:
        fake.enqueue(gated(waiting_command(flag), gate), Reply.text("Noted."))
        async with spawn_defect(env=anthropic_env(tmp_path, fake), cwd=work) as agent:
            await agent.initialize()
            session_id = await agent.new_session(work)
            turn = asyncio.create_task(agent.prompt(session_id, "Run the long thing."))
            await wait_calls(fake, 1)  # the model's stream is held open
            assert await steer(agent, session_id, "Steer one, during the stream.") == {
                "outcome": "injected"
            }
            gate.set()
            await wait_in_progress(agent)  # the command runs until the flag exists
            assert await steer(agent, session_id, "Steer two, during the tool.") == {
                "outcome": "injected"
            }
            flag.write_text("")
            response = await asyncio.wait_for(turn, TIMEOUT)
            assert response.stop_reason == "end_turn"
            shown = user_chunks(agent)
            agent.assert_schema_clean()
        assert_all_accepted(fake)
        calls = model_calls(fake)
        assert len(calls) == 2
        first, second = calls[0].messages, calls[1].messages
        assert [m["role"] for m in first] == ["user"]  # the steers were not in the stream's
        last = second[-1]
        assert last["role"] == "user"
        kinds = [b["type"] for b in last["content"]]
        assert kinds == ["tool_result", "text", "text"], last  # results first, one message
        assert texts_of(last["content"]) == [
            "Steer one, during the stream.",
            "Steer two, during the tool.",
        ]
        assert second[-2]["role"] == "assistant"
        assert "partial-and-done" in json.dumps(last["content"][0])  # not folded into it
        assert shown == ["Steer one, during the stream.", "Steer two, during the tool."]


async def test_steers_follow_the_tool_messages_on_the_chat_wire(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    flag = work / "go"
    gate = threading.Event()
    with FakeProvider(api_key=CHAT_KEY) as fake:
        fake.enqueue(gated(waiting_command(flag), gate), Reply.text("Noted."))
        async with spawn_defect(env=chat_env(tmp_path, fake), cwd=work) as agent:
            await agent.initialize()
            session_id = await agent.new_session(work)
            turn = asyncio.create_task(agent.prompt(session_id, "Run the long thing."))
            await wait_calls(fake, 1)
            assert (await steer(agent, session_id, "During the stream."))["outcome"] == "injected"
            gate.set()
            await wait_in_progress(agent)
            assert (await steer(agent, session_id, "During the tool."))["outcome"] == "injected"
            flag.write_text("")
            assert (await asyncio.wait_for(turn, TIMEOUT)).stop_reason == "end_turn"
        assert_all_accepted(fake)
        calls = model_calls(fake)
        assert len(calls) == 2
        messages = calls[1].messages
        roles = [m["role"] for m in messages]
        assert roles[-3:] == ["assistant", "tool", "user"], roles
        assert "partial-and-done" in json.dumps(messages[-2])
        said = "\n\n".join(texts_of(messages[-1]["content"]))  # the chat wire joins texts
        assert said == "During the stream.\n\nDuring the tool."


# --- the answer that would end the turn --------------------------------------------------------


async def test_a_steer_when_the_answer_would_end_the_turn_gets_one_more_request(
    tmp_path: Path,
) -> None:
    gate = threading.Event()
    with FakeProvider() as fake:
        fake.enqueue(gated(Reply.text("All done."), gate), Reply.text("Then also that."))
        async with spawn_defect(env=anthropic_env(tmp_path, fake)) as agent:
            await agent.initialize()
            session_id = await agent.new_session(tmp_path)
            turn = asyncio.create_task(agent.prompt(session_id, "Do it."))
            await wait_calls(fake, 1)
            assert (await steer(agent, session_id, "And this too."))["outcome"] == "injected"
            assert not turn.done()
            gate.set()
            response = await asyncio.wait_for(turn, TIMEOUT)
            assert response.stop_reason == "end_turn"
            assert agent.client.text(session_id).endswith("All done.Then also that.")
        assert_all_accepted(fake)
        calls = model_calls(fake)
        assert len(calls) == 2  # the prompt was answered only after the second request
        second = calls[1].messages
        assert [m["role"] for m in second] == ["user", "assistant", "user"]
        assert texts_of(second[-1]["content"]) == ["And this too."]


# --- no turn running -----------------------------------------------------------------------------


async def test_a_steer_after_the_turn_starts_one(tmp_path: Path) -> None:
    with FakeProvider() as fake:
        fake.enqueue(Reply.text("First."), Reply.text("Second."))
        async with spawn_defect(env=anthropic_env(tmp_path, fake)) as agent:
            await agent.initialize()
            session_id = await agent.new_session(tmp_path)
            assert (await agent.prompt(session_id, "One.")).stop_reason == "end_turn"
            assert await steer(agent, session_id, "Two.") == {"outcome": "startedNewTurn"}

            await wait_turn_ended(agent, 1)
            assert agent.client.text(session_id) == "First.Second."
            info = [
                u.field_meta["steering"]["turnEnded"]
                for _, u in agent.client.updates
                if u.session_update == "session_info_update" and u.field_meta
            ]
            assert info[-1]["stopReason"] == "end_turn"
            # Its end came after every update of the turn.
            last = agent.client.updates[-1][1]
            assert last.session_update == "session_info_update"
            agent.assert_schema_clean()
        assert_all_accepted(fake)
        assert texts_of(model_calls(fake)[1].messages[-1]["content"]) == ["Two."]


async def test_prompt_required_when_the_client_opts_in(tmp_path: Path) -> None:
    with FakeProvider() as fake:
        async with spawn_defect(env=anthropic_env(tmp_path, fake)) as agent:
            await agent.initialize()
            session_id = await agent.new_session(tmp_path)
            answer = await steer(
                agent, session_id, "Anyone?", steering={"idleBehavior": "promptRequired"}
            )
            assert answer == {"outcome": "promptRequired", "reason": "noRunningTurn"}
            with pytest.raises(RequestError) as unknown:
                await steer(agent, "sess_nope", "Hello?")
            assert unknown.value.code == -32002
            with pytest.raises(RequestError) as empty:
                await agent.conn.ext_method(
                    "session/steering", {"sessionId": session_id, "prompt": []}
                )
            assert empty.value.code == -32602
        assert model_calls(fake) == []


async def test_the_opt_in_may_come_with_initialize(tmp_path: Path) -> None:
    with FakeProvider() as fake:
        fake.enqueue(Reply.text("Only once."))
        async with spawn_defect(env=anthropic_env(tmp_path, fake)) as agent:
            await agent.conn.initialize(
                protocol_version=1,
                client_capabilities=s.ClientCapabilities(),
                steering={"idleBehavior": "promptRequired"},
            )
            session_id = await agent.new_session(tmp_path)
            assert (await steer(agent, session_id, "Idle?"))["outcome"] == "promptRequired"
            assert (await agent.prompt(session_id, "Now.")).stop_reason == "end_turn"
            assert (await steer(agent, session_id, "Still idle?"))["outcome"] == "promptRequired"
        assert len(model_calls(fake)) == 1


async def test_a_steer_the_store_cannot_save_fails_and_the_session_goes_on(
    tmp_path: Path,
) -> None:
    """Another process holds the session database locked (longer than the store waits): the
    steer cannot be saved, so it is not taken — `failed`, nothing shown, stored nor sent —
    and once the lock is gone the turn ends as it would have, and the session serves on."""
    gate = threading.Event()
    db = tmp_path / "state" / "sessions.sqlite3"
    with FakeProvider() as fake:
        fake.enqueue(
            gated(Reply.text("All done."), gate), Reply.text("Again."), Reply.text("Heard.")
        )
        async with spawn_defect(env=anthropic_env(tmp_path, fake)) as agent:
            await agent.initialize()
            session_id = await agent.new_session(tmp_path)
            turn = asyncio.create_task(agent.prompt(session_id, "Do it."))
            await wait_calls(fake, 1)
            with contextlib.closing(sqlite3.connect(db, isolation_level=None)) as holder:
                holder.execute("BEGIN EXCLUSIVE")
                answer = await asyncio.wait_for(steer(agent, session_id, "Lost?"), TIMEOUT)
                holder.execute("ROLLBACK")
            assert answer["outcome"] == "failed"
            assert "locked by another process" in answer["reason"]
            gate.set()
            assert (await asyncio.wait_for(turn, TIMEOUT)).stop_reason == "end_turn"
            assert "Lost?" not in user_chunks(agent)
            assert (await agent.prompt(session_id, "Once more.")).stop_reason == "end_turn"
            assert (await steer(agent, session_id, "Idle now."))["outcome"] == "startedNewTurn"
            await agent.client.wait_for(
                lambda: agent.client.text(session_id).endswith("Heard."), TIMEOUT
            )
            agent.assert_schema_clean()
        assert_all_accepted(fake)
        calls = model_calls(fake)
        said = [t for m in calls[2].messages for t in texts_of(m["content"])]
        assert said == ["Do it.", "All done.", "Once more.", "Again.", "Idle now."]
    with contextlib.closing(sqlite3.connect(db)) as conn:
        bodies = conn.execute("SELECT body FROM messages ORDER BY seq").fetchall()
        (config,) = conn.execute("SELECT config FROM sessions").fetchone()
    assert not any("Lost?" in body for (body,) in bodies)
    assert "Lost?" not in config


async def test_initialize_advertises_steering(tmp_path: Path) -> None:
    async with spawn_defect(client=RecordingClient()) as agent:
        response = await agent.initialize()
        assert response.field_meta == {"steering": {"supported": True}}
        agent.assert_schema_clean()


# --- steering.interrupt_tools ------------------------------------------------------------------


async def test_interrupt_tools_cancels_a_long_command_and_keeps_its_output(
    tmp_path: Path,
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    config = tmp_path / "xdg" / "defect" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text("[steering]\ninterrupt_tools = true\n")
    with FakeProvider() as fake:
        fake.enqueue(
            Reply.tool_use(
                None, "bash", {"command": "echo first-half; touch printed; sleep 60; echo never"}
            ),
            Reply.text("Stopped, as you asked."),
        )
        env = anthropic_env(tmp_path, fake, XDG_CONFIG_HOME=str(tmp_path / "xdg"))
        async with spawn_defect(env=env, cwd=work) as agent:
            await agent.initialize()
            session_id = await agent.new_session(work)
            turn = asyncio.create_task(agent.prompt(session_id, "Run the suite."))
            await wait_in_progress(agent)
            while not (work / "printed").exists():  # it has printed its first half
                await asyncio.sleep(0.02)
            assert (await steer(agent, session_id, "Stop, wrong branch."))["outcome"] == (
                "injected"
            )
            response = await asyncio.wait_for(turn, TIMEOUT)  # not the command's 60 s
            assert response.stop_reason == "end_turn"
            finals = [
                u
                for _, u in agent.client.updates
                if u.session_update == "tool_call_update" and u.status == "failed"
            ]
            assert len(finals) == 1
            shown = json.dumps([c.model_dump() for c in finals[0].content or []])
            assert "first-half" in shown and "Cancelled." in shown
        assert_all_accepted(fake)
        last = model_calls(fake)[1].messages[-1]
        result, steered = last["content"]
        assert result["type"] == "tool_result" and result["is_error"] is True
        said = json.dumps(result["content"])
        assert "the user sent a message meanwhile" in said and "first-half" in said
        assert "never" not in said
        assert steered["type"] == "text" and steered["text"] == "Stop, wrong branch."


async def test_without_interrupt_tools_the_command_runs_to_its_end(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    flag = work / "go"
    with FakeProvider() as fake:
        fake.enqueue(waiting_command(flag), Reply.text("Both done."))
        async with spawn_defect(env=anthropic_env(tmp_path, fake), cwd=work) as agent:
            await agent.initialize()
            session_id = await agent.new_session(work)
            turn = asyncio.create_task(agent.prompt(session_id, "Run it."))
            await wait_in_progress(agent)
            assert (await steer(agent, session_id, "Then this."))["outcome"] == "injected"
            flag.write_text("")
            assert (await asyncio.wait_for(turn, TIMEOUT)).stop_reason == "end_turn"
        result = model_calls(fake)[1].messages[-1]["content"][0]
        assert result.get("is_error") is not True
        assert "partial-and-done" in json.dumps(result["content"])


async def test_interrupt_tools_skips_the_calls_asked_for_while_the_user_wrote(
    tmp_path: Path,
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    config = tmp_path / "xdg" / "defect" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text("[steering]\ninterrupt_tools = true\n")
    gate = threading.Event()
    with FakeProvider() as fake:
        call = Reply.tool_use(None, "bash", {"command": "touch ran; sleep 60"})
        fake.enqueue(gated(call, gate), Reply.text("Changed course."))
        env = anthropic_env(tmp_path, fake, XDG_CONFIG_HOME=str(tmp_path / "xdg"))
        async with spawn_defect(env=env, cwd=work) as agent:
            await agent.initialize()
            session_id = await agent.new_session(work)
            turn = asyncio.create_task(agent.prompt(session_id, "Run the suite."))
            await wait_calls(fake, 1)
            assert (await steer(agent, session_id, "No, lint first."))["outcome"] == "injected"
            gate.set()
            assert (await asyncio.wait_for(turn, TIMEOUT)).stop_reason == "end_turn"
        assert not (work / "ran").exists()  # never started: the user had spoken
        assert_all_accepted(fake)
        result, steered = model_calls(fake)[1].messages[-1]["content"]
        assert result["is_error"] is True
        assert "the user sent a message meanwhile" in json.dumps(result["content"])
        assert steered["text"] == "No, lint first."
