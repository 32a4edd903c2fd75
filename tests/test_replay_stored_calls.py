"""A replayed tool call's card written straight from its stored record
(`ReplayLines.stored_call` → `cards.stored`, through `ToolCallSnapshots.record`) is the line the
models give for the same call (its `ToolCallSnapshot` → `replayed_call` → the schema's model,
`tests/support/replay_models.py` → `update_line`), byte for byte, for every kind of display
and status a store holds; a record holding what its snapshot would skip or refuse goes the
snapshot's way and ends the same."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from defect_acp import replay_walk
from defect_acp.replay_lines import ReplayLines
from defect_acp.replayed import ReplayedCall
from defect_core.integrity.rules import INTERRUPTED_RESULT_TEXT
from defect_core.model import (
    JsonPart,
    Message,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from defect_core.session.persistence import ToolCallSnapshots
from defect_core.store import BranchPart, SessionRecord, SqliteStore, ToolCallRecord
from tests.support.replay_models import model_lines

SID = "sess_stored_é"


class CountedLines(ReplayLines):
    """`ReplayLines` noting each call whose card needed its snapshot (`call()` asked)."""

    def __init__(self, session_id: str) -> None:
        super().__init__(session_id)
        self.from_snapshot: list[str] = []

    def stored_call(
        self,
        record: ToolCallRecord,
        tool_input: Any,
        result: ToolResultBlock | None,
        shown: str | None,
        call: Callable[[], ReplayedCall],
    ) -> bytes | None:
        def counted() -> ReplayedCall:
            self.from_snapshot.append(record.tool_call_id)
            return call()

        return super().stored_call(record, tool_input, result, shown, counted)


def _record(call_id: str, **fields: Any) -> ToolCallRecord:
    base: dict[str, Any] = {"title": f"Call {call_id}", "kind": "read", "status": "completed"}
    return ToolCallRecord(session_id=SID, tool_call_id=call_id, **{**base, **fields})


TEXT = {"type": "text", "text": "file text é 😀 \x01 \u2028"}
RECORDS = [
    _record(
        "c_text",
        content=[TEXT],
        locations=[
            {"path": "/w/a.py", "line": 3},
            {"path": "/w/a.py", "line": None},
            {"path": "/w/a.py"},
            {"path": "/w/z", "line": -1},
            {"path": "/w/big", "line": 2**40},
        ],
        raw_input={"path": "a.py"},
        raw_output={"lines": 3, "none": None, "nested": [None, {"x": None}]},
    ),
    _record(
        "c_diff",
        kind="edit",
        content=[
            {"type": "diff", "path": "/w/b.py", "old_text": "old", "new_text": "new"},
            {"type": "diff", "path": "/w/new.py", "old_text": None, "new_text": "created"},
            {"type": "diff", "path": "/w/n2.py", "new_text": "no old key"},
        ],
        raw_output="",
    ),
    _record("c_term", kind="execute", content=[{"type": "terminal", "terminal_id": "t1"}]),
    _record("c_term_parts", kind="execute", content=[{"type": "terminal", "terminal_id": "t2"}]),
    _record(
        "c_term_out",
        kind="execute",
        content=[{"type": "terminal", "terminal_id": "t3", "output": "/w\n"}, TEXT],
    ),
    _record("c_term_open", kind="execute", content=[{"type": "terminal", "terminal_id": "t4"}]),
    _record("c_image", content=[{"type": "image", "media_type": "image/png", "data": "iVBO="}]),
    _record(
        "c_declined",
        kind="edit",
        status="failed",
        content=[{"type": "text", "text": "The user declined this edit."}],
    ),
    _record("c_failed", status="failed", raw_input={}),
    _record("c_failed_open", status="failed"),
    _record("c_pending", status="pending"),
    _record("c_running", status="in_progress", kind="fetch"),
    _record("c_empty_input", kind="other", raw_input={}),
    _record("c_falsy_output", raw_output=0),
    _record("c_false_output", raw_output=False),
    _record("c_list_output", raw_output=[]),
    _record("c_nan", raw_output={"ratio": float("nan")}),
    _record("c_agent", kind="think", content=[{"type": "text", "text": "working"}]),
    _record("c_plan_refused", kind="think", status="failed"),
    _record("c_plan", kind="think"),
    # What the snapshot would not take as it is: it goes the snapshot's way.
    _record("c_lone", title="lone \udc00 surrogate"),
    _record("c_unknown_display", content=[{"type": "video", "src": "x"}, TEXT]),
    _record("c_bad_text", content=[{"type": "text", "text": 5}]),
    _record("c_bad_diff", content=[{"type": "diff", "path": "/w/x", "new_text": None}]),
    _record("c_no_terminal_id", content=[{"type": "terminal"}]),
    _record("c_not_a_dict", content=["text"]),
    _record("c_agent_odd", content=[{"type": "video"}]),
]
GOES_THE_SNAPSHOTS_WAY = {  # a lone surrogate (`c_lone`) is mended by the line writer
    "c_unknown_display",
    "c_bad_text",
    "c_bad_diff",
    "c_no_terminal_id",
    "c_not_a_dict",
    "c_agent_odd",
}
INPUTS: dict[str, dict[str, Any]] = {
    "c_failed": {"path": "from the call"},
    "c_failed_open": {"path": "open"},
    "c_empty_input": {},
}
NAMES = {"c_plan": "update_plan", "c_plan_refused": "update_plan", "c_agent": "spawn_agent"}
OPEN = {"c_term_open", "c_failed_open", "c_pending", "c_running"}
ERRORS = {"c_declined", "c_failed", "c_plan_refused"}
SUBAGENTS = {"c_agent": "the subagent read 3 files", "c_agent_odd": "it looked"}


def conversation() -> list[Message]:
    calls = [
        ToolUseBlock(
            id=r.tool_call_id,
            name=NAMES.get(r.tool_call_id, "tool"),
            input=INPUTS.get(r.tool_call_id, {"n": 1}),
        )
        for r in RECORDS
    ] + [ToolUseBlock(id="c_no_record", name="read_file", input={"path": "q"})]
    results = [
        ToolResultBlock(
            tool_use_id=c.id,
            content="failed" if c.id in ERRORS else "out\n",
            is_error=c.id in ERRORS,
        )
        for c in calls
        if c.id not in OPEN
    ]
    parts = (TextBlock(text="one"), JsonPart(value={"k": 1}), TextBlock(text="two"))
    results = [
        ToolResultBlock(tool_use_id=r.tool_use_id, content=parts)
        if r.tool_use_id == "c_term_parts"
        else r
        for r in results
    ]
    return [
        Message(role="user", content=(TextBlock(text="go"),)),
        Message(role="assistant", content=(TextBlock(text="I will."), *calls[:9])),
        Message(
            role="user",
            content=tuple(r for r in results if r.tool_use_id in {c.id for c in calls[:9]}),
        ),
        Message(role="assistant", content=tuple(calls[9:])),
        Message(
            role="user",
            content=tuple(r for r in results if r.tool_use_id not in {c.id for c in calls[:9]}),
        ),
    ]


def _by_models(
    transcript: Sequence[Message], records: dict[str, ToolCallRecord]
) -> list[bytes | None]:
    """The reference: every card from its snapshot, through the schema's models."""
    return model_lines(SID, transcript, ToolCallSnapshots(records), SUBAGENTS)


