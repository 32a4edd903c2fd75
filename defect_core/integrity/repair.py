"""The repair of the outbound copy: the history laid out again so that it breaks no rule.

Owns `repair_outbound` (the one pure function every request to a provider goes through),
`repair` (the same, with the rule of `rules.RULES` each fix applied) and
`drop_malformed_tool_uses` (the turn runner's filter for a message assembled from a stream,
before it is committed or any of its tool calls run).

Invariant: the output breaks no rule (`validate.violations` finds nothing), the input is never
mutated, and the repair is idempotent: `repair_outbound(repair_outbound(h))` is its own input.
Every fix is recorded under the rule it applies; a history that needs none is returned itself.

Why a rebuild in two modes: damage is usually local (an interrupted round, a duplicated
message) while the history around it is long and clean. The fast mode emits a stretch that
`validate.scan` accepts as it is - the validator's own walk, so the two cannot disagree - and
the slow mode takes one damaged message apart block by block. Both share one state, so the
result does not depend on the mode (the property tests compare it with a slow-only run). The
prefix `proven.clean_prefix` knows to be clean (from this walk or an earlier request's) is laid
out first, as the fast mode would have, so the rebuild starts where the damage starts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain
from operator import attrgetter
from typing import Any, NamedTuple

from defect_core.integrity.proven import CleanPrefix, clean_prefix
from defect_core.integrity.rules import (
    BLOCK_FITS_ROLE,
    CONTINUE_TEXT,
    FIRST_MESSAGE_FROM_USER,
    IMAGE_ACCEPTED,
    IMAGE_REMOVED_TEXT,
    INTERRUPTED_RESULT_TEXT,
    LAST_MESSAGE_FROM_USER,
    MESSAGE_NOT_EMPTY,
    OPENING_TEXT,
    RESULT_ANSWERS_A_CALL,
    ROLES_ALTERNATE,
    SERVER_KINDS,
    TEXT_NOT_BLANK,
    THINKING_SIGNED,
    TOOL_CALL_ANSWERED,
    TOOL_CALL_ID_UNIQUE,
    TOOL_CALL_WELL_FORMED,
    Rule,
    is_blank,
    is_well_formed_tool_use,
    result_content_rule,
    unpaired_server_blocks,
)
from defect_core.integrity.validate import scan
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
    as_kind,
    replaced,
    trusted_message,
)

__all__ = ["Repair", "drop_malformed_tool_uses", "repair", "repair_outbound"]


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
    return trusted_message(message.role, kept)


def repair_outbound(messages: list[Message], *, paused: bool = False) -> list[Message]:
    """The wire-legal copy of `messages` (`rules.RULES` states what that means).

    `paused`: the last message is an assistant turn the API paused (`pause_turn`), to be
    continued as it is: a trailing assistant message that asked for no client tools is sent
    back last, instead of being followed by `CONTINUE_TEXT` (its final text without trailing
    whitespace, which the API refuses there). Returns `messages` itself when nothing needs
    repair; never mutates it.
    """
    if paused and messages and messages[-1].role == "assistant":
        # Rare (once per pause): rebuilt, then the trailing `CONTINUE_TEXT` taken off again.
        repaired = _Rebuild(messages, resync=True).run()
        tail = repaired[-2] if len(repaired) > 1 else None
        if (
            tail is not None
            and tail.role == "assistant"
            and not tail.tool_uses()
            and repaired[-1].content == (TextBlock(text=CONTINUE_TEXT),)
        ):
            return [*repaired[:-2], _without_trailing_space(tail)]
        return repaired
    proven = clean_prefix(messages)
    if proven.length == len(messages) > 0:
        return messages
    return _Rebuild(messages, resync=True, proven=proven).run()


def _without_trailing_space(message: Message) -> Message:
    last = message.content[-1]
    if not isinstance(last, TextBlock) or last.text == last.text.rstrip():
        return message
    content = (*message.content[:-1], TextBlock(text=last.text.rstrip()))
    return trusted_message(message.role, content)


@dataclass(frozen=True)
class Repair:
    """The wire-legal copy of a history and the rules its fixes applied, one entry per fix in
    the order they were made (empty when `messages` is the input itself)."""

    messages: list[Message]
    fixes: tuple[Rule, ...]


def repair(messages: list[Message]) -> Repair:
    """`repair_outbound(messages)`, with the rule each fix applied."""
    proven = clean_prefix(messages)
    if proven.length == len(messages) > 0:
        return Repair(messages, ())
    rebuild = _Rebuild(messages, resync=True, proven=proven)
    return Repair(rebuild.run(), tuple(rebuild.fixes))


def _rebuild(messages: Sequence[Message], *, resync: bool = True) -> list[Message]:
    """The normal form of `messages`. `resync=False` never uses the fast mode (for tests)."""
    return _Rebuild(messages, resync).run()


# ---------------------------------------------------------------------------------------------
# Blocks: each one made legal on its own.

_EXACT_KINDS = frozenset(
    {
        TextBlock,
        ImageBlock,
        ThinkingBlock,
        RedactedThinkingBlock,
        ToolUseBlock,
        ToolResultBlock,
        *SERVER_KINDS,
    }
)


_content_of = attrgetter("content")

_SERVER_TYPES = tuple(SERVER_KINDS)
"""The server tool block types, for `isinstance` (which also matches their subclasses)."""


def _normalised(block: Any) -> Any:
    """An instance of a subclass of a block type as an instance of the block type itself (the
    validator dispatches on exact types); anything else as `None`, which is dropped."""
    for kind in _EXACT_KINDS:
        if isinstance(block, kind):
            return as_kind(kind, block)
    return None


def _image_placeholder(block: ImageBlock) -> TextBlock | None:
    """The text standing in for `block` when the API would refuse it, else `None`."""
    reason = image_block_problem(block)
    if reason is None:
        return None
    return TextBlock(text=IMAGE_REMOVED_TEXT.format(reason=reason))


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
    return trusted_message(role, content)


class _AnsweredGroup(NamedTuple):
    """A user group that opens with answers: laid out last, once every answer is known."""

    position: int  # where it stands in the output
    calls: list[str]  # the calls it answers, in call order
    rest: list[ContentBlock]  # what follows the answers
    sources: list[Message]  # the input messages merged into it


# ---------------------------------------------------------------------------------------------
# The rebuild: one forward pass lays the messages out again in role groups (consecutive messages
# of one role, merged), deciding on the way which calls are kept and which result answers each.


class _Rebuild:
    """The state of one rebuild: what is laid out, which calls are kept, which results answer."""

    def __init__(
        self, messages: Sequence[Message], resync: bool, proven: CleanPrefix | None = None
    ) -> None:
        self.fixes: list[Rule] = []  # the rule of each fix, in order
        # The prefix proven clean is laid out as it is (`run`): nothing in it is paired again.
        self.proven = proven if proven is not None and resync else CleanPrefix(0, set())
        self.messages = self._pair_server_blocks(messages, self.proven.length)
        self.resync = resync
        self.out: list[Message] = []
        self.answered_groups: list[_AnsweredGroup] = []
        # The ids of the calls kept: well formed, first use of their id.
        self.kept: set[str] = set()
        # Kept calls whose id a later assistant message used again. A result belongs to the
        # nearest message before it that used its id: after such a duplicate (dropped) its
        # results are dropped with it, and never answer the kept call.
        self.superseded: set[str] = set()
        self.answers: dict[str, ToolResultBlock] = {}  # per kept call id, its first result
        # The open group. For an assistant group `calls` are its kept calls; for a user group,
        # the calls whose answers it must open with (filled in at the end).
        self.role: Role | None = None
        self.blocks: list[ContentBlock] = []
        self.sources: list[Message] = []
        self.calls: list[str] = []

    def _pair_server_blocks(self, messages: Sequence[Message], start: int) -> Sequence[Message]:
        """`messages` without the unpaired server tool blocks of each run of consecutive
        assistant messages from `start` on (one message once merged, so pairing is judged over
        the run); the same sequence when there are none, and a message changed only when it
        lost a block. Runs that merge only because a user message between them vanishes are
        judged again as one group when it closes (`_pair_merged_server_blocks`). Before
        `start` (a proven prefix, ending with a user message) every block is paired already."""
        # The block types present, gathered in C: a server block may be of a subclass (made
        # its exact kind only later, by `_slow`), so the kinds are matched as classes.
        rest = messages[start:] if start else messages
        present = set(map(type, chain.from_iterable(map(_content_of, rest))))
        if not any(issubclass(kind, _SERVER_TYPES) for kind in present):
            return messages  # no server tool blocks at all: the common case
        out: list[Message] | None = None
        index, count = start, len(messages)
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
            drop: dict[int, Rule] = {}
            if any(isinstance(b, _SERVER_TYPES) for m in run for b in m.content):
                drop = unpaired_server_blocks([b for m in run for b in m.content])
            if drop:
                self.fixes.extend(drop.values())
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
                    out.append(message if same else trusted_message(message.role, content))
            elif out is not None:
                out.extend(run)
            index = end
        return messages if out is None else out

    def run(self) -> list[Message]:
        count = len(self.messages)
        index = self._fast(self._take_proven())
        while index < count:
            self._slow(index)
            index = self._fast(index + 1)
        return self._finish()

    def _take_proven(self) -> int:
        """Lay out the prefix proven clean as it is, as `_fast` would have (its last message,
        a user message that answers every call, stays the open group); return its length."""
        length, call_ids = self.proven
        if not length:
            return 0
        messages = self.messages
        self.out.extend(messages[: length - 1])
        last = messages[length - 1]
        self.role, self.blocks, self.sources, self.calls = "user", list(last.content), [last], []
        self.kept = call_ids  # the rebuild's own copy: it adds to it
        return length

    def _close_group(self) -> None:
        if self.role == "assistant":
            if len(self.sources) > 1:
                self._pair_merged_server_blocks()
            self.out.append(_group("assistant", self.blocks, self.sources))
        elif self.role == "user":
            if self.calls:
                group = _AnsweredGroup(len(self.out), self.calls, self.blocks, self.sources)
                self.answered_groups.append(group)
                self.out.append(self.sources[0])  # placeholder, replaced in `_finish`
            elif self.blocks:
                self.out.append(_group("user", self.blocks, self.sources))

    def _pair_merged_server_blocks(self) -> None:
        """Drop from the open assistant group the server tool blocks that became unpaired when
        it merged runs of assistant messages apart in the input (a user message between them
        had nothing to say). Each run is paired already (`_pair_server_blocks`), so only a
        search repeated under one id can be left: the repeat goes, with its result, and the
        first search stays, so the group never empties."""
        blocks = self.blocks
        if SERVER_KINDS.isdisjoint(map(type, blocks)):
            return
        drop = unpaired_server_blocks(blocks)
        if drop:
            self.fixes.extend(drop.values())
            self.blocks = [b for k, b in enumerate(blocks) if k not in drop]

    def _fast(self, start: int) -> int:
        """Emit, as they are, the messages from `start` on that `validate.scan` accepts after
        the open group; return the index of the first one it does not."""
        messages = self.messages
        if start >= len(messages) or not self.resync:
            return start
        role = self.role
        calls = self.calls if role == "assistant" else ()
        # Call ids one by one (`kept` must grow): a stretch here is often short anyway.
        stretch = scan(messages, start, role, calls, self.kept, self.superseded)
        stop = stretch.stop
        if stop == start:
            return start
        self._close_group()
        self.out.extend(messages[start : stop - 1])
        # Reopen the last message as the open group: `_slow` or `_finish` may extend it. A user
        # message taken here holds its answers already: none to fill in.
        last = messages[stop - 1]
        self.role, self.blocks, self.sources = stretch.role, list(last.content), [last]
        self.calls = list(stretch.calls)
        return stop

    def _slow(self, index: int) -> None:
        """Take message `index` apart and add what survives to the open group (or open one)."""
        message = self.messages[index]
        fix = self.fixes.append
        content: tuple[Any, ...] = message.content  # dispatched on exact type below
        if not content:
            fix(MESSAGE_NOT_EMPTY)
        elif any(type(block) not in _EXACT_KINDS for block in content):
            fix(BLOCK_FITS_ROLE)
            content = tuple(b for b in map(_normalised, content) if b is not None)
        if message.role == "assistant":
            self._slow_assistant(message, content)
        else:
            self._slow_user(message, content)

    def _slow_assistant(self, message: Message, content: tuple[Any, ...]) -> None:
        fix = self.fixes.append
        kept, superseded = self.kept, self.superseded
        found: list[ContentBlock] = []
        found_calls: list[str] = []
        for block in content:
            if isinstance(block, TextBlock):
                if is_blank(block.text):
                    fix(TEXT_NOT_BLANK)
                else:
                    found.append(block)
            elif isinstance(block, ToolUseBlock):
                use_id = block.id
                if use_id in kept:
                    well_formed = is_well_formed_tool_use(block)
                    fix(TOOL_CALL_ID_UNIQUE if well_formed else TOOL_CALL_WELL_FORMED)
                    if use_id not in found_calls:  # the kept call is in an earlier message
                        superseded.add(use_id)
                elif not is_well_formed_tool_use(block):
                    fix(TOOL_CALL_WELL_FORMED)
                else:
                    kept.add(use_id)
                    found_calls.append(use_id)
                    found.append(block)
            elif isinstance(block, ThinkingBlock):
                if block.signature:
                    found.append(block)
                else:
                    fix(THINKING_SIGNED)
            elif isinstance(block, RedactedThinkingBlock | ServerToolUseBlock):
                found.append(block)
            elif isinstance(block, WebSearchResultBlock):
                found.append(block)  # paired with its use already (`_pair_server_blocks`)
            else:
                fix(BLOCK_FITS_ROLE)  # an image or a result cannot be in an assistant message
        if not found:
            return  # nothing to say: the neighbouring user messages merge
        if self.role == "assistant":
            fix(ROLES_ALTERNATE)
            self.blocks.extend(found)
            self.sources.append(message)
            self.calls.extend(found_calls)
            return
        if self.role is None:
            fix(FIRST_MESSAGE_FROM_USER)
            self.out.append(_user_text(OPENING_TEXT))
        else:
            self._close_group()
        self.role, self.blocks, self.sources = "assistant", found, [message]
        self.calls = found_calls

    def _slow_user(self, message: Message, content: tuple[Any, ...]) -> None:
        fix = self.fixes.append
        kept, superseded, answers = self.kept, self.superseded, self.answers
        found: list[ContentBlock] = []
        for block in content:
            if isinstance(block, ToolResultBlock):
                # Results are laid out where their call is; here they are only collected.
                use_id = block.tool_use_id
                if use_id in superseded:
                    fix(TOOL_CALL_ID_UNIQUE)  # it follows a dropped duplicate of its call
                elif use_id in answers or use_id not in kept:
                    fix(RESULT_ANSWERS_A_CALL)  # a second answer, or an orphan
                else:
                    answers[use_id] = block
            elif isinstance(block, TextBlock):
                if is_blank(block.text):
                    fix(TEXT_NOT_BLANK)
                else:
                    found.append(block)
            elif isinstance(block, ImageBlock):
                placeholder = _image_placeholder(block)
                if placeholder is None:
                    found.append(block)
                else:
                    fix(IMAGE_ACCEPTED)
                    found.append(placeholder)
            else:
                fix(BLOCK_FITS_ROLE)  # calls and thinking cannot be in a user message
        if self.role == "assistant":
            if not found and not self.calls:
                return  # nothing to say: the assistant group goes on
            self._close_group()
            # The assistant group's calls are now the calls this user group answers.
            self.role, self.blocks, self.sources = "user", found, [message]
        elif found:
            if self.role == "user":
                fix(ROLES_ALTERNATE)
            self.role = "user"
            self.blocks.extend(found)
            self.sources.append(message)

    def _legal_result(self, block: ToolResultBlock) -> ToolResultBlock:
        """`block` with blank text parts removed from a structured content and images the API
        would refuse replaced by their placeholder (the same object when nothing changes)."""
        if result_content_rule(block) is None:
            return block
        parts: list[Any] = []
        for part in block.content:
            if isinstance(part, TextBlock) and is_blank(part.text):
                self.fixes.append(TEXT_NOT_BLANK)
                continue
            if isinstance(part, ImageBlock):
                placeholder = _image_placeholder(part)
                if placeholder is not None:
                    self.fixes.append(IMAGE_ACCEPTED)
                    part = placeholder
            parts.append(part)
        return replaced(block, content=tuple(parts))

    def _finish(self) -> list[Message]:
        out, fixes = self.out, self.fixes
        fix = fixes.append
        if self.role == "assistant":
            self._close_group()
            fix(LAST_MESSAGE_FROM_USER)
            if self.calls:  # a trailing tool round: its (synthetic) answers end the conversation
                self.answered_groups.append(_AnsweredGroup(len(out), self.calls, [], []))
                out.append(out[-1])  # placeholder
            else:
                out.append(_user_text(CONTINUE_TEXT))
        elif self.role == "user":
            self._close_group()
        else:
            fix(FIRST_MESSAGE_FROM_USER)
            out.append(_user_text(OPENING_TEXT))
        answers = self.answers
        placed: set[str] = set()
        for group in self.answered_groups:
            lead = group.sources[0].content if group.sources else ()
            moved = False
            results: list[ContentBlock] = []
            for position, use_id in enumerate(group.calls):
                answer = answers.get(use_id)
                if answer is None:
                    fix(TOOL_CALL_ANSWERED)  # missing: a synthetic answer stands in
                    results.append(_interrupted(use_id))
                    continue
                placed.add(use_id)
                if position >= len(lead) or lead[position] is not answer:
                    moved = True
                results.append(self._legal_result(answer))
            if moved:
                fix(TOOL_CALL_ANSWERED)  # answers found elsewhere were moved here
            out[group.position] = _group("user", results + group.rest, group.sources)
        # A result collected for a call the fast mode saw answered in place is a second answer.
        fixes.extend(RESULT_ANSWERS_A_CALL for _ in range(len(answers) - len(placed)))
        return out
