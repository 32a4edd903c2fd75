"""Lifecycle of the real `defect acp` process: cancels at any moment, shutdown mid-turn, and a
session store that cannot be used.

- Cancel storm: one agent process, hundreds of prompts on the offline model (a looping script
  of tool calls: `bash` commands that sleep a random few milliseconds, file reads), each
  cancelled after a random delay. Read off the wire, every tool call gets exactly one final
  `tool_call_update` (`completed` or `failed`) and nothing of a turn follows its
  `session/prompt` answer; read off the store, every committed `tool_use` has exactly one
  result; and a new process on the same state sends a request the strict fake API accepts.
- The same, exhaustively and in process: one turn of the runner (model chunks, tool calls that
  run, fail, ask, are unknown) cancelled at each of its points in turn — every publish, commit,
  streamed chunk, permission answer and tool step — until a run passes them all.
- Shutdown: stdin closed or SIGTERM while the model streams or while a `sleep 30` runs: the
  prompt is answered `cancelled`, the store holds the turn as a cancel commits it, the command
  is killed and the process exits 0.
- An unusable store — a state directory that cannot be created, a damaged database, a lock
  held by another process, a full disk (`RLIMIT_FSIZE` on the agent makes writes fail as on a
  full disk) — is told to the client: no `loadSession` when nothing can be saved, a warning in
  each new session (or a refused `session/new` under `require_persistence`), an error naming
  the reason on a prompt whose messages cannot be saved, a warning when only the replay
  record of a tool call cannot; and the agent keeps serving.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import resource
import signal
import sqlite3
from collections import Counter
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any, ClassVar

import anyio
import anyio.lowlevel
import pytest
from acp import RequestError

from defect_core.events import PermissionRequested, ToolCallStarted, ToolCallUpdated
from defect_core.history import VecHistory
from defect_core.integrity import repair_outbound
from defect_core.model import Message, TextBlock, message_to_json
from defect_core.policy import PermissionRules
from defect_core.providers.anthropic_wire import encode_messages
from defect_core.providers.base import Completed, ModelRequest, StreamChunk
from defect_core.providers.scripted import ScriptedProvider
from defect_core.tools.base import (
    Safety,
    ToolCallView,
    ToolContext,
    ToolError,
    ToolOutput,
    ToolRegistry,
)
from defect_core.turn import CANCELLED_RESULT_TEXT, TurnConfig, TurnDeps, TurnRunner
from defect_fakeapi import DEFAULT_API_KEY, FakeProvider, Reply, validate_request
from tests.support.acp_harness import Agent, RecordingClient, agent_env, script_env, spawn_defect

pytestmark = pytest.mark.anyio

Json = dict[str, Any]
TIMEOUT = 15.0
"""Upper bound for a single wait; a healthy run needs a fraction of it."""
FINAL = ("completed", "failed")
SESSION_KINDS = ("available_commands_update", "current_mode_update", "config_option_update")
"""Updates about the session, not about a turn: they may come between prompts."""


# --- reading the wire and the store --------------------------------------------------------


def check_turns_on_the_wire(agent: Agent, session_ids: set[str]) -> Counter[str]:
    """Walk the wire in order: each tool call announced once, ended by exactly one final
    update and nothing after it, and no update of a turn outside a running `session/prompt`
    (from its request to its answer). Returns how many calls ended how."""
    running: dict[str, Any] = {}  # session id -> id of its running prompt
    prompt_session: dict[Any, str] = {}
    announced: set[str] = set()
    finals: Counter[str] = Counter()
    ended: dict[str, str] = {}
    problems: list[str] = []
    started = False
    for position, (direction, message) in enumerate(agent.wire.messages):
        method = message.get("method")
        if direction == "client":
            if method == "session/prompt":
                sid = message["params"]["sessionId"]
                running[sid] = message["id"]
                prompt_session[message["id"]] = sid
                started = True
            continue
        if method is None and message.get("id") in prompt_session:
            sid = prompt_session.pop(message["id"])
            assert "result" in message, f"#{position}: the prompt failed: {message}"
            running.pop(sid, None)
            continue
        if method != "session/update" or not started:
            continue
        sid = message["params"]["sessionId"]
        if sid not in session_ids:
            continue
        update = message["params"]["update"]
        kind = update["sessionUpdate"]
        if sid not in running and kind not in SESSION_KINDS:
            problems.append(f"#{position}: {kind} after the prompt was answered: {update}")
        if kind == "tool_call":
            call_id = update["toolCallId"]
            if call_id in announced:
                problems.append(f"#{position}: tool call {call_id} announced twice")
            announced.add(call_id)
        elif kind == "tool_call_update":
            call_id = update["toolCallId"]
            if call_id not in announced:
                problems.append(f"#{position}: update of unannounced tool call {call_id}")
            if call_id in ended:
                problems.append(
                    f"#{position}: update of {call_id} after its final {ended[call_id]}: {update}"
                )
            status = update.get("status")
            if status in FINAL:
                ended[call_id] = status
                finals[status] += 1
    unended = sorted(announced - set(ended))
    if unended:
        problems.append(f"{len(unended)} tool call(s) never got a final status: {unended[:5]}")
    assert not problems, "\n".join(problems[:20])
    return finals


def stored_messages(db: Path, session_id: str) -> list[Json]:
    """The session's message log, read with stdlib sqlite3, read-only."""
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        rows = conn.execute(
            "SELECT body FROM messages WHERE session_id = ? ORDER BY seq", (session_id,)
        ).fetchall()
    return [json.loads(body) for (body,) in rows]


