"""The session store: lossless round trips, history vs transcript, listing, faults, concurrency.

Every test uses a real SQLite file under `tmp_path`. Faults are produced for real: garbage
written into rows with a second connection, `user_version` raised by hand, a second connection
holding the write lock, `max_page_count` standing in for a full disk, a second process
appending to the same file, and a child killed with SIGKILL in the middle of its appends.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from defect_core.events import (
    DiffDisplay,
    ImageDisplay,
    Location,
    TerminalDisplay,
    TextDisplay,
    ToolCallStarted,
    ToolCallUpdated,
)
from defect_core.history import VecHistory
from defect_core.model import (
    ImageBlock,
    JsonPart,
    Message,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    assistant,
    user,
)
from defect_core.session import DuplicateSessionId, SessionNotFound, StorageError
from defect_core.store import (
    DB_FILENAME,
    MIGRATIONS,
    SCHEMA_VERSION,
    AsyncStore,
    CorruptSession,
    InvalidCursor,
    Migration,
    SessionRecord,
    SqliteStore,
    ToolCallRecord,
    default_state_dir,
    location_from_json,
    location_to_json,
    tool_display_from_json,
    tool_display_to_json,
)

REPO = Path(__file__).resolve().parent.parent


class StepClock:
    """Real time, but at least one millisecond later at every reading: strictly increasing,
    so "bumps updated_at" can be asserted without sleeping."""

    def __init__(self) -> None:
        self.moment = dt.datetime.now(dt.UTC)

    def __call__(self) -> str:
        self.moment = max(dt.datetime.now(dt.UTC), self.moment + dt.timedelta(milliseconds=1))
        return self.moment.isoformat(timespec="milliseconds")


def record(session_id: str, cwd: str = "/home/user/a", **fields: Any) -> SessionRecord:
    return SessionRecord(
        id=session_id, cwd=cwd, provider="anthropic", model="claude", mode="default", **fields
    )


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "state" / DB_FILENAME


@pytest.fixture
def clock() -> StepClock:
    return StepClock()


@pytest.fixture
def store(db: Path, clock: StepClock) -> Any:
    s = SqliteStore(db, clock=clock)
    yield s
    s.close()


def every_content_type() -> list[Message]:
    return [
        user(
            "fix the bug",
            ImageBlock(media_type="image/png", data="iVBORw0KGgo="),
            ImageBlock(url="https://example.com/shot.png"),
        ),
        assistant(
            ThinkingBlock(thinking="look at main.py", signature="c2lnbmF0dXJl+/=="),
            ThinkingBlock(thinking="unsigned thought"),
            RedactedThinkingBlock(data="ZW5jcnlwdGVk"),
            TextBlock(text='Reading it. ünïcödé ✓ \u0000 and "quotes"'),
            ToolUseBlock(
                id="toolu_1", name="read", input={"path": "main.py", "n": [1, {"a": None}]}
            ),
            ToolUseBlock(id="toolu_2", name="bash", input={}),
        ),
        user(
            ToolResultBlock(tool_use_id="toolu_1", content="print('hi')\n"),
            ToolResultBlock(
                tool_use_id="toolu_2",
                content=(
                    TextBlock(text="exit 1"),
                    JsonPart(value={"code": 1, "lines": [1.5, True, None]}),
                    ImageBlock(media_type="image/jpeg", data="/9j/4AAQ"),
                ),
                is_error=True,
            ),
        ),
        assistant("done"),
    ]


# --- round trips ------------------------------------------------------------------------------


def test_every_content_type_survives_the_store_unchanged(store: SqliteStore, db: Path) -> None:
    store.create(record("s1"))
    messages = every_content_type()
    seqs = [store.append_message("s1", m) for m in messages]
    assert seqs == [1, 2, 3, 4]

    loaded = store.load("s1")
    assert loaded.transcript == messages
    assert loaded.history == messages
    assert loaded.last_seq == 4

    # A fresh process (a new connection) reads exactly the same.
    store.close()
    with SqliteStore(db) as again:
        assert again.load("s1").transcript == messages


def test_an_orphan_tool_use_is_stored_and_loaded_as_it_is(store: SqliteStore) -> None:
    store.create(record("s1"))
    orphan = assistant("let me look", ToolUseBlock(id="toolu_x", name="read", input={}))
    store.append_message("s1", user("hi"))
    store.append_message("s1", orphan)
    assert store.load("s1").history == [user("hi"), orphan]  # no synthetic result injected


def test_session_settings_round_trip(store: SqliteStore) -> None:
    rec = record(
        "s1",
        title="Fix the bug",
        config={"reasoning_effort": "high"},
        mcp_servers=[{"name": "fs", "transport": "stdio", "command": "mcp-fs", "args": ["-v"]}],
        permissions={"allowed": ["read"], "rejected": ["bash:rm"]},
    )
    store.create(rec)
    assert store.load("s1").record == rec
    with pytest.raises(DuplicateSessionId):
        store.create(record("s1"))


def test_update_changes_only_given_fields_and_bumps_updated_at(store: SqliteStore) -> None:
    store.create(record("s1", title="old", config={"reasoning_effort": "low"}))
    before = store.load("s1").record
    store.update("s1", title="new", mode="plan", permissions={"allowed": ["edit"], "rejected": []})
    after = store.load("s1").record
    assert after.title == "new"
    assert after.mode == "plan"
    assert after.permissions == {"allowed": ["edit"], "rejected": []}
    assert after.config == {"reasoning_effort": "low"}
    assert after.model == before.model and after.created_at == before.created_at
    assert after.updated_at > before.updated_at

    store.update(
        "s1",
        model="claude-2",
        provider="bedrock",
        config={"reasoning_effort": "off"},
        mcp_servers=[{"name": "x", "transport": "http", "url": "http://h"}],
        title=None,
    )
    again = store.load("s1").record
    assert (again.model, again.provider, again.title) == ("claude-2", "bedrock", None)
    assert again.config == {"reasoning_effort": "off"}
    assert again.mcp_servers == [{"name": "x", "transport": "http", "url": "http://h"}]

    stamp = again.updated_at
    store.update("s1")  # no fields: still a touch
    assert store.load("s1").record.updated_at > stamp


def test_unknown_session_ids_raise_session_not_found(store: SqliteStore) -> None:
    with pytest.raises(SessionNotFound, match="nope"):
        store.load("nope")
    with pytest.raises(SessionNotFound):
        store.append_message("nope", user("x"))
    with pytest.raises(SessionNotFound):
        store.update("nope", title="x")
    with pytest.raises(SessionNotFound):
        store.write_back("nope", [user("x")])
    with pytest.raises(SessionNotFound):
        store.upsert_tool_call(
            ToolCallRecord(session_id="nope", tool_call_id="t", title="", kind="read")
        )
    assert not store.exists("nope")
    store.delete("nope")  # silent
    assert store.list().sessions == ()


def test_append_bumps_updated_at(store: SqliteStore) -> None:
    store.create(record("s1"))
    before = store.load("s1").record.updated_at
    store.append_message("s1", user("x"))
    assert store.load("s1").record.updated_at > before


# --- history vs transcript ----------------------------------------------------------------------


def conversation(n: int, start: int = 0) -> list[Message]:
    return [
        user(f"question {i}") if i % 2 == 0 else assistant(f"answer {i}")
        for i in range(start, start + n)
    ]


def test_replace_write_back_then_appends_load_as_the_live_history(
    store: SqliteStore, db: Path
) -> None:
    store.create(record("s1"))
    live = VecHistory()
    for m in conversation(6):
        live.append(m)
        store.append_message("s1", m)

    summary = user("Summary of the conversation so far: questions 0-3 were answered.")
    live.replace([summary, *live.snapshot()[4:]])
    assert store.write_back("s1", live.snapshot()) == 6

    loaded = store.load("s1")
    assert loaded.history == live.snapshot()
    assert loaded.transcript == conversation(6)

    for m in conversation(2, start=6):
        live.append(m)
        store.append_message("s1", m)
    store.close()
    with SqliteStore(db) as again:
        loaded = again.load("s1")
    assert loaded.history == live.snapshot() == [summary, *conversation(4, start=4)]
    assert loaded.transcript == conversation(8)  # replay still shows the original conversation


def test_splice_prefix_write_back_keeps_messages_appended_meanwhile(store: SqliteStore) -> None:
    store.create(record("s1"))
    live = VecHistory()
    for m in conversation(4):
        live.append(m)
        store.append_message("s1", m)
    drop = len(live.snapshot())  # the compaction's snapshot
    for m in conversation(2, start=4):  # appended while the summary was in flight
        live.append(m)
        store.append_message("s1", m)
    summary = user("summary of 0-3")
    live.splice_prefix(drop, summary)
    store.write_back("s1", live.snapshot())
    store.append_message("s1", assistant("after"))
    live.append(assistant("after"))

    loaded = store.load("s1")
    assert (
        loaded.history
        == live.snapshot()
        == [summary, *conversation(2, start=4), assistant("after")]
    )
    assert loaded.transcript == [*conversation(6), assistant("after")]


def test_write_back_with_explicit_covers_seq_keeps_a_later_append(store: SqliteStore) -> None:
    store.create(record("s1"))
    for m in conversation(4):
        store.append_message("s1", m)
    late = store.append_message("s1", user("landed before the write-back"))
    summary = user("summary")
    assert store.write_back("s1", [summary], covers_seq=late - 1) == 4
    assert store.load("s1").history == [summary, user("landed before the write-back")]
    with pytest.raises(ValueError, match="log ends at seq 5"):
        store.write_back("s1", [summary], covers_seq=9)
    assert store.load("s1").history[0] == summary  # the failed write-back changed nothing


def test_a_second_write_back_replaces_the_first(store: SqliteStore) -> None:
    store.create(record("s1"))
    for m in conversation(4):
        store.append_message("s1", m)
    store.write_back("s1", [user("first summary"), *conversation(2, start=2)])
    store.append_message("s1", user("q4"))
    store.write_back("s1", [user("second summary")])
    store.append_message("s1", assistant("a5"))
    loaded = store.load("s1")
    assert loaded.history == [user("second summary"), assistant("a5")]
    assert len(loaded.transcript) == 6


# --- listing ----------------------------------------------------------------------------------


def test_list_pages_newest_first_with_cursor_over_120_sessions(
    store: SqliteStore, clock: StepClock
) -> None:
    for i in range(120):
        stamp = clock()
        cwd = "/a" if i % 3 else "/b"
        store.create(
            record(f"s{i:03}", cwd=cwd, title=f"title {i}", created_at=stamp, updated_at=stamp)
        )
    store.append_message("s005", user("touch"))  # s005 becomes the newest

    seen: list[str] = []
    cursor: str | None = None
    sizes = []
    while True:
        page = store.list(cursor=cursor, limit=50)
        sizes.append(len(page.sessions))
        seen.extend(s.id for s in page.sessions)
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert sizes == [50, 50, 20]
    assert seen[0] == "s005"
    assert seen[1:] == [f"s{i:03}" for i in reversed(range(120)) if i != 5]

    only_b = store.list(cwd="/b", limit=1000).sessions
    assert [s.id for s in only_b] == [f"s{i:03}" for i in reversed(range(0, 120, 3))]
    assert all(s.cwd == "/b" for s in only_b)
    assert only_b[0].title == "title 117"
    assert store.latest_for_cwd("/a") == "s005"
    assert store.latest_for_cwd("/b") == "s117"
    assert store.latest_for_cwd("/nowhere") is None


def test_list_breaks_timestamp_ties_by_id_without_losing_sessions(db: Path) -> None:
    with SqliteStore(db, clock=lambda: "2025-01-01T00:00:00.000+00:00") as store:
        for i in range(7):
            store.create(
                record(f"s{i}", created_at="t", updated_at="2025-01-01T00:00:00.000+00:00")
            )
        ids: list[str] = []
        cursor = None
        while True:
            page = store.list(cursor=cursor, limit=3)
            ids.extend(s.id for s in page.sessions)
            if not (cursor := page.next_cursor):
                break
        assert ids == [f"s{i}" for i in reversed(range(7))]


def test_list_rejects_a_cursor_it_did_not_hand_out(store: SqliteStore) -> None:
    with pytest.raises(InvalidCursor):
        store.list(cursor="not-a-cursor!!")
    with pytest.raises(ValueError):
        store.list(limit=0)


def test_delete_removes_the_session_and_everything_stored_with_it(
    store: SqliteStore, db: Path
) -> None:
    store.create(record("gone"))
    store.create(record("kept"))
    for sid in ("gone", "kept"):
        store.append_message(sid, user("x"))
        store.write_back(sid, [user("summary")])
        store.upsert_tool_call(
            ToolCallRecord(session_id=sid, tool_call_id="t1", title="t", kind="read")
        )
    store.delete("gone")
    assert not store.exists("gone") and store.exists("kept")
    with pytest.raises(SessionNotFound):
        store.load("gone")
    raw = sqlite3.connect(db)
    for table in ("messages", "checkpoint_messages", "tool_calls"):
        rows = raw.execute(f"SELECT DISTINCT session_id FROM {table}").fetchall()
        assert rows == [("kept",)], table
    raw.close()
    assert [s.id for s in store.list().sessions] == ["kept"]
    store.delete("gone")  # again: silent


# --- tool calls -------------------------------------------------------------------------------


def test_tool_call_records_upsert_and_load_in_first_seen_order(store: SqliteStore) -> None:
    store.create(record("s1"))
    started = ToolCallStarted(
        tool_call_id="call_b",
        name="edit",
        title="Edit main.py",
        kind="edit",
        raw_input={"path": "main.py", "old": "a", "new": "b"},
        locations=(Location("main.py", 3),),
    )
    rec = ToolCallRecord.started("s1", started)
    store.upsert_tool_call(rec)
    store.upsert_tool_call(
        ToolCallRecord(session_id="s1", tool_call_id="call_a", title="ls", kind="execute")
    )
    rec = rec.updated(ToolCallUpdated(tool_call_id="call_b", status="in_progress"))
    store.upsert_tool_call(rec)
    rec = rec.updated(
        ToolCallUpdated(
            tool_call_id="call_b",
            status="completed",
            content=(DiffDisplay("main.py", "a\n", "b\n"), TextDisplay("1 edit")),
            raw_output={"ok": True},
        )
    )
    store.upsert_tool_call(rec)

    calls = store.load("s1").tool_calls
    assert list(calls) == ["call_b", "call_a"]
    loaded = calls["call_b"]
    assert loaded == rec
    assert loaded.status == "completed" and loaded.title == "Edit main.py"
    assert loaded.displays() == (DiffDisplay("main.py", "a\n", "b\n"), TextDisplay("1 edit"))
    assert loaded.location_values() == (Location("main.py", 3),)
    assert calls["call_a"].status == "pending" and calls["call_a"].raw_output is None
    with pytest.raises(ValueError, match="status"):
        bad: Any = "done"
        store.upsert_tool_call(
            ToolCallRecord(session_id="s1", tool_call_id="x", title="", kind="read", status=bad)
        )


@pytest.mark.parametrize(
    "display",
    [
        TextDisplay("hello"),
        DiffDisplay("a.py", None, "new file\n"),
        DiffDisplay("a.py", "old", "new"),
        TerminalDisplay("term-1"),
        ImageDisplay("image/png", "iVBOR"),
    ],
)
def test_tool_displays_round_trip_through_json(display: Any) -> None:
    as_json = tool_display_to_json(display)
    assert tool_display_from_json(json.loads(json.dumps(as_json))) == display


def test_display_and_location_json_reject_what_they_do_not_know() -> None:
    with pytest.raises(ValueError, match="unknown tool display type"):
        tool_display_from_json({"type": "hologram"})
    with pytest.raises(ValueError):
        tool_display_from_json({"type": "diff", "path": "x"})
    assert location_from_json(location_to_json(Location("a.py"))) == Location("a.py")
    assert location_from_json({"path": "a.py", "line": 7}) == Location("a.py", 7)
    with pytest.raises(ValueError):
        location_from_json({"line": 7})
    unknown = ToolCallRecord(
        session_id="s",
        tool_call_id="t",
        title="",
        kind="read",
        content=[{"type": "hologram"}, {"type": "text", "text": "ok"}],
    )
    assert unknown.displays() == (TextDisplay("ok"),)


# --- damaged data -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "garbage",
    [
        "this is not json",
        '{"role": "user", "content": [{"type": "te',  # truncated
        b"\xff\xfe\x00garbage",  # not even UTF-8
        '{"role": "user", "content": [{"type": "text"}]}',  # JSON, but not a message
    ],
)
def test_a_corrupt_message_row_fails_only_its_session_and_is_left_as_it_is(
    store: SqliteStore, db: Path, garbage: str | bytes
) -> None:
    store.create(record("bad"))
    store.create(record("good"))
    for i in range(3):
        store.append_message("bad", user(f"m{i}"))
        store.append_message("good", user(f"m{i}"))
    raw = sqlite3.connect(db)
    with raw:
        raw.execute("UPDATE messages SET body = ? WHERE session_id = 'bad' AND seq = 2", (garbage,))
    raw.close()

    with pytest.raises(CorruptSession) as info:
        store.load("bad")
    assert "'bad'" in str(info.value) and "seq 2" in str(info.value)
    assert info.value.session_id == "bad" and info.value.where == "message row seq 2"
    assert isinstance(info.value, StorageError)

    assert store.load("good").transcript == [user("m0"), user("m1"), user("m2")]
    assert {s.id for s in store.list().sessions} == {"bad", "good"}
    assert store.append_message("bad", user("m3")) == 4  # the session still takes writes

    raw = sqlite3.connect(db)
    raw.text_factory = bytes
    (body,) = raw.execute("SELECT body FROM messages WHERE session_id='bad' AND seq=2").fetchone()
    raw.close()
    assert body == (garbage if isinstance(garbage, bytes) else garbage.encode())  # untouched


def test_a_corrupt_settings_column_names_the_column(store: SqliteStore, db: Path) -> None:
    store.create(record("bad"))
    raw = sqlite3.connect(db)
    with raw:
        raw.execute("UPDATE sessions SET config = '{oops' WHERE id = 'bad'")
    raw.close()
    with pytest.raises(CorruptSession, match=r"'bad'.*config"):
        store.load("bad")


def test_a_corrupt_tool_call_row_names_the_tool_call(store: SqliteStore, db: Path) -> None:
    store.create(record("bad"))
    store.upsert_tool_call(
        ToolCallRecord(session_id="bad", tool_call_id="call_9", title="", kind="read")
    )
    raw = sqlite3.connect(db)
    with raw:
        raw.execute("UPDATE tool_calls SET content = '[' WHERE tool_call_id = 'call_9'")
    raw.close()
    with pytest.raises(CorruptSession, match="call_9"):
        store.load("bad")


def test_a_database_from_a_newer_defect_is_refused_and_left_alone(db: Path) -> None:
    SqliteStore(db).close()
    raw = sqlite3.connect(db)
    raw.execute("PRAGMA user_version = 99")
    raw.close()
    with pytest.raises(StorageError) as info:
        SqliteStore(db)
    text = str(info.value)
    assert f"newer defect (schema 99 > {SCHEMA_VERSION})" in text
    assert "upgrade defect or set DEFECT_STATE_DIR" in text and str(db) in text
    raw = sqlite3.connect(db)
    assert raw.execute("PRAGMA user_version").fetchone() == (99,)
    raw.close()


def test_a_file_that_is_not_a_database_gives_a_clear_error(db: Path) -> None:
    db.parent.mkdir(parents=True)
    db.write_bytes(b"definitely not sqlite" * 200)
    with pytest.raises(StorageError, match="damaged or not a defect database"):
        SqliteStore(db)
    other = db.parent / "other.sqlite3"
    raw = sqlite3.connect(other)
    raw.execute("PRAGMA application_id = 1234")
    raw.execute("CREATE TABLE t (x)")
    raw.close()
    with pytest.raises(StorageError, match="not a defect session database"):
        SqliteStore(other)


# --- schema and migrations --------------------------------------------------------------------


def test_a_new_database_gets_the_current_schema_and_reopening_keeps_data(db: Path) -> None:
    with SqliteStore(db) as store:
        assert store.schema_version == SCHEMA_VERSION == len(MIGRATIONS)
        store.create(record("s1"))
        store.append_message("s1", user("kept"))
    raw = sqlite3.connect(db)
    assert raw.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    tables = {r[0] for r in raw.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"sessions", "messages", "checkpoint_messages", "tool_calls"} <= tables
    raw.close()
    with SqliteStore(db) as again:  # idempotent: nothing re-applied, nothing lost
        assert again.schema_version == SCHEMA_VERSION
        assert again.load("s1").transcript == [user("kept")]


def test_an_empty_existing_file_is_migrated(db: Path) -> None:
    db.parent.mkdir(parents=True)
    db.touch()
    with SqliteStore(db) as store:
        assert store.schema_version == SCHEMA_VERSION
        store.create(record("s1"))


def test_migrations_apply_in_order_to_an_older_database_and_keep_its_data(db: Path) -> None:
    with SqliteStore(db) as v1:
        v1.create(record("s1"))
        v1.append_message("s1", user("from v1"))

    def v2(conn: sqlite3.Connection) -> None:
        conn.execute("ALTER TABLE sessions ADD COLUMN pinned INTEGER NOT NULL DEFAULT 0")

    v3 = (
        "CREATE TABLE notes (session_id TEXT, text TEXT);"
        " INSERT INTO notes SELECT id, 'n' FROM sessions"
    )
    v2_pinned = Migration(SCHEMA_VERSION + 1, "pinned sessions", v2)
    v3_notes = Migration(SCHEMA_VERSION + 2, "notes", v3)
    with SqliteStore(db, migrations=[*MIGRATIONS, v2_pinned, v3_notes]) as newer:
        assert newer.schema_version == SCHEMA_VERSION + 2
        assert newer.load("s1").transcript == [user("from v1")]
    raw = sqlite3.connect(db)
    assert raw.execute("SELECT pinned FROM sessions").fetchall() == [(0,)]
    assert raw.execute("SELECT * FROM notes").fetchall() == [("s1", "n")]
    raw.close()
    with pytest.raises(StorageError, match="newer defect"):  # the old code now refuses it
        SqliteStore(db)


def test_a_failing_migration_is_rolled_back_whole(db: Path) -> None:
    with SqliteStore(db) as v1:
        v1.create(record("s1"))
    broken = "CREATE TABLE half_done (x); INSERT INTO no_such_table VALUES (1)"
    with pytest.raises(StorageError, match="no_such_table"):
        SqliteStore(db, migrations=[*MIGRATIONS, Migration(SCHEMA_VERSION + 1, "broken", broken)])
    raw = sqlite3.connect(db)
    assert raw.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
    assert raw.execute("SELECT name FROM sqlite_master WHERE name = 'half_done'").fetchone() is None
    raw.close()
    with SqliteStore(db) as again:
        assert again.exists("s1")


# --- locks, full disk, processes ----------------------------------------------------------------


def test_a_locked_database_gives_a_clear_error_then_recovers(db: Path) -> None:
    store = SqliteStore(db, busy_timeout=0.2)
    store.create(record("s1"))
    store.append_message("s1", user("before"))
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    started = time.monotonic()
    with pytest.raises(StorageError, match=r"locked by another process \(waited 0.2 s\)"):
        store.append_message("s1", user("blocked"))
    assert time.monotonic() - started >= 0.15  # it waited for the other writer first
    assert store.load("s1").transcript == [user("before")]  # reads go on under WAL
    holder.execute("ROLLBACK")
    holder.close()
    assert store.append_message("s1", user("after")) == 2
    assert store.load("s1").transcript == [user("before"), user("after")]
    store.close()


def test_a_full_disk_gives_a_clear_error_and_keeps_what_was_committed(store: SqliteStore) -> None:
    store.create(record("s1"))
    committed = [user(f"message {i}") for i in range(5)]
    for m in committed:
        store.append_message("s1", m)
    conn = store._conn  # the only way to give this one connection a size limit
    assert conn is not None
    (pages,) = conn.execute("PRAGMA page_count").fetchone()
    conn.execute(f"PRAGMA max_page_count = {pages + 2}")
    big = user("x" * 20_000)
    with pytest.raises(StorageError, match="is full") as info:
        for _ in range(20):
            store.append_message("s1", big)
    assert "nothing of this change was written" in str(info.value)
    loaded = store.load("s1").transcript
    assert loaded[:5] == committed and all(m == big for m in loaded[5:])
    conn.execute("PRAGMA max_page_count = 1073741823")
    store.append_message("s1", user("space again"))
    assert store.load("s1").transcript[-1] == user("space again")
    assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)


_WRITER = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {repo!r})
    from defect_core.model import user
    from defect_core.store import SqliteStore
    path, name, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    store = SqliteStore(path)
    for i in range(count):
        seq = store.append_message("shared", user(f"{{name}} {{i}}"))
        print(seq, flush=True)
    store.close()
    """
)


