"""Typed events for everything a session does, and their per-session fan-out.

Owns the `AgentEvent` types and `EventBus`, and the values a question to the user is made of
(`Question`, `Choice`, `Answer`: a tool and an MCP server ask through the session with them).

Invariants:
- Every subscriber sees every event published after it subscribed, in publish order. A slow
  subscriber slows the publisher (bounded buffer, `publish` waits): back-pressure, never
  loss. A subscriber that has closed its stream is dropped.
- `publish` hands an event over without yielding to the loop while every buffer has room:
  the events of one network read (a fast stream's deltas) then reach a subscriber together,
  which sends them as one batch (`defect_acp/updates.py`), instead of one loop turn and one
  write each. Nothing waits for more events: the subscriber wakes as soon as the publisher
  next awaits (its next read), and order is kept either way.
- Events describe what happened in core terms (no ACP types): the ACP bridge projects them to
  `session/update`, the store persists from them, logging reads them.

Why a bus and not callbacks: the projection, the store and logging are independent
consumers with their own pace; each gets its own stream (docs/architecture.md, Events).
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio
from anyio.abc import ObjectReceiveStream
from anyio.streams.memory import MemoryObjectSendStream

from defect_core.model import ContentBlock, Message

ToolKind = Literal[
    "read", "edit", "delete", "move", "search", "execute", "think", "fetch", "switch_mode", "other"
]
ToolStatus = Literal["pending", "in_progress", "completed", "failed"]
TurnStopReason = Literal["end_turn", "max_tokens", "max_turn_requests", "refusal", "cancelled"]
PlanPriority = Literal["high", "medium", "low"]
PlanStatus = Literal["pending", "in_progress", "completed"]


# --- what tool calls show -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TextDisplay:
    text: str


@dataclass(frozen=True, slots=True)
class DiffDisplay:
    path: str
    old_text: str | None
    new_text: str


@dataclass(frozen=True, slots=True)
class TerminalDisplay:
    terminal_id: str
    output: str | None = None
    """What the command printed, once it ended (fenced, with its exit line): a replay after
    the terminal was released (or the process restarted) shows this instead of a dead id."""


@dataclass(frozen=True, slots=True)
class ImageDisplay:
    media_type: str
    data: str


ToolDisplay = TextDisplay | DiffDisplay | TerminalDisplay | ImageDisplay


@dataclass(frozen=True, slots=True)
class Location:
    path: str
    line: int | None = None


# --- events ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class UserPromptCommitted:
    """The user's prompt is in history (the first thing of a turn)."""

    message: Message


@dataclass(frozen=True, slots=True)
class MessageCommitted:
    """A message was appended to history (assistant replies and tool-result batches)."""

    message: Message


@dataclass(frozen=True, slots=True)
class SteerReceived:
    """The user wrote while a turn ran (`_session/steering`, `defect exec` stdin): the message
    is stored and waits for the turn's next safe point, where it joins the history as the
    user's text (`defect_core/session/steering.py`). Shown as the user's message at once."""

    content: tuple[ContentBlock, ...]


@dataclass(frozen=True, slots=True)
class AgentTextDelta:
    text: str


@dataclass(frozen=True, slots=True)
class AgentThoughtDelta:
    text: str


@dataclass(frozen=True, slots=True)
class ToolCallStarted:
    tool_call_id: str
    name: str
    title: str
    kind: ToolKind
    raw_input: dict[str, Any]
    locations: tuple[Location, ...] = ()
    content: tuple[ToolDisplay, ...] = ()
    status: ToolStatus = "pending"


@dataclass(frozen=True, slots=True)
class ToolCallUpdated:
    """A change to a started tool call; fields left `None` are unchanged."""

    tool_call_id: str
    status: ToolStatus | None = None
    title: str | None = None
    content: tuple[ToolDisplay, ...] | None = None
    locations: tuple[Location, ...] | None = None
    raw_output: Any = None


@dataclass(frozen=True, slots=True)
class PermissionOption:
    option_id: str
    name: str
    kind: Literal["allow_once", "allow_always", "reject_once", "reject_always"]


