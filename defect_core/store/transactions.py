"""`Transactions`: how `SqliteStore` talks to its one connection — one lock, whole transactions.

Owns the connection's lock and the three shapes a call to the database takes: a write
transaction (`_write`), a read, alone or in one consistent snapshot (`_read`), and a group of
writes committed as one transaction (`group`), which is what lets the store's writer thread
(`writer.py`) make N queued appends cost one commit — one fsync — instead of N.

Invariants:
- A write outside a group is one `BEGIN IMMEDIATE` transaction, committed whole or rolled back
  whole. Inside `group()` it is a savepoint of the group's transaction: a write that raises is
  rolled back to its savepoint and fails alone; the writes before and after it stand and are
  committed together.
- A group never commits a part: if SQLite rolls the whole transaction back under one of its
  writes (a full disk, an I/O error: SQLite may do so for those) or a savepoint cannot be
  rolled back, the group is marked lost, every later write in it refuses to run (it would
  otherwise start a transaction of its own) and `group()` raises without committing.
- Every sqlite error leaves as a `StorageError` (`faults.storage_error`).
- One lock (re-entrant, for the writes inside a group) serialises every call, so a store may
  be built on one thread and used on another, and a read never sees a group half-done.

Why apart from `sqlite.py`: the SQL of each call and the transaction it runs in change for
different reasons; the savepoint rules of a group are subtle enough to be read on their own.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from defect_core.errors import StorageError
from defect_core.store.faults import GroupLost, storage_error


class Transactions:
    """The lock, the connection and the transactions of a `SqliteStore` (its base class)."""

    path: Path
    busy_timeout: float
    _conn: sqlite3.Connection | None

    def __init__(self) -> None:
        self._lock = threading.RLock()  # re-entered by the writes inside `group()`
        self._group: _Group | None = None

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise StorageError(f"the session store {self.path} is closed")
        return self._conn

    def _error(self, exc: sqlite3.Error, what: str) -> StorageError:
        return storage_error(exc, what, self.path, self.busy_timeout)

    @contextmanager
    def _write(self, what: str) -> Iterator[sqlite3.Connection]:
        """One short write transaction, committed on success and rolled back whole on failure;
        inside `group()`, a savepoint of the group's transaction, rolled back alone."""
        with self._lock:
            conn = self._connection()
            if self._group is not None:
                with _SavepointScope(self, conn, self._group, what):
                    yield conn
                return
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
    def group(self) -> Iterator[None]:
        """Run the writes made inside (on this thread) as ONE transaction, committed once.

        Each write is a savepoint: one that raises is rolled back alone, the others stand.
        `StorageError` if the group could not begin or commit, or was lost (see the module
        docstring): then nothing of it was written. Groups do not nest.
        """
        with self._lock:
            conn = self._connection()
            if self._group is not None:
                raise RuntimeError("a group of writes is already open")
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise self._error(exc, "begin a group of writes") from exc
            group = self._group = _Group()
            try:
                yield
                if group.lost is not None:
                    raise GroupLost(str(group.lost)) from group.lost
                conn.execute("COMMIT")
            except BaseException as exc:
                if conn.in_transaction:
                    conn.rollback()
                if isinstance(exc, sqlite3.Error):
                    raise self._error(exc, group.describe()) from exc
                raise
            finally:
                self._group = None

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


class _Group:
    """An open `group()`: `lost` says why its transaction is gone, once it is; `whats`, what
    its writes do (a failed commit names them: each caller reads what it asked for)."""

    __slots__ = ("lost", "whats")

    def __init__(self) -> None:
        self.lost: StorageError | None = None
        self.whats: list[str] = []

    def describe(self) -> str:
        if not self.whats:
            return "commit a group of writes"
        if len(self.whats) == 1:
            return self.whats[0]
        shown = "; ".join(self.whats[:4]) + ("; …" if len(self.whats) > 4 else "")
        return f"commit {len(self.whats)} writes at once ({shown})"


class _SavepointScope:
    """One write inside a group: `SAVEPOINT` on entry, `RELEASE` on success, `ROLLBACK TO` on
    failure; marks the group lost when its transaction is gone or cannot be trusted."""

    def __init__(
        self, owner: Transactions, conn: sqlite3.Connection, group: _Group, what: str
    ) -> None:
        self._owner, self._conn, self._group, self._what = owner, conn, group, what

    def __enter__(self) -> None:
        self._group.whats.append(self._what)
        if self._group.lost is not None or not self._conn.in_transaction:
            # A SAVEPOINT outside a transaction would start (and RELEASE commit) one of its own.
            raise StorageError(f"cannot {self._what}: its group of writes was rolled back")
        try:
            self._conn.execute("SAVEPOINT write")
        except sqlite3.Error as exc:
            raise self._lose(exc) from exc

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, _: object
    ) -> None:
        if exc is None:
            try:
                self._conn.execute("RELEASE write")
            except sqlite3.Error as release_failed:
                raise self._lose(release_failed) from release_failed
            return
        try:
            if not self._conn.in_transaction:  # SQLite rolled the whole group back under it
                raise self._lose(exc if isinstance(exc, sqlite3.Error) else None) from exc
            self._conn.execute("ROLLBACK TO write")
            self._conn.execute("RELEASE write")
        except sqlite3.Error as undo_failed:
            raise self._lose(undo_failed) from exc
        if isinstance(exc, sqlite3.Error):
            raise self._owner._error(exc, self._what) from exc
        # else the write's own error goes on to its caller

    def _lose(self, exc: BaseException | None) -> StorageError:
        """The group's transaction is gone or in doubt: nothing of it may be committed."""
        if isinstance(exc, sqlite3.Error):
            error = self._owner._error(exc, self._what)
        else:
            error = StorageError(f"cannot {self._what}: SQLite rolled its group of writes back")
        if self._group.lost is None:
            self._group.lost = error
        return error
