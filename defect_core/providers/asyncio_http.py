"""The HTTP client the providers' SDKs send through: httpx2 over HTTP/1.1 of defect's own, on
asyncio's sockets.

Owns `direct_client(...)`: an `httpx2.AsyncClient` built as the SDKs build their default one
(the keep-alive socket options, the TLS context from the environment, redirects followed)
that sends through `AsyncioTransport`: an `httpx2` transport that keeps a pool of
connections per origin on asyncio's public `Protocol`, `loop.create_connection` and
`loop.start_tls`, writes each request and reads each response's head with h11 (its public
`Connection` API, a fresh one per exchange), and reads the body with `http_body.py`. And
`proxied()`: whether the environment names a proxy, where the caller keeps its SDK's own
default client instead.

Why: a model's answer streams as one small HTTP chunk per event, and what a delta costs is
mostly what the client pays per chunk and per network read. httpx2's own transport reads
through httpcore2, which parses each chunk with h11 and hands it up through five generators,
over anyio's socket stream, which arms a cancel scope and a timer around every read; with
several sessions streaming at once the deltas queue behind that work
(scripts/bench_turn.py, "sessions at once"). Here a network read becomes one piece of body
whatever number of chunks it holds, and a read arms a timer only when it must wait.
Everything else (the request, redirects, decoding, the SDK's retries and errors) is
httpx2's and the SDK's own, reached through their public API.

Invariants:
- Public API only: `httpx2.AsyncBaseTransport`, `Request`, `Response`, `AsyncByteStream`,
  `create_ssl_context`, `Limits` and its exception classes; its response extensions as
  documented (`http_version`, `reason_phrase`, `network_stream`); h11's `Connection`, `Request`,
  `Data`, `EndOfMessage`, `Response`, `InformationalResponse`; asyncio's transports and
  protocols.
- The errors are those httpx2's own transport raises, of the same class, and with the same
  message (h11's words for a broken or cut body, httpcore2's for a server that hung up
  before answering), except where anyio's says nothing of the cause (a reset connection:
  empty; a refused one: "All connection attempts failed"): there it is the system's error,
  which the provider's error then names. tests/test_provider_asyncio_http.py runs every case
  through both transports.
- A connection is reused only after a response read to its end that allows it (HTTP/1.1,
  no `Connection: close` either way, a length or chunked framing, nothing after the body),
  and taken from the pool only while the server has not closed it (nothing readable) and
  within `keepalive_expiry`; at most `max_keepalive_connections` wait per origin. The pool
  sets no cap of its own on open connections (the SDKs' default is 1000).
- A proxy is never bypassed: `proxied()` reads the environment as httpx2 does
  (`urllib.request.getproxies`), and where it names one the caller builds its SDK's default
  client, whose httpx2 transport handles the proxy and `NO_PROXY` as before.
- A read that waits longer than its `timeout` raises `ReadTimeout`; past `HIGH_WATER` bytes
  buffered unread the socket stops being read (`pause_reading`) until the reader drains it.
- Runs on asyncio, the only event loop defect runs on (anyio's asyncio backend).
- Imported only when a provider builds its client (after the SDK loaded, off the
  `initialize`/`session/new` path): it imports httpx2 and h11 at once.
"""

from __future__ import annotations

import asyncio
import select
import socket
import ssl
import sys
import time
import urllib.request
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import h11
import httpx2

from defect_core.providers.http_body import BodyError, BodyReader, Chunked, Sized, UntilClosed

__all__ = [
    "HIGH_WATER",
    "AsyncioTransport",
    "direct_client",
    "proxied",
    "sdk_client",
]

HIGH_WATER = 512 * 1024
"""Bytes buffered unread past which the socket stops being read, until the reader drains."""

Origin = tuple[bytes, bytes, int]
"""(scheme, host, port): what a kept connection can serve."""


def proxied() -> bool:
    """Whether the environment names a proxy that httpx2 would route a request through."""
    proxies = urllib.request.getproxies()
    return any(proxies.get(scheme) for scheme in ("http", "https", "all"))


def _keepalive_socket_options() -> list[tuple[int, int, int]]:
    """The TCP keep-alive options the SDKs' default clients set on every connection (a
    stream that goes quiet for minutes while a model thinks must not be dropped by a NAT)."""
    options = [(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)]
    interval = getattr(socket, "TCP_KEEPINTVL", None)
    if interval is not None:
        options.append((socket.IPPROTO_TCP, interval, 60))
    elif sys.platform == "darwin":
        options.append((socket.IPPROTO_TCP, getattr(socket, "TCP_KEEPALIVE", 0x10), 60))
    count = getattr(socket, "TCP_KEEPCNT", None)
    if count is not None:
        options.append((socket.IPPROTO_TCP, count, 5))
    idle = getattr(socket, "TCP_KEEPIDLE", None)
    if idle is not None:
        options.append((socket.IPPROTO_TCP, idle, 60))
    return options


