"""A streamed body read off its connection (`body.py`) is what h11 alone makes of the bytes.

`body.py` splits whole chunks itself where h11 stands between two chunks, and leaves the
rest to h11. These tests drive its read loop against a real `h11.Connection` (a client that
sent a request and received a chunked response's head), over a scripted network that hands
the bytes over in reads cut anywhere, and hold it against h11's own loop (httpcore's, as
`body.py` had it before it split chunks): the same body, the same error with the same
message, nothing handed over from a read that fails, and h11 at the same state after (done
with the message, so the connection is reused). Chunks come in every form h11 reads: sizes
in either case and with leading zeros, extensions, trailing blanks, data holding CRLF, a
trailer; and broken ones. The end-to-end reads (the real SDK against the fake API) are in
tests/test_provider_anthropic_sse.py.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncGenerator
from typing import Any

import h11
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from defect_core.providers.anthropic import body
from defect_core.providers.anthropic.body import whole_chunks

HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


class _Network:
    """The connection's network stream: hands over the scripted reads, then EOF."""

    def __init__(self, reads: list[bytes]) -> None:
        self._reads = list(reads)

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._reads.pop(0) if self._reads else b""


class _Connection:
    """What `body._reads` reads of httpcore's `AsyncHTTP11Connection`."""

    READ_NUM_BYTES = 64 * 1024

    def __init__(self, reads: list[bytes], head: bytes = HEAD) -> None:
        self._h11_state = h11.Connection(our_role=h11.CLIENT)
        self._h11_state.send(h11.Request(method="POST", target="/v1/messages", headers=_HOST))
        self._h11_state.send(h11.EndOfMessage())
        self._h11_state.receive_data(head)
        assert type(self._h11_state.next_event()) is h11.Response
        self._network_stream = _Network(reads)


_HOST = [("host", "127.0.0.1"), ("content-length", "0")]


async def _h11_alone(connection: _Connection) -> AsyncGenerator[bytes, None]:
    """The reference: httpcore's body loop, every chunk parsed by h11."""
    state, network = connection._h11_state, connection._network_stream
    parts: list[bytes] = []
    while True:
        event = state.next_event()
        if event is h11.NEED_DATA:
            if parts:
                yield b"".join(parts)
                parts = []
            state.receive_data(await network.read(connection.READ_NUM_BYTES))
        elif type(event) is h11.Data:
            parts.append(bytes(event.data))
        elif isinstance(event, h11.EndOfMessage | h11.PAUSED):
            if parts:
                yield b"".join(parts)
            return


def _outcome(reads: list[bytes], ours: bool) -> tuple[list[bytes], str | None, Any]:
    """(what each read handed over, the error and its message, h11's states after)."""
    connection = _Connection(reads)
    reader = body._reads(connection, None) if ours else _h11_alone(connection)

    async def run() -> tuple[list[bytes], str | None]:
        handed: list[bytes] = []
        try:
            async for piece in reader:
                handed.append(piece)
        except Exception as exc:
            return handed, f"{type(exc).__name__}: {exc}"
        return handed, None

    handed, error = asyncio.run(run())
    state = connection._h11_state
    return handed, error, (state.our_state, state.their_state)


def _same_as_h11(reads: list[bytes]) -> list[bytes]:
    ours, theirs = _outcome(reads, ours=True), _outcome(reads, ours=False)
    # h11 names its errors by its own classes; httpx maps both the same way (`map_...`).
    ours_handed, ours_error, ours_states = ours
    theirs_handed, theirs_error, theirs_states = theirs
    assert b"".join(ours_handed) == b"".join(theirs_handed)
    assert _error_text(ours_error) == _error_text(theirs_error)
    assert ours_states == theirs_states
    return ours_handed


def _error_text(error: str | None) -> str | None:
    """The message of an error, whichever layer's class carries it."""
    return None if error is None else error.split(": ", 1)[1]


def _chunk(data: bytes, form: int) -> bytes:
    size = f"{len(data):x}"
    line = [size, size.upper(), "00" + size, size + ";name=value", size + " \t"][form % 5]
    return line.encode() + b"\r\n" + data + b"\r\n"


def _cut(stream: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(stream) + 1) for c in cuts})
    edges = [0, *points, len(stream)]
    return [stream[a:b] for a, b in itertools.pairwise(edges) if b > a]


PAYLOAD = st.binary(min_size=1, max_size=40) | st.sampled_from(
    [b"\r\n", b"event: x\ndata: {}\n\n", b"0\r\n\r\n", b"a\r\n"]
)