def blocks_of(message: Json, kind: str) -> list[Json]:
    content = message["content"]
    if isinstance(content, str):
        return []
    return [b for b in content if b.get("type") == kind]


def check_every_tool_use_has_one_result(log: list[Json]) -> int:
    """Every `tool_use` is answered exactly once, by the next message, and nothing else is
    answered. Returns how many tool uses there were."""
    count = 0
    for i, message in enumerate(log):
        uses = [b["id"] for b in blocks_of(message, "tool_use")]
        if not uses:
            continue
        count += len(uses)
        assert i + 1 < len(log), f"message {i}: tool_use {uses} is the last message"
        following = log[i + 1]
        assert following["role"] == "user", f"message {i}: tool_use not followed by a user"
        answered = [b["tool_use_id"] for b in blocks_of(following, "tool_result")]
        assert answered == uses, f"message {i}: uses {uses}, results {answered}"
    all_results = [b["tool_use_id"] for m in log for b in blocks_of(m, "tool_result")]
    assert len(all_results) == count, "a tool_result answers no tool_use"
    return count


# --- the cancel storm ----------------------------------------------------------------------

STORM_CANCELS = 200
"""Turns that must end `cancelled` (prompts whose cancel came after the turn ended count
extra; the storm goes on until this many were really cancelled)."""
STORM_PROMPTS_PER_SESSION = 25
"""A fresh session now and then keeps each history short (no compaction in the storm)."""


def storm_script(rng: random.Random, work: Path) -> Json:
    """A looping script: mostly tool calls (a random 1-3 of `bash` sleeping 0-40 ms and file
    reads), sometimes a streamed text answer, each reply after a random 0-15 ms."""
    replies: list[Json] = []
    for _ in range(40):
        reply: Json = {"delay_ms": rng.randint(0, 15)}
        if rng.random() < 0.85:
            calls = []
            for _ in range(rng.randint(1, 3)):
                if rng.random() < 0.7:
                    ms = rng.randint(0, 40)
                    calls.append({"name": "bash", "input": {"command": f"sleep 0.{ms:03d}"}})
                else:
                    calls.append({"name": "read_file", "input": {"path": "notes.txt"}})
            reply["tool_calls"] = calls
        else:
            reply["text"] = " ".join(f"w{i}" for i in range(rng.randint(3, 30)))
            reply["chunk_delay_ms"] = rng.randint(0, 3)
        replies.append(reply)
    return {"replies": replies, "loop": True}


