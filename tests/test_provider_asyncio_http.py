"""The HTTP client the providers send through (defect_core/providers/asyncio_http.py) does what
httpx2's own transport does: the same bytes, the same keep-alive, and the same exception, of
the same class with the same message, for every way a server can fail - checked by running
each case through both transports against one real server on 127.0.0.1. Plus what only it
owns: the proxy left to httpx2, a slow reader's back-pressure, a read's time-out."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import anthropic
import httpx2
import pytest

from defect_core.config import Settings
from defect_core.providers import asyncio_http
from defect_core.providers.anthropic import anthropic_provider
from tests.support.tls import self_signed

LIMITS = httpx2.Limits(max_connections=10, max_keepalive_connections=5)

Answer = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@dataclass
class Server:
    """A server on 127.0.0.1 that answers each request with `answer`, counting connections."""

    answer: Answer
    port: int = 0
    connections: int = 0
    requests: list[bytes] = field(default_factory=list)
    handlers: set[asyncio.Task[None]] = field(default_factory=set)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1/x"

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        task = asyncio.current_task()
        assert task is not None
        self.handlers.add(task)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                self.requests.append(head)
                length = _content_length(head)
                if length:
                    await reader.readexactly(length)
                await self.answer(reader, writer)
                if writer.is_closing():
                    return
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            return
        finally:
            writer.close()


def _content_length(head: bytes) -> int:
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value)
    return 0


@asynccontextmanager
async def serving(answer: Answer, ssl: object = None) -> AsyncIterator[Server]:
    server = Server(answer)
    listening = await asyncio.start_server(server.serve, "127.0.0.1", 0, ssl=ssl)  # type: ignore[arg-type]
    server.port = listening.sockets[0].getsockname()[1]
    try:
        yield server
    finally:
        listening.close()
        for task in server.handlers:
            task.cancel()
        await asyncio.gather(*server.handlers, return_exceptions=True)


def _clients() -> list[tuple[str, httpx2.AsyncClient]]:
    timeout = httpx2.Timeout(2.0, connect=2.0)
    return [
        ("httpx2", httpx2.AsyncClient(timeout=timeout, transport=httpx2.AsyncHTTPTransport())),
        ("asyncio", asyncio_http.direct_client(timeout=timeout, limits=LIMITS)),
    ]


HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


async def _streamed(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.write(HEAD)
    for n in range(20):
        writer.write(_chunk(b"data: %d\n\n" % n))
        await writer.drain()
        await asyncio.sleep(0.001)
    writer.write(b"0\r\n\r\n")
    await writer.drain()


async def _cut_mid_body(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.write(HEAD + _chunk(b"data: 1\n\n") + b"40\r\npartial")
    await writer.drain()
    writer.close()


async def _closed_before_answering(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    writer.close()


async def _reset_mid_body(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.write(HEAD + _chunk(b"data: 1\n\n"))
    await writer.drain()
    sock = writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    writer.transport.abort()


async def _stalled(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.write(HEAD + _chunk(b"data: 1\n\n"))
    await writer.drain()
    await asyncio.sleep(30)


async def _garbled(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\nnot a chunk\r\n")
    await writer.drain()
    writer.close()


async def _then_closed_idle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """A whole answer kept alive, after which the server closes the idle connection."""
    writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
    await writer.drain()
    await asyncio.sleep(0.05)
    writer.close()


async def _read_all(client: httpx2.AsyncClient, url: str) -> tuple[int, list[bytes]]:
    async with client.stream("POST", url, content=b'{"x": 1}') as response:
        return response.status_code, [piece async for piece in response.aiter_raw()]


async def _outcome(client: httpx2.AsyncClient, url: str) -> tuple[str, str]:
    try:
        status, pieces = await _read_all(client, url)
    except httpx2.HTTPError as exc:
        return type(exc).__name__, str(exc)
    return str(status), b"".join(pieces).decode()


def _same_words(ours: str, theirs: str) -> bool:
    """The same message, or where httpx2's says nothing of the cause (anyio's empty or generic
    words), the system's error naming it."""
    uninformative = theirs in ("", "All connection attempts failed")
    return ours == theirs or (uninformative and ours.startswith("[Errno "))


