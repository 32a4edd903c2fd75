"""The clean check of the outbound copy, and the prefixes it has proven clean already.

Owns `clean_prefix`: how far from its start a history is known to break no rule of
`rules.RULES`, ending with a user message that leaves no call unanswered (the point where the
repair's rebuild can pick up), and the memo of recent answers it draws on.

Invariant: `clean_prefix(h)` is the length `p` of such a prefix, and `p == len(h) > 0`
exactly when `validate.is_wire_legal(h)`. The memo (`prefix_memo.PrefixMemo`: a proof is of
the very message objects or equal ones, so a rewound, compacted or changed history is walked
afresh) is an accelerator only: an answer never depends on what it holds. The ids handed to a
rebuild are a copy.

Why: every request of a session walks the whole history (`turn/request.py` sends
`repair_outbound(snapshot)`), but between two requests the stored history only grows at its
tail. So the walk starts where the last proof ended, and a request of a long session pays for
its new messages plus one pointer comparison per old one. A damaged history is remembered up to
the last user message before its first damage, and its rebuild starts there too.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from defect_core.integrity.validate import scan
from defect_core.model import Message, ToolUseBlock
from defect_core.prefix_memo import PrefixMemo

__all__ = ["CleanPrefix", "clean_prefix", "forget_clean_prefixes"]


class CleanPrefix(NamedTuple):
    """`length` messages from the start break no rule, and the last of them is a user message
    that answers every call before it (0: none known)."""

    length: int
    call_ids: set[str]
    """The ids of their calls, a copy the caller owns (a rebuild adds to it); left empty when
    `length` is the whole history, since nothing follows that needs them."""


_proofs: PrefixMemo[set[str]] = PrefixMemo(set)
"""Clean prefixes, each with the ids of its calls."""


def clean_prefix(messages: Sequence[Message]) -> CleanPrefix:
    """The longest prefix of `messages` known to break no rule and to end with a user message
    that answers every call before it; walks only what no earlier call proved."""
    if not messages:
        return CleanPrefix(0, set())
    proof = _proofs.check_out(messages)
    start = len(proof.messages)
    if start < len(messages):
        # Bulk id checks: the proof's ids are only read.
        stretch = scan(messages, start, "user" if start else None, (), proof.state, bulk_ids=True)
        # `messages[start:stop]` are in normal form. The proof ends after the last user
        # message among them (one of the last two: roles alternate), which leaves no call
        # unanswered.
        end = stretch.stop
        while end > start and messages[end - 1].role != "user":
            end -= 1
        if end > start:
            taken = stretch.ids
            if stretch.rule is not None:
                taken = set(_call_ids(messages[start:end]))  # damaged: rare
            elif end < len(messages) and taken is not None:
                # Unfinished (a loaded session ends with the model's answer): the one message
                # after `end`, an assistant message, asked for `stretch.calls` (its ids are
                # distinct from every other taken: the bulk check passed).
                taken.difference_update(stretch.calls)
            proof.messages += messages[start:end]
            if taken:
                # The scan's set is new and ours: adopted as it is when nothing was proven yet
                # (building the set again was a visible share of a long session's first
                # request: scripts/bench_repair.py).
                if proof.state:
                    proof.state |= taken
                else:
                    proof.state = taken
    length = len(proof.messages)
    # The copy is made before the proof goes back: from then on another caller may extend it.
    found = CleanPrefix(length, set() if length == len(messages) else set(proof.state))
    _proofs.check_in(proof)
    return found


def forget_clean_prefixes() -> None:
    """Drop every proof (benchmarks measure a first request with it)."""
    _proofs.clear()


def _call_ids(messages: Sequence[Message]) -> list[str]:
    return [b.id for m in messages for b in m.content if type(b) is ToolUseBlock]
