"""A file's prior content held by an open descriptor until the checkpoint stores it.

Owns `Pinned` (one open file, with the size and mtime it had when it was opened) and
`read_regular` (a regular file's bytes, never through a link at the end, never blocking on
a FIFO).

Why: a checkpointed write through the local backend replaces the file with a new inode (a
temporary renamed over the name, `tools.beneath.replace_beneath`), so the old inode keeps
the prior content untouched. Opening it before the write (a few microseconds) and reading it
when the checkpoint is stored, after the tool calls, takes the read — a copy of the whole
file, and the memory it holds until then — off the tool's path.

Invariant: `read` returns the content the file had when it was pinned, or raises
`PinnedChanged`: only a process that already held the old inode open (the name no longer
reaches it, and a pinned file has no other link) can change it afterwards, and a change
moves its mtime or size.
"""

from __future__ import annotations

import os
import stat as stat_mod
from pathlib import Path


def descriptor_room() -> int:
    """How many files a checkpoint may hold open: an eighth of the process's descriptor
    limit, so the tools, the store and the MCP servers keep plenty (256 where unknown)."""
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (ImportError, OSError, ValueError):
        return 256
    return 256 if soft == resource.RLIM_INFINITY else max(0, soft // 8)


class PinnedChanged(OSError):
    """The pinned file was changed after it was pinned: its prior content is lost."""


def open_regular(path: str | Path, *, dir_fd: int | None = None) -> tuple[int, os.stat_result]:
    """An open descriptor on a regular file (a link at the end is not followed; `path`
    relative to `dir_fd` when given) and its `fstat`; OSError for anything else."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=dir_fd)
    try:
        st = os.fstat(fd)
        if not stat_mod.S_ISREG(st.st_mode):
            raise OSError(0, "not a regular file")
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def read_all(fd: int, size_hint: int) -> bytes:
    """Everything from offset 0 of `fd` (sized by `size_hint`, so a file of the expected
    size is one read of exactly its size)."""
    chunks = []
    offset = 0
    want = size_hint + 1
    while chunk := os.pread(fd, want, offset):
        chunks.append(chunk)
        offset += len(chunk)
        want = 1 << 20
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def read_regular(path: str | Path, *, dir_fd: int | None = None) -> bytes:
    """A regular file's bytes, never through a link at the end, never blocking on a FIFO
    (`path` relative to `dir_fd` when given)."""
    fd, st = open_regular(path, dir_fd=dir_fd)
    try:
        return read_all(fd, st.st_size)
    finally:
        os.close(fd)


class Pinned:
    """One open file awaiting its read. Closed by `read`, `close`, or when collected."""

    __slots__ = ("fd", "mode", "mtime_ns", "size")

    def __init__(self, fd: int, st: os.stat_result) -> None:
        self.fd = fd
        self.size = st.st_size
        self.mtime_ns = st.st_mtime_ns
        self.mode = stat_mod.S_IMODE(st.st_mode)

    def read(self) -> bytes:
        """The content it had when pinned (closing it); `PinnedChanged` if it has changed."""
        try:
            data = read_all(self.fd, self.size)
            st = os.fstat(self.fd)
        finally:
            self.close()
        if len(data) != self.size or (st.st_size, st.st_mtime_ns) != (self.size, self.mtime_ns):
            raise PinnedChanged(0, "changed by another process before it was stored")
        return data

    def close(self) -> None:
        fd, self.fd = self.fd, -1
        if fd >= 0:
            os.close(fd)

    def __del__(self) -> None:
        self.close()
