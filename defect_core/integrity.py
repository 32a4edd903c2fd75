"""Make a history snapshot wire-legal for the Messages API, just before it is sent.

Owns `repair_outbound`, the one pure function every request to a provider goes through (the
main-loop request and the summarisation sub-request of compaction), and
`drop_malformed_tool_uses`, the filter the turn runner applies to a message assembled from a
stream before it is committed or any of its tool calls run.

## Why this is needed

The turn runner commits an assistant message that asks for tools and, later, the user message
that carries their results: two writes. Anything between them - a provider failure, a
`session/cancel`, a SIGKILL, a power cut - leaves an orphan `tool_use` in the stored history.
The API rejects such a request for good (``tool_use ids were found without tool_result blocks
immediately after``), so without a repair one interruption kills the session: every later
request fails the same way. Interruptions cannot be prevented (the process can be killed at
any instant), so the tolerance has to live on the read side, before the request is sent.
Compaction, replays of old databases and stream errors add their own damage: results whose
use was summarised away, duplicated blocks, empty messages, unsigned thinking.

## Placement: at request construction, never in `snapshot`, storage or replay

`History.snapshot()` means "faithfully read what is stored". Injecting synthetic results there
would make what is read differ from what is stored, and worse, compaction goes
`snapshot() -> summarise -> replace()`: blocks meant only for the provider would be written
back into the source of truth. So history, the SQLite store and the UI replay keep the real
sequence (an orphan stays an unclosed tool call, which is the truth), and only the copy sent
to the provider is patched - here, at request construction.

## What the output guarantees, whatever the input

- Every `tool_use` is answered in the very next message, a user message whose leading run is
  exactly the results of that assistant message, in `tool_use` order. A result found later in
  the conversation is moved there; a missing one becomes a synthetic error result whose text
  is `INTERRUPTED_RESULT_TEXT`.
- No result without its use in the previous assistant message (orphans are stripped), no
  duplicate result (the first one after the use wins), no duplicate `tool_use` id (the first
  use wins; later uses with that id and the results that follow them are dropped). A result
  belongs to the nearest assistant message before it that used its id.
- Malformed tool calls (empty name, or an id that is empty or does not match
  `^[a-zA-Z0-9_-]+$`) never reach the wire; their results go with them.
- No empty message, no empty or whitespace-only text block; consecutive messages of one role
  are merged into one (content concatenated; in a merged user message the results of the
  preceding assistant message still come first, before any text). Blocks a role cannot carry
  on the wire (a tool call in a user message, an image or a result in an assistant message,
  thinking in a user message) are dropped.
- The first message is a user message: a history that starts with the assistant gets
  `OPENING_TEXT` ("(conversation continues)") in front - what came before was compacted or
  lost, and saying so is more honest than dropping what the model said.
- The last message is a user message. A trailing assistant message only exists after a crash
  (the turn runner always ends a history with the user's prompt or tool results before it
  asks the model). If it asked for tools, their results (synthetic: nothing can follow it)
  form the last message - exactly what the next request after an interrupted tool round
  needs. Otherwise `CONTINUE_TEXT` ("(continue)") is appended: newer models reject a
  trailing assistant message (prefill), and dropping it would lose what the model said.
  An empty history becomes the single message `OPENING_TEXT`.
- Thinking with a non-empty signature is kept as the very same object (byte-exact, as the API
  demands); unsigned thinking is dropped (the API cannot verify it); redacted thinking is kept.
- An inline image the API would refuse - invalid base64, bytes that are not the declared PNG,
  JPEG, GIF or WebP, over 5 MB or 8000 pixels a side, a URL that is not http(s); the checks
  are `defect_core/media.py`'s - becomes the text `[image removed: <why>]` where it stood (in
  a user message or inside a tool result). Stored by an older defect or returned by a tool,
  such an image would otherwise fail every later request of the session.
- Only empty or whitespace text ever disappears: what the user or the model said is kept.
- The provider's own tool calls (its web search: `server_tool_use`, answered by a
  `web_search_tool_result`) are answered inside the assistant message that made them, so
  they are no part of the client's tool loop: a use is kept only with its result after it in
  the same assistant message (after merging), a result only after its use. An interrupted
  search (a use whose result never came) and a result without its use are dropped from the
  copy - the API refuses both, and has no error result a client could write for it.
- `repair_outbound(h, paused=True)` is the continuation of a turn the API paused
  (`pause_turn`): a trailing assistant message that asked for no client tools is sent back
  as it is, last, instead of being followed by `CONTINUE_TEXT` (its final text without
  trailing whitespace, which the API refuses there).

## Cost

It runs over the whole history on every request, so it is written for speed. `repair_outbound`
never mutates its input. When the input already satisfies all of the above it returns the input
list itself after one O(n) scan of exact-type checks and attribute reads (no copy, no model
construction; the call ids are checked against the pattern in bulk). Otherwise it
rebuilds in one linear pass that emits undamaged stretches as they are, takes damaged messages
apart block by block, and reuses every message that needs no change (new messages are built
with `model_construct` from blocks that are validated values already). The clean check and the
rebuild describe the same normal form, so the repair is idempotent:
`repair_outbound(repair_outbound(h))` is its own input. An image's verdict is worked out once
per block object (`media.image_block_problem` keeps it), so later requests pay a dictionary
look-up per image, not a base64 decode. `scripts/bench_repair.py` measures it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from defect_core.media import image_block_problem
from defect_core.model import (
    ContentBlock,
    ImageBlock,
    Message,
    RedactedThinkingBlock,
    Role,
    ServerToolUseBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    WebSearchResultBlock,
)

__all__ = [
    "CONTINUE_TEXT",
    "IMAGE_REMOVED_TEXT",
    "INTERRUPTED_RESULT_TEXT",
    "OPENING_TEXT",
    "drop_malformed_tool_uses",
    "is_well_formed_tool_use",
    "repair_outbound",
]

INTERRUPTED_RESULT_TEXT = "tool call interrupted; no result was recorded"
"""Text of the synthetic error result that answers a tool call with no recorded result."""

OPENING_TEXT = "(conversation continues)"
"""User text put in front of a history that starts with the assistant (or is empty)."""

CONTINUE_TEXT = "(continue)"
"""User text appended after a trailing assistant message that asked for no tools."""

IMAGE_REMOVED_TEXT = "[image removed: {reason}]"
"""The text that stands in for an image the API would refuse; `reason` is `media`'s phrase."""

