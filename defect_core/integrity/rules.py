"""The wire-legality rules of the outbound copy: each one named and stated once, here.

Owns `RULES`, the table of `Rule`s the Messages API (and the stricter normal form this package
keeps) demands of the messages of a request, `CHAT_RULES`, what the Chat Completions wire
demands of the copy converted from them (`providers/openai_wire.py` converts and checks), the
texts the repair writes into the copy, and the small predicates that decide a rule block by
block (`is_blank`, `is_well_formed_tool_use`,
`result_content_rule`, `ids_match_pattern`).

Invariant: every rule the validator (`validate.py`) can report and every fix the repair
(`repair.py`) can record is one of `RULES`, by identity, and every rule the Chat Completions
check reports is one of `CHAT_RULES`; docs/architecture.md and docs/provider-wire.md list
exactly these rules, rendered by `rules_markdown`
(`scripts/integrity_rules_doc.py` writes them, `tests/test_integrity_rules.py` checks them).

Why: the rules used to be stated three times (the clean check, the fast and the slow mode of
the rebuild) and once more in prose. One table gives the validator, the repair and the docs the
same names, and a test per rule proves that each is both detected and fixed.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from defect_core.media import image_block_problem
from defect_core.model import (
    ContentBlock,
    ImageBlock,
    ServerToolUseBlock,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    WebSearchResultBlock,
)

__all__ = [
    "BLOCK_FITS_ROLE",
    "CHAT_CALL_ID_LEGAL",
    "CHAT_IMAGE_TAKEN",
    "CHAT_NOTHING_FOREIGN",
    "CHAT_RESULTS_BEFORE_TEXT",
    "CHAT_RESULT_ANSWERS_A_CALL",
    "CHAT_RULES",
    "CHAT_TOOL_CALL_ANSWERED",
    "CONTINUE_TEXT",
    "FIRST_MESSAGE_FROM_USER",
    "IMAGE_ACCEPTED",
    "IMAGE_REMOVED_TEXT",
    "INTERRUPTED_RESULT_TEXT",
    "LAST_MESSAGE_FROM_USER",
    "MESSAGE_NOT_EMPTY",
    "OPENING_TEXT",
    "RESULT_ANSWERS_A_CALL",
    "ROLES_ALTERNATE",
    "RULES",
    "SERVER_KINDS",
    "SERVER_RESULT_ANSWERS_A_USE",
    "SERVER_TOOL_ANSWERED",
    "TEXT_NOT_BLANK",
    "THINKING_SIGNED",
    "TOOL_CALL_ANSWERED",
    "TOOL_CALL_ID_UNIQUE",
    "TOOL_CALL_WELL_FORMED",
    "Rule",
    "ids_match_pattern",
    "is_blank",
    "is_well_formed_tool_use",
    "result_content_rule",
    "rules_markdown",
    "server_blocks_rule",
    "unpaired_server_blocks",
]

INTERRUPTED_RESULT_TEXT = "tool call interrupted; no result was recorded"
"""Text of the synthetic error result that answers a tool call with no recorded result."""

OPENING_TEXT = "(conversation continues)"
"""User text put in front of a history that starts with the assistant (or is empty)."""

CONTINUE_TEXT = "(continue)"
"""User text appended after a trailing assistant message that asked for no tools."""

IMAGE_REMOVED_TEXT = "[image removed: {reason}]"
"""The text that stands in for an image the API would refuse; `reason` is `media`'s phrase."""


@dataclass(frozen=True)
class Rule:
    """One rule of the outbound copy: what the wire demands, and what the repair does about it."""

    name: str
    statement: str
    fix: str

    def __str__(self) -> str:
        return self.name