async def test_a_looping_script_starts_over_with_fresh_tool_call_ids(tmp_path: Path) -> None:
    script = tmp_path / "loop.json"
    replies = [{"tool_calls": [{"name": "bash", "input": {"command": "true"}}]}, {"text": "b"}]
    script.write_text(json.dumps({"replies": replies, "loop": True}))
    provider = ScriptedProvider.from_file(script)
    request = ModelRequest(model="offline", system="", messages=[], tools=(), max_tokens=100)
    seen: list[Message] = []
    for _ in range(5):
        async for chunk in provider.stream(request):
            if isinstance(chunk, Completed):
                seen.append(chunk.message)
    assert [m.text() for m in seen] == ["", "b", "", "b", ""]
    ids = [use.id for m in seen for use in m.tool_uses()]
    assert len(ids) == 3 and len(set(ids)) == 3


async def test_cancel_storm_leaves_every_tool_call_final_once_and_history_wire_legal(
    tmp_path: Path,
) -> None:
    seed = int(os.environ.get("DEFECT_STORM_SEED") or random.randrange(2**32))
    rng = random.Random(seed)
    work = tmp_path / "work"
    work.mkdir()
    (work / "notes.txt").write_text("a line to read\n")
    state = tmp_path / "state"
    script = tmp_path / "storm.json"
    script.write_text(json.dumps(storm_script(rng, work)))
    env = agent_env(
        DEFECT_SCRIPT=str(script), DEFECT_STATE_DIR=str(state), DEFECT_LOG_LEVEL="warning"
    )
    sessions: list[str] = []
    stops: Counter[str] = Counter()
    async with spawn_defect(env=env) as agent:
        await agent.initialize()
        prompts = 0
        while stops["cancelled"] < STORM_CANCELS:
            assert prompts < 3 * STORM_CANCELS, f"seed {seed}: too few cancels landed: {stops}"
            if prompts % STORM_PROMPTS_PER_SESSION == 0:
                sessions.append(await agent.new_session(work))
                await agent.conn.set_session_mode(session_id=sessions[-1], mode_id="yolo")
            sid = sessions[-1]
            turn = asyncio.create_task(agent.prompt(sid, f"prompt {prompts}"))
            await asyncio.sleep(rng.uniform(0, 0.05))
            await agent.conn.cancel(session_id=sid)
            response = await asyncio.wait_for(turn, TIMEOUT)
            stops[response.stop_reason] += 1
            prompts += 1
        await asyncio.sleep(0.2)  # anything late would arrive now, after every answer
        finals = check_turns_on_the_wire(agent, set(sessions))
        agent.assert_schema_clean()
    # Cancels landed while tools ran: some calls finished, others were stopped.
    assert finals["completed"] > 0 and finals["failed"] > 0, (seed, finals)

    db = state / "sessions.sqlite3"
    uses = sum(check_every_tool_use_has_one_result(stored_messages(db, sid)) for sid in sessions)
    assert uses == sum(finals.values()), (seed, uses, finals)

    # The next request of every stormed session is wire-legal: the strict fake accepts it.
    async with FakeProvider() as fake:
        fake.enqueue(*[Reply.text("calm again") for _ in sessions])
        env = agent_env(
            DEFECT_PROVIDER="anthropic",
            ANTHROPIC_BASE_URL=fake.url,
            ANTHROPIC_API_KEY=DEFAULT_API_KEY,
            DEFECT_STATE_DIR=str(state),
            DEFECT_RETRIES="0",
        )
        async with spawn_defect(env=env) as agent:
            await agent.initialize()
            for sid in sessions:
                await agent.conn.resume_session(cwd=str(work), session_id=sid, mcp_servers=[])
                # The session resumes on the model it was stormed with (the offline one): the
                # next request goes to the strict fake once the picker moves it there.
                await agent.conn.set_config_option(
                    config_id="model", session_id=sid, value="anthropic/claude-sonnet-5-5"
                )
                response = await asyncio.wait_for(agent.prompt(sid, "still there?"), TIMEOUT)
                assert response.stop_reason == "end_turn", seed
            agent.assert_schema_clean()
        for record in fake.requests:
            assert not record.rejected, f"seed {seed}: {record.error_message}"
        fake.assert_script_consumed()


