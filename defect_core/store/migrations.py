"""Numbered schema migrations and the runner that brings a database up to date when it opens.

Owns `Migration` (version, name, step), `MIGRATIONS` (every migration defect has shipped, in
order), `SCHEMA_VERSION` (the newest), and the two checks run on open: `check_version` (is this
a defect database, and not from a newer defect?) and `migrate` (apply what is missing).

Invariants:
- `PRAGMA user_version` is the version of the last migration applied (0: none, a new file).
  Versions run 1, 2, 3, … with no gap; `numbered` refuses any other list.
- Each migration runs in its own `BEGIN IMMEDIATE` transaction together with the
  `user_version` that records it: a kill, a crash or a failing step leaves the database at the
  previous version, whole, and the next open retries. The version is re-read under the write
  lock, so two processes opening an old database at once apply each migration exactly once.
- A database at any earlier version upgrades to `SCHEMA_VERSION` on open, one step at a time.
  A database from a newer defect (`user_version` above what this code knows) is refused with
  an error saying so, before anything is written: it is never "downgraded".
- A file whose `application_id` is neither 0 (new) nor `schema.APPLICATION_ID` is refused.

How to add a migration (the next features add tables: plans, subagent transcripts, background
tasks, checkpoints, history as a tree of turns):
1. Write the change. Plain DDL goes into `schema.py` as a new frozen text (`V2 = "CREATE TABLE
   plans (...)"`: statements separated by `;`, with no `;` inside a literal or a trigger body).
   A change that moves data is a function `(conn: sqlite3.Connection) -> None` here. Either
   runs inside the migration's transaction: never `COMMIT`, never `executescript` (it commits
   first), no `VACUUM` nor `PRAGMA journal_mode` (not allowed in a transaction).
   `foreign_keys` is ON while migrating: dropping a table others reference cascades deletes, so
   prefer `ALTER TABLE ... ADD COLUMN` and new tables over rebuilding `sessions`.
2. A table keyed by session: `session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE
   CASCADE`, and append its name to `schema.SESSION_TABLES` so `delete` clears it.
3. Append `Migration(2, "plans", schema.V2)` to `MIGRATIONS`. Never edit, reorder or remove a
   shipped one (a database in the field was built by it); fix a mistake with a new migration.
4. Test it in `tests/test_store_migrations.py`: a test marked `@upgrades_to(2)` builds a
   database at version 1 (`database_at(path, 1)`), writes realistic rows into it, opens it with
   `SqliteStore`, and checks that the rows survive and the new feature works. Also add the new
   version's frozen schema there. `test_every_migration_has_an_upgrade_test` fails until then.
5. Add the table to the Storage section of docs/architecture.md.

Why numbered entries rather than a bare list: the version a step produces is written beside
it, so a reader (and `numbered`) sees at once which database each one upgrades, and a log or
error names the migration that ran or failed.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from defect_core.errors import StorageError
from defect_core.log import get_logger
from defect_core.store import schema
from defect_core.store.faults import storage_error
from defect_core.store.records import stored_mcp_server

log = get_logger("defect.store")

MigrationStep = str | Callable[[sqlite3.Connection], None]
"""SQL statements separated by `;`, or a function given the connection inside the transaction."""


@dataclass(frozen=True, slots=True)
class Migration:
    """One schema change: it takes a database from `version - 1` to `version`."""

    version: int
    name: str
    """What it does, in a few words (for logs and errors)."""
    step: MigrationStep = field(repr=False)

    def apply(self, conn: sqlite3.Connection) -> None:
        """Run the step on `conn`, inside the caller's transaction."""
        if callable(self.step):
            self.step(conn)
            return
        for statement in self.step.split(";"):
            if statement.strip():
                conn.execute(statement)


