"""The values the session store keeps and returns, and the errors only the store raises.

Owns `SessionRecord` (a session's settings), `SubagentRecord` (one subagent run and its
messages), `ToolCallRecord` (what a replay shows of one tool
call), `StoredSession` (a loaded session), `InvalidCursor`, `CorruptSession`, the JSON form of
tool displays and locations, what the store keeps of an MCP server (`stored_mcp_server`), and
the store's timestamps (`now_iso`).

Invariants: every value here is frozen and knows nothing of SQL, so the protocol, the SQLite
implementation and the async door all speak the same types; display and location JSON round
trip losslessly (`tool_display_from_json(tool_display_to_json(d)) == d`), and reading JSON of a
kind this defect does not know raises `ValueError` naming it, never a bare `KeyError` (a newer
defect may have written it).

An MCP server is kept without its secrets (`stored_mcp_server`, applied to every write of the
`mcp_servers` column, `rows.dumps`): its name, transport and command; its arguments with
secret-looking values replaced (`redaction.redact_args`: `--token VALUE`, `--api-key=…`,
`ghp_…`, a long random string); the *names* of its `env` variables and headers, never their
values; its URL without user, password, query values or fragment (`redaction.redact_url`).
Nothing restarts a server from this record: `session/load` and `session/resume` get the
editor's `mcpServers` again and the configured servers are read again from the configuration,
so it is a note of which servers a session was opened with, for a person reading the database.

Why a module of their own: they are the layer every other part of the store imports
(docs/layers.md, "Inside the store package"), and callers (the runtime, the scripts) need them
without the database.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, get_args

from defect_core.errors import AgentError, StorageError
from defect_core.events import (
    DiffDisplay,
    ImageDisplay,
    Location,
    TerminalDisplay,
    TextDisplay,
    ToolCallStarted,
    ToolCallUpdated,
    ToolDisplay,
    ToolKind,
    ToolStatus,
)
from defect_core.log import get_logger
from defect_core.model import Message, PlainMessage
from defect_core.redaction import redact, redact_args, redact_url

log = get_logger("defect.store")

TOOL_STATUSES: Final = frozenset(get_args(ToolStatus))
TOOL_KINDS: Final = frozenset(get_args(ToolKind))


def now_iso() -> str:
    """The current time as the store writes it: ISO 8601, UTC, milliseconds (sortable)."""
    return iso(_dt.datetime.now(_dt.UTC))


def iso(moment: _dt.datetime) -> str:
    """`moment` as the store writes it (see `now_iso`)."""
    return moment.astimezone(_dt.UTC).isoformat(timespec="milliseconds")


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionRecord:
    """A session's settings: everything but its messages and tool calls."""

    id: str
    cwd: str
    provider: str
    model: str
    mode: str
    title: str | None = None
    created_at: str = field(default_factory=now_iso)
    updated_at: str = field(default_factory=now_iso)
    config: dict[str, str] = field(default_factory=dict)
    """Config option values other than mode and model, e.g. `{"reasoning_effort": "high"}`."""
    mcp_servers: list[dict[str, Any]] = field(default_factory=list)
    """The MCP servers the session was opened with, as `stored_mcp_server` keeps them."""
    permissions: dict[str, Any] = field(default_factory=dict)
    """Remembered "always" answers, `PermissionRules.to_dict()`: `{"allowed": [...], ...}`."""


def stored_mcp_server(entry: Mapping[str, Any]) -> dict[str, Any]:
    """What the store keeps of one MCP server (`name`, `transport`, and for stdio `command`,
    `args`, `env` names, for HTTP and SSE `url`, `headers` names): no secret of it (see the
    module). Idempotent, so a row written by an older defect can be passed through again."""
    kept: dict[str, Any] = {key: str(entry[key]) for key in ("name", "transport") if key in entry}
    if isinstance(command := entry.get("command"), str):
        kept["command"] = redact(command)
    if isinstance(args := entry.get("args"), list):
        kept["args"] = redact_args([str(arg) for arg in args])
    if isinstance(url := entry.get("url"), str):
        kept["url"] = redact_url(url)
    for names in ("env", "headers"):
        value = entry.get(names)
        if isinstance(value, Mapping):  # never written so, but never kept so either
            value = list(value)
        if isinstance(value, list):
            kept[names] = [_name_only(item) for item in value]
    return kept