_tool_use_id_ok = re.compile(r"[a-zA-Z0-9_-]+").fullmatch
"""The API's id pattern `^[a-zA-Z0-9_-]+$`; `fullmatch`, so a trailing newline fails too."""

_ID_CHARS = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-"
"""The characters of that pattern (see `_call_ids_are_legal`)."""


def is_well_formed_tool_use(block: ToolUseBlock) -> bool:
    """True when the call can be sent to the API and run: a name and a legal id."""
    return bool(block.name) and _tool_use_id_ok(block.id) is not None


def drop_malformed_tool_uses(message: Message) -> Message:
    """`message` without the tool calls `is_well_formed_tool_use` rejects.

    For the turn runner when a stream ends: a call cut short mid-stream may lack its id or
    name, and must neither run nor be committed. Returns `message` itself when every call is
    well formed; the result may be empty when the message held nothing else.
    """
    content = message.content
    kept = tuple(
        b for b in content if not isinstance(b, ToolUseBlock) or is_well_formed_tool_use(b)
    )
    if len(kept) == len(content):
        return message
    return Message.model_construct(role=message.role, content=kept)


def repair_outbound(messages: list[Message], *, paused: bool = False) -> list[Message]:
    """The wire-legal copy of `messages` (see the module docstring for the guarantees).

    `paused`: the last message is an assistant turn the API paused, to be continued as is.
    Returns `messages` itself when nothing needs repair; never mutates it.
    """
    if paused and messages and messages[-1].role == "assistant":
        # Rare (once per pause): rebuilt, then the trailing `CONTINUE_TEXT` taken off again.
        repaired = _rebuild(messages)
        tail = repaired[-2] if len(repaired) > 1 else None
        if (
            tail is not None
            and tail.role == "assistant"
            and not tail.tool_uses()
            and repaired[-1].content == (TextBlock(text=CONTINUE_TEXT),)
        ):
            return [*repaired[:-2], _without_trailing_space(tail)]
        return repaired
    if _is_wire_legal(messages):
        return messages
    return _rebuild(messages)


def _without_trailing_space(message: Message) -> Message:
    last = message.content[-1]
    if not isinstance(last, TextBlock) or last.text == last.text.rstrip():
        return message
    content = (*message.content[:-1], TextBlock(text=last.text.rstrip()))
    return Message.model_construct(role=message.role, content=content)


