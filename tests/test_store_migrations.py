"""Schema migrations: a database at any earlier version upgrades to the latest, rows intact.

Every migration in `MIGRATIONS` has an upgrade test here, marked `@upgrades_to(n)`: it builds a
database at version n - 1 (`database_at`: the shipped migrations up to n - 1), writes realistic
rows into it with plain SQL, as that version's defect wrote them, opens it with the current
`SqliteStore`, and checks that the rows survive and that what migration n adds works.
`test_every_migration_has_an_upgrade_test` fails for a migration without one.

`FROZEN` is a copy of the SQL each shipped migration ran. A shipped migration edited afterwards
no longer builds the schema that copy builds, and `test_each_shipped_migration_still_builds_
its_frozen_schema` fails: databases in the field were built by the original.

The runner's own promises are tested for real at the end: numbering, the error naming a failed
migration, a SIGKILL in the middle of a migration, two processes upgrading one file at once.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from defect_core.errors import SessionNotFound, StorageError
from defect_core.events import Location, TextDisplay
from defect_core.model import TextBlock, ToolResultBlock, ToolUseBlock, assistant, user
from defect_core.store import (
    DB_FILENAME,
    MIGRATIONS,
    SCHEMA_VERSION,
    Migration,
    SessionRecord,
    SqliteStore,
    SubagentRecord,
    ToolCallRecord,
    stored_mcp_server,
)

REPO = Path(__file__).resolve().parent.parent

_Test = TypeVar("_Test", bound=Callable[..., Any])
UPGRADE_TESTS: dict[int, str] = {}


def upgrades_to(version: int) -> Callable[[_Test], _Test]:
    """Marks the test that upgrades a database from `version - 1` to `version`."""

    def mark(test: _Test) -> _Test:
        UPGRADE_TESTS[version] = test.__name__
        return test

    return mark


# --- frozen copies of what each shipped migration ran ------------------------------------------

FROZEN: dict[int, str] = {
    1: """
        PRAGMA application_id = 1145455444;
        CREATE TABLE sessions (
            id TEXT PRIMARY KEY, cwd TEXT NOT NULL, title TEXT, created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL, provider TEXT NOT NULL, model TEXT NOT NULL,
            mode TEXT NOT NULL, config TEXT NOT NULL DEFAULT '{}',
            mcp_servers TEXT NOT NULL DEFAULT '[]', permissions TEXT NOT NULL DEFAULT '{}',
            checkpoint_seq INTEGER
        );
        CREATE INDEX sessions_by_updated ON sessions (updated_at DESC, id DESC);
        CREATE INDEX sessions_by_cwd ON sessions (cwd, updated_at DESC, id DESC);
        CREATE TABLE messages (
            session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
            seq INTEGER NOT NULL, created_at TEXT NOT NULL, body TEXT NOT NULL,
            PRIMARY KEY (session_id, seq)
        );
        CREATE TABLE checkpoint_messages (
            session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
            pos INTEGER NOT NULL, body TEXT NOT NULL, PRIMARY KEY (session_id, pos)
        );
        CREATE TABLE tool_calls (
            session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
            tool_call_id TEXT NOT NULL, title TEXT NOT NULL, kind TEXT NOT NULL,
            status TEXT NOT NULL, content TEXT NOT NULL, locations TEXT NOT NULL,
            raw_input TEXT NOT NULL, raw_output TEXT, updated_at TEXT NOT NULL,
            PRIMARY KEY (session_id, tool_call_id)
        );
    """,
    2: """
        CREATE TABLE file_checkpoints (
            session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
            turn_id TEXT NOT NULL, created_at REAL NOT NULL, finished INTEGER NOT NULL,
            body TEXT NOT NULL, PRIMARY KEY (session_id, turn_id)
        );
    """,
    3: """
        CREATE TABLE subagents (
            session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
            tool_call_id TEXT NOT NULL, agent TEXT NOT NULL, task TEXT NOT NULL,
            status TEXT NOT NULL, background INTEGER NOT NULL, created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL, PRIMARY KEY (session_id, tool_call_id)
        );
        CREATE TABLE subagent_messages (
            session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
            tool_call_id TEXT NOT NULL, seq INTEGER NOT NULL, created_at TEXT NOT NULL,
            body TEXT NOT NULL, PRIMARY KEY (session_id, tool_call_id, seq)
        );
    """,
    4: """
        CREATE TABLE session_plans (
            session_id TEXT PRIMARY KEY REFERENCES sessions (id) ON DELETE CASCADE,
            body TEXT NOT NULL, updated_at TEXT NOT NULL
        );
    """,
    5: """
        ALTER TABLE messages ADD COLUMN node INTEGER;
        UPDATE messages SET node = rowid;
        CREATE UNIQUE INDEX messages_by_node ON messages (node);
        ALTER TABLE messages ADD COLUMN parent INTEGER;
        UPDATE messages SET parent = (SELECT p.node FROM messages AS p
            WHERE p.session_id = messages.session_id AND p.seq = messages.seq - 1);
        ALTER TABLE sessions ADD COLUMN head INTEGER;
        UPDATE sessions SET head = (SELECT m.node FROM messages AS m
            WHERE m.session_id = sessions.id ORDER BY m.seq DESC LIMIT 1);
        ALTER TABLE sessions ADD COLUMN undo_head INTEGER;
        ALTER TABLE sessions ADD COLUMN checkpoint_at INTEGER;
        UPDATE sessions SET checkpoint_at = (SELECT m.node FROM messages AS m
            WHERE m.session_id = sessions.id AND m.seq = sessions.checkpoint_seq);
        ALTER TABLE sessions ADD COLUMN fork_of TEXT;
        ALTER TABLE sessions ADD COLUMN deleted INTEGER NOT NULL DEFAULT 0;
    """,
    6: "",  # rows only: each session's mcp_servers rewritten without secrets
}


def database_at(path: Path, version: int) -> Path:
    """A database built by the shipped migrations up to `version` (0: opened, none applied)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with SqliteStore(path, migrations=MIGRATIONS[:version]) as store:
        assert store.schema_version == version
    return path


