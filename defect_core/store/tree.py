"""The history as a tree of turns: branches, heads, rewinds and forks, in SQL.

Owns the queries over the columns migration 5 added (`defect_core/store/schema.py`, V5):
every message row is a node (`messages.node`, unique across sessions) with its `parent` (NULL:
a root), and a session's current branch is the path from its `head` back to a root. Functions
here take the connection inside the caller's transaction (`SqliteStore` opens it).

Invariants:
- Nothing is rewritten or dropped by a rewind: `move_head` only moves `sessions.head` (and
  remembers the previous head in `undo_head`, so the rewind can itself be undone); the
  abandoned branch stays stored, reachable from `undo_head`.
- A fork shares its origin's nodes: its head starts at one of them, and its own messages hang
  below it. What a replay and `/rewind` need besides the messages (tool-call states,
  subagents, the plan, the file checkpoints of the shared prompts) is copied, in the same
  transaction, so the two sessions never write each other's rows. An origin deleted while a
  fork still reaches its nodes is only marked `deleted` (hidden from every read) and removed
  when the last fork that needs it goes.
- A branch is the path from the head to a root, oldest first; a parent always has a smaller
  node number than its child, so the walk ends.

Why nodes instead of per-session seq: forks share rows across sessions, and a branch may
cross from a fork into its origin; `seq` stays each session's own count (the protocol's
`append_message` return value, a message's name within its session).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from defect_core.errors import SessionNotFound

_BRANCH = """
WITH RECURSIVE branch(node, depth) AS (
    SELECT ?, 0 WHERE ? IS NOT NULL
    UNION ALL
    SELECT m.parent, b.depth + 1 FROM messages AS m JOIN branch AS b ON m.node = b.node
    WHERE m.parent IS NOT NULL
)
SELECT m.node, m.session_id, m.seq, CAST(m.body AS BLOB)
FROM branch AS b JOIN messages AS m ON m.node = b.node ORDER BY b.depth DESC
"""


_OWN_CHAIN = """
SELECT node, parent FROM messages WHERE session_id = ? AND node <= ? ORDER BY seq
"""
_OWN_BODIES = """
SELECT node, session_id, seq, CAST(body AS BLOB) FROM messages
WHERE session_id = ? AND node <= ? ORDER BY seq
"""

_OWN_ROWS = """
SELECT node, parent, session_id, seq, CAST(body AS BLOB) FROM messages
WHERE session_id = ? AND node <= ? ORDER BY seq
"""

BranchRow = tuple[int, str, int, bytes]
"""`(node, session_id, seq, body)` of one message of a branch."""


@dataclass(frozen=True, slots=True)
class Head:
    """A session's place in the tree."""

    head: int | None
    undo_head: int | None
    checkpoint_at: int | None
    checkpoint_seq: int | None


def head_of(conn: sqlite3.Connection, session_id: str) -> Head:
    row = conn.execute(
        "SELECT head, undo_head, checkpoint_at, checkpoint_seq FROM sessions"
        " WHERE id = ? AND deleted = 0",
        (session_id,),
    ).fetchone()
    if row is None:
        raise SessionNotFound(f"session {session_id!r} not found")
    return Head(*row)


def branch(conn: sqlite3.Connection, head: int | None) -> list[BranchRow]:
    """`(node, session_id, seq, body)` of every message from the root to `head`."""
    return conn.execute(_BRANCH, (head, head)).fetchall()


def read_branch(
    conn: sqlite3.Connection, session_id: str, head: int | None
) -> tuple[list[int], Iterator[BranchRow]]:
    """The nodes of the session's branch, oldest first, and its rows as they are read.

    The common case - a session never forked nor rewound - is its own messages in seq
    order: that is checked link by link on `(node, parent)` alone (the first is a root, each
    next one's parent is the one before, the last is the head), then the bodies are streamed
    by the seq index, one row at a time, instead of walking the tree in SQL and holding
    every body at once. Any other shape is walked from the head (`branch`)."""
    if head is None:
        return [], iter(())
    links = conn.execute(_OWN_CHAIN, (session_id, head)).fetchall()
    if _is_chain(links, head):
        return [node for node, _ in links], conn.execute(_OWN_BODIES, (session_id, head))
    rows = branch(conn, head)
    return [row[0] for row in rows], iter(rows)