def test_a_card_written_from_its_record_is_the_line_the_models_give() -> None:
    records = {r.tool_call_id: r for r in RECORDS}
    transcript = conversation()
    view = CountedLines(SID)
    lines = list(replay_walk.iter_replay(transcript, ToolCallSnapshots(records), view, SUBAGENTS))
    expected = _by_models(transcript, records)
    assert len(lines) == len(expected)
    for line, want in zip(lines, expected, strict=True):
        assert line == want
    # Written from the record, but for what the snapshot would not take as it is.
    assert set(view.from_snapshot) == GOES_THE_SNAPSHOTS_WAY
    cards = {
        u["toolCallId"]: u
        for u in (json.loads(line)["params"]["update"] for line in lines if line is not None)
        if u["sessionUpdate"] == "tool_call"
    }
    assert "c_plan" not in cards and cards["c_plan_refused"]["status"] == "failed"
    assert cards["c_term"]["content"] == [
        {"type": "content", "content": {"type": "text", "text": "out\n"}}
    ]
    assert (
        cards["c_term_parts"]["content"][0]["content"]["text"] == "one\n\ntwo"
    )  # a JSON part has no text
    assert cards["c_term_out"]["content"][0]["content"]["text"] == "/w\n"
    # No result in the history: final, failed, ending with what the model is told.
    for open_call in ("c_term_open", "c_failed_open", "c_pending"):
        assert cards[open_call]["status"] == "failed", open_call
        assert cards[open_call]["content"][-1] == {
            "type": "content",
            "content": {"type": "text", "text": INTERRUPTED_RESULT_TEXT},
        }
    assert "did not finish" in cards["c_term_open"]["content"][0]["content"]["text"]
    assert cards["c_declined"]["status"] == "failed"
    assert cards["c_failed"]["rawInput"] == {"path": "from the call"}
    assert cards["c_empty_input"]["rawInput"] == {}
    assert [cards[c]["rawOutput"] for c in ("c_falsy_output", "c_false_output")] == [0, False]
    assert cards["c_list_output"]["rawOutput"] == []
    assert cards["c_nan"]["rawOutput"] == {"ratio": None}
    assert cards["c_text"]["locations"] == [
        {"path": "/w/a.py", "line": 3},
        {"path": "/w/a.py"},
        {"path": "/w/a.py"},
        {"path": "/w/z"},
        {"path": "/w/big", "line": 2**40},
    ]
    assert cards["c_diff"]["content"][1] == {
        "type": "diff",
        "path": "/w/new.py",
        "newText": "created",
    }
    assert cards["c_image"]["content"][0]["content"]["mimeType"] == "image/png"
    assert cards["c_agent"]["content"][0]["content"]["text"] == SUBAGENTS["c_agent"]
    assert cards["c_lone"]["title"] == "lone \ufffd surrogate"
    assert cards["c_unknown_display"]["content"] == [
        {"type": "content", "content": {"type": "text", "text": TEXT["text"]}}
    ]
    assert "content" not in cards["c_bad_text"] and "content" not in cards["c_not_a_dict"]
    assert cards["c_no_record"] == {
        "sessionUpdate": "tool_call",
        "toolCallId": "c_no_record",
        "title": "read_file",
        "kind": "other",
        "status": "completed",
        "rawInput": {"path": "q"},
    }


