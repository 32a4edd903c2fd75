"""Kill -9 the real `defect acp` at each point of a turn, start it again, and check recovery.

Covers the founding scenario (docs/architecture.md, Integrity): whatever interrupts a turn, the
next request to the
model is wire-legal, repaired on the outbound copy only, while the stored history stays the
truth. Each test drives the real process over stdio against the strict fake provider, SIGKILLs
it at one point of a turn — during the model's stream; with the assistant's `tool_use`
committed and its permission question pending; while the tool runs; right after the tool's
result is reported — then starts a new process on the same state directory and checks:

- `session/load` replays what was committed, and nothing else: the user's prompt, no partial
  agent text, each tool call with its title, shown final — `failed`, saying it was
  interrupted and no result was recorded, never a `pending` or `in_progress` card an editor
  would spin on forever;
- the next `session/prompt` ends `end_turn` and every request the fake saw after the restart
  was accepted, with the orphan `tool_use` answered by the synthetic error result
  "tool call interrupted; no result was recorded" in the request body;
- the store (read with stdlib `sqlite3`, read-only) still holds the orphan and no
  `tool_result` for it: the repair never reached the source of truth.

A session killed twice (an orphan deep in history, then a fresh one) must recover the same
way. A call killed between its `completed` report and the commit of its batch's results is
covered twice: as it happens (either state, checked for consistency between store, request and
replay) and deterministically (a batch whose other call still runs): the replay must show such
a call as interrupted, not completed, since that is what the model is told.

A command the agent started leads its own process group; its lifeline (see
`defect_core/tools/backends.py`) kills that group when the agent dies, which the kill-while-
the-tool-runs test checks. The `rig` fixture still kills the groups at teardown, in case.

Why SIGKILL: a cancel or a provider error is handled in-process (the turn commits results for
its calls); only a kill can leave an orphan, so only a kill proves the read-side repair.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sqlite3
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from defect_fakeapi import (
    DEFAULT_API_KEY,
    FakeProvider,
    Reply,
    RequestRecord,
    ToolUseBlock,
)
from tests.support.acp_harness import Agent, RecordingClient, agent_env, spawn_defect

pytestmark = pytest.mark.anyio

INTERRUPTED = "tool call interrupted; no result was recorded"
"""The synthetic result the outbound repair gives an orphan `tool_use` (docs/architecture.md,
Integrity)."""
RECOVERED = "Back again, nothing lost."
"""What the fake answers the first prompt after a restart."""
TIMEOUT = 15.0
"""Upper bound for any single wait; a healthy run needs a fraction of it."""


Json = dict[str, Any]


# --- the test's view of one state directory ------------------------------------------------


@dataclass
class Rig:
    """One project directory and one defect state directory shared by successive processes."""

    root: Path
    children: list[int] = field(default_factory=list)
    """Process groups of commands the killed agent left running (killed at teardown)."""

    @property
    def work(self) -> Path:
        return self.root / "work"

    @property
    def state(self) -> Path:
        return self.root / "state"

    @property
    def db(self) -> Path:
        return self.state / "sessions.sqlite3"

    def env(self, fake: FakeProvider) -> dict[str, str]:
        return agent_env(
            DEFECT_PROVIDER="anthropic",
            ANTHROPIC_BASE_URL=fake.url,
            ANTHROPIC_API_KEY=DEFAULT_API_KEY,
            DEFECT_STATE_DIR=str(self.state),
            DEFECT_RETRIES="0",  # a failed call fails the turn at once: no backoff hides it
        )

    def _query(self, sql: str, session_id: str) -> list[tuple[Any, ...]]:
        # Read-only, stdlib only: the test reads the file the way an auditor would, never
        # through the store it is checking.
        with contextlib.closing(sqlite3.connect(f"file:{self.db}?mode=ro", uri=True)) as conn:
            return conn.execute(sql, (session_id,)).fetchall()

    def log(self, session_id: str) -> list[Json]:
        """The session's `messages` table, in order, as JSON bodies."""
        rows = self._query(
            "SELECT body FROM messages WHERE session_id = ? ORDER BY seq", session_id
        )
        return [json.loads(body) for (body,) in rows]

    def tool_call_status(self, session_id: str) -> dict[str, str]:
        rows = self._query(
            "SELECT tool_call_id, status FROM tool_calls WHERE session_id = ?", session_id
        )
        return {tc_id: status for tc_id, status in rows}


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    rig = Rig(tmp_path)
    rig.work.mkdir()
    yield rig
    for pgid in rig.children:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)