def sdk_client(
    sdk: Any,
    *,
    timeout: httpx2.Timeout,
    event_hooks: Mapping[str, list[Callable[..., Any]]] | None = None,
) -> httpx2.AsyncClient:
    """The `http_client=` for the SDK module `sdk` (`anthropic` or `openai`: both have
    `DefaultAsyncHttpxClient` and `DEFAULT_CONNECTION_LIMITS`): `direct_client` with the SDK's
    pool limits, or, where the environment names a proxy (`proxied`), the SDK's own default
    client, which goes through it. `event_hooks` as httpx2 takes them."""
    if proxied():
        hooks = {} if event_hooks is None else {"event_hooks": dict(event_hooks)}
        client: httpx2.AsyncClient = sdk.DefaultAsyncHttpxClient(timeout=timeout, **hooks)
        return client
    limits = sdk.DEFAULT_CONNECTION_LIMITS
    return direct_client(timeout=timeout, limits=limits, event_hooks=event_hooks)


def direct_client(
    *,
    timeout: httpx2.Timeout,
    limits: httpx2.Limits,
    event_hooks: Mapping[str, list[Callable[..., Any]]] | None = None,
) -> httpx2.AsyncClient:
    """An `httpx2.AsyncClient` for an SDK's `http_client=` that connects directly (use it only
    where `proxied()` is false): `timeout` and `limits` as the SDK's default client takes
    them, redirects followed, `event_hooks` as httpx2 takes them."""
    return httpx2.AsyncClient(
        timeout=timeout,
        follow_redirects=True,
        event_hooks=dict(event_hooks or {}),
        transport=AsyncioTransport(limits),
    )


class AsyncioTransport(httpx2.AsyncBaseTransport):
    """httpx2's transport: HTTP/1.1 over a pool of asyncio connections (the docstring)."""

    def __init__(self, limits: httpx2.Limits) -> None:
        self._ssl = httpx2.create_ssl_context()
        self._ssl.set_alpn_protocols(["http/1.1"])
        self._keep = limits.max_keepalive_connections
        self._expiry = limits.keepalive_expiry
        self._idle: dict[Origin, list[_Connection]] = {}

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        url = request.url
        scheme = url.raw_scheme
        if scheme not in (b"http", b"https"):
            raise httpx2.UnsupportedProtocol(
                f"Request URL has an unsupported protocol '{scheme.decode()}://'."
            )
        origin = (scheme, url.raw_host, url.port or (443 if scheme == b"https" else 80))
        timeouts = request.extensions.get("timeout", {})
        connection = self._kept(origin) or await self._connect(origin, request, timeouts)
        try:
            return await _exchange(self, connection, request, timeouts)
        except BaseException:
            connection.close()
            raise

    def _kept(self, origin: Origin) -> _Connection | None:
        """A kept connection to `origin` the server has not closed, within its expiry."""
        kept = self._idle.get(origin)
        now = time.monotonic()
        while kept:
            connection = kept.pop()
            expired = self._expiry is not None and now - connection.idle_since > self._expiry
            if expired or connection.readable():
                connection.close()
                continue
            return connection
        return None

    def release(self, connection: _Connection) -> None:
        """`connection`'s exchange ended cleanly: keep it for the next request, or close it."""
        kept = self._idle.setdefault(connection.origin, [])
        if self._keep is not None and len(kept) >= self._keep:
            connection.close()
            return
        connection.idle_since = time.monotonic()
        kept.append(connection)

    async def _connect(
        self, origin: Origin, request: httpx2.Request, timeouts: Mapping[str, Any]
    ) -> _Connection:
        scheme, host, port = origin
        loop = asyncio.get_running_loop()
        reader = _Reader(loop)
        timeout = timeouts.get("connect")
        try:
            async with asyncio.timeout(timeout):
                transport, _ = await loop.create_connection(
                    lambda: reader, host.decode("ascii"), port, happy_eyeballs_delay=0.25
                )
        except TimeoutError:
            raise httpx2.ConnectTimeout("") from None
        except OSError as exc:
            raise httpx2.ConnectError(str(exc)) from exc
        try:
            sock = transport.get_extra_info("socket")
            for option in _keepalive_socket_options():
                sock.setsockopt(*option)
            if scheme == b"https":
                transport = await self._secured(transport, reader, request, host, timeout)
        except BaseException:  # a failed handshake, or a cancel: the socket is not kept
            transport.close()
            raise
        return _Connection(origin, transport, reader)

    async def _secured(
        self,
        transport: asyncio.Transport,
        reader: _Reader,
        request: httpx2.Request,
        host: bytes,
        timeout: float | None,  # noqa: ASYNC109 - httpx2's connect timeout
    ) -> asyncio.Transport:
        """`transport` with TLS started over it, for `host` (or the request's SNI name)."""
        sni = request.extensions.get("sni_hostname") or host.decode("ascii")
        try:
            async with asyncio.timeout(timeout):
                secured = await reader.loop.start_tls(
                    transport, reader, self._ssl, server_hostname=sni
                )
        except TimeoutError:
            raise httpx2.ConnectTimeout("") from None
        except (OSError, ssl.SSLError) as exc:
            raise httpx2.ConnectError(str(exc)) from exc
        if secured is None:
            raise httpx2.ConnectError("the connection closed during the TLS handshake")
        return secured

    async def aclose(self) -> None:
        for kept in self._idle.values():
            for connection in kept:
                connection.close()
        self._idle.clear()


