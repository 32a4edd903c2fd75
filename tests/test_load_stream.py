"""`session/load` streams its replay while the store reads the history: the store hands the
branch over in parts as it decodes them (`SqliteStore.load`'s `on_part`, `AsyncStore.load`),
the core hands them on (`DefaultAgentCore.load_session`'s `on_history`), and each part's lines
leave (`defect_acp.updates.StreamedReplay`, `replay_walk.ReplayWalk`) before the next is read.

Real SQLite files, the real core and the real replay; the only stand-in is the sink the lines
are written to (the server writes them to stdout the same way). Whether the first line left
before the last row was read is decided by a gate, not a clock: the store's worker stops after
its first part until the first line is written (a load that replayed only at the end would
never open it, and the gate notes that it gave up waiting).
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from defect_acp import replay_walk
from defect_acp.replay_lines import ReplayLines
from defect_acp.updates import StreamedReplay, replay
from defect_core.config import Settings
from defect_core.model import (
    Message,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    message_from_dict,
)
from defect_core.providers.scripted import ScriptedProvider
from defect_core.session import Backends, DefaultAgentCore
from defect_core.store import (
    AsyncStore,
    BranchPart,
    CorruptSession,
    SessionRecord,
    SqliteStore,
    StoredSession,
    ToolCallRecord,
)
from defect_core.store.door import PARTS_AHEAD
from defect_core.store.rows import FIRST_PART
from tests.test_replay_lines import SID, conversation

pytestmark = pytest.mark.anyio

GATE_GUARD = 60.0
"""Seconds the gated worker waits for the first line before it gives up (and says so): only a
guard against a hang if the replay does not stream; no assertion depends on time."""


class GatedStore(SqliteStore):
    """A real SQLite store whose load stops after its first part until `opened` is set, and
    counts the parts it has decoded."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.parts_read = 0
        self.opened = threading.Event()
        self.gave_up = False

    def load(
        self,
        session_id: str,
        on_part: Callable[[BranchPart], None] | None = None,
        *,
        calls: bool = True,
    ) -> StoredSession:
        def counted(part: BranchPart) -> None:
            self.parts_read += 1
            if on_part is not None:
                on_part(part)
            if self.parts_read == 1 and not self.opened.wait(GATE_GUARD):
                self.gave_up = True

        return super().load(session_id, counted, calls=calls)


class Sink:
    """Where the replay's lines go (the server's stdout), noting how many parts the store
    had read when the first line was written."""

    def __init__(self, store: GatedStore | None = None) -> None:
        self.store = store
        self.lines: list[bytes] = []
        self.updates: list[Any] = []
        self.parts_at_first_line: int | None = None

    async def send_lines(self, session_id: str, lines: Sequence[bytes]) -> None:
        if lines and self.parts_at_first_line is None and self.store is not None:
            self.parts_at_first_line = self.store.parts_read
            self.store.opened.set()
        self.lines.extend(lines)

    async def send_update(self, session_id: str, update: Any) -> None:
        self.updates.append(update)

    async def send_updates(self, session_id: str, updates: Sequence[Any]) -> None:
        self.updates.extend(updates)

    @property
    def connection(self) -> Any:
        raise AssertionError("a replay writes lines, it needs no connection")


def _store_session(db: Path, cwd: Path, turns: int) -> int:
    """A session of `turns` turns (prompt, thinking + text + call, result, answer), every
    call with its record; the number of messages."""
    with SqliteStore(db, synchronous="OFF") as store:
        store.create(
            SessionRecord(id=SID, cwd=str(cwd), provider="scripted", model="offline", mode="ask")
        )
        for n in range(turns):
            call = ToolUseBlock(id=f"toolu_{n:05d}", name="read_file", input={"path": f"{n}.py"})
            store.append_message(SID, Message(role="user", content=(TextBlock(text=f"ask {n}"),)))
            think = ThinkingBlock(thinking=f"think {n}", signature="sig")
            store.append_message(
                SID, Message(role="assistant", content=(think, TextBlock(text=f"do {n}"), call))
            )
            store.upsert_tool_call(
                ToolCallRecord(
                    session_id=SID,
                    tool_call_id=call.id,
                    title=f"Read {n}.py",
                    kind="read",
                    status="completed",
                    content=[{"type": "text", "text": f"line {n}"}],
                    raw_input=dict(call.input),
                )
            )
            result = ToolResultBlock(tool_use_id=call.id, content=f"line {n}")
            store.append_message(SID, Message(role="user", content=(result,)))
            store.append_message(
                SID, Message(role="assistant", content=(TextBlock(text=f"done {n}"),))
            )
    return turns * 4


NO_BACKENDS = Backends(None, None)  # type: ignore[arg-type]  # nothing here runs a tool


def _core(store: SqliteStore) -> DefaultAgentCore:
    return DefaultAgentCore(
        Settings(), provider=ScriptedProvider([]), tools=lambda: [], store=AsyncStore(store)
    )


