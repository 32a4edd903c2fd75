"""A streamed response's body, one piece per network read, straight off its HTTP/1.1 connection.

Owns `body_reads(response)`: the body of an `httpx2` response that `httpcore2` reads over
HTTP/1.1, as one `bytes` per network read (everything h11 decodes from that read, however
many HTTP chunks it held), or None when the response is not one whose connection this module
knows (then the caller iterates `response.aiter_raw()`, as before).

Invariants:
- The same bytes, the same errors, the same connection afterwards as `response.aiter_raw()`:
  the loop is httpcore's own body loop (`AsyncHTTP11Connection._receive_response_body` and
  `_receive_event`: h11's `next_event`, the network read with the request's read timeout),
  its errors are mapped as httpcore then httpx map them (`RemoteProtocolError`, `ReadTimeout`,
  `ReadError` reach the caller as the `httpx2` exceptions; the network reads themselves are
  `socket_reads.py`'s where it knows the stream), and the response is closed by
  the caller's `response.aclose()` as before, which hands the connection back to the pool
  (or closes it, when the body was not read to its end).
- Only the exact chain of stream classes `httpx2`'s default transport builds over
  `httpcore2`'s pool and HTTP/1.1 connection, with no trace hook on the request and no
  content encoding, is read this way; anything else (HTTP/2, a mounted transport, the SDK's
  tracing wrapper, another version's classes) gives None. A test pins that the versions this
  project installs take this path (tests/test_provider_anthropic_sse.py).
- Cheap until used: importing this module loads neither httpx2 nor httpcore2.

- Whole chunks are split here, not by h11: where h11 stands between two chunks with nothing
  buffered (its `ChunkedReader` waits for a size line), each plain chunk a read completes
  (`whole_chunks`: a hex size of 1 to 20 digits, no extension, CRLF, the data, CRLF) is taken
  without h11, which skips nothing it would have checked (a `Data` event changes no state of
  its connection). Whatever is not such a chunk - a part of one, an extension, the last
  chunk and its trailer, anything malformed - goes to h11 as before, so its errors, its end
  of message and its limits stay its own; and the bytes taken wait, as h11's would, for the
  read's other events, so a read that ends in an error hands over nothing, as before.

Why: httpcore yields each HTTP chunk on its own, and a chunk climbs about ten async
generators (httpcore's connection, its pool, httpx's transport, its client, `aiter_raw`)
before the SSE reader sees it. A model streams one chunk per event, so under a fast stream
that climb, per delta, was much of the agent's CPU time on the event loop that forwards the
deltas (scripts/bench_turn.py). Read here, one read is one climb, and `sse.py` splits its
events in one pass. h11 then still parsed every chunk on its own, through its state machine
(several microseconds a chunk, and a model streams one event per chunk); `whole_chunks` does
a read's chunks in one loop.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import AsyncGenerator
from typing import Any

from defect_core.providers.anthropic.socket_reads import socket_reads

__all__ = ["body_reads", "whole_chunks"]

_SIZE_LINE = re.compile(rb"([0-9A-Fa-f]{1,20})\r\n")
"""A chunk's size line in its plainest form (h11 also takes extensions and trailing blanks,
`h11._abnf.chunk_header`: those lines stay h11's to read)."""

_CHAIN = (
    ("httpx2._client", "BoundAsyncStream", "_stream"),
    ("httpx2._transports.default", "AsyncResponseStream", "_httpcore_stream"),
    ("httpcore2._async.connection_pool", "PoolByteStream", "_stream"),
    ("httpcore2._async.http11", "HTTP11ConnectionByteStream", "_connection"),
)
"""The body's stream classes, outermost first, each with the attribute holding the next."""


def body_reads(response: Any) -> AsyncGenerator[bytes, None] | None:
    """`response`'s body, one `bytes` per network read, or None when it cannot be read here
    (see the module's docstring)."""
    if response.is_stream_consumed or response.is_closed:
        return None
    if response.headers.get("content-encoding", "identity") != "identity":
        return None
    layer = response.stream
    body_stream = None
    for module, name, inner in _CHAIN:
        if type(layer) is not getattr(importlib.import_module(module), name, None):
            return None
        body_stream, layer = layer, getattr(layer, inner, None)
    http11 = importlib.import_module("httpcore2._async.http11")
    if type(layer) is not http11.AsyncHTTP11Connection:
        return None
    request = getattr(body_stream, "_request", None)
    if request is None or "trace" in request.extensions:
        return None
    response.is_stream_consumed = True
    return _reads(layer, request.extensions.get("timeout", {}).get("read"))


def whole_chunks(data: bytes) -> tuple[list[bytes], int]:
    """The data of the plain, whole chunks `data` begins with (read from a chunk's start),
    and how many bytes they take; (`[]`, 0) when it begins with anything else. Stops before
    the last chunk (size 0), a size line in another form, and a chunk not whole in `data` or
    not ended by CRLF: those are h11's to read (see the module's docstring)."""
    parts: list[bytes] = []
    used = 0
    match = _SIZE_LINE.match
    while (line := match(data, used)) is not None:
        size = int(line[1], 16)
        start = line.end()
        end = start + size
        if size == 0 or data[end : end + 2] != b"\r\n":
            break
        parts.append(data[start:end])
        used = end + 2
    return parts, used


async def _reads(connection: Any, read_timeout: float | None) -> AsyncGenerator[bytes, None]:
    """httpcore's body loop, handing over everything each network read completes."""
    h11 = importlib.import_module("h11")
    core_errors = importlib.import_module("httpcore2._exceptions")
    transport = importlib.import_module("httpx2._transports.default")
    chunked = importlib.import_module("h11._readers").ChunkedReader
    state = connection._h11_state
    network = connection._network_stream
    fast = socket_reads(network)  # the socket read as it fills (`socket_reads.py`)
    read = network.read if fast is None else fast.read
    read_size = connection.READ_NUM_BYTES
    need_data, data_event = h11.NEED_DATA, h11.Data
    finished = (h11.EndOfMessage, h11.PAUSED)
    try:
        with transport.map_httpcore_exceptions():
            parts: list[bytes] = []
            while True:
                try:
                    event = state.next_event()
                except h11.RemoteProtocolError as exc:
                    raise core_errors.RemoteProtocolError(exc) from exc
                if event is need_data:
                    reader = state._reader
                    # Between two chunks, nothing buffered: the read's whole chunks are ours.
                    between = (
                        type(reader) is chunked
                        and not reader._bytes_in_chunk
                        and not reader._bytes_to_discard
                        and not reader._reading_trailer
                    )
                    while True:
                        if parts:
                            yield b"".join(parts)
                            parts = []
                        data = await read(read_size, read_timeout)
                        if between and data and not state._receive_buffer:
                            taken, used = whole_chunks(data)
                            if used:
                                parts += taken
                                if used == len(data):
                                    continue  # still between two chunks: read on
                                data = data[used:]
                        state.receive_data(data)
                        break
                elif type(event) is data_event:
                    parts.append(bytes(event.data))
                elif isinstance(event, finished):
                    if parts:
                        yield b"".join(parts)
                    return
    finally:
        if fast is not None:
            fast.close()