def frozen_database(path: Path, version: int) -> Path:
    """A database built from the frozen copies, as the defect of `version` built it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path)
    for step in range(1, version + 1):
        conn.executescript(FROZEN[step])
    conn.execute(f"PRAGMA user_version = {version}")
    conn.close()
    return path


def schema_of(path: Path) -> dict[str, Any]:
    """The structure of a database: its marks, and every table's columns, keys and indexes."""
    conn = sqlite3.connect(path)
    shape: dict[str, Any] = {
        "application_id": conn.execute("PRAGMA application_id").fetchone()[0],
        "user_version": conn.execute("PRAGMA user_version").fetchone()[0],
    }
    tables = conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
    ).fetchall()
    for (table,) in tables:
        indexes = conn.execute(f"PRAGMA index_list({table})").fetchall()
        shape[table] = {
            "columns": conn.execute(f"PRAGMA table_xinfo({table})").fetchall(),
            "foreign_keys": conn.execute(f"PRAGMA foreign_key_list({table})").fetchall(),
            "indexes": {
                name: (unique, conn.execute(f"PRAGMA index_xinfo({name})").fetchall())
                for _, name, unique, *_ in indexes
            },
        }
    conn.close()
    return shape


# --- rows as defect wrote them at version 1 ------------------------------------------------------

V1_MESSAGES = (
    '{"role":"user","content":[{"type":"text","text":"add a --verbose flag to cli.py"}]}',
    '{"role":"assistant","content":[{"type":"thinking","thinking":"read cli.py first",'
    '"signature":"c2ln"},{"type":"text","text":"Reading cli.py."},{"type":"tool_use",'
    '"id":"toolu_01","name":"read","input":{"path":"cli.py"}}]}',
    '{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_01",'
    '"content":"import argparse\\n","is_error":false}]}',
    '{"role":"assistant","content":[{"type":"text","text":"Added the flag."}]}',
)
V1_SUMMARY = '{"role":"user","content":[{"type":"text","text":"Summary: cli.py was read."}]}'


V1_ROWS_UP_TO = 4
"""The last version whose tables `write_v1_rows` can write into (5 added columns)."""


