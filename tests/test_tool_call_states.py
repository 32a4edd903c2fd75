"""A loaded session keeps no tool-call record it does not need, yet shows and stores every
call right: the store hands each part of a load only the records its messages make and keeps
none (`SqliteStore.load(calls=False)`), reads records on demand (`SessionStore.tool_calls`,
`defect_core/store/call_rows.py`), the streamed replay drops each record once shown
(`defect_core/session/core.py`), and the session holds only the calls it started or changed
(`defect_core/session/call_records.py`).

Real SQLite files, the real core and replay, and the real `defect acp` processes for the
end-to-end case; the only stand-in is the sink a replay is written to.
"""

from __future__ import annotations

import gc
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from defect_acp.updates import StreamedReplay, replay
from defect_core.events import TextDisplay, ToolCallStarted, ToolCallUpdated
from defect_core.model import message_from_dict
from defect_core.session.call_records import SessionToolCalls
from defect_core.session.protocol import HistoryPart
from defect_core.store import (
    AsyncStore,
    BranchPart,
    CorruptSession,
    SqliteStore,
    ToolCallRecord,
)
from tests.support.acp_harness import RecordingClient, script_env, spawn_defect
from tests.test_load_stream import NO_BACKENDS, Sink, _core, _store_session
from tests.test_replay_lines import SID

pytestmark = pytest.mark.anyio


def _calls_made(messages: list[Any]) -> list[str]:
    ids = []
    for message in messages:
        model = message_from_dict(message) if isinstance(message, dict) else message
        ids.extend(use.id for use in model.tool_uses())
    return ids


def _records_alive() -> int:
    """How many `ToolCallRecord`s exist in this process (the load freezes what it parsed out
    of the collector's reach: thawed first, so every one is counted)."""
    gc.unfreeze()
    gc.collect()
    return sum(1 for o in gc.get_objects() if isinstance(o, ToolCallRecord))


def test_each_part_carries_only_its_own_calls_and_the_load_keeps_none(tmp_path: Path) -> None:
    db = tmp_path / "sessions.sqlite3"
    turns = 300
    _store_session(db, tmp_path, turns)
    handed: list[str] = []

    def check(part: BranchPart) -> None:
        made = _calls_made(part.messages)
        assert sorted(part.tool_calls) == sorted(made)  # its own, none of another part's
        for call_id in made:
            assert part.tool_calls[call_id].status == "completed"
        handed.extend(made)

    with SqliteStore(db) as store:
        lean = store.load(SID, check, calls=False)
        whole = store.load(SID)
        every = store.tool_calls(SID)
        some = store.tool_calls(SID, ["toolu_00007", "toolu_nowhere", "toolu_00003"])
    assert lean.tool_calls == {}
    assert lean.transcript == whole.transcript and len(lean.transcript) == turns * 4
    assert handed == [f"toolu_{n:05d}" for n in range(turns)]
    # Read on demand: the same records the whole load returns, in stored order.
    assert every == whole.tool_calls and list(every) == handed
    assert list(some) == ["toolu_00003", "toolu_00007"]  # stored order; an unknown id: none
    assert some["toolu_00007"] == whole.tool_calls["toolu_00007"]


def test_a_corrupt_call_row_fails_a_lean_load_and_a_read_naming_it(tmp_path: Path) -> None:
    """The load keeps no record, but still reads every row: a corrupt one (here a call no
    message makes) fails it as before, and so does reading that call."""
    db = tmp_path / "sessions.sqlite3"
    _store_session(db, tmp_path, 5)
    with SqliteStore(db) as store:
        store.upsert_tool_call(
            ToolCallRecord(session_id=SID, tool_call_id="toolu_stray", title="t", kind="read")
        )
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE tool_calls SET content = '[' WHERE tool_call_id = 'toolu_stray'")
    with SqliteStore(db) as store:
        with pytest.raises(CorruptSession) as caught:
            store.load(SID, lambda part: None, calls=False)
        assert caught.value.where == "tool call row 'toolu_stray' (content)"
        with pytest.raises(CorruptSession):
            store.tool_calls(SID, ["toolu_stray"])
        assert list(store.tool_calls(SID, ["toolu_00001"])) == ["toolu_00001"]