FIRST_MESSAGE_FROM_USER = Rule(
    "first-message-from-user",
    "The conversation opens with a user message (an empty one has none).",
    f'`"{OPENING_TEXT}"` is put in front: what came before was compacted or lost, and saying '
    "so is more honest than dropping what the model said.",
)
LAST_MESSAGE_FROM_USER = Rule(
    "last-message-from-user",
    "The conversation ends with a user message (newer models refuse a trailing assistant "
    "message, a prefill), except a turn the API paused (`pause_turn`), sent back last to be "
    "continued.",
    "After a trailing tool round its synthetic results form the last message; otherwise "
    f'`"{CONTINUE_TEXT}"` is appended, so what the model said is kept. A paused turn that asked '
    "for no client tools stays last, its final text without trailing whitespace.",
)
ROLES_ALTERNATE = Rule(
    "roles-alternate",
    "No two consecutive messages have the same role.",
    "Consecutive messages of one role are merged, contents concatenated (in a user message the "
    "results still come first).",
)
MESSAGE_NOT_EMPTY = Rule(
    "message-not-empty",
    "Every message holds at least one block.",
    "An empty message is dropped (its neighbours merge).",
)
TEXT_NOT_BLANK = Rule(
    "text-not-blank",
    "No text block is empty or whitespace only, in a message or inside a tool result.",
    "Such a block is dropped: it is the only text that ever disappears.",
)
BLOCK_FITS_ROLE = Rule(
    "block-fits-role",
    "A user message carries only tool results, text and images; an assistant message only "
    "text, tool calls, thinking, redacted thinking and the provider's own tool blocks (each "
    "block exactly of its kind).",
    "A block its role cannot carry is dropped; an instance of a subclass of a kind is rebuilt "
    "as that kind.",
)
TOOL_CALL_WELL_FORMED = Rule(
    "tool-call-well-formed",
    "Every tool call has a name and an id matching `^[a-zA-Z0-9_-]+$`.",
    "A malformed call is dropped, and its results with it.",
)
TOOL_CALL_ID_UNIQUE = Rule(
    "tool-call-id-unique",
    "No two tool calls share an id.",
    "The first call wins; a later call with that id and the results that follow it are dropped.",
)
TOOL_CALL_ANSWERED = Rule(
    "tool-call-answered",
    "Every tool call is answered in the next message, a user message that opens with exactly "
    "the results of that assistant message's calls, in call order.",
    "A result found later is moved there; a missing one becomes the error result "
    f'`"{INTERRUPTED_RESULT_TEXT}"`.',
)
RESULT_ANSWERS_A_CALL = Rule(
    "result-answers-a-call",
    "Every tool result answers a call of the assistant message right before it, and no call is "
    "answered twice.",
    "An orphan result is dropped; of several results for one call the first after it wins. A "
    "result belongs to the nearest assistant message before it that used its id.",
)
THINKING_SIGNED = Rule(
    "thinking-signed",
    "Every thinking block carries its signature (the API cannot verify unsigned thinking).",
    "Unsigned thinking is dropped; signed thinking is sent as the very same object, byte-exact, "
    "and redacted thinking is kept.",
)
IMAGE_ACCEPTED = Rule(
    "image-accepted",
    "Every image, in a prompt or inside a tool result, is one the API takes (valid base64 of the "
    "declared PNG, JPEG, GIF or WebP, at most 5 MB and 8000 pixels a side, or an http(s) URL; "
    "`defect_core/media.py` checks).",
    "It is replaced where it stood by the text `[image removed: <why>]`.",
)
SERVER_TOOL_ANSWERED = Rule(
    "server-tool-answered",
    "Every call of the provider's own tools (its web search: `server_tool_use`) has an id of its "
    "own and is answered later in the assistant message that made it, by a "
    "`web_search_tool_result`. Such calls are no part of the client's tool loop.",
    "An interrupted search (a use whose result never came) is dropped from the copy: the API "
    "refuses it and has no error result a client could write. A use repeating an id is dropped, "
    "and its result with it.",
)
SERVER_RESULT_ANSWERS_A_USE = Rule(
    "server-result-answers-a-use",
    "Every `web_search_tool_result` answers a `server_tool_use` of its id earlier in the same "
    "assistant message, and no use is answered twice.",
    "A result without its use, one before its use and a second result are dropped.",
)