@pytest.mark.anyio
async def test_a_streamed_body_arrives_whole_and_the_connection_is_kept() -> None:
    async with serving(_streamed) as server:
        for name, client in _clients():
            async with client:
                first = await _read_all(client, server.url)
                second = await _read_all(client, server.url)
            assert first[0] == second[0] == 200, name
            expected = b"".join(b"data: %d\n\n" % n for n in range(20))
            assert b"".join(first[1]) == b"".join(second[1]) == expected, name
        # one connection per client: the second request reused the first's
        assert server.connections == 2
        assert len(server.requests) == 4


@pytest.mark.anyio
@pytest.mark.parametrize(
    "answer",
    [_cut_mid_body, _closed_before_answering, _reset_mid_body, _stalled, _garbled],
    ids=lambda a: a.__name__.strip("_"),
)
async def test_a_failing_server_raises_what_httpx2s_own_transport_raises(answer: Answer) -> None:
    outcomes = {}
    async with serving(answer) as server:
        for name, client in _clients():
            async with client:
                outcomes[name] = await _outcome(client, server.url)
    theirs, ours = outcomes["httpx2"], outcomes["asyncio"]
    assert theirs[0].endswith(("Error", "Timeout")), theirs  # the case does fail
    assert ours[0] == theirs[0]
    assert _same_words(ours[1], theirs[1]), (ours, theirs)


@pytest.mark.anyio
async def test_a_refused_connection_raises_what_httpx2s_own_transport_raises() -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    outcomes = {}
    for name, client in _clients():
        async with client:
            outcomes[name] = await _outcome(client, f"http://127.0.0.1:{port}/")
    ours, theirs = outcomes["asyncio"], outcomes["httpx2"]
    assert ours[0] == theirs[0] == "ConnectError"
    assert _same_words(ours[1], theirs[1]), (ours, theirs)


@pytest.mark.anyio
async def test_an_idle_connection_the_server_closed_is_replaced_not_failed() -> None:
    async with serving(_then_closed_idle) as server:
        _, client = _clients()[1]
        async with client:
            assert await _outcome(client, server.url) == ("200", "ok")
            await asyncio.sleep(0.3)  # the server has closed the kept connection
            assert await _outcome(client, server.url) == ("200", "ok")
        assert server.connections == 2


@pytest.mark.anyio
async def test_a_slow_reader_gets_every_byte_of_a_large_body_in_bounded_pieces() -> None:
    body = bytes(range(256)) * (4 * 1024 * 1024 // 256)

    async def large(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(body))
        writer.write(body)
        await writer.drain()

    async with serving(large) as server:
        _, client = _clients()[1]
        async with client, client.stream("GET", server.url) as response:
            pieces = []
            async for piece in response.aiter_raw():
                pieces.append(piece)
                if len(pieces) % 8 == 0:
                    await asyncio.sleep(0.005)  # the server outpaces the reader
    assert b"".join(pieces) == body
    # the socket stops being read past HIGH_WATER, and asyncio reads 256 KiB at most at once
    assert max(len(p) for p in pieces) <= asyncio_http.HIGH_WATER + 256 * 1024


@pytest.mark.anyio
async def test_over_tls_the_body_arrives_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tls = self_signed(tmp_path, "127.0.0.1")
    monkeypatch.setenv("SSL_CERT_FILE", str(tls.cert))
    async with serving(_streamed, ssl=tls.server) as server:
        _, client = _clients()[1]
        async with client:
            url = server.url.replace("http://", "https://")
            first = await _read_all(client, url)
            second = await _read_all(client, url)
    expected = b"".join(b"data: %d\n\n" % n for n in range(20))
    assert b"".join(first[1]) == b"".join(second[1]) == expected
    assert server.connections == 1


@pytest.mark.anyio
async def test_a_cancelled_read_leaves_the_pool_usable() -> None:
    async with serving(_stalled) as server:
        _, client = _clients()[1]
        async with client:
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.2):
                    await _read_all(client, server.url)
            assert await _outcome(client, server.url) == ("ReadTimeout", "")
        assert server.connections == 2


