"""Session persistence: the `SessionStore` protocol, its SQLite implementation and an async door.

Owns what survives a restart: each session's settings (cwd, title, provider/model, mode,
config options, MCP servers, remembered permissions), its message log, what compaction wrote
back, and the tool calls a replay shows. `SqliteStore` keeps all of it in one database,
`sessions.sqlite3` under `default_state_dir()`; `AsyncStore` runs a store on one dedicated
worker thread so the event loop never waits on the disk.

Invariants:
- The message log is append-only. `append_message` is one transaction of its own and is
  durable when it returns (WAL, `synchronous=FULL`: the WAL is fsynced at every commit), so a
  SIGKILL, a crash or a power cut loses at most the message in flight (see "Durability").
  Messages are numbered per session (`seq` = 1, 2, …) inside the write transaction, so two
  processes appending to one session still get distinct, gap-free numbers.
- History vs transcript. Compaction rewrites the live history (`History.replace`,
  `History.splice_prefix`); the runtime then calls `checkpoint` with the full new history and
  the seq of the last logged message it covers. The log itself is never rewritten: `load`
  returns `history` = the last checkpoint + every message appended after it (exactly what the
  session had in memory), and `transcript` = the whole original log (what `session/load`
  replays: the real conversation, not the summary).
- Stored as-is, never repaired. An orphan `tool_use` (a kill between the assistant message
  and its results) is stored and loaded as an orphan; only the copy sent to a provider is made
  wire-legal, by `integrity.repair_outbound` (docs/architecture.md, Integrity: a repair here would
  leak synthetic
  blocks into the source of truth).
- Faults are per call and never destroy data. Every sqlite error becomes a `StorageError` whose
  text says what could not be done and why (disk full, locked by another process, damaged file,
  newer schema, a state directory that cannot be created); a write that fails is rolled back
  whole; a row that cannot be parsed fails the load of its own session only, names the session
  and the row, and is left untouched on disk.
- Schema changes go through `MIGRATIONS` (`PRAGMA user_version` = how many were applied), each
  in its own transaction. A database from a newer defect is refused, never "downgraded".
- Two processes may share one database: WAL lets readers run beside a writer, every write is a
  short `BEGIN IMMEDIATE` transaction, and `busy_timeout` makes a writer wait for another rather
  than fail (it fails with a clear "locked" error only after the timeout).

Durability: WAL with `synchronous=FULL` by default; `DEFECT_STORE_SYNC=normal` (or the
`synchronous` argument) trades it for speed. Measured on this 2-core VM (scripts/bench_store.py,
realistic messages, FULL and NORMAL rounds interleaved): FULL costs ~0.25 ms median and
0.5-1.1 ms p99 (12 rounds of 1,000 appends, all ≤ 2 ms), NORMAL ~0.06 ms median and 0.3-0.7 ms
p99. FULL meets the 2 ms p99 budget, so a committed message survives power loss too, not only
a process kill (all WAL+NORMAL promises: there the WAL is fsynced at checkpoints only, and a
power cut can roll back the last commits, though never corrupt the database). The cost of FULL
is an fsync per commit, which queues behind other processes' disk writes: while other jobs
hammered this disk, FULL's p99 rose to 4-10 ms where NORMAL mostly stayed under 0.5 ms. That
latency is paid on the store's worker thread (`AsyncStore`), never on the event loop, and is
small against a model turn; a lost tail after a power cut would only be what a kill between two
commits leaves anyway (an orphan `tool_use` at worst, which the outbound repair handles).

Threads: `SqliteStore` opens its connection with `check_same_thread=False` and serialises
every call with a lock, so it may be created on one thread and used on another (that is what
`AsyncStore` does: built on the loop thread, used on its worker). `AsyncStore` submits each
call to a single worker thread at the moment it is awaited, so writes happen in call order;
an awaited call is shielded from cancellation (a cancelled caller still waits for the write to
finish, then sees the cancellation), so a cancel can never lose or half-write a commit.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import builtins
import concurrent.futures
import dataclasses
import datetime as _dt
import json
import os
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Protocol, TypeVar, get_args

import anyio

from defect_core.errors import AgentError, DuplicateSessionId, SessionNotFound, StorageError
from defect_core.events import (
    DiffDisplay,
    ImageDisplay,
    Location,
    TerminalDisplay,
    TextDisplay,
    ToolCallStarted,
    ToolCallUpdated,
    ToolDisplay,
    ToolKind,
    ToolStatus,
)
from defect_core.listing import SessionPage, SessionSummary
from defect_core.log import get_logger
from defect_core.model import Message, MessageFormatError, message_from_json, message_to_json

log = get_logger("defect.store")

DB_FILENAME: Final = "sessions.sqlite3"
DEFAULT_BUSY_TIMEOUT: Final = 5.0
"""Seconds a write waits for another process's transaction before giving up."""
APPLICATION_ID: Final = 0x44464354  # "DFCT": marks the file as a defect session database
DEFAULT_SYNCHRONOUS: Final = "FULL"
SYNC_ENV: Final = "DEFECT_STORE_SYNC"
"""`normal`: no fsync per commit (faster under disk contention; survives kills, not power loss)."""
MAX_PAGE_SIZE: Final = 1000
"""`list` never returns more than this many sessions per page."""

