"""A replay's protocol lines, written straight from the conversation (`session/load`).

Owns `ReplayLines`, the `replay_walk.ReplayView` that turns each shown piece of a stored
conversation into its `session/update` line without building the schema's models: the JSON
object a model would dump (`projection.update_line`: by alias, no None, no defaults, its fields
in the model's order) is built as a dict and written by pydantic-core's own JSON writer, the
one `model_dump_json` uses (same escapes, same floats, a non-finite one as null).

A tool call's card is written straight from its stored record (`stored_call`: the record's
display and location JSON turned into the schema's), not from the `ToolCallSnapshot`,
`ReplayedCall` and model a record would otherwise become one after the other.

Invariant: every line is the line `projection.update_line` writes for the update
`replay_walk.UpdateModels` builds from the same piece - byte for byte, which tests check for every
kind of piece (tests/test_replay_lines.py, tests/test_replay_stored_calls.py). A piece the
writer refuses (a lone surrogate, a value that is not JSON) goes through the models and
`update_line`, which mend it or fail as they always did; a stored record holding anything
its snapshot would not take as it is (an unknown display, a malformed location) goes the
snapshot's way, which skips it with a warning or fails as it always did.

Why: a long session replays a hundred thousand updates; validating a model for each, then
dumping it, cost several times what the replay's JSON itself costs (scripts/bench_load.py).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from pydantic_core import to_json

from defect_acp import projection, replay_walk
from defect_acp.replayed import INTERRUPTED, ReplayedCall, replayed_status, result_text
from defect_core import events as ev
from defect_core.model import ImageBlock, ToolResultBlock
from defect_core.store import ToolCallRecord

_HEAD = '{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":'
_TAIL = b"}}\n"


class ReplayLines:
    """The protocol line of each replayed update of one session (None: nothing to write)."""

    def __init__(self, session_id: str) -> None:
        self._head = f'{_HEAD}{json.dumps(session_id)},"update":'.encode()
        self._session_id = session_id
        self._models = replay_walk.UpdateModels()

    def _line(self, update: dict[str, Any], model: Callable[[], projection.Update]) -> bytes | None:
        try:
            return self._head + to_json(update, inf_nan_mode="null") + _TAIL
        except ValueError:  # PydanticSerializationError: not JSON, or not UTF-8 (a surrogate)
            return projection.update_line(self._session_id, model())

    def _chunk(
        self, kind: str, text: str, model: Callable[[str], projection.Update]
    ) -> bytes | None:
        """A text chunk's line: the most frequent piece, written with no call it can spare."""
        update = {"content": {"text": text, "type": "text"}, "sessionUpdate": kind}
        try:
            return self._head + to_json(update, inf_nan_mode="null") + _TAIL
        except ValueError:  # as `_line`
            return projection.update_line(self._session_id, model(text))

    def user_text(self, text: str) -> bytes | None:
        return self._chunk("user_message_chunk", text, self._models.user_text)

    def user_image(self, block: ImageBlock) -> bytes | None:
        image: dict[str, Any] = {"data": block.data or "", "mimeType": block.media_type or ""}
        if block.url is not None:
            image["uri"] = block.url
        image["type"] = "image"
        update = {"content": image, "sessionUpdate": "user_message_chunk"}
        return self._line(update, lambda: self._models.user_image(block))

    def agent_text(self, text: str) -> bytes | None:
        return self._chunk("agent_message_chunk", text, self._models.agent_text)

    def thought(self, text: str) -> bytes | None:
        return self._chunk("agent_thought_chunk", text, self._models.thought)

    def tool_call(self, call: ReplayedCall) -> bytes | None:
        update: dict[str, Any] = {
            "toolCallId": call.tool_call_id,
            "title": call.title,
            "kind": call.kind,
            "status": call.status,
        }
        content = [shown for item in call.content if (shown := _display(item)) is not None]
        if content:
            update["content"] = content
        if call.locations:
            update["locations"] = [_location(loc) for loc in call.locations]
        if call.raw_input is not None:
            update["rawInput"] = call.raw_input
        if call.raw_output is not None:
            update["rawOutput"] = call.raw_output
        update["sessionUpdate"] = "tool_call"
        return self._line(update, lambda: self._models.tool_call(call))

    def stored_call(
        self,
        record: ToolCallRecord,
        tool_input: Any,
        result: ToolResultBlock | None,
        shown: str | None,
        call: Callable[[], ReplayedCall],
    ) -> bytes | None:
        """`tool_call(call())` written from the stored record (`replayed.replayed_call` of
        its snapshot, with `shown` as its content when a subagent's view replaces it)."""
        update = _stored_update(record, tool_input, result, shown)
        if update is None:
            return self.tool_call(call())
        try:  # `_line`, inline: a card is every other piece of a long replay
            return self._head + to_json(update, inf_nan_mode="null") + _TAIL
        except ValueError:
            return projection.update_line(self._session_id, self._models.tool_call(call()))