def _server_blocks_paired(blocks: Sequence[Any]) -> bool:
    """Every server tool use answered later in `blocks`, every result after its use."""
    open_uses: set[str] = set()
    seen: set[str] = set()
    for block in blocks:
        kind = type(block)
        if kind is ServerToolUseBlock:
            if block.id in seen:
                return False
            seen.add(block.id)
            open_uses.add(block.id)
        elif kind is WebSearchResultBlock:
            if block.tool_use_id not in open_uses:
                return False
            open_uses.discard(block.tool_use_id)
    return not open_uses


def _unpaired_server_blocks(blocks: Sequence[ContentBlock]) -> set[int]:
    """The positions in `blocks` of the server tool blocks to drop: every use not answered
    later in them, every result but the first after its use."""
    uses: dict[str, int] = {}
    answered: dict[str, int] = {}
    for position, block in enumerate(blocks):
        if isinstance(block, ServerToolUseBlock):
            uses.setdefault(block.id, position)
        elif isinstance(block, WebSearchResultBlock):
            use_id = block.tool_use_id
            if use_id in uses and use_id not in answered:
                answered[use_id] = position
    keep = {uses[i] for i in answered} | set(answered.values())
    return {
        position
        for position, b in enumerate(blocks)
        if isinstance(b, ServerToolUseBlock | WebSearchResultBlock) and position not in keep
    }


# ---------------------------------------------------------------------------------------------
# The clean check: the normal form, verified in one pass without building anything.


def _is_blank(text: str) -> bool:
    return not text or text.isspace()


def _result_is_legal(block: ToolResultBlock) -> bool:
    content = block.content
    if isinstance(content, str):
        return True
    for part in content:
        if isinstance(part, TextBlock):
            if not part.text or part.text.isspace():
                return False
        elif isinstance(part, ImageBlock) and image_block_problem(part) is not None:
            return False
    return True


def _is_wire_legal(messages: Sequence[Message]) -> bool:
    # Hot path (every request): exact-type dispatch with `type(...) is`, locals only, no model
    # construction. A block of any other type (a subclass) fails the check and goes through
    # `_rebuild`, which normalises it. Call ids are checked once, in bulk, at the end.
    if not messages or messages[0].role != "user" or messages[-1].role != "user":
        return False
    text_t, image_t, result_t = TextBlock, ImageBlock, ToolResultBlock
    use_t, thinking_t, redacted_t = ToolUseBlock, ThinkingBlock, RedactedThinkingBlock
    call_ids: list[str] = []  # every call id, in order
    pending: list[str] = []  # ids the previous assistant message asked for, in order
    prev_role: Role | None = None
    server = False  # the assistant message holds server tool blocks: check their pairing
    for message in messages:
        role = message.role
        content: tuple[Any, ...] = message.content  # dispatched on exact type below
        if role == prev_role or not content:
            return False
        prev_role = role
        if role == "user":
            lead = len(pending)
            if lead:
                if len(content) < lead:
                    return False
                for index, use_id in enumerate(pending):
                    block = content[index]
                    if type(block) is not result_t or block.tool_use_id != use_id:
                        return False
                    if type(block.content) is not str and not _result_is_legal(block):
                        return False
                pending = []
                if len(content) == lead:
                    continue
                content = content[lead:]
            for block in content:
                kind = type(block)
                if kind is text_t:
                    text = block.text
                    if not text or text.isspace():
                        return False
                elif kind is not image_t or image_block_problem(block) is not None:
                    return False
        else:
            for block in content:
                kind = type(block)
                if kind is text_t:
                    text = block.text
                    if not text or text.isspace():
                        return False
                elif kind is use_t:
                    if not block.name:
                        return False
                    use_id = block.id
                    call_ids.append(use_id)
                    pending.append(use_id)
                elif kind is thinking_t:
                    if not block.signature:
                        return False
                elif kind in _SERVER_KINDS:
                    server = True
                elif kind is not redacted_t:
                    return False
            if server:
                server = False
                if not _server_blocks_paired(content):
                    return False
    return _call_ids_are_legal(call_ids)


def _call_ids_are_legal(call_ids: list[str]) -> bool:
    """Every id matches the API's pattern and none repeats.

    In bulk, several times faster than one regex run per id: the ids joined by newlines, with
    every allowed character deleted (`bytes.translate`), must leave exactly the separators; an
    id holding a newline of its own leaves one too many, and an empty id is caught by the set.
    """
    if not call_ids:
        return True
    distinct = set(call_ids)
    if len(distinct) != len(call_ids) or "" in distinct:
        return False
    joined = "\n".join(call_ids)
    if not joined.isascii():
        return False
    leftover = joined.encode("ascii").translate(None, _ID_CHARS)
    return leftover == b"\n" * (len(call_ids) - 1)


