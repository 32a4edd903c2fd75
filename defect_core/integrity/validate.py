"""The validator of the outbound copy: which rule of `rules.RULES` a history breaks, and where.

Owns `scan`, the one walk that checks messages against the normal form of the outbound copy
(every rule of `rules.py`), and what is built on it: `is_wire_legal` (the clean check every
request pays), `violations` (the report by rule name) and, in `repair.py`, the fast mode of the
rebuild, which emits the stretches `scan` accepts as they are.

Invariant: `is_wire_legal(h)` is `not violations(h)`, and a history passes exactly when
`repair.repair_outbound` would return it unchanged. `scan` takes a message only when the repair
would emit it unchanged, so the fast mode and the clean check cannot disagree with each other.

Why one walk: it runs over the whole history on every request, so it is written for speed -
exact-type dispatch with `type(...) is`, locals only, no model construction, and the call ids
checked against the API's pattern in bulk at the end of a stretch. A rule is looked up by name
only where a message breaks one, off the hot path.
"""

from __future__ import annotations

from collections.abc import Sequence, Set
from dataclasses import dataclass
from typing import Any, NamedTuple

from defect_core.integrity.rules import (
    BLOCK_FITS_ROLE,
    FIRST_MESSAGE_FROM_USER,
    IMAGE_ACCEPTED,
    LAST_MESSAGE_FROM_USER,
    MESSAGE_NOT_EMPTY,
    RESULT_ANSWERS_A_CALL,
    ROLES_ALTERNATE,
    SERVER_KINDS,
    TEXT_NOT_BLANK,
    THINKING_SIGNED,
    TOOL_CALL_ANSWERED,
    TOOL_CALL_ID_UNIQUE,
    TOOL_CALL_WELL_FORMED,
    Rule,
    ids_match_pattern,
    is_well_formed_tool_use,
    result_content_rule,
    server_blocks_rule,
)
from defect_core.media import image_block_problem
from defect_core.model import (
    ImageBlock,
    Message,
    RedactedThinkingBlock,
    Role,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)

__all__ = [
    "Stretch",
    "Violation",
    "answers_rule",
    "is_wire_legal",
    "scan",
    "violations",
]


@dataclass(frozen=True)
class Violation:
    """A message of the history that breaks `rule` (the first rule it breaks); `message` is its
    index, or `None` for an empty history."""

    rule: Rule
    message: int | None


class Stretch(NamedTuple):
    """Where `scan` stopped, and the state after the last message it took."""

    stop: int
    """The index of the first message not in normal form, or the length of the history."""
    rule: Rule | None
    """The rule message `stop` breaks; `None` when the scan reached the end. A user message
    that does not open with exactly the answers to `calls` stops the scan under
    `TOOL_CALL_ANSWERED`; `answers_rule` tells which rule it breaks (only a report needs to
    know, so the hot path does not work it out)."""
    role: Role | None
    """The role of the last message taken (the given one when none was)."""
    calls: Sequence[str]
    """The calls the next message must answer: those of the last message taken when it is an
    assistant message, none after a user message (the given ones when none was taken)."""
    ids: set[str] | None = None
    """With `bulk_ids`, when the bulk check passed, the ids of the calls taken: the set the
    check built anyway, new and the caller's to keep (the clean check's memo adopts it rather
    than building it again, a pass over every id of a long history); `None` when no call was
    taken, the check failed, or without `bulk_ids`."""


_NO_IDS: frozenset[str] = frozenset()