# --- the turn runner, cancelled at every point ---------------------------------------------


class CancelAt:
    """Cancels the turn's scope at its `target`-th point (every publish, commit, model chunk,
    permission answer and tool step is a point), then lets the cancel land right there."""

    def __init__(self, target: int) -> None:
        self.target = target
        self.count = 0
        self.scope: anyio.CancelScope | None = None
        self.fired = False

    async def point(self) -> None:
        if self.count == self.target and self.scope is not None:
            self.scope.cancel()
            self.fired = True
        self.count += 1
        await anyio.lowlevel.checkpoint()


class Stepper:
    """A test tool that passes a few points while it runs; fails when asked to."""

    description = "test tool"
    input_schema: ClassVar[dict[str, Any]] = {"type": "object"}
    kind = "other"

    def __init__(self, name: str, safety: Safety, cancel: CancelAt) -> None:
        self.name = name
        self.safety = safety
        self._cancel = cancel

    def describe(self, args: dict[str, Any], ctx: Any) -> ToolCallView:
        return ToolCallView(title=f"{self.name} {args}", kind="other")

    async def preview(self, args: dict[str, Any], ctx: Any) -> tuple[()]:
        await self._cancel.point()
        return ()

    def permission_key(self, args: dict[str, Any]) -> str:
        return self.name

    async def run(self, args: dict[str, Any], ctx: Any) -> ToolOutput:
        for _ in range(int(args.get("steps", 1))):
            await self._cancel.point()
        if args.get("fail"):
            raise ToolError("failed as asked")
        return ToolOutput(f"{self.name} done")


class PointedProvider:
    """The offline model, with a point before every chunk it streams."""

    name = "scripted"

    def __init__(self, script: list[Json], cancel: CancelAt) -> None:
        self._inner = ScriptedProvider(script)
        self._cancel = cancel

    def models(self) -> list[Any]:
        return self._inner.models()

    def default_model(self) -> str:
        return self._inner.default_model()

    async def stream(self, request: ModelRequest) -> AsyncGenerator[StreamChunk, None]:
        async for chunk in self._inner.stream(request):
            await self._cancel.point()
            yield chunk


RUNNER_SCRIPT: list[Json] = [
    {
        "text": "Let me work on it.",
        "tool_calls": [
            {"name": "step", "input": {"steps": 1}},
            {"name": "step", "input": {"steps": 4}},
            {"name": "change", "input": {"steps": 2}},
            {"name": "step", "input": {"fail": True}},
            {"name": "missing", "input": {}},
        ],
    },
    {"tool_calls": [{"name": "step", "input": {"steps": 2}}]},
    {"text": "All done."},
]


