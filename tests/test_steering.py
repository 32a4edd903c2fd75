"""Steering in process, on the offline model: the race of a steer with the end of a turn.

A steer that meets a turn's end must land in exactly one of the two: delivered by that turn
(one more request), or refused by it and run as a turn of its own. The tests place the steer
deterministically on each side of the turn's decision to end (`SessionSteers.close`), then
check every request the model was sent and the history: the steer is there exactly once.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from defect_core.config import Settings
from defect_core.model import Message, TextBlock, ToolResultBlock, messages_to_json
from defect_core.providers.base import ModelRequest, StreamChunk
from defect_core.providers.scripted import ScriptedProvider
from defect_core.session import Backends, DefaultAgentCore, DefaultSession
from defect_core.session.fork import fork_stored
from defect_core.session.steering import STEERS_KEY, SessionSteers
from defect_core.store import AsyncStore, SessionRecord, SqliteStore

pytestmark = pytest.mark.anyio

STEER = "Also check the tests."


class Recording(ScriptedProvider):
    """The offline model, keeping what each request sent."""

    def __init__(self, script: list[dict[str, Any]]) -> None:
        super().__init__(script)
        self.sent: list[list[Message]] = []

    async def stream(self, request: ModelRequest) -> AsyncGenerator[StreamChunk, None]:
        self.sent.append(list(request.messages))
        async for chunk in super().stream(request):
            yield chunk


async def make(tmp_path: Path, script: list[dict[str, Any]]) -> tuple[DefaultSession, Recording]:
    model = Recording(script)
    core = DefaultAgentCore(Settings(retry_base_delay=0.01), provider=model, tools=list)
    session = await core.create_session("s", tmp_path, Backends(None, None))  # type: ignore[arg-type]
    return session, model


def said(messages: list[Message]) -> list[str]:
    return [
        b.text for m in messages if m.role == "user" for b in m.content if isinstance(b, TextBlock)
    ]


def patch_close(session: DefaultSession, then: Callable[[bool], None]) -> None:
    steering: Any = session.steering
    close = steering.close

    def closing() -> bool:
        closed: bool = close()
        then(closed)
        return closed

    steering.close = closing


async def test_a_steer_before_the_turn_decides_to_end_is_delivered_by_it(tmp_path: Path) -> None:
    session, model = await make(tmp_path, [{"text": "first"}, {"text": "second"}])
    answers: list[bool] = []

    async def steer_during_the_stream() -> None:
        while not model.sent:
            await anyio.sleep(0)
        answers.append(await session.steering.offer([TextBlock(text=STEER)]))

    async with anyio.create_task_group() as tg:
        tg.start_soon(steer_during_the_stream)
        stop = await session.run_turn([TextBlock(text="Go.")])
    assert stop == "end_turn"
    assert answers == [True]
    assert len(model.sent) == 2  # the answer that would have ended it got one more request
    assert said(model.sent[1]) == ["Go.", STEER]
    assert said(session.history_snapshot()).count(STEER) == 1


async def test_a_steer_after_the_turn_decided_to_end_starts_a_turn_of_its_own(
    tmp_path: Path,
) -> None:
    session, model = await make(tmp_path, [{"text": "first"}, {"text": "second"}])
    answers: list[bool] = []
    stops: list[str] = []

    async def steer_now() -> None:
        taken = await session.steering.offer([TextBlock(text=STEER)])
        answers[0] = taken
        if not taken:  # what the bridge does: wait for the end, then run it as a prompt
            await session.steering.wait_idle()
            stops.append(await session.run_turn([TextBlock(text=STEER)]))

    async with anyio.create_task_group() as tg:
        # Right after the turn took its decision, before it has fully ended.
        def once(closed: bool) -> None:
            if closed and not answers:
                answers.append(False)  # placeholder until the steer answers
                tg.start_soon(steer_now)

        patch_close(session, once)
        stops.append(await session.run_turn([TextBlock(text="Go.")]))
        with anyio.fail_after(5):
            while len(stops) < 2:
                await anyio.sleep(0.01)
    assert answers == [False]
    assert stops == ["end_turn", "end_turn"]
    assert len(model.sent) == 2
    assert STEER not in said(model.sent[0])
    assert said(model.sent[1])[-1] == STEER
    assert said(session.history_snapshot()).count(STEER) == 1


async def test_a_steer_left_waiting_by_a_cancelled_turn_joins_the_history(tmp_path: Path) -> None:
    session, model = await make(tmp_path, [{"text": "slow " * 50, "chunk_delay_ms": 20}])
    async with anyio.create_task_group() as tg:

        async def steer_then_cancel() -> None:
            while not model.sent:
                await anyio.sleep(0)
            assert await session.steering.offer([TextBlock(text=STEER)])
            session.cancel_turn()

        tg.start_soon(steer_then_cancel)
        stop = await session.run_turn([TextBlock(text="Go.")])
    assert stop == "cancelled"
    history = session.history_snapshot()
    assert said(history) == ["Go.", STEER]  # never dropped: the next request carries it
    assert not any(isinstance(b, ToolResultBlock) for b in history[-1].content)
    assert not await session.steering.offer([TextBlock(text="late")])  # no turn runs now


def steers_of(*texts: str, committed: list[Message] | None = None) -> SessionSteers:
    """A session's steers with `texts` left waiting by a killed process (no store)."""
    stored = [Message(role="user", content=(TextBlock(text=t),)) for t in texts]

    async def publish(_: Any) -> None:
        return None

    async def commit(message: Message) -> None:
        if committed is not None:
            committed.append(message)

    return SessionSteers(
        "s", None, publish, commit, lambda: {"reasoning_effort": "low"},
        {STEERS_KEY: messages_to_json(stored)},
    )  # fmt: skip