def _stored_update(
    record: ToolCallRecord, tool_input: Any, result: ToolResultBlock | None, shown: str | None
) -> dict[str, Any] | None:
    """The JSON of `ReplayLines.tool_call` for the card `replayed.replayed_call` makes of
    `record`'s snapshot; None when the record holds what its snapshot would skip or refuse
    (`ToolCallRecord.displays`, `location_values`)."""
    update: dict[str, Any] = {
        "toolCallId": record.tool_call_id,
        "title": record.title,
        "kind": record.kind,
        "status": replayed_status(record.status, result),
    }
    content: list[dict[str, Any]] = []
    for item in record.content:
        if (display := _stored_display(item, result)) is None:
            return None
        content.append(display)
    if shown is not None:
        content = [{"content": _text(shown), "type": "content"}]
    if result is None:  # `replayed.interrupted_tail`
        content.append({"content": _text(INTERRUPTED.text), "type": "content"})
    if content:
        update["content"] = content
    if record.locations:
        locations: list[dict[str, Any]] = []
        for stored in record.locations:
            if (location := _stored_location(stored)) is None:
                return None
            locations.append(location)
        update["locations"] = locations
    raw_input = record.raw_input or tool_input
    if raw_input is not None:
        update["rawInput"] = raw_input
    if record.raw_output is not None:
        update["rawOutput"] = record.raw_output
    update["sessionUpdate"] = "tool_call"
    return update


def _stored_display(item: Any, result: ToolResultBlock | None) -> dict[str, Any] | None:
    """`_display` of the item `tool_display_from_json` reads from `item`, as a replay shows
    it (a terminal by what it printed: `replayed._replayed_displays`); None for an item it
    would not read."""
    if type(item) is not dict:
        return None
    kind = item.get("type")
    if kind == "text":
        text = item.get("text")
        return {"content": _text(text), "type": "content"} if type(text) is str else None
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
            return {"content": _text(result_text(result)), "type": "content"}
        return {"content": _text(output), "type": "content"} if type(output) is str else None
    if kind == "image":
        media_type, data = item.get("media_type"), item.get("data")
        if type(media_type) is not str or type(data) is not str:
            return None
        return {
            "content": {"data": data, "mimeType": media_type, "type": "image"},
            "type": "content",
        }
    return None


def _stored_location(stored: Any) -> dict[str, Any] | None:
    """`_location` of what `location_from_json` reads from `stored`; None where it refuses."""
    if type(stored) is not dict:
        return None
    path, line = stored.get("path"), stored.get("line")
    if type(path) is not str:
        return None
    if line is None or (type(line) is int and line < 0):
        return {"path": path}
    return {"path": path, "line": line} if type(line) is int else None


def _text(text: str) -> dict[str, Any]:
    return {"text": text, "type": "text"}


def _display(item: ev.ToolDisplay) -> dict[str, Any] | None:
    """`projection.displays` of one item, as its JSON."""
    if isinstance(item, ev.TextDisplay):
        return {"content": _text(item.text), "type": "content"}
    if isinstance(item, ev.DiffDisplay):
        diff: dict[str, Any] = {"path": item.path}
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


def _location(location: ev.Location) -> dict[str, Any]:
    """`ToolCallLocation`'s JSON: a line the schema refuses (negative) is dropped, as its
    model drops it."""
    if isinstance(location.line, int) and location.line >= 0:
        return {"path": location.path, "line": location.line}
    return {"path": location.path}
