"""What the provider last sent each conversation: where its prompt cache still holds a prefix.

Owns `LastSent`, a provider's memory of the last prompt it sent per conversation and per
cache key (the model and the thinking parameter: the API's cache is per model, and the
thinking parameters key the messages), and `seen_until`, which answers a new request with the
number of leading messages that last prompt shares with it (`encode_request`'s `seen`).

Why: a session may switch to another provider and come back (the model picker). The turns in
between append messages this provider never saw, so its first request back has its newest
breakpoints far past the prefix its cache holds, out of the API's 20-block look-back; without
a breakpoint at the end of what it last sent, it reads back only the tools and the system
prompt (`request.py`, `_mark_messages`, places that breakpoint; scripts/bench_cache.py
measures the read-back).

Invariants:
- A conversation is told apart by its first message (the same object, or an equal one), and
  only its last prompt is kept: `seen_until` answers only when the new request extends that
  prompt message for message. A history rewritten since (a micro-compaction's cleared result,
  a summary, a rewind) or a summary request sent last answers None, so a breakpoint is never
  placed for a prefix the cache may not hold.
- Bounded: at most `capacity` conversations (the oldest forgotten first); nothing is stored
  between processes (after a restart the first request back pays as it did before).
- Messages are compared by identity first (a history's messages are the same objects request
  after request), by value only when they differ: a request costs one pass over its messages.
- Used from the event loop that streams (no await inside a method: each is atomic there).
"""

from __future__ import annotations

import operator
from collections import OrderedDict
from collections.abc import Hashable, Sequence

from defect_core.model import Message

__all__ = ["DEFAULT_CAPACITY", "LastSent"]

DEFAULT_CAPACITY = 32
"""Conversations remembered per provider (sessions and their subagents)."""


class LastSent:
    """The last prompt sent per conversation and cache key (see the module docstring)."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self._capacity = capacity
        self._prompts: OrderedDict[int, tuple[Hashable, tuple[Message, ...]]] = OrderedDict()

    def seen_until(self, key: Hashable, messages: Sequence[Message]) -> int | None:
        """How many leading messages of `messages` the last prompt sent in their conversation
        under `key` was, when `messages` extends it; else None."""
        found = self._find(messages)
        if found is None:
            return None
        sent_key, sent = self._prompts[found]
        if sent_key != key or not _extends(sent, messages):
            return None
        return len(sent)

    def remember(self, key: Hashable, messages: Sequence[Message]) -> None:
        """`messages` were sent under `key`: the last prompt of their conversation."""
        if not messages:
            return
        found = self._find(messages)
        if found is not None and (
            found == id(messages[0]) or _extends(self._prompts[found][1], messages)
        ):
            del self._prompts[found]  # this conversation's previous prompt
        self._prompts.pop(id(messages[0]), None)
        self._prompts[id(messages[0])] = (key, tuple(messages))
        while len(self._prompts) > self._capacity:
            self._prompts.popitem(last=False)

    def _find(self, messages: Sequence[Message]) -> int | None:
        """The entry of `messages`' conversation: its first message, by identity, then value."""
        if not messages:
            return None
        first = messages[0]
        if id(first) in self._prompts and self._prompts[id(first)][1][0] is first:
            return id(first)
        for entry, (_, sent) in reversed(self._prompts.items()):
            if sent[0] == first:
                return entry
        return None


def _extends(sent: tuple[Message, ...], messages: Sequence[Message]) -> bool:
    """Whether `messages` starts with `sent` (the newest message compared first: a history
    rewritten or a summary request differs there most often)."""
    if len(sent) > len(messages):
        return False
    last = len(sent) - 1
    if not _equal(sent[last], messages[last]):
        return False
    if all(map(operator.is_, sent, messages)):  # the same objects: one pass in C
        return True
    return all(_equal(a, b) for a, b in zip(sent, messages, strict=False))


def _equal(a: Message, b: Message) -> bool:
    return a is b or a == b
