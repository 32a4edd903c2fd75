"""Reading a session's branch (`defect_core/store/tree.py`, `read_branch`): a session never
forked nor rewound is read by its seq index, any other shape by walking the tree from its
head; both give the branch the recursive walk gives, and a corrupt row is named the same."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from defect_core.model import Message, TextBlock, message_from_json
from defect_core.store import CorruptSession, SessionRecord, SqliteStore, tree


def _message(n: int) -> Message:
    return Message(role="user" if n % 2 else "assistant", content=(TextBlock(text=f"m{n}"),))


def _record(sid: str) -> SessionRecord:
    return SessionRecord(id=sid, cwd="/w", provider="scripted", model="offline", mode="ask")


def _session(store: SqliteStore, sid: str, count: int, first: int = 0) -> None:
    store.create(_record(sid))
    _append(store, sid, count, first)


def _append(store: SqliteStore, sid: str, count: int, first: int) -> None:
    for n in range(first, first + count):
        store.append_message(sid, _message(n))


def _walked(db: Path, sid: str) -> list[Message]:
    """The branch as the recursive walk from the head reads it."""
    with sqlite3.connect(db) as conn:
        head = tree.head_of(conn, sid).head
        return [message_from_json(row[3]) for row in tree.branch(conn, head)]


def _texts(messages: list[Message]) -> list[str]:
    return [m.text() for m in messages]


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "state" / "sessions.sqlite3"


def test_every_shape_of_branch_loads_as_the_walk_reads_it(db: Path) -> None:
    with SqliteStore(db) as store:
        _session(store, "plain", 7)
        _session(store, "rewound", 6)
        store.rewind("rewound", 3)
        _session(store, "rewound_on", 6, 100)
        store.rewind("rewound_on", 2)
        _append(store, "rewound_on", 3, 200)
        _session(store, "undone", 5, 300)
        store.rewind("undone", 1)
        store.rewind("undone", None)
        store.fork("plain", _record("fork"), keep=4)
        _append(store, "fork", 2, 400)
        store.fork("fork", _record("fork2"))
        _append(store, "fork2", 1, 500)
        _session(store, "empty", 0)
        loaded = {
            sid: store.load(sid)
            for sid in ("plain", "rewound", "rewound_on", "undone", "fork", "fork2", "empty")
        }
    for sid, stored in loaded.items():
        assert _texts(stored.transcript) == _texts(_walked(db, sid)), sid
        assert stored.history == stored.transcript
    assert _texts(loaded["plain"].transcript) == [f"m{n}" for n in range(7)]
    assert _texts(loaded["rewound"].transcript) == ["m0", "m1", "m2"]
    assert _texts(loaded["rewound_on"].transcript) == ["m100", "m101", "m200", "m201", "m202"]
    assert _texts(loaded["undone"].transcript) == [f"m{n}" for n in range(300, 305)]
    assert _texts(loaded["fork2"].transcript) == ["m0", "m1", "m2", "m3", "m400", "m401", "m500"]
    assert loaded["fork2"].ids[:4] == [("plain", n) for n in range(1, 5)]
    assert loaded["empty"].transcript == [] and loaded["empty"].last_seq == 0


def test_only_a_chain_of_the_sessions_own_messages_is_read_by_seq(db: Path) -> None:
    with SqliteStore(db) as store:
        _session(store, "plain", 4)
        _session(store, "rewound", 4)
        store.rewind("rewound", 2)
        _append(store, "rewound", 1, 10)
        store.fork("plain", _record("fork"))
        _append(store, "fork", 1, 20)
    with sqlite3.connect(db) as conn:
        shapes = {}
        for sid in ("plain", "rewound", "fork"):
            nodes, rows = tree.read_branch(conn, sid, tree.head_of(conn, sid).head)
            shapes[sid] = isinstance(rows, sqlite3.Cursor)
            assert nodes == [row[0] for row in rows]
    assert shapes == {"plain": True, "rewound": False, "fork": False}


@pytest.mark.parametrize("sid", ["plain", "fork"])
def test_a_corrupt_row_is_named_on_either_path(db: Path, sid: str) -> None:
    with SqliteStore(db) as store:
        _session(store, "plain", 4)
        store.fork("plain", _record("fork"))
        _append(store, "fork", 2, 10)
    with sqlite3.connect(db) as raw:
        raw.execute("UPDATE messages SET body = 'garbage' WHERE session_id = ? AND seq = 2", (sid,))
    with SqliteStore(db) as store, pytest.raises(CorruptSession) as info:
        store.load(sid)
    assert info.value.where == "message row seq 2"
    assert "is not readable" in str(info.value) and sid in str(info.value)
