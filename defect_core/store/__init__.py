"""Session persistence: the `SessionStore` protocol, its SQLite implementation and an async door.

Owns what survives a restart: each session's settings (cwd, title, provider/model, mode,
config options, MCP servers, remembered permissions), its message log, what compaction wrote
back, and the tool calls a replay shows. `SqliteStore` keeps all of it in one database,
`sessions.sqlite3` under `default_state_dir()`; `AsyncStore` runs a store on one dedicated
worker thread so the event loop never waits on the disk, and commits the writes queued behind
each other in one transaction (group commit).

One room per job, in four layers, lowest first (docs/layers.md, "Inside the store package"):

- `records.py`     the values kept and returned (`SessionRecord`, `ToolCallRecord`,
                   `StoredSession`), the store's own errors, display and location JSON
- `schema.py`      the SQL of each schema version, frozen once shipped
- `paths.py`       where the database lives (`$DEFECT_STATE_DIR`, XDG, `~/.local/state`)
- `faults.py`      every sqlite error as a `StorageError` that says what and why
- `protocol.py`    `SessionStore`: the contract and its invariants; `UNSET`
- `rows.py`        rows ⇄ records: column JSON, list cursors, parsing a loaded session
- `migrations.py`  numbered migrations (`PRAGMA user_version`) and how to add one
- `tree.py`        the history as a tree of turns: heads, branches, forks
- `transactions.py` the connection's lock, write and read transactions, groups of writes
- `calls.py`       tool-call records read on demand, by id (a loaded session keeps none)
- `writer.py`      `GroupWriter`: the one worker thread; writes queued together, one commit
- `sqlite.py`      `SqliteStore`: connection, settings, durability, every query
- `door.py`        `AsyncStore`: the event loop's door, reads and writes, shielded calls

Invariants (kept by the modules above, stated here once): the message log is append-only and
each append is durable when it returns; `load` returns the live `history` (compaction's last
write-back + later messages) and the full `transcript`; rows are stored as-is, never repaired;
every fault is a per-call `StorageError` that destroys nothing; a database from a newer defect
is refused. Callers import from `defect_core.store`, never from its modules, so the rooms may
move without touching them.
"""

from defect_core.store.door import AsyncStore
from defect_core.store.migrations import MIGRATIONS, SCHEMA_VERSION, Migration, MigrationStep
from defect_core.store.paths import DB_FILENAME, default_state_dir, default_store_path
from defect_core.store.protocol import UNSET, SessionStore
from defect_core.store.records import (
    BranchPart,
    CorruptSession,
    FileCheckpointRecord,
    InvalidCursor,
    SessionRecord,
    StoredSession,
    SubagentRecord,
    ToolCallRecord,
    location_from_json,
    location_to_json,
    now_iso,
    stored_mcp_server,
    tool_display_from_json,
    tool_display_to_json,
)
from defect_core.store.schema import APPLICATION_ID
from defect_core.store.sqlite import (
    DEFAULT_BUSY_TIMEOUT,
    DEFAULT_SYNCHRONOUS,
    MAX_PAGE_SIZE,
    SYNC_ENV,
    SqliteStore,
)

__all__ = [
    "APPLICATION_ID",
    "DB_FILENAME",
    "DEFAULT_BUSY_TIMEOUT",
    "DEFAULT_SYNCHRONOUS",
    "MAX_PAGE_SIZE",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "SYNC_ENV",
    "UNSET",
    "AsyncStore",
    "BranchPart",
    "CorruptSession",
    "FileCheckpointRecord",
    "InvalidCursor",
    "Migration",
    "MigrationStep",
    "SessionRecord",
    "SessionStore",
    "SqliteStore",
    "StoredSession",
    "SubagentRecord",
    "ToolCallRecord",
    "default_state_dir",
    "default_store_path",
    "location_from_json",
    "location_to_json",
    "now_iso",
    "stored_mcp_server",
    "tool_display_from_json",
    "tool_display_to_json",
]
