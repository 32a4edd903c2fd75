"""What per-request checks of a history already know about its unchanged prefix.

Owns `PrefixMemo`: for a few recent histories, the messages a check has gone through already
(a `Proof`: those messages and whatever the check worked out from them), found again by the
next request of the same history so that the check goes on from where it stopped.

Invariant: a proof is handed out only for a history whose first messages are its messages -
the very objects or equal ones (messages are immutable values: equal ones have the same
blocks of the same types) - so a history that was rewound, compacted or changed in any
message gets a new, empty proof. A proof holds its own list, never the caller's, and has one
holder at a time: `check_out` takes it out of the memo, `check_in` puts it back, so its holder
may extend it in place and no other caller sees it half done. The memo only saves work: a
check given an empty proof must reach the same answer.

Why: each request of a session sends the whole history, and the checks that build the
outbound copy (`integrity/proven.py`, `provenance.py`) would walk all of it every time,
though between two requests the stored history only grows at its tail until a compaction or a
rewind replaces it. Comparing the prefix costs one pointer comparison per message, done in C
(list equality passes identical items without calling `__eq__`), and a grown proof copies
nothing but the new messages.

Bounded: `capacity` proofs per memo, least recently used dropped first. A proof keeps its
messages alive, so a history that replaces its messages (compaction, rewind) says so
(`forget_history`, from `history.VecHistory`), and every memo drops the proofs of the old
list at once; a closed session's proofs go when newer histories push them out.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Hashable, Sequence
from typing import Any, Generic, TypeVar

from defect_core.model import Message

__all__ = ["PrefixMemo", "Proof", "forget_all", "forget_history"]

S = TypeVar("S")


class Proof(Generic[S]):
    """The messages a check went through (`messages`, the memo's own list) and what it worked
    out from them (`state`); its holder extends both in place."""

    __slots__ = ("messages", "state")

    def __init__(self, state: S) -> None:
        self.messages: list[Message] = []
        self.state = state


class PrefixMemo(Generic[S]):
    """Proofs of recent histories, by their first message and a key of the check's own (what
    the check depends on besides the messages)."""

    def __init__(self, new_state: Callable[[], S], capacity: int = 8) -> None:
        self._new_state = new_state
        self._capacity = capacity
        self._proofs: dict[tuple[int, Hashable], Proof[S]] = {}
        self._lock = threading.Lock()
        _memos.add(self)

    def check_out(self, messages: Sequence[Message], key: Hashable = None) -> Proof[S]:
        """The proof of the first messages of `messages` (taken out of the memo), or a new,
        empty one; a proof of another history under the same first message is dropped."""
        if not messages:
            return Proof(self._new_state())
        with self._lock:
            proof = self._proofs.pop((id(messages[0]), key), None)
        if proof is None:
            return Proof(self._new_state())
        count = len(proof.messages)
        head = messages if count == len(messages) else messages[:count]
        if count > len(messages) or not isinstance(head, list) or head != proof.messages:
            return Proof(self._new_state())
        return proof

    def check_in(self, proof: Proof[S], key: Hashable = None) -> None:
        """Keep `proof` for the next request (nothing, if it holds no message). Its holder must
        not change it afterwards."""
        if not proof.messages:
            return
        slot = (id(proof.messages[0]), key)  # the proof keeps that message alive
        with self._lock:
            self._proofs.pop(slot, None)  # (re)inserted last: the most recently used
            self._proofs[slot] = proof
            while len(self._proofs) > self._capacity:
                del self._proofs[next(iter(self._proofs))]

    def clear(self) -> None:
        with self._lock:
            self._proofs.clear()

    def forget(self, first: Message) -> None:
        """Drop the proofs of histories that open with `first`."""
        with self._lock:
            for slot in [slot for slot in self._proofs if slot[0] == id(first)]:
                if self._proofs[slot].messages[0] is first:
                    del self._proofs[slot]


_memos: weakref.WeakSet[PrefixMemo[Any]] = weakref.WeakSet()


def forget_history(first: Message) -> None:
    """A history that opened with `first` replaced its messages: no memo keeps them alive."""
    for memo in list(_memos):
        memo.forget(first)


def forget_all() -> None:
    """Drop every proof of every memo (a benchmark measures a first request with this)."""
    for memo in list(_memos):
        memo.clear()
