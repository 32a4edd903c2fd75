"""Rows ⇄ records: what the SQLite store writes into a column, and how it reads rows back.

Owns the JSON a column holds (`dumps`, `message_json`), the `list` cursor (`encode_cursor`,
`decode_cursor`) and `session_from_rows`, which turns the rows of one session into a
`StoredSession` (history = compaction's last write-back + the messages after it;
transcript = the log).

Invariants: nothing here runs SQL (`session_from_rows` reads the rows it is handed, cursors
included: `SqliteStore.load` hands them over inside its read transaction, so a long session's
bodies are checked one by one as they are read); the messages a load returns are the bodies
as read (`StoredMessages`: each parsed again when first read, the parse checked here), and
the messages parsed for `on_part`, with the records of the calls they make, are the replay's
alone, dropped once shown (the load keeps records only when it returns them all); a
value that cannot be written is a `StorageError` before any transaction starts; a row that
cannot be read raises `CorruptSession` naming the session and the row (`message row seq 7`,
`tool call row 'tc_1' (content)`) and changes nothing on disk (handed to `on_part`, the
parts before it have gone already: the load still fails); a part is handed over only once the
tool calls its messages make are parsed; a tool kind this defect does not
know loads as "other" (a newer defect may have written it).

Parsing runs with Python's cycle collector paused, and what it made is frozen out of the
collector's reach afterwards (`collector_paused`): a long session is millions of objects,
and each collection on the way would walk them all again.

Why apart from `sqlite.py`: the SQL and the parsing change for different reasons, and the
parsing is the slow part of a load, worth reading on its own.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic_core import from_json

from defect_core.errors import StorageError
from defect_core.log import get_logger
from defect_core.model import (
    Message,
    MessageFormatError,
    PlainMessage,
    ToolUseBlock,
    is_plain_message,
    message_from_json,
    message_to_json,
)
from defect_core.store.records import (
    TOOL_KINDS,
    TOOL_STATUSES,
    BranchPart,
    CorruptSession,
    InvalidCursor,
    SessionRecord,
    StoredSession,
    SubagentRecord,
    ToolCallRecord,
    stored_mcp_server,
)
from defect_core.stored_messages import Cell, StoredMessages, collector_paused

log = get_logger("defect.store")

FIRST_PART = 32
"""Messages in the first `BranchPart` of a load: few, so a replay starts at once..."""
LAST_PART = 1024
"""...then each part twice the one before, up to this many: the messages parsed for the
replay (and their calls' records) are alive only a few parts at a time
(`defect_core/store/door.py`, `PARTS_AHEAD`), whatever the session's length."""
LOOKUP_BATCH = 500
"""Tool calls looked up by id at once (well under SQLite's limit on parameters)."""


def dumps(value: Any, name: str) -> str:
    """`value` as the compact JSON a column holds (`mended`); `StorageError` naming `name` if
    not JSON. The `mcp_servers` column keeps each server as `records.stored_mcp_server` does,
    whoever writes it: no secret of a server reaches the disk."""
    if name == "mcp_servers" and isinstance(value, list):
        value = [stored_mcp_server(s) for s in value if isinstance(s, Mapping)]
    try:
        return mended(json.dumps(value, ensure_ascii=False, separators=(",", ":")))
    except (TypeError, ValueError) as exc:
        raise StorageError(f"cannot store {name}: not JSON ({exc})") from None


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def mended(text: str) -> str:
    """`text` with each lone surrogate as U+FFFD: a file name that is not UTF-8 reaches Python
    with them (`surrogateescape`), and SQLite cannot store such a string. For what a replay
    shows (tool-call titles, content, inputs); the front end would show U+FFFD anyway."""
    return text if text.isascii() else _LONE_SURROGATE.sub("\ufffd", text)


def message_json(message: Message) -> str:
    try:
        return message_to_json(message)
    except Exception as exc:  # pydantic's serialisation errors have no common public base
        raise StorageError(f"cannot store a {message.role} message: not JSON ({exc})") from None


def encode_cursor(updated_at: str, session_id: str) -> str:
    raw = json.dumps([updated_at, session_id], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[str, str]:
    """The (updated_at, id) an `encode_cursor` cursor holds; `InvalidCursor` for any other."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        updated_at, session_id = json.loads(raw)
        if isinstance(updated_at, str) and isinstance(session_id, str):
            return updated_at, session_id
    except (ValueError, TypeError, binascii.Error):
        pass
    raise InvalidCursor(f"invalid session list cursor {cursor!r}")


def corrupt(path: Path, session_id: str, where: str, detail: str) -> CorruptSession:
    """The error (logged) for a row of the session that cannot be read."""
    text = (
        f"session {session_id!r} cannot be loaded: {where} in {path} is not "
        f"readable ({detail}); the row was left as it is"
    )
    log.error("store_corrupt_row", session_id=session_id, where=where, detail=detail)
    return CorruptSession(text, session_id, where)


def session_from_rows(
    path: Path,
    session_id: str,
    row: tuple[Any, ...],
    branch: Iterable[tuple[int, str, int, bytes]],
    cut: Callable[[], int | None],
    checkpoint_rows: list[tuple[int, bytes]],
    tool_rows: Callable[[Sequence[str] | None], Iterable[tuple[Any, ...]]],
    on_part: Callable[[BranchPart], None] | None = None,
    calls: bool = True,
) -> StoredSession:
    """The session the rows of `SqliteStore.load` hold (`path` is named in errors); its
    branch is also handed to `on_part`, part by part, as it is decoded (`BranchPart`). Its
    `tool_calls` are every stored call's record, or none without `calls` (each row is still
    read and checked)."""
    with collector_paused():
        return _session_from_rows(
            path, session_id, row, branch, cut, checkpoint_rows, tool_rows, on_part, calls
        )


def _session_from_rows(
    path: Path,
    session_id: str,
    row: tuple[Any, ...],
    branch: Iterable[tuple[int, str, int, bytes]],
    cut: Callable[[], int | None],
    checkpoint_rows: list[tuple[int, bytes]],
    tool_rows: Callable[[Sequence[str] | None], Iterable[tuple[Any, ...]]],
    on_part: Callable[[BranchPart], None] | None,
    calls: bool,
) -> StoredSession:

    def corrupt_here(where: str, detail: str) -> CorruptSession:
        return corrupt(path, session_id, where, detail)

    def parse_json(blob: bytes | None, where: str) -> Any:
        try:  # pydantic-core's reader: the same values as `json.loads`, several times faster
            return None if blob is None else from_json(blob)
        except ValueError as exc:
            raise corrupt_here(where, str(exc)) from None

    def parse_message(blob: bytes, where: str) -> Message:
        try:
            return message_from_json(blob)
        except MessageFormatError as exc:
            raise corrupt_here(where, str(exc)) from None

    def read_message(blob: bytes, owner: str, seq: int) -> Message | PlainMessage:
        """A row as the replay reads it: its JSON value when that is a plain message (most
        are: no model is built), else the model, which names what is wrong with a row that
        is not a message."""
        try:  # keys only: a value cache costs more than it saves on a message read once
            data = from_json(blob, cache_strings="keys")
        except ValueError:
            data = None
        if is_plain_message(data):
            return data
        where = f"message row seq {seq}" + ("" if owner == session_id else f" of {owner!r}")
        return parse_message(blob, where)

    config = parse_json(row[8], "the session row (config)")
    mcp_servers = parse_json(row[9], "the session row (mcp_servers)")
    permissions = parse_json(row[10], "the session row (permissions)")
    for name, value, kind in (
        ("config", config, dict),
        ("mcp_servers", mcp_servers, list),
        ("permissions", permissions, dict),
    ):
        if not isinstance(value, kind):
            raise corrupt_here(f"the session row ({name})", f"not a JSON {kind.__name__}")
    record = SessionRecord(
        id=row[0],
        cwd=row[1],
        title=row[2],
        created_at=row[3],
        updated_at=row[4],
        provider=row[5],
        model=row[6],
        mode=row[7],
        config=config,
        mcp_servers=mcp_servers,
        permissions=permissions,
    )

    def parse_tool_call(found: tuple[Any, ...]) -> ToolCallRecord:
        return tool_call_from_row(path, session_id, found)

    ahead: dict[str, ToolCallRecord] = {}  # read for the parts, not yet handed over
    kept: dict[str, ToolCallRecord] = {}  # every call in stored order, when returned (`calls`)
    in_order = iter(tool_rows(None))  # every call, in stored order, read as the parts need

    def take(found: tuple[Any, ...], for_parts: bool) -> str:
        """A row read in stored order: parsed (a corrupt one fails the load even when no
        message makes its call), kept for the parts to come and for the load's result."""
        record = parse_tool_call(found)
        if for_parts:
            ahead[record.tool_call_id] = record
        if calls:
            kept[record.tool_call_id] = record
        return record.tool_call_id

    def hand_over(part: list[Message | PlainMessage]) -> None:
        """A part to `on_part`, once the stored state of every call it makes is parsed (the
        replay shows a call by it), with those records only: once handed over, the load
        holds them no longer (unless it returns them: `calls`). Calls are stored in the
        order they are made, so those are read on in stored order; the few not among the
        next rows are looked up by id."""
        assert on_part is not None
        made = [call_id for m in part for call_id in _calls_made(m)]
        missing = {call_id for call_id in made if call_id not in ahead}
        for _ in range(len(missing) + LOOKUP_BATCH if missing else 0):
            found = next(in_order, None)
            if found is None:  # every row read: the rest have none
                missing.clear()
                break
            missing.discard(take(found, True))
            if not missing:
                break
        wanted = [call_id for call_id in missing if call_id not in ahead]
        for n in range(0, len(wanted), LOOKUP_BATCH):
            for found in tool_rows(wanted[n : n + LOOKUP_BATCH]):
                record = parse_tool_call(found)
                ahead[record.tool_call_id] = record
        records = {call_id: ahead.pop(call_id) for call_id in made if call_id in ahead}
        on_part(BranchPart(part, records, ids[len(ids) - len(part) :]))

    cells: list[Cell] = []  # the bodies, kept as read: parsed again when read (`StoredMessages`)
    part: list[Message | PlainMessage] = []  # what goes to `on_part` next
    ids: list[tuple[str, int]] = []
    owners: dict[str, str] = {session_id: session_id}  # one string per owner, not per row
    last_seq = 0
    size = FIRST_PART
    for _node, owner, seq, blob in branch:
        message = read_message(blob, owner, seq)  # so that a row that cannot be is named now
        cells.append(blob)
        ids.append((owners.setdefault(owner, owner), seq))
        if owner == session_id:
            last_seq = seq
        if on_part is not None:
            part.append(message)
            if len(part) >= size:
                hand_over(part)
                part, size = [], min(size * 2, LAST_PART)
    if on_part is not None and part:
        hand_over(part)
    ahead.clear()  # calls no message of the branch makes (a rewind left them behind)
    for found in in_order:
        take(found, False)
    tool_calls = kept  # every call, in stored order: `take` sees the rows in that order
    transcript = StoredMessages(cells)
    covered = cut()  # once the branch is read: its nodes are known then
    if covered is None:
        history = transcript.copy()
    else:
        checkpoint = [
            parse_message(blob, f"checkpoint row pos {pos}") for pos, blob in checkpoint_rows
        ]
        history = StoredMessages(cells, covered, head=checkpoint)

    return StoredSession(
        record=record,
        history=history,
        transcript=transcript,
        tool_calls=tool_calls,
        last_seq=last_seq,
        ids=ids,
    )


def tool_call_from_row(path: Path, session_id: str, found: tuple[Any, ...]) -> ToolCallRecord:
    """The record a `tool_calls` row holds (`tool_call_id, title, kind, status, content,
    locations, raw_input, raw_output`, the JSON columns as bytes); `CorruptSession` naming
    the row and its column when one cannot be read."""
    tc_id, title, kind, status, content, locations, raw_input, raw_output = found
    where = f"tool call row {tc_id!r}"

    def parse_json(blob: bytes | None, column: str) -> Any:
        try:
            return None if blob is None else from_json(blob)
        except ValueError as exc:
            raise corrupt(path, session_id, f"{where} ({column})", str(exc)) from None

    content_v = parse_json(content, "content")
    locations_v = parse_json(locations, "locations")
    raw_input_v = parse_json(raw_input, "raw_input")
    if not isinstance(content_v, list) or not isinstance(locations_v, list):
        raise corrupt(path, session_id, where, "content and locations must be JSON lists")
    if not isinstance(raw_input_v, dict):
        raise corrupt(path, session_id, where, "raw_input must be a JSON object")
    if status not in TOOL_STATUSES:
        raise corrupt(path, session_id, where, f"unknown status {status!r}")
    return ToolCallRecord(
        session_id=session_id,
        tool_call_id=tc_id,
        title=title,
        kind=kind if kind in TOOL_KINDS else "other",  # a kind a newer defect knows
        status=status,
        content=content_v,
        locations=locations_v,
        raw_input=raw_input_v,
        raw_output=parse_json(raw_output, "raw_output"),
    )


def _calls_made(message: Message | PlainMessage) -> Iterator[str]:
    """The ids of the tool calls `message` makes."""
    if isinstance(message, Message):
        return (b.id for b in message.content if isinstance(b, ToolUseBlock))
    return (b["id"] for b in message["content"] if b["type"] == "tool_use")


def subagents_from_rows(
    path: Path,
    session_id: str,
    runs: list[tuple[Any, ...]],
    logged: list[tuple[str, int, bytes]],
) -> list[SubagentRecord]:
    """The subagent runs `SqliteStore.subagents` read, each with its messages in order."""
    messages: dict[str, list[Message]] = {}
    for tool_call_id, seq, blob in logged:
        try:
            message = message_from_json(blob)
        except MessageFormatError as exc:
            where = f"subagent message {tool_call_id}#{seq}"
            log.error("store_corrupt_row", session_id=session_id, where=where, detail=str(exc))
            raise CorruptSession(
                f"session {session_id!r}: {where} in {path} is not readable ({exc})",
                session_id,
                where,
            ) from None
        messages.setdefault(tool_call_id, []).append(message)
    return [
        SubagentRecord(
            session_id=session_id,
            tool_call_id=tool_call_id,
            agent=agent,
            task=task,
            status=status,
            background=bool(background),
            created_at=created_at,
            messages=tuple(messages.get(tool_call_id, ())),
        )
        for tool_call_id, agent, task, status, background, created_at in runs
    ]


def plan_from_row(path: Path, session_id: str, blob: bytes) -> list[dict[str, Any]]:
    """The JSON list of plan entries `SqliteStore.plan` read; what each entry holds is the
    session's to judge (`defect_core/session/plan.py`)."""
    try:
        plan = json.loads(blob)
    except (ValueError, UnicodeDecodeError) as exc:
        plan, detail = None, str(exc)
    else:
        detail = "not a JSON list"
    if not isinstance(plan, list):
        where = "the session's plan"
        log.error("store_corrupt_row", session_id=session_id, where=where, detail=detail)
        raise CorruptSession(
            f"session {session_id!r}: {where} in {path} is not readable ({detail})",
            session_id,
            where,
        )
    return plan
