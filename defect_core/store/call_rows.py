"""`ToolCallRows`: tool-call records read back from the store on demand, by id or all.

Owns `tool_calls` (the records of some of a session's calls, or of all) and the query it
shares with `SqliteStore.load` (`TOOL_ROWS`). Writing a record is `SqliteStore.upsert_tool_call`;
turning a row into its record is `rows.tool_call_from_row`'s.

Invariants: a read returns the calls as stored, in stored order, in one consistent read; a
corrupt row is `CorruptSession` naming it, and changes nothing on disk.

Why apart from `sqlite.py`: a loaded session keeps no record of its past calls in memory
(a long session has tens of thousands, most of the memory a load would hold,
`defect_core/session/call_records.py`); it reads the few it needs from here when it needs them.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from typing import Any, Final

from defect_core.store import rows
from defect_core.store.records import ToolCallRecord
from defect_core.store.transactions import Transactions

TOOL_ROWS: Final = (
    "SELECT tool_call_id, title, kind, status, CAST(content AS BLOB), CAST(locations AS BLOB),"
    " CAST(raw_input AS BLOB), CAST(raw_output AS BLOB) FROM tool_calls WHERE session_id = ?"
)
"""A session's tool-call rows as `rows.tool_call_from_row` reads them."""


def tool_rows(
    conn: sqlite3.Connection, session_id: str, ids: Sequence[str] | None
) -> Iterable[tuple[Any, ...]]:
    """The session's tool-call rows, as read: every one (None) or those of `ids` (at most
    `rows.LOOKUP_BATCH`), in stored order."""
    if ids is None:
        return conn.execute(f"{TOOL_ROWS} ORDER BY rowid", (session_id,))
    marks = ",".join("?" * len(ids))
    query = f"{TOOL_ROWS} AND tool_call_id IN ({marks}) ORDER BY rowid"
    return conn.execute(query, (session_id, *ids))


class ToolCallRows(Transactions):
    """The tool-call reads of a `SqliteStore` (its base class)."""

    def tool_calls(
        self, session_id: str, ids: Iterable[str] | None = None
    ) -> dict[str, ToolCallRecord]:
        """The stored records of the session's calls `ids` (those stored: an id without a
        row is left out), or of every call, in stored order, for None."""
        wanted = None if ids is None else list(dict.fromkeys(ids))
        batches = [None] if wanted is None else _batches(wanted)
        records: dict[str, ToolCallRecord] = {}
        what = f"read the tool calls of session {session_id!r}"
        with self._read(what, snapshot=True) as conn:
            for batch in batches:
                for row in tool_rows(conn, session_id, batch):  # parsed as read: no rows held
                    record = rows.tool_call_from_row(self.path, session_id, row)
                    records[record.tool_call_id] = record
        return records


def _batches(ids: list[str]) -> list[Sequence[str] | None]:
    return [ids[n : n + rows.LOOKUP_BATCH] for n in range(0, len(ids), rows.LOOKUP_BATCH)]