def scan(
    messages: Sequence[Message],
    start: int,
    role: Role | None,
    calls: Sequence[str],
    kept: set[str],
    superseded: Set[str] = _NO_IDS,
    *,
    bulk_ids: bool = False,
    taken: list[str] | None = None,
) -> Stretch:
    """Walk `messages` from `start` while they are in normal form.

    `role` and `calls` are the role of the message before `start` (`None` at the beginning) and
    the calls it asked for; `kept` holds the ids of the calls taken before `start`.
    `superseded` (the rebuild's) holds kept calls that a later message used again: answers
    that follow belong to that duplicate, not to the kept call. Whether the last message is a
    user message is the caller's question.

    Call ids are checked one by one as they come (each is looked up in `kept`, matched against
    the API's pattern and added to `kept`), or with `bulk_ids` all at once when the walk ends:
    several times cheaper, which is what the clean check of every request uses. A bulk check
    that fails cuts the stretch before its first message holding a bad call, so the messages
    after it were walked for nothing; in bulk `kept` is only read, and a caller that walks on
    checks one by one, which keeps any history linear however many of its calls are bad.

    `taken`, when given, receives the ids of the calls of the messages taken; they are exactly
    those of `messages[start:]` when the walk reaches the end (`rule` is `None`), so a caller
    that remembers what it proved need not walk the history again to learn them.
    """
    # Hot path (every request). A block of any type other than the exact block types (a
    # subclass) stops the walk: the repair normalises it.
    text_t, image_t, result_t = TextBlock, ImageBlock, ToolResultBlock
    use_t, thinking_t, redacted_t = ToolUseBlock, ThinkingBlock, RedactedThinkingBlock
    count = len(messages)
    role_before = role
    # The ids of the calls taken, for the bulk checks at the end (and the caller's `taken`).
    taken_ids: list[str] = [] if taken is None else taken
    already = len(taken_ids)
    pending: Sequence[str] = calls
    rule: Rule | None = None
    index = start
    for index in range(start, count):  # `index` is where the walk stops
        message = messages[index]
        message_role = message.role
        content: tuple[Any, ...] = message.content  # dispatched on exact type below
        if not content:
            rule = MESSAGE_NOT_EMPTY
            break
        if message_role == role:
            rule = ROLES_ALTERNATE
            break
        if message_role == "user":
            rest = content
            if pending:
                lead = len(pending)
                if len(content) < lead:
                    rule = TOOL_CALL_ANSWERED  # `answers_rule` tells which
                    break
                if index == start and superseded and any(c in superseded for c in pending):
                    rule = TOOL_CALL_ID_UNIQUE  # what follows belongs to the duplicate
                    break
                for position, use_id in enumerate(pending):
                    block = content[position]
                    if type(block) is not result_t or block.tool_use_id != use_id:
                        rule = TOOL_CALL_ANSWERED  # `answers_rule` tells which
                        break
                    if type(block.content) is not str:
                        rule = result_content_rule(block)
                        if rule is not None:
                            break
                if rule is not None:
                    break
                if len(content) == lead:
                    pending = ()
                    role = message_role
                    continue
                rest = content[lead:]
            for block in rest:
                kind = type(block)
                if kind is text_t:
                    text = block.text
                    if not text or text.isspace():
                        rule = TEXT_NOT_BLANK
                        break
                elif kind is image_t:
                    if image_block_problem(block) is not None:
                        rule = IMAGE_ACCEPTED
                        break
                else:
                    rule = RESULT_ANSWERS_A_CALL if kind is result_t else BLOCK_FITS_ROLE
                    break
            if rule is not None:
                break
            pending = ()
        else:
            if role is None:
                rule = FIRST_MESSAGE_FROM_USER
                break
            message_calls: list[str] = []
            server = False  # it holds the provider's own tool blocks: check their pairing
            for block in content:
                kind = type(block)
                if kind is text_t:
                    text = block.text
                    if not text or text.isspace():
                        rule = TEXT_NOT_BLANK
                        break
                elif kind is use_t:
                    use_id = block.id
                    if not block.name or not (bulk_ids or is_well_formed_tool_use(block)):
                        rule = TOOL_CALL_WELL_FORMED
                        break
                    if not bulk_ids:
                        if use_id in kept:
                            rule = TOOL_CALL_ID_UNIQUE
                            break
                        kept.add(use_id)  # taken back below if the message is not taken
                    message_calls.append(use_id)
                elif kind is thinking_t:
                    if not block.signature:
                        rule = THINKING_SIGNED
                        break
                elif kind in SERVER_KINDS:
                    server = True
                elif kind is not redacted_t:
                    rule = BLOCK_FITS_ROLE
                    break
            if rule is None and server:
                rule = server_blocks_rule(content)
            if rule is not None:
                if not bulk_ids:
                    kept.difference_update(message_calls)
                break
            taken_ids.extend(message_calls)
            pending = message_calls
        role = message_role
    else:
        index = count
    if bulk_ids and len(taken_ids) > already:
        ids = taken_ids[already:] if already else taken_ids
        distinct = set(ids)
        if len(distinct) != len(ids) or not kept.isdisjoint(distinct) or not ids_match_pattern(ids):
            return _cut_at_bad_call(messages, start, index, kept, role_before, calls)
        return Stretch(index, rule, role, pending, distinct)
    return Stretch(index, rule, role, pending)


