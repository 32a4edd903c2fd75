"""Group commit: the store's writer thread commits the writes queued behind each other at once.

Drives the real `AsyncStore` over real SQLite files (`defect_core/store/writer.py`,
`defect_core/store/transactions.py`): concurrent appends from several sessions land in one
transaction (commits are counted with the connection's trace callback, which sees every
statement SQLite runs) and each caller gets its own seq; a failing write fails only its caller;
a group SQLite rolls back whole is retried write by write; `aclose` drains the queue; and a
SIGKILL of a process whose writer is committing groups leaves every acknowledged append and
each session's log a whole prefix of what it sent.

To make a group deterministic without timing, another connection holds the database's write
lock (as another defect process would): the writer waits in `BEGIN IMMEDIATE`, every append
queues behind it, and the lock's release lets the whole queue commit together.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from defect_core.model import Message, user
from defect_core.session import SessionNotFound, StorageError
from defect_core.store import DB_FILENAME, AsyncStore, SessionRecord, SqliteStore

pytestmark = pytest.mark.anyio

REPO = Path(__file__).resolve().parent.parent
SESSIONS = ("s1", "s2", "s3", "s4")


def record(session_id: str) -> SessionRecord:
    return SessionRecord(
        id=session_id, cwd="/home/user/a", provider="anthropic", model="claude", mode="default"
    )


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "state" / DB_FILENAME


class Commits:
    """Counts the COMMITs one store's connection runs (its trace callback sees each one)."""

    def __init__(self, store: SqliteStore) -> None:
        self.count = 0
        assert store._conn is not None  # the connection whose statements are counted
        store._conn.set_trace_callback(self._saw)

    def _saw(self, statement: str) -> None:
        if statement.strip().upper() == "COMMIT":
            self.count += 1


class WriteLock:
    """Another connection holding the database's write lock until `release`."""

    def __init__(self, db: Path) -> None:
        self._conn = sqlite3.connect(db, isolation_level=None)
        self._conn.execute("BEGIN IMMEDIATE")

    def release(self) -> None:
        self._conn.execute("ROLLBACK")
        self._conn.close()


@pytest.fixture
def sqlite_store(db: Path) -> Iterator[SqliteStore]:
    store = SqliteStore(db)
    for sid in SESSIONS:
        store.create(record(sid))
    yield store
    store.close()


@contextlib.asynccontextmanager
async def capture_logs_async() -> AsyncIterator[list[dict[str, Any]]]:
    with capture_logs() as logs:
        yield logs


async def queued(calls: list[Any], db: Path) -> list[Any]:
    """Run `calls` (coroutines) as tasks that all queue behind a held write lock, then release
    it and gather their outcomes (results or exceptions), in order."""
    lock = WriteLock(db)
    tasks = [asyncio.ensure_future(c) for c in calls]
    await asyncio.sleep(0)  # every task runs up to its submission, in order
    lock.release()
    return await asyncio.gather(*tasks, return_exceptions=True)


async def test_concurrent_appends_from_several_sessions_share_one_commit(
    db: Path, sqlite_store: SqliteStore
) -> None:
    commits = Commits(sqlite_store)
    async with AsyncStore(sqlite_store) as store:
        calls = [
            store.append_message(sid, user(f"{sid} {i}")) for i in range(5) for sid in SESSIONS
        ]
        seqs = await queued(calls, db)
        assert commits.count == 1  # twenty appends from four sessions, one transaction
        assert seqs == [i + 1 for i in range(5) for _ in SESSIONS]  # each caller its own seq
        for sid in SESSIONS:
            loaded = await store.load(sid)
            assert [m.text() for m in loaded.transcript] == [f"{sid} {i}" for i in range(5)]
    assert commits.count == 1  # reads and close commit nothing


async def test_a_failing_write_fails_only_its_caller(db: Path, sqlite_store: SqliteStore) -> None:
    raw = sqlite3.connect(db)
    (before,) = raw.execute("SELECT updated_at FROM sessions WHERE id = 's3'").fetchone()
    commits = Commits(sqlite_store)
    async with AsyncStore(sqlite_store) as store, capture_logs_async() as logs:
        outcomes = await queued(
            [
                store.append_message("s1", user("one")),
                # bumps s3's updated_at, then refuses: its savepoint must undo the bump
                store.write_back("s3", [user("summary")], covers_seq=99),
                store.append_message("s2", user("two")),
                store.append_message("missing", user("lost")),
                store.append_message("s1", user("three")),
            ],
            db,
        )
    assert commits.count == 1
    assert outcomes[0] == 1 and outcomes[2] == 1 and outcomes[4] == 2
    assert isinstance(outcomes[1], ValueError) and "cover seq 99" in str(outcomes[1])
    assert isinstance(outcomes[3], SessionNotFound)
    with SqliteStore(db) as again:
        assert [m.text() for m in again.load("s1").transcript] == ["one", "three"]
        assert [m.text() for m in again.load("s2").transcript] == ["two"]
    assert raw.execute(
        "SELECT updated_at, checkpoint_seq FROM sessions WHERE id = 's3'"
    ).fetchone() == (before, None)
    raw.close()
    failed = [e["error"] for e in logs if e["event"] == "store_write_failed"]
    assert len(failed) == 2 and "cover seq 99" in failed[0] and "'missing'" in failed[1]