async def run_cancelled_at(target: int, tmp_path: Path) -> tuple[CancelAt, list[Any], Any]:
    """One turn of `RUNNER_SCRIPT`, cancelled at point `target`: what it published and its
    history."""
    cancel = CancelAt(target)
    history = VecHistory()
    events: list[Any] = []

    async def publish(event: Any) -> None:
        await cancel.point()  # a cancel here: the event is never delivered
        events.append(event)
        await cancel.point()

    async def commit(message: Message) -> None:
        history.append(message)
        await cancel.point()

    async def ask(request: PermissionRequested) -> str | None:
        await cancel.point()
        return "allow_once"

    async def rules_changed() -> None:
        await cancel.point()

    def cancel_turn() -> None:
        assert cancel.scope is not None
        cancel.scope.cancel()

    runner = TurnRunner(
        TurnDeps(
            history=history,
            commit=commit,
            provider=PointedProvider(RUNNER_SCRIPT, cancel),
            tools=ToolRegistry(
                [
                    Stepper("step", Safety.READ_ONLY, cancel),
                    Stepper("change", Safety.MUTATING, cancel),
                ]
            ),
            tool_context=lambda call_id: ToolContext(
                session_id="s",
                cwd=tmp_path,
                fs=None,
                shell=None,
                tool_call_id=call_id,  # type: ignore[arg-type]
            ),
            rules=PermissionRules(),
            ask_permission=ask,
            rules_changed=rules_changed,
            publish=publish,
            cancel_turn=cancel_turn,
        )
    )
    config = TurnConfig(
        session_id="s",
        model="offline",
        system_prompt="You are a test.",
        mode="ask",
        max_tokens=4096,
        max_turn_requests=10,
        thinking_budget=None,
        context_window=200_000,
    )
    with anyio.CancelScope() as scope:
        cancel.scope = scope
        await runner.run([TextBlock(text="do the work")], config)
    return cancel, events, history


async def test_a_turn_cancelled_at_any_point_ends_every_call_once_and_stays_wire_legal(
    tmp_path: Path,
) -> None:
    target = 0
    while True:
        cancel, events, history = await run_cancelled_at(target, tmp_path)
        where = f"cancelled at point {target} of {cancel.count}"
        announced = [e.tool_call_id for e in events if isinstance(e, ToolCallStarted)]
        assert len(set(announced)) == len(announced), where
        finals: Counter[str] = Counter()
        for event in events:
            if isinstance(event, ToolCallUpdated):
                assert event.tool_call_id in announced, f"{where}: update of an unannounced call"
                assert finals[event.tool_call_id] == 0, f"{where}: update after the final one"
                if event.status in FINAL:
                    finals[event.tool_call_id] += 1
        assert set(finals) == set(announced), f"{where}: a call without a final status"
        messages = [json.loads(message_to_json(m)) for m in history.snapshot()]
        uses = check_every_tool_use_has_one_result(messages)
        assert uses == len(announced), f"{where}: a committed tool_use was never announced"
        # The next request, as the provider would send it, is one the strict validator accepts.
        following = [*history.snapshot(), Message(role="user", content=(TextBlock(text="go on"),))]
        body = {
            "model": "claude-sonnet-4-5",
            "max_tokens": 1024,
            "stream": True,
            "messages": encode_messages(repair_outbound(following)),
        }
        validate_request(body)
        if not cancel.fired:
            break  # the turn ran to its end: every point was tried
        target += 1
    assert target > 40, "the turn should pass many points"


# --- shutdown in the middle of a turn ------------------------------------------------------


def stored_tool_calls(db: Path, session_id: str) -> dict[str, str]:
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        rows = conn.execute(
            "SELECT tool_call_id, status FROM tool_calls WHERE session_id = ?", (session_id,)
        ).fetchall()
    return dict(rows)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.parametrize("how", ["stdin EOF", "SIGTERM"])