def answers_rule(content: tuple[Any, ...], calls: Sequence[str]) -> Rule:
    """The rule a user message breaks when it does not open with exactly the answers to
    `calls`: a result that answers none of them, or answers one twice, breaks
    `RESULT_ANSWERS_A_CALL`; a block no user message carries breaks `BLOCK_FITS_ROLE`; else
    an answer is missing, out of order or not leading (`TOOL_CALL_ANSWERED`)."""
    expected = set(calls)
    answered: set[str] = set()
    for block in content:
        if isinstance(block, ToolResultBlock):
            use_id = block.tool_use_id
            if use_id not in expected or use_id in answered:
                return RESULT_ANSWERS_A_CALL
            answered.add(use_id)
    if any(type(block) not in (TextBlock, ImageBlock, ToolResultBlock) for block in content):
        return BLOCK_FITS_ROLE
    return TOOL_CALL_ANSWERED


def _cut_at_bad_call(
    messages: Sequence[Message],
    start: int,
    stop: int,
    kept: Set[str],
    role: Role | None,
    calls: Sequence[str],
) -> Stretch:
    """The stretch `start:stop` whose bulk id check failed, cut before its first message
    holding a malformed call or a call whose id was used before (rare, so located here one id
    at a time)."""
    seen: set[str] = set()  # the calls of the stretch before the message at hand
    for index in range(start, stop):
        message = messages[index]
        rule = _bad_call_rule(message, kept, seen)
        if rule is not None:
            if index == start:
                return Stretch(index, rule, role, calls)
            before = messages[index - 1]
            before_calls = _call_ids(before) if before.role == "assistant" else ()
            return Stretch(index, rule, before.role, before_calls)
        seen.update(_call_ids(message))
    raise AssertionError("a bulk id check failed on a stretch whose calls are all good")


def _bad_call_rule(message: Message, *used: Set[str]) -> Rule | None:
    """The rule the first bad call of `message` breaks: `TOOL_CALL_WELL_FORMED` when it is
    malformed, else `TOOL_CALL_ID_UNIQUE` when its id is in one of the `used` sets or earlier
    in the message; `None` when every call is good."""
    seen: set[str] = set()
    for block in message.content:
        if type(block) is ToolUseBlock:
            if not is_well_formed_tool_use(block):
                return TOOL_CALL_WELL_FORMED
            if block.id in seen or any(block.id in ids for ids in used):
                return TOOL_CALL_ID_UNIQUE
            seen.add(block.id)
    return None


def _call_ids(message: Message) -> list[str]:
    return [block.id for block in message.content if type(block) is ToolUseBlock]


def is_wire_legal(messages: Sequence[Message]) -> bool:
    """True when `messages` breaks no rule: the repair would send it as it is."""
    if not messages or messages[-1].role != "user":
        return False
    stretch = scan(messages, 0, None, (), set(), bulk_ids=True)
    return stretch.rule is None and stretch.role == "user"


def violations(messages: Sequence[Message]) -> list[Violation]:
    """Every message of `messages` that breaks a rule, with the first rule it breaks.

    After a message that breaks a rule the walk goes on as if its role and calls were right
    (an assistant message after an assistant message adds its calls to theirs), so one damage
    is reported once. A history that ends with unanswered calls breaks `TOOL_CALL_ANSWERED`
    there, and one that ends with the assistant `LAST_MESSAGE_FROM_USER`.
    """
    if not messages:
        return [Violation(FIRST_MESSAGE_FROM_USER, None)]
    found: list[Violation] = []
    kept: set[str] = set()
    role: Role | None = None
    calls: Sequence[str] = ()
    index = 0
    while True:
        # Ids one by one: the walk goes on after a break, so `kept` must know every call taken.
        stretch = scan(messages, index, role, calls, kept)
        role, calls = stretch.role, stretch.calls
        if stretch.rule is None:
            break
        at = stretch.stop
        broken = messages[at]
        rule = stretch.rule
        if rule is TOOL_CALL_ANSWERED:
            rule = answers_rule(broken.content, calls)
        found.append(Violation(rule, at))
        if broken.role == "assistant":
            new_calls = list(dict.fromkeys(_call_ids(broken)))  # an id once per message
            kept.update(
                block.id
                for block in broken.content
                if isinstance(block, ToolUseBlock) and is_well_formed_tool_use(block)
            )
            calls = [*calls, *new_calls] if role == "assistant" else new_calls
        else:
            calls = ()
        role = broken.role
        index = at + 1
    last = len(messages) - 1
    if calls:
        found.append(Violation(TOOL_CALL_ANSWERED, last))
    if role != "user":
        found.append(Violation(LAST_MESSAGE_FROM_USER, last))
    return found
