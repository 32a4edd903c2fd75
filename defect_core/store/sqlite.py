"""`SqliteStore`: the `SessionStore` in one SQLite file, `sessions.sqlite3` in the state directory.

Owns the connection, its settings (WAL, `synchronous`, `busy_timeout`, foreign keys), the file's
permissions, and the SQL of every read and write of the protocol (docs/architecture.md,
Storage). The schema and its upgrades are `migrations.py`'s; turning rows into records is
`rows.py`'s; the wording of errors is `faults.py`'s; the lock and the shape of each transaction
(and `group()`, many writes in one commit) are `transactions.py`'s.

Invariants:
- Every write is one short `BEGIN IMMEDIATE` transaction (or, inside `group()`, a savepoint of
  the group's), committed whole or rolled back whole.
  `append_message` numbers the message (`seq` = last + 1) inside its transaction, so two
  processes appending to one session still get distinct, gap-free numbers, and it is durable
  when it returns (see "Durability"): a SIGKILL, a crash or a power cut loses at most the
  message in flight.
- The log is never rewritten: `write_back` stores compaction's history beside it and the seq it
  covers; `load` reads both inside one read transaction (a consistent view under WAL).
- Every sqlite error becomes a `StorageError` (`faults.storage_error`); a value that is not
  JSON is refused before its transaction starts.
- Two processes may share one database: WAL lets readers run beside a writer, and
  `busy_timeout` makes a writer wait for another rather than fail (it fails with a clear
  "locked" error only after the timeout).

Durability: WAL with `synchronous=FULL` by default; `DEFECT_STORE_SYNC=normal` (or the
`synchronous` argument) trades it for speed. scripts/bench_store.py measures both (realistic
messages, FULL and NORMAL rounds interleaved) and prints an append's median and p99 against
the 2 ms p99 budget: FULL meets it, so a committed message survives power loss too, not only
a process kill (all WAL+NORMAL promises: there the WAL is fsynced at checkpoints only, and a
power cut can roll back the last commits, though never corrupt the database). The cost of FULL
is an fsync per commit, which queues behind other processes' disk writes: on a disk other jobs
hammer, FULL's p99 rises several times more than NORMAL's. That latency is paid on the
store's worker thread (`AsyncStore`), never on the event loop, and is small against a model
turn; a lost tail after a power cut would only be what a kill between two
commits leaves anyway (an orphan `tool_use` at worst, which the outbound repair handles).

Threads: the connection is opened with `check_same_thread=False` and every call is serialised
by one lock (`transactions.py`), so a store may be created on one thread and used on another
(that is what `AsyncStore` does: built on the loop thread, used on its writer thread, which
commits the appends queued behind each other as one group: one fsync for all of them).
"""

from __future__ import annotations

import builtins
import datetime as _dt
import functools
import json
import os
import sqlite3
from collections.abc import Callable, Iterable, Sequence
from contextlib import suppress
from pathlib import Path
from typing import Any, Final

from defect_core.errors import DuplicateSessionId, SessionNotFound, StorageError
from defect_core.listing import SessionPage, SessionSummary
from defect_core.log import get_logger
from defect_core.model import Message
from defect_core.store import rows, tree
from defect_core.store.call_rows import ToolCallRows
from defect_core.store.call_rows import tool_rows as calls_of
from defect_core.store.migrations import MIGRATIONS, Migration, check_version, migrate, numbered
from defect_core.store.paths import default_store_path
from defect_core.store.protocol import UNSET, Unset
from defect_core.store.records import (
    SUBAGENT_STATUSES,
    TOOL_STATUSES,
    BranchPart,
    CorruptSession,
    FileCheckpointRecord,
    SessionRecord,
    StoredSession,
    SubagentRecord,
    ToolCallRecord,
    iso,
    now_iso,
)
from defect_core.store.schema import SESSION_TABLES

log = get_logger("defect.store")

DEFAULT_BUSY_TIMEOUT: Final = 5.0
"""Seconds a write waits for another process's transaction before giving up."""
DEFAULT_SYNCHRONOUS: Final = "FULL"
SYNC_ENV: Final = "DEFECT_STORE_SYNC"
"""`normal`: no fsync per commit (faster under disk contention; survives kills, not power loss)."""
MAX_PAGE_SIZE: Final = 1000
"""`list` never returns more than this many sessions per page."""