class BrokenChain(ValueError):
    """A session never rewound nor forked whose messages are not one chain (`own_chain`):
    the row at `seq` (None: the last) does not follow the one before it."""

    def __init__(self, seq: int | None) -> None:
        super().__init__(f"message row seq {seq} does not follow the one before it")
        self.seq = seq


def own_chain(
    conn: sqlite3.Connection, session_id: str, place: Head, nodes: list[int]
) -> Iterator[BranchRow] | None:
    """The branch of a session never rewound nor forked, streamed by the seq index with no
    first pass over its links (`read_branch` reads every row twice to check them: on a long
    session, the whole table before the first body). Such a session's messages are one chain
    by construction (`append_node` hangs each below the head), which is checked link by link
    as the rows are read: `BrokenChain` if one does not follow. Each row's node is appended to
    `nodes` as it passes. None for any other session."""
    if place.head is None or place.undo_head is not None:
        return None  # empty, or rewound once (the head's past is then a tree)
    row = conn.execute("SELECT fork_of FROM sessions WHERE id = ?", (session_id,)).fetchone()
    if row is None or row[0] is not None:
        return None
    return _checked(conn.execute(_OWN_ROWS, (session_id, place.head)), place.head, nodes)


def _checked(
    rows: Iterable[tuple[int, int | None, str, int, bytes]], head: int, nodes: list[int]
) -> Iterator[BranchRow]:
    previous: int | None = None
    for node, parent, owner, seq, body in rows:
        if parent != previous:
            raise BrokenChain(seq)
        previous = node
        nodes.append(node)
        yield node, owner, seq, body
    if previous != head:
        raise BrokenChain(None)


def _is_chain(links: list[tuple[int, int | None]], head: int) -> bool:
    if not links or links[0][1] is not None or links[-1][0] != head:
        return False
    return all(links[n][1] == links[n - 1][0] for n in range(1, len(links)))


def append_node(conn: sqlite3.Connection, session_id: str, seq: int, now: str, body: str) -> int:
    """Insert a message below the session's head and make it the head; its node."""
    (head,) = conn.execute("SELECT head FROM sessions WHERE id = ?", (session_id,)).fetchone()
    (last,) = conn.execute("SELECT COALESCE(MAX(node), 0) FROM messages").fetchone()
    node = int(last) + 1
    conn.execute(
        "INSERT INTO messages (session_id, seq, created_at, body, node, parent)"
        " VALUES (?,?,?,?,?,?)",
        (session_id, seq, now, body, node, head),
    )
    conn.execute("UPDATE sessions SET head = ? WHERE id = ?", (node, session_id))
    return node


def node_at(conn: sqlite3.Connection, session_id: str, keep: int) -> int | None:
    """The node that ends the first `keep` messages of the session's branch (None: 0)."""
    if keep < 0:
        raise ValueError(f"cannot keep {keep} messages")
    nodes = [row[0] for row in branch(conn, head_of(conn, session_id).head)]
    if keep > len(nodes):
        raise ValueError(f"the branch has {len(nodes)} messages, not {keep}")
    return nodes[keep - 1] if keep else None


def move_head(conn: sqlite3.Connection, session_id: str, keep: int | None) -> None:
    """Rewind the branch to its first `keep` messages; `keep=None` undoes the last rewind
    (head and `undo_head` swap, so undoing twice redoes)."""
    place = head_of(conn, session_id)
    if keep is None:
        if place.undo_head is None:
            raise ValueError("there is no rewind to undo")
        target = place.undo_head
    else:
        target = node_at(conn, session_id, keep)  # type: ignore[assignment]
    conn.execute(
        "UPDATE sessions SET head = ?, undo_head = ? WHERE id = ?",
        (target, place.head, session_id),
    )


def compaction_cut(nodes: list[int], place: Head) -> int | None:
    """How many branch messages the stored compacted history stands for; None when there is
    none, or it summarises messages that are not on this branch (after a rewind past it)."""
    if place.checkpoint_seq is None:
        return None
    if place.checkpoint_at is None:
        return 0
    try:
        return nodes.index(place.checkpoint_at) + 1
    except ValueError:
        return None


