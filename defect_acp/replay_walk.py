"""The replay walk: a stored conversation as the `session/update`s a client saw live.

Owns `ReplayWalk` (the conversation fed a part at a time, as `session/load` reads it, each
shown piece made as soon as what it shows is known), `iter_replay` (the same over a whole
transcript), `ReplayView` (what each piece becomes) and `UpdateModels`, the view that builds
the schema's models (the reference `defect_acp/replay_lines.py` writes the lines of).

Invariant: the pieces are the same, in the same order, however the conversation is cut into
parts and whether a message comes as the model or as its JSON value; a tool call is shown
once its result is known (or at the end), with its last stored state (`replayed.py`).

Why apart from `projection.py`: that module is the live projection, event by event; this is the
walk over a stored conversation, with its own ordering rule (a card waits for its result).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from acp import schema as s
from acp.helpers import update_agent_message_text, update_agent_thought_text

from defect_acp.projection import SHOWN_BY_THEIR_EVENT, Update, displays, locations
from defect_acp.replayed import (
    SPENT,
    ReplayedCall,
    Result,
    StoredCalls,
    failed,
    has_terminal,
    replayed_call,
    replayed_search,
    result_block,
    stored_terminal,
)
from defect_core.model import (
    ImageBlock,
    Message,
    PlainMessage,
    ServerToolUseBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    WebSearchResultBlock,
)
from defect_core.session import ToolCallSnapshot

if TYPE_CHECKING:
    from defect_core.store import ToolCallRecord

T_co = TypeVar("T_co", covariant=True)
T = TypeVar("T")


class ReplayView(Protocol[T_co]):
    """What each shown piece of a replayed conversation becomes: the schema's update models
    (`UpdateModels`, the reference) or, for a long replay, its protocol lines straight
    (`defect_acp/replay_lines.py`, which must write what `update_line` writes of the model)."""

    def user_text(self, text: str) -> T_co: ...

    def user_image(self, block: ImageBlock) -> T_co: ...

    def agent_text(self, text: str) -> T_co: ...

    def thought(self, text: str) -> T_co: ...

    def tool_call(self, call: ReplayedCall) -> T_co: ...

    def stored_call(
        self,
        record: ToolCallRecord,
        tool_input: Any,
        result: ToolResultBlock | None,
        shown: str | None,
        call: Callable[[], ReplayedCall],
    ) -> T_co:
        """`tool_call(call())`, which a view may make from the call's stored `record` (as
        `replayed_call` shows its snapshot; `shown`: a subagent's view, the card's content)."""
        ...


class UpdateModels:
    """The `ReplayView` that builds each update with the schema's models."""

    def user_text(self, text: str) -> Update:
        return _user_chunk(s.TextContentBlock(type="text", text=text))

    def user_image(self, block: ImageBlock) -> Update:
        image = s.ImageContentBlock(
            type="image", data=block.data or "", mime_type=block.media_type or "", uri=block.url
        )
        return _user_chunk(image)

    def agent_text(self, text: str) -> Update:
        return update_agent_message_text(text)

    def thought(self, text: str) -> Update:
        return update_agent_thought_text(text)

    def tool_call(self, call: ReplayedCall) -> Update:
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
    ) -> Update:
        return self.tool_call(call())


def replay_updates(
    transcript: Sequence[Message],
    tool_calls: Mapping[str, ToolCallSnapshot],
    subagents: dict[str, str] | None = None,
) -> list[Update]:
    """The whole conversation as the updates a client saw live, in order (a list)."""
    return list(iter_replay_updates(transcript, tool_calls, subagents))


def iter_replay_updates(
    transcript: Sequence[Message],
    tool_calls: Mapping[str, ToolCallSnapshot],
    subagents: dict[str, str] | None = None,
) -> Iterator[Update]:
    """`iter_replay` as the schema's update models."""
    return iter_replay(transcript, tool_calls, UpdateModels(), subagents)


def iter_replay(
    transcript: Sequence[Message],
    tool_calls: Mapping[str, ToolCallSnapshot],
    view: ReplayView[T_co],
    subagents: dict[str, str] | None = None,
) -> Iterator[T_co]:
    """The whole conversation as the updates a client saw live, in order, each made (by
    `view`) only when it is asked for (a long session's replay is sent while it is being
    projected).

    User text and images, agent text and thoughts, every tool call with its title, kind,
    last known status and content (diffs included), and every search the provider ran (from
    its blocks: query, hits or error). A call that never got a result (the
    process was killed while it ran) is shown `failed`, saying it was interrupted and no
    result was recorded (`replayed.py`): final, as the model is told, never a spinner. A
    `spawn_agent` call shows what its subagent did, from the subagent's own stored transcript
    (`subagents`: its view by call id), also when the process died while it worked. An
    `update_plan` call shows no card (`SHOWN_BY_THEIR_EVENT`) unless it was refused; the plan
    itself follows the history (`updates.replay`).
    """
    walk = ReplayWalk(tool_calls, view, subagents)
    walk.know(transcript)  # every result first: nothing waits
    yield from walk.feed(transcript)
    yield from walk.finish()