async def test_the_first_update_is_written_before_the_last_row_is_read(tmp_path: Path) -> None:
    db = tmp_path / "sessions.sqlite3"
    messages = _store_session(db, tmp_path, 500)
    store = GatedStore(db)
    core = _core(store)
    sink = Sink(store)
    replaying = StreamedReplay(sink, SID)
    session = await core.load_session(
        SID,
        NO_BACKENDS,
        cwd=tmp_path,
        on_history=replaying.part,
    )
    await replaying.finish(session)
    assert not store.gave_up
    assert sink.parts_at_first_line == 1  # the worker was held at its first part meanwhile
    assert store.parts_read > 2 and messages > FIRST_PART  # ... of many
    # What streamed is what the whole replay of the loaded session sends, line for line.
    whole = Sink()
    await replay(whole, session)
    assert sink.lines == whole.lines
    assert len(sink.lines) == 500 * 5  # prompt, thought, text, call, answer
    assert len(session.transcript()) == messages
    await core.aclose()


async def test_a_live_session_is_replayed_whole(tmp_path: Path) -> None:
    """A second load of a live session reads nothing: `finish` replays what it has."""
    db = tmp_path / "sessions.sqlite3"
    _store_session(db, tmp_path, 40)
    core = _core(SqliteStore(db))
    first = Sink()
    replaying = StreamedReplay(first, SID)
    session = await core.load_session(
        SID,
        NO_BACKENDS,
        cwd=tmp_path,
        on_history=replaying.part,
    )
    await replaying.finish(session)
    again = Sink()
    replaying = StreamedReplay(again, SID)
    same = await core.load_session(
        SID,
        NO_BACKENDS,
        cwd=tmp_path,
        on_history=replaying.part,
    )
    await replaying.finish(same)
    assert same is session
    assert again.lines == first.lines and len(first.lines) == 40 * 5
    await core.aclose()


async def test_a_corrupt_row_after_the_first_part_fails_the_load_naming_it(
    tmp_path: Path,
) -> None:
    db = tmp_path / "sessions.sqlite3"
    _store_session(db, tmp_path, 100)
    bad = FIRST_PART * 3 + 2
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE messages SET body = '{oops' WHERE seq = ?", (bad,))
    core = _core(SqliteStore(db))
    sink = Sink()
    replaying = StreamedReplay(sink, SID)
    with pytest.raises(CorruptSession) as caught:
        await core.load_session(
            SID,
            NO_BACKENDS,
            cwd=tmp_path,
            on_history=replaying.part,
        )
    assert f"message row seq {bad}" in str(caught.value)
    assert sink.lines  # some of the history had been sent: the answer is the error
    assert core.session(SID) is None  # nothing half-loaded is kept
    await core.aclose()


def _walk_in_parts(transcript: list[Message], cuts: list[int], *args: Any) -> list[bytes | None]:
    walk = replay_walk.ReplayWalk(args[0], ReplayLines(SID), args[1])
    out: list[bytes | None] = []
    for start, end in zip([0, *cuts], [*cuts, len(transcript)], strict=True):
        out.extend(walk.feed(transcript[start:end]))
    out.extend(walk.finish())
    return out


def test_a_walk_in_parts_shows_what_the_whole_replay_shows() -> None:
    """Every piece, however the conversation is cut (a call's result in a later part; a
    call that never got one, with pieces after it; searches; hidden plan calls)."""
    transcript, snapshots, subagents = conversation()
    orphan = ToolUseBlock(id="t_never", name="read_file", input={"path": "g.py"})
    transcript = [
        *transcript,
        Message(role="assistant", content=(TextBlock(text="and one more"), orphan)),
        Message(role="user", content=(TextBlock(text="still there?"),)),
        Message(role="assistant", content=(TextBlock(text="yes"),)),
    ]
    whole = list(replay_walk.iter_replay(transcript, snapshots, ReplayLines(SID), subagents))
    shown = [json.loads(line)["params"]["update"] for line in whole if line is not None]
    assert shown[-3]["toolCallId"] == "t_never" and shown[-1]["content"]["text"] == "yes"
    for cuts in ([], [1], [2], [1, 2], [1, 2, 3], [1, 2, 3, 4, 5, 6], [5]):
        assert _walk_in_parts(transcript, cuts, snapshots, subagents) == whole, cuts


def test_a_broken_link_in_a_plain_session_is_named(tmp_path: Path) -> None:
    """A session never rewound nor forked is streamed by seq without a first pass over its
    links; they are checked as the rows pass, so a row that does not follow the one before
    it still fails the load, naming it."""
    db = tmp_path / "sessions.sqlite3"
    _store_session(db, tmp_path, 3)
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE messages SET parent = NULL WHERE session_id = ? AND seq = 7", (SID,))
    with SqliteStore(db) as store, pytest.raises(CorruptSession) as caught:
        store.load(SID, lambda part: None)
    assert caught.value.where == "message row seq 7"
    assert "does not follow" in str(caught.value)
    with SqliteStore(db) as store:  # mended, the same rows load whole
        with sqlite3.connect(db) as conn:
            conn.execute("UPDATE messages SET parent = node - 1 WHERE seq = 7")
        assert len(store.load(SID).transcript) == 12