RULES: tuple[Rule, ...] = (
    FIRST_MESSAGE_FROM_USER,
    LAST_MESSAGE_FROM_USER,
    ROLES_ALTERNATE,
    MESSAGE_NOT_EMPTY,
    TEXT_NOT_BLANK,
    BLOCK_FITS_ROLE,
    TOOL_CALL_WELL_FORMED,
    TOOL_CALL_ID_UNIQUE,
    TOOL_CALL_ANSWERED,
    RESULT_ANSWERS_A_CALL,
    THINKING_SIGNED,
    IMAGE_ACCEPTED,
    SERVER_TOOL_ANSWERED,
    SERVER_RESULT_ANSWERS_A_USE,
)
"""Every rule of the Messages wire, in the order the docs list them."""


# ---------------------------------------------------------------------------------------------
# The Chat Completions wire (an OpenAI-compatible provider): what its copy guarantees once
# converted from the repaired messages above (`providers/openai_wire.py` converts and checks).

CHAT_TOOL_CALL_ANSWERED = Rule(
    "chat-tool-call-answered",
    "Chat Completions: every assistant `tool_calls` entry is answered by exactly one `tool` "
    "message before any other user, system or assistant message.",
    "Follows from `tool-call-answered`: a user message's leading results become the `tool` "
    "messages right after the assistant message, in call order.",
)
CHAT_RESULT_ANSWERS_A_CALL = Rule(
    "chat-result-answers-a-call",
    "Chat Completions: no `tool` message without the call it answers.",
    "Follows from `result-answers-a-call`: only results the repair kept become `tool` messages.",
)
CHAT_CALL_ID_LEGAL = Rule(
    "chat-call-id-legal",
    "Chat Completions: every call id is legal on both wires: `^[a-zA-Z0-9_-]+$` and at most 40 "
    "characters (a session may switch provider, and each wire gets the other's ids back).",
    "An id a server minted in a shape the Messages wire forbids (`functions.bash:0`) is mapped "
    "when the call is received; an id over 40 characters is mapped in the copy sent, the call "
    "and its result alike (`call_` and a hash of the id: the same id maps the same way).",
)
CHAT_RESULTS_BEFORE_TEXT = Rule(
    "chat-results-before-text",
    "Chat Completions: a user message carrying tool results and text is sent as the `tool` "
    "messages first, then one user message with the text.",
    "The conversion splits it so; a tool result's images, which a `tool` message cannot carry, "
    "become the text `[image removed: <why>]`.",
)
CHAT_IMAGE_TAKEN = Rule(
    "chat-image-taken",
    "Chat Completions: images go only in user messages, as data URLs (or http(s) URLs), and "
    "only to a model configured to take images.",
    "For a model without images, each image becomes the text `[image removed: <why>]`.",
)
CHAT_NOTHING_FOREIGN = Rule(
    "chat-nothing-foreign",
    "Chat Completions: no thinking (signed or not), redacted thinking, server-tool block or "
    "citation reaches the wire; a message holds only its role's keys, text and image parts, "
    "and each call's `arguments` is the JSON text of an object.",
    "They are left out of the copy; an assistant message left with nothing is left out too.",
)

CHAT_RULES: tuple[Rule, ...] = (
    CHAT_TOOL_CALL_ANSWERED,
    CHAT_RESULT_ANSWERS_A_CALL,
    CHAT_CALL_ID_LEGAL,
    CHAT_RESULTS_BEFORE_TEXT,
    CHAT_IMAGE_TAKEN,
    CHAT_NOTHING_FOREIGN,
)
"""Every rule of the Chat Completions wire, in the order the docs list them after `RULES`."""


# ---------------------------------------------------------------------------------------------
# The predicates that decide a rule for one block.


def is_blank(text: str) -> bool:
    """`TEXT_NOT_BLANK` is broken by this text."""
    return not text or text.isspace()


_tool_use_id_ok = re.compile(r"[a-zA-Z0-9_-]+").fullmatch
"""The API's id pattern `^[a-zA-Z0-9_-]+$`; `fullmatch`, so a trailing newline fails too."""

_ID_CHARS = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-"
"""The characters of that pattern (see `ids_match_pattern`)."""


def is_well_formed_tool_use(block: ToolUseBlock) -> bool:
    """`TOOL_CALL_WELL_FORMED` holds: the call can be sent to the API and run."""
    return bool(block.name) and _tool_use_id_ok(block.id) is not None