def fork(conn: sqlite3.Connection, origin: str, fork_id: str, keep: int | None) -> None:
    """Point the (just created) session `fork_id` at `origin`'s branch, whole or its first
    `keep` messages, and give it the origin's compacted history where it applies."""
    place = head_of(conn, origin)
    head = place.head if keep is None else node_at(conn, origin, keep)
    conn.execute("UPDATE sessions SET head = ?, fork_of = ? WHERE id = ?", (head, origin, fork_id))
    shared = branch(conn, head)
    _copy_replay_state(conn, origin, fork_id, {(sid, seq) for _, sid, seq, _ in shared}, keep)
    nodes = [row[0] for row in shared]
    if compaction_cut(nodes, place) is None:
        return
    conn.execute(
        "INSERT INTO checkpoint_messages (session_id, pos, body)"
        " SELECT ?, pos, body FROM checkpoint_messages WHERE session_id = ?",
        (fork_id, origin),
    )
    conn.execute(
        "UPDATE sessions SET checkpoint_seq = 0, checkpoint_at = ? WHERE id = ?",
        (place.checkpoint_at, fork_id),
    )


_COPIED: dict[str, str] = {
    "tool_calls": "tool_call_id, title, kind, status, content, locations, raw_input,"
    " raw_output, updated_at",
    "subagents": "tool_call_id, agent, task, status, background, created_at, updated_at",
    "subagent_messages": "tool_call_id, seq, created_at, body",
}
"""The rows a fork gets a copy of: keyed by tool call, so only the calls of its branch are
ever shown (a replay walks the messages), and each session then updates its own."""


def _copy_replay_state(
    conn: sqlite3.Connection,
    origin: str,
    fork_id: str,
    shared: set[tuple[str, int]],
    keep: int | None,
) -> None:
    """Give the fork its own copy of the origin's replay state: tool-call states and
    subagents; the plan when it forks the whole branch (a plan is the latest, not per prompt);
    and, when both work in the same directory, the file checkpoints of the prompts it shares
    (not the origin's rewinds: those undo the origin's own `/rewind`)."""
    for table, columns in _COPIED.items():
        conn.execute(
            f"INSERT INTO {table} (session_id, {columns})"
            f" SELECT ?, {columns} FROM {table} WHERE session_id = ?",
            (fork_id, origin),
        )
    if keep is None:
        conn.execute(
            "INSERT INTO session_plans (session_id, body, updated_at)"
            " SELECT ?, body, updated_at FROM session_plans WHERE session_id = ?",
            (fork_id, origin),
        )
    (places,) = conn.execute(
        "SELECT COUNT(DISTINCT cwd) FROM sessions WHERE id IN (?, ?)", (origin, fork_id)
    ).fetchone()
    if places != 1:
        return
    found = conn.execute(
        "SELECT turn_id, created_at, finished, body FROM file_checkpoints WHERE session_id = ?",
        (origin,),
    ).fetchall()
    for turn_id, created_at, finished, body in found:
        try:
            meta = json.loads(body).get("meta") or {}
            prompt = tuple(meta.get("prompt") or ())
        except (ValueError, AttributeError, TypeError):
            continue  # unreadable: `/rewind` skips it in the origin too
        if prompt in shared and not meta.get("rewind"):
            conn.execute(
                "INSERT INTO file_checkpoints (session_id, turn_id, created_at, finished, body)"
                " VALUES (?,?,?,?,?)",
                (fork_id, turn_id, created_at, finished, body),
            )


def needed_by_forks(conn: sqlite3.Connection, session_id: str) -> bool:
    """Does any other session (live or kept for its own forks) hang below this one?"""
    row = conn.execute("SELECT 1 FROM sessions WHERE fork_of = ? LIMIT 1", (session_id,))
    return row.fetchone() is not None


def collect(conn: sqlite3.Connection, origin: str | None) -> None:
    """After a session went: remove its origin (and theirs) if only marked deleted and no
    longer needed by any fork."""
    while origin is not None:
        row = conn.execute(
            "SELECT deleted, fork_of FROM sessions WHERE id = ?", (origin,)
        ).fetchone()
        if row is None or not row[0] or needed_by_forks(conn, origin):
            return
        conn.execute("DELETE FROM messages WHERE session_id = ?", (origin,))
        conn.execute("DELETE FROM sessions WHERE id = ?", (origin,))
        origin = row[1]