async def _exchange(
    owner: AsyncioTransport,
    connection: _Connection,
    request: httpx2.Request,
    timeouts: Mapping[str, Any],
) -> httpx2.Response:
    """Send `request` on `connection` and read its response's head; its body is the
    response's stream, which gives `connection` back to `owner` once read to its end."""
    read_timeout, write_timeout = timeouts.get("read"), timeouts.get("write")
    state = h11.Connection(h11.CLIENT)
    sent = h11.Request(
        method=request.method, target=request.url.raw_path, headers=request.headers.raw
    )
    try:
        await connection.write(state.send(sent) or b"", write_timeout)
        async for part in request.stream:  # type: ignore[union-attr]  # httpx2 gives async
            if part:
                await connection.write(state.send(h11.Data(data=part)) or b"", write_timeout)
        await connection.write(state.send(h11.EndOfMessage()) or b"", write_timeout)
    except h11.LocalProtocolError as exc:
        raise httpx2.LocalProtocolError(str(exc)) from exc
    while True:
        try:
            event = state.next_event()
        except h11.RemoteProtocolError as exc:
            raise httpx2.RemoteProtocolError(str(exc)) from exc
        if event is h11.NEED_DATA:
            data = await connection.read(read_timeout)
            if not data:  # no response yet, so the server hung up before answering
                raise httpx2.RemoteProtocolError("Server disconnected without sending a response.")
            state.receive_data(data)
        elif isinstance(event, h11.Response):
            break
        elif not isinstance(event, h11.InformationalResponse):
            raise httpx2.RemoteProtocolError(f"unexpected {type(event).__name__} before a response")
    leftover, _ = state.trailing_data
    framing = _framing(request.method, event)
    # h11 has read both sides' `Connection` headers and the version: DONE keeps it alive.
    keep = not isinstance(framing, UntilClosed) and state.our_state is h11.DONE
    if framing.done and leftover:  # bytes after a body that has none (HEAD, 204, 304)
        keep = False
    return httpx2.Response(
        status_code=event.status_code,
        headers=event.headers.raw_items(),
        stream=_Body(owner, connection, framing, leftover, keep, read_timeout),
        extensions={
            "http_version": b"HTTP/" + event.http_version,
            "reason_phrase": event.reason,
            "network_stream": connection,
        },
    )


def _framing(method: str, response: h11.Response) -> BodyReader:
    """How the body of `response` to a `method` request ends (RFC 9112 §6.3)."""
    if method == "HEAD" or response.status_code in (204, 304):
        return Sized(0)
    length = None
    for name, value in response.headers:
        if name == b"transfer-encoding" and b"chunked" in value.lower():
            return Chunked()
        if name == b"content-length":
            length = int(value)
    return UntilClosed() if length is None else Sized(length)


class _Body(httpx2.AsyncByteStream):
    """A response's body, one piece per network read; gives its connection back to the
    transport once read to its end, and closes it otherwise."""

    def __init__(
        self,
        owner: AsyncioTransport,
        connection: _Connection,
        framing: BodyReader,
        leftover: bytes,
        keep: bool,
        timeout: float | None,
    ) -> None:
        self._owner = owner
        self._connection = connection
        self._framing = framing
        self._leftover = leftover
        self._keep = keep
        self._timeout = timeout
        self._closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        framing, connection = self._framing, self._connection
        data, self._leftover = self._leftover, b""
        while not framing.done:
            if framing.broken is not None:
                raise httpx2.RemoteProtocolError(framing.broken)
            if not data:
                data = await connection.read(self._timeout)
                if not data:
                    why = framing.incomplete()
                    if why is not None:
                        raise httpx2.RemoteProtocolError(why)
                    return
            try:
                piece = framing.feed(data)
            except BodyError as exc:
                raise httpx2.RemoteProtocolError(str(exc)) from exc
            data = b""
            if piece:
                yield piece

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        framing = self._framing
        if self._keep and framing.done and not framing.leftover:
            self._owner.release(self._connection)
        else:
            self._connection.close()