_STATUSES: Final = frozenset(get_args(ToolStatus))
_KINDS: Final = frozenset(get_args(ToolKind))


# --- values ---------------------------------------------------------------------------------


def now_iso() -> str:
    """The current time as the store writes it: ISO 8601, UTC, milliseconds (sortable)."""
    return _iso(_dt.datetime.now(_dt.UTC))


def _iso(moment: _dt.datetime) -> str:
    return moment.astimezone(_dt.UTC).isoformat(timespec="milliseconds")


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionRecord:
    """A session's settings: everything but its messages and tool calls."""

    id: str
    cwd: str
    provider: str
    model: str
    mode: str
    title: str | None = None
    created_at: str = field(default_factory=now_iso)
    updated_at: str = field(default_factory=now_iso)
    config: dict[str, str] = field(default_factory=dict)
    """Config option values other than mode and model, e.g. `{"reasoning_effort": "high"}`."""
    mcp_servers: list[dict[str, Any]] = field(default_factory=list)
    permissions: dict[str, Any] = field(default_factory=dict)
    """Remembered "always" answers, `PermissionRules.to_dict()`: `{"allowed": [...], ...}`."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCallRecord:
    """What a replay shows of one tool call: its last title, kind, status and content.

    `content` holds display items as JSON (`tool_display_to_json`), `locations` as
    `{"path", "line"}` dicts. Upserted as the turn progresses; the last write wins.
    """

    session_id: str
    tool_call_id: str
    title: str
    kind: ToolKind
    status: ToolStatus = "pending"
    content: list[dict[str, Any]] = field(default_factory=list)
    locations: list[dict[str, Any]] = field(default_factory=list)
    raw_input: dict[str, Any] = field(default_factory=dict)
    raw_output: Any = None

    @classmethod
    def started(cls, session_id: str, event: ToolCallStarted) -> ToolCallRecord:
        """The record of a tool call that has just been announced."""
        return cls(
            session_id=session_id,
            tool_call_id=event.tool_call_id,
            title=event.title,
            kind=event.kind,
            status=event.status,
            content=[tool_display_to_json(d) for d in event.content],
            locations=[location_to_json(loc) for loc in event.locations],
            raw_input=dict(event.raw_input),
        )

    def updated(self, event: ToolCallUpdated) -> ToolCallRecord:
        """This record with the fields `event` changes (its `None` fields change nothing)."""
        changes: dict[str, Any] = {}
        if event.status is not None:
            changes["status"] = event.status
        if event.title is not None:
            changes["title"] = event.title
        if event.content is not None:
            changes["content"] = [tool_display_to_json(d) for d in event.content]
        if event.locations is not None:
            changes["locations"] = [location_to_json(loc) for loc in event.locations]
        if event.raw_output is not None:
            changes["raw_output"] = event.raw_output
        return dataclasses.replace(self, **changes)

    def displays(self) -> tuple[ToolDisplay, ...]:
        """`content` as core display values; items of a kind this defect does not know are
        skipped (a newer defect may have written them)."""
        out: list[ToolDisplay] = []
        for item in self.content:
            try:
                out.append(tool_display_from_json(item))
            except ValueError:
                log.warning("tool_display_skipped", tool_call_id=self.tool_call_id, item=item)
        return tuple(out)

    def location_values(self) -> tuple[Location, ...]:
        return tuple(location_from_json(loc) for loc in self.locations)


@dataclass(frozen=True, slots=True)
class StoredSession:
    """A loaded session.

    `history` is what the session resumes from (last compaction checkpoint + the messages
    appended after it); `transcript` is the full original log, for replay. Without any
    compaction the two are equal.
    """

    record: SessionRecord
    history: list[Message]
    transcript: list[Message]
    tool_calls: dict[str, ToolCallRecord]
    last_seq: int = 0
    """The seq of the last logged message (0 for none)."""


class InvalidCursor(AgentError):
    """A `list` cursor this store did not hand out."""

    code = "invalid_params"


class CorruptSession(StorageError):
    """A stored row of one session cannot be read. Other sessions are unaffected."""

    def __init__(self, message: str, session_id: str, where: str) -> None:
        super().__init__(message)
        self.session_id = session_id
        self.where = where


# --- display and location JSON --------------------------------------------------------------


def tool_display_to_json(display: ToolDisplay) -> dict[str, Any]:
    if isinstance(display, TextDisplay):
        return {"type": "text", "text": display.text}
    if isinstance(display, DiffDisplay):
        return {
            "type": "diff",
            "path": display.path,
            "old_text": display.old_text,
            "new_text": display.new_text,
        }
    if isinstance(display, TerminalDisplay):
        data = {"type": "terminal", "terminal_id": display.terminal_id}
        if display.output is not None:
            data["output"] = display.output
        return data
    if isinstance(display, ImageDisplay):
        return {"type": "image", "media_type": display.media_type, "data": display.data}
    raise TypeError(f"not a tool display: {display!r}")


def tool_display_from_json(data: dict[str, Any]) -> ToolDisplay:
    """The inverse of `tool_display_to_json`; `ValueError` names what is wrong."""
    try:
        kind = data["type"]
        if kind == "text":
            return TextDisplay(text=_str(data["text"]))
        if kind == "diff":
            old = data.get("old_text")
            return DiffDisplay(
                path=_str(data["path"]),
                old_text=None if old is None else _str(old),
                new_text=_str(data["new_text"]),
            )
        if kind == "terminal":
            output = data.get("output")
            return TerminalDisplay(
                terminal_id=_str(data["terminal_id"]),
                output=None if output is None else _str(output),
            )
        if kind == "image":
            return ImageDisplay(media_type=_str(data["media_type"]), data=_str(data["data"]))
    except (KeyError, TypeError) as exc:
        raise ValueError(f"not a tool display: {data!r} ({exc!r})") from None
    raise ValueError(f"unknown tool display type {kind!r}")


def location_to_json(location: Location) -> dict[str, Any]:
    return {"path": location.path, "line": location.line}


def location_from_json(data: dict[str, Any]) -> Location:
    try:
        line = data.get("line")
        if line is not None and (not isinstance(line, int) or isinstance(line, bool)):
            raise TypeError("line must be an integer")
        return Location(path=_str(data["path"]), line=line)
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"not a location: {data!r} ({exc!r})") from None


def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {type(value).__name__}")
    return value


# --- where the database lives ---------------------------------------------------------------


def default_state_dir() -> Path:
    """`$DEFECT_STATE_DIR`, else `$XDG_STATE_HOME/defect`, else `~/.local/state/defect`.

    A relative `XDG_STATE_HOME` is ignored, as the XDG base-directory spec asks.
    """
    explicit = os.environ.get("DEFECT_STATE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_STATE_HOME")
    if xdg and Path(xdg).is_absolute():
        return Path(xdg) / "defect"
    return Path.home() / ".local" / "state" / "defect"


def default_store_path() -> Path:
    return default_state_dir() / DB_FILENAME


# --- the protocol ---------------------------------------------------------------------------


class _Unset:
    """Marks an `update` field that was not given (`None` is a real value for `title`)."""

    _instance: _Unset | None = None

    def __new__(cls) -> _Unset:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNSET"


UNSET: Final = _Unset()


class SessionStore(Protocol):
    """Where sessions persist. Methods are synchronous; wrap a store in `AsyncStore` to use it
    from the event loop."""

    def create(self, record: SessionRecord) -> None:
        """Store a new session. `DuplicateSessionId` if the id is taken."""
        ...

    def update(
        self,
        session_id: str,
        *,
        title: str | _Unset | None = UNSET,
        mode: str | _Unset = UNSET,
        model: str | _Unset = UNSET,
        provider: str | _Unset = UNSET,
        config: dict[str, str] | _Unset = UNSET,
        permissions: dict[str, Any] | _Unset = UNSET,
        mcp_servers: builtins.list[dict[str, Any]] | _Unset = UNSET,
    ) -> None:
        """Change the given fields; always bumps `updated_at`. `SessionNotFound` if unknown."""
        ...

    def append_message(self, session_id: str, message: Message) -> int:
        """Log one message in its own transaction; durable when this returns. Its seq."""
        ...

    def upsert_tool_call(self, record: ToolCallRecord) -> None: ...

    def checkpoint(
        self, session_id: str, history: builtins.list[Message], covers_seq: int | None = None
    ) -> int:
        """Compaction rewrote the live history: `history` is all of it, covering the log up to
        `covers_seq` (default: the last logged message). Returns the seq covered.

        The default is exact when the store sees writes in the order history saw them: with
        `AsyncStore`, call `append_message` right after `History.append` and `checkpoint` right
        after `replace`/`splice_prefix` + `snapshot`, with no `await` in between. Otherwise pass
        the seq `append_message` returned for the last message `history` contains.
        """
        ...

    def load(self, session_id: str) -> StoredSession:
        """The session, or `SessionNotFound`; `CorruptSession` if a row cannot be read."""
        ...

    def exists(self, session_id: str) -> bool: ...

    def list(
        self, cwd: str | None = None, cursor: str | None = None, limit: int = 50
    ) -> SessionPage:
        """Newest first (by `updated_at`, then id); pass `next_cursor` back for the next page."""
        ...

    def delete(self, session_id: str) -> None:
        """Remove the session and everything stored with it; an unknown id is not an error."""
        ...

    def latest_for_cwd(self, cwd: str) -> str | None: ...

    def close(self) -> None: ...


# --- schema ---------------------------------------------------------------------------------

_V1: Final = f"""
PRAGMA application_id = {APPLICATION_ID};
CREATE TABLE sessions (
    id             TEXT PRIMARY KEY,
    cwd            TEXT NOT NULL,
    title          TEXT,
    created_at     TEXT NOT NULL,
    updated_at     TEXT NOT NULL,
    provider       TEXT NOT NULL,
    model          TEXT NOT NULL,
    mode           TEXT NOT NULL,
    config         TEXT NOT NULL DEFAULT '{{}}',
    mcp_servers    TEXT NOT NULL DEFAULT '[]',
    permissions    TEXT NOT NULL DEFAULT '{{}}',
    checkpoint_seq INTEGER
);
CREATE INDEX sessions_by_updated ON sessions (updated_at DESC, id DESC);
CREATE INDEX sessions_by_cwd ON sessions (cwd, updated_at DESC, id DESC);
CREATE TABLE messages (
    session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    seq        INTEGER NOT NULL,
    created_at TEXT NOT NULL,
    body       TEXT NOT NULL,
    PRIMARY KEY (session_id, seq)
);
CREATE TABLE checkpoint_messages (
    session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    pos        INTEGER NOT NULL,
    body       TEXT NOT NULL,
    PRIMARY KEY (session_id, pos)
);
CREATE TABLE tool_calls (
    session_id   TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    tool_call_id TEXT NOT NULL,
    title        TEXT NOT NULL,
    kind         TEXT NOT NULL,
    status       TEXT NOT NULL,
    content      TEXT NOT NULL,
    locations    TEXT NOT NULL,
    raw_input    TEXT NOT NULL,
    raw_output   TEXT,
    updated_at   TEXT NOT NULL,
    PRIMARY KEY (session_id, tool_call_id)
);
"""

Migration = str | Callable[[sqlite3.Connection], None]
"""SQL statements separated by `;`, or a function given the connection inside the transaction."""

MIGRATIONS: Final[tuple[Migration, ...]] = (_V1,)
"""`MIGRATIONS[n]` takes a database from schema version n to n + 1. Append only."""

SCHEMA_VERSION: Final = len(MIGRATIONS)

_T = TypeVar("_T")


# --- SQLite ---------------------------------------------------------------------------------


class SqliteStore:
    """A `SessionStore` in one SQLite file (WAL). Thread-safe; one connection, one lock."""

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
        self._migrations = tuple(migrations)
        self._lock = threading.Lock()
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

    # -- opening and migrations --

    def _open(self, synchronous: str) -> None:
        conn = self._connection()
        version = self._check_version(conn)  # before anything writes: never touch a newer one
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            log.warning("store_not_wal", path=str(self.path), journal_mode=mode)
        conn.execute(f"PRAGMA synchronous = {synchronous}")
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")
        if version < len(self._migrations):
            self._migrate(conn)  # takes the write lock only when there is something to do

    def _check_version(self, conn: sqlite3.Connection) -> int:
        app_id = conn.execute("PRAGMA application_id").fetchone()[0]
        version = int(conn.execute("PRAGMA user_version").fetchone()[0])
        if app_id not in (0, APPLICATION_ID):
            raise StorageError(
                f"{self.path} is not a defect session database (application id {app_id:#x}); "
                "move it aside or set DEFECT_STATE_DIR"
            )
        known = len(self._migrations)
        if version > known:
            raise StorageError(
                f"the session database {self.path} was written by a newer defect "
                f"(schema {version} > {known}); upgrade defect or set DEFECT_STATE_DIR"
            )
        return version

    def _migrate(self, conn: sqlite3.Connection) -> None:
        target = len(self._migrations)
        while True:
            conn.execute("BEGIN IMMEDIATE")
            try:
                # Re-read under the write lock: another process may have migrated meanwhile.
                version = self._check_version(conn)
                if version >= target:
                    conn.execute("COMMIT")
                    return
                step = self._migrations[version]
                if callable(step):
                    step(conn)
                else:
                    for statement in step.split(";"):
                        if statement.strip():
                            conn.execute(statement)
                conn.execute(f"PRAGMA user_version = {version + 1}")
                conn.execute("COMMIT")
                log.info("store_migrated", path=str(self.path), version=version + 1)
            except BaseException:
                if conn.in_transaction:
                    conn.rollback()
                raise

    @property
    def schema_version(self) -> int:
        with self._read("read the schema version") as conn:
            return int(conn.execute("PRAGMA user_version").fetchone()[0])

    # -- plumbing --

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise StorageError(f"the session store {self.path} is closed")
        return self._conn

    @contextmanager
    def _write(self, what: str) -> Iterator[sqlite3.Connection]:
        """One short write transaction, committed on success and rolled back whole on failure."""
        with self._lock:
            conn = self._connection()
            try:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    yield conn
                    conn.execute("COMMIT")
                except BaseException:
                    if conn.in_transaction:
                        conn.rollback()
                    raise
            except sqlite3.Error as exc:
                raise self._error(exc, what) from exc

    @contextmanager
    def _read(self, what: str, *, snapshot: bool = False) -> Iterator[sqlite3.Connection]:
        """Reads; with `snapshot`, inside one read transaction (a consistent view under WAL)."""
        with self._lock:
            conn = self._connection()
            try:
                if not snapshot:
                    yield conn
                    return
                conn.execute("BEGIN")
                try:
                    yield conn
                finally:
                    if conn.in_transaction:
                        conn.rollback()  # a read transaction has nothing to commit
            except sqlite3.Error as exc:
                raise self._error(exc, what) from exc

    def _error(self, exc: sqlite3.Error, what: str) -> StorageError:
        """A `StorageError` that says what could not be done, why, and what to do about it."""
        code = getattr(exc, "sqlite_errorcode", None)
        primary = code & 0xFF if isinstance(code, int) else None
        where = f"the session database {self.path}"
        if primary == sqlite3.SQLITE_FULL:
            text = (
                f"cannot {what}: {where} is full (no space left on the disk, or a size limit); "
                "nothing of this change was written — free some space and retry"
            )
        elif primary in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
            text = (
                f"cannot {what}: {where} is locked by another process "
                f"(waited {self.busy_timeout:g} s); retry in a moment"
            )
        elif primary in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB):
            text = (
                f"cannot {what}: {where} is damaged or not a defect database ({exc}); "
                "move it aside or set DEFECT_STATE_DIR"
            )
        elif primary in (sqlite3.SQLITE_READONLY, sqlite3.SQLITE_PERM, sqlite3.SQLITE_CANTOPEN):
            text = (
                f"cannot {what}: {where} cannot be opened for writing ({exc}); "
                "check its permissions or set DEFECT_STATE_DIR"
            )
        elif primary == sqlite3.SQLITE_IOERR:
            text = (
                f"cannot {what}: the disk failed while writing {where} ({exc}); "
                "this change may not have been saved"
            )
        elif isinstance(exc, sqlite3.ProgrammingError) and "closed" in str(exc):
            text = f"cannot {what}: the session store {self.path} is closed"
        else:
            text = f"cannot {what}: {where} failed ({exc})"
        log.warning("store_error", error=text, sqlite_error=getattr(exc, "sqlite_errorname", ""))
        return StorageError(text)

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
        values = (
            record.id,
            record.cwd,
            record.title,
            record.created_at,
            record.updated_at,
            record.provider,
            record.model,
            record.mode,
            _dumps(record.config, "config"),
            _dumps(record.mcp_servers, "mcp_servers"),
            _dumps(record.permissions, "permissions"),
        )
        with self._write(f"create session {record.id!r}") as conn:
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
        title: str | _Unset | None = UNSET,
        mode: str | _Unset = UNSET,
        model: str | _Unset = UNSET,
        provider: str | _Unset = UNSET,
        config: dict[str, str] | _Unset = UNSET,
        permissions: dict[str, Any] | _Unset = UNSET,
        mcp_servers: builtins.list[dict[str, Any]] | _Unset = UNSET,
    ) -> None:
        columns: dict[str, Any] = {}
        for name, value in (("title", title), ("mode", mode), ("model", model)):
            if not isinstance(value, _Unset):
                columns[name] = value
        if not isinstance(provider, _Unset):
            columns["provider"] = provider
        for name, data in (
            ("config", config),
            ("permissions", permissions),
            ("mcp_servers", mcp_servers),
        ):
            if not isinstance(data, _Unset):
                columns[name] = _dumps(data, name)
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
        body = _message_json(message)
        now = self._clock()
        with self._write(f"save a message of session {session_id!r}") as conn:
            self._bump(conn, session_id, now)
            (last,) = conn.execute(
                "SELECT COALESCE(MAX(seq), 0) FROM messages WHERE session_id = ?", (session_id,)
            ).fetchone()
            seq = int(last) + 1
            conn.execute(
                "INSERT INTO messages (session_id, seq, created_at, body) VALUES (?,?,?,?)",
                (session_id, seq, now, body),
            )
        return seq

    def upsert_tool_call(self, record: ToolCallRecord) -> None:
        if record.status not in _STATUSES:
            raise ValueError(f"unknown tool call status {record.status!r}")
        raw_output = (
            None
            if record.raw_output is None
            # Display-only data from tools: anything that is not JSON is kept as its text.
            else json.dumps(record.raw_output, ensure_ascii=False, default=str)
        )
        values = (
            record.session_id,
            record.tool_call_id,
            record.title,
            record.kind,
            record.status,
            _dumps(record.content, "content"),
            _dumps(record.locations, "locations"),
            _dumps(record.raw_input, "raw_input"),
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

    def checkpoint(
        self, session_id: str, history: builtins.list[Message], covers_seq: int | None = None
    ) -> int:
        bodies = [_message_json(m) for m in history]
        now = self._clock()
        with self._write(f"save the compacted history of session {session_id!r}") as conn:
            self._bump(conn, session_id, now)
            (last,) = conn.execute(
                "SELECT COALESCE(MAX(seq), 0) FROM messages WHERE session_id = ?", (session_id,)
            ).fetchone()
            covers = int(last) if covers_seq is None else covers_seq
            if not 0 <= covers <= int(last):
                raise ValueError(
                    f"checkpoint of session {session_id!r} claims to cover seq {covers}, "
                    f"but the log ends at seq {last}"
                )
            conn.execute("DELETE FROM checkpoint_messages WHERE session_id = ?", (session_id,))
            conn.executemany(
                "INSERT INTO checkpoint_messages (session_id, pos, body) VALUES (?,?,?)",
                [(session_id, pos, body) for pos, body in enumerate(bodies)],
            )
            conn.execute(
                "UPDATE sessions SET checkpoint_seq = ? WHERE id = ?", (covers, session_id)
            )
        return covers

    def delete(self, session_id: str) -> None:
        with self._write(f"delete session {session_id!r}") as conn:
            for table in ("messages", "checkpoint_messages", "tool_calls"):
                conn.execute(f"DELETE FROM {table} WHERE session_id = ?", (session_id,))
            conn.execute("DELETE FROM sessions WHERE id = ?", (session_id,))

    # -- reads --

    def exists(self, session_id: str) -> bool:
        with self._read(f"look up session {session_id!r}") as conn:
            row = conn.execute("SELECT 1 FROM sessions WHERE id = ?", (session_id,)).fetchone()
            return row is not None

    def load(self, session_id: str) -> StoredSession:
        with self._read(f"load session {session_id!r}", snapshot=True) as conn:
            row = conn.execute(
                "SELECT id, cwd, title, created_at, updated_at, provider, model, mode,"
                " CAST(config AS BLOB), CAST(mcp_servers AS BLOB), CAST(permissions AS BLOB),"
                " checkpoint_seq FROM sessions WHERE id = ?",
                (session_id,),
            ).fetchone()
            if row is None:
                raise SessionNotFound(f"session {session_id!r} not found")
            message_rows = conn.execute(
                "SELECT seq, CAST(body AS BLOB) FROM messages WHERE session_id = ? ORDER BY seq",
                (session_id,),
            ).fetchall()
            checkpoint_rows = conn.execute(
                "SELECT pos, CAST(body AS BLOB) FROM checkpoint_messages WHERE session_id = ?"
                " ORDER BY pos",
                (session_id,),
            ).fetchall()
            tool_rows = conn.execute(
                "SELECT tool_call_id, title, kind, status, CAST(content AS BLOB),"
                " CAST(locations AS BLOB), CAST(raw_input AS BLOB), CAST(raw_output AS BLOB)"
                " FROM tool_calls WHERE session_id = ? ORDER BY rowid",
                (session_id,),
            ).fetchall()
        # Parsing happens outside the lock: it is the slow part, and needs no database.
        return self._build(session_id, row, message_rows, checkpoint_rows, tool_rows)

    def _build(
        self,
        session_id: str,
        row: tuple[Any, ...],
        message_rows: builtins.list[tuple[int, bytes]],
        checkpoint_rows: builtins.list[tuple[int, bytes]],
        tool_rows: builtins.list[tuple[Any, ...]],
    ) -> StoredSession:
        def corrupt(where: str, detail: str) -> CorruptSession:
            text = (
                f"session {session_id!r} cannot be loaded: {where} in {self.path} is not "
                f"readable ({detail}); the row was left as it is"
            )
            log.error("store_corrupt_row", session_id=session_id, where=where, detail=detail)
            return CorruptSession(text, session_id, where)

        def parse_json(blob: bytes | None, where: str) -> Any:
            try:
                return None if blob is None else json.loads(blob)
            except (ValueError, UnicodeDecodeError) as exc:
                raise corrupt(where, str(exc)) from None

        def parse_message(blob: bytes, where: str) -> Message:
            try:
                return message_from_json(blob)
            except MessageFormatError as exc:
                raise corrupt(where, str(exc)) from None

        config = parse_json(row[8], "the session row (config)")
        mcp_servers = parse_json(row[9], "the session row (mcp_servers)")
        permissions = parse_json(row[10], "the session row (permissions)")
        for name, value, kind in (
            ("config", config, dict),
            ("mcp_servers", mcp_servers, builtins.list),
            ("permissions", permissions, dict),
        ):
            if not isinstance(value, kind):
                raise corrupt(f"the session row ({name})", f"not a JSON {kind.__name__}")
        record = SessionRecord(
            id=row[0],
            cwd=row[1],
            title=row[2],
            created_at=row[3],
            updated_at=row[4],
            provider=row[5],
            model=row[6],
            mode=row[7],
            config=config,
            mcp_servers=mcp_servers,
            permissions=permissions,
        )
        checkpoint_seq: int | None = row[11]

        transcript: builtins.list[Message] = []
        after_checkpoint: builtins.list[Message] = []
        last_seq = 0
        for seq, blob in message_rows:
            message = parse_message(blob, f"message row seq {seq}")
            transcript.append(message)
            if checkpoint_seq is not None and seq > checkpoint_seq:
                after_checkpoint.append(message)
            last_seq = seq
        if checkpoint_seq is None:
            history = builtins.list(transcript)
        else:
            history = [
                parse_message(blob, f"checkpoint row pos {pos}") for pos, blob in checkpoint_rows
            ]
            history.extend(after_checkpoint)

        tool_calls: dict[str, ToolCallRecord] = {}
        for tc_id, title, kind, status, content, locations, raw_input, raw_output in tool_rows:
            where = f"tool call row {tc_id!r}"
            content_v = parse_json(content, where + " (content)")
            locations_v = parse_json(locations, where + " (locations)")
            raw_input_v = parse_json(raw_input, where + " (raw_input)")
            if not isinstance(content_v, builtins.list) or not isinstance(
                locations_v, builtins.list
            ):
                raise corrupt(where, "content and locations must be JSON lists")
            if not isinstance(raw_input_v, dict):
                raise corrupt(where, "raw_input must be a JSON object")
            if status not in _STATUSES:
                raise corrupt(where, f"unknown status {status!r}")
            tool_calls[tc_id] = ToolCallRecord(
                session_id=session_id,
                tool_call_id=tc_id,
                title=title,
                kind=kind if kind in _KINDS else "other",  # a kind a newer defect knows
                status=status,
                content=content_v,
                locations=locations_v,
                raw_input=raw_input_v,
                raw_output=parse_json(raw_output, where + " (raw_output)"),
            )
        return StoredSession(
            record=record,
            history=history,
            transcript=transcript,
            tool_calls=tool_calls,
            last_seq=last_seq,
        )

    def list(
        self, cwd: str | None = None, cursor: str | None = None, limit: int = 50
    ) -> SessionPage:
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        limit = min(limit, MAX_PAGE_SIZE)
        clauses: builtins.list[str] = []
        params: builtins.list[Any] = []
        if cwd is not None:
            clauses.append("cwd = ?")
            params.append(cwd)
        if cursor is not None:
            after_updated, after_id = _decode_cursor(cursor)
            clauses.append("(updated_at, id) < (?, ?)")
            params.extend((after_updated, after_id))
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        with self._read("list sessions") as conn:
            rows = conn.execute(
                f"SELECT id, cwd, title, updated_at FROM sessions {where}"
                " ORDER BY updated_at DESC, id DESC LIMIT ?",
                (*params, limit + 1),
            ).fetchall()
        page = [SessionSummary(id=r[0], cwd=r[1], title=r[2], updated_at=r[3]) for r in rows]
        next_cursor = None
        if len(page) > limit:
            page = page[:limit]
            next_cursor = _encode_cursor(page[-1].updated_at, page[-1].id)
        return SessionPage(sessions=tuple(page), next_cursor=next_cursor)

    def latest_for_cwd(self, cwd: str) -> str | None:
        with self._read("find the latest session") as conn:
            row = conn.execute(
                "SELECT id FROM sessions WHERE cwd = ? ORDER BY updated_at DESC, id DESC LIMIT 1",
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
            return _iso(_dt.datetime.fromisoformat(previous) + _dt.timedelta(milliseconds=1))
    except ValueError:
        pass  # an unreadable previous stamp: the clock's word stands
    return now


def _dumps(value: Any, name: str) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise StorageError(f"cannot store {name}: not JSON ({exc})") from None


def _message_json(message: Message) -> str:
    try:
        return message_to_json(message)
    except Exception as exc:  # pydantic's serialisation errors have no common public base
        raise StorageError(f"cannot store a {message.role} message: not JSON ({exc})") from None


def _encode_cursor(updated_at: str, session_id: str) -> str:
    raw = json.dumps([updated_at, session_id], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_cursor(cursor: str) -> tuple[str, str]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        updated_at, session_id = json.loads(raw)
        if isinstance(updated_at, str) and isinstance(session_id, str):
            return updated_at, session_id
    except (ValueError, TypeError, binascii.Error):
        pass
    raise InvalidCursor(f"invalid session list cursor {cursor!r}")


# --- async door -----------------------------------------------------------------------------


class AsyncStore:
    """A `SessionStore` for the event loop: every call runs on one dedicated worker thread.

    One thread keeps writes in the order they were awaited (the call is handed to the worker
    before the caller first yields) and keeps the disk off the loop. Each await is shielded:
    a cancelled caller waits until its write is done, then sees the cancellation, so a
    submitted append always lands whole. Requires the asyncio backend (the ACP SDK's loop).
    """

    def __init__(self, store: SessionStore) -> None:
        self.store = store
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="defect-store"
        )
        self._closed = False

    async def _call(self, fn: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        if self._closed:
            raise StorageError("the session store is closed")
        future = self._executor.submit(fn, *args, **kwargs)  # submitted now, in call order
        with anyio.CancelScope(shield=True):
            # asyncio.shield: even a native task.cancel() cannot cancel the job itself
            # (wrap_future would otherwise propagate the cancel to a job still queued).
            result = await asyncio.shield(asyncio.wrap_future(future))
        return result

    async def create(self, record: SessionRecord) -> None:
        await self._call(self.store.create, record)

    async def update(self, session_id: str, **fields: Any) -> None:
        await self._call(self.store.update, session_id, **fields)

    async def append_message(self, session_id: str, message: Message) -> int:
        return await self._call(self.store.append_message, session_id, message)

    async def upsert_tool_call(self, record: ToolCallRecord) -> None:
        await self._call(self.store.upsert_tool_call, record)

    async def checkpoint(
        self, session_id: str, history: builtins.list[Message], covers_seq: int | None = None
    ) -> int:
        # A copy: the caller's list may change while the worker is still writing this one.
        snapshot = builtins.list(history)
        return await self._call(self.store.checkpoint, session_id, snapshot, covers_seq)

    async def load(self, session_id: str) -> StoredSession:
        return await self._call(self.store.load, session_id)

    async def exists(self, session_id: str) -> bool:
        return await self._call(self.store.exists, session_id)

    async def list(
        self, cwd: str | None = None, cursor: str | None = None, limit: int = 50
    ) -> SessionPage:
        return await self._call(self.store.list, cwd, cursor, limit)

    async def delete(self, session_id: str) -> None:
        await self._call(self.store.delete, session_id)

    async def latest_for_cwd(self, cwd: str) -> str | None:
        return await self._call(self.store.latest_for_cwd, cwd)

    async def aclose(self) -> None:
        """Finish every submitted call, close the store and stop the worker. Idempotent."""
        if self._closed:
            return
        try:
            await self._call(self.store.close)
        finally:
            self._closed = True
            self._executor.shutdown(wait=False)

    async def __aenter__(self) -> AsyncStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
