"""The network reads under a streamed body (`socket_reads.py`) give what httpcore's own read
gives, over a real socket, plain and under TLS.

Each case is a server on 127.0.0.1 (asyncio's; under TLS with a self-signed certificate made
for the run, which the client trusts: tests/support/tls.py) that sends bytes in pieces, pauses,
then ends the stream cleanly, drops it, or goes silent. The client connects through httpcore2's
anyio backend, the network stream the SDK's HTTP/1.1 connections read, and reads the same
script twice: once with `network.read` (the reference) and once with `socket_reads`. Both must
give the same bytes and end the same way (the same exception, worded the same), and after our
reads the socket's reading is off again, as anyio leaves it. Other tests pin that the stack
this project installs takes these reads, that a read yields to the loop even with bytes
waiting, and that more bytes than `max_bytes` are kept for the next read.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpcore2
import pytest

from defect_core.providers.anthropic.socket_reads import socket_reads
from tests.support.tls import SelfSigned, self_signed

Script = list[tuple[str, Any]]
"""What the server does, in order: ("send", bytes), ("pause", seconds), then ("eof", None),
("drop", None) (a reset) or ("hang", seconds) (silence, then a clean end)."""


@pytest.fixture(scope="module")
def tls_pair(tmp_path_factory: pytest.TempPathFactory) -> SelfSigned:
    return self_signed(tmp_path_factory.mktemp("tls"), "127.0.0.1")


@asynccontextmanager
async def _server(script: Script, tls: SelfSigned | None) -> AsyncIterator[int]:
    """A server on 127.0.0.1 that plays `script` to each client; yields its port."""

    async def play(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            for action, value in script:
                if action == "send":
                    writer.write(value)
                    await writer.drain()
                elif action in ("pause", "hang"):
                    await asyncio.sleep(value)
                if action == "drop":
                    transport = writer.transport
                    sock = transport.get_extra_info("socket")
                    sock.setsockopt(*_LINGER_RESET)
                    transport.abort()
                    return
            writer.close()
            await writer.wait_closed()
        except (ConnectionError, ssl.SSLError):
            pass

    context = None if tls is None else tls.server
    server = await asyncio.start_server(play, "127.0.0.1", 0, ssl=context)
    async with server:
        yield server.sockets[0].getsockname()[1]


_LINGER_RESET = (socket.SOL_SOCKET, socket.SO_LINGER, b"\1\0\0\0\0\0\0\0")
"""SO_LINGER on with a zero timeout: closing sends a reset, as a dropped connection does."""


async def _connect(port: int, tls: SelfSigned | None) -> Any:
    network = await httpcore2.AnyIOBackend().connect_tcp("127.0.0.1", port)
    if tls is not None:
        network = await network.start_tls(tls.trust, server_hostname="127.0.0.1")
    return network


async def _read_all(
    read: Callable[[int, float | None], Any], timeout: float | None = 2.0
) -> tuple[bytes, str | None]:
    """Everything read until b"" or an error: (the bytes, the error's type and words)."""
    got: list[bytes] = []
    try:
        while data := await read(65536, timeout):
            got.append(data)
    except Exception as exc:  # compared between the two ways of reading
        return b"".join(got), f"{type(exc).__module__}.{type(exc).__name__}: {exc}"
    return b"".join(got), None


CASES: dict[str, tuple[Script, float | None]] = {
    "pieces then the end": (
        [("send", b"one "), ("pause", 0.02), ("send", b"two "), ("send", b"three"), ("eof", None)],
        2.0,
    ),
    "many small pieces": ([("send", bytes([65 + i % 26]) * 7) for i in range(300)], 2.0),
    "a large body": ([("send", bytes(range(256)) * 2048), ("eof", None)], 2.0),
    "dropped midway": ([("send", b"partial "), ("pause", 0.05), ("drop", None)], 2.0),
    "silent past the timeout": ([("send", b"first "), ("hang", 0.6)], 0.2),
    "no timeout": ([("send", b"slow "), ("pause", 0.1), ("send", b"but sure")], None),
}


@pytest.mark.anyio
@pytest.mark.parametrize("secure", [False, True], ids=["plain", "tls"])
@pytest.mark.parametrize("case", list(CASES))
async def test_reads_give_what_httpcore_gives(
    case: str, secure: bool, tls_pair: SelfSigned
) -> None:
    script, timeout = CASES[case]
    tls = tls_pair if secure else None
    async with _server(script, tls) as port:
        reference = await _connect(port, tls)
        theirs = await _read_all(reference.read, timeout)
        await reference.aclose()

        network = await _connect(port, tls)
        handed_back = 0  # reads left to anyio's own (under TLS: an alert, the close)
        anyio_read = network.read

        async def counted(max_bytes: int, timeout: float | None) -> bytes:
            nonlocal handed_back
            handed_back += 1
            data: bytes = await anyio_read(max_bytes, timeout)
            return data

        network.read = counted
        reads = socket_reads(network)
        assert reads is not None  # the anyio and httpcore2 installed are read this way
        ours = await _read_all(reads.read, timeout)
        reads.close()
        transport = _socket_stream(network)._transport
        assert transport.is_closing() or not transport.is_reading()  # off, as anyio leaves it
        await network.aclose()
    assert ours[0] == theirs[0]
    assert ours[1] == theirs[1]
    assert handed_back <= (1 if secure else 0)  # every record but the closing one was read here
    if case == "silent past the timeout":
        assert ours[1] is not None and "ReadTimeout" in ours[1]
    if case.startswith("pieces") or case.startswith("a large"):
        assert ours[1] is None


def _socket_stream(network: Any) -> Any:
    stream = network._stream
    return getattr(stream, "transport_stream", stream)


@pytest.mark.anyio
async def test_a_read_takes_every_piece_that_arrived_and_keeps_what_exceeds_max_bytes() -> None:
    script: Script = [("send", b"a" * 10), ("pause", 0.02), ("send", b"b" * 10)]
    script += [("pause", 0.02), ("send", b"c" * 10), ("pause", 0.5), ("eof", None)]
    async with _server(script, tls=None) as port:
        network = await _connect(port, tls=None)
        reads = socket_reads(network)
        assert reads is not None
        first = await reads.read(65536, 2.0)  # "a…" as soon as it comes
        await asyncio.sleep(0.15)  # the other pieces arrive one by one, reading still on
        rest = await reads.read(65536, 2.0)  # all of them in this one read
        assert first + rest == b"a" * 10 + b"b" * 10 + b"c" * 10
        reads.close()
        await network.aclose()

    pieces: Script = [("send", b"x" * 40), ("pause", 0.5), ("eof", None)]
    async with _server(pieces, tls=None) as port:
        network = await _connect(port, tls=None)
        reads = socket_reads(network)
        assert reads is not None
        got = b""
        while len(got) < 40:
            part = await reads.read(16, 2.0)
            assert 0 < len(part) <= 16
            got += part
        assert got == b"x" * 40
        reads.close()
        await network.aclose()


@pytest.mark.anyio
async def test_a_read_yields_to_the_loop_even_with_bytes_waiting() -> None:
    body: Script = [("send", b"z" * 4000), ("pause", 0.5), ("eof", None)]
    async with _server(body, tls=None) as port:
        network = await _connect(port, tls=None)
        reads = socket_reads(network)
        assert reads is not None
        got = await reads.read(100, 2.0)
        while len(got) < 4000:
            got += await reads.read(65536, 2.0)  # wait until the rest has arrived
        ran = 0

        async def other() -> None:
            nonlocal ran
            ran += 1

        task = asyncio.create_task(other())
        # The socket has nothing more for now, but queue bytes as if it had: a read of them
        # must still let `other` run first.
        _socket_stream(network)._protocol.read_queue.append(b"queued")
        _socket_stream(network)._protocol.read_event.set()
        assert await reads.read(65536, 2.0) == b"queued"
        assert ran == 1
        await task
        reads.close()
        await network.aclose()


@pytest.mark.anyio
async def test_a_read_cancelled_while_waiting_leaves_the_socket_as_anyio_does() -> None:
    async with _server([("send", b"hello"), ("hang", 1.0)], tls=None) as port:
        network = await _connect(port, tls=None)
        reads = socket_reads(network)
        assert reads is not None
        assert await reads.read(65536, 5.0) == b"hello"
        waiting = asyncio.create_task(reads.read(65536, 5.0))
        await asyncio.sleep(0.05)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        reads.close()
        assert not _socket_stream(network)._transport.is_reading()
        await network.aclose()


def test_streams_this_module_does_not_know_are_left_to_httpcore() -> None:
    assert socket_reads(object()) is None

    class Other(httpcore2.AsyncNetworkStream):
        pass

    assert socket_reads(Other()) is None


@pytest.mark.anyio
async def test_an_anyio_without_the_parts_read_here_keeps_httpcores_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with _server([("send", b"hello"), ("eof", None)], tls=None) as port:
        network = await _connect(port, tls=None)
        protocol = _socket_stream(network)._protocol
        monkeypatch.delattr(protocol, "read_queue")  # as a later anyio might have it
        assert socket_reads(network) is None
        monkeypatch.undo()
        reads = socket_reads(network)
        assert reads is not None
        assert await _read_all(reads.read) == (b"hello", None)
        reads.close()
        await network.aclose()