# ---------------------------------------------------------------------------------------------
# The rebuild: one forward pass lays the messages out again in role groups (consecutive messages
# of one role, merged), deciding on the way which calls are kept and which result answers each.
# A user group that must open with answers is filled in at the end, once every result - including
# those found later in the conversation - is known.
#
# Damage is usually local (an interrupted round, a duplicated message) while the history around
# it is long and clean. So the pass alternates two modes: `_fast` walks a stretch of messages
# already in normal form with the clean check's cost and emits them as they are; `_slow` takes
# one damaged message apart block by block. Both keep the same state, and `_fast` only takes a
# message whose slow treatment would emit it unchanged, so the result does not depend on the
# mode (the property tests compare it with a slow-only run).

_SERVER_KINDS = frozenset({ServerToolUseBlock, WebSearchResultBlock})
_EXACT_KINDS = frozenset(
    {
        TextBlock,
        ImageBlock,
        ThinkingBlock,
        RedactedThinkingBlock,
        ToolUseBlock,
        ToolResultBlock,
        *_SERVER_KINDS,
    }
)


def _normalised(block: Any) -> Any:
    """An instance of a subclass of a block type as an instance of the block type itself (the
    clean check dispatches on exact types); anything else as `None`, which is dropped."""
    for kind in _EXACT_KINDS:
        if isinstance(block, kind):
            return kind.model_construct(
                **{name: getattr(block, name) for name in kind.model_fields}
            )
    return None


def _legal_image(block: ImageBlock) -> ImageBlock | TextBlock:
    """`block` itself when the API would take it, else the placeholder saying why not."""
    reason = image_block_problem(block)
    if reason is None:
        return block
    return TextBlock(text=IMAGE_REMOVED_TEXT.format(reason=reason))


def _legal_result(block: ToolResultBlock) -> ToolResultBlock:
    """`block` with blank text parts removed from a structured content and images the API
    would refuse replaced by their placeholder (the same object when nothing changes)."""
    if isinstance(block.content, str) or _result_is_legal(block):
        return block
    parts = tuple(
        _legal_image(p) if isinstance(p, ImageBlock) else p
        for p in block.content
        if not (isinstance(p, TextBlock) and _is_blank(p.text))
    )
    return ToolResultBlock.model_construct(
        tool_use_id=block.tool_use_id, content=parts, is_error=block.is_error
    )


def _interrupted(use_id: str) -> ToolResultBlock:
    return ToolResultBlock(tool_use_id=use_id, content=INTERRUPTED_RESULT_TEXT, is_error=True)


def _user_text(text: str) -> Message:
    return Message(role="user", content=(TextBlock(text=text),))


def _group(role: Role, blocks: list[ContentBlock], sources: list[Message]) -> Message:
    """The message of one role group: the source message itself when the group is exactly one
    message whose content survived unchanged, else a new message (its blocks are validated
    values already, so it is built without validating them again)."""
    content = tuple(blocks)
    if len(sources) == 1 and sources[0].content == content:
        return sources[0]
    return Message.model_construct(role=role, content=content)


def _rebuild(messages: Sequence[Message], *, resync: bool = True) -> list[Message]:
    """The normal form of `messages`. `resync=False` never uses the fast mode (for tests)."""
    return _Rebuild(_pair_server_blocks(messages), resync).run()


def _pair_server_blocks(messages: Sequence[Message]) -> Sequence[Message]:
    """`messages` with the unpaired server tool blocks of each run of consecutive assistant
    messages (one message once merged) dropped; the same sequence when there are none, and
    a message changed only when it lost a block."""
    out: list[Message] | None = None
    index, count = 0, len(messages)
    while index < count:
        if messages[index].role != "assistant":
            if out is not None:
                out.append(messages[index])
            index += 1
            continue
        end = index
        while end < count and messages[end].role == "assistant":
            end += 1
        run = messages[index:end]
        if any(type(b) in _SERVER_KINDS for m in run for b in m.content):
            drop = _unpaired_server_blocks([b for m in run for b in m.content])
            if drop:
                if out is None:
                    out = list(messages[:index])
                position = 0
                for message in run:
                    first = position
                    position += len(message.content)
                    content = tuple(
                        b for k, b in enumerate(message.content, first) if k not in drop
                    )
                    same = len(content) == len(message.content)
                    out.append(
                        message
                        if same
                        else Message.model_construct(role=message.role, content=content)
                    )
                index = end
                continue
        if out is not None:
            out.extend(run)
        index = end
    if out is None:
        return messages
    return out