async def test_steers_a_kill_left_waiting_are_committed_once_on_load() -> None:
    committed: list[Message] = []
    steers = steers_of("one", "two", committed=committed)
    assert steers.config()[STEERS_KEY]  # what the record keeps until they are delivered
    prompt = Message(role="user", content=(TextBlock(text="Go."),))
    settled = await steers.settle([prompt])
    assert settled is not None and committed == [settled]
    assert said([settled]) == ["one", "two"]
    assert STEERS_KEY not in steers.config()
    assert steers.config() == {"reasoning_effort": "low"}

    # Killed after their commit, before the record was told: not committed twice.
    committed.clear()
    steers = steers_of("one", committed=committed)
    results = Message(role="user", content=(TextBlock(text="x"), TextBlock(text="one")))
    assert await steers.settle([prompt, results]) is None
    assert committed == [] and STEERS_KEY not in steers.config()


async def test_a_fork_does_not_take_the_steers_its_origin_waits_on(tmp_path: Path) -> None:
    store = AsyncStore(SqliteStore(tmp_path / "sessions.sqlite3"))
    try:
        record = SessionRecord(
            id="origin", cwd=str(tmp_path), provider="scripted", model="m", mode="ask",
            config={"reasoning_effort": "low", STEERS_KEY: "[]"},
        )  # fmt: skip
        await store.create(record)
        await store.append_message("origin", Message(role="user", content=(TextBlock(text="a"),)))
        fork = await fork_stored(store, "origin", "fork")
        assert fork.config == {"reasoning_effort": "low"}
    finally:
        await store.aclose()


async def test_wait_idle_waits_for_a_turn_still_starting(tmp_path: Path) -> None:
    """Before the model loop takes steers (commands, hooks, the system prompt come first),
    a steer is refused and `wait_idle` waits for the turn's end: what the bridge does then
    (wait, and run the steer as a prompt) neither spins nor runs ahead."""
    session, _ = await make(tmp_path, [{"text": "first"}])
    gate = anyio.Event()
    ready = session._ready_prompt

    async def held() -> None:
        await gate.wait()
        await ready()

    session._ready_prompt = held  # type: ignore[method-assign]
    stops: list[str] = []
    async with anyio.create_task_group() as tg:

        async def turn() -> None:
            stops.append(await session.run_turn([TextBlock(text="Go.")]))

        tg.start_soon(turn)
        await anyio.sleep(0.05)  # the turn is starting, held before its model loop
        assert not await session.steering.offer([TextBlock(text=STEER)])
        with anyio.move_on_after(0.2) as waited:
            await session.steering.wait_idle()
        assert waited.cancelled_caught, "wait_idle returned while the turn was starting"
        gate.set()
        with anyio.fail_after(5):
            await session.steering.wait_idle()
        assert stops == ["end_turn"]
