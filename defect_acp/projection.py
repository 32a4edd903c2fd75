"""Projection: core values ⇄ ACP values.

Owns the conversion of `AgentEvent`s into `session/update` payloads (a tool call's card:
`defect_acp/cards.py`, the one projection of a call, live and replayed), of ACP prompt content
into core content blocks, and of core modes/config options into their ACP shapes; and the
protocol line of an update (`update_line` of a model, `UpdateLines` of an update's JSON).

Invariant: this module and `cards.py` are the only ones that know both vocabularies;
`defect_core` never sees an ACP type (docs/architecture.md, rule 1). Updates are built with
the SDK's schema models, so what leaves here is what the protocol's schema allows; those made
as JSON (a card, a text chunk: the bulk of a turn and of a replay) are the JSON the model
would dump, and `UpdateLines` writes the line `update_line` writes for that model.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from acp import schema as s
from pydantic_core import PydanticSerializationError, to_json

from defect_acp.transport import encode_message
from defect_core import events as ev
from defect_core.model import ContentBlock, ImageBlock, TextBlock
from defect_core.session.protocol import ConfigOption, ModeInfo, OptionChoice

Update = (
    s.AgentMessageChunk
    | s.AgentThoughtChunk
    | s.CurrentModeUpdate
    | s.ConfigOptionUpdate
    | s.SessionInfoUpdate
    | s.UsageUpdate
    | s.AvailableCommandsUpdate
    | s.UserMessageChunk
    | s.AgentPlanUpdate
)


class UnsupportedContent(ValueError):
    """Prompt content defect cannot take (e.g. audio, which it does not advertise)."""


# --- ACP → core ---------------------------------------------------------------------------


def prompt_to_blocks(prompt: Sequence[Any]) -> list[ContentBlock]:
    blocks: list[ContentBlock] = []
    for item in prompt:
        if isinstance(item, s.TextContentBlock):
            blocks.append(TextBlock(text=item.text))
        elif isinstance(item, s.ImageContentBlock):
            if item.data:
                blocks.append(ImageBlock(media_type=item.mime_type, data=item.data))
            elif item.uri:
                blocks.append(ImageBlock(url=item.uri))
        elif isinstance(item, s.ResourceContentBlock):
            label = item.title or item.name
            blocks.append(TextBlock(text=f"[@{label}]({item.uri})"))
        elif isinstance(item, s.EmbeddedResourceContentBlock):
            resource = item.resource
            if isinstance(resource, s.TextResourceContents):
                blocks.append(
                    TextBlock(text=f'<context ref="{resource.uri}">\n{resource.text}\n</context>')
                )
            else:
                blocks.append(TextBlock(text=f"[binary resource: {resource.uri}]"))
        elif isinstance(item, s.AudioContentBlock):
            raise UnsupportedContent("audio prompts are not supported by defect")
        else:
            raise UnsupportedContent(f"unsupported prompt content: {type(item).__name__}")
    return blocks


# --- core → ACP ---------------------------------------------------------------------------


def event_to_update(event: ev.AgentEvent) -> Update | None:
    """The `session/update` for an event, or None when the event is not shown here (a tool
    call's: `cards.started`, `cards.progress`)."""
    if isinstance(event, ev.AgentTextDelta):
        return message_text(event.text)
    if isinstance(event, ev.AgentThoughtDelta):
        return thought_text(event.text)
    if isinstance(event, ev.ModeChanged):
        return s.CurrentModeUpdate(
            session_update="current_mode_update", current_mode_id=event.mode_id
        )
    if isinstance(event, ev.TitleChanged):
        return s.SessionInfoUpdate(
            session_update="session_info_update", title=event.title, updated_at=event.updated_at
        )
    if isinstance(event, ev.UsageReported):
        cost = s.Cost(amount=event.cost_usd, currency="USD") if event.cost_usd is not None else None
        return s.UsageUpdate(
            session_update="usage_update",
            used=max(0, event.used),
            size=max(0, event.size),
            cost=cost,
        )
    if isinstance(event, ev.CommandsChanged):
        return commands_update(event.commands)
    if isinstance(event, ev.Notice):
        return message_text(f"\n\n> {event.text}\n\n")
    if isinstance(event, ev.PlanUpdated):
        return plan_update(event.entries)
    return None


def message_text(text: str) -> s.AgentMessageChunk:
    """An `agent_message_chunk` of `text`. Made from the schema's models, as every update here
    is: the SDK's builders (`acp.helpers`) are gone from its 1.0 releases."""
    content = s.TextContentBlock(type="text", text=text)
    return s.AgentMessageChunk(session_update="agent_message_chunk", content=content)


def thought_text(text: str) -> s.AgentThoughtChunk:
    """An `agent_thought_chunk` of `text` (as `message_text`)."""
    content = s.TextContentBlock(type="text", text=text)
    return s.AgentThoughtChunk(session_update="agent_thought_chunk", content=content)


def plan_update(entries: Sequence[ev.PlanEntry]) -> s.AgentPlanUpdate:
    """The whole plan: a client replaces what it showed with it (ACP's Agent Plan)."""
    return s.AgentPlanUpdate(
        session_update="plan",
        entries=[
            s.PlanEntry(content=e.content, priority=e.priority, status=e.status) for e in entries
        ],
    )


def usage_meta(usage: ev.TurnUsage) -> dict[str, int]:
    """A turn's usage as the prompt answer's `_meta.usage` (ACP's camelCase names)."""
    return {
        "inputTokens": usage.input_tokens,
        "outputTokens": usage.output_tokens,
        "cacheReadInputTokens": usage.cache_read_input_tokens,
        "cacheCreationInputTokens": usage.cache_creation_input_tokens,
        "requests": usage.requests,
    }


def commands_update(commands: Sequence[ev.CommandOffer]) -> s.AvailableCommandsUpdate:
    return s.AvailableCommandsUpdate(
        session_update="available_commands_update",
        available_commands=[
            s.AvailableCommand(
                name=c.name,
                description=c.description,
                input=_command_input(c.hint),
            )
            for c in commands
        ],
    )


def _command_input(hint: str | None) -> s.AvailableCommandInput | None:
    """What to type after a command, when it takes something (ACP's unstructured input)."""
    return None if hint is None else s.AvailableCommandInput(s.UnstructuredCommandInput(hint=hint))


def config_update(options: Sequence[ConfigOption]) -> s.ConfigOptionUpdate:
    return s.ConfigOptionUpdate(
        session_update="config_option_update", config_options=config_options(options)
    )


def permission_options(event: ev.PermissionRequested) -> list[s.PermissionOption]:
    return [
        s.PermissionOption(option_id=o.option_id, name=o.name, kind=o.kind) for o in event.options
    ]


def modes(current: str, available: Sequence[ModeInfo]) -> s.SessionModeState:
    return s.SessionModeState(
        current_mode_id=current,
        available_modes=[
            s.SessionMode(id=m.id, name=m.name, description=m.description) for m in available
        ],
    )


def config_options(options: Sequence[ConfigOption]) -> list[s.SessionConfigOptionSelect]:
    return [
        s.SessionConfigOptionSelect(
            type="select",
            id=o.id,
            name=o.name,
            description=o.description,
            category=o.category,
            current_value=o.current,
            options=select_options(o.choices),
        )
        for o in options
    ]


def select_options(
    choices: Sequence[OptionChoice],
) -> list[s.SessionConfigSelectOption] | list[s.SessionConfigSelectGroup]:
    """A flat list, or - when the choices fall under two headings or more (the model picker
    with several providers) - one `SessionConfigSelectGroup` per heading, in order."""

    def option(c: OptionChoice) -> s.SessionConfigSelectOption:
        return s.SessionConfigSelectOption(value=c.value, name=c.name, description=c.description)

    headings = list(dict.fromkeys(c.group for c in choices if c.group is not None))
    if len(headings) < 2 or any(c.group is None for c in choices):
        return [option(c) for c in choices]
    return [
        s.SessionConfigSelectGroup(
            group=heading, name=heading, options=[option(c) for c in choices if c.group == heading]
        )
        for heading in headings
    ]


def session_notification(session_id: str, update: Update) -> dict[str, Any]:
    """The `session/update` notification carrying `update`, as JSON: what the SDK's
    `session_update` writes (its `serialize_params` of a `SessionNotification`), built
    without validating again an update made from the schema's own models."""
    return {
        "jsonrpc": "2.0",
        "method": "session/update",
        "params": {
            "sessionId": session_id,
            "update": update.model_dump(
                mode="json", by_alias=True, exclude_none=True, exclude_defaults=True
            ),
        },
    }


def update_line(session_id: str, update: Update) -> bytes | None:
    """The protocol line of `session_notification(session_id, update)`, written by pydantic's
    own JSON writer: the same JSON `encode_message` writes for it (key order, no spaces, UTF-8
    unescaped), several times faster than a dict through `json`, which counts for a long
    replay. An update that writer refuses (a lone surrogate) goes through `encode_message`,
    which mends it; a non-finite float becomes null (strict JSON either way)."""
    try:
        body = update.model_dump_json(by_alias=True, exclude_none=True, exclude_defaults=True)
    except PydanticSerializationError:
        return encode_message(session_notification(session_id, update))
    head = '{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":'
    return f'{head}{json.dumps(session_id)},"update":{body}}}}}\n'.encode()


_HEAD = '{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":'
_TAIL = b"}}\n"


class UpdateLines:
    """The protocol lines of one session's updates made as their JSON (`cards.py`, text
    chunks): the line `update_line` writes for the model the JSON is the dump of, written by
    pydantic-core's own JSON writer (the one `model_dump_json` uses: same escapes, same
    floats, a non-finite one as null) without building the model. What that writer refuses
    (a lone surrogate, which UTF-8 cannot carry) goes through `encode_message`, as
    `update_line` sends a model's dump (mended, or dropped when it is not JSON at all)."""

    def __init__(self, session_id: str) -> None:
        self._head = f'{_HEAD}{json.dumps(session_id)},"update":'.encode()
        self._session_id = session_id

    def line(self, update: dict[str, Any]) -> bytes | None:
        try:
            return self._head + to_json(update, inf_nan_mode="null") + _TAIL
        except ValueError:  # PydanticSerializationError: not JSON, or not UTF-8 (a surrogate)
            params = {"sessionId": self._session_id, "update": update}
            return encode_message({"jsonrpc": "2.0", "method": "session/update", "params": params})

    def chunk(self, kind: str, text: str, message_id: str | None = None) -> bytes | None:
        """A text chunk's line (`kind`: `agent_message_chunk`, `agent_thought_chunk`,
        `user_message_chunk`; `message_id`: the message it belongs to, if it is one of the
        conversation's): the most frequent update, written with no call it can spare."""
        update: dict[str, Any]
        if message_id is None:
            update = {"content": {"text": text, "type": "text"}, "sessionUpdate": kind}
        else:
            content = {"text": text, "type": "text"}
            update = {"content": content, "messageId": message_id, "sessionUpdate": kind}
        try:
            return self._head + to_json(update, inf_nan_mode="null") + _TAIL
        except ValueError:  # as `line`
            return self.line(update)