class RolledBackUnder(SqliteStore):
    """A store with one write that ends its transaction under it, as SQLite itself does on
    some errors (a full disk, an I/O error: "the transaction may be rolled back")."""

    def append_message(self, session_id: str, message: Message) -> int:
        if message.text() != "poison":
            return super().append_message(session_id, message)
        with self._write("save the poison") as conn:
            conn.rollback()
            raise sqlite3.OperationalError("database or disk is full")


async def test_a_group_sqlite_rolled_back_is_retried_write_by_write(db: Path) -> None:
    with SqliteStore(db) as setup:
        setup.create(record("s1"))
    async with AsyncStore(RolledBackUnder(db)) as store:
        outcomes = await queued(
            [
                store.append_message("s1", user("before")),
                store.append_message("s1", user("poison")),
                store.append_message("s1", user("after")),
            ],
            db,
        )
        assert outcomes[0] == 1 and outcomes[2] == 2
        assert isinstance(outcomes[1], StorageError)
        loaded = await store.load("s1")
    assert [m.text() for m in loaded.transcript] == ["before", "after"]


async def test_a_full_disk_in_a_group_fails_the_big_write_and_keeps_the_others(
    db: Path, sqlite_store: SqliteStore
) -> None:
    conn = sqlite_store._conn  # the only way to give this one connection a size limit
    assert conn is not None
    (pages,) = conn.execute("PRAGMA page_count").fetchone()
    conn.execute(f"PRAGMA max_page_count = {pages + 2}")
    async with AsyncStore(sqlite_store) as store:
        outcomes = await queued(
            [
                store.append_message("s1", user("small")),
                store.append_message("s2", user("x" * 50_000)),
                store.append_message("s1", user("small too")),
            ],
            db,
        )
        assert outcomes[0] == 1 and outcomes[2] == 2
        assert isinstance(outcomes[1], StorageError) and "is full" in str(outcomes[1])
        assert [m.text() for m in (await store.load("s1")).transcript] == ["small", "small too"]
        assert (await store.load("s2")).transcript == []
    check = sqlite3.connect(db)
    assert check.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    check.close()


async def test_aclose_drains_every_queued_write(db: Path, sqlite_store: SqliteStore) -> None:
    store = AsyncStore(sqlite_store)
    lock = WriteLock(db)
    tasks = [asyncio.ensure_future(store.append_message("s1", user(f"m{i}"))) for i in range(30)]
    await asyncio.sleep(0)
    closing = asyncio.ensure_future(store.aclose())
    await asyncio.sleep(0)
    lock.release()
    await closing
    assert [t.result() for t in tasks] == list(range(1, 31))
    with pytest.raises(StorageError, match="closed"):
        await store.append_message("s1", user("too late"))
    with SqliteStore(db) as again:
        assert [m.text() for m in again.load("s1").transcript] == [f"m{i}" for i in range(30)]


_CHILD = textwrap.dedent(
    """
    import asyncio, os, sys
    sys.path.insert(0, {repo!r})
    from defect_core.model import user
    from defect_core.store import AsyncStore, SqliteStore

    commits = 0

    def saw(statement):
        global commits
        if statement.strip().upper() == "COMMIT":
            commits += 1

    async def stream(store, sid):
        i = 0
        while True:
            seq = await store.append_message(sid, user(f"{{sid}} {{i}} " + "x" * 2000))
            os.write(1, f"{{sid}} {{seq}} {{commits}}\\n".encode())
            i += 1

    async def main():
        sqlite = SqliteStore(sys.argv[1])
        sqlite._conn.set_trace_callback(saw)
        store = AsyncStore(sqlite)
        await asyncio.gather(*(stream(store, sid) for sid in sys.argv[2:]))

    asyncio.run(main())
    """
)


def test_a_sigkill_while_groups_commit_keeps_every_acknowledged_append(
    db: Path, sqlite_store: SqliteStore
) -> None:
    sqlite_store.close()
    proc = subprocess.Popen(
        [sys.executable, "-c", _CHILD.format(repo=str(REPO)), str(db), *SESSIONS],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    acked: dict[str, int] = dict.fromkeys(SESSIONS, 0)
    acks = commits = 0
    while acks < 400:
        line = proc.stdout.readline()
        assert line, proc.stderr.read() if proc.stderr else "the writer died"
        sid, seq, commits_so_far = line.split()
        assert int(seq) == acked[sid] + 1  # each session's acks come in order, gap-free
        acked[sid] = int(seq)
        acks, commits = acks + 1, int(commits_so_far)
    os.kill(proc.pid, signal.SIGKILL)  # the writer is forever committing: mid-group, mostly
    proc.wait(timeout=10)
    assert commits < acks  # the appends were grouped: fewer commits than acknowledged appends
    with SqliteStore(db) as store:
        for sid in SESSIONS:
            texts = [m.text().split()[:2] for m in store.load(sid).transcript]
            # every acknowledged append is there; beyond them only whole later ones, in order
            assert len(texts) >= acked[sid]
            assert texts == [[sid, str(i)] for i in range(len(texts))]
    raw = sqlite3.connect(db)
    assert raw.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    assert raw.execute("PRAGMA foreign_key_check").fetchall() == []
    raw.close()