# --- reading messages and request bodies ---------------------------------------------------


def blocks(message: Json) -> list[Json]:
    content = message["content"]
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return list(content)


def texts(message: Json) -> list[str]:
    return [b["text"] for b in blocks(message) if b.get("type") == "text"]


def uses(messages: list[Json]) -> list[str]:
    return [b["id"] for m in messages for b in blocks(m) if b.get("type") == "tool_use"]


def results(messages: list[Json]) -> dict[str, Json]:
    return {
        b["tool_use_id"]: b for m in messages for b in blocks(m) if b.get("type") == "tool_result"
    }


def result_text(result: Json) -> str:
    content = result.get("content", "")
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content if part.get("type") == "text")


def answer_to(messages: list[Json], tool_use_id: str) -> Json:
    """The `tool_result` for `tool_use_id` in the message right after its `tool_use`, where
    the API demands it (results first in that user message)."""
    at = next(
        i for i, m in enumerate(messages) if m["role"] == "assistant" and tool_use_id in uses([m])
    )
    assert at + 1 < len(messages), f"nothing follows the tool_use {tool_use_id}"
    following = messages[at + 1]
    assert following["role"] == "user", f"the tool_use {tool_use_id} is not followed by a user"
    leading: list[Json] = []
    for block in blocks(following):
        if block.get("type") != "tool_result":
            break
        leading.append(block)
    found = [b for b in leading if b["tool_use_id"] == tool_use_id]
    assert found, f"no tool_result for {tool_use_id} leads the next user message: {following}"
    return found[0]


def assert_synthetic_answer(body: Json, tool_use_id: str) -> None:
    result = answer_to(body["messages"], tool_use_id)
    assert result.get("is_error") is True, result
    assert result_text(result) == INTERRUPTED, result


def assert_replayed_interrupted(call: Json) -> None:
    """A replayed card of a call with no result in history: final (`failed`, whatever its
    tool_calls row says), ending with the words the model is told."""
    assert call["status"] == "failed", call
    assert call["content"][-1] == {
        "type": "content",
        "content": {"type": "text", "text": INTERRUPTED},
    }


def assert_all_accepted(requests: list[RequestRecord]) -> None:
    for r in requests:
        assert r.done.is_set(), f"request #{r.index} was still in flight"
        assert not r.rejected, f"request #{r.index} rejected: {r.error_message}"


def model_calls(requests: list[RequestRecord]) -> list[RequestRecord]:
    return [r for r in requests if r.route == "anthropic"]


# --- driving processes ---------------------------------------------------------------------


