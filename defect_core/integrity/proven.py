"""The clean check of the outbound copy, and the prefixes it has proven clean already.

Owns `clean_prefix`: how far from its start a history is known to break no rule of
`rules.RULES`, ending with a user message that leaves no call unanswered (the point where the
repair's rebuild can pick up), and the memo of recent answers it draws on.

Invariant: `clean_prefix(h)` is the length `p` of such a prefix with the ids of its calls, and
`p == len(h) > 0` exactly when `validate.is_wire_legal(h)`. The memo is an accelerator only:
an answer never depends on what it holds. An entry says that exactly these message objects, in
this order, form such a prefix; a history reuses it only when its first messages are those very
objects (compared by identity, never by equality), so a history that was rewound, compacted,
loaded again or changed in any message is walked afresh. An entry holds its own copy of the
list, never the caller's, and nothing in it is ever mutated after it is made.

Why: every request of a session walks the whole history (`turn/request.py` sends
`repair_outbound(snapshot)`), but between two requests the stored history only grows at its
tail - until a compaction or a rewind replaces it, which the identity check notices. So the
walk starts where the last proof ended, and a request of a long session pays for its new
messages plus one pointer comparison per old one (done in C), not for a walk of the history.
A damaged history is remembered up to the last user message before its first damage, so its
rebuild starts there too. Messages are immutable values, which is what makes a proof about an
object stay true.

Bounded: at most `_CAPACITY` histories (keyed by their first message, least recently used
dropped first). An entry keeps its messages alive, so a closed session's messages may outlive
it until newer histories push its entry out.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence, Set
from operator import is_
from typing import NamedTuple

from defect_core.integrity.validate import scan
from defect_core.model import Message, ToolUseBlock

__all__ = ["CleanPrefix", "clean_prefix", "forget_clean_prefixes"]

_CAPACITY = 8
"""Histories remembered at once: the sessions and subagents that make requests at a time."""


class CleanPrefix(NamedTuple):
    """`length` messages from the start break no rule, and the last of them is a user message
    that leaves no call unanswered (0: none known); `call_ids` are the ids of their calls."""

    length: int
    call_ids: Set[str]


_NONE = CleanPrefix(0, frozenset())


class _Proof(NamedTuple):
    messages: tuple[Message, ...]
    """The very objects proven, in order (a copy of the caller's list)."""
    call_ids: set[str]
    """The ids of their calls; never mutated once the proof is made."""


_proofs: dict[int, _Proof] = {}  # by `id` of the first message; it is kept alive by the proof
_lock = threading.Lock()


def clean_prefix(messages: Sequence[Message]) -> CleanPrefix:
    """The longest prefix of `messages` known to break no rule and to end with a user message
    that answers every call before it; walks only what no earlier call proved."""
    if not messages:
        return _NONE
    known = _recall(messages)
    start, kept = (0, set()) if known is None else (len(known.messages), known.call_ids)
    if start == len(messages):
        return CleanPrefix(start, kept)
    taken: list[str] = []
    # Bulk id checks: `kept` is only read (it may be the proof's own set).
    stretch = scan(messages, start, "user" if start else None, (), kept, bulk_ids=True, taken=taken)
    # `messages[start:stop]` are in normal form. The proof ends after the last user message
    # among them (one of the last two: roles alternate), which leaves no call unanswered.
    end = stretch.stop
    while end > start and messages[end - 1].role != "user":
        end -= 1
    if end == start:
        return CleanPrefix(start, kept)
    if stretch.rule is None and end == len(messages):
        new_ids = taken  # the common case: every message taken, and `taken` says their calls
    else:
        new_ids = _call_ids(messages[start:end])  # damaged or unfinished: rare
    call_ids = kept | set(new_ids) if new_ids else kept
    _remember(messages[:end], call_ids)
    return CleanPrefix(end, call_ids)


def forget_clean_prefixes() -> None:
    """Drop every proof (benchmarks measure a first request with it)."""
    with _lock:
        _proofs.clear()


def _recall(messages: Sequence[Message]) -> _Proof | None:
    """The proof whose messages are the very first messages of `messages`, if one is held."""
    with _lock:
        proof = _proofs.get(id(messages[0]))
    if proof is None or len(proof.messages) > len(messages):
        return None
    # One pointer comparison per message, in C; `map` stops at the end of the proof.
    if not all(map(is_, messages, proof.messages)):
        return None
    return proof


def _remember(messages: Sequence[Message], call_ids: set[str]) -> None:
    proof = _Proof(tuple(messages), call_ids)
    key = id(proof.messages[0])
    with _lock:
        _proofs.pop(key, None)  # re-inserted last: the most recently used
        _proofs[key] = proof
        while len(_proofs) > _CAPACITY:
            del _proofs[next(iter(_proofs))]


def _call_ids(messages: Sequence[Message]) -> list[str]:
    return [b.id for m in messages for b in m.content if type(b) is ToolUseBlock]
