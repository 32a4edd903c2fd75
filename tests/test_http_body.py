"""An HTTP/1.1 body's framing (defect_core/providers/http_body.py) against h11 itself: every
body, split at every kind of place, gives the bytes h11 gives, and every malformed or cut
body fails with h11's words for it."""

from __future__ import annotations

import random

import h11
import pytest

from defect_core.providers.http_body import MAX_LINE, BodyError, Chunked, Sized, UntilClosed

HEAD = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"


def chunked(*parts: bytes, trailer: bytes = b"") -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n" + trailer + b"\r\n"


def through_h11(pieces: list[bytes], head: bytes = HEAD) -> tuple[bytes, str]:
    """What h11 makes of `head`, then `pieces` one network read at a time, then the end: the
    body, and "end" or its error's words."""
    state = h11.Connection(h11.CLIENT)
    state.send(h11.Request(method="GET", target="/", headers=[("Host", "x")]))
    state.send(h11.EndOfMessage())
    state.receive_data(head)
    body = b""
    try:
        for piece in [*pieces, b""]:  # b"": the connection ends
            state.receive_data(piece)
            while (event := state.next_event()) is not h11.NEED_DATA:
                if isinstance(event, h11.Data):
                    body += bytes(event.data)
                elif isinstance(event, h11.EndOfMessage):
                    return body, "end"
    except h11.RemoteProtocolError as exc:
        return body, str(exc)
    raise AssertionError("h11 neither ended nor failed")


def through_ours(reader: Chunked | Sized | UntilClosed, pieces: list[bytes]) -> tuple[bytes, str]:
    body = b""
    try:
        for piece in pieces:
            body += reader.feed(piece)
            if reader.broken is not None:
                return body, reader.broken
            if reader.done:
                return body, "end"
    except BodyError as exc:
        return body, str(exc)
    return body, reader.incomplete() or "end"


def splits(wire: bytes, rng: random.Random) -> list[list[bytes]]:
    """`wire` whole, byte by byte, and cut at random places."""
    ways = [[wire], [wire[i : i + 1] for i in range(len(wire))]]
    for _ in range(20):
        cuts = sorted(rng.sample(range(1, max(2, len(wire))), k=min(len(wire) - 1, 5)))
        ways.append([wire[a:b] for a, b in zip([0, *cuts], [*cuts, len(wire)], strict=True)])
    return ways


BODIES = [
    chunked(b"data: 1\n\n"),
    chunked(b"hello", b"world", b"x" * 5000),
    chunked(),
    chunked(b"a", trailer=b"X-Trailer: yes\r\n"),
    b"5;name=value\r\nhello\r\n0\r\n\r\n",
    b"5  \r\nhello\r\n0\r\n\r\n",
    b"A\r\n0123456789\r\n0\r\n\r\n",
]


@pytest.mark.parametrize("wire", BODIES, ids=range(len(BODIES)))
def test_every_split_of_a_body_gives_what_h11_gives(wire: bytes) -> None:
    for pieces in splits(wire, random.Random(len(wire))):
        expected = through_h11(pieces)
        assert expected[1] == "end"
        assert through_ours(Chunked(), pieces) == expected, pieces


def test_what_follows_the_body_is_left_over_and_a_read_holds_all_its_chunks_in_one_piece() -> None:
    wire = chunked(b"one", b"two", b"three") + b"HTTP/1.1 200 OK\r\n"
    reader = Chunked()
    assert reader.feed(wire) == b"onetwothree"
    assert reader.done and reader.leftover == b"HTTP/1.1 200 OK\r\n"
    reader = Chunked()
    assert reader.feed(wire[:10]) == b"one"  # a partial chunk's data comes out at once
    assert reader.feed(wire[10:]) == b"twothree"
    assert reader.leftover == b"HTTP/1.1 200 OK\r\n"


BROKEN = [
    b"zz\r\nnot a chunk\r\n",  # not a size
    b"5\r\nhelloXY0\r\n\r\n",  # no CRLF after the data
    b"5\r\nhello\r",  # cut inside the CRLF
    b"5\r\nhel",  # cut inside the data
    b"5\r\nhello\r\n",  # cut before the last chunk
    b"5\r\nhello\r\n0\r\n",  # cut before the blank line
    b"123456789012345678901\r\n",  # more than 20 hex digits
    b"5\nhello\r\n0\r\n\r\n",  # a size line without its CR
]


@pytest.mark.parametrize("wire", BROKEN, ids=range(len(BROKEN)))
def test_a_broken_or_cut_body_fails_in_h11s_words(wire: bytes) -> None:
    for pieces in splits(wire, random.Random(len(wire))):
        expected = through_h11(pieces)
        assert expected[1] != "end"  # the case does fail
        assert through_ours(Chunked(), pieces) == expected, pieces


def test_a_sized_body_ends_at_its_length_and_a_cut_one_says_how_much_came() -> None:
    head = b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\n"
    reader = Sized(10)
    assert reader.feed(b"0123") == b"0123"
    assert reader.feed(b"456789NEXT") == b"456789"
    assert reader.done and reader.leftover == b"NEXT"
    cut = Sized(10)
    assert through_ours(cut, [b"0123"]) == through_h11([b"0123"], head)
    assert "received 4 bytes, expected 10" in (cut.incomplete() or "")
    assert Sized(0).done


def test_a_body_until_closed_is_everything_and_never_incomplete() -> None:
    reader = UntilClosed()
    assert reader.feed(b"abc") == b"abc" and not reader.done
    assert reader.incomplete() is None


def test_an_endless_size_line_is_refused_not_buffered() -> None:
    reader = Chunked()
    with pytest.raises(BodyError, match="too long"):
        for _ in range(4):
            reader.feed(b"f" * (MAX_LINE // 2))