class SqliteStore(ToolCallRows):
    """A `SessionStore` in one SQLite file (WAL). Thread-safe; one connection, one lock (its
    transactions, and `group()` for many writes in one commit, are `Transactions`'; reads of
    tool-call records on demand, `ToolCallRows`')."""

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
        synchronous: str | None = None,
        clock: Callable[[], str] = now_iso,
        migrations: Sequence[Migration] = MIGRATIONS,
    ) -> None:
        self.path = Path(path) if path is not None else default_store_path()
        self.busy_timeout = busy_timeout
        self._clock = clock
        self._migrations = numbered(migrations)
        super().__init__()
        level = (synchronous or os.environ.get(SYNC_ENV) or DEFAULT_SYNCHRONOUS).upper()
        if level not in {"FULL", "NORMAL", "EXTRA", "OFF"}:
            raise ValueError(f"unknown synchronous level {level!r} (FULL or NORMAL)")
        self.synchronous = level
        if not self.path.parent.exists():
            try:
                self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            except OSError as exc:
                raise StorageError(
                    f"cannot create the state directory {self.path.parent} "
                    f"({exc.strerror or exc}); set DEFECT_STATE_DIR to a writable directory"
                ) from exc
        fresh = not self.path.exists()
        what = "open the session database"
        try:
            self._conn: sqlite3.Connection | None = sqlite3.connect(
                self.path,
                timeout=busy_timeout,
                isolation_level=None,  # autocommit: every transaction is an explicit BEGIN
                check_same_thread=False,  # serialised by self._lock; see the module docstring
            )
        except sqlite3.Error as exc:
            raise self._error(exc, what) from exc
        try:
            if fresh:
                # Sessions hold code and maybe secrets; -wal/-shm inherit these permissions.
                os.chmod(self.path, 0o600)
            self._open(level)
        except BaseException as exc:
            self._conn.close()
            self._conn = None
            if isinstance(exc, sqlite3.Error):
                raise self._error(exc, what) from exc
            raise

    def _open(self, synchronous: str) -> None:
        conn = self._connection()
        known = len(self._migrations)
        version = check_version(conn, self.path, known)  # before anything writes
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            log.warning("store_not_wal", path=str(self.path), journal_mode=mode)
        conn.execute(f"PRAGMA synchronous = {synchronous}")
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")
        if version < known:  # takes the write lock only when there is something to do
            migrate(conn, self.path, self._migrations, self.busy_timeout)

    @property
    def schema_version(self) -> int:
        with self._read("read the schema version") as conn:
            return int(conn.execute("PRAGMA user_version").fetchone()[0])

    # -- plumbing --

    @staticmethod
    def _bump(conn: sqlite3.Connection, session_id: str, now: str) -> str:
        """Move `updated_at` forward (at least 1 ms, so two writes within one millisecond still
        order) and prove the session exists. Returns the new stamp."""
        row = conn.execute("SELECT updated_at FROM sessions WHERE id = ?", (session_id,)).fetchone()
        if row is None:
            raise SessionNotFound(f"session {session_id!r} not found")
        stamp = _later(now, row[0])
        conn.execute("UPDATE sessions SET updated_at = ? WHERE id = ?", (stamp, session_id))
        return stamp

    # -- writes --

    def create(self, record: SessionRecord) -> None:
        with self._write(f"create session {record.id!r}") as conn:
            self._insert(conn, record)

    @staticmethod
    def _insert(conn: sqlite3.Connection, record: SessionRecord) -> None:
        values = (
            record.id,
            record.cwd,
            record.title,
            record.created_at,
            record.updated_at,
            record.provider,
            record.model,
            record.mode,
            rows.dumps(record.config, "config"),
            rows.dumps(record.mcp_servers, "mcp_servers"),
            rows.dumps(record.permissions, "permissions"),
        )
        if conn.execute("SELECT 1 FROM sessions WHERE id = ?", (record.id,)).fetchone():
            raise DuplicateSessionId(f"session {record.id!r} already exists")
        conn.execute(
            "INSERT INTO sessions (id, cwd, title, created_at, updated_at, provider, model,"
            " mode, config, mcp_servers, permissions) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
            values,
        )

    def update(
        self,
        session_id: str,
        *,
        title: str | Unset | None = UNSET,
        mode: str | Unset = UNSET,
        model: str | Unset = UNSET,
        provider: str | Unset = UNSET,
        config: dict[str, str] | Unset = UNSET,
        permissions: dict[str, Any] | Unset = UNSET,
        mcp_servers: builtins.list[dict[str, Any]] | Unset = UNSET,
    ) -> None:
        columns: dict[str, Any] = {}
        for name, value in (("title", title), ("mode", mode), ("model", model)):
            if not isinstance(value, Unset):
                columns[name] = value
        if not isinstance(provider, Unset):
            columns["provider"] = provider
        for name, data in (
            ("config", config),
            ("permissions", permissions),
            ("mcp_servers", mcp_servers),
        ):
            if not isinstance(data, Unset):
                columns[name] = rows.dumps(data, name)
        now = self._clock()
        with self._write(f"update session {session_id!r}") as conn:
            self._bump(conn, session_id, now)
            if columns:
                assignments = ", ".join(f"{name} = ?" for name in columns)
                conn.execute(
                    f"UPDATE sessions SET {assignments} WHERE id = ?",
                    (*columns.values(), session_id),
                )

    def append_message(self, session_id: str, message: Message) -> int:
        body = rows.message_json(message)
        now = self._clock()
        with self._write(f"save a message of session {session_id!r}") as conn:
            self._bump(conn, session_id, now)
            (last,) = conn.execute(
                "SELECT COALESCE(MAX(seq), 0) FROM messages WHERE session_id = ?", (session_id,)
            ).fetchone()
            seq = int(last) + 1
            tree.append_node(conn, session_id, seq, now, body)
        return seq

    def upsert_tool_call(self, record: ToolCallRecord) -> None:
        if record.status not in TOOL_STATUSES:
            raise ValueError(f"unknown tool call status {record.status!r}")
        raw_output = (
            None
            if record.raw_output is None
            # Display-only data from tools: anything that is not JSON is kept as its text.
            else rows.mended(json.dumps(record.raw_output, ensure_ascii=False, default=str))
        )
        values = (
            record.session_id,
            record.tool_call_id,
            rows.mended(record.title),
            record.kind,
            record.status,
            rows.dumps(record.content, "content"),
            rows.dumps(record.locations, "locations"),
            rows.dumps(record.raw_input, "raw_input"),
            raw_output,
        )
        now = self._clock()
        what = f"save tool call {record.tool_call_id!r} of session {record.session_id!r}"
        with self._write(what) as conn:
            self._bump(conn, record.session_id, now)
            conn.execute(
                "INSERT INTO tool_calls (session_id, tool_call_id, title, kind, status, content,"
                " locations, raw_input, raw_output, updated_at) VALUES (?,?,?,?,?,?,?,?,?,?)"
                " ON CONFLICT (session_id, tool_call_id) DO UPDATE SET title = excluded.title,"
                " kind = excluded.kind, status = excluded.status, content = excluded.content,"
                " locations = excluded.locations, raw_input = excluded.raw_input,"
                " raw_output = excluded.raw_output, updated_at = excluded.updated_at",
                (*values, now),
            )

    def write_back(
        self, session_id: str, history: builtins.list[Message], covers_seq: int | None = None
    ) -> int:
        bodies = [rows.message_json(m) for m in history]
        now = self._clock()
        with self._write(f"save the compacted history of session {session_id!r}") as conn:
            self._bump(conn, session_id, now)
            (last,) = conn.execute(
                "SELECT COALESCE(MAX(seq), 0) FROM messages WHERE session_id = ?", (session_id,)
            ).fetchone()
            head = tree.head_of(conn, session_id).head
            if covers_seq is None:  # the head: what the live history ends with
                covers, at = self._seq_of(conn, session_id, head), head
            else:
                covers = covers_seq
                if not 0 <= covers <= int(last):
                    raise ValueError(
                        f"write-back of session {session_id!r} claims to cover seq {covers}, "
                        f"but the log ends at seq {last}"
                    )
                found = conn.execute(
                    "SELECT node FROM messages WHERE session_id = ? AND seq = ?",
                    (session_id, covers),
                ).fetchone()
                at = None if found is None else int(found[0])
            conn.execute("DELETE FROM checkpoint_messages WHERE session_id = ?", (session_id,))
            conn.executemany(
                "INSERT INTO checkpoint_messages (session_id, pos, body) VALUES (?,?,?)",
                [(session_id, pos, body) for pos, body in enumerate(bodies)],
            )
            conn.execute(
                "UPDATE sessions SET checkpoint_seq = ?, checkpoint_at = ? WHERE id = ?",
                (covers, at, session_id),
            )
        return covers

    @staticmethod
    def _seq_of(conn: sqlite3.Connection, session_id: str, node: int | None) -> int:
        """`node`'s seq when it is one of this session's own messages, else 0."""
        if node is None:
            return 0
        row = conn.execute(
            "SELECT seq FROM messages WHERE node = ? AND session_id = ?", (node, session_id)
        ).fetchone()
        return 0 if row is None else int(row[0])

    def rewind(self, session_id: str, keep: int | None) -> None:
        """Move the session's head back to the first `keep` messages of its branch (the rest
        stays stored); `keep=None` undoes the last rewind. `ValueError` when impossible."""
        now = self._clock()
        with self._write(f"rewind session {session_id!r}") as conn:
            self._bump(conn, session_id, now)
            tree.move_head(conn, session_id, keep)

    def fork(self, origin: str, record: SessionRecord, keep: int | None = None) -> None:
        """Create `record` as a fork of `origin`: its history is `origin`'s branch (whole,
        or its first `keep` messages), shared, not copied."""
        with self._write(f"fork session {origin!r}") as conn:  # one transaction: whole or none
            tree.head_of(conn, origin)  # SessionNotFound before anything is written
            self._insert(conn, record)
            tree.fork(conn, origin, record.id, keep)

    def save_file_checkpoint(self, record: FileCheckpointRecord) -> None:
        """Insert or replace one turn's file checkpoint, in one transaction: a kill leaves
        the previous version of the row or the new one, never a half."""
        body = json.dumps(record.body, separators=(",", ":"), sort_keys=True)
        with self._write(f"save a file checkpoint of session {record.session_id!r}") as conn:
            conn.execute(
                "INSERT INTO file_checkpoints (session_id, turn_id, created_at, finished, body)"
                " VALUES (?,?,?,?,?) ON CONFLICT (session_id, turn_id) DO UPDATE SET"
                " created_at = excluded.created_at, finished = excluded.finished,"
                " body = excluded.body",
                (record.session_id, record.turn_id, record.created_at, int(record.finished), body),
            )

    def file_checkpoints(
        self, session_id: str | None = None
    ) -> builtins.list[FileCheckpointRecord]:
        """A session's file checkpoints (every session's with None), oldest first.
        `CorruptSession` names a row whose body is not JSON."""
        query = "SELECT session_id, turn_id, created_at, finished, body FROM file_checkpoints"
        params: tuple[str, ...] = ()
        if session_id is not None:
            query += " WHERE session_id = ?"
            params = (session_id,)
        with self._read("read file checkpoints") as conn:
            found = conn.execute(query + " ORDER BY created_at, rowid", params).fetchall()
        records = []
        for sid, turn_id, created_at, finished, body in found:
            try:
                parsed = json.loads(body)
            except ValueError as exc:
                where = f"file checkpoint {turn_id!r}"
                raise CorruptSession(
                    f"session {sid!r}: {where} cannot be read ({exc})", sid, where
                ) from None
            records.append(
                FileCheckpointRecord(
                    session_id=sid,
                    turn_id=turn_id,
                    created_at=float(created_at),
                    finished=bool(finished),
                    body=parsed if isinstance(parsed, dict) else {},
                )
            )
        return records

    def delete_file_checkpoints(self, session_id: str, turn_ids: Iterable[str]) -> int:
        """Remove these turns' file checkpoints (pruning); returns how many were removed."""
        ids = [(session_id, t) for t in turn_ids]
        with self._write(f"prune file checkpoints of session {session_id!r}") as conn:
            before = conn.total_changes
            conn.executemany(
                "DELETE FROM file_checkpoints WHERE session_id = ? AND turn_id = ?", ids
            )
            return conn.total_changes - before

    def save_subagent(self, record: SubagentRecord) -> None:
        if record.status not in SUBAGENT_STATUSES:
            raise ValueError(f"unknown subagent status {record.status!r}")
        now = self._clock()
        with self._write(f"save a subagent of session {record.session_id!r}") as conn:
            conn.execute(
                "INSERT INTO subagents (session_id, tool_call_id, agent, task, status,"
                " background, created_at, updated_at) VALUES (?,?,?,?,?,?,?,?)"
                " ON CONFLICT (session_id, tool_call_id) DO UPDATE SET"
                " status = excluded.status, updated_at = excluded.updated_at",
                (
                    *(record.session_id, record.tool_call_id, record.agent, record.task),
                    *(record.status, int(record.background), record.created_at, now),
                ),
            )

    def append_subagent_message(self, session_id: str, tool_call_id: str, message: Message) -> int:
        body = rows.message_json(message)
        now = self._clock()
        with self._write(f"save a subagent message of session {session_id!r}") as conn:
            (last,) = conn.execute(
                "SELECT COALESCE(MAX(seq), 0) FROM subagent_messages"
                " WHERE session_id = ? AND tool_call_id = ?",
                (session_id, tool_call_id),
            ).fetchone()
            seq = int(last) + 1
            conn.execute(
                "INSERT INTO subagent_messages (session_id, tool_call_id, seq, created_at, body)"
                " VALUES (?,?,?,?,?)",
                (session_id, tool_call_id, seq, now, body),
            )
        return seq

    def subagents(self, session_id: str) -> builtins.list[SubagentRecord]:
        with self._read(f"load the subagents of session {session_id!r}", snapshot=True) as conn:
            runs = conn.execute(
                "SELECT tool_call_id, agent, task, status, background, created_at FROM subagents"
                " WHERE session_id = ? ORDER BY created_at, rowid",
                (session_id,),
            ).fetchall()
            logged = conn.execute(
                "SELECT tool_call_id, seq, CAST(body AS BLOB) FROM subagent_messages"
                " WHERE session_id = ? ORDER BY tool_call_id, seq",
                (session_id,),
            ).fetchall()
        return rows.subagents_from_rows(self.path, session_id, runs, logged)

    def save_plan(self, session_id: str, plan: builtins.list[dict[str, Any]]) -> None:
        body = rows.dumps(plan, "plan")
        now = self._clock()
        with self._write(f"save the plan of session {session_id!r}") as conn:
            stamp = self._bump(conn, session_id, now)
            conn.execute(
                "INSERT INTO session_plans (session_id, body, updated_at) VALUES (?,?,?)"
                " ON CONFLICT (session_id) DO UPDATE SET"
                " body = excluded.body, updated_at = excluded.updated_at",
                (session_id, body, stamp),
            )

    def plan(self, session_id: str) -> builtins.list[dict[str, Any]]:
        with self._read(f"load the plan of session {session_id!r}") as conn:
            row = conn.execute(
                "SELECT CAST(body AS BLOB) FROM session_plans WHERE session_id = ?", (session_id,)
            ).fetchone()
        return [] if row is None else rows.plan_from_row(self.path, session_id, row[0])

    def delete(self, session_id: str) -> None:
        with self._write(f"delete session {session_id!r}") as conn:
            row = conn.execute(
                "SELECT fork_of FROM sessions WHERE id = ? AND deleted = 0", (session_id,)
            ).fetchone()
            if row is None:
                return  # unknown, or already deleted (kept only for its forks)
            keep_messages = tree.needed_by_forks(conn, session_id)
            for table in SESSION_TABLES:
                if not (keep_messages and table == "messages"):
                    conn.execute(f"DELETE FROM {table} WHERE session_id = ?", (session_id,))
            if keep_messages:  # its forks still share these messages: hidden until they go
                conn.execute("UPDATE sessions SET deleted = 1 WHERE id = ?", (session_id,))
                return
            conn.execute("DELETE FROM sessions WHERE id = ?", (session_id,))
            tree.collect(conn, row[0])

    # -- reads --

    def exists(self, session_id: str) -> bool:
        with self._read(f"look up session {session_id!r}") as conn:
            row = conn.execute(
                "SELECT 1 FROM sessions WHERE id = ? AND deleted = 0", (session_id,)
            ).fetchone()
            return row is not None

    def load(
        self,
        session_id: str,
        on_part: Callable[[BranchPart], None] | None = None,
        *,
        calls: bool = True,
    ) -> StoredSession:
        with self._read(f"load session {session_id!r}", snapshot=True) as conn:
            row = conn.execute(
                "SELECT id, cwd, title, created_at, updated_at, provider, model, mode,"
                " CAST(config AS BLOB), CAST(mcp_servers AS BLOB), CAST(permissions AS BLOB),"
                " checkpoint_seq FROM sessions WHERE id = ? AND deleted = 0",
                (session_id,),
            ).fetchone()
            if row is None:
                raise SessionNotFound(f"session {session_id!r} not found")
            place = tree.head_of(conn, session_id)
            nodes: builtins.list[int] = []  # noted as the rows pass, on a chain
            branch = tree.own_chain(conn, session_id, place, nodes)
            if branch is None:
                nodes, branch = tree.read_branch(conn, session_id, place.head)
            checkpoint_rows = conn.execute(
                "SELECT pos, CAST(body AS BLOB) FROM checkpoint_messages WHERE session_id = ?"
                " ORDER BY pos",
                (session_id,),
            ).fetchall()
            tool_rows = functools.partial(calls_of, conn, session_id)
            cut = functools.partial(tree.compaction_cut, nodes, place)
            # Parsed as read: a long session's raw bodies are never all held at once.
            try:
                return rows.session_from_rows(
                    self.path, session_id, row, branch, cut, checkpoint_rows, tool_rows,
                    on_part, calls,
                )  # fmt: skip
            except tree.BrokenChain as exc:
                where = f"message row seq {exc.seq}" if exc.seq is not None else "the last row"
                raise rows.corrupt(self.path, session_id, where, str(exc)) from None

    def list(
        self, cwd: str | None = None, cursor: str | None = None, limit: int = 50
    ) -> SessionPage:
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        limit = min(limit, MAX_PAGE_SIZE)
        clauses: builtins.list[str] = ["deleted = 0"]
        params: builtins.list[Any] = []
        if cwd is not None:
            clauses.append("cwd = ?")
            params.append(cwd)
        if cursor is not None:
            after_updated, after_id = rows.decode_cursor(cursor)
            clauses.append("(updated_at, id) < (?, ?)")
            params.extend((after_updated, after_id))
        where = f"WHERE {' AND '.join(clauses)}"
        with self._read("list sessions") as conn:
            found = conn.execute(
                f"SELECT id, cwd, title, updated_at FROM sessions {where}"
                " ORDER BY updated_at DESC, id DESC LIMIT ?",
                (*params, limit + 1),
            ).fetchall()
        page = [SessionSummary(id=r[0], cwd=r[1], title=r[2], updated_at=r[3]) for r in found]
        next_cursor = None
        if len(page) > limit:
            page = page[:limit]
            next_cursor = rows.encode_cursor(page[-1].updated_at, page[-1].id)
        return SessionPage(sessions=tuple(page), next_cursor=next_cursor)

    def latest_for_cwd(self, cwd: str) -> str | None:
        with self._read("find the latest session") as conn:
            row = conn.execute(
                "SELECT id FROM sessions WHERE cwd = ? AND deleted = 0"
                " ORDER BY updated_at DESC, id DESC LIMIT 1",
                (cwd,),
            ).fetchone()
        return None if row is None else str(row[0])

    def close(self) -> None:
        with self._lock:
            if self._conn is None:
                return
            conn, self._conn = self._conn, None
            with suppress(sqlite3.Error):  # best effort: closing must not fail on a full disk
                conn.execute("PRAGMA optimize")
            conn.close()

    def __enter__(self) -> SqliteStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _later(now: str, previous: Any) -> str:
    """`now`, or 1 ms after `previous` if `now` is not later (same millisecond, clock skew)."""
    try:
        if isinstance(previous, str) and now <= previous:
            return iso(_dt.datetime.fromisoformat(previous) + _dt.timedelta(milliseconds=1))
    except ValueError:
        pass  # an unreadable previous stamp: the clock's word stands
    return now
