"""What a replay shows of a tool call: its stored state, resolved against its result.

Owns `ReplayedCall` (a tool call as `session/load` shows it) and how one is made: from the
call's stored snapshot and the result the model read (`replayed_call`), or, for a search the
provider ran, from its blocks alone (`replayed_search`). A result is a `ToolResultBlock`, or
a plain tool result's JSON value when the replay read its message without the model
(`defect_core.model.is_plain_message`): both read the same. What a card looks like on the
wire is `defect_acp/cards.py`'s, which also makes it straight from a call's stored record
(`cards.stored`: the same card, without a snapshot and a `ReplayedCall` per call).

Invariant: a call's card is what the client saw live, as far as the store knows it, and
final: its last recorded status and content (a terminal released long ago shown by what it
printed) when its result is in the history; when it is not (the process died while the call
ran, or before its result was committed), `failed`, its content followed by the words the
model is told (`integrity.rules.INTERRUPTED_RESULT_TEXT`) — never `pending` or
`in_progress`, which an editor would show as running forever. The stored history stays as it
is: the call has no result there.

Why apart from `replay_walk.py`: the replay walk (`replay_walk.ReplayWalk`) and the card
projection (`cards.py`) share these.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from defect_core import events as ev
from defect_core.model import (
    ServerToolUseBlock,
    ToolResultBlock,
    WebSearchResultBlock,
    result_from_dict,
)
from defect_core.session.protocol import (
    INTERRUPTED_RESULT_TEXT,
    ToolCallSnapshot,
    search_outcome,
    search_title,
)

Result = ToolResultBlock | dict[str, Any]
"""A tool result as a replay met it: the model, or a plain result block's JSON value."""


@dataclass(frozen=True, slots=True)
class ReplayedCall:
    """A tool call as a replay shows it: its last known state, its content resolved for a
    replay (a terminal released long ago is shown by what it printed)."""

    tool_call_id: str
    title: str
    kind: ev.ToolKind
    status: ev.ToolStatus
    content: tuple[ev.ToolDisplay, ...] = ()
    locations: tuple[ev.Location, ...] = ()
    raw_input: Any = None
    raw_output: Any = None


INTERRUPTED = ev.TextDisplay(INTERRUPTED_RESULT_TEXT)
"""What ends the card of a call that has no result: what the model is told of it."""

SPENT = {e: ToolResultBlock(tool_use_id="", is_error=e) for e in (False, True)}
"""What a replay keeps of a result once its call is shown: whether it failed."""


def failed(result: Result) -> bool:
    if isinstance(result, ToolResultBlock):
        return result.is_error
    return bool(result.get("is_error", False))


def result_block(result: Result) -> ToolResultBlock:
    """The model of `result` (a plain one's JSON value is a valid block: it was checked)."""
    if isinstance(result, ToolResultBlock):
        return result
    return result_from_dict(result)


def replayed_search(use: ServerToolUseBlock, result: WebSearchResultBlock | None) -> ReplayedCall:
    """A search the provider ran, as it was shown live: from its blocks alone."""
    succeeded, text = search_outcome(result)
    return ReplayedCall(
        tool_call_id=use.id,
        title=search_title(use),
        kind="search",
        status="completed" if succeeded else "failed",
        content=(ev.TextDisplay(text),),
        raw_input=use.input,
    )


def replayed_call(
    call_id: str,
    name: str,
    tool_input: dict[str, Any],
    snap: ToolCallSnapshot | None,
    result: ToolResultBlock | None,
    shown: str | None = None,
) -> ReplayedCall:
    """The call `call_id` (named `name`, made with `tool_input`) as a replay shows it
    (`shown`: a subagent's view, the card's content in place of the stored one)."""
    if snap is None:
        status: ev.ToolStatus = "failed"
        if result is not None and not result.is_error:
            status = "completed"
        content: tuple[ev.ToolDisplay, ...] = () if shown is None else (ev.TextDisplay(shown),)
        return ReplayedCall(
            tool_call_id=call_id,
            title=name,
            kind="other",
            status=status,
            content=content + interrupted_tail(result),
            raw_input=tool_input,
        )
    if shown is None:
        content = _replayed_displays(snap.content, result)
    else:
        content = (ev.TextDisplay(shown),)
    return ReplayedCall(
        tool_call_id=call_id,
        title=snap.title,
        kind=snap.kind,
        status=replayed_status(snap.status, result),
        content=content + interrupted_tail(result),
        locations=tuple(snap.locations),
        raw_input=snap.raw_input or tool_input,
        raw_output=snap.raw_output,
    )


def replayed_status(status: ev.ToolStatus, result: ToolResultBlock | None) -> ev.ToolStatus:
    """A stored call's status as a replay shows it: without a result in the history (the
    process died while it ran, or before its result was committed), `failed`, as the model is
    told it was interrupted; whatever was recorded last, a card must not spin forever."""
    return "failed" if result is None else status


def interrupted_tail(result: ToolResultBlock | None) -> tuple[ev.ToolDisplay, ...]:
    """What follows a card's content: `INTERRUPTED` when its call has no result."""
    return (INTERRUPTED,) if result is None else ()


def has_terminal(content: Sequence[ev.ToolDisplay]) -> bool:
    return any(isinstance(item, ev.TerminalDisplay) for item in content)


def stored_terminal(content: Sequence[Any]) -> bool:
    """Whether a stored call's content (`ToolCallRecord.content`) names a terminal: its card
    reads the result's text (`result_text`)."""
    return any(type(item) is dict and item.get("type") == "terminal" for item in content)


def _replayed_displays(
    content: Sequence[ev.ToolDisplay], result: ToolResultBlock | None
) -> tuple[ev.ToolDisplay, ...]:
    """`content` as a replay shows it: a terminal (released long ago) by what the command
    printed, else by the result the model read (`displays`, `replayed_output`)."""
    if not has_terminal(content):
        return tuple(content)
    printed = result_text(result)
    return tuple(
        ev.TextDisplay(item.output if item.output is not None else printed)
        if isinstance(item, ev.TerminalDisplay)
        else item
        for item in content
    )


def result_text(result: ToolResultBlock | None) -> str:
    """The text of a tool result, for a replayed terminal that recorded no output."""
    if result is None:
        return "(the command did not finish: its output was not recorded)"
    if isinstance(result.content, str):
        return result.content
    return "\n".join(getattr(part, "text", "") for part in result.content).strip()
