"""Tool-call cards: the one projection of a tool call into what a client shows of it.

Owns how every `tool_call` / `tool_call_update` session update is made, live and on replay:
`card` assembles the `tool_call` update of a call (its JSON value, as the schema's
`ToolCallStart` dumps it); `started` and `progress` make a live call's updates from its
events, `replayed` a replayed call's card (`replayed.ReplayedCall`), `stored` the same card
straight from the call's stored record, and `for_permission` the call a permission question
shows. Each display item and location becomes its JSON in one place (`display`, `location`;
a stored one's JSON through `stored_display`, `stored_location`, which read it as the core's
values would be read, or refuse it).

Invariant: an update here is the JSON the schema's model of it would dump (by alias, no None,
no defaults, its fields in the model's order: `projection.update_line`), so a line written
from it is the line the model gives, byte for byte (tests/test_cards.py, live;
tests/test_replay_lines.py and tests/test_replay_stored_calls.py, replay; a recorded session,
tests/test_replay_fixture.py). A call shown by what it publishes (`SHOWN_BY_THEIR_EVENT`)
gets a card only when refused, live (`updates.SessionPump`) and on replay (`replay_walk`).

Why JSON and not the schema's models: a long session replays a hundred thousand updates;
validating a model for each, then dumping it, cost several times what the JSON itself costs
(scripts/bench_load.py). The JSON is written by `projection.UpdateLines`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from acp import schema as s

from defect_acp.replayed import INTERRUPTED, ReplayedCall, replayed_status, result_text
from defect_core import events as ev
from defect_core.model import ToolResultBlock
from defect_core.session.protocol import UPDATE_PLAN, ToolCallRecord

Json = dict[str, Any]
"""An update's JSON value (or a part of one), as its model would dump it."""

SHOWN_BY_THEIR_EVENT = frozenset({UPDATE_PLAN})
"""Tools whose call is shown by what it publishes, not as a tool-call card: `update_plan` is
the `plan` update itself (as claude-agent-acp shows its TodoWrite). Only a refused call gets
its card, `failed` with why, so the user sees why the plan did not change
(`defect_acp/updates.py` live, `replay_walk.ReplayWalk` on load)."""


def card(
    tool_call_id: str,
    title: str,
    kind: ev.ToolKind,
    status: ev.ToolStatus,
    content: list[Json],
    locations: list[Json],
    raw_input: Any,
    raw_output: Any,
) -> Json:
    """The `tool_call` update of a call (`ToolCallStart`'s JSON): every card is made here."""
    update: Json = {"toolCallId": tool_call_id, "title": title, "kind": kind, "status": status}
    if content:
        update["content"] = content
    if locations:
        update["locations"] = locations
    if raw_input is not None:
        update["rawInput"] = raw_input
    if raw_output is not None:
        update["rawOutput"] = raw_output
    update["sessionUpdate"] = "tool_call"
    return update


def started(event: ev.ToolCallStarted) -> Json:
    """A live call's card, as it starts (a terminal shown by its id, as the client runs it)."""
    return card(
        event.tool_call_id,
        event.title,
        event.kind,
        event.status,
        displays(event.content),
        [location(loc) for loc in event.locations],
        event.raw_input,
        None,
    )


def progress(event: ev.ToolCallUpdated) -> Json:
    """A live call's `tool_call_update` (`ToolCallProgress`'s JSON): only what changed; an
    emptied content or location list is sent empty, so the client clears it."""
    update: Json = {"toolCallId": event.tool_call_id}
    if event.status is not None:
        update["status"] = event.status
    if event.title is not None:
        update["title"] = event.title
    if event.content is not None:
        update["content"] = displays(event.content)
    if event.locations is not None:
        update["locations"] = [location(loc) for loc in event.locations]
    if event.raw_output is not None:
        update["rawOutput"] = event.raw_output
    update["sessionUpdate"] = "tool_call_update"
    return update


def for_permission(event: ev.PermissionRequested) -> s.ToolCallUpdate:
    """The call a permission question shows, `pending`: its card's fields, as the model the
    SDK's `request_permission` takes."""
    shown = card(
        event.tool_call_id,
        event.title,
        event.kind,
        "pending",
        displays(event.content),
        [location(loc) for loc in event.locations],
        event.raw_input,
        None,
    )
    del shown["sessionUpdate"]
    return s.ToolCallUpdate.model_validate(shown)