def test_a_location_the_snapshot_refuses_fails_the_replay_either_way() -> None:
    records = {"c_text": _record("c_text", locations=[{"path": 7}])}
    transcript = [
        Message(role="assistant", content=(ToolUseBlock(id="c_text", name="read_file"),)),
    ]
    with pytest.raises(ValueError, match="not a location"):
        list(replay_walk.iter_replay(transcript, ToolCallSnapshots(records), ReplayLines(SID)))
    with pytest.raises(ValueError, match="not a location"):
        _by_models(transcript, records)


def test_a_load_from_sqlite_replays_each_card_as_the_models_give_it(tmp_path: Path) -> None:
    """Through the real store: the records as `SqliteStore.load` reads them back, handed over
    part by part with the messages as their JSON values, as `session/load` replays them."""
    db = tmp_path / "sessions.sqlite3"
    transcript = conversation()
    with SqliteStore(db) as store:
        store.create(
            SessionRecord(
                id=SID, cwd=str(tmp_path), provider="scripted", model="offline", mode="ask"
            )
        )
        for message in transcript:
            store.append_message(SID, message)
        for record in RECORDS:
            store.upsert_tool_call(record)
        parts: list[BranchPart] = []
        stored = store.load(SID, parts.append)
    assert sum(isinstance(m, dict) for part in parts for m in part.messages) >= 2
    view = CountedLines(SID)
    walk = replay_walk.ReplayWalk(ToolCallSnapshots(parts[0].tool_calls), view, SUBAGENTS)
    lines: list[bytes | None] = []
    for part in parts:
        lines.extend(walk.feed(part.messages))
    lines.extend(walk.finish())
    assert lines == _by_models(list(stored.transcript), stored.tool_calls)
    assert set(view.from_snapshot) == GOES_THE_SNAPSHOTS_WAY
    assert sum(b'"sessionUpdate":"tool_call"' in (line or b"") for line in lines) == len(RECORDS)