async def test_a_loaded_session_holds_no_record_yet_replays_every_call(tmp_path: Path) -> None:
    db = tmp_path / "sessions.sqlite3"
    turns = 1500  # many parts
    _store_session(db, tmp_path, turns)
    alive = _records_alive()  # whatever else this process holds (other tests')
    core = _core(SqliteStore(db))
    sink = Sink()
    replaying = StreamedReplay(sink, SID)
    viewed: list[tuple[int, int]] = []  # (calls the part makes, records the view holds)

    async def part(history: HistoryPart) -> None:
        viewed.append((len(_calls_made(list(history.messages))), len(history.tool_calls)))
        await replaying.part(history)

    session = await core.load_session(SID, NO_BACKENDS, cwd=tmp_path, on_history=part)
    await replaying.finish(session)
    # While it streamed, the view held the part's records and at most the one call whose
    # result the next part holds: never the whole session's.
    assert len(viewed) > 5 and sum(made for made, _ in viewed) == turns
    assert all(held <= made + 1 for made, held in viewed), viewed
    assert _records_alive() == alive  # the load returned none and the session keeps none
    calls = [json.loads(line)["params"]["update"] for line in sink.lines]
    calls = [u for u in calls if u["sessionUpdate"] == "tool_call"]
    assert [c["toolCallId"] for c in calls] == [f"toolu_{n:05d}" for n in range(turns)]
    assert all(c["status"] == "completed" and c["title"].startswith("Read ") for c in calls)
    assert calls[7]["content"][0]["content"]["text"] == "line 7"
    # The live session's replay reads the records from the store: the same lines.
    again = Sink()
    await replay(again, session)
    assert again.lines == sink.lines
    await core.aclose()


async def test_an_update_of_a_call_not_held_is_applied_to_its_stored_record(
    tmp_path: Path,
) -> None:
    """The session holds the calls it starts; one it did not (a loaded one) is read from the
    store when an event changes it, and what it keeps is stored and shown."""
    db = tmp_path / "sessions.sqlite3"
    _store_session(db, tmp_path, 3)
    written: list[ToolCallRecord] = []
    async with AsyncStore(SqliteStore(db)) as store:

        async def write(record: ToolCallRecord) -> None:
            written.append(record)
            await store.upsert_tool_call(record)

        calls = SessionToolCalls(SID, store, write)
        await calls.apply(ToolCallUpdated("toolu_00001", status="failed"))
        await calls.apply(ToolCallUpdated("toolu_unknown", status="failed"))  # no record
        await calls.apply(ToolCallStarted("toolu_new", "bash", "Run tests", "execute", {}))
        await calls.apply(
            ToolCallUpdated("toolu_new", status="completed", content=(TextDisplay("ok"),))
        )
        assert sorted(calls.held) == ["toolu_00001", "toolu_new"]
        assert [r.tool_call_id for r in written] == ["toolu_00001", "toolu_new", "toolu_new"]
        stored = await store.tool_calls(SID)
        shown = await calls.snapshots()
    old = stored["toolu_00001"]
    assert (old.status, old.title, old.content) == (
        "failed",
        "Read 1.py",
        [{"type": "text", "text": "line 1"}],
    )  # the update changed its status only
    assert "toolu_unknown" not in stored
    assert stored["toolu_new"].status == "completed"
    assert set(shown) == {"toolu_00000", "toolu_00001", "toolu_00002", "toolu_new"}
    assert shown["toolu_00001"].status == "failed" and shown["toolu_00000"].status == "completed"
    assert shown["toolu_new"].content == (TextDisplay("ok"),)


async def test_calls_of_a_turn_after_load_are_stored_and_replayed(tmp_path: Path) -> None:
    """Through the real `defect acp`: a session loaded in a second process runs a turn
    whose tool call is stored and shown, beside the loaded ones, by a load of the live
    session and by a load in a third process."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "README.md").write_text("# Demo\n")
    first_turn = [
        {"text": "Reading.", "tool_calls": [{"name": "read_file", "input": {"path": "README.md"}}]},
        {"text": "Read it."},
    ]
    async with spawn_defect(env=script_env(tmp_path, first_turn)) as first:
        await first.initialize()
        sid = await first.new_session(work)
        assert (await first.prompt(sid, "read it")).stop_reason == "end_turn"

    def shown(updates: list[tuple[str, Any]]) -> list[tuple[str | None, str | None]]:
        return [(u.kind, u.status) for _, u in updates if u.session_update == "tool_call"]

    after_load = [
        {"tool_calls": [{"name": "write_file", "input": {"path": "a.txt", "content": "one\n"}}]},
        {"text": "Written."},
    ]
    client = RecordingClient()
    async with spawn_defect(env=script_env(tmp_path, after_load), client=client) as second:
        await second.initialize()
        await second.conn.load_session(cwd=str(work), session_id=sid, mcp_servers=[])
        assert shown(client.updates) == [("read", "completed")]
        assert (await second.prompt(sid, "now write")).stop_reason == "end_turn"
        before = len(client.updates)
        await second.conn.load_session(cwd=str(work), session_id=sid, mcp_servers=[])
        assert shown(client.updates[before:]) == [("read", "completed"), ("edit", "completed")]
        second.assert_schema_clean()
    assert (work / "a.txt").read_text() == "one\n"

    third = RecordingClient()
    async with spawn_defect(env=script_env(tmp_path), client=third) as agent:
        await agent.initialize()
        await agent.conn.load_session(cwd=str(work), session_id=sid, mcp_servers=[])
        assert shown(third.updates) == [("read", "completed"), ("edit", "completed")]
        calls = [u for _, u in third.updates if u.session_update == "tool_call"]
        diffs = [c for c in calls[1].content or [] if getattr(c, "type", "") == "diff"]
        assert diffs and diffs[0].new_text == "one\n"
        agent.assert_schema_clean()
