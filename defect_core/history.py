"""Conversation history: the source of truth of a session, plus its token accounting.

Owns the `History` protocol and `VecHistory`, a list of messages behind a lock, and the
ruler every token estimate uses (`estimate_message_tokens` for a message, `overhead_tokens`
for a request's system prompt and tool definitions).

Invariants:
- `snapshot()` is a faithful copy of what was appended: nothing is repaired or injected here.
  An orphan `tool_use` stays an orphan in history, in storage and in the UI replay; only the
  copy sent to a provider is patched, by `integrity.repair_outbound` (docs/architecture.md,
  Integrity, explains why a
  repair in `snapshot` would leak synthetic blocks into the truth through `replace`).
- Compaction is not done here (it needs a model call). The turn runner reads a snapshot,
  summarises, and writes back with `replace` (whole list) or `splice_prefix` (background
  write-back that keeps messages appended while the summary was in flight).
- Token estimate = the real input size of the last model call (`record_input_tokens`) plus a
  bytes/4 estimate of what was appended since; with no baseline (new, or just rewritten) the
  whole list is estimated the same way; `None` when empty. Images count a fixed 2,000.
  (bytes, not characters: CJK text is not underestimated.) Each message is estimated once and a
  running total is kept, so `token_estimate` is O(1) with or without a baseline; a list given
  whole (a loaded session, `replace`) is estimated on the first call that needs its size, not
  when it arrives, so loading a long session does not pay for a measure no replay uses.
- A loaded history (`StoredMessages`: the bodies as stored) stays unparsed until something
  reads its messages (a turn's snapshot, a size estimate, a compaction); it is then parsed
  whole, once, and kept as a list. Its length and appends need no parse.

A list that `replace` or `splice_prefix` puts aside is announced to `prefix_memo`
(`forget_history`), so the memos of the per-request checks do not keep its messages alive.

Every method takes the lock, so one history may be shared by the turn, a background
compaction and the store's subscriber, from tasks or threads.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from typing import Protocol

from defect_core.model import (
    ImageBlock,
    JsonPart,
    Message,
    RedactedThinkingBlock,
    ServerToolUseBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolSpec,
    ToolUseBlock,
    WebSearchResultBlock,
)
from defect_core.prefix_memo import forget_history
from defect_core.stored_messages import StoredMessages

IMAGE_TOKEN_ESTIMATE = 2_000
"""Images cannot be estimated by characters; a conservative constant is used instead."""

CHARS_PER_TOKEN = 4


class History(Protocol):
    def append(self, message: Message) -> None: ...

    def snapshot(self) -> list[Message]: ...

    def replace(self, messages: Sequence[Message]) -> None: ...

    def splice_prefix(self, drop_count: int, summary: Message) -> int: ...

    def record_input_tokens(self, tokens: int) -> None: ...

    def token_estimate(self) -> int | None: ...

    def __len__(self) -> int: ...


class VecHistory:
    """A `History` backed by a list and a lock."""

    def __init__(self, messages: Sequence[Message] | None = None) -> None:
        self._lock = threading.Lock()
        self._messages: list[Message] = []
        self._stored: StoredMessages | None = None
        """A loaded history not parsed yet (`_list` parses it); `_messages` is empty then."""
        self._estimates: list[int] | None = []
        """Each message's estimate, measured on first need (None until then): a loaded long
        history is not measured until a turn asks for its size."""
        self._total = 0
        self._last_real_input: int | None = None
        self._est_since_baseline = 0
        self._set(messages or [])

    def _set(self, messages: Sequence[Message]) -> None:
        if isinstance(messages, StoredMessages) and messages:
            self._stored, self._messages = messages.copy(), []
        else:
            self._stored, self._messages = None, list(messages)
        self._estimates = None if messages else []
        self._total = 0

    def _list(self) -> list[Message]:
        """The messages, parsed now if they were loaded and not yet read (lock held)."""
        if self._stored is not None:
            self._messages, self._stored = self._stored.parsed(), None
        return self._messages

    def _measured(self) -> list[int]:
        """The estimates, measured now if they were not yet (call with the lock held)."""
        if self._estimates is None:
            self._estimates = [estimate_message_tokens(m) for m in self._list()]
            self._total = sum(self._estimates)
        return self._estimates

    def append(self, message: Message) -> None:
        estimate = estimate_message_tokens(message)
        with self._lock:
            if self._last_real_input is not None:
                self._est_since_baseline += estimate
            (self._messages if self._stored is None else self._stored).append(message)
            if self._estimates is not None:
                self._estimates.append(estimate)
                self._total += estimate

    def snapshot(self) -> list[Message]:
        with self._lock:
            return list(self._list())

    def replace(self, messages: Sequence[Message]) -> None:
        with self._lock:
            old = self._messages  # empty if never parsed: no check has memos of it
            self._set(messages)
            # The real size of the new list is unknown until the next model call reports it.
            self._last_real_input = None
            self._est_since_baseline = 0
        _forget_proofs(old)

    def splice_prefix(self, drop_count: int, summary: Message) -> int:
        """Replace the first `drop_count` messages of the *current* list with `summary`.

        `drop_count` comes from an earlier snapshot; since then the list may only have grown
        at the tail (single-flight compaction guarantees no mid-list deletion). Clamped to
        the current length as a safety net. Returns how many messages were dropped.
        """
        with self._lock:
            old = self._list()
            drop = max(0, min(drop_count, len(self._messages)))
            head = estimate_message_tokens(summary)
            estimates = self._measured()
            self._total += head - sum(estimates[:drop])
            self._messages = [summary, *self._messages[drop:]]
            self._estimates = [head, *estimates[drop:]]
            self._last_real_input = None
            self._est_since_baseline = 0
        _forget_proofs(old)
        return drop

    def record_input_tokens(self, tokens: int) -> None:
        with self._lock:
            self._last_real_input = tokens
            self._est_since_baseline = 0

    def token_estimate(self) -> int | None:
        with self._lock:
            if self._last_real_input is not None:
                return self._last_real_input + self._est_since_baseline
            if not self._count():
                return None
            self._measured()
            return self._total

    def __len__(self) -> int:
        with self._lock:
            return self._count()

    def _count(self) -> int:
        return len(self._messages if self._stored is None else self._stored)


def estimate_message_tokens(message: Message) -> int:
    """UTF-8 bytes/4 per block, images a fixed cost. Compaction uses the same ruler."""
    total = 0
    for block in message.content:
        if isinstance(block, TextBlock):
            total += _size(block.text) // CHARS_PER_TOKEN
        elif isinstance(block, ThinkingBlock):
            total += (_size(block.thinking) + len(block.signature or "")) // CHARS_PER_TOKEN
        elif isinstance(block, RedactedThinkingBlock):
            total += len(block.data) // CHARS_PER_TOKEN
        elif isinstance(block, ToolUseBlock | ServerToolUseBlock):
            total += (len(block.name) + _size(json.dumps(block.input))) // CHARS_PER_TOKEN
        elif isinstance(block, WebSearchResultBlock) and isinstance(block.content, tuple):
            total += (
                sum(_size(h.title) + len(h.url) + len(h.encrypted_content) for h in block.content)
                // CHARS_PER_TOKEN
            )
        elif isinstance(block, ToolResultBlock):
            total += _result_tokens(block)
        elif isinstance(block, ImageBlock):
            total += IMAGE_TOKEN_ESTIMATE
    return total


def overhead_tokens(system: str, tools: tuple[ToolSpec, ...]) -> int:
    """The fixed part of a request (system prompt, tool definitions) by the same chars/4 ruler.

    Compaction adds it to the history's estimate until a model call has reported real usage;
    the offline model counts it in the usage it reports, so both agree on a request's size."""
    tool_chars = sum(
        len(t.name) + len(t.description) + len(json.dumps(t.input_schema)) for t in tools
    )
    return (len(system) + tool_chars) // 4


def _size(text: str) -> int:
    """UTF-8 size without encoding when the text is ASCII (the common case)."""
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def _result_tokens(block: ToolResultBlock) -> int:
    if isinstance(block.content, str):
        return _size(block.content) // CHARS_PER_TOKEN
    total = 0
    for part in block.content:
        if isinstance(part, TextBlock):
            total += _size(part.text) // CHARS_PER_TOKEN
        elif isinstance(part, JsonPart):
            total += _size(json.dumps(part.value)) // CHARS_PER_TOKEN
        else:
            total += IMAGE_TOKEN_ESTIMATE
    return total


def _forget_proofs(old: list[Message]) -> None:
    """The list opening with `old[0]` was replaced: the per-request checks' memos
    (`prefix_memo.py`) must not keep its messages alive."""
    if old:
        forget_history(old[0])
