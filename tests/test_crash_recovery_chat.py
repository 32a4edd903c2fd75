"""Kill -9 or cancel the real `defect acp` mid-turn on the OpenAI-compatible wire, and recover.

The founding scenario of `tests/test_crash_recovery.py` (docs/architecture.md, Integrity), on a
session whose model is a `kind = "openai"` provider (`defect_core/providers/openai_compat/`,
encoded by `defect_core/providers/openai_wire.py`) served by the strict fake Chat Completions
API (`defect_fakeapi/chat*.py`, which refuses an orphan `tool` message and a `tool_calls` entry
no `tool` message answers, as real servers do). The set-up of the two fakes (`[providers.local]`
on the chat fake, `[providers.alpha]` on the Messages fake) is `tests/test_acp_openai.py`'s;
the kill, replay and store helpers are `tests/test_crash_recovery.py`'s.

- killed while a `bash` call runs (yolo; the command waits for a file the test never writes
  before the kill): after `session/load` the next request is accepted, the interrupted call is
  answered in it by the repair's text, the command is not run again, and the store still holds
  the call with no result;
- `session/cancel` while the call runs: the prompt answers `cancelled`, the cancel's own result
  is recorded, and the next request is accepted;
- killed while the fake holds a stream of a tool call's argument fragments: the partial call
  never ran nor became history, and the next request is accepted;
- killed with a chat-minted call id (a shape the Messages wire forbids) left unanswered, then
  loaded and switched to the Claude provider: the Messages fake accepts the request, the id
  in the shape that wire takes and the call answered by the repair's text.

Every gate is an event, never a clock: a file the command waits for, a stream the fake holds
until the client goes away, a permission question never answered.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import signal
from collections.abc import Iterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import anyio
import pytest

from defect_fakeapi import FakeProvider, Reply, TextBlock, ToolUseBlock
from tests.support.acp_harness import Agent, spawn_defect
from tests.test_acp_openai import alpha, chat, configure, env_for, settled
from tests.test_crash_recovery import (
    INTERRUPTED,
    RECOVERED,
    TIMEOUT,
    Recovery,
    Rig,
    alive,
    assert_all_accepted,
    assert_orphan_kept,
    assert_replayed_interrupted,
    assert_synthetic_answer,
    child_pid,
    kill_mid_turn,
    new_session,
    replayed,
    results,
    start_turn,
    until,
    updates_of,
    uses,
)

__all__ = ["alpha", "chat"]  # the fixtures, imported to be used here

pytestmark = pytest.mark.anyio

Json = dict[str, Any]

CANCELLED = "tool call cancelled by the user before it finished"
"""The result a cancel records for a call it stopped (`defect_core/turn/call_steps.py`)."""
CHAT_INTERRUPTED = f"Error: {INTERRUPTED}"
"""The repair's synthetic result as the chat wire carries it (it has no `is_error`:
`defect_core/providers/openai_wire.py` prefixes an error result with `Error: `)."""


@pytest.fixture
def rig(tmp_path: Path, alpha: FakeProvider, chat: FakeProvider) -> Iterator[Rig]:
    """`tests/test_acp_openai.py`'s configuration (chat provider by default) on a `Rig`."""
    configure(tmp_path, alpha, chat, default="local")
    rig = Rig(tmp_path)
    yield rig
    for pgid in rig.children:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)


def spawn(rig: Rig) -> AbstractAsyncContextManager[Agent]:
    return spawn_defect(env=env_for(rig.root))


async def started(agent: Agent) -> Agent:
    await agent.initialize()
    return agent


def chat_answer(body: Json, call_id: str) -> Json:
    """The `tool` message answering `call_id`, among those right after its `tool_calls`."""
    messages = body["messages"]
    at = next(
        i
        for i, m in enumerate(messages)
        if m["role"] == "assistant" and any(c["id"] == call_id for c in m.get("tool_calls") or [])
    )
    following: list[Json] = []
    for message in messages[at + 1 :]:
        if message["role"] != "tool":
            break
        following.append(message)
    found = [m for m in following if m["tool_call_id"] == call_id]
    assert len(found) == 1, f"no single tool message answers {call_id}: {following}"
    return found[0]