async def until(predicate: Callable[[], bool], what: str, timeout: float = TIMEOUT) -> None:
    """Poll `predicate` (for conditions no update announces, e.g. a permission question)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.005)


def updates_of(client: RecordingClient, kind: str, **fields: Any) -> list[Any]:
    return [
        u
        for _, u in client.updates
        if u.session_update == kind and all(getattr(u, k, None) == v for k, v in fields.items())
    ]


@contextlib.asynccontextmanager
async def running(rig: Rig, *replies: Reply) -> AsyncIterator[tuple[Agent, FakeProvider]]:
    """A fresh fake scripted with `replies` and a `defect acp` pointed at it, initialized."""
    async with FakeProvider() as fake:
        fake.enqueue(*replies)
        async with spawn_defect(env=rig.env(fake), client=RecordingClient()) as agent:
            await agent.initialize()
            yield agent, fake


async def kill_mid_turn(agent: Agent, turn: asyncio.Task[Any]) -> None:
    """SIGKILL the process; the pending `session/prompt` dies with the connection."""
    agent.process.kill()
    assert await asyncio.wait_for(agent.process.wait(), TIMEOUT) == -signal.SIGKILL
    with pytest.raises(ConnectionError):
        await asyncio.wait_for(turn, TIMEOUT)


def start_turn(agent: Agent, session_id: str, text: str) -> asyncio.Task[Any]:
    return asyncio.create_task(agent.prompt(session_id, text))


def replayed(agent: Agent) -> list[Json]:
    """The `session/update`s the agent wrote between the `session/load` request and its
    answer, read off the wire in the order they were written."""
    messages = agent.wire.messages
    load_id = next(
        m["id"] for d, m in messages if d == "client" and m.get("method") == "session/load"
    )
    start = next(i for i, (d, m) in enumerate(messages) if d == "client" and m.get("id") == load_id)
    replay: list[Json] = []
    for direction, message in messages[start + 1 :]:
        if direction != "agent":
            continue
        if message.get("id") == load_id and "method" not in message:
            assert "result" in message, f"session/load failed: {message}"
            return replay
        if message.get("method") == "session/update":
            replay.append(message["params"]["update"])
    raise AssertionError("session/load was not answered")


@dataclass
class Recovery:
    replay: list[Json]
    requests: list[RequestRecord]
    """Everything the fake saw from the restarted process."""

    def tool_call(self, tool_use_id: str) -> Json:
        calls = [
            u
            for u in self.replay
            if u["sessionUpdate"] == "tool_call" and u["toolCallId"] == tool_use_id
        ]
        assert len(calls) == 1, f"replay shows {len(calls)} tool_call(s) for {tool_use_id}"
        return calls[0]

    def user_text(self) -> str:
        return "".join(
            u["content"].get("text", "")
            for u in self.replay
            if u["sessionUpdate"] == "user_message_chunk"
        )


async def restart_and_prompt(rig: Rig, session_id: str, text: str = "Are you back?") -> Recovery:
    """A new process on the same state: load (replay), prompt once, the fake answers text."""
    async with running(rig, Reply.text(RECOVERED)) as (agent, fake):
        await agent.conn.load_session(cwd=str(rig.work), session_id=session_id, mcp_servers=[])
        replay = replayed(agent)
        response = await asyncio.wait_for(agent.prompt(session_id, text), TIMEOUT)
        assert response.stop_reason == "end_turn"
        replayed_text = "".join(
            u["content"].get("text", "")
            for u in replay
            if u["sessionUpdate"] == "agent_message_chunk"
        )
        assert agent.client.text(session_id) == replayed_text + RECOVERED
        agent.assert_schema_clean()
        requests = fake.requests
        fake.assert_script_consumed()
    assert_all_accepted(requests)
    assert len(model_calls(requests)) == 1
    return Recovery(replay, requests)


async def new_session(agent: Agent, rig: Rig, mode: str | None = None) -> str:
    session_id = await agent.new_session(rig.work)
    if mode is not None:
        await agent.conn.set_session_mode(session_id=session_id, mode_id=mode)
    return session_id


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def child_pid(rig: Rig, pid_file: Path) -> int:
    """The pid a `bash` call wrote; registered so the fixture kills its process group (the
    command leads its own group, so the agent's SIGKILL spares it)."""
    await until(lambda: pid_file.exists() and pid_file.read_text().strip() != "", "the pid")
    pid = int(pid_file.read_text())
    rig.children.append(pid)
    return pid


def tool_id(tag: str) -> str:
    """A `toolu_01…` id (24 characters after the prefix, like the real ones)."""
    return "toolu_01" + tag.ljust(24, "0")[:24]


# --- kill points ---------------------------------------------------------------------------


async def test_kill_during_the_stream_keeps_only_the_user_message(rig: Rig) -> None:
    """Partial output of a killed stream never becomes history, nor appears in the replay."""
    long_text = " ".join(f"word{i}" for i in range(2000))
    async with running(rig, Reply.text(long_text).slow(0.05)) as (agent, _):
        sid = await new_session(agent, rig)
        turn = start_turn(agent, sid, "Tell me a long story.")
        await agent.client.wait_for(
            lambda: "agent_message_chunk" in agent.client.kinds(sid), TIMEOUT
        )
        shown = agent.client.text(sid)
        assert shown and long_text.startswith(shown)
        agent.assert_schema_clean()
        await kill_mid_turn(agent, turn)

    log = rig.log(sid)
    assert [(m["role"], texts(m)) for m in log] == [("user", ["Tell me a long story."])]

    recovery = await restart_and_prompt(rig, sid)
    assert [u["sessionUpdate"] for u in recovery.replay] == ["user_message_chunk"]
    assert recovery.user_text() == "Tell me a long story."

    (call,) = model_calls(recovery.requests)
    body = json.dumps(call.body["messages"])
    assert "word0" not in body, "the killed stream's partial text reached the model"
    assert [m["role"] for m in call.body["messages"]] == ["user"], (
        "two user turns in a row go out merged, with no assistant message between them"
    )
    sent = texts(call.body["messages"][0])
    assert "Tell me a long story." in sent and "Are you back?" in sent

    after = rig.log(sid)
    assert after[: len(log)] == log, "the log is append-only"
    assert [(m["role"], texts(m)) for m in after[len(log) :]] == [
        ("user", ["Are you back?"]),
        ("assistant", [RECOVERED]),
    ]
    assert not any("word0" in json.dumps(m) for m in after)


async def test_kill_while_a_permission_question_is_pending(rig: Rig) -> None:
    """The assistant's tool_use is committed and its permission question is pending (mode
    "ask"): the kill leaves an orphan. (The twice-killed test below does the same with
    write_file.)"""
    orphan = tool_id("PermissionPending")
    command = "touch ran.txt"
    async with running(rig, Reply.tool_use(orphan, "bash", {"command": command})) as (
        agent,
        fake,
    ):
        sid = await new_session(agent, rig)  # mode "ask": bash asks first
        agent.client.permission_gate = asyncio.Event()  # never set: the question stays open
        turn = start_turn(agent, sid, "Please touch a file.")
        await until(lambda: bool(agent.client.permission_requests), "the permission question")
        (announced,) = updates_of(agent.client, "tool_call", tool_call_id=orphan)
        assert announced.status == "pending" and announced.title == command
        assert agent.client.permission_requests[0].tool_call.tool_call_id == orphan
        agent.assert_schema_clean()
        await kill_mid_turn(agent, turn)
        assert_all_accepted(fake.requests)

    assert not (rig.work / "ran.txt").exists(), "the tool ran without an answer"
    log = rig.log(sid)
    assert [m["role"] for m in log] == ["user", "assistant"]
    assert uses(log) == [orphan] and not results(log)
    assert rig.tool_call_status(sid) == {orphan: "pending"}

    recovery = await restart_and_prompt(rig, sid)
    assert [u["sessionUpdate"] for u in recovery.replay] == ["user_message_chunk", "tool_call"]
    assert recovery.user_text() == "Please touch a file."
    call = recovery.tool_call(orphan)
    assert call["title"] == command
    assert_replayed_interrupted(call)

    for request in model_calls(recovery.requests):
        assert_synthetic_answer(request.body, orphan)
    assert_orphan_kept(rig, sid, [orphan])
    assert not (rig.work / "ran.txt").exists(), "the interrupted call was run after the restart"


async def test_kill_while_the_tool_runs(rig: Rig) -> None:
    """The command is running (in_progress) when the agent dies: the call stays unclosed, and
    the command is not run again after the restart."""
    pid_file = rig.work / "child.pid"
    command = f"echo $$ > {pid_file.name}; exec sleep 30"
    orphan = tool_id("Running")
    async with running(rig, Reply.tool_use(orphan, "bash", {"command": command})) as (
        agent,
        fake,
    ):
        sid = await new_session(agent, rig, mode="yolo")
        turn = start_turn(agent, sid, "Wait for a while.")
        await agent.client.wait_for(
            lambda: bool(updates_of(agent.client, "tool_call_update", status="in_progress")),
            TIMEOUT,
        )
        child = await child_pid(rig, pid_file)
        assert alive(child), "the command should be running when the agent is killed"
        agent.assert_schema_clean()
        await kill_mid_turn(agent, turn)
        assert_all_accepted(fake.requests)
    (announced,) = updates_of(agent.client, "tool_call", tool_call_id=orphan)
    deadline = time.monotonic() + 5
    while alive(child) and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    assert not alive(child), "a command must not outlive the agent that started it"

    log = rig.log(sid)
    assert [m["role"] for m in log] == ["user", "assistant"]
    assert uses(log) == [orphan] and not results(log)
    assert rig.tool_call_status(sid) == {orphan: "in_progress"}

    recovery = await restart_and_prompt(rig, sid)
    assert [u["sessionUpdate"] for u in recovery.replay] == ["user_message_chunk", "tool_call"]
    call = recovery.tool_call(orphan)
    assert call["title"] == announced.title == command
    assert_replayed_interrupted(call)
    for request in model_calls(recovery.requests):
        assert_synthetic_answer(request.body, orphan)
    assert_orphan_kept(rig, sid, [orphan])
    assert int(pid_file.read_text()) == child, "the interrupted command was run again"


async def test_kill_while_the_result_is_being_committed(rig: Rig) -> None:
    """Killed right after the tool reported `completed`, with the next model call in flight:
    the result may or may not have been committed (both happen). Either way the session
    recovers, and the store alone decides what the model sees: the real result if it was
    committed, the synthetic one if not — never a synthetic result in the store."""
    (rig.work / "README.md").write_text("# Demo\nthe readme's own words\n")
    used = tool_id("Committing")
    script = (
        Reply.tool_use(used, "read_file", {"path": "README.md"}),
        Reply.text("never finished").stall(1),  # the turn is still in flight at the kill
    )
    async with running(rig, *script) as (agent, fake):
        sid = await new_session(agent, rig, mode="yolo")
        turn = start_turn(agent, sid, "Read the readme.")
        await agent.client.wait_for(
            lambda: bool(updates_of(agent.client, "tool_call_update", status="completed")),
            TIMEOUT,
        )
        agent.assert_schema_clean()
        await kill_mid_turn(agent, turn)
        before = fake.requests
    (announced,) = updates_of(agent.client, "tool_call", tool_call_id=used)
    for request in before:
        assert not request.rejected, f"request #{request.index}: {request.error_message}"

    log = rig.log(sid)
    committed = used in results(log)
    assert uses(log) == [used]
    assert [m["role"] for m in log] == ["user", "assistant", "user"][: 3 if committed else 2]
    assert rig.tool_call_status(sid) == {used: "completed"}
    if len(model_calls(before)) > 1:
        assert committed, "the next model call went out before the results were committed"

    recovery = await restart_and_prompt(rig, sid)
    call = recovery.tool_call(used)
    assert call["title"] == announced.title
    (request,) = model_calls(recovery.requests)
    if committed:
        answer = answer_to(request.body["messages"], used)
        assert not answer.get("is_error")
        assert "the readme's own words" in result_text(answer)
        assert INTERRUPTED not in json.dumps(request.body)
        assert results(rig.log(sid))[used] == results(log)[used]
        assert call["status"] == "completed"
    else:
        assert_synthetic_answer(request.body, used)
        assert_orphan_kept(rig, sid, [used])
        assert_replayed_interrupted(call)


async def test_a_completed_call_whose_result_was_never_committed_replays_interrupted(
    rig: Rig,
) -> None:
    """The deterministic form of the uncommitted case above: two calls in one batch, the read
    has completed, the command still runs, so their results (committed together) cannot be
    in the store at the kill. Everything recovers; the replay must show the completed-but-
    unrecorded read as interrupted, as the model is told, not as completed."""
    (rig.work / "README.md").write_text("# Demo\n")
    pid_file = rig.work / "child.pid"
    read, wait = tool_id("BatchRead"), tool_id("BatchWait")
    batch = Reply.of(
        [
            ToolUseBlock(read, "read_file", {"path": "README.md"}),
            ToolUseBlock(wait, "bash", {"command": f"echo $$ > {pid_file.name}; exec sleep 30"}),
        ]
    )
    async with running(rig, batch) as (agent, fake):
        sid = await new_session(agent, rig, mode="yolo")
        turn = start_turn(agent, sid, "Read and wait.")
        await agent.client.wait_for(
            lambda: bool(
                updates_of(agent.client, "tool_call_update", tool_call_id=read, status="completed")
            ),
            TIMEOUT,
        )
        assert alive(await child_pid(rig, pid_file))
        await kill_mid_turn(agent, turn)
        assert_all_accepted(fake.requests)

    log = rig.log(sid)
    assert uses(log) == [read, wait] and not results(log)
    assert rig.tool_call_status(sid) == {read: "completed", wait: "in_progress"}

    recovery = await restart_and_prompt(rig, sid)
    (request,) = model_calls(recovery.requests)
    assert_synthetic_answer(request.body, read)
    assert_synthetic_answer(request.body, wait)
    assert_orphan_kept(rig, sid, [read, wait])
    assert_replayed_interrupted(recovery.tool_call(wait))
    # Not "completed" (its tool_calls row), though no result was recorded and the model was
    # just told it was interrupted.
    assert_replayed_interrupted(recovery.tool_call(read))


def cards_of(client: RecordingClient, session_id: str, call_id: str) -> list[Json]:
    """Every `tool_call` / `tool_call_update` the client was sent for `call_id`, as JSON."""
    return [
        u.model_dump(mode="json", by_alias=True, exclude_none=True)
        for sid, u in client.updates
        if sid == session_id
        and u.session_update in ("tool_call", "tool_call_update")
        and u.tool_call_id == call_id
    ]


async def test_an_interrupted_call_is_final_after_load_resume_and_the_resume_flag(
    rig: Rig,
) -> None:
    """Killed while a write's call runs (its permission question open): whichever way a new
    process opens the session — `session/load`, `defect acp --resume ID` (which replays it
    after the answer), `session/resume` (which replays nothing) — the editor is never sent the
    call as pending or in progress: only its final card, failed, interrupted."""
    orphan = tool_id("WriteKilled")
    write = Reply.tool_use(orphan, "write_file", {"path": "notes.txt", "content": "x\n"})
    async with running(rig, write) as (agent, _fake):
        sid = await new_session(agent, rig)  # mode "ask": the write asks first
        agent.client.permission_gate = asyncio.Event()  # never answered
        turn = start_turn(agent, sid, "Write the notes.")
        await until(lambda: bool(agent.client.permission_requests), "the permission question")
        await kill_mid_turn(agent, turn)
    assert rig.tool_call_status(sid) == {orphan: "pending"}

    async with running(rig) as (agent, _fake):
        await agent.conn.load_session(cwd=str(rig.work), session_id=sid, mcp_servers=[])
        (card,) = cards_of(agent.client, sid, orphan)
        assert card["sessionUpdate"] == "tool_call" and card["title"] == "Write notes.txt"
        assert_replayed_interrupted(card)
        agent.assert_schema_clean()

    async with FakeProvider() as fake:
        client = RecordingClient()
        async with spawn_defect("--resume", sid, env=rig.env(fake), client=client) as agent:
            await agent.initialize()
            assert await agent.new_session(rig.work) == sid
            await client.wait_for(lambda: bool(cards_of(client, sid, orphan)), TIMEOUT)
            (card,) = cards_of(client, sid, orphan)
            assert_replayed_interrupted(card)
            await agent.conn.resume_session(cwd=str(rig.work), session_id=sid, mcp_servers=[])
            agent.assert_schema_clean()
        assert cards_of(client, sid, orphan) == [card]  # the resume sent nothing of it

    async with running(rig) as (agent, _fake):
        await agent.conn.resume_session(cwd=str(rig.work), session_id=sid, mcp_servers=[])
        assert cards_of(agent.client, sid, orphan) == []
    assert not (rig.work / "notes.txt").exists()
    assert rig.tool_call_status(sid) == {orphan: "pending"}  # the store is left as it was


async def test_a_temporary_a_killed_write_left_is_swept_when_the_session_loads(
    rig: Rig,
) -> None:
    """A write killed before its rename leaves its temporary beside its file, in a directory
    no checkpoint names yet (planted here, named as the killed process names them: the kill
    cannot be made to land between the write and the rename). Loading the session sweeps it,
    found through the interrupted call's location; the user's look-alike stays."""
    orphan = tool_id("WriteDeep")
    write = Reply.tool_use(orphan, "write_file", {"path": "deep/er/notes.txt", "content": "x\n"})
    async with running(rig, write) as (agent, _fake):
        sid = await new_session(agent, rig)
        agent.client.permission_gate = asyncio.Event()
        turn = start_turn(agent, sid, "Write the notes.")
        await until(lambda: bool(agent.client.permission_requests), "the permission question")
        await kill_mid_turn(agent, turn)
        killed = agent.process.pid
    where = rig.work / "deep" / "er"
    where.mkdir(parents=True)
    left = where / f".defect.{killed}.00c0ffee00c0ffee.tmp"
    left.write_text("a whole copy\n")
    mine = where / ".notes.txt.00c0ffee.tmp"
    mine.write_text("the user's\n")
    async with running(rig) as (agent, _fake):
        await agent.conn.load_session(cwd=str(rig.work), session_id=sid, mcp_servers=[])
    assert not left.exists(), "the killed write's temporary outlived the load"
    assert mine.read_text() == "the user's\n"


async def test_a_session_killed_twice_recovers_with_both_orphans(rig: Rig) -> None:
    """Two kills in one session: an orphan deep in history and a fresh one, both repaired on
    the way out on every request, both kept as they are in the store."""
    first = tool_id("FirstOrphan")
    second = tool_id("SecondOrphan")

    async with running(rig, Reply.tool_use(first, "bash", {"command": "touch one.txt"})) as (
        agent,
        _,
    ):
        sid = await new_session(agent, rig)
        agent.client.permission_gate = asyncio.Event()
        turn = start_turn(agent, sid, "First try.")
        await until(lambda: bool(agent.client.permission_requests), "the first question")
        await kill_mid_turn(agent, turn)

    # The second process finishes one turn (the first orphan goes out repaired), then dies
    # with a second question pending.
    script = (
        Reply.text("Understood."),
        Reply.tool_use(second, "write_file", {"path": "two.txt", "content": "2\n"}),
    )
    async with running(rig, *script) as (agent, fake):
        await agent.conn.load_session(cwd=str(rig.work), session_id=sid, mcp_servers=[])
        response = await asyncio.wait_for(agent.prompt(sid, "Second try."), TIMEOUT)
        assert response.stop_reason == "end_turn"
        agent.client.permission_gate = asyncio.Event()
        turn = start_turn(agent, sid, "Third try.")
        await until(lambda: bool(agent.client.permission_requests), "the second question")
        agent.assert_schema_clean()
        await kill_mid_turn(agent, turn)
        middle = fake.requests
    assert_all_accepted(middle)
    assert len(model_calls(middle)) == 2
    for request in model_calls(middle):
        assert_synthetic_answer(request.body, first)

    log = rig.log(sid)
    roles = ["user", "assistant", "user", "assistant", "user", "assistant"]
    assert [m["role"] for m in log] == roles, "kill, full turn, kill"
    assert uses(log) == [first, second] and not results(log)

    recovery = await restart_and_prompt(rig, sid, "Fourth try.")
    replay_kinds = [u["sessionUpdate"] for u in recovery.replay]
    assert replay_kinds.count("tool_call") == 2
    assert_replayed_interrupted(recovery.tool_call(first))
    assert_replayed_interrupted(recovery.tool_call(second))
    assert recovery.user_text() == "First try.Second try.Third try."
    (request,) = model_calls(recovery.requests)
    assert_synthetic_answer(request.body, first)
    assert_synthetic_answer(request.body, second)
    assert_orphan_kept(rig, sid, [first, second])
    assert not (rig.work / "one.txt").exists() and not (rig.work / "two.txt").exists()


def assert_orphan_kept(rig: Rig, session_id: str, orphans: list[str]) -> None:
    """The store still holds each orphan `tool_use` and no `tool_result` for it: the repair
    reached only the outbound copy."""
    log = rig.log(session_id)
    stored = set(uses(log))
    answered = results(log)
    for orphan in orphans:
        assert orphan in stored, f"the orphan {orphan} is gone from the store"
        assert orphan not in answered, f"a result for {orphan} was written to the store"
    assert INTERRUPTED not in json.dumps(log), "a synthetic result leaked into the store"
    assert log[-1]["role"] == "assistant" and texts(log[-1]) == [RECOVERED]