def ids_match_pattern(call_ids: Sequence[str]) -> bool:
    """Every id of `call_ids` matches the API's id pattern (the id part of
    `TOOL_CALL_WELL_FORMED`), checked in bulk for the hot path.

    For many ids several times faster than one regex run per id: the ids joined by newlines,
    with every allowed character deleted (`bytes.translate`), must leave exactly the
    separators. An id holding a newline of its own leaves one too many; an empty id is caught
    first.
    """
    if len(call_ids) < 8:  # too few to repay the joining: one regex run each
        return all(_tool_use_id_ok(use_id) is not None for use_id in call_ids)
    if not all(call_ids):
        return False
    joined = "\n".join(call_ids)
    if not joined.isascii():
        return False
    leftover = joined.encode("ascii").translate(None, _ID_CHARS)
    return leftover == b"\n" * (len(call_ids) - 1)


def result_content_rule(block: ToolResultBlock) -> Rule | None:
    """The rule the parts of a result's content break (`TEXT_NOT_BLANK` or `IMAGE_ACCEPTED`),
    or `None` when the API takes them all."""
    content = block.content
    if isinstance(content, str):
        return None
    for part in content:
        if isinstance(part, TextBlock):
            if not part.text or part.text.isspace():
                return TEXT_NOT_BLANK
        elif isinstance(part, ImageBlock) and image_block_problem(part) is not None:
            return IMAGE_ACCEPTED
    return None


SERVER_KINDS = frozenset({ServerToolUseBlock, WebSearchResultBlock})
"""The block types of the provider's own tool calls (`SERVER_TOOL_ANSWERED`,
`SERVER_RESULT_ANSWERS_A_USE`)."""


def server_blocks_rule(blocks: Sequence[Any]) -> Rule | None:
    """The first server tool rule `blocks` (one assistant message) break, in their order:
    `SERVER_RESULT_ANSWERS_A_USE` for a result that answers no open use, `SERVER_TOOL_ANSWERED`
    for a use repeating an id or one left unanswered; `None` when every use is answered later
    in them."""
    open_uses: set[str] = set()
    seen: set[str] = set()
    for block in blocks:
        kind = type(block)
        if kind is ServerToolUseBlock:
            if block.id in seen:
                return SERVER_TOOL_ANSWERED
            seen.add(block.id)
            open_uses.add(block.id)
        elif kind is WebSearchResultBlock:
            if block.tool_use_id not in open_uses:
                return SERVER_RESULT_ANSWERS_A_USE
            open_uses.discard(block.tool_use_id)
    return SERVER_TOOL_ANSWERED if open_uses else None


def unpaired_server_blocks(blocks: Sequence[ContentBlock]) -> dict[int, Rule]:
    """The positions in `blocks` of the server tool blocks the repair drops, in order, each
    with the rule its drop fixes: every use not answered later in them and every repeat of a
    use's id (`SERVER_TOOL_ANSWERED`), every result but the first after its use
    (`SERVER_RESULT_ANSWERS_A_USE`)."""
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
    drop: dict[int, Rule] = {}
    for position, block in enumerate(blocks):
        if position in keep:
            continue
        if isinstance(block, ServerToolUseBlock):
            drop[position] = SERVER_TOOL_ANSWERED
        elif isinstance(block, WebSearchResultBlock):
            drop[position] = SERVER_RESULT_ANSWERS_A_USE
    return drop


# ---------------------------------------------------------------------------------------------
# The docs' view of the table.


def rules_markdown(*, with_fixes: bool = True) -> str:
    """The rules of `RULES`, then `CHAT_RULES`, as the docs show them: a table of name,
    statement and fix (docs/architecture.md), or `with_fixes=False` a list of name and statement
    (docs/provider-wire.md)."""
    every = (*RULES, *CHAT_RULES)
    if not with_fixes:
        return "".join(f"- `{rule.name}`: {rule.statement}\n" for rule in every)
    lines = ["| rule | the copy sent guarantees | the repair |", "| --- | --- | --- |"]
    lines += [f"| `{rule.name}` | {rule.statement} | {rule.fix} |" for rule in every]
    return "\n".join(lines) + "\n"