@pytest.mark.anyio
async def test_with_a_proxy_in_the_environment_the_provider_goes_through_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A proxy the environment names is used (httpx2's own client), never bypassed."""

    async def proxy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")
        await writer.drain()

    async with serving(proxy) as server:
        monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{server.port}")
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
        assert asyncio_http.proxied()
        provider = anthropic_provider(Settings(provider="anthropic", base_url="http://api.invalid"))
        try:
            client, _ = await provider._ready()
            with pytest.raises(anthropic.NotFoundError):  # the proxy's answer
                await client.models.list()
        finally:
            await provider.aclose()
    seen = server.requests
    assert seen and seen[0].startswith(b"GET http://api.invalid/v1/models")


def _without_proxies(monkeypatch: pytest.MonkeyPatch) -> None:
    for scheme in ("HTTP", "HTTPS", "ALL"):
        monkeypatch.delenv(f"{scheme}_PROXY", raising=False)
        monkeypatch.delenv(f"{scheme.lower()}_proxy", raising=False)


def test_without_a_proxy_the_environment_names_none(monkeypatch: pytest.MonkeyPatch) -> None:
    _without_proxies(monkeypatch)
    assert not asyncio_http.proxied()
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    assert asyncio_http.proxied()


@pytest.mark.anyio
async def test_the_providers_client_hands_over_a_network_read_as_one_piece(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The client the provider builds sends through this transport: five chunks written at
    once arrive as one piece (httpx2's own transport would hand over five)."""
    events = [b"data: %d\n\n" % n for n in range(5)]

    async def at_once(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(HEAD + b"".join(_chunk(e) for e in events) + b"0\r\n\r\n")
        await writer.drain()

    _without_proxies(monkeypatch)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    async with serving(at_once) as server:
        url = f"http://127.0.0.1:{server.port}"
        provider = anthropic_provider(Settings(provider="anthropic", base_url=url))
        try:
            client, _ = await provider._ready()
            async with client.with_streaming_response.models.list() as response:
                pieces = [piece async for piece in response.iter_bytes()]
        finally:
            await provider.aclose()
    assert pieces == [b"".join(events)]


@pytest.mark.anyio
async def test_an_untrusted_certificate_raises_what_httpx2s_own_transport_raises(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server whose certificate nothing trusts: the handshake fails the same way, and the
    connection is not kept (the next request fails again, it does not hang)."""
    tls = self_signed(tmp_path, "127.0.0.1")
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    outcomes = {}
    async with serving(_streamed, ssl=tls.server) as server:
        url = server.url.replace("http://", "https://")
        for name, client in _clients():
            async with client:
                outcomes[name] = await _outcome(client, url)
                assert await _outcome(client, url) == outcomes[name]
    ours, theirs = outcomes["asyncio"], outcomes["httpx2"]
    assert ours[0] == theirs[0] == "ConnectError"
    assert "CERTIFICATE_VERIFY_FAILED" in ours[1]
    assert _same_words(ours[1], theirs[1]), (ours, theirs)


@pytest.mark.anyio
async def test_bytes_after_a_response_without_a_body_are_not_read_as_the_next_one() -> None:
    """A 204 followed by stray bytes: the connection is not kept, so the next request gets
    its own answer instead of those bytes."""

    async def stray(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 204 No Content\r\n\r\nstray bytes")
        await writer.drain()

    async with serving(stray) as server:
        _, client = _clients()[1]
        async with client:
            assert await _outcome(client, server.url) == ("204", "")
            assert await _outcome(client, server.url) == ("204", "")
        assert server.connections == 2