@pytest.mark.parametrize("during", ["model stream", "running tool"])
async def test_shutdown_mid_turn_answers_the_prompt_commits_the_turn_and_exits(
    tmp_path: Path, how: str, during: str
) -> None:
    pid_file = tmp_path / "command.pid"
    if during == "model stream":
        replies = [{"text": " ".join(f"word{i}" for i in range(300)), "chunk_delay_ms": 50}]
    else:
        command = f"echo $$ > {pid_file}; exec sleep 30"
        replies = [
            {"text": "Running it.", "tool_calls": [{"name": "bash", "input": {"command": command}}]}
        ]
    work = tmp_path / "work"
    work.mkdir()
    env = script_env(tmp_path, replies)
    async with spawn_defect(env=env) as agent:
        await agent.initialize()
        sid = await agent.new_session(work)
        await agent.conn.set_session_mode(session_id=sid, mode_id="yolo")
        turn = asyncio.create_task(agent.prompt(sid, "go"))
        if during == "model stream":
            await agent.client.wait_for(lambda: "agent_message_chunk" in agent.client.kinds(sid))
        else:
            async with asyncio.timeout(TIMEOUT):
                while not (pid_file.exists() and pid_file.read_text().strip()):
                    await asyncio.sleep(0.02)
        if how == "SIGTERM":
            agent.process.send_signal(signal.SIGTERM)
        else:
            assert agent.process.stdin is not None
            agent.process.stdin.close()
        # Generous bounds: a healthy agent answers and is gone well within 2 s.
        response = await asyncio.wait_for(turn, 5)
        assert response.stop_reason == "cancelled"
        assert await asyncio.wait_for(agent.process.wait(), 5) == 0
        finals = check_turns_on_the_wire(agent, {sid})
        agent.assert_schema_clean()

    log = stored_messages(tmp_path / "state" / "sessions.sqlite3", sid)
    assert log[0] == {"role": "user", "content": [{"type": "text", "text": "go"}]}
    if during == "model stream":
        assert len(log) == 1, "a cut stream never becomes history"
        assert finals == Counter()
        return
    assert [m["role"] for m in log] == ["user", "assistant", "user"]
    assert check_every_tool_use_has_one_result(log) == 1
    (result,) = blocks_of(log[2], "tool_result")
    assert result["is_error"] is True and result["content"] == CANCELLED_RESULT_TEXT
    assert list(stored_tool_calls(tmp_path / "state" / "sessions.sqlite3", sid).values()) == [
        "failed"
    ]
    assert finals == Counter({"failed": 1})
    assert not alive(int(pid_file.read_text())), "the command was killed with the turn"


async def test_stdin_eof_while_the_editor_runs_the_command_still_answers_and_exits(
    tmp_path: Path,
) -> None:
    """The editor closed its side: its answer to our terminal/kill can never come, so the
    cancel must not wait for it."""
    replies = [{"tool_calls": [{"name": "bash", "input": {"command": "sleep 30"}}]}]
    work = tmp_path / "work"
    work.mkdir()
    client = RecordingClient()  # execs [command, *args] with no shell, as Zed does
    async with spawn_defect(env=script_env(tmp_path, replies), client=client) as agent:
        await agent.initialize(terminal=True)
        sid = await agent.new_session(work)
        await agent.conn.set_session_mode(session_id=sid, mode_id="yolo")
        turn = asyncio.create_task(agent.prompt(sid, "go"))
        await client.wait_for(
            lambda: any(m == "terminal/wait_for_exit" for m, _ in client.reverse_calls)
        )
        assert agent.process.stdin is not None
        agent.process.stdin.close()
        response = await asyncio.wait_for(turn, 5)
        assert response.stop_reason == "cancelled"
        assert await asyncio.wait_for(agent.process.wait(), 5) == 0
        assert check_turns_on_the_wire(agent, {sid}) == Counter({"failed": 1})
        agent.assert_schema_clean()
    for proc in client.terminals.values():  # the editor's command, killed by the harness
        await proc.wait()
    log = stored_messages(tmp_path / "state" / "sessions.sqlite3", sid)
    assert [m["role"] for m in log] == ["user", "assistant", "user"]
    (result,) = blocks_of(log[2], "tool_result")
    assert result["content"] == CANCELLED_RESULT_TEXT


# --- a session store that cannot be used ---------------------------------------------------

NOT_SAVED = "This session is not being saved"