class ReplayWalk(Generic[T]):
    """`iter_replay` fed the conversation a part at a time, as a load reads it: each piece
    is made as soon as what it shows is known. A tool call's card needs its result (its final
    status, a refused `update_plan`): it waits for the part that holds the result — and,
    to keep the order, so does every piece after it — or for `finish` (a call that never got
    one is shown as `iter_replay` shows it). The pieces are the same, in the same order, however
    the conversation is cut into parts, and whether a message comes as the model or as its
    JSON value (`PlainMessage`, as a load hands most over: its blocks are read as dicts)."""

    def __init__(
        self,
        tool_calls: Mapping[str, ToolCallSnapshot],
        view: ReplayView[T],
        subagents: Mapping[str, str] | None = None,
    ) -> None:
        self._tool_calls = tool_calls
        self._record = tool_calls.record if isinstance(tool_calls, StoredCalls) else None
        self._view = view
        self._subagents = subagents or {}
        self._results: dict[str, Result] = {}
        self._searches: dict[str, WebSearchResultBlock] = {}
        self._held: deque[tuple[str, Any]] = deque()  # (role, a block or a plain one's dict)

    def know(self, messages: Iterable[Message | PlainMessage]) -> None:
        """Take note of the results in `messages` (what the calls before them wait for)."""
        for m in messages:
            self._know(m["content"] if type(m) is dict else m.content)  # type: ignore[union-attr]

    def _know(self, content: Iterable[Any]) -> None:
        results = self._results
        for b in content:
            if type(b) is dict:
                if b["type"] == "tool_result":
                    results[b["tool_use_id"]] = b
            elif isinstance(b, ToolResultBlock):
                results[b.tool_use_id] = b
            elif isinstance(b, WebSearchResultBlock):
                self._searches[b.tool_use_id] = b

    def feed(self, messages: Iterable[Message | PlainMessage]) -> Iterator[T]:
        """The pieces of the next `messages` that can be made now, and of those held before."""
        held, know, waits, piece_of = self._held, self._know, self._waits, self._piece
        for message in messages:
            if type(message) is dict:
                role, content = message["role"], message["content"]
            else:
                role, content = message.role, message.content  # type: ignore[union-attr]
            know(content)
            if held:
                yield from self._release(final=False)
            for block in content:
                if held or waits(role, block):
                    held.append((role, block))
                elif (piece := piece_of(role, block)) is not HIDDEN:
                    yield piece  # type: ignore[misc]

    def finish(self) -> Iterator[T]:
        """Whatever is still held: the conversation ended before its results."""
        yield from self._release(final=True)

    def _waits(self, role: str, block: Any) -> bool:
        if role == "user":
            return False
        if type(block) is dict:
            return block["type"] == "tool_use" and block["id"] not in self._results
        if isinstance(block, ToolUseBlock):
            return block.id not in self._results
        if isinstance(block, ServerToolUseBlock):
            return block.id not in self._searches
        return False

    def _release(self, *, final: bool) -> Iterator[T]:
        held, waits, piece_of = self._held, self._waits, self._piece
        while held and (final or not waits(*held[0])):
            if (piece := piece_of(*held.popleft())) is not HIDDEN:
                yield piece  # type: ignore[misc]

    def _piece(self, role: str, block: Any) -> T | _Hidden:
        """What `block` shows (made by the view), or `HIDDEN`."""
        view = self._view
        if type(block) is dict:  # a plain block (`is_plain_message`)
            kind = block["type"]
            if kind == "text":
                return (
                    view.user_text(block["text"])
                    if role == "user"
                    else view.agent_text(block["text"])
                )
            if role == "user":
                return HIDDEN
            if kind == "thinking":
                return view.thought(block["thinking"])
            if kind == "tool_use":
                return self._call(block["id"], block["name"], block.get("input", {}))
            return HIDDEN
        if role == "user":
            if isinstance(block, TextBlock):
                return view.user_text(block.text)
            if isinstance(block, ImageBlock):
                return view.user_image(block)
        elif isinstance(block, TextBlock):
            return view.agent_text(block.text)
        elif isinstance(block, ThinkingBlock):
            return view.thought(block.thinking)
        elif isinstance(block, ToolUseBlock):
            return self._call(block.id, block.name, block.input)
        elif isinstance(block, ServerToolUseBlock):
            return view.tool_call(replayed_search(block, self._searches.get(block.id)))
        return HIDDEN

    def _call(self, call_id: str, name: str, tool_input: dict[str, Any]) -> T | _Hidden:
        known = self._results.get(call_id)
        failure = known is not None and failed(known)
        if name in SHOWN_BY_THEIR_EVENT and not failure:
            return HIDDEN
        record = None if self._record is None else self._record(call_id)
        snap = None if record is not None else self._tool_calls.get(call_id)
        if record is not None:  # a terminal's card reads the result's text
            terminal = stored_terminal(record.content)
        else:
            terminal = snap is not None and has_terminal(snap.content)
        result = None if known is None else result_block(known) if terminal else SPENT[failure]
        if known is not None and not terminal:
            # Shown: only whether it failed is asked again (a load would keep every result's
            # text alive until the end).
            self._results[call_id] = SPENT[failure]
        shown = self._subagents.get(call_id)
        if record is not None:  # the card is written from the record as it is stored
            return self._view.stored_call(
                record,
                tool_input,
                result,
                shown,
                lambda: self._replayed(call_id, name, tool_input, None, result, shown),
            )
        return self._view.tool_call(self._replayed(call_id, name, tool_input, snap, result, shown))

    def _replayed(
        self,
        call_id: str,
        name: str,
        tool_input: dict[str, Any],
        snap: ToolCallSnapshot | None,
        result: ToolResultBlock | None,
        shown: str | None,
    ) -> ReplayedCall:
        """The call as a replay shows it, from its snapshot (looked up when not given)."""
        if snap is None:
            snap = self._tool_calls.get(call_id)
        return replayed_call(call_id, name, tool_input, snap, result, shown)


class _Hidden:
    """What a block a replay does not show makes (`ReplayWalk._piece`)."""


HIDDEN = _Hidden()


def _user_chunk(content: Any) -> s.UserMessageChunk:
    return s.UserMessageChunk(session_update="user_message_chunk", content=content)