def scrub_mcp_servers(conn: sqlite3.Connection) -> None:
    """Migration 6: rewrite every session's `mcp_servers` as `records.stored_mcp_server`
    keeps a server. Earlier versions kept a stdio server's arguments and an HTTP server's URL
    as given, so a token passed as `--token=…` or in a `?token=` query was on disk. A value
    that is not a JSON list of objects (hand-edited, damaged) is replaced by `[]`: it could
    hold anything, and nothing reads it back to restart a server."""
    found = conn.execute("SELECT id, CAST(mcp_servers AS TEXT) FROM sessions").fetchall()
    for session_id, raw in found:
        try:
            servers = json.loads(raw)
        except (TypeError, ValueError):
            servers = []
        if not isinstance(servers, list):
            servers = []
        kept = [stored_mcp_server(s) for s in servers if isinstance(s, dict)]
        text = json.dumps(kept, ensure_ascii=False, separators=(",", ":"))
        if text != raw:
            conn.execute("UPDATE sessions SET mcp_servers = ? WHERE id = ?", (text, session_id))


MIGRATIONS: Final[tuple[Migration, ...]] = (
    Migration(1, "sessions, messages, checkpoints, tool calls", schema.V1),
    Migration(2, "file checkpoints", schema.V2),
    Migration(3, "subagent runs and transcripts", schema.V3),
    Migration(4, "session plans", schema.V4),
    Migration(5, "history as a tree of turns", schema.V5),
    Migration(6, "MCP server secrets scrubbed", scrub_mcp_servers),
)
"""Every migration defect has shipped, oldest first. Append only (see the module docstring)."""

SCHEMA_VERSION: Final = len(MIGRATIONS)


def numbered(migrations: Sequence[Migration]) -> tuple[Migration, ...]:
    """`migrations` as a tuple, once checked to be numbered 1, 2, 3, … in order."""
    checked = tuple(migrations)
    for position, migration in enumerate(checked, start=1):
        if not isinstance(migration, Migration):
            raise TypeError(f"migration {position} is not a Migration: {migration!r}")
        if migration.version != position:
            raise ValueError(
                f"migration {migration.name!r} is numbered {migration.version} but stands at "
                f"position {position}; versions run 1, 2, 3, … in order with no gap"
            )
    return checked


def check_version(conn: sqlite3.Connection, path: Path, known: int) -> int:
    """The database's schema version; `StorageError` if it is not a defect database or was
    written by a defect that knows more than `known` migrations."""
    app_id = conn.execute("PRAGMA application_id").fetchone()[0]
    version = int(conn.execute("PRAGMA user_version").fetchone()[0])
    if app_id not in (0, schema.APPLICATION_ID):
        raise StorageError(
            f"{path} is not a defect session database (application id {app_id:#x}); "
            "move it aside or set DEFECT_STATE_DIR"
        )
    if version > known:
        raise StorageError(
            f"the session database {path} was written by a newer defect "
            f"(schema {version} > {known}); upgrade defect or set DEFECT_STATE_DIR"
        )
    return version


def migrate(
    conn: sqlite3.Connection, path: Path, migrations: tuple[Migration, ...], busy_timeout: float
) -> None:
    """Apply every migration the database lacks, each in its own transaction.

    `conn` must be in autocommit mode (`isolation_level=None`) with no transaction open.
    """
    target = len(migrations)
    while True:
        conn.execute("BEGIN IMMEDIATE")
        try:
            # Re-read under the write lock: another process may have migrated meanwhile.
            version = check_version(conn, path, target)
            if version >= target:
                conn.execute("COMMIT")
                return
            migration = migrations[version]
            try:
                migration.apply(conn)
            except sqlite3.Error as exc:
                what = f"upgrade the session database to schema {migration.version}"
                raise storage_error(exc, f"{what} ({migration.name})", path, busy_timeout) from exc
            conn.execute(f"PRAGMA user_version = {migration.version}")
            conn.execute("COMMIT")
            log.info(
                "store_migrated", path=str(path), version=migration.version, name=migration.name
            )
        except BaseException:
            if conn.in_transaction:
                conn.rollback()
            raise
