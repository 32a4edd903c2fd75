"""The body of an HTTP/1.1 response, taken out of the bytes a connection delivers.

Owns `BodyReader` and its three framings (RFC 9112 §6.3): `Chunked` (`Transfer-Encoding:
chunked`), `Sized` (`Content-Length`) and `UntilClosed` (neither: the body ends when the
server closes). Each is fed what a network read delivered (`feed`) and returns the body bytes
in it, whole or partial chunks alike, joined: one piece per network read, however many chunks
it held; `done` tells when the message has ended, and `leftover` holds what came after it.

Why: a model's answer streams as one small chunk per event, and a parser that hands over one
chunk at a time pays its whole per-chunk path, and every generator above it, per event, which
is most of what a delta costs when several sessions stream at once (scripts/bench_turn.py).
Here a network read's chunks cost a few slices and one `find` each.

Invariants:
- Pure: bytes in, bytes out; no I/O, no clock. A malformed body raises `BodyError` with h11's
  wording for the same fault, and a body cut short is told by `BodyReader.incomplete`, in
  h11's words (what httpx2's own transport raises, so a provider's errors read the same).
  As with h11, the body bytes before a fault are handed over first (`broken` then holds the
  fault). tests/test_http_body.py holds every framing to h11's own output, split at every
  kind of place.
- Chunk extensions are ignored and trailers skipped, as h11 does; a chunk-size line longer
  than `MAX_LINE` is refused rather than buffered without end.
"""

from __future__ import annotations

import re

__all__ = ["MAX_LINE", "BodyError", "BodyReader", "Chunked", "Sized", "UntilClosed"]

MAX_LINE = 16 * 1024
"""The longest chunk-size line, or trailer section, taken before the body is refused as
malformed."""

_SIZE = re.compile(rb"([0-9A-Fa-f]{1,20})(?:;.*)?[ \t]*\r\n")
_BLANK_LINE = re.compile(rb"\n\r?\n")
_CRLF = b"\r\n"


class BodyError(Exception):
    """A response body that breaks HTTP/1.1's framing."""


class BodyReader:
    """One response's body framing, fed network reads in order until it is `done` (or
    `broken`)."""

    done: bool = False
    leftover: bytes = b""
    broken: str | None = None
    """Why the body broke after the bytes the last `feed` returned (h11 hands those over
    first): the caller raises it once it has passed them on, and feeds no more."""

    def feed(self, data: bytes) -> bytes:
        raise NotImplementedError

    def incomplete(self) -> str | None:
        """Why the body is incomplete if the connection ended now; None if it may end."""
        raise NotImplementedError


class UntilClosed(BodyReader):
    """No length given: everything until the server closes is the body."""

    def feed(self, data: bytes) -> bytes:
        return data

    def incomplete(self) -> str | None:
        return None


class Sized(BodyReader):
    """`Content-Length: length`."""

    def __init__(self, length: int) -> None:
        self.length = length
        self.received = 0
        self.done = length == 0

    def feed(self, data: bytes) -> bytes:
        wanted = self.length - self.received
        if len(data) >= wanted:
            self.done = True
            self.leftover = data[wanted:]
            data = data[:wanted]
        self.received += len(data)
        return data

    def incomplete(self) -> str | None:
        if self.done:
            return None
        return (
            "peer closed connection without sending complete message body "
            f"(received {self.received} bytes, expected {self.length})"
        )


class Chunked(BodyReader):
    """`Transfer-Encoding: chunked`: size lines, data, CRLF; a zero size, trailers, a blank
    line. As strict as h11: CRLF line ends, at most 20 hex digits of size."""

    def __init__(self) -> None:
        self._pending = b""
        """Bytes received but not yet understood (a partial size line, a CRLF, a trailer)."""
        self._left = 0
        """Bytes of the current chunk's data still to come."""
        self._footer = b""
        """What is still due of the CRLF after a chunk's data."""
        self._trailers = False
        """The zero-size chunk came: trailer lines until a blank one."""

    def feed(self, data: bytes) -> bytes:
        if self._pending:
            data, self._pending = self._pending + data, b""
        out: list[bytes] = []
        try:
            self._decode(data, out)
        except BodyError as exc:
            if not out:
                raise
            self.broken = str(exc)
        return out[0] if len(out) == 1 else b"".join(out)

    def _decode(self, data: bytes, out: list[bytes]) -> None:
        """Append the body bytes in `data` to `out`; keep what is not understood yet."""
        at, end = 0, len(data)
        while at < end:
            if self._left:
                take = min(self._left, end - at)
                out.append(data[at : at + take])
                at += take
                self._left -= take
                if not self._left:
                    self._footer = b"\r\n"
            elif self._footer:
                got = data[at : at + len(self._footer)]
                if got != self._footer[: len(got)]:
                    shown = bytearray(got)  # h11 says it of a bytearray
                    raise BodyError(f"malformed chunk footer: {shown!r} (expected {_CRLF!r})")
                at += len(got)
                self._footer = self._footer[len(got) :]
            elif self._trailers:
                if data.startswith((b"\r\n", b"\n"), at):
                    at += 1 if data[at] == 10 else 2
                    self.done = True
                    break
                blank = _BLANK_LINE.search(data, at)
                if blank is None:
                    if end - at > MAX_LINE:
                        raise BodyError("trailers too long")
                    break
                at = blank.end()
                self.done = True
                break
            else:
                line_end = data.find(b"\r\n", at)
                if line_end < 0:
                    if end - at > MAX_LINE:
                        raise BodyError("chunk header too long")
                    break
                line = data[at : line_end + 2]
                at = line_end + 2
                match = _SIZE.fullmatch(line)
                if match is None:
                    raise BodyError(f"illegal chunk header: {bytearray(line)!r}")
                size = int(match.group(1), 16)
                if size:
                    self._left = size
                else:
                    self._trailers = True
        if self.done:
            self.leftover = data[at:]
        elif at < end:
            self._pending = data[at:]

    def incomplete(self) -> str | None:
        if self.done:
            return None
        return (
            "peer closed connection without sending complete message body (incomplete chunked read)"
        )