def write_v1_rows(path: Path) -> None:
    """Two sessions: one compacted (checkpoint covers seq 2) with a tool call, one plain."""
    conn = sqlite3.connect(path)
    with conn:
        conn.execute(
            "INSERT INTO sessions VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
            (
                *("sess_shop", "/home/ana/shop", "Add a --verbose flag"),
                *("2025-03-01T09:00:00.000+00:00", "2025-03-01T09:05:00.000+00:00"),
                *("anthropic", "claude-sonnet-4-5", "default"),
                '{"reasoning_effort":"high"}',
                '[{"name":"git","command":"uvx","args":["mcp-server-git"],"env":[]}]',
                '{"allowed":["bash:git status"]}',
                2,
            ),
        )
        conn.execute(
            "INSERT INTO sessions (id, cwd, title, created_at, updated_at, provider, model, mode)"
            " VALUES ('sess_blog', '/home/ana/blog', NULL, '2025-02-01T08:00:00.000+00:00',"
            " '2025-02-01T08:00:01.000+00:00', 'anthropic', 'claude-haiku-4-5', 'plan')"
        )
        conn.executemany(
            "INSERT INTO messages VALUES (?,?,?,?)",
            [
                ("sess_shop", seq, f"2025-03-01T09:0{seq}:00.000+00:00", body)
                for seq, body in enumerate(V1_MESSAGES, start=1)
            ]
            + [("sess_blog", 1, "2025-02-01T08:00:01.000+00:00", V1_MESSAGES[0])],
        )
        conn.execute("INSERT INTO checkpoint_messages VALUES ('sess_shop', 0, ?)", (V1_SUMMARY,))
        conn.execute(
            "INSERT INTO tool_calls VALUES (?,?,?,?,?,?,?,?,?,?)",
            (
                *("sess_shop", "toolu_01", "Read cli.py", "read", "completed"),
                '[{"type":"text","text":"import argparse\\n"}]',
                '[{"path":"cli.py","line":1}]',
                '{"path":"cli.py"}',
                '"import argparse\\n"',
                "2025-03-01T09:03:00.000+00:00",
            ),
        )
    conn.close()


def check_v1_rows(store: SqliteStore) -> None:
    """The rows of `write_v1_rows`, read through the current store, every field intact."""
    shop = store.load("sess_shop")
    assert shop.record == SessionRecord(
        id="sess_shop",
        cwd="/home/ana/shop",
        title="Add a --verbose flag",
        created_at="2025-03-01T09:00:00.000+00:00",
        updated_at="2025-03-01T09:05:00.000+00:00",
        provider="anthropic",
        model="claude-sonnet-4-5",
        mode="default",
        config={"reasoning_effort": "high"},
        mcp_servers=[{"name": "git", "command": "uvx", "args": ["mcp-server-git"], "env": []}],
        permissions={"allowed": ["bash:git status"]},
    )
    read = ToolUseBlock(id="toolu_01", name="read", input={"path": "cli.py"})
    assert [m.role for m in shop.transcript] == ["user", "assistant", "user", "assistant"]
    assert read in shop.transcript[1].content
    assert shop.transcript[2] == user(
        ToolResultBlock(tool_use_id="toolu_01", content="import argparse\n")
    )
    assert shop.history == [user("Summary: cli.py was read."), *shop.transcript[2:]]
    assert shop.last_seq == 4
    call = shop.tool_calls["toolu_01"]
    assert (call.title, call.kind, call.status) == ("Read cli.py", "read", "completed")
    assert call.displays() == (TextDisplay(text="import argparse\n"),)
    assert call.location_values() == (Location(path="cli.py", line=1),)
    assert call.raw_output == "import argparse\n"
    blog = store.load("sess_blog")
    assert (blog.record.mode, blog.record.title, blog.history) == ("plan", None, blog.transcript)
    assert [s.id for s in store.list().sessions] == ["sess_shop", "sess_blog"]


def v1_rows_at_latest(db: Path) -> None:
    """The rows of `write_v1_rows`, written by a version-1 defect, then upgraded."""
    write_v1_rows(database_at(db, 1))
    SqliteStore(db).close()


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "state" / DB_FILENAME


# --- every migration has its upgrade test ------------------------------------------------------