async def reload_and_prompt(
    rig: Rig,
    session_id: str,
    fake: FakeProvider,
    *,
    model: str | None = None,
    text: str = "Are you back?",
) -> Recovery:
    """A new process on the same state: `session/load`, optionally a model switch, one prompt
    that `fake` answers with text; what the fake saw of it."""
    fake.enqueue(Reply.text(RECOVERED))
    seen = len(fake.requests)
    async with spawn(rig) as agent:
        await started(agent)
        await agent.conn.load_session(cwd=str(rig.work), session_id=session_id, mcp_servers=[])
        replay = replayed(agent)
        if model is not None:
            await agent.conn.set_config_option(
                session_id=session_id, config_id="model", value=model
            )
        response = await asyncio.wait_for(agent.prompt(session_id, text), TIMEOUT)
        assert response.stop_reason == "end_turn"
        assert agent.client.text(session_id).endswith(RECOVERED)
        await settled(fake)
        agent.assert_schema_clean()
    requests = fake.requests[seen:]
    assert_all_accepted(requests)
    assert len(requests) == 1
    return Recovery(replay, requests)


def blocking_command(rig: Rig) -> tuple[str, Path]:
    """A command that records its pid, waits for `release`, then leaves `ran.txt`."""
    pid_file = rig.work / "child.pid"
    command = f"echo $$ > {pid_file.name}; until [ -e release ]; do sleep 0.02; done; touch ran.txt"
    return command, pid_file


async def test_kill_while_a_chat_tool_call_runs(rig: Rig, chat: FakeProvider) -> None:
    """Killed between the call and its result: the repair answers the call on the way out
    only, the command is not run again."""
    command, pid_file = blocking_command(rig)
    orphan = "call_k1"
    chat.enqueue(Reply.tool_use(orphan, "bash", {"command": command}))
    async with spawn(rig) as agent:
        await started(agent)
        sid = await new_session(agent, rig, mode="yolo")
        turn = start_turn(agent, sid, "Wait for the release.")
        await agent.client.wait_for(
            lambda: bool(updates_of(agent.client, "tool_call_update", status="in_progress")),
            TIMEOUT,
        )
        child = await child_pid(rig, pid_file)
        agent.assert_schema_clean()
        await kill_mid_turn(agent, turn)
    assert_all_accepted(chat.requests)
    await until(lambda: not alive(child), "the command to die with the agent")
    (rig.work / "release").touch()  # were the command run again, it would now finish

    log = rig.log(sid)
    assert [m["role"] for m in log] == ["user", "assistant"]
    assert uses(log) == [orphan] and not results(log)
    assert rig.tool_call_status(sid) == {orphan: "in_progress"}

    recovery = await reload_and_prompt(rig, sid, chat)
    assert_replayed_interrupted(recovery.tool_call(orphan))
    (request,) = recovery.requests
    assert request.route == "chat"
    assert chat_answer(request.body, orphan)["content"] == CHAT_INTERRUPTED
    assert_orphan_kept(rig, sid, [orphan])
    assert not (rig.work / "ran.txt").exists(), "the interrupted command was run again"
    assert int(pid_file.read_text()) == child


async def test_cancel_while_a_chat_tool_call_runs(rig: Rig, chat: FakeProvider) -> None:
    """`session/cancel` while the command runs: the turn answers `cancelled` and records the
    call's own result, so the next request answers the call with it, legally."""
    command, pid_file = blocking_command(rig)
    call = "call_c1"
    chat.enqueue(Reply.tool_use(call, "bash", {"command": command}), Reply.text(RECOVERED))
    async with spawn(rig) as agent:
        await started(agent)
        sid = await new_session(agent, rig, mode="yolo")
        turn = start_turn(agent, sid, "Wait for the release.")
        await agent.client.wait_for(
            lambda: bool(updates_of(agent.client, "tool_call_update", status="in_progress")),
            TIMEOUT,
        )
        await child_pid(rig, pid_file)
        await agent.conn.cancel(session_id=sid)
        assert (await asyncio.wait_for(turn, TIMEOUT)).stop_reason == "cancelled"
        (rig.work / "release").touch()
        response = await asyncio.wait_for(agent.prompt(sid, "And now?"), TIMEOUT)
        assert response.stop_reason == "end_turn"
        assert agent.client.text(sid).endswith(RECOVERED)
        await settled(chat)
        agent.assert_schema_clean()

    assert_all_accepted(chat.requests)
    _, after = chat.requests
    assert after.route == "chat"
    answer = chat_answer(after.body, call)
    stored = results(rig.log(sid))
    assert call in stored, "the cancel recorded no result for its call"
    assert answer["content"] == f"Error: {CANCELLED}", "the cancel's own result was not sent"
    assert INTERRUPTED not in json.dumps(after.body)
    assert not (rig.work / "ran.txt").exists(), "the cancelled command ran on"


