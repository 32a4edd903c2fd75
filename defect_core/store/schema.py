"""The SQL of the session database, frozen version by version.

Owns `APPLICATION_ID` (the mark of a defect session database), the SQL each shipped migration
runs (`V1`, …) and `SESSION_TABLES`, the tables whose rows belong to one session.

Invariant: a shipped SQL text is never edited. Databases in the field were built by it, and a
database at version n must mean the same thing whichever defect wrote it; a change of schema
is a new text here plus a new entry in `migrations.MIGRATIONS` (how: the docstring of
`defect_core/store/migrations.py`). `tests/test_store_migrations.py` holds a copy of every
version's schema and fails if one drifts.

Why SQL apart from the code that runs it: what the database looks like at each version can be
read in one place, next to nothing else.
"""

from __future__ import annotations

from typing import Final

APPLICATION_ID: Final = 0x44464354  # "DFCT": marks the file as a defect session database

V1: Final = f"""
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
"""Version 1: sessions, the message log, compaction checkpoints, tool calls for replay."""

V2: Final = """
CREATE TABLE file_checkpoints (
    session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    turn_id    TEXT NOT NULL,
    created_at REAL NOT NULL,
    finished   INTEGER NOT NULL,
    body       TEXT NOT NULL,
    PRIMARY KEY (session_id, turn_id)
);
"""
"""Version 2: the file checkpoint of each prompt (`defect_core/checkpoints/model.py`, as JSON;
the file contents are blobs in the state directory, not in the database)."""

V3: Final = """
CREATE TABLE subagents (
    session_id   TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    tool_call_id TEXT NOT NULL,
    agent        TEXT NOT NULL,
    task         TEXT NOT NULL,
    status       TEXT NOT NULL,
    background   INTEGER NOT NULL,
    created_at   TEXT NOT NULL,
    updated_at   TEXT NOT NULL,
    PRIMARY KEY (session_id, tool_call_id)
);
CREATE TABLE subagent_messages (
    session_id   TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    tool_call_id TEXT NOT NULL,
    seq          INTEGER NOT NULL,
    created_at   TEXT NOT NULL,
    body         TEXT NOT NULL,
    PRIMARY KEY (session_id, tool_call_id, seq)
);
"""
"""Version 3: subagents (`defect_core/agents/`): one row per run, keyed by the parent's
`spawn_agent` tool call, and the subagent's own message log, append-only like `messages`."""

V4: Final = """
CREATE TABLE session_plans (
    session_id TEXT PRIMARY KEY REFERENCES sessions (id) ON DELETE CASCADE,
    body       TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
"""
"""Version 4: each session's latest plan (`update_plan`, `defect_core/session/plan.py`): a JSON
list of `{"content", "priority", "status"}`. The plan is whole each time, so the latest is all
a replay needs: one row per session, replaced. No row is no plan."""

V5: Final = """
ALTER TABLE messages ADD COLUMN node INTEGER;
UPDATE messages SET node = rowid;
CREATE UNIQUE INDEX messages_by_node ON messages (node);
ALTER TABLE messages ADD COLUMN parent INTEGER;
UPDATE messages SET parent = (
    SELECT p.node FROM messages AS p
    WHERE p.session_id = messages.session_id AND p.seq = messages.seq - 1
);
ALTER TABLE sessions ADD COLUMN head INTEGER;
UPDATE sessions SET head = (
    SELECT m.node FROM messages AS m WHERE m.session_id = sessions.id ORDER BY m.seq DESC LIMIT 1
);
ALTER TABLE sessions ADD COLUMN undo_head INTEGER;
ALTER TABLE sessions ADD COLUMN checkpoint_at INTEGER;
UPDATE sessions SET checkpoint_at = (
    SELECT m.node FROM messages AS m
    WHERE m.session_id = sessions.id AND m.seq = sessions.checkpoint_seq
);
ALTER TABLE sessions ADD COLUMN fork_of TEXT;
ALTER TABLE sessions ADD COLUMN deleted INTEGER NOT NULL DEFAULT 0
"""
"""Version 5: the history as a tree of turns (`defect_core/store/tree.py`). Every message is
a node (`node`, unique across sessions) with its `parent` (NULL: the root); a session's
current branch ends at `head`; `undo_head` is the head before the last rewind;
`checkpoint_at` is the node compaction's history covers; a fork's first messages are its
origin's (`fork_of`), shared, not copied, and an origin deleted while a fork still needs its
messages is only marked `deleted` until no fork does."""

SESSION_TABLES: Final = (
    "messages",
    "checkpoint_messages",
    "tool_calls",
    "file_checkpoints",
    "subagents",
    "subagent_messages",
    "session_plans",
)
"""Every table keyed by `session_id` (besides `sessions`): `delete` clears each one in its
transaction, not relying on `ON DELETE CASCADE` alone. A migration adding one appends it."""