def replayed(call: ReplayedCall) -> Json:
    """A replayed call's card (its content already resolved for a replay: `replayed.py`)."""
    return card(
        call.tool_call_id,
        call.title,
        call.kind,
        call.status,
        displays(call.content),
        [location(loc) for loc in call.locations],
        call.raw_input,
        call.raw_output,
    )


def stored(
    record: ToolCallRecord, tool_input: Any, result: ToolResultBlock | None, shown: str | None
) -> Json | None:
    """The card `replayed(replayed.replayed_call(...))` makes of `record`'s snapshot, made
    from the record as it is stored (`shown`: a subagent's view, the card's content); None
    when the record holds what its snapshot would skip or refuse (`ToolCallRecord.displays`,
    `location_values`): the caller goes the snapshot's way."""
    content: list[Json] = []
    for item in record.content:
        if (shown_item := stored_display(item, result)) is None:
            return None
        content.append(shown_item)
    if shown is not None:
        content = [_content(shown)]
    if result is None:  # `replayed.interrupted_tail`
        content.append(_content(INTERRUPTED.text))
    locations: list[Json] = []
    for item in record.locations:
        if (loc := stored_location(item)) is None:
            return None
        locations.append(loc)
    return card(
        record.tool_call_id,
        record.title,
        record.kind,
        replayed_status(record.status, result),
        content,
        locations,
        record.raw_input or tool_input,
        record.raw_output,
    )


def displays(content: Sequence[ev.ToolDisplay]) -> list[Json]:
    """A card's content: each item's JSON (an item of no known kind is left out)."""
    return [shown for item in content if (shown := display(item)) is not None]


def display(item: ev.ToolDisplay) -> Json | None:
    """One display item as the card's content shows it (a terminal by its id)."""
    if isinstance(item, ev.TextDisplay):
        return _content(item.text)
    if isinstance(item, ev.DiffDisplay):
        diff: Json = {"path": item.path}
        if item.old_text is not None:
            diff["oldText"] = item.old_text
        diff["newText"] = item.new_text
        diff["type"] = "diff"
        return diff
    if isinstance(item, ev.TerminalDisplay):
        return {"terminalId": item.terminal_id, "type": "terminal"}
    if isinstance(item, ev.ImageDisplay):
        image = {"data": item.data, "mimeType": item.media_type, "type": "image"}
        return {"content": image, "type": "content"}
    return None


def location(loc: ev.Location) -> Json:
    """`ToolCallLocation`'s JSON: a line the schema refuses (negative) is dropped, as its
    model drops it."""
    if isinstance(loc.line, int) and loc.line >= 0:
        return {"path": loc.path, "line": loc.line}
    return {"path": loc.path}


def stored_display(item: Any, result: ToolResultBlock | None) -> Json | None:
    """`display` of the item `tool_display_from_json` reads from a stored `item`, as a replay
    shows it (a terminal by what it printed: `replayed._replayed_displays`); None for an item
    it would not read."""
    if type(item) is not dict:
        return None
    kind = item.get("type")
    if kind == "text":
        text = item.get("text")
        return _content(text) if type(text) is str else None
    if kind == "diff":
        path, old, new = item.get("path"), item.get("old_text"), item.get("new_text")
        if type(path) is not str or type(new) is not str:
            return None
        if old is None:
            return {"path": path, "newText": new, "type": "diff"}
        return (
            {"path": path, "oldText": old, "newText": new, "type": "diff"}
            if type(old) is str
            else None
        )
    if kind == "terminal":
        output = item.get("output")
        if type(item.get("terminal_id")) is not str:
            return None
        if output is None:
            return _content(result_text(result))
        return _content(output) if type(output) is str else None
    if kind == "image":
        media_type, data = item.get("media_type"), item.get("data")
        if type(media_type) is not str or type(data) is not str:
            return None
        return {
            "content": {"data": data, "mimeType": media_type, "type": "image"},
            "type": "content",
        }
    return None


def stored_location(item: Any) -> Json | None:
    """`location` of what `location_from_json` reads from a stored `item`; None where it
    refuses."""
    if type(item) is not dict:
        return None
    path, line = item.get("path"), item.get("line")
    if type(path) is not str:
        return None
    if line is None or (type(line) is int and line < 0):
        return {"path": path}
    return {"path": path, "line": line} if type(line) is int else None


def _content(text: str) -> Json:
    return {"content": {"text": text, "type": "text"}, "type": "content"}