async def test_kill_while_the_chat_stream_sends_call_fragments(
    rig: Rig, chat: FakeProvider
) -> None:
    """The fake holds the stream mid-arguments (until the client goes away): the partial
    call never runs and never becomes history; the next request is legal.

    The fragments themselves are shown to no one (`defect_core/turn/request.py`), so the text
    that leads them in the same stream is the gate: once the editor has all of it, the agent
    is reading this stream and the fake has sent the call's opening and fragments after it.
    Whether the agent has parsed those when the kill lands is not observable from outside;
    either way, no part of the call may run or be stored."""
    lead = "Touching it."
    partial = dataclasses.replace(
        Reply.of([TextBlock(lead), ToolUseBlock("call_p1", "bash", {"command": "touch ran.txt"})]),
        chunk_size=3,
    )
    held_at = 1 + len(lead) // 3 + 1 + 3  # role, the text, the call's opening, 3 fragments
    chat.enqueue(partial.stall(held_at))
    async with spawn(rig) as agent:
        await started(agent)
        sid = await new_session(agent, rig, mode="yolo")
        turn = start_turn(agent, sid, "Touch a file.")
        await anyio.to_thread.run_sync(
            lambda: chat.wait_until(lambda rs: bool(rs) and rs[0].events_sent >= held_at, TIMEOUT)
        )
        await agent.client.wait_for(lambda: agent.client.text(sid) == lead, TIMEOUT)
        await kill_mid_turn(agent, turn)
    (held,) = chat.requests
    assert held.events_sent == held_at and held.outcome != "completed"

    log = rig.log(sid)
    assert [m["role"] for m in log] == ["user"] and not uses(log)

    recovery = await reload_and_prompt(rig, sid, chat)
    assert [u["sessionUpdate"] for u in recovery.replay] == ["user_message_chunk"]
    (request,) = recovery.requests
    assert request.route == "chat"
    assert not any(m.get("tool_calls") for m in request.body["messages"])
    assert not any(m["role"] == "tool" for m in request.body["messages"])
    assert "call_p1" not in json.dumps(request.body) and lead not in json.dumps(request.body)
    assert not (rig.work / "ran.txt").exists(), "the partial call ran"


async def test_a_killed_chat_session_switched_to_claude_sends_a_legal_request(
    rig: Rig, alpha: FakeProvider, chat: FakeProvider
) -> None:
    """Killed with a chat-minted call id unanswered (its permission question open), loaded
    and switched to Claude: the Messages fake accepts the request, the call's id mapped to
    the shape that wire takes and answered by the repair's text."""
    orphan = "functions.bash:0"  # as some chat servers mint ids; the Messages wire forbids it
    chat.enqueue(Reply.tool_use(orphan, "bash", {"command": "touch ran.txt"}))
    async with spawn(rig) as agent:
        await started(agent)
        sid = await new_session(agent, rig)  # mode "ask": the question stays open
        agent.client.permission_gate = asyncio.Event()
        turn = start_turn(agent, sid, "Touch a file.")
        await until(lambda: bool(agent.client.permission_requests), "the permission question")
        await kill_mid_turn(agent, turn)
    assert_all_accepted(chat.requests)
    (stored,) = uses(rig.log(sid))  # mapped as it entered history, legal on both wires
    assert stored != orphan and stored.startswith("call_")
    assert rig.tool_call_status(sid) == {stored: "pending"}

    recovery = await reload_and_prompt(rig, sid, alpha, model="alpha/claude-sonnet-5-5")
    assert_replayed_interrupted(recovery.tool_call(stored))
    (request,) = recovery.requests
    assert request.route == "anthropic"
    (mapped,) = uses(request.body["messages"])
    assert mapped == stored and ":" not in mapped and "." not in mapped
    assert_synthetic_answer(request.body, mapped)
    assert_orphan_kept(rig, sid, [stored])
    assert len(chat.requests) == 1, "the switched session still asked the chat model"
    assert not (rig.work / "ran.txt").exists()