@settings(max_examples=300, deadline=None)
@given(
    chunks=st.lists(st.tuples(PAYLOAD, st.integers(0, 4)), max_size=12),
    trailer=st.sampled_from([b"", b"x-end: 1\r\n"]),
    cuts=st.lists(st.integers(0, 10_000), max_size=8),
)
def test_a_well_formed_body_reads_the_same_wherever_the_reads_split(
    chunks: list[tuple[bytes, int]], trailer: bytes, cuts: list[int]
) -> None:
    stream = b"".join(_chunk(data, form) for data, form in chunks) + b"0\r\n" + trailer + b"\r\n"
    handed = _same_as_h11(_cut(stream, cuts))
    assert b"".join(handed) == b"".join(data for data, _ in chunks)


@settings(max_examples=400, deadline=None)
@given(
    chunks=st.lists(st.tuples(PAYLOAD, st.integers(0, 4)), min_size=1, max_size=8),
    at=st.integers(0, 10_000),
    framing=st.booleans(),
    byte=st.sampled_from([b"x", b"\r", b"\n", b"0", b";", b" ", b"G"]),
    cut_short=st.booleans(),
    cuts=st.lists(st.integers(0, 10_000), max_size=6),
)
def test_a_broken_body_fails_the_same_wherever_the_reads_split(
    chunks: list[tuple[bytes, int]],
    at: int,
    framing: bool,
    byte: bytes,
    cut_short: bool,
    cuts: list[int],
) -> None:
    """One byte changed (or the body cut short) anywhere, or, half the time, in the framing
    (a size line or a chunk's closing CRLF), where a reader that checks less would differ."""
    pieces = [_chunk(data, form) for data, form in chunks]
    stream = b"".join(pieces) + b"0\r\n\r\n"
    if framing:
        edges, start = [], 0
        for piece, (data, _) in zip(pieces, chunks, strict=True):
            line = piece.index(b"\r\n")
            edges += [start, start + line, start + line + 2 + len(data) + 1]
            start += len(piece)
        at = edges[at % len(edges)]
    at %= len(stream)
    broken = stream[:at] if cut_short else stream[:at] + byte + stream[at + 1 :]
    _same_as_h11(_cut(broken, cuts))


def test_known_breaks_fail_as_h11_says() -> None:
    bad_footer = b"3\r\nabcXY4\r\nwxyz\r\n0\r\n\r\n"
    handed, error, _ = _outcome([b"2\r\nok\r\n" + bad_footer], ours=True)
    assert handed == []  # the read that fails hands over nothing, as h11's loop did
    assert error is not None and "malformed chunk footer" in error
    _, error, _ = _outcome([b"2\r\nok\r\n", b"zz\r\n"], ours=True)
    assert error is not None and "illegal chunk header" in error
    handed, error, _ = _outcome([b"2\r\nok\r\n", b"3\r\nab"], ours=True)
    assert handed == [b"ok", b"ab"]
    assert error is not None and "incomplete chunked read" in error


def test_whole_chunks_takes_plain_whole_chunks_only() -> None:
    assert whole_chunks(b"3\r\nabc\r\nA\r\n0123456789\r\n") == ([b"abc", b"0123456789"], 23)
    assert whole_chunks(b"3\r\nabc\r\n4\r\nab") == ([b"abc"], 8)  # the rest is h11's
    assert whole_chunks(b"3\r\nabc\r\n0\r\n\r\n") == ([b"abc"], 8)  # the last chunk too
    assert whole_chunks(b"3;x=1\r\nabc\r\n") == ([], 0)  # an extension
    assert whole_chunks(b"3 \r\nabc\r\n") == ([], 0)  # a trailing blank
    assert whole_chunks(b"3\r\nabcd\r\n") == ([], 0)  # not ended by CRLF where it should
    assert whole_chunks(b"3\r\nabc\r") == ([], 0)  # not whole yet
    assert whole_chunks(b"1" * 21 + b"\r\n") == ([], 0)  # longer than h11 reads
    assert whole_chunks(b"") == ([], 0)


def test_the_chunks_of_a_read_are_split_here_not_by_h11(monkeypatch: pytest.MonkeyPatch) -> None:
    """The point of it: a read of whole chunks never reaches h11's parser."""
    seen: list[bytes] = []
    receive = h11.Connection.receive_data

    def counting(self: h11.Connection, data: bytes) -> None:
        seen.append(data)
        receive(self, data)

    monkeypatch.setattr(h11.Connection, "receive_data", counting)
    many = b"".join(_chunk(b"event: d\ndata: {}\n\n", 0) for _ in range(50))
    handed, error, states = _outcome([many, many, b"0\r\n\r\n"], ours=True)
    assert error is None and states == (h11.DONE, h11.DONE)
    assert handed == [b"event: d\ndata: {}\n\n" * 50] * 2
    assert seen == [HEAD, b"0\r\n\r\n"]  # h11 read the head and the last chunk only
