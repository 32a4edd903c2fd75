"""Messages held in the form the store keeps them until they are read: a loaded session's
history and transcript without a hundred thousand message objects.

Owns `StoredMessages`, the `Sequence[Message]` a load hands the session, and
`collector_paused`, the guard under which many messages are parsed at once. Each stored
message is kept as the JSON body the store read (bytes), parsed by `message_from_json` the
first time it is read and kept parsed from then on, in a cell shared by every view made from
the same load (a session's history and transcript overlap: a message is parsed once for both).

Invariants:
- A view reads exactly the messages it was made of, in order: a head (a compaction
  checkpoint's messages), a range of the stored cells, then what was appended to it.
  Appending to one view never shows in another (`copy` shares the cells, not the tail).
- The bodies were validated by the store when it loaded them (`defect_core/store/rows.py`):
  reading one gives the message the store would have built then.
- Equality is the messages': a view equals any sequence of the same messages, so code and
  tests that compare a history with a list still can.

Why: a message object takes about four times its stored size, and a long session is
mostly messages nobody reads again: the replay shows each once, while it is loaded, and the
model is handed the history only when a turn asks for it (`VecHistory` parses it then, all
at once). scripts/bench_load.py measures the load of 100k messages (its peak RSS).
"""

from __future__ import annotations

import gc
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import overload

from defect_core.model import Message, message_from_json

Cell = bytes | Message
"""A stored message: its body as read, or the message once parsed."""


@contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cycle collector off while many messages are parsed, and what was parsed
    moved out of its reach afterwards (`gc.freeze`). A long session is millions of objects
    that live as long as the session: each collection on the way would walk all of them
    again (on 100k messages, half the parse's time), and so would every full collection
    after, wherever it falls - in the middle of a streamed answer, say. Frozen objects are
    still freed by reference count when the session lets them go; only a reference cycle
    among them would outlive it, and messages hold none."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()


class StoredMessages(Sequence[Message]):
    """`head`, then `cells[start:stop]` (each parsed when first read), then the messages
    appended since."""

    __slots__ = ("_cells", "_head", "_start", "_stop", "_tail")

    def __init__(
        self,
        cells: list[Cell],
        start: int = 0,
        stop: int | None = None,
        head: Iterable[Message] = (),
    ) -> None:
        self._cells = cells
        self._start = start
        self._stop = len(cells) if stop is None else stop
        self._head = list(head)
        self._tail: list[Message] = []

    @classmethod
    def of(cls, messages: Iterable[Message] | None) -> StoredMessages:
        """A view of its own over `messages`: a `StoredMessages` is copied (its cells
        shared, nothing parsed), anything else is taken as already parsed."""
        if isinstance(messages, StoredMessages):
            return messages.copy()
        return cls(list(messages or ()))

    def copy(self) -> StoredMessages:
        twin = StoredMessages(self._cells, self._start, self._stop, self._head)
        twin._tail = list(self._tail)
        return twin

    def append(self, message: Message) -> None:
        self._tail.append(message)

    def parsed(self) -> list[Message]:
        """Every message, parsed now if it was not yet (the collector paused meanwhile)."""
        with collector_paused():
            return list(self)

    def _cell(self, index: int) -> Message:
        cell = self._cells[index]
        if isinstance(cell, bytes):
            cell = self._cells[index] = message_from_json(cell)
        return cell

    def __len__(self) -> int:
        return len(self._head) + (self._stop - self._start) + len(self._tail)

    @overload
    def __getitem__(self, index: int) -> Message: ...

    @overload
    def __getitem__(self, index: slice) -> list[Message]: ...

    def __getitem__(self, index: int | slice) -> Message | list[Message]:
        if isinstance(index, slice):
            return [self[n] for n in range(*index.indices(len(self)))]
        n = index + len(self) if index < 0 else index
        if not 0 <= n < len(self):
            raise IndexError("message index out of range")
        if n < len(self._head):
            return self._head[n]
        n -= len(self._head)
        if n < self._stop - self._start:
            return self._cell(self._start + n)
        return self._tail[n - (self._stop - self._start)]

    def __iter__(self) -> Iterator[Message]:
        yield from self._head
        for index in range(self._start, self._stop):
            yield self._cell(index)
        yield from self._tail

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence) and not isinstance(other, str | bytes):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable, as a list

    def __repr__(self) -> str:
        return f"StoredMessages({len(self)} messages)"
