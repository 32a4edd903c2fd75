"""A replay's protocol lines, written straight from the conversation (`session/load`).

Owns `ReplayLines`, the `replay_walk.ReplayView` that turns each shown piece of a stored
conversation into its `session/update` line: a text chunk or an image as its JSON, a tool
call as its card (`cards.replayed`, or `cards.stored` straight from the call's stored record:
the record's display and location JSON turned into the schema's, without the
`ToolCallSnapshot` and `ReplayedCall` it would otherwise become one after the other), each
written by `projection.UpdateLines`.

Invariant: every line is the line `projection.update_line` writes for the schema's model of
the same piece - byte for byte, which tests check for every kind of piece against the models
(tests/test_replay_lines.py, tests/test_replay_stored_calls.py) and against what a recorded
session replayed (tests/test_replay_fixture.py). A stored record holding anything its
snapshot would not take as it is (an unknown display, a malformed location) goes the
snapshot's way, which skips it with a warning or fails as it always did.

Why: a long session replays a hundred thousand updates; validating a model for each, then
dumping it, cost several times what the replay's JSON itself costs (scripts/bench_load.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from defect_acp import cards
from defect_acp.projection import UpdateLines
from defect_acp.replayed import ReplayedCall
from defect_core.model import ImageBlock, ToolResultBlock
from defect_core.session.protocol import ToolCallRecord


class ReplayLines:
    """The protocol line of each replayed update of one session (None: nothing to write)."""

    def __init__(self, session_id: str) -> None:
        self._lines = UpdateLines(session_id)

    def user_text(self, text: str, message_id: str | None = None) -> bytes | None:
        return self._lines.chunk("user_message_chunk", text, message_id)

    def user_image(self, block: ImageBlock, message_id: str | None = None) -> bytes | None:
        image: dict[str, Any] = {"data": block.data or "", "mimeType": block.media_type or ""}
        if block.url is not None:
            image["uri"] = block.url
        image["type"] = "image"
        update: dict[str, Any] = {"content": image}
        if message_id is not None:
            update["messageId"] = message_id
        update["sessionUpdate"] = "user_message_chunk"
        return self._lines.line(update)

    def agent_text(self, text: str, message_id: str | None = None) -> bytes | None:
        return self._lines.chunk("agent_message_chunk", text, message_id)

    def thought(self, text: str, message_id: str | None = None) -> bytes | None:
        return self._lines.chunk("agent_thought_chunk", text, message_id)

    def tool_call(self, call: ReplayedCall) -> bytes | None:
        return self._lines.line(cards.replayed(call))

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
        card = cards.stored(record, tool_input, result, shown)
        return self._lines.line(cards.replayed(call()) if card is None else card)