def test_every_migration_has_an_upgrade_test_and_a_frozen_copy() -> None:
    versions = [m.version for m in MIGRATIONS]
    assert versions == list(range(1, SCHEMA_VERSION + 1))
    assert sorted(UPGRADE_TESTS) == versions, "add an @upgrades_to(n) test for each migration"
    assert sorted(FROZEN) == versions, "add the frozen SQL of each migration to FROZEN"


@pytest.mark.parametrize("version", range(1, SCHEMA_VERSION + 1))
def test_each_shipped_migration_still_builds_its_frozen_schema(
    tmp_path: Path, version: int
) -> None:
    built = database_at(tmp_path / "built" / DB_FILENAME, version)
    frozen = frozen_database(tmp_path / "frozen" / DB_FILENAME, version)
    assert schema_of(built) == schema_of(frozen)


@pytest.mark.parametrize("version", range(SCHEMA_VERSION))
def test_a_database_at_any_earlier_version_upgrades_to_the_latest(
    tmp_path: Path, db: Path, version: int
) -> None:
    rows_at = min(version, V1_ROWS_UP_TO)
    database_at(db, rows_at)
    if version >= 1:
        write_v1_rows(db)
    if version > rows_at:
        database_at(db, version)  # upgraded by that version's defect, rows and all
    with SqliteStore(db) as store:
        assert store.schema_version == SCHEMA_VERSION
        if version >= 1:
            check_v1_rows(store)
    latest = frozen_database(tmp_path / "latest" / DB_FILENAME, SCHEMA_VERSION)
    assert schema_of(db) == schema_of(latest)


@upgrades_to(1)
@pytest.mark.parametrize("start", ["an empty file", "a database at version 0"])
def test_migration_1_makes_a_session_database_of_a_new_file(db: Path, start: str) -> None:
    # Version 0 holds no rows: it is a file defect created and never migrated (a kill before
    # the first commit, or an empty file someone touched).
    if start == "an empty file":
        db.parent.mkdir(parents=True)
        db.touch()
    else:
        database_at(db, 0)
    turn = [
        user("add a --verbose flag to cli.py"),
        assistant(TextBlock(text="Reading cli.py."), ToolUseBlock(id="t1", name="read", input={})),
        user(ToolResultBlock(tool_use_id="t1", content="import argparse\n")),
    ]
    with SqliteStore(db, migrations=MIGRATIONS[:1]) as store:
        assert store.schema_version == 1
    assert schema_of(db) == schema_of(frozen_database(db.parent / "frozen.sqlite3", 1))
    # The store's own reads and writes need the later migrations too (the tree of turns).
    with SqliteStore(db) as store:
        store.create(SessionRecord(id="s1", cwd="/w", provider="anthropic", model="m", mode="d"))
        for message in turn:
            store.append_message("s1", message)
        store.write_back("s1", [user("Summary.")])
        store.upsert_tool_call(
            ToolCallRecord(session_id="s1", tool_call_id="t1", title="Read", kind="read")
        )
    with SqliteStore(db) as again:
        loaded = again.load("s1")
    assert loaded.transcript == turn and loaded.history == [user("Summary.")]
    assert list(loaded.tool_calls) == ["t1"]


def test_rows_a_version_1_defect_wrote_load_with_the_current_store(db: Path) -> None:
    write_v1_rows(frozen_database(db, 1))
    with SqliteStore(db) as store:
        check_v1_rows(store)
        assert store.append_message("sess_shop", user("and a -q flag")) == 5
        assert store.latest_for_cwd("/home/ana/shop") == "sess_shop"
        store.delete("sess_shop")  # clears the session from every table
    raw = sqlite3.connect(db)
    for table in ("messages", "checkpoint_messages", "tool_calls"):
        rows = raw.execute(f"SELECT session_id FROM {table}").fetchall()
        assert set(rows) <= {("sess_blog",)}, table
    raw.close()


# --- the runner ------------------------------------------------------------------------------


def test_migrations_must_be_numbered_1_2_3_in_order(db: Path) -> None:
    plans = "CREATE TABLE plans (session_id TEXT)"
    for wrong in (
        [Migration(2, "skips one", plans)],
        [*MIGRATIONS, Migration(SCHEMA_VERSION, "repeats one", plans)],
        [*MIGRATIONS, Migration(SCHEMA_VERSION + 2, "leaves a gap", plans)],
    ):
        with pytest.raises(ValueError, match="versions run 1, 2, 3"):
            SqliteStore(db, migrations=wrong)
    assert not db.exists()  # refused before the file was touched


