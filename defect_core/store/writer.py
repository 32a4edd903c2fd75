"""`GroupWriter`: the store's one thread, which commits the writes queued behind each other
as one transaction (group commit).

Owns the thread (`defect-store`), its queue, and how the calls queued on it run: reads one by
one, writes in groups. While the model streams, every session appends its messages and tool
states; with one transaction per append each costs a commit — an fsync under
`synchronous=FULL` (`sqlite.py`, "Durability") — and they queue behind each other. Here the
writes queued back to back share one transaction: N concurrent appends cost one fsync.

Invariants:
- Call order: calls run in the order they were submitted, on one thread. A group takes the
  writes at the head of the queue, in order (at most `MAX_GROUP`); a read ends the group and
  runs after it committed, so it sees every write submitted before it.
- Durable before answered: a write's future is resolved only after its group's COMMIT returned
  (or failed), so a caller that resumes holds a durable row. A SIGKILL at any moment loses no
  acknowledged write and leaves no part of a group (SQLite's commit is atomic).
- A failing write fails only its caller: each write is a savepoint of the group (a store's
  `group()`, `transactions.py`); one that raises is rolled back alone, logged to stderr, and
  its future carries the error. If the whole group was lost (SQLite rolled it back under a full
  disk or an I/O error), nothing of it was written and each write is run again alone, in order.
  If the group could not begin or commit, every write of it carries that error, as each would
  have alone.
- `close(final)` runs `final` after every call submitted before it, then stops the thread.

Why one thread for reads too: a read submitted after a write must see it, as it did when every
call ran on one worker; WAL would let reads run beside the writer, but then a read could pass a
write its caller queued before it.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import threading
import weakref
from collections import deque
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Final, Protocol, runtime_checkable

from defect_core.log import get_logger
from defect_core.store.faults import GroupLost

log = get_logger("defect.store")

MAX_GROUP: Final = 256
"""Writes per transaction at most, so the first caller of a long queue is not kept waiting."""


@runtime_checkable
class Grouping(Protocol):
    """A store that can run many writes in one transaction (`SqliteStore`)."""

    def group(self) -> AbstractContextManager[None]: ...


@dataclass(slots=True)
class _Call:
    fn: Callable[[], Any]
    write: bool
    future: concurrent.futures.Future[Any] = field(default_factory=concurrent.futures.Future)


class GroupWriter:
    """One thread running a store's calls in submission order, writes committed in groups."""

    def __init__(self, store: object, *, name: str = "defect-store") -> None:
        self._grouping = store if isinstance(store, Grouping) else None
        self._queue: deque[_Call | None] = deque()  # None: stop
        self._ready = threading.Condition()
        # A daemon, so a store never closed cannot hold the process at exit; the exit hook
        # still lets it finish what was queued, as the executor it replaces did.
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()
        atexit.register(_finish_at_exit, weakref.ref(self))

    def submit(self, fn: Callable[[], Any], *, write: bool) -> concurrent.futures.Future[Any]:
        """Queue `fn` now (call order is submission order); its future resolves after it ran
        and, for a write, after the transaction holding it committed."""
        call = _Call(fn, write)
        with self._ready:
            self._queue.append(call)
            self._ready.notify()
        return call.future

    def close(self, final: Callable[[], Any]) -> concurrent.futures.Future[Any]:
        """Queue `final` behind every submitted call, then stop the thread after it."""
        future = self.submit(final, write=False)
        with self._ready:
            self._queue.append(None)
            self._ready.notify()
        return future

    def _finish(self) -> None:
        """Stop after every queued call and wait for the thread (at interpreter exit)."""
        with self._ready:
            self._queue.append(None)
            self._ready.notify()
        self._thread.join()

    # -- the thread --

    def _run(self) -> None:
        while (call := self._take(first=True)) is not None:
            if call.write and self._grouping is not None:
                self._commit_group(call, self._grouping)
            else:
                _resolve(call, *_outcome(call.fn))

    def _take(self, *, first: bool) -> _Call | None:
        """The next call; the first waits for one, the others (within a group) only take a
        write already queued. None: stop (first) or nothing to add to the group."""
        with self._ready:
            while True:
                if not self._queue:
                    if not first:
                        return None
                    self._ready.wait()
                    continue
                head = self._queue[0]
                if not first and (head is None or not head.write):
                    return None
                self._queue.popleft()
                if head is None or head.future.set_running_or_notify_cancel():
                    return head
                # cancelled before it ran (never, through AsyncStore's shield): skip it

    def _commit_group(self, first: _Call, store: Grouping) -> None:
        group: list[_Call] = [first]
        outcomes: list[tuple[Any, BaseException | None]] = []
        try:
            with store.group():  # waits here for another process's write lock, if held
                outcomes.append(_outcome(first.fn))
                # Whatever queued meanwhile (while this thread waited for the lock or on the
                # previous commit's fsync) joins the same transaction.
                while len(group) < MAX_GROUP and (call := self._take(first=False)) is not None:
                    group.append(call)
                    outcomes.append(_outcome(call.fn))
        except GroupLost as exc:
            log.warning("store_group_lost", writes=len(group), error=str(exc))
            outcomes = [_outcome(call.fn) for call in group]  # each alone, in order
        except BaseException as exc:  # could not begin or commit: nothing of it was written
            outcomes += [(None, exc)] * (len(group) - len(outcomes))
            outcomes = [(None, exc) if error is None else (r, error) for r, error in outcomes]
        for call, (result, error) in zip(group, outcomes, strict=True):
            if error is not None:
                log.warning("store_write_failed", error=str(error), kind=type(error).__name__)
            _resolve(call, result, error)


def _finish_at_exit(ref: weakref.ref[GroupWriter]) -> None:
    writer = ref()
    if writer is not None:
        writer._finish()


def _outcome(fn: Callable[[], Any]) -> tuple[Any, BaseException | None]:
    try:
        return fn(), None
    except BaseException as exc:  # delivered to the caller, like a ThreadPoolExecutor job
        return None, exc


def _resolve(call: _Call, result: Any, error: BaseException | None) -> None:
    if error is None:
        call.future.set_result(result)
    else:
        call.future.set_exception(error)
