"""The clean check of the outbound copy, and the prefixes it has proven clean already.

Owns `clean_prefix`: how far from its start a history is known to break no rule of
`rules.RULES`, ending with a user message that leaves no call unanswered (the point where the
repair's rebuild can pick up), and the memo of recent answers it draws on.

Invariant: `clean_prefix(h)` is the length `p` of such a prefix, and `p == len(h) > 0`
exactly when `validate.is_wire_legal(h)`. The memo is an accelerator only: an answer never
depends on what it holds. An entry says that these messages, in this order, form such a
prefix; a history reuses it only when its first messages are those very objects or equal to
them (equal messages - same exact types, equal fields - break exactly the same rules), so a
history that was rewound, compacted or changed in any message is walked afresh. An entry holds
its own list, never the caller's, and is used by one caller at a time: it is taken out of the
memo while a check extends it, and the ids handed to a rebuild are a copy.

Why: every request of a session walks the whole history (`turn/request.py` sends
`repair_outbound(snapshot)`), but between two requests the stored history only grows at its
tail - until a compaction or a rewind replaces it, which the comparison notices. So the walk
starts where the last proof ended, and a request of a long session pays for its new messages
plus one pointer comparison per old one (done in C by list equality, which compares identical
items without calling `__eq__`); the entry grows in place, so nothing is copied but the new
messages. A damaged history is remembered up to the last user message before its first damage,
and its rebuild starts there too. Messages are immutable values, which is what makes a proof
about an object stay true.

Bounded: at most `_CAPACITY` histories (keyed by their first message, least recently used
dropped first). An entry keeps its messages alive, so a closed session's messages may outlive
it until newer histories push its entry out.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import NamedTuple

from defect_core.integrity.validate import scan
from defect_core.model import Message, ToolUseBlock

__all__ = ["CleanPrefix", "clean_prefix", "forget_clean_prefixes"]

_CAPACITY = 8
"""Histories remembered at once: the sessions and subagents that make requests at a time."""


class CleanPrefix(NamedTuple):
    """`length` messages from the start break no rule, and the last of them is a user message
    that answers every call before it (0: none known)."""

    length: int
    call_ids: set[str]
    """The ids of their calls, a copy the caller owns (a rebuild adds to it); left empty when
    `length` is the whole history, since nothing follows that needs them."""


class _Proof:
    """Messages proven to form a clean prefix, and the ids of their calls. Whoever holds one
    out of the memo may extend both in place."""

    __slots__ = ("call_ids", "messages")

    def __init__(self) -> None:
        self.messages: list[Message] = []
        self.call_ids: set[str] = set()


_proofs: dict[int, _Proof] = {}  # by `id` of the first message; it is kept alive by the proof
_lock = threading.Lock()


def clean_prefix(messages: Sequence[Message]) -> CleanPrefix:
    """The longest prefix of `messages` known to break no rule and to end with a user message
    that answers every call before it; walks only what no earlier call proved."""
    if not messages:
        return CleanPrefix(0, set())
    proof = _check_out(messages) or _Proof()
    start = len(proof.messages)
    if start < len(messages):
        taken: list[str] = []
        # Bulk id checks: the proof's ids are only read.
        stretch = scan(
            messages,
            start,
            "user" if start else None,
            (),
            proof.call_ids,
            bulk_ids=True,
            taken=taken,
        )
        # `messages[start:stop]` are in normal form. The proof ends after the last user
        # message among them (one of the last two: roles alternate), which leaves no call
        # unanswered.
        end = stretch.stop
        while end > start and messages[end - 1].role != "user":
            end -= 1
        if end > start:
            if stretch.rule is not None or end < len(messages):
                taken = _call_ids(messages[start:end])  # damaged or unfinished: rare
            proof.messages += messages[start:end]
            proof.call_ids.update(taken)
    length = len(proof.messages)
    # The copy is made before the proof goes back: from then on another caller may extend it.
    found = CleanPrefix(length, set() if length == len(messages) else set(proof.call_ids))
    if length:
        _check_in(proof)
    return found


def forget_clean_prefixes() -> None:
    """Drop every proof (benchmarks measure a first request with it)."""
    with _lock:
        _proofs.clear()


def _check_out(messages: Sequence[Message]) -> _Proof | None:
    """The proof of the first messages of `messages`, taken out of the memo, if one is held
    (a proof of something else under the same first message is dropped: it was replaced)."""
    with _lock:
        proof = _proofs.pop(id(messages[0]), None)
    if proof is None:
        return None
    proven = proof.messages
    count = len(proven)
    if count > len(messages):
        return None
    # Identical items are passed over in C without calling `__eq__`.
    head = messages if count == len(messages) else messages[:count]
    if not isinstance(head, list) or head != proven:
        return None
    return proof


def _check_in(proof: _Proof) -> None:
    key = id(proof.messages[0])
    with _lock:
        _proofs.pop(key, None)  # (re)inserted last: the most recently used
        _proofs[key] = proof
        while len(_proofs) > _CAPACITY:
            del _proofs[next(iter(_proofs))]


def _call_ids(messages: Sequence[Message]) -> list[str]:
    return [b.id for m in messages for b in m.content if type(b) is ToolUseBlock]