class _Reader(asyncio.Protocol):
    """What the socket delivered and its reader has not taken yet, and who waits for it."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.transport: asyncio.Transport | None = None
        self.pieces: deque[bytes] = deque()
        self.buffered = 0
        self.ended = False
        self.error: BaseException | None = None
        self.waiter: asyncio.Future[None] | None = None
        self.paused = False
        self.drained: asyncio.Future[None] | None = None
        self.writing_paused = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.pieces.append(data)
        self.buffered += len(data)
        if self.buffered > HIGH_WATER and not self.paused and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()
        self._wake()

    def eof_received(self) -> bool:
        self.ended = True
        self._wake()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.ended = True
        self.error = exc
        self._wake()
        self.writing_paused = False
        drained, self.drained = self.drained, None
        if drained is not None and not drained.done():
            drained.set_result(None)

    def pause_writing(self) -> None:
        self.writing_paused = True

    def resume_writing(self) -> None:
        self.writing_paused = False
        drained, self.drained = self.drained, None
        if drained is not None and not drained.done():
            drained.set_result(None)

    def _wake(self) -> None:
        waiter, self.waiter = self.waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def take(self) -> bytes:
        """All that is buffered (some is), in one piece."""
        pieces = self.pieces
        data = pieces.popleft() if len(pieces) == 1 else b"".join(pieces)
        pieces.clear()
        self.buffered = 0
        if self.paused and self.transport is not None:  # drained: read the socket again
            self.paused = False
            self.transport.resume_reading()
        return data


def _expire(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_exception(TimeoutError())


class _Connection:
    """One connection to an origin, plain or TLS: `_Reader`'s buffer read and its transport
    written."""

    def __init__(self, origin: Origin, transport: asyncio.Transport, reader: _Reader) -> None:
        self.origin = origin
        self.idle_since = 0.0
        self._transport = transport
        self._reader = reader
        reader.transport = transport

    async def read(self, timeout: float | None) -> bytes:  # noqa: ASYNC109 - httpx2's timeouts
        """What the socket delivered (up to all that is buffered), waiting for it up to
        `timeout`; b"" at the end of the stream."""
        reader = self._reader
        while not reader.pieces:
            if reader.ended:
                if reader.error is not None:
                    raise httpx2.ReadError(str(reader.error) or type(reader.error).__name__)
                return b""
            await self._wait(timeout)
        return reader.take()

    async def _wait(self, seconds: float | None) -> None:
        reader = self._reader
        waiter: asyncio.Future[None] = reader.loop.create_future()
        reader.waiter = waiter
        timer = None if seconds is None else reader.loop.call_later(seconds, _expire, waiter)
        try:
            await waiter
        except TimeoutError:
            raise httpx2.ReadTimeout("") from None
        finally:
            if timer is not None:
                timer.cancel()
            if reader.waiter is waiter:
                reader.waiter = None

    async def write(self, data: bytes, timeout: float | None) -> None:  # noqa: ASYNC109
        if not data:
            return
        reader = self._reader
        if reader.ended or self._transport.is_closing():
            raise httpx2.WriteError("the connection is closed")
        self._transport.write(data)
        if not reader.writing_paused:
            return
        drained: asyncio.Future[None] = reader.loop.create_future()
        reader.drained = drained
        try:
            await asyncio.wait_for(drained, timeout)
        except TimeoutError:
            raise httpx2.WriteTimeout("") from None
        if reader.error is not None:
            raise httpx2.WriteError(str(reader.error) or type(reader.error).__name__)

    def close(self) -> None:
        self._transport.close()

    def get_extra_info(self, info: str) -> Any:
        """What httpx2's `network_stream` response extension answers (its documented names)."""
        transport = self._transport
        if info == "is_readable":
            return self.readable()
        names = {
            "client_addr": "sockname",
            "server_addr": "peername",
            "ssl_object": "ssl_object",
            "socket": "socket",
        }
        return transport.get_extra_info(names[info]) if info in names else None

    def readable(self) -> bool:
        """Whether a read would return at once: bytes buffered, the end seen, or bytes (or the
        end) in the socket that the loop has not delivered yet. Asked of an idle connection:
        readable means the server closed it (or broke the protocol)."""
        reader = self._reader
        if reader.pieces or reader.ended or self._transport.is_closing():
            return True
        sock = self._transport.get_extra_info("socket")
        if sock is None or sock.fileno() < 0:
            return True
        if not hasattr(select, "poll"):  # select() takes descriptors below 1024 only
            ready, _, _ = select.select([sock.fileno()], [], [], 0)
            return bool(ready)
        poller = select.poll()
        poller.register(sock.fileno(), select.POLLIN)
        return bool(poller.poll(0))