@dataclass(frozen=True, slots=True)
class PermissionRequested:
    """The turn waits for `Session.resolve_permission(tool_call_id, ...)`."""

    tool_call_id: str
    title: str
    kind: ToolKind
    raw_input: dict[str, Any]
    options: tuple[PermissionOption, ...]
    content: tuple[ToolDisplay, ...] = ()
    locations: tuple[Location, ...] = ()


# --- questions to the user (`ask_user`, an MCP server's elicitation) --------------------


@dataclass(frozen=True, slots=True)
class Choice:
    """One answer a question offers: its label (what the answer is) and what it means."""

    label: str
    description: str | None = None


@dataclass(frozen=True, slots=True)
class Question:
    """Something the user is asked, in core terms; the front end picks how it is shown.

    `kind`: `choice` (the model's `ask_user`: `choices`, free text if `free_text`), `form`
    (an MCP server's form: `schema`, the JSON Schema of a flat object) or `url` (an MCP
    server's page to open: `url`, `elicitation_id`). `source` names the MCP server that
    asks (None: the model); `tool_call_id` the call it belongs to (None: none is running)."""

    message: str
    kind: Literal["choice", "form", "url"]
    question_id: str = ""
    """Set by the session when it is asked (`session/questions.py`), unique in it."""
    tool_call_id: str | None = None
    source: str | None = None
    choices: tuple[Choice, ...] = ()
    free_text: bool = False
    schema: dict[str, Any] | None = None
    url: str | None = None
    elicitation_id: str | None = None


@dataclass(frozen=True, slots=True)
class Answer:
    """What came of a `Question`.

    `action`: `accept` (with `content`: a form's values; a choice question's `choice` label
    and/or free `text`), `decline` (the user said no), `cancel` (dismissed), or, when the user
    never saw or answered it, `unavailable` (no one to ask, or the front end cannot show it),
    `timeout` or `failed` (the front end's error). `detail` says why, in words; `via` how it
    was shown (`form`, `url`, `options`: as a permission question's buttons, so without free
    text)."""

    action: Literal["accept", "decline", "cancel", "unavailable", "timeout", "failed"]
    content: dict[str, Any] | None = None
    detail: str | None = None
    via: Literal["form", "url", "options"] | None = None


Ask = Callable[[Question], Awaitable[Answer]]
"""How a tool (or an MCP server's request) asks the session's user (`session/questions.py`)."""


@dataclass(frozen=True, slots=True)
class QuestionAsked:
    """The asker waits for `Session.answer_question(question.question_id, ...)`."""

    question: Question


@dataclass(frozen=True, slots=True)
class QuestionWithdrawn:
    """A question no longer waits (its turn was cancelled, or it timed out): the front end
    stops asking it."""

    question_id: str


@dataclass(frozen=True, slots=True)
class ElicitationCompleted:
    """An MCP server says the page it asked the user to open (`Question.kind == "url"`) is
    done with: the front end may tell the editor (`elicitation/complete`)."""

    elicitation_id: str


@dataclass(frozen=True, slots=True)
class UsageReported:
    used: int
    size: int
    cost_usd: float | None = None


@dataclass(frozen=True, slots=True)
class ModeChanged:
    mode_id: str


@dataclass(frozen=True, slots=True)
class ConfigChanged:
    """A config option changed (model, mode, reasoning effort)."""

    option_id: str
    value: str


@dataclass(frozen=True, slots=True)
class TitleChanged:
    title: str
    updated_at: str | None = None
    """When the session was named (ISO 8601, UTC); None: not said."""


def message_id(session_id: str, seq: int) -> str:
    """A stored message's id as a front end shows it (ACP's `messageId`): the session whose
    log holds it and its number there (a fork's first messages are its origin's), so it is
    unique within a session, never reused, and the same live and replayed."""
    return f"{session_id}:{seq}"


