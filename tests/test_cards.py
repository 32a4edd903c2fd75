"""A live tool call's updates, made once by the card projection (`defect_acp/cards.py`), are the
lines the schema's models give for the same events (`tests/support/replay_models.py` +
`projection.update_line`), byte for byte: a card as it starts, each change to it, a question's
call; and a card made live is the card a replay of the same call makes."""

from __future__ import annotations

import json
from typing import Any

from defect_acp import cards, projection
from defect_acp.replayed import ReplayedCall
from defect_core import events as ev
from tests.support.replay_models import (
    UpdateModels,
    permission_model,
    progress_model,
    started_model,
)

SID = "sess_cards_é"

DISPLAYS: tuple[ev.ToolDisplay, ...] = (
    ev.TextDisplay('quote " newline \n é 😀 \x01 \u2028'),
    ev.DiffDisplay("/w/b.py", "old", "new"),
    ev.DiffDisplay("/w/new.py", None, "created"),
    ev.TerminalDisplay("term-1"),
    ev.TerminalDisplay("term-2", "printed"),
    ev.ImageDisplay("image/png", "iVBORw0KGgo="),
)
LOCATIONS = (ev.Location("/w/a.py", 3), ev.Location("/w/a.py"), ev.Location("/w/z", -1))

STARTED = [
    ev.ToolCallStarted("t1", "read_file", "Read a.py", "read", {"path": "a.py"}),
    ev.ToolCallStarted(
        "t2", "edit_file", "Edit b.py", "edit", {"path": "b.py"}, LOCATIONS, DISPLAYS, "pending"
    ),
    ev.ToolCallStarted("t3", "bash", "ls", "execute", {}, status="in_progress"),
    ev.ToolCallStarted("t4", "x", "lone \udc00 surrogate", "other", {"n": 1.5}),
    ev.ToolCallStarted("t5", "x", "nan", "other", {"ratio": float("nan")}),
]
UPDATED = [
    ev.ToolCallUpdated("t1"),
    ev.ToolCallUpdated("t1", status="in_progress"),
    ev.ToolCallUpdated("t1", status="completed", title="Read a.py (3 lines)"),
    ev.ToolCallUpdated("t2", content=DISPLAYS, locations=LOCATIONS, raw_output={"ok": True}),
    ev.ToolCallUpdated("t2", content=(), locations=()),  # emptied: sent empty
    ev.ToolCallUpdated("t3", status="failed", raw_output=0),
    ev.ToolCallUpdated("t3", raw_output=False),
    ev.ToolCallUpdated("t4", title="still \ud800 lone"),
    ev.ToolCallUpdated("t5", raw_output={"ratio": float("inf")}),
]


def test_a_live_card_is_the_line_the_models_give() -> None:
    lines = projection.UpdateLines(SID)
    for event in STARTED:
        want = projection.update_line(SID, started_model(event))
        assert lines.line(cards.started(event)) == want, event
    for update in UPDATED:
        want = projection.update_line(SID, progress_model(update))
        assert lines.line(cards.progress(update)) == want, update
    shown = json.loads(lines.line(cards.progress(UPDATED[4])) or b"{}")["params"]["update"]
    assert shown["content"] == [] and shown["locations"] == []


def test_a_permission_question_shows_the_calls_card() -> None:
    option = ev.PermissionOption("allow_once", "Allow", "allow_once")
    for started in STARTED[:3]:
        event = ev.PermissionRequested(
            started.tool_call_id,
            started.title,
            started.kind,
            started.raw_input,
            (option,),
            started.content,
            started.locations,
        )
        dump: dict[str, Any] = {"by_alias": True, "exclude_none": True, "exclude_defaults": True}
        assert cards.for_permission(event).model_dump_json(**dump) == permission_model(
            event
        ).model_dump_json(**dump)


def test_a_replayed_card_is_made_as_a_live_one() -> None:
    """The same call, replayed with what it showed live (its content resolved for a replay:
    no terminal), is the same card: one projection."""
    lines = projection.UpdateLines(SID)
    shown = tuple(d for d in DISPLAYS if not isinstance(d, ev.TerminalDisplay))
    event = ev.ToolCallStarted("t9", "edit_file", "Edit", "edit", {"p": 1}, LOCATIONS, shown)
    call = ReplayedCall("t9", "Edit", "edit", "pending", shown, LOCATIONS, {"p": 1})
    live = lines.line(cards.started(event))
    assert live == lines.line(cards.replayed(call))
    assert live == projection.update_line(SID, UpdateModels().tool_call(call))