def _name_only(item: object) -> str:
    """A variable's or header's name; `NAME=value` (a hand-made row) keeps `NAME`."""
    if isinstance(item, Mapping):
        item = item.get("name", "")
    return str(item).split("=", 1)[0]


@dataclass(frozen=True, slots=True, kw_only=True)
class FileCheckpointRecord:
    """The file checkpoint of one prompt (turn): `body` is `Checkpoint.to_json()`, kept
    opaque here (the store sits below the checkpoints package)."""

    session_id: str
    turn_id: str
    created_at: float
    finished: bool
    body: dict[str, Any]


SUBAGENT_STATUSES: Final = frozenset({"running", "completed", "failed", "cancelled"})


@dataclass(frozen=True, slots=True, kw_only=True)
class SubagentRecord:
    """One subagent run (`defect_core/agents/`), keyed by the parent's `spawn_agent` call:
    its profile, its task, how it ended (`running` after a kill: it never ended), and its own
    message log (`messages`: filled by `subagents`, ignored by `save_subagent`)."""

    session_id: str
    tool_call_id: str
    agent: str
    task: str
    status: str = "running"
    background: bool = False
    created_at: str = field(default_factory=now_iso)
    messages: tuple[Message, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCallRecord:
    """What a replay shows of one tool call: its last title, kind, status and content.

    `content` holds display items as JSON (`tool_display_to_json`), `locations` as
    `{"path", "line"}` dicts. Upserted as the turn progresses; the last write wins.
    """

    session_id: str
    tool_call_id: str
    title: str
    kind: ToolKind
    status: ToolStatus = "pending"
    content: list[dict[str, Any]] = field(default_factory=list)
    locations: list[dict[str, Any]] = field(default_factory=list)
    raw_input: dict[str, Any] = field(default_factory=dict)
    raw_output: Any = None

    @classmethod
    def started(cls, session_id: str, event: ToolCallStarted) -> ToolCallRecord:
        """The record of a tool call that has just been announced."""
        return cls(
            session_id=session_id,
            tool_call_id=event.tool_call_id,
            title=event.title,
            kind=event.kind,
            status=event.status,
            content=[tool_display_to_json(d) for d in event.content],
            locations=[location_to_json(loc) for loc in event.locations],
            raw_input=dict(event.raw_input),
        )

    def updated(self, event: ToolCallUpdated) -> ToolCallRecord:
        """This record with the fields `event` changes (its `None` fields change nothing)."""
        changes: dict[str, Any] = {}
        if event.status is not None:
            changes["status"] = event.status
        if event.title is not None:
            changes["title"] = event.title
        if event.content is not None:
            changes["content"] = [tool_display_to_json(d) for d in event.content]
        if event.locations is not None:
            changes["locations"] = [location_to_json(loc) for loc in event.locations]
        if event.raw_output is not None:
            changes["raw_output"] = event.raw_output
        return dataclasses.replace(self, **changes)

    def displays(self) -> tuple[ToolDisplay, ...]:
        """`content` as core display values; items of a kind this defect does not know are
        skipped (a newer defect may have written them)."""
        out: list[ToolDisplay] = []
        for item in self.content:
            try:
                out.append(tool_display_from_json(item))
            except ValueError:
                log.warning("tool_display_skipped", tool_call_id=self.tool_call_id, item=item)
        return tuple(out)

    def location_values(self) -> tuple[Location, ...]:
        return tuple(location_from_json(loc) for loc in self.locations)


@dataclass(frozen=True, slots=True)
class StoredSession:
    """A loaded session.

    `history` is what the session resumes from (compaction's last write-back + the messages
    appended after it); `transcript` is the full original log, for replay. Without any
    compaction the two are equal. A load hands both as `StoredMessages` (parsed when read).
    """

    record: SessionRecord
    history: Sequence[Message]
    transcript: Sequence[Message]
    tool_calls: dict[str, ToolCallRecord]
    """Every stored call's record, in stored order; empty from a load told not to keep them
    (`SessionStore.load`'s `calls`: they are read on demand, `SessionStore.tool_calls`)."""
    last_seq: int = 0
    """The seq of the session's own last message on its branch (0 for none)."""
    ids: list[tuple[str, int]] = field(default_factory=list)
    """Each transcript message's name: `(session id, seq)`; a fork's first messages are
    its origin's (`defect_core/store/tree.py`)."""


@dataclass(frozen=True, slots=True)
class BranchPart:
    """Some messages of a session's branch, oldest first, handed over by `SessionStore.load`
    (its `on_part`) as soon as they are decoded, before the load returns: a replay can send
    them while the rest is read. Every part carries the records of the calls its messages
    make (those stored), its own dict: once handed over, the load holds none of them (unless
    it returns them all: `calls`), so a replay keeps each only until it has shown it. A
    message is its JSON value when that is plain (`model.PlainMessage`, `is_plain_message`:
    no model is built for the replay), else the model."""

    messages: list[Message | PlainMessage]
    tool_calls: dict[str, ToolCallRecord]
    ids: list[tuple[str, int]] = field(default_factory=list)
    """Each message's name, `(session id, seq)`, as `StoredSession.ids` holds it."""


class InvalidCursor(AgentError):
    """A `list` cursor this store did not hand out."""

    code = "invalid_params"


class CorruptSession(StorageError):
    """A stored row of one session cannot be read. Other sessions are unaffected."""

    def __init__(self, message: str, session_id: str, where: str) -> None:
        super().__init__(message)
        self.session_id = session_id
        self.where = where


# --- display and location JSON --------------------------------------------------------------


def tool_display_to_json(display: ToolDisplay) -> dict[str, Any]:
    if isinstance(display, TextDisplay):
        return {"type": "text", "text": display.text}
    if isinstance(display, DiffDisplay):
        return {
            "type": "diff",
            "path": display.path,
            "old_text": display.old_text,
            "new_text": display.new_text,
        }
    if isinstance(display, TerminalDisplay):
        data = {"type": "terminal", "terminal_id": display.terminal_id}
        if display.output is not None:
            data["output"] = display.output
        return data
    if isinstance(display, ImageDisplay):
        return {"type": "image", "media_type": display.media_type, "data": display.data}
    raise TypeError(f"not a tool display: {display!r}")


def tool_display_from_json(data: dict[str, Any]) -> ToolDisplay:
    """The inverse of `tool_display_to_json`; `ValueError` names what is wrong."""
    try:
        kind = data["type"]
        if kind == "text":
            return TextDisplay(text=_str(data["text"]))
        if kind == "diff":
            old = data.get("old_text")
            return DiffDisplay(
                path=_str(data["path"]),
                old_text=None if old is None else _str(old),
                new_text=_str(data["new_text"]),
            )
        if kind == "terminal":
            output = data.get("output")
            return TerminalDisplay(
                terminal_id=_str(data["terminal_id"]),
                output=None if output is None else _str(output),
            )
        if kind == "image":
            return ImageDisplay(media_type=_str(data["media_type"]), data=_str(data["data"]))
    except (KeyError, TypeError) as exc:
        raise ValueError(f"not a tool display: {data!r} ({exc!r})") from None
    raise ValueError(f"unknown tool display type {kind!r}")


def location_to_json(location: Location) -> dict[str, Any]:
    return {"path": location.path, "line": location.line}


def location_from_json(data: dict[str, Any]) -> Location:
    try:
        line = data.get("line")
        if line is not None and (not isinstance(line, int) or isinstance(line, bool)):
            raise TypeError("line must be an integer")
        return Location(path=_str(data["path"]), line=line)
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"not a location: {data!r} ({exc!r})") from None


def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {type(value).__name__}")
    return value
