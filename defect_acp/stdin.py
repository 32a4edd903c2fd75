"""Standard input as the protocol's read side, whatever an editor (or a person) gave us.

Owns `check_stdin`, which says before anything is served whether fd 0 can carry the
protocol at all, and `open_reader`, the asyncio reader over it.

Invariants:
- A closed fd 0 or a stdin that cannot be read (opened write-only, no permission) is
  `StdinUnusable`: the command prints one line and exits non-zero, never a traceback.
- Every readable kind works: pipes, sockets and terminals through the event loop's poller;
  regular files and devices such as `/dev/null` (which epoll refuses) through one reader
  thread. `defect acp </dev/null` therefore sees end of input at once and exits 0.

Why: editors give a pipe, but people and scripts start `defect acp` with `</dev/null`, a
file of requests, or a closed descriptor; each of those used to hang or end in a traceback.
"""

from __future__ import annotations

import asyncio
import errno
import os
import stat
import threading

LINE_LIMIT = 64 * 1024 * 1024
"""Longest line the reader buffers (the transport answers longer ones with an error)."""


class StdinUnusable(Exception):
    """fd 0 cannot carry the protocol; `str(e)` is the one line to show."""


def check_stdin(fd: int = 0) -> os.stat_result:
    """The status of `fd`, or `StdinUnusable` saying why it cannot be read."""
    try:
        status = os.fstat(fd)
        flags = os_get_flags(fd)
    except OSError as exc:
        if exc.errno == errno.EBADF:
            raise StdinUnusable(
                "standard input is closed; defect acp reads JSON-RPC from it "
                "(an editor starts it with a pipe on stdin)"
            ) from None
        raise StdinUnusable(f"standard input cannot be used: {exc.strerror or exc}") from None
    if flags & os.O_ACCMODE == os.O_WRONLY:
        raise StdinUnusable(
            "standard input is open for writing only; defect acp reads JSON-RPC from it"
        )
    return status


def os_get_flags(fd: int) -> int:
    import fcntl

    return fcntl.fcntl(fd, fcntl.F_GETFL)


async def open_reader(fd: int = 0, limit: int = LINE_LIMIT) -> asyncio.StreamReader:
    """An asyncio reader over `fd` (see the module docstring for which kinds take which path)."""
    status = check_stdin(fd)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=limit)
    if stat.S_ISFIFO(status.st_mode) or stat.S_ISSOCK(status.st_mode) or os.isatty(fd):
        protocol = asyncio.StreamReaderProtocol(reader)
        pipe = os.fdopen(os.dup(fd), "rb", buffering=0)
        await loop.connect_read_pipe(lambda: protocol, pipe)
        return reader
    threading.Thread(
        target=_pump, args=(fd, reader, loop), name="defect-stdin", daemon=True
    ).start()
    return reader


def _pump(fd: int, reader: asyncio.StreamReader, loop: asyncio.AbstractEventLoop) -> None:
    """Blocking reads of a file or device, handed to the loop; ends the reader at EOF."""
    try:
        while True:
            try:
                chunk = os.read(fd, 1 << 16)
            except OSError as exc:
                loop.call_soon_threadsafe(reader.set_exception, exc)
                return
            if not chunk:
                break
            loop.call_soon_threadsafe(reader.feed_data, chunk)
        loop.call_soon_threadsafe(reader.feed_eof)
    except RuntimeError:  # the loop closed while we were reading: nobody is listening
        return