def test_a_failing_migration_names_itself_and_leaves_the_database_as_it_was(db: Path) -> None:
    v1_rows_at_latest(db)
    broken = Migration(
        SCHEMA_VERSION + 1, "plans", "CREATE TABLE plans (x); INSERT INTO nowhere VALUES (1)"
    )
    with pytest.raises(StorageError) as info:
        SqliteStore(db, migrations=[*MIGRATIONS, broken])
    text = str(info.value)
    assert f"cannot upgrade the session database to schema {SCHEMA_VERSION + 1} (plans)" in text
    assert "no such table: nowhere" in text and str(db) in text
    with SqliteStore(db) as store:
        assert store.schema_version == SCHEMA_VERSION
        check_v1_rows(store)


_MIGRATOR = textwrap.dedent(
    """
    import sys, time
    sys.path.insert(0, {repo!r})
    from defect_core.store import MIGRATIONS, SCHEMA_VERSION, Migration, SqliteStore

    def plans(conn):
        conn.execute("CREATE TABLE plans (session_id TEXT NOT NULL, body TEXT NOT NULL)")
        conn.execute("INSERT INTO plans SELECT id, 'draft' FROM sessions")
        print("migrating", flush=True)
        sys.stdin.readline()  # hold the migration's transaction open until told

    print("opening", flush=True)
    migrations = [*MIGRATIONS, Migration(SCHEMA_VERSION + 1, "plans", plans)]
    SqliteStore(sys.argv[1], migrations=migrations).close()
    """
)


def _spawn_migrator(db: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", _MIGRATOR.format(repo=str(REPO)), str(db)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_a_sigkill_in_the_middle_of_a_migration_loses_nothing(db: Path) -> None:
    v1_rows_at_latest(db)
    proc = _spawn_migrator(db)
    assert proc.stdout is not None
    assert proc.stdout.readline() == "opening\n"
    assert proc.stdout.readline() == "migrating\n"  # the new table and its rows are written
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    with SqliteStore(db) as store:  # the previous version, whole: the migration never happened
        assert store.schema_version == SCHEMA_VERSION
        check_v1_rows(store)
    raw = sqlite3.connect(db)
    assert raw.execute("SELECT name FROM sqlite_master WHERE name = 'plans'").fetchone() is None
    assert raw.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    raw.close()
    again = _spawn_migrator(db)  # the next open applies it
    _, err = again.communicate("go\n", timeout=60)
    assert again.returncode == 0, err
    raw = sqlite3.connect(db)
    assert raw.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION + 1,)
    assert sorted(raw.execute("SELECT * FROM plans").fetchall()) == [
        ("sess_blog", "draft"),
        ("sess_shop", "draft"),
    ]
    raw.close()


def test_two_processes_opening_an_old_database_at_once_apply_each_migration_once(
    db: Path,
) -> None:
    v1_rows_at_latest(db)
    first = _spawn_migrator(db)
    assert first.stdout is not None and first.stdin is not None
    assert first.stdout.readline() == "opening\n"
    assert first.stdout.readline() == "migrating\n"  # holds the write lock
    second = _spawn_migrator(db)
    assert second.stdout is not None and second.stdin is not None
    assert second.stdout.readline() == "opening\n"  # it will wait for the first, then skip
    first.stdin.write("go\n")
    first.stdin.flush()
    outputs = {}
    for name, proc in (("first", first), ("second", second)):
        outputs[name], err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
    assert outputs["second"] == ""  # it found the migration done under the lock: no "migrating"
    raw = sqlite3.connect(db)
    assert raw.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION + 1,)
    assert len(raw.execute("SELECT * FROM plans").fetchall()) == 2  # inserted once, not twice
    raw.close()
    with SqliteStore(db, migrations=[*MIGRATIONS, Migration(SCHEMA_VERSION + 1, "plans", "")]) as s:
        check_v1_rows(s)


