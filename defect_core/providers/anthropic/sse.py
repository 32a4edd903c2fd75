"""The Messages stream read straight off the response's bytes: defect's own SSE reader.

Owns `SseReader` (the response body, as the network hands it over, split into its
server-sent events, every complete event of a read at once) and `read_events` (those events
as the SDK's `AsyncStream` would yield them for a streamed `messages.create` asked for
`object`: each event's parsed JSON, `ping`s and unnamed events skipped, an `error` event
raised as the exception the SDK raises for it).

Invariants:
- The same events as the SDK's `SSEDecoder` + `AsyncStream.__stream__` (anthropic
  `_streaming.py`), in the same order, with the same errors: lines end at `\\n`, `\\r\\n` or
  `\\r` (also across reads), a line is UTF-8 (strictly: `UnicodeDecodeError` otherwise), a
  field is `name: value` with one leading space dropped, `data` lines join with `\\n`, an
  empty line ends an event, a comment (`:`) is ignored, an event never ended by an empty
  line is dropped. An event named `error` raises what the SDK's client makes of it
  (`make_error(message, body)`: the caller, `call.stream_batches`, passes the maker of the
  SDK's public `APIStatusError` for the stream's response), so the provider's error mapping
  (`errors.py`) sees exactly what it saw.
- A failure never swallows what came before it: the events ahead of an `error` event, of
  data that is not JSON or of a line that is not UTF-8 are handed over first (as the SDK
  yields them before it raises), even when they arrived in the same read.
- Nothing is held back that could be handed on: every event complete in a read is returned
  by that read (the first delta leaves as soon as its bytes arrived). Only a read that ends
  in `\\r` keeps its last line until the next read says whether a `\\n` follows.
- A piece that is exactly one event as the API writes it (`event: NAME\\ndata: DATA\\n\\n`,
  nothing held from the piece before) is read without splitting its lines; it yields what
  the line-by-line path yields for it (tests/test_provider_anthropic_sse.py holds both to
  the SDK's decoder), and anything else takes that path.
- Pure: bytes in, events out; no SDK import, no I/O (the provider iterates the response).

Why: under a fast stream the SDK's reader costs several Python generator steps, a line
decode and an object per line and per event, on the event loop that also forwards the
deltas to the editor; on a busy machine that CPU time was the latency of a burst of deltas
(scripts/bench_turn.py). This reader does one pass over each piece of the body httpx hands
over: one network read's worth through the providers' own transport
(defect_core/providers/asyncio_http.py), one HTTP chunk through httpx2's. A paced stream's
read holds one event, so the one-event shortcut takes a few function calls per delta off
it. The SDK still posts the request, checks its status
and maps an error answer; the provider uses this reader only where the SDK's plain
`SSEDecoder` would run (the Anthropic API route, no tracing observer), and leaves
Bedrock's event-stream framing to the SDK.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator
from typing import Any

__all__ = ["SseReader", "read_events"]

_SPECIAL = ("ping", "error")
"""Event names `_batches` does not parse as data: skipped, or raised."""
_loads = json.loads

ErrorMaker = Callable[[str, object], Exception]
"""`make_error(message, body)`: the exception an `error` event raises."""


class SseReader:
    """Splits a server-sent event stream into `(event name, data)` pairs, read by read."""

    def __init__(self) -> None:
        self._tail = b""
        """The last line of the previous read, not yet ended (or ended by `\\r`)."""
        self._event = ""
        self._data: list[str] = []
        self.error: UnicodeDecodeError | None = None
        """A line that is not UTF-8: the reader stopped there (the events before it were
        returned); the SDK raises this once it has yielded them."""

    def feed(self, chunk: bytes) -> list[tuple[str, str]]:
        """The events completed by `chunk` (named ones only: the SDK skips the others), up
        to a line that is not UTF-8 (then `error` is set and nothing more is read)."""
        if self.error is not None:
            return []
        if not self._tail and not self._event and not self._data:
            single = _single_event(chunk)
            if single is not None:
                return single
        buffer = self._tail + chunk if self._tail else chunk
        if b"\r" in buffer:
            lines = buffer.splitlines()
            end = buffer[-1:]
            if end == b"\r":  # ended by `\r`, or by `\r\n` once the next read comes
                self._tail = lines.pop() + b"\r"
            else:
                self._tail = lines.pop() if end != b"\n" else b""
        else:
            lines = buffer.split(b"\n")
            self._tail = lines.pop()  # b"" when the read ended with a line
        return self._lines(lines)

    def finish(self) -> list[tuple[str, str]]:
        """The events the end of the stream completes: a last line ended by `\\r` (a line
        never ended is dropped, as is an event never ended by an empty line)."""
        tail, self._tail = self._tail, b""
        return self._lines(tail.splitlines()) if tail.endswith(b"\r") else []

    def _lines(self, lines: list[bytes]) -> list[tuple[str, str]]:
        events: list[tuple[str, str]] = []
        data = self._data
        for raw in lines:
            if not raw:  # an empty line ends the event
                if self._event:
                    events.append((self._event, "\n".join(data)))
                self._event = ""
                data.clear()
                continue
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                self.error = exc
                self._tail = b""
                break
            if line[0] == ":":
                continue
            name, _, value = line.partition(":")
            if value[:1] == " ":
                value = value[1:]
            if name == "data":
                data.append(value)
            elif name == "event":
                self._event = value
            # `id` and `retry` change nothing the SDK yields; other fields are ignored.
        return events


def _single_event(chunk: bytes) -> list[tuple[str, str]] | None:
    """The events of `chunk` when it is exactly one event in the form the API writes
    (`event: NAME\\ndata: DATA\\n\\n`, no `\\r`, both UTF-8), read between two events:
    what `SseReader._lines` makes of those three lines, without splitting them; None for
    anything else (the general path reads it)."""
    if chunk[:7] != b"event: " or chunk[-2:] != b"\n\n" or b"\r" in chunk:
        return None
    first = chunk.find(b"\n")
    if chunk[first + 1 : first + 7] != b"data: " or chunk.find(b"\n", first + 1) != len(chunk) - 2:
        return None
    try:
        name = chunk[7:first].decode("utf-8")
        data = chunk[first + 7 : -2].decode("utf-8")
    except UnicodeDecodeError:
        return None  # the general path fails on that line as the SDK does
    return [(name, data)] if name else []


async def read_events(
    body: AsyncIterator[bytes], make_error: ErrorMaker, status_code: int
) -> AsyncGenerator[list[Any], None]:
    """The stream's events, one list per piece of `body` (each event's parsed JSON), as the
    SDK's `AsyncStream` would yield them one by one; an `error` event raises
    `make_error(message, body)` as the SDK does. `status_code` is the response's (the SDK
    names it in the message of an `error` event whose data is empty). `body` is closed when
    this ends, however it ends."""
    reader = SseReader()
    try:
        async for chunk in body:
            events = reader.feed(chunk)
            if len(events) == 1 and events[0][0] not in _SPECIAL and events[0][1]:
                yield [_loads(events[0][1])]  # one plain event: as `_batches` would hand it
            else:
                for batch in _batches(events, make_error, status_code):
                    yield batch
            if reader.error is not None:
                raise reader.error
        for batch in _batches(reader.finish(), make_error, status_code):
            yield batch
        if reader.error is not None:
            raise reader.error
    finally:
        if isinstance(body, AsyncGenerator):
            await body.aclose()


def _batches(
    events: list[tuple[str, str]], make_error: ErrorMaker, status_code: int
) -> Iterator[list[Any]]:
    """The parsed events of one read as one batch; an `error` event raises once the events
    before it were handed over (the SDK yields them before it raises)."""
    batch: list[Any] = []
    for event, data in events:
        if event == "ping":
            continue
        if event == "error":
            if batch:
                yield batch
                batch = []
            raise _error(data, make_error, status_code)
        if data:
            try:
                batch.append(json.loads(data))
            except ValueError:
                if batch:
                    yield batch
                raise
    if batch:
        yield batch


def _error(data: str, make_error: ErrorMaker, status_code: int) -> Exception:
    """What the SDK raises for an `error` event (`AsyncStream.__stream__`)."""
    body: object = data
    try:
        body = json.loads(data)
        message = f"{body}"
    except Exception:
        message = data or f"Error code: {status_code}"
    return make_error(message, body)
