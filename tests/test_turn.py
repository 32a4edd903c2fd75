"""The turn runner, in process, on the offline model: the loop, stop reasons, retries,
permissions, cancellation and the event fan-out."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import anyio
import pytest

from defect_core.config import Settings
from defect_core.events import (
    AgentEvent,
    AgentTextDelta,
    EventBus,
    NextMessageId,
    PermissionRequested,
    ToolCallStarted,
    ToolCallUpdated,
    TurnEnded,
    TurnUsage,
)
from defect_core.model import TextBlock, ToolResultBlock, ToolUseBlock
from defect_core.providers.scripted import ScriptedProvider
from defect_core.session import (
    Backends,
    DefaultAgentCore,
    DefaultSession,
    TurnError,
    TurnInProgress,
)
from defect_core.tools.base import Safety, ToolCallView, ToolError, ToolOutput
from defect_core.turn import CANCELLED_RESULT_TEXT

pytestmark = pytest.mark.anyio


class Probe:
    """A test-only tool: sleeps, fails or crashes on request; records what ran."""

    name = "probe"
    description = "test tool"
    input_schema: ClassVar[dict[str, Any]] = {"type": "object"}
    kind = "other"

    def __init__(self, safety: Safety = Safety.READ_ONLY) -> None:
        self.safety = safety
        self.ran: list[Any] = []
        self.finished: list[Any] = []

    def describe(self, args: dict[str, Any], ctx: Any) -> ToolCallView:
        return ToolCallView(title=f"probe {args.get('tag')}", kind="other")

    async def preview(self, args: dict[str, Any], ctx: Any) -> tuple[()]:
        return ()

    def permission_key(self, args: dict[str, Any]) -> str:
        return self.name

    async def run(self, args: dict[str, Any], ctx: Any) -> ToolOutput:
        self.ran.append(args.get("tag"))
        await anyio.sleep(float(args.get("sleep", 0)))
        if args.get("fail"):
            raise ToolError(f"probe {args.get('tag')} failed as asked")
        if args.get("crash"):
            raise RuntimeError("boom")
        self.finished.append(args.get("tag"))
        return ToolOutput(f"probe {args.get('tag')} done")


def call(tag: Any, **kw: Any) -> dict[str, Any]:
    return {"name": "probe", "input": {"tag": tag, **kw}}


async def make(
    tmp_path: Path, script: list[dict[str, Any]], probe: Probe | None = None, **settings: Any
) -> tuple[DefaultSession, Probe]:
    probe = probe or Probe()
    core = DefaultAgentCore(
        Settings(retry_base_delay=0.01, **settings),
        provider=ScriptedProvider(script),
        tools=lambda: [probe],
    )
    session = await core.create_session("s", tmp_path, Backends(None, None))  # type: ignore[arg-type]
    return session, probe


class Events:
    def __init__(self, session: DefaultSession) -> None:
        self.items: list[AgentEvent] = []
        self._stream = session.subscribe()

    async def run(self, answer: str | None = "allow_once", session: Any = None) -> None:
        async for event in self._stream:
            self.items.append(event)
            if isinstance(event, PermissionRequested) and session is not None:
                session.resolve_permission(event.tool_call_id, answer)

    def of(self, kind: type) -> list[Any]:
        return [e for e in self.items if isinstance(e, kind)]


async def test_tool_calls_run_concurrently_and_results_commit_in_tool_use_order(
    tmp_path: Path,
) -> None:
    script = [
        {"tool_calls": [call("slow", sleep=0.3), call("fast", sleep=0.0), call("mid", sleep=0.1)]},
        {"text": "all done"},
    ]
    session, probe = await make(tmp_path, script)
    assert await session.run_turn([TextBlock(text="go")]) == "end_turn"
    # Started in the order slow, fast, mid: finishing fast, mid, slow means they overlapped.
    assert probe.finished == ["fast", "mid", "slow"]
    history = session.history_snapshot()
    uses = [b.id for b in history[1].content if isinstance(b, ToolUseBlock)]
    results = history[2].content
    assert [r.tool_use_id for r in results if isinstance(r, ToolResultBlock)] == uses
    assert len(history) == 4 and history[3].text() == "all done"


async def test_failures_become_error_results_and_the_turn_goes_on(tmp_path: Path) -> None:
    script = [
        {
            "tool_calls": [
                call("bad", fail=True),
                call("crash", crash=True),
                {"name": "nope", "input": {}},
            ]
        },
        {"text": "recovered"},
    ]
    session, _ = await make(tmp_path, script)
    assert await session.run_turn([TextBlock(text="go")]) == "end_turn"
    results = [b for b in session.history_snapshot()[2].content if isinstance(b, ToolResultBlock)]
    assert all(r.is_error for r in results)
    assert "failed as asked" in str(results[0].content)
    assert "RuntimeError: boom" in str(results[1].content)
    assert "unknown tool: nope" in str(results[2].content) and "probe" in str(results[2].content)


async def test_request_limit_stops_with_max_turn_requests(tmp_path: Path) -> None:
    script = [{"tool_calls": [call(i)]} for i in range(10)]
    session, probe = await make(tmp_path, script, max_turn_requests=3)
    assert await session.run_turn([TextBlock(text="loop")]) == "max_turn_requests"
    assert probe.ran == [0, 1, 2]


@pytest.mark.parametrize(
    ("provider_reason", "stop"),
    [("max_tokens", "max_tokens"), ("refusal", "refusal"), ("stop_sequence", "end_turn")],
)
async def test_stop_reasons_are_mapped(tmp_path: Path, provider_reason: str, stop: str) -> None:
    session, _ = await make(tmp_path, [{"text": "x", "stop_reason": provider_reason}])
    assert await session.run_turn([TextBlock(text="go")]) == stop


async def test_a_cut_tool_input_at_max_tokens_never_runs(tmp_path: Path) -> None:
    script = [{"text": "about to call", "tool_calls": [call("cut")], "stop_reason": "max_tokens"}]
    session, probe = await make(tmp_path, script)
    assert await session.run_turn([TextBlock(text="go")]) == "max_tokens"
    assert probe.ran == []
    assert not session.history_snapshot()[-1].tool_uses()


async def test_retryable_errors_are_retried_before_any_output(tmp_path: Path) -> None:
    overloaded = {"error": {"message": "overloaded", "retryable": True, "retry_after": 0.01}}
    session, _ = await make(tmp_path, [overloaded, overloaded, {"text": "third time"}])
    assert await session.run_turn([TextBlock(text="go")]) == "end_turn"
    assert session.history_snapshot()[-1].text() == "third time"


async def test_a_failure_after_output_ends_the_turn_and_leaves_no_message(tmp_path: Path) -> None:
    broken = {
        "text": "partial words here",
        "error": {"message": "stream broke", "retryable": True, "after_chunks": 2},
    }
    session, _ = await make(tmp_path, [broken, {"text": "fine again"}])
    with pytest.raises(TurnError) as err:
        await session.run_turn([TextBlock(text="go")])
    assert "stream broke" in str(err.value) and err.value.data["partialOutputShown"] is True
    assert [m.role for m in session.history_snapshot()] == ["user"]
    assert await session.run_turn([TextBlock(text="again")]) == "end_turn"


async def test_non_retryable_errors_fail_at_once(tmp_path: Path) -> None:
    bad = {"error": {"message": "400 invalid_request_error: nope", "retryable": False}}
    session, _ = await make(tmp_path, [bad, {"text": "never used"}])
    with pytest.raises(TurnError) as err:
        await session.run_turn([TextBlock(text="go")])
    assert err.value.data == {"kind": "scripted", "retryable": False}


async def test_a_second_prompt_while_one_runs_is_refused(tmp_path: Path) -> None:
    session, _ = await make(tmp_path, [{"text": "slow " * 20, "chunk_delay_ms": 20}])
    async with anyio.create_task_group() as tg:
        tg.start_soon(session.run_turn, [TextBlock(text="one")])
        await anyio.sleep(0.05)
        with pytest.raises(TurnInProgress):
            await session.run_turn([TextBlock(text="two")])
        session.cancel_turn()


async def test_cancel_while_tools_run_ends_every_call_and_commits_their_results(
    tmp_path: Path,
) -> None:
    script = [{"tool_calls": [call("quick"), call("stuck", sleep=30)]}]
    session, probe = await make(tmp_path, script)
    events = Events(session)
    async with anyio.create_task_group() as tg:
        tg.start_soon(events.run)
        result: list[str] = []

        async def turn() -> None:
            result.append(await session.run_turn([TextBlock(text="go")]))

        tg.start_soon(turn)
        with anyio.fail_after(5):
            while "stuck" not in probe.ran:
                await anyio.sleep(0.01)
        session.cancel_turn()
        session.cancel_turn()  # idempotent
        with anyio.fail_after(5):
            while not result:
                await anyio.sleep(0.01)
        tg.cancel_scope.cancel()
    assert result == ["cancelled"]
    finals = {
        e.tool_call_id: e.status
        for e in events.of(ToolCallUpdated)
        if e.status in ("completed", "failed")
    }
    assert sorted(finals.values()) == ["completed", "failed"]
    results = [b for b in session.history_snapshot()[-1].content if isinstance(b, ToolResultBlock)]
    assert [r.is_error for r in results] == [False, True]
    assert results[1].content == CANCELLED_RESULT_TEXT


async def test_a_cancelled_permission_question_cancels_the_turn(tmp_path: Path) -> None:
    session, probe = await make(tmp_path, [{"tool_calls": [call("x")]}], Probe(Safety.MUTATING))
    events = Events(session)
    async with anyio.create_task_group() as tg:
        tg.start_soon(events.run, None, session)  # the client answers "cancelled"
        assert await session.run_turn([TextBlock(text="go")]) == "cancelled"
        tg.cancel_scope.cancel()
    assert probe.ran == []
    assert events.of(PermissionRequested)


async def test_allow_always_is_remembered_for_the_session(tmp_path: Path) -> None:
    script = [{"tool_calls": [call(1)]}, {"text": "a"}, {"tool_calls": [call(2)]}, {"text": "b"}]
    session, probe = await make(tmp_path, script, Probe(Safety.MUTATING))
    events = Events(session)
    async with anyio.create_task_group() as tg:
        tg.start_soon(events.run, "allow_always", session)
        await session.run_turn([TextBlock(text="one")])
        await session.run_turn([TextBlock(text="two")])
        tg.cancel_scope.cancel()
    assert probe.ran == [1, 2]
    assert len(events.of(PermissionRequested)) == 1, "the second call did not ask"
    assert "probe" in session.permission_rules.allowed


async def test_read_only_mode_refuses_without_asking(tmp_path: Path) -> None:
    session, probe = await make(
        tmp_path, [{"tool_calls": [call("w")]}, {"text": "ok"}], Probe(Safety.MUTATING)
    )
    await session.set_mode("read-only")
    events = Events(session)
    async with anyio.create_task_group() as tg:
        tg.start_soon(events.run)
        assert await session.run_turn([TextBlock(text="go")]) == "end_turn"
        tg.cancel_scope.cancel()
    assert probe.ran == [] and not events.of(PermissionRequested)
    result = session.history_snapshot()[2].content[0]
    assert isinstance(result, ToolResultBlock) and "read-only mode" in str(result.content)


async def test_every_subscriber_sees_every_event_in_order() -> None:
    bus = EventBus(buffer=2)  # tiny buffer: the publisher must wait, never drop
    seen: list[list[int]] = [[], [], []]
    streams = [bus.subscribe() for _ in seen]

    async def consume(i: int) -> None:
        async for event in streams[i]:
            if i == 2:
                await anyio.sleep(0.001)  # a slow subscriber
            assert isinstance(event, AgentTextDelta)
            seen[i].append(int(event.text))

    async with anyio.create_task_group() as tg:
        for i in range(3):
            tg.start_soon(consume, i)
        for n in range(200):
            await bus.publish(AgentTextDelta(str(n)))
        bus.close()
    assert seen == [list(range(200))] * 3


async def test_publish_hands_events_over_without_a_loop_turn_while_there_is_room() -> None:
    # The events of one network read reach a subscriber together (one batch, one write in
    # the ACP pump) instead of one loop turn each; a full buffer still makes publish wait.
    bus = EventBus(buffer=4)
    stream = bus.subscribe()
    woken: list[str] = []

    async def subscriber() -> None:
        first = await stream.receive()
        assert isinstance(first, AgentTextDelta)
        woken.append(first.text)
        while True:
            try:
                event = stream.receive_nowait()
            except anyio.WouldBlock:
                break
            assert isinstance(event, AgentTextDelta)
            woken.append(event.text)

    async with anyio.create_task_group() as tg:
        tg.start_soon(subscriber)
        await anyio.sleep(0)  # the subscriber now waits in receive()
        for n in range(3):
            await bus.publish(AgentTextDelta(str(n)))
        assert woken == []  # nothing ran between the publishes
        await anyio.sleep(0.01)
    assert woken == ["0", "1", "2"]  # all three were queued when the subscriber woke

    for n in range(4):
        await bus.publish(AgentTextDelta(str(n)))  # fills the buffer
    blocked = True
    async with anyio.create_task_group() as tg:

        async def publish_fifth() -> None:
            nonlocal blocked
            await bus.publish(AgentTextDelta("4"))
            blocked = False

        tg.start_soon(publish_fifth)
        await anyio.sleep(0.01)
        assert blocked  # back-pressure: the fifth waits for room
        assert isinstance(got := await stream.receive(), AgentTextDelta) and got.text == "0"
    assert not blocked
    rest = [stream.receive_nowait() for _ in range(4)]
    assert [e.text for e in rest if isinstance(e, AgentTextDelta)] == ["1", "2", "3", "4"]


async def test_turn_events_start_with_the_prompt_and_end_with_turn_ended(tmp_path: Path) -> None:
    session, _ = await make(tmp_path, [{"tool_calls": [call("t")]}, {"text": "done"}])
    events = Events(session)
    async with anyio.create_task_group() as tg:
        tg.start_soon(events.run)
        await session.run_turn([TextBlock(text="hello there")])
        await anyio.sleep(0.05)
        tg.cancel_scope.cancel()
    names = [type(e).__name__ for e in events.items if not isinstance(e, NextMessageId)]
    assert names[0] == "UserPromptCommitted"
    # Every commit (prompt, reply, results, reply) names the message that comes next.
    assert [e.message_id for e in events.of(NextMessageId)] == [
        f"{session.id}:{n}" for n in range(2, 6)
    ]
    # Titled once the model answered (a prompt that failed first must not name the session).
    assert names.index("TitleChanged") > names.index("UserPromptCommitted")
    assert names[-1] == "TurnEnded"
    last = events.items[-1]
    assert isinstance(last, TurnEnded) and last.usage is not None and last.usage.requests == 2
    assert len(events.of(ToolCallStarted)) == 1


async def test_turn_ended_carries_the_turns_usage_in_core_terms(tmp_path: Path) -> None:
    """The core reports usage as a typed, snake_case `TurnUsage`, summed over the turn's
    requests; ACP's camelCase names are the bridge's projection (`defect_acp/projection.py`)."""
    session, _ = await make(
        tmp_path,
        [
            {
                "tool_calls": [call("t")],
                "usage": {"input_tokens": 11, "output_tokens": 5, "cache_read_input_tokens": 3},
            },
            {
                "text": "done",
                "usage": {"input_tokens": 20, "output_tokens": 7, "cache_creation_input_tokens": 4},
            },
        ],
    )
    events = Events(session)
    async with anyio.create_task_group() as tg:
        tg.start_soon(events.run)
        assert await session.run_turn([TextBlock(text="go")]) == "end_turn"
        assert await session.run_turn([TextBlock(text="/context")]) == "end_turn"
        await anyio.sleep(0.05)
        tg.cancel_scope.cancel()
    model_turn, command_turn = events.of(TurnEnded)
    assert model_turn.usage == TurnUsage(
        input_tokens=31,
        output_tokens=12,
        cache_read_input_tokens=3,
        cache_creation_input_tokens=4,
        requests=2,
    )
    assert command_turn.usage is None  # a slash command makes no model request