@dataclass(frozen=True, slots=True)
class NextMessageId:
    """The id the next message will be stored under (`message_id`): what the model streams
    until the next commit belongs to it. Published after every commit (the store numbers a
    session's messages in order, `defect_core/store/sqlite.py`); a reply that is never
    committed (a failed turn) stores nothing, and its id goes to the next prompt."""

    message_id: str


@dataclass(frozen=True, slots=True)
class CommandOffer:
    """A slash command as a front end offers it: its name (without the `/`), what it does,
    and what to type after it (None: nothing)."""

    name: str
    description: str
    hint: str | None = None


@dataclass(frozen=True, slots=True)
class CommandsChanged:
    commands: tuple[CommandOffer, ...]
    """Every slash command the session offers, built-in first."""


@dataclass(frozen=True, slots=True)
class Notice:
    """Something the user should read that is not model output (a failed MCP server…)."""

    text: str
    level: Literal["info", "warning", "error"] = "info"


@dataclass(frozen=True, slots=True)
class PlanEntry:
    """One step of the agent's plan (`tools/plan.py`), as ACP's plan shows it."""

    content: str
    priority: PlanPriority
    status: PlanStatus


@dataclass(frozen=True, slots=True)
class PlanUpdated:
    """The agent's plan, whole (an update replaces the previous plan; empty: no plan)."""

    entries: tuple[PlanEntry, ...]


@dataclass(frozen=True, slots=True)
class TurnUsage:
    """What a turn's model requests consumed: tokens summed over them, and how many ran."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_input_tokens: int = 0
    cache_creation_input_tokens: int = 0
    requests: int = 0


@dataclass(frozen=True, slots=True)
class TurnEnded:
    turn: int
    stop_reason: TurnStopReason
    usage: TurnUsage | None = None
    """None when the turn has no result to count (a slash command, a cancelled turn)."""


@dataclass(frozen=True, slots=True)
class TurnFailed:
    """The turn stopped on an error the runtime raised (an `errors.AgentError`; from the turn
    runner, `errors.TurnError`): the last event of that turn, as `TurnEnded` is of a turn
    that ended normally."""

    turn: int
    message: str
    data: dict[str, Any] = field(default_factory=dict)


AgentEvent = (
    UserPromptCommitted
    | MessageCommitted
    | SteerReceived
    | AgentTextDelta
    | AgentThoughtDelta
    | ToolCallStarted
    | ToolCallUpdated
    | PermissionRequested
    | QuestionAsked
    | QuestionWithdrawn
    | ElicitationCompleted
    | UsageReported
    | ModeChanged
    | ConfigChanged
    | TitleChanged
    | NextMessageId
    | CommandsChanged
    | Notice
    | PlanUpdated
    | TurnEnded
    | TurnFailed
)

_BUFFER = 256


class EventBus:
    """Fan-out of a session's events to any number of subscribers."""

    def __init__(self, buffer: int = _BUFFER) -> None:
        self._buffer = buffer
        self._subscribers: list[MemoryObjectSendStream[AgentEvent]] = []
        self._closed = False

    def subscribe(self) -> ObjectReceiveStream[AgentEvent]:
        """A new stream of every event from now on. Close it (or `aclose`) to leave."""
        send, receive = anyio.create_memory_object_stream[AgentEvent](
            self._buffer if self._buffer > 0 else math.inf
        )
        if self._closed:
            send.close()
        else:
            self._subscribers.append(send)
        return receive

    async def publish(self, event: AgentEvent) -> None:
        for send in list(self._subscribers):
            try:
                try:
                    send.send_nowait(event)  # room in the buffer: no loop turn per event
                except anyio.WouldBlock:
                    await send.send(event)  # full: wait for the subscriber (back-pressure)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                self._drop(send)

    def close(self) -> None:
        """End every subscriber's stream (the session is closing)."""
        self._closed = True
        for send in self._subscribers:
            send.close()
        self._subscribers.clear()

    def _drop(self, send: MemoryObjectSendStream[AgentEvent]) -> None:
        if send in self._subscribers:
            self._subscribers.remove(send)
            send.close()
