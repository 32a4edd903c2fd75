"""The event loop of `defect acp`, which tells background work when the interpreter is free.

Owns `new_event_loop()`: an asyncio selector loop whose selector opens the foreground gate
(`defect_core.background_import.FOREGROUND`) while the loop sleeps waiting for input or a
timer, and closes it as soon as the loop wakes up.

Why: the provider's SDK loads in a background thread from the moment the process starts
(`defect_core/providers/anthropic/client.py`), but a Python import holds the GIL; run freely,
it would slow the `initialize` and `session/new` answers the editor waits on. The loop
sleeping is the exact moment nobody in the foreground needs the interpreter.

Invariant: the loop behaves as asyncio's default Unix loop (the same selector class, wrapped;
every method but `select` delegates unchanged); only the gate moves.
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Mapping
from typing import Any

from defect_core.background_import import FOREGROUND, ForegroundGate

__all__ = ["new_event_loop"]


def new_event_loop() -> asyncio.AbstractEventLoop:
    """asyncio's selector loop, with a selector that opens `FOREGROUND` while it sleeps."""
    return asyncio.SelectorEventLoop(IdleAwareSelector(selectors.DefaultSelector(), FOREGROUND))


class IdleAwareSelector(selectors.BaseSelector):
    """Wraps a selector: `select` with a timeout other than 0 (the loop has nothing to run)
    opens the gate for as long as it sleeps."""

    def __init__(self, inner: selectors.BaseSelector, gate: ForegroundGate) -> None:
        self._inner = inner
        self._gate = gate

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is not None and timeout <= 0:
            return self._inner.select(timeout)
        self._gate.open()
        try:
            return self._inner.select(timeout)
        finally:
            self._gate.close()

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._inner.register(fileobj, events, data)

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        return self._inner.unregister(fileobj)

    def modify(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._inner.modify(fileobj, events, data)

    def close(self) -> None:
        self._inner.close()

    def get_key(self, fileobj: Any) -> selectors.SelectorKey:
        return self._inner.get_key(fileobj)

    def get_map(self) -> Mapping[Any, selectors.SelectorKey]:
        return self._inner.get_map()