class _Rebuild:
    """The state of one rebuild: what is laid out, which calls are kept, who owns a result."""

    def __init__(self, messages: Sequence[Message], resync: bool) -> None:
        self.messages = messages
        self.resync = resync
        self.out: list[Message] = []
        # User groups that open with answers: (position in `out`, calls answered, the group's
        # other blocks, its source messages); built last, when every answer is known.
        self.answered_groups: list[tuple[int, list[str], list[ContentBlock], list[Message]]] = []
        self.kept: set[str] = set()  # kept call ids: well formed, first use of their id
        # Per call id, the latest assistant message that used it: 2 * its index, + 1 when it
        # holds the kept call. A result belongs to that message (a later duplicate owns what
        # follows it, so its results never answer the kept call).
        self.owner: dict[str, int] = {}
        self.answers: dict[str, ToolResultBlock] = {}  # per kept call id, its first result
        # The open group. For an assistant group `calls` are its kept calls; for a user group,
        # the calls whose answers it must open with (filled in at the end).
        self.role: Role | None = None
        self.blocks: list[ContentBlock] = []
        self.sources: list[Message] = []
        self.calls: list[str] = []

    def run(self) -> list[Message]:
        count = len(self.messages)
        index = self._fast(0)
        while index < count:
            self._slow(index)
            index = self._fast(index + 1)
        return self._finish()

    def _close_group(self) -> None:
        if self.role == "assistant":
            self.out.append(_group("assistant", self.blocks, self.sources))
        elif self.role == "user":
            if self.calls:
                self.answered_groups.append((len(self.out), self.calls, self.blocks, self.sources))
                self.out.append(self.sources[0])  # placeholder, replaced in `_finish`
            elif self.blocks:
                self.out.append(_group("user", self.blocks, self.sources))

    def _fast(self, start: int) -> int:
        """Emit, as they are, the messages from `start` on that are in normal form given the
        open group; return the index of the first one that is not."""
        messages = self.messages
        count = len(messages)
        if start >= count:
            return count
        if not self.resync:
            return start
        text_t, image_t, result_t = TextBlock, ImageBlock, ToolResultBlock
        use_t, thinking_t, redacted_t = ToolUseBlock, ThinkingBlock, RedactedThinkingBlock
        id_ok, kept, owner, out = _tool_use_id_ok, self.kept, self.owner, self.out
        role = self.role
        calls: Sequence[str] = self.calls if role == "assistant" else ()
        took_any = False  # once true, the open group is `out[-1]`, emitted as it is
        server = False  # the message holds server tool blocks: check their pairing
        index = start
        while index < count:
            message = messages[index]
            message_role = message.role
            content: tuple[Any, ...] = message.content
            if message_role == role or not content:
                break
            if message_role == "user":
                legal = True
                rest = content
                if calls:
                    lead = len(calls)
                    if len(content) < lead:
                        break
                    if not took_any and any(not owner.get(c, 0) & 1 for c in calls):
                        # A call of the open group was used again by a later message of the
                        # group (a duplicate): what follows belongs to the duplicate.
                        break
                    for position, use_id in enumerate(calls):
                        block = content[position]
                        if (
                            type(block) is not result_t
                            or block.tool_use_id != use_id
                            or (type(block.content) is not str and not _result_is_legal(block))
                        ):
                            legal = False
                            break
                    if not legal:
                        break
                    rest = content[lead:]
                for block in rest:
                    kind = type(block)
                    if kind is text_t:
                        text = block.text
                        if not text or text.isspace():
                            legal = False
                            break
                    elif kind is not image_t or image_block_problem(block) is not None:
                        legal = False
                        break
                if not legal:
                    break
                calls = ()
            else:
                if role is None:
                    break  # the history opens with the assistant: `_slow` adds the opening
                message_calls: list[str] = []
                legal = True
                for block in content:
                    kind = type(block)
                    if kind is text_t:
                        text = block.text
                        if not text or text.isspace():
                            legal = False
                            break
                    elif kind is use_t:
                        use_id = block.id
                        if use_id in kept or not block.name or id_ok(use_id) is None:
                            legal = False
                            break
                        kept.add(use_id)  # taken back below if the message is not legal
                        message_calls.append(use_id)
                    elif kind is thinking_t:
                        if not block.signature:
                            legal = False
                            break
                    elif kind in _SERVER_KINDS:
                        server = True
                    elif kind is not redacted_t:
                        legal = False
                        break
                if legal and server:
                    server = False
                    legal = _server_blocks_paired(content)
                if not legal:
                    kept.difference_update(message_calls)
                    break
                for use_id in message_calls:
                    owner[use_id] = 2 * index + 1
                calls = message_calls
            if not took_any:
                self._close_group()
                took_any = True
            out.append(message)
            role = message_role
            index += 1
        if took_any:
            # Reopen the last message as the open group: `_slow` or `_finish` may extend it.
            last = out.pop()
            self.role, self.blocks, self.sources = role, list(last.content), [last]
            # A user message taken here holds its answers already: none to fill in.
            self.calls = list(calls)
        return index

    def _slow(self, index: int) -> None:
        """Take message `index` apart and add what survives to the open group (or open one)."""
        message = self.messages[index]
        content: tuple[Any, ...] = message.content  # dispatched on exact type below
        if any(type(block) not in _EXACT_KINDS for block in content):
            content = tuple(b for b in map(_normalised, content) if b is not None)
        kept, owner, answers = self.kept, self.owner, self.answers
        found: list[ContentBlock] = []
        if message.role == "assistant":
            found_calls: list[str] = []
            for block in content:
                if isinstance(block, TextBlock):
                    if not _is_blank(block.text):
                        found.append(block)
                elif isinstance(block, ToolUseBlock):
                    use_id = block.id
                    if use_id not in kept and is_well_formed_tool_use(block):
                        kept.add(use_id)
                        owner[use_id] = 2 * index + 1
                        found_calls.append(use_id)
                        found.append(block)
                    elif use_id and owner.get(use_id, -1) >> 1 != index:
                        owner[use_id] = 2 * index  # a later duplicate owns what follows
                elif isinstance(block, ThinkingBlock):
                    if block.signature:
                        found.append(block)
                elif isinstance(block, RedactedThinkingBlock | ServerToolUseBlock):
                    found.append(block)
                elif isinstance(block, WebSearchResultBlock):
                    found.append(block)  # paired with its use when the group closes
                # Images and results cannot be in an assistant message.
            if not found:
                return  # nothing to say: the neighbouring user messages merge
            if self.role == "assistant":
                self.blocks.extend(found)
                self.sources.append(message)
                self.calls.extend(found_calls)
                return
            if self.role is None:
                self.out.append(_user_text(OPENING_TEXT))
            else:
                self._close_group()
            self.role, self.blocks, self.sources, self.calls = (
                "assistant",
                found,
                [message],
                found_calls,
            )
            return
        for block in content:
            if isinstance(block, ToolResultBlock):
                # Results are laid out where their call is; here they are only collected.
                use_id = block.tool_use_id
                if use_id not in answers and owner.get(use_id, 0) & 1:
                    answers[use_id] = block
            elif isinstance(block, TextBlock):
                if not _is_blank(block.text):
                    found.append(block)
            elif isinstance(block, ImageBlock):
                found.append(_legal_image(block))
            # Calls and thinking cannot be in a user message.
        if self.role == "assistant":
            if not found and not self.calls:
                return  # nothing to say: the assistant group goes on
            self._close_group()
            # The assistant group's calls are now the calls this user group answers.
            self.role, self.blocks, self.sources = "user", found, [message]
        elif found:
            self.role = "user"
            self.blocks.extend(found)
            self.sources.append(message)

    def _finish(self) -> list[Message]:
        out = self.out
        if self.role == "assistant":
            self._close_group()
            if self.calls:  # a trailing tool round: its (synthetic) answers end the conversation
                self.role, self.blocks, self.sources = "user", [], []
                self.answered_groups.append((len(out), self.calls, [], []))
                out.append(out[-1])  # placeholder
            else:
                out.append(_user_text(CONTINUE_TEXT))
        elif self.role == "user":
            self._close_group()
        else:
            out.append(_user_text(OPENING_TEXT))
        answers = self.answers
        for position, answered, rest, sources in self.answered_groups:
            results: list[ContentBlock] = []
            for use_id in answered:
                answer = answers.get(use_id)
                results.append(_interrupted(use_id) if answer is None else _legal_result(answer))
            out[position] = _group("user", results + rest, sources)
        return out
