"""The network reads under a streamed body: each one takes everything the socket has delivered,
without turning the socket's reading off and on around it.

Owns `socket_reads(network)`: for `httpcore2`'s `AnyIOStream` over anyio's asyncio
`SocketStream`, plain or under anyio's `TLSStream` (the exact classes, as `body.py` checks its
own, and the private parts read here present), a `SocketReads` whose
`read(max_bytes, read_timeout)` stands in for `network.read` while one response body is read,
and whose `close()` leaves the socket as anyio leaves it between two reads; None for any
other stream (then `body.py` calls `network.read`, as before).

Invariants:
- The same bytes in the same order as `network.read`, and the same outcomes: `b""` at the end
  of the stream; httpcore's `ReadTimeout` when nothing came for `read_timeout` seconds; its
  `ReadError` when the stream was closed or the connection broke (both wrapping the anyio
  error httpcore would have wrapped, so httpx words them the same). Under TLS, a record is
  decrypted by the stream's own `SSLObject`; anything but "needs more bytes" (a TLS alert, a
  close, a key update that must be answered) is handed back to anyio's own `receive`, which
  meets the same state and raises or answers as it always does.
- Each read is a checkpoint (the task yields to the loop once), as anyio's `receive` is: a
  fast stream never keeps the other sessions' tasks waiting.
- While a body is read, the socket's reading stays on; `close()` (the body ended, failed or
  was left) turns it off. anyio keeps it off between reads, and httpcore's check that an idle
  pooled connection is still alive reads the socket itself: a connection goes back to the
  pool as it always did. The bytes that arrive between two reads wait in anyio's own queue,
  so at most the rest of the response is held in memory (the model's reply, bounded by its
  `max_tokens`), where the kernel's buffer held part of it before.

Why: anyio's `receive` turns the transport's reading on before each wait and off after it
(two `epoll_ctl` system calls and the selector's bookkeeping each time), and httpcore's `read`
opens a cancel scope with a deadline (a timer scheduled, then cancelled) inside two context
managers. Under a fast stream a read carries a few deltas, so that cost came per delta, on the
event loop that forwards them. Here a read that finds bytes queued takes them all at once, and
only a read that must wait schedules a timer. In scripts/bench_turn.py (medians of 10 runs,
interleaved with the code before), the agent's CPU per delta with 4 sessions streaming at once
went from 72.5 to 63.8 µs, and a delta's way to its update from 0.48 to 0.41 ms.

Cheap until used: importing this module loads neither anyio's backend nor httpcore2.
"""

from __future__ import annotations

import asyncio
import importlib
import ssl
from typing import Any, Protocol

__all__ = ["SocketReads", "socket_reads"]


class SocketReads(Protocol):
    """`network.read` for one response body, and what to do once it is read."""

    async def read(self, max_bytes: int, read_timeout: float | None) -> bytes: ...

    def close(self) -> None: ...


def socket_reads(network: Any) -> SocketReads | None:
    """Reads of `network` (httpcore's network stream) as the module's docstring says, or None
    when `network` is not one of the streams this module knows."""
    anyio_backend = importlib.import_module("httpcore2._backends.anyio")
    if type(network) is not anyio_backend.AnyIOStream:
        return None
    stream: Any = getattr(network, "_stream", None)
    sockets = importlib.import_module("anyio._backends._asyncio").SocketStream
    if type(stream) is sockets:
        return _PlainReads(stream) if _readable(stream) else None
    tls = importlib.import_module("anyio.streams.tls").TLSStream
    if type(stream) is tls and type(getattr(stream, "transport_stream", None)) is sockets:
        known = all(hasattr(stream, name) for name in _TLS_PARTS)
        return _TlsReads(stream, network) if known and _readable(stream.transport_stream) else None
    return None


_SOCKET_PARTS = ("_transport", "_protocol", "_closed")
_PROTOCOL_PARTS = ("read_queue", "read_event", "is_at_eof", "exception")
_TLS_PARTS = ("_ssl_object", "_read_bio", "_write_bio", "_broken")
"""The private parts of anyio's streams read here: a version without one of them keeps
httpcore's read (a test pins that the version installed has them all)."""