def file_checkpoint(session_id: str, turn_id: str, at: float, *, finished: bool = True) -> Any:
    from defect_core.store import FileCheckpointRecord

    body = {"format": 1, "turn_id": turn_id, "root": "/w", "created_at": at, "entries": []}
    return FileCheckpointRecord(
        session_id=session_id, turn_id=turn_id, created_at=at, finished=finished, body=body
    )


@upgrades_to(2)
def test_migration_2_adds_file_checkpoints_kept_and_deleted_with_their_session(db: Path) -> None:
    write_v1_rows(frozen_database(db, 1))
    with SqliteStore(db) as store:  # through 2 to the latest
        assert store.schema_version == SCHEMA_VERSION
        check_v1_rows(store)
        sid = store.list().sessions[0].id
        store.save_file_checkpoint(file_checkpoint(sid, "t2", 20.0, finished=False))
        store.save_file_checkpoint(file_checkpoint(sid, "t1", 10.0))
        store.save_file_checkpoint(file_checkpoint(sid, "t2", 20.0))  # the turn finished
        assert [(r.turn_id, r.finished) for r in store.file_checkpoints(sid)] == [
            ("t1", True),
            ("t2", True),
        ]
        assert store.delete_file_checkpoints(sid, ["t1", "unknown"]) == 1
        assert [r.turn_id for r in store.file_checkpoints()] == ["t2"]
        store.delete(sid)
        assert store.file_checkpoints() == []
    latest = frozen_database(db.parent / "frozen.sqlite3", SCHEMA_VERSION)
    assert schema_of(db) == schema_of(latest)


@upgrades_to(3)
def test_migration_3_adds_subagent_runs_and_their_transcripts(db: Path) -> None:
    path = frozen_database(db, 2)
    write_v1_rows(path)
    with SqliteStore(db) as store:
        assert store.schema_version >= 3
        check_v1_rows(store)
        assert store.subagents("sess_shop") == []
        run = SubagentRecord(
            session_id="sess_shop", tool_call_id="toolu_02", agent="general", task="survey cli.py"
        )
        store.save_subagent(run)
        call = ToolUseBlock(id="toolu_c1", name="read", input={"path": "cli.py"})
        assert store.append_subagent_message("sess_shop", "toolu_02", user("survey cli.py")) == 1
        assert store.append_subagent_message("sess_shop", "toolu_02", assistant(call)) == 2
        # a kill here: the run stays `running` and its log ends with an orphan call
        (loaded,) = store.subagents("sess_shop")
        assert (loaded.agent, loaded.task, loaded.status) == ("general", "survey cli.py", "running")
        assert loaded.messages == (user("survey cli.py"), assistant(call))
        store.save_subagent(SubagentRecord(**{**_fields(run), "status": "completed"}))
        assert [r.status for r in store.subagents("sess_shop")] == ["completed"]
        with pytest.raises(ValueError, match="unknown subagent status"):
            store.save_subagent(SubagentRecord(**{**_fields(run), "status": "lost"}))
        store.delete("sess_shop")
        assert store.subagents("sess_shop") == []
        assert store.load("sess_blog").transcript  # the other session is untouched
    latest = frozen_database(db.parent / "frozen.sqlite3", SCHEMA_VERSION)
    assert schema_of(db) == schema_of(latest)


@upgrades_to(4)
def test_migration_4_keeps_each_sessions_latest_plan(db: Path) -> None:
    path = frozen_database(db, 3)
    write_v1_rows(path)
    with SqliteStore(db) as store:
        assert store.schema_version >= 4
        check_v1_rows(store)
        assert store.plan("sess_shop") == store.plan("sess_blog") == []  # none before
        first = [{"content": "Read cli.py", "priority": "high", "status": "in_progress"}]
        store.save_plan("sess_shop", first)
        assert store.load("sess_shop").record.updated_at > "2025-03-01T09:05:00.000+00:00"
        later = [
            {"content": "Read cli.py", "priority": "high", "status": "completed"},
            {"content": "Add --verbose", "priority": "medium", "status": "in_progress"},
        ]
        store.save_plan("sess_shop", later)  # the whole plan each time: the last one wins
        assert store.plan("sess_shop") == later and store.plan("sess_blog") == []
        with pytest.raises(SessionNotFound):
            store.save_plan("sess_gone", first)
    with SqliteStore(db) as reopened:
        assert reopened.plan("sess_shop") == later
        reopened.delete("sess_shop")
        assert reopened.plan("sess_shop") == []
        reopened.save_plan("sess_blog", first)
    raw = sqlite3.connect(db)
    assert raw.execute("SELECT COUNT(*) FROM session_plans").fetchone() == (1,)
    raw.execute('UPDATE session_plans SET body = \'{"not": "a list"}\'')
    raw.commit()
    raw.close()
    with SqliteStore(db) as store, pytest.raises(StorageError, match="plan"):
        store.plan("sess_blog")
    latest = frozen_database(db.parent / "frozen.sqlite3", SCHEMA_VERSION)
    assert schema_of(db) == schema_of(latest)


