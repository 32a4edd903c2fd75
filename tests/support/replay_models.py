"""The schema's models of a replay, which the bridge's lines are held to in tests.

Owns `UpdateModels`, the `replay_walk.ReplayView` that builds each replayed piece as the
SDK's schema model (a card from the call's `ToolCallSnapshot`, through
`replayed.replayed_call`), `model_lines` (the whole walk as `projection.update_line` writes
those models: the reference the bridge's lines must equal, byte for byte), `started_model` /
`progress_model` (a live call's updates as those models) and `stored_calls` (snapshots as the
stored calls a replay looks up).

Why in the tests: the bridge makes each card once, as the JSON those models would dump
(`defect_acp/cards.py`); the models, validated by the SDK, are the independent reference
that says the JSON is what the protocol's schema writes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from acp import schema as s

from defect_acp import projection, replay_walk
from defect_acp.replayed import ReplayedCall
from defect_core import events as ev
from defect_core.model import ImageBlock, Message, ToolResultBlock
from defect_core.session import ToolCallSnapshot
from defect_core.session.persistence import ToolCallSnapshots
from defect_core.store import ToolCallRecord, location_to_json, tool_display_to_json

Model = Any
"""A schema model of one update."""


def displays(content: Sequence[ev.ToolDisplay]) -> list[Any]:
    out: list[Any] = []
    for item in content:
        if isinstance(item, ev.TextDisplay):
            text = s.TextContentBlock(type="text", text=item.text)
            out.append(s.ContentToolCallContent(type="content", content=text))
        elif isinstance(item, ev.DiffDisplay):
            out.append(
                s.FileEditToolCallContent(
                    type="diff", path=item.path, new_text=item.new_text, old_text=item.old_text
                )
            )
        elif isinstance(item, ev.TerminalDisplay):
            out.append(s.TerminalToolCallContent(type="terminal", terminal_id=item.terminal_id))
        elif isinstance(item, ev.ImageDisplay):
            image = s.ImageContentBlock(type="image", data=item.data, mime_type=item.media_type)
            out.append(s.ContentToolCallContent(type="content", content=image))
    return out


def locations(items: Sequence[ev.Location]) -> list[s.ToolCallLocation]:
    return [s.ToolCallLocation(path=loc.path, line=loc.line) for loc in items]


def started_model(event: ev.ToolCallStarted) -> s.ToolCallStart:
    return s.ToolCallStart(
        session_update="tool_call",
        tool_call_id=event.tool_call_id,
        title=event.title,
        kind=event.kind,
        status=event.status,
        content=displays(event.content) or None,
        locations=locations(event.locations) or None,
        raw_input=event.raw_input,
    )


def progress_model(event: ev.ToolCallUpdated) -> s.ToolCallProgress:
    return s.ToolCallProgress(
        session_update="tool_call_update",
        tool_call_id=event.tool_call_id,
        status=event.status,
        title=event.title,
        content=displays(event.content) if event.content is not None else None,
        locations=locations(event.locations) if event.locations is not None else None,
        raw_output=event.raw_output,
    )


def permission_model(event: ev.PermissionRequested) -> s.ToolCallUpdate:
    return s.ToolCallUpdate(
        tool_call_id=event.tool_call_id,
        title=event.title,
        kind=event.kind,
        status="pending",
        content=displays(event.content) or None,
        locations=locations(event.locations) or None,
        raw_input=event.raw_input,
    )


class UpdateModels:
    """The `ReplayView` that builds each update with the schema's models."""

    def user_text(self, text: str, message_id: str | None = None) -> Model:
        return _user_chunk(s.TextContentBlock(type="text", text=text), message_id)

    def user_image(self, block: ImageBlock, message_id: str | None = None) -> Model:
        image = s.ImageContentBlock(
            type="image", data=block.data or "", mime_type=block.media_type or "", uri=block.url
        )
        return _user_chunk(image, message_id)

    def agent_text(self, text: str, message_id: str | None = None) -> Model:
        content = s.TextContentBlock(type="text", text=text)
        return s.AgentMessageChunk(
            session_update="agent_message_chunk", content=content, message_id=message_id
        )

    def thought(self, text: str, message_id: str | None = None) -> Model:
        content = s.TextContentBlock(type="text", text=text)
        return s.AgentThoughtChunk(
            session_update="agent_thought_chunk", content=content, message_id=message_id
        )

    def tool_call(self, call: ReplayedCall) -> Model:
        return s.ToolCallStart(
            session_update="tool_call",
            tool_call_id=call.tool_call_id,
            title=call.title,
            kind=call.kind,
            status=call.status,
            content=displays(call.content) or None,
            locations=locations(call.locations) or None,
            raw_input=call.raw_input,
            raw_output=call.raw_output,
        )

    def stored_call(
        self,
        record: ToolCallRecord,
        tool_input: Any,
        result: ToolResultBlock | None,
        shown: str | None,
        call: Callable[[], ReplayedCall],
    ) -> Model:
        return self.tool_call(call())  # always from the snapshot, never the record


def _user_chunk(content: Any, message_id: str | None) -> s.UserMessageChunk:
    return s.UserMessageChunk(
        session_update="user_message_chunk", content=content, message_id=message_id
    )


def iter_models(
    transcript: Sequence[Message],
    tool_calls: ToolCallSnapshots,
    subagents: Mapping[str, str] | None = None,
    message_ids: Sequence[str] = (),
) -> Iterator[Model]:
    """The whole replay as the schema's models."""
    views = dict(subagents or {})
    return replay_walk.iter_replay(transcript, tool_calls, UpdateModels(), views, message_ids)


def model_lines(
    session_id: str,
    transcript: Sequence[Message],
    tool_calls: ToolCallSnapshots,
    subagents: Mapping[str, str] | None = None,
    message_ids: Sequence[str] = (),
) -> list[bytes | None]:
    """The reference lines: each model of the replay as `projection.update_line` writes it."""
    return [
        projection.update_line(session_id, u)
        for u in iter_models(transcript, tool_calls, subagents, message_ids)
    ]


def stored_calls(snapshots: Mapping[str, ToolCallSnapshot]) -> ToolCallSnapshots:
    """`snapshots` as the stored calls a replay looks up: each as the record it is read from."""
    return ToolCallSnapshots(
        {
            call_id: ToolCallRecord(
                session_id="sess",
                tool_call_id=call_id,
                title=snap.title,
                kind=snap.kind,
                status=snap.status,
                content=[tool_display_to_json(d) for d in snap.content],
                locations=[location_to_json(loc) for loc in snap.locations],
                raw_input=snap.raw_input,
                raw_output=snap.raw_output,
            )
            for call_id, snap in snapshots.items()
        }
    )