class PacedStore(SqliteStore):
    """A real SQLite store whose load counts the parts its worker has decoded."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.decoded = 0

    def load(
        self,
        session_id: str,
        on_part: Callable[[BranchPart], None] | None = None,
        *,
        calls: bool = True,
    ) -> StoredSession:
        def counted(part: BranchPart) -> None:
            self.decoded += 1
            if on_part is not None:
                on_part(part)

        return super().load(session_id, counted if on_part is not None else None, calls=calls)


async def test_the_worker_reads_only_a_few_parts_ahead_of_the_replay(tmp_path: Path) -> None:
    """A replay slower than the store does not leave the parsed history piling up: the worker
    waits while `PARTS_AHEAD` parts are decoded and not yet replayed."""
    db = tmp_path / "sessions.sqlite3"
    messages = _store_session(db, tmp_path, 2000)
    store = PacedStore(db)
    door = AsyncStore(store)
    ahead: list[int] = []
    seen = 0

    async def slow_replay(part: BranchPart) -> None:
        nonlocal seen
        for _ in range(20):  # the worker, unbounded, would read the whole branch meanwhile
            await asyncio.sleep(0.001)
        seen += len(part.messages)
        ahead.append(store.decoded - len(ahead) - 1)

    stored = await door.load(SID, slow_replay)
    await door.aclose()
    assert seen == messages == len(stored.transcript) and len(ahead) > 6
    # Parts decoded beyond the one being replayed: the ones waiting, and one held at the gate.
    assert max(ahead) <= PARTS_AHEAD + 1


async def test_a_failing_replay_does_not_leave_the_worker_waiting(tmp_path: Path) -> None:
    """The replay stops at its first failure; the worker, held for room, is let go, reads
    the rest, and the store goes on serving."""
    db = tmp_path / "sessions.sqlite3"
    messages = _store_session(db, tmp_path, 1000)
    door = AsyncStore(SqliteStore(db))

    async def failing(part: BranchPart) -> None:
        raise RuntimeError("the client went away")

    with pytest.raises(RuntimeError, match="went away"):
        await door.load(SID, failing)
    assert len((await door.load(SID)).transcript) == messages
    await door.aclose()


def test_every_part_comes_with_its_calls_whatever_order_they_were_stored_in(
    tmp_path: Path,
) -> None:
    """Calls are read in stored order as the parts need them; one stored long after the
    message that made it, or never stored, is still found (or known absent) in time, and the
    load's calls keep their stored order."""
    db = tmp_path / "sessions.sqlite3"
    turns = 1200
    with SqliteStore(db, synchronous="OFF") as store:
        store.create(
            SessionRecord(
                id=SID, cwd=str(tmp_path), provider="scripted", model="offline", mode="ask"
            )
        )
        late: list[ToolCallRecord] = []
        for n in range(turns):
            call = ToolUseBlock(id=f"toolu_{n:05d}", name="read_file", input={"path": f"{n}.py"})
            store.append_message(SID, Message(role="assistant", content=(call,)))
            result = ToolResultBlock(tool_use_id=call.id, content=f"line {n}")
            store.append_message(SID, Message(role="user", content=(result,)))
            record = ToolCallRecord(
                session_id=SID,
                tool_call_id=call.id,
                title=f"Read {n}.py",
                kind="read",
                status="completed",
                content=[{"type": "text", "text": f"line {n}"}],
                raw_input=dict(call.input),
            )
            if n % 7 == 3:
                continue  # never stored
            if n % 5 == 1:
                late.append(record)  # stored after every other
            else:
                store.upsert_tool_call(record)
        for record in reversed(late):
            store.upsert_tool_call(record)
    with sqlite3.connect(db) as conn:
        query = "SELECT tool_call_id FROM tool_calls ORDER BY rowid"
        stored_order = [call_id for (call_id,) in conn.execute(query)]

    handed: list[str] = []

    def check(part: BranchPart) -> None:
        for message in part.messages:
            model = message_from_dict(message) if isinstance(message, dict) else message
            for use in model.tool_uses():
                n = int(use.id.split("_")[1])
                assert (use.id in part.tool_calls) == (n % 7 != 3), use.id
                handed.append(use.id)

    with SqliteStore(db) as store:
        stored = store.load(SID, check)
    assert len(handed) == turns
    assert list(stored.tool_calls) == stored_order
    assert len(stored_order) == turns - len(range(3, turns, 7))