def _readable(stream: Any) -> bool:
    if not all(hasattr(stream, name) for name in _SOCKET_PARTS):
        return False
    protocol = stream._protocol
    return all(hasattr(protocol, name) for name in _PROTOCOL_PARTS) and isinstance(
        stream._transport, asyncio.ReadTransport
    )


class _PlainReads:
    """Reads of an anyio asyncio `SocketStream` (its transport and `StreamProtocol`)."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self._transport: asyncio.Transport = stream._transport
        self._protocol = stream._protocol
        self._errors = importlib.import_module("httpcore2._exceptions")
        self._anyio = importlib.import_module("anyio")

    async def read(self, max_bytes: int, read_timeout: float | None) -> bytes:
        protocol, transport = self._protocol, self._transport
        queue = protocol.read_queue
        if protocol.read_event.is_set() or transport.is_closing() or protocol.is_at_eof:
            await asyncio.sleep(0)  # bytes are there (or never will be): a checkpoint only
        else:
            transport.resume_reading()  # stays on until `close()`
            await self._wait(read_timeout)
        if not queue:
            # As anyio's `receive` decides, then httpcore maps: closed, broken, or the end.
            if self._stream._closed:
                raise self._errors.ReadError(self._anyio.ClosedResourceError())
            if protocol.exception is not None:
                error = self._anyio.BrokenResourceError()
                raise self._errors.ReadError(error) from protocol.exception
            return b""
        data: bytes = queue.popleft() if len(queue) == 1 else b"".join(queue)
        queue.clear()
        if len(data) > max_bytes:
            data, rest = data[:max_bytes], data[max_bytes:]
            queue.append(rest)
        else:
            protocol.read_event.clear()
        return data

    async def _wait(self, read_timeout: float | None) -> None:
        """Until bytes come (or the end, or a break); `ReadTimeout` after `read_timeout`."""
        event = self._protocol.read_event
        if read_timeout is None:
            await event.wait()
            return
        expired = False

        def expire() -> None:
            nonlocal expired
            expired = True
            event.set()  # wakes the wait; the empty queue below tells it from bytes

        timer = asyncio.get_running_loop().call_later(read_timeout, expire)
        try:
            await event.wait()
        finally:
            timer.cancel()
        protocol = self._protocol
        if expired and not protocol.read_queue and not self._ended():
            event.clear()
            raise self._errors.ReadTimeout(TimeoutError())

    def _ended(self) -> bool:
        protocol = self._protocol
        return bool(
            self._transport.is_closing() or protocol.is_at_eof or protocol.exception is not None
        )

    def close(self) -> None:
        if not self._transport.is_closing():
            self._transport.pause_reading()


class _TlsReads:
    """Reads of an anyio `TLSStream` over a `SocketStream`: the socket's bytes fed to the
    stream's own `SSLObject`, which is read for the plaintext."""

    def __init__(self, stream: Any, network: Any) -> None:
        self._tls = stream
        self._network = network
        self._socket = _PlainReads(stream.transport_stream)

    async def read(self, max_bytes: int, read_timeout: float | None) -> bytes:
        tls = self._tls
        if tls._broken or tls._write_bio.pending:
            return await self._anyio_read(max_bytes, read_timeout)
        ssl_object, incoming = tls._ssl_object, tls._read_bio
        checked = False
        while True:
            try:
                data: bytes = ssl_object.read(max_bytes)
            except ssl.SSLWantReadError:
                raw = await self._socket.read(_RAW_READ, read_timeout)
                checked = True
                if not raw:
                    incoming.write_eof()
                else:
                    incoming.write(raw)
                continue
            except ssl.SSLError:
                # An alert, a close, a broken record: anyio's read meets the same state and
                # raises what it always raises.
                return await self._anyio_read(max_bytes, read_timeout)
            if not data or tls._write_bio.pending:
                # The end of the stream, or a record that must be answered: anyio's words.
                return data if data else await self._anyio_read(max_bytes, read_timeout)
            if not checked:
                await asyncio.sleep(0)  # a record already decrypted: a checkpoint only
            return data

    async def _anyio_read(self, max_bytes: int, read_timeout: float | None) -> bytes:
        result: bytes = await self._network.read(max_bytes, read_timeout)
        return result

    def close(self) -> None:
        self._socket.close()


_RAW_READ = 65536
"""Most bytes taken off the socket at once under TLS (anyio's own `receive` default)."""