async def stop_of(agent: Agent, session_id: str, text: str) -> str:
    """The stop reason of one prompt (bounded: a turn that never ends fails the test)."""
    response = await asyncio.wait_for(agent.prompt(session_id, text), TIMEOUT)
    return str(response.stop_reason)


async def open_unsaved(agent: Agent, work: Path) -> str:
    """Initialize (loading not offered), open a session and wait for its warning."""
    response = await agent.initialize()
    caps = response.agent_capabilities
    assert caps is not None and caps.load_session is False
    assert caps.session_capabilities is not None
    assert caps.session_capabilities.list is None and caps.session_capabilities.resume is None
    assert caps.session_capabilities.fork is None  # a fork lives in the store
    sid = await agent.new_session(work)
    await agent.client.wait_for(lambda: NOT_SAVED in agent.client.text(sid))
    return sid


async def test_a_state_directory_that_cannot_be_created_is_told_and_sessions_still_work(
    tmp_path: Path,
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory\n")
    work = tmp_path / "work"
    work.mkdir()
    env = script_env(tmp_path, [{"text": "still here"}], DEFECT_STATE_DIR=str(blocker / "state"))
    async with spawn_defect(env=env) as agent:
        sid = await open_unsaved(agent, work)
        warning = agent.client.text(sid)
        assert "cannot create the state directory" in warning and str(blocker) in warning
        assert await stop_of(agent, sid, "hello") == "end_turn"
        assert agent.client.text(sid).endswith("still here")
        # Nothing to fork into: /fork says so, session/fork (not offered) fails with why.
        before = len(agent.client.text(sid))
        assert await stop_of(agent, sid, "/fork") == "end_turn"
        assert "not saved, so it cannot be forked" in agent.client.text(sid)[before:]
        with pytest.raises(RequestError) as refused:
            await agent.conn.fork_session(session_id=sid, cwd=str(work))
        assert refused.value.code == -32603 and "none can be forked" in str(refused.value)
        assert "session_store_unavailable" in agent.stderr()
        agent.assert_schema_clean()
    assert blocker.read_text() == "not a directory\n"


async def test_a_damaged_database_is_told_left_as_it_is_and_can_be_required(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    state.mkdir()
    garbage = random.Random(7).randbytes(64 * 1024)
    (state / "sessions.sqlite3").write_bytes(garbage)
    work = tmp_path / "work"
    work.mkdir()
    async with spawn_defect(env=script_env(tmp_path, [{"text": "unsaved reply"}])) as agent:
        sid = await open_unsaved(agent, work)
        assert "damaged or not a defect database" in agent.client.text(sid)
        assert await stop_of(agent, sid, "hello") == "end_turn"
        # A project that cannot work unsaved says so; its session/new fails with the reason.
        strict = tmp_path / "strict"
        (strict / ".defect").mkdir(parents=True)
        (strict / ".defect" / "config.toml").write_text("require_persistence = true\n")
        with pytest.raises(RequestError) as refused:
            await agent.new_session(strict)
        assert refused.value.code == -32603
        assert "require_persistence" in str(refused.value)
        assert "damaged or not a defect database" in str(refused.value)
        assert await stop_of(agent, sid, "still there?") == "end_turn"
        agent.assert_schema_clean()
    assert (state / "sessions.sqlite3").read_bytes() == garbage, "the file is left as it was"


async def test_a_database_locked_mid_session_fails_that_prompt_with_the_reason(
    tmp_path: Path,
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    env = script_env(tmp_path, [{"text": "one"}, {"text": "three"}])
    db = tmp_path / "state" / "sessions.sqlite3"
    async with spawn_defect(env=env) as agent:
        response = await agent.initialize()
        assert response.agent_capabilities is not None
        assert response.agent_capabilities.load_session is True
        sid = await agent.new_session(work)
        assert await stop_of(agent, sid, "first") == "end_turn"
        with contextlib.closing(sqlite3.connect(db, isolation_level=None)) as holder:
            holder.execute("BEGIN EXCLUSIVE")  # another process writing, for longer than 5 s
            with pytest.raises(RequestError) as failed:
                await asyncio.wait_for(agent.prompt(sid, "second"), TIMEOUT)
            holder.execute("ROLLBACK")
        assert failed.value.code == -32603
        assert "locked by another process" in str(failed.value)
        assert failed.value.data == {"kind": "storage", "retryable": True}
        assert await stop_of(agent, sid, "third") == "end_turn"
        agent.assert_schema_clean()
    texts = [b["text"] for m in stored_messages(db, sid) for b in blocks_of(m, "text")]
    assert texts == ["first", "one", "third", "three"]


def wal_size(db: Path) -> int:
    wal = db.with_name(db.name + "-wal")
    return wal.stat().st_size if wal.exists() else 0


async def test_a_full_disk_mid_session_fails_the_prompt_it_cannot_save_and_serving_goes_on(
    tmp_path: Path,
) -> None:
    """RLIMIT_FSIZE on the agent: a write past the limit fails (EFBIG), as on a full disk."""
    work = tmp_path / "work"
    work.mkdir()
    env = script_env(tmp_path, [{"text": "small reply"}], DEFECT_LOG_LEVEL="warning")
    db = tmp_path / "state" / "sessions.sqlite3"
    async with spawn_defect(env=env) as agent:
        await agent.initialize()
        sid = await agent.new_session(work)
        limit = wal_size(db) + 96 * 1024  # room for small writes, not for 400 KB
        resource.prlimit(agent.process.pid, resource.RLIMIT_FSIZE, (limit, limit))
        with pytest.raises(RequestError) as failed:
            await asyncio.wait_for(agent.prompt(sid, "big " * 100_000), TIMEOUT)
        assert failed.value.code == -32603
        assert "cannot save a message" in str(failed.value)
        assert "the turn was stopped" in str(failed.value)
        assert await stop_of(agent, sid, "small") == "end_turn"
        assert agent.client.text(sid).endswith("small reply")
        agent.assert_schema_clean()
    log = stored_messages(db, sid)
    assert [b["text"] for m in log for b in blocks_of(m, "text")] == ["small", "small reply"]


async def test_tool_call_state_the_disk_cannot_hold_is_warned_about_and_the_turn_goes_on(
    tmp_path: Path,
) -> None:
    """The message log takes the 150 KB edit; the tool call's replay record, holding it
    twice, does not fit: the client is told, and the turn still ends normally."""
    work = tmp_path / "work"
    work.mkdir()
    content = "x" * 150_000
    replies = [
        {"tool_calls": [{"name": "write_file", "input": {"path": "big.txt", "content": content}}]},
        {"text": "written"},
    ]
    env = script_env(tmp_path, replies, DEFECT_LOG_LEVEL="warning")
    db = tmp_path / "state" / "sessions.sqlite3"
    async with spawn_defect(env=env) as agent:
        await agent.initialize()
        sid = await agent.new_session(work)
        await agent.conn.set_session_mode(session_id=sid, mode_id="yolo")
        # The message (~160 KB) and the small writes around it fit, not a second copy (300 KB).
        limit = wal_size(db) + 290 * 1024
        resource.prlimit(agent.process.pid, resource.RLIMIT_FSIZE, (limit, limit))
        assert await stop_of(agent, sid, "write it") == "end_turn"
        assert "could not save this session's state" in agent.client.text(sid)
        assert agent.client.text(sid).count("could not save") == 1, "told once"
        assert check_turns_on_the_wire(agent, {sid}) == Counter({"completed": 1})
        agent.assert_schema_clean()
    assert (work / "big.txt").read_text() == content
    log = stored_messages(db, sid)
    assert [m["role"] for m in log] == ["user", "assistant", "user", "assistant"]
    assert check_every_tool_use_has_one_result(log) == 1
