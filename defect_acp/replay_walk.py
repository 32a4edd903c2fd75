"""The replay walk: a stored conversation as the `session/update`s a client saw live.

Owns `ReplayWalk` (the conversation fed a part at a time, as `session/load` reads it, each
shown piece made as soon as what it shows is known), `iter_replay` (the same over a whole
transcript) and `ReplayView` (what each piece becomes: its protocol line,
`defect_acp/replay_lines.py`, each card made by the one projection of a tool call,
`defect_acp/cards.py`; tests hold the schema's models to it).

Invariant: the pieces are the same, in the same order, however the conversation is cut into
parts and whether a message comes as the model or as its JSON value (`PlainMessage`); a tool
call is shown once its result is known (or at the end), with its last stored state
(`replayed.py`), looked up in the session's stored calls (`StoredToolCalls`).

Why apart from `cards.py` and `projection.py`: they make each update, live and replayed;
this is the walk over a stored conversation, with its own ordering rule (a card waits for its
result).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Generic, Protocol, TypeVar

from defect_acp.cards import SHOWN_BY_THEIR_EVENT
from defect_acp.replayed import (
    SPENT,
    ReplayedCall,
    Result,
    failed,
    replayed_call,
    replayed_search,
    result_block,
    stored_terminal,
)
from defect_core.model import (
    ContentBlock,
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
from defect_core.session.protocol import StoredToolCalls, ToolCallRecord

T_co = TypeVar("T_co", covariant=True)
T = TypeVar("T")

Block = ContentBlock | dict[str, Any]
"""A block as the walk meets it: the model, or, in a `PlainMessage`, its JSON value."""


class ReplayView(Protocol[T_co]):
    """What each shown piece of a replayed conversation becomes: its protocol line
    (`defect_acp/replay_lines.py`), or, in tests, the schema's model it is held to."""

    def user_text(self, text: str, message_id: str | None = None) -> T_co: ...

    def user_image(self, block: ImageBlock, message_id: str | None = None) -> T_co: ...

    def agent_text(self, text: str, message_id: str | None = None) -> T_co: ...

    def thought(self, text: str, message_id: str | None = None) -> T_co: ...

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


def iter_replay(
    transcript: Sequence[Message],
    tool_calls: StoredToolCalls,
    view: ReplayView[T_co],
    subagents: dict[str, str] | None = None,
    message_ids: Sequence[str] = (),
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
    itself follows the history (`updates.replay`). Each message's text, images and thoughts
    carry its id (`message_ids`, in the transcript's order; none where it is not known).
    """
    walk = ReplayWalk(tool_calls, view, subagents)
    walk.know(transcript)  # every result first: nothing waits
    yield from walk.feed(transcript, message_ids)
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
        tool_calls: StoredToolCalls,
        view: ReplayView[T],
        subagents: Mapping[str, str] | None = None,
    ) -> None:
        self._tool_calls = tool_calls
        self._record = tool_calls.record
        self._view = view
        self._subagents = subagents or {}
        self._results: dict[str, Result] = {}
        self._searches: dict[str, WebSearchResultBlock] = {}
        self._held: deque[tuple[str, Block, str | None]] = deque()

    def know(self, messages: Iterable[Message | PlainMessage]) -> None:
        """Take note of the results in `messages` (what the calls before them wait for)."""
        for m in messages:
            self._know(m["content"] if isinstance(m, dict) else m.content)

    def _know(self, content: Iterable[Block]) -> None:
        results = self._results
        for b in content:
            if isinstance(b, dict):
                if b["type"] == "tool_result":
                    results[b["tool_use_id"]] = b
            elif isinstance(b, ToolResultBlock):
                results[b.tool_use_id] = b
            elif isinstance(b, WebSearchResultBlock):
                self._searches[b.tool_use_id] = b

    def feed(
        self, messages: Iterable[Message | PlainMessage], message_ids: Sequence[str] = ()
    ) -> Iterator[T]:
        """The pieces of the next `messages` that can be made now, and of those held before
        (`message_ids`: each message's id, in order; fewer: the rest have none)."""
        held, know, waits, piece_of = self._held, self._know, self._waits, self._piece
        content: Sequence[Block]
        ids = iter(message_ids)
        for message in messages:
            if isinstance(message, dict):
                role, content = message["role"], message["content"]
            else:
                role, content = message.role, message.content
            mid = next(ids, None)
            know(content)
            if held:
                yield from self._release(final=False)
            for block in content:
                if held or waits(role, block):
                    held.append((role, block, mid))
                elif (piece := piece_of(role, block, mid)) is not HIDDEN:
                    yield piece  # type: ignore[misc]

    def finish(self) -> Iterator[T]:
        """Whatever is still held: the conversation ended before its results."""
        yield from self._release(final=True)

    def _waits(self, role: str, block: Block) -> bool:
        if role == "user":
            return False
        if isinstance(block, dict):
            return block["type"] == "tool_use" and block["id"] not in self._results
        if isinstance(block, ToolUseBlock):
            return block.id not in self._results
        if isinstance(block, ServerToolUseBlock):
            return block.id not in self._searches
        return False

    def _release(self, *, final: bool) -> Iterator[T]:
        held, waits, piece_of = self._held, self._waits, self._piece
        while held and (final or not waits(*held[0][:2])):
            if (piece := piece_of(*held.popleft())) is not HIDDEN:
                yield piece  # type: ignore[misc]

    def _piece(self, role: str, block: Block, mid: str | None = None) -> T | _Hidden:
        """What `block` shows (made by the view), or `HIDDEN`; `mid`: its message's id."""
        view = self._view
        if isinstance(block, dict):  # a plain block (`is_plain_message`)
            kind = block["type"]
            if kind == "text":
                return (
                    view.user_text(block["text"], mid)
                    if role == "user"
                    else view.agent_text(block["text"], mid)
                )
            if role == "user":
                return HIDDEN
            if kind == "thinking":
                return view.thought(block["thinking"], mid)
            if kind == "tool_use":
                return self._call(block["id"], block["name"], block.get("input", {}))
            return HIDDEN
        if role == "user":
            if isinstance(block, TextBlock):
                return view.user_text(block.text, mid)
            if isinstance(block, ImageBlock):
                return view.user_image(block, mid)
        elif isinstance(block, TextBlock):
            return view.agent_text(block.text, mid)
        elif isinstance(block, ThinkingBlock):
            return view.thought(block.thinking, mid)
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
        record = self._record(call_id)
        # A terminal's card reads the result's text.
        terminal = record is not None and stored_terminal(record.content)
        result = None if known is None else result_block(known) if terminal else SPENT[failure]
        if known is not None and not terminal:
            # Shown: only whether it failed is asked again (a load would keep every result's
            # text alive until the end).
            self._results[call_id] = SPENT[failure]
        shown = self._subagents.get(call_id)
        if record is None:  # no stored state: the card says what the history does
            return self._view.tool_call(
                replayed_call(call_id, name, tool_input, None, result, shown)
            )
        # The card is written from the record as it is stored, or from its snapshot.
        return self._view.stored_call(
            record,
            tool_input,
            result,
            shown,
            lambda: replayed_call(
                call_id, name, tool_input, self._tool_calls.get(call_id), result, shown
            ),
        )


class _Hidden:
    """What a block a replay does not show makes (`ReplayWalk._piece`)."""


HIDDEN = _Hidden()