def _fields(record: SubagentRecord) -> dict[str, Any]:
    return {name: getattr(record, name) for name in SubagentRecord.__dataclass_fields__}


def test_a_sigkill_while_saving_a_file_checkpoint_leaves_the_old_or_the_new(db: Path) -> None:
    """A process killed in the middle of saving a checkpoint row: on open, the row is the
    one saved before, whole (the write is one transaction)."""
    with SqliteStore(db) as store:
        store.create(SessionRecord(id="s1", cwd="/w", provider="p", model="m", mode="d"))
        store.save_file_checkpoint(file_checkpoint("s1", "t1", 1.0, finished=False))
    script = f"""
import os, signal, sqlite3
from pathlib import Path
from defect_core.store import FileCheckpointRecord, SqliteStore
real_execute = sqlite3.Connection.execute
store = SqliteStore(Path({str(db)!r}))
conn = store._conn
class Dying:
    def __getattr__(self, name):
        return getattr(conn, name)
    def execute(self, sql, *args):
        result = conn.execute(sql, *args)
        if sql.startswith("INSERT INTO file_checkpoints"):
            os.kill(os.getpid(), signal.SIGKILL)  # written, not committed
        return result
store._conn = Dying()
body = {{"format": 1, "turn_id": "t1", "entries": [{{"path": "a"}}] * 1000}}
store.save_file_checkpoint(FileCheckpointRecord(
    session_id="s1", turn_id="t1", created_at=1.0, finished=True, body=body))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, check=False)
    assert done.returncode == -signal.SIGKILL, done.stderr
    with SqliteStore(db) as store:
        (row,) = store.file_checkpoints("s1")
    assert (row.turn_id, row.finished, row.body["entries"]) == ("t1", False, [])


@upgrades_to(5)
def test_migration_5_turns_each_log_into_a_branch_that_rewinds_and_forks(db: Path) -> None:
    """Rows a version-4 defect wrote become one branch per session (the compacted history
    still applies); a rewind moves the head without losing the abandoned branch, and undoing
    it brings that branch back; a fork shares the prefix and outlives its origin."""
    write_v1_rows(frozen_database(db, 4))
    with SqliteStore(db) as store:
        assert store.schema_version >= 5
        check_v1_rows(store)
        shop = store.load("sess_shop")
        assert shop.ids == [("sess_shop", seq) for seq in (1, 2, 3, 4)]
        store.rewind("sess_shop", 1)  # back to before the first reply
        rewound = store.load("sess_shop")
        assert rewound.transcript == shop.transcript[:1]
        assert rewound.history == rewound.transcript  # the summary covered what is gone
        assert store.append_message("sess_shop", user("try again")) == 5
        again = store.load("sess_shop")
        assert again.transcript == [shop.transcript[0], user("try again")]
        store.rewind("sess_shop", None)  # undo: the abandoned branch is whole
        assert store.load("sess_shop").transcript == shop.transcript
        assert store.load("sess_shop").history == shop.history
        fork = SessionRecord(id="fork", cwd="/home/ana/shop", provider="p", model="m", mode="d")
        store.fork("sess_shop", fork, keep=3)
        forked = store.load("fork")
        assert forked.transcript == shop.transcript[:3]
        assert forked.history == [user("Summary: cli.py was read."), shop.transcript[2]]
        store.append_message("fork", user("the fork goes on"))
        store.delete("sess_shop")  # the fork still needs its messages: only hidden
        assert not store.exists("sess_shop")
        assert [s.id for s in store.list().sessions] == ["fork", "sess_blog"]
        assert store.load("fork").transcript == [*shop.transcript[:3], user("the fork goes on")]
        store.delete("fork")  # the last user of the origin's messages: both go
        raw = sqlite3.connect(db)
        assert raw.execute("SELECT COUNT(*) FROM messages").fetchone() == (1,)  # sess_blog's
        assert raw.execute("SELECT id FROM sessions").fetchall() == [("sess_blog",)]
        raw.close()
    latest = frozen_database(db.parent / "frozen.sqlite3", SCHEMA_VERSION)
    assert schema_of(db) == schema_of(latest)


@upgrades_to(6)
def test_migration_6_scrubs_the_mcp_secrets_older_versions_stored(db: Path) -> None:
    """A version-5 defect kept a stdio server's arguments and an HTTP server's URL as given:
    a token passed as an argument or in the query string is on disk until the upgrade, and
    nowhere in the file after it. What identifies the servers stays."""
    token = "ghp_" + "OldRowToken0123456789abcdefXYZ"
    query = "QueryToken" + "0123456789"
    write_v1_rows(frozen_database(db, 4))
    database_at(db, 5)  # the rows as a version-5 defect kept them
    servers = [
        {
            "name": "github",
            "transport": "stdio",
            "command": "github-mcp-server",
            "args": ["stdio", f"--token={token}", "--password", "hunter22"],
            "env": ["GITHUB_HOST"],
        },
        {
            "name": "docs",
            "transport": "http",
            "url": f"https://user:pw1234@docs.example/mcp?token={query}",
            "headers": ["Authorization"],
        },
    ]
    raw = sqlite3.connect(db)
    with raw:
        raw.execute(
            "UPDATE sessions SET mcp_servers = ? WHERE id = 'sess_blog'", (json.dumps(servers),)
        )
        raw.execute("UPDATE sessions SET mcp_servers = 'not json' WHERE id = 'sess_shop'")
    raw.close()
    assert token.encode() in db.read_bytes()
    with SqliteStore(db) as store:
        assert store.schema_version >= 6
        blog = store.load("sess_blog").record
        assert store.load("sess_shop").record.mcp_servers == [], "unreadable: dropped"
    assert blog.mcp_servers == [
        {
            "name": "github",
            "transport": "stdio",
            "command": "github-mcp-server",
            "args": ["stdio", "--token=[redacted]", "--password", "[redacted]"],
            "env": ["GITHUB_HOST"],
        },
        {
            "name": "docs",
            "transport": "http",
            "url": "https://docs.example/mcp?token=[redacted]",
            "headers": ["Authorization"],
        },
    ]
    raw = sqlite3.connect(db)
    raw.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    raw.execute("VACUUM")  # the old row's pages too: the bytes are gone from the file
    raw.close()
    on_disk = db.read_bytes()
    for secret in (token, query, "hunter22", "pw1234"):
        assert secret.encode() not in on_disk, f"{secret} is still in the file"


def test_the_stored_form_of_a_server_is_stable_when_written_again() -> None:
    """A row the store wrote (or migration 6 rewrote) goes through `stored_mcp_server` again on
    every later write (a load, a fork): it must come out the same."""
    entry = {
        "name": "github",
        "transport": "stdio",
        "command": "github-mcp-server",
        "args": ["--token", "plain", "--key=" + "Zx9Yw8Vu7Ts6Rq5Po4Nm", "stdio"],
        "env": ["GITHUB_TOKEN=ghp_handmade", {"name": "GITHUB_HOST", "value": "h"}],
        "url": "https://u:p@h.example/mcp?token=abc#x",
        "headers": {"Authorization": "Bearer abcdef123456"},
    }
    once = stored_mcp_server(entry)
    assert once["args"] == ["--token", "[redacted]", "--key=[redacted]", "stdio"]
    assert once["env"] == ["GITHUB_TOKEN", "GITHUB_HOST"]
    assert once["headers"] == ["Authorization"]
    assert once["url"] == "https://h.example/mcp?token=[redacted]"
    assert stored_mcp_server(once) == once
