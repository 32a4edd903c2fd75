"""A fork in the store: the shared branch stays shared, what a replay and `/rewind` read of it
is the fork's own copy (`defect_core/store/tree.py`), made in the fork's one transaction.

Real SQLite files; the end-to-end half (through `defect acp`) is `tests/test_fork.py`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from defect_core.model import assistant, user
from defect_core.store import (
    FileCheckpointRecord,
    SessionRecord,
    SqliteStore,
    SubagentRecord,
    ToolCallRecord,
)

PLAN = [{"content": "read cli.py", "priority": "high", "status": "in_progress"}]


def record(session_id: str, cwd: str = "/home/ana/shop") -> SessionRecord:
    return SessionRecord(id=session_id, cwd=cwd, provider="anthropic", model="m", mode="ask")


def checkpoint(turn_id: str, meta: dict[str, Any]) -> FileCheckpointRecord:
    return FileCheckpointRecord(
        session_id="origin",
        turn_id=turn_id,
        created_at=1.0,
        finished=True,
        body={"turn_id": turn_id, "entries": [], "meta": meta},
    )


def origin_store(tmp_path: Path) -> SqliteStore:
    """`origin`: two prompts (seq 1 and 3), a tool call, a subagent, a plan, the file
    checkpoint of each prompt and one of a `/rewind`."""
    store = SqliteStore(tmp_path / "sessions.sqlite3")
    store.create(record("origin"))
    for message in (user("p1"), assistant("a1"), user("p2"), assistant("a2")):
        store.append_message("origin", message)
    store.upsert_tool_call(
        ToolCallRecord(
            session_id="origin",
            tool_call_id="toolu_1",
            title="Edit a",
            kind="edit",
            status="completed",
        )
    )
    store.save_subagent(
        SubagentRecord(session_id="origin", tool_call_id="toolu_s", agent="general", task="look")
    )
    store.append_subagent_message("origin", "toolu_s", user("look"))
    store.save_plan("origin", PLAN)
    store.save_file_checkpoint(checkpoint("t1", {"prompt": ["origin", 1]}))
    store.save_file_checkpoint(checkpoint("t3", {"prompt": ["origin", 3]}))
    store.save_file_checkpoint(checkpoint("undo", {"rewind": True}))
    return store


def turn_ids(store: SqliteStore, session_id: str) -> set[str]:
    return {r.turn_id for r in store.file_checkpoints(session_id)}


def test_a_fork_gets_its_own_copy_of_what_its_branch_replays_and_rewinds(tmp_path: Path) -> None:
    with origin_store(tmp_path) as store:
        store.fork("origin", record("whole"))
        store.fork("origin", record("early"), keep=2)
        store.fork("origin", record("elsewhere", cwd="/home/ana/blog"))

        whole = store.load("whole")
        assert whole.transcript == store.load("origin").transcript
        assert whole.tool_calls["toolu_1"].kind == "edit"
        (run,) = store.subagents("whole")
        assert (run.agent, run.task, run.messages) == ("general", "look", (user("look"),))
        assert store.plan("whole") == PLAN
        assert turn_ids(store, "whole") == {"t1", "t3"}  # not the origin's own rewind

        assert store.load("early").transcript == [user("p1"), assistant("a1")]
        assert turn_ids(store, "early") == {"t1"}  # only the prompts it shares
        assert store.plan("early") == []  # the plan is the latest: not the one of prompt 1
        assert turn_ids(store, "elsewhere") == set()  # its files are not these files

        # Independent from now on: each writes its own rows.
        store.upsert_tool_call(
            ToolCallRecord(
                session_id="whole",
                tool_call_id="toolu_1",
                title="Edit a",
                kind="edit",
                status="failed",
            )
        )
        assert store.load("origin").tool_calls["toolu_1"].status == "completed"
        store.delete("origin")
        assert store.load("whole").tool_calls["toolu_1"].status == "failed"
        assert store.plan("whole") == PLAN and turn_ids(store, "whole") == {"t1", "t3"}
        assert [r.tool_call_id for r in store.subagents("whole")] == ["toolu_s"]