def _spawn_writer(db: Path, name: str, count: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", _WRITER.format(repo=str(REPO)), str(db), name, str(count)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_two_processes_appending_to_one_session_lose_nothing(db: Path) -> None:
    with SqliteStore(db) as store:
        store.create(record("shared"))
    count = 150
    procs = [_spawn_writer(db, name, count) for name in ("p", "q")]
    outputs = [p.communicate(timeout=60) for p in procs]
    for p, (_, err) in zip(procs, outputs, strict=True):
        assert p.returncode == 0, err
    with SqliteStore(db) as store:
        texts = [m.text() for m in store.load("shared").transcript]
    assert len(texts) == 2 * count
    for name in ("p", "q"):  # each process's messages, all there, in its own order
        assert [t for t in texts if t.startswith(name)] == [f"{name} {i}" for i in range(count)]
    seqs = sorted(int(s) for out, _ in outputs for s in out.split())
    assert seqs == list(range(1, 2 * count + 1))
    raw = sqlite3.connect(db)
    assert raw.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    raw.close()


def test_every_append_that_returned_survives_a_sigkill(db: Path) -> None:
    with SqliteStore(db) as store:
        store.create(record("shared"))
    proc = _spawn_writer(db, "k", 100_000)
    assert proc.stdout is not None
    acknowledged = [int(proc.stdout.readline()) for _ in range(40)]
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    with SqliteStore(db) as store:
        transcript = store.load("shared").transcript
    assert len(transcript) >= acknowledged[-1] == 40
    assert transcript[:40] == [user(f"k {i}") for i in range(40)]


def test_a_closed_store_says_so(db: Path) -> None:
    store = SqliteStore(db)
    store.close()
    store.close()  # idempotent
    with pytest.raises(StorageError, match="closed"):
        store.list()


def test_default_state_dir_follows_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("DEFECT_STATE_DIR", str(tmp_path / "explicit"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    assert default_state_dir() == tmp_path / "explicit"
    monkeypatch.delenv("DEFECT_STATE_DIR")
    assert default_state_dir() == tmp_path / "xdg" / "defect"
    monkeypatch.setenv("XDG_STATE_HOME", "relative/ignored")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_state_dir() == tmp_path / "home" / ".local" / "state" / "defect"

    monkeypatch.setenv("DEFECT_STATE_DIR", str(tmp_path / "made"))
    with SqliteStore() as store:
        assert store.path == tmp_path / "made" / DB_FILENAME
    assert (tmp_path / "made").stat().st_mode & 0o777 == 0o700
    assert store.path.stat().st_mode & 0o777 == 0o600


# --- the async door ---------------------------------------------------------------------------


@pytest.mark.anyio
async def test_async_appends_from_many_tasks_land_in_call_order(db: Path) -> None:
    async with AsyncStore(SqliteStore(db)) as store:
        await store.create(record("s1"))
        called: list[int] = []
        seqs: dict[int, int] = {}

        async def append(i: int) -> None:
            called.append(i)  # same step as the submission inside append_message
            seqs[i] = await store.append_message("s1", user(f"m{i}"))

        async with anyio.create_task_group() as tg:
            for i in range(200):
                tg.start_soon(append, i)
        loaded = await store.load("s1")
    assert [m.text() for m in loaded.transcript] == [f"m{i}" for i in called]
    assert [seqs[i] for i in called] == list(range(1, 201))


class SlowStore(SqliteStore):
    """A store whose appends take a while, so a cancel arrives mid-write."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.writing = threading.Event()

    def append_message(self, session_id: str, message: Message) -> int:
        self.writing.set()
        time.sleep(0.15)
        return super().append_message(session_id, message)


@pytest.mark.anyio
async def test_a_cancelled_caller_still_gets_its_append_committed(db: Path) -> None:
    slow = SlowStore(db)
    async with AsyncStore(slow) as store:
        await store.create(record("s1"))
        finished_append: list[int] = []

        async def commit(text: str) -> None:
            finished_append.append(await store.append_message("s1", user(text)))

        with anyio.CancelScope() as scope:
            async with anyio.create_task_group() as tg:
                tg.start_soon(commit, "in flight")
                tg.start_soon(commit, "queued behind it")
                await anyio.to_thread.run_sync(slow.writing.wait)  # the first write has begun
                scope.cancel()
        assert scope.cancelled_caught
        # Shielded: the callers waited for their writes before seeing the cancel.
        assert finished_append == [1, 2]
        loaded = await store.load("s1")
    assert loaded.transcript == [user("in flight"), user("queued behind it")]


@pytest.mark.anyio
async def test_a_native_asyncio_cancel_does_not_drop_a_queued_append(db: Path) -> None:
    import asyncio

    async with AsyncStore(SlowStore(db)) as store:
        await store.create(record("s1"))
        first = asyncio.ensure_future(store.append_message("s1", user("one")))
        second = asyncio.ensure_future(store.append_message("s1", user("two")))
        await asyncio.sleep(0.01)
        second.cancel()
        await first
        loaded = await store.load("s1")  # runs after both queued appends
    assert loaded.transcript == [user("one"), user("two")]


@pytest.mark.anyio
async def test_async_store_raises_the_store_errors(db: Path) -> None:
    async with AsyncStore(SqliteStore(db)) as store:
        with pytest.raises(SessionNotFound):
            await store.load("missing")
        await store.create(record("s1"))
        await store.update("s1", title="t")
        assert await store.exists("s1")
        assert (await store.list()).sessions[0].title == "t"
        assert await store.latest_for_cwd("/home/user/a") == "s1"
        await store.upsert_tool_call(
            ToolCallRecord(session_id="s1", tool_call_id="c", title="", kind="read")
        )
        await store.append_message("s1", user("x"))
        assert await store.write_back("s1", [user("sum")]) == 1
        await store.delete("s1")
        assert not await store.exists("s1")
    with pytest.raises(StorageError, match="closed"):
        await store.exists("s1")


def test_appends_are_full_sync_by_default_and_normal_on_request(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("DEFECT_STORE_SYNC", raising=False)
    levels = {}
    for name, level in (("default", None), ("normal", "normal")):
        with SqliteStore(tmp_path / f"{name}.sqlite3", synchronous=level) as store:
            assert store._conn is not None
            levels[name] = store._conn.execute("PRAGMA synchronous").fetchone()[0]
    monkeypatch.setenv("DEFECT_STORE_SYNC", "normal")
    with SqliteStore(tmp_path / "env.sqlite3") as store:
        assert store.synchronous == "NORMAL"
        assert store._conn is not None
        levels["env"] = store._conn.execute("PRAGMA synchronous").fetchone()[0]
    assert levels == {"default": 2, "normal": 1, "env": 1}  # 2 = FULL, 1 = NORMAL
    with pytest.raises(ValueError, match="synchronous"):
        SqliteStore(tmp_path / "bad.sqlite3", synchronous="sometimes")


def test_a_tool_call_naming_a_file_that_is_not_utf8_is_stored_with_u_fffd(
    store: SqliteStore,
) -> None:
    """A name that is not UTF-8 reaches Python with lone surrogates (`surrogateescape`), which
    SQLite cannot store: the replay state keeps U+FFFD in their place, as a front end shows."""
    name = os.fsdecode(b"bad\xff.txt")
    store.create(SessionRecord(id="s1", cwd="/w", provider="p", model="m", mode="d"))
    started = ToolCallRecord(session_id="s1", tool_call_id="t1", title=f"Read {name}", kind="read")
    store.upsert_tool_call(started)
    update = ToolCallUpdated("t1", content=(TextDisplay(f"{name}:1: needle"),), raw_output=name)
    store.upsert_tool_call(started.updated(update))
    (snapshot,) = store.load("s1").tool_calls.values()
    assert snapshot.title == "Read bad\ufffd.txt"
    assert "bad\ufffd.txt:1: needle" in json.dumps(snapshot.content, ensure_ascii=False)
    assert snapshot.raw_output == "bad\ufffd.txt"
