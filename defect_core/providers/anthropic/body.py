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
  `ReadError` reach the caller as the `httpx2` exceptions), and the response is closed by
  the caller's `response.aclose()` as before, which hands the connection back to the pool
  (or closes it, when the body was not read to its end).
- Only the exact chain of stream classes `httpx2`'s default transport builds over
  `httpcore2`'s pool and HTTP/1.1 connection, with no trace hook on the request and no
  content encoding, is read this way; anything else (HTTP/2, a mounted transport, the SDK's
  tracing wrapper, another version's classes) gives None. A test pins that the versions this
  project installs take this path (tests/test_provider_anthropic_sse.py).
- Cheap until used: importing this module loads neither httpx2 nor httpcore2.

Why: httpcore yields each HTTP chunk on its own, and a chunk climbs about ten async
generators (httpcore's connection, its pool, httpx's transport, its client, `aiter_raw`)
before the SSE reader sees it. A model streams one chunk per event, so under a fast stream
that climb, per delta, was much of the agent's CPU time on the event loop that forwards the
deltas (scripts/bench_turn.py). Read here, one read is one climb, and `sse.py` splits its
events in one pass.
"""

from __future__ import annotations

import importlib
from collections.abc import AsyncGenerator
from typing import Any

__all__ = ["body_reads"]

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


async def _reads(connection: Any, read_timeout: float | None) -> AsyncGenerator[bytes, None]:
    """httpcore's body loop, handing over everything each network read completes."""
    h11 = importlib.import_module("h11")
    core_errors = importlib.import_module("httpcore2._exceptions")
    transport = importlib.import_module("httpx2._transports.default")
    state = connection._h11_state
    network = connection._network_stream
    read_size = connection.READ_NUM_BYTES
    need_data, data_event = h11.NEED_DATA, h11.Data
    finished = (h11.EndOfMessage, h11.PAUSED)
    with transport.map_httpcore_exceptions():
        parts: list[bytes] = []
        while True:
            try:
                event = state.next_event()
            except h11.RemoteProtocolError as exc:
                raise core_errors.RemoteProtocolError(exc) from exc
            if event is need_data:
                if parts:
                    yield b"".join(parts)
                    parts = []
                state.receive_data(await network.read(read_size, timeout=read_timeout))
            elif type(event) is data_event:
                parts.append(bytes(event.data))
            elif isinstance(event, finished):
                if parts:
                    yield b"".join(parts)
                return
