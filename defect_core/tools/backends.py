"""The doors tools use to reach files and processes: `FsBackend` and `ShellBackend`.

Owns both protocols and their local implementations (`LocalFsBackend`, `LocalShellBackend`).
The ACP bridge provides delegated implementations (`defect_acp/delegate.py`) that route the
same calls to the editor, so edits land in its buffers and commands show in its terminal.

Invariants:
- Paths handed to a backend are absolute and were already checked against the workspace
  boundary by the tool (`tools.workspace`); a backend never widens access.
- A shell handle is released exactly once; `kill` ends the whole process group.
- A command never inherits the secrets of defect's environment: `create` takes the
  session's `EnvPolicy` (`defect_core/child_env.py`; without one, the default policy).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import signal
import stat as stat_mod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

import anyio
import anyio.to_thread

from defect_core.child_env import DEFAULT_POLICY, EnvPolicy
from defect_core.tools.beneath import (
    kind_of,
    open_beneath,
    open_regular,
    replace_beneath,
    stat_beneath,
)


@dataclass(frozen=True, slots=True)
class FileStat:
    size: int
    mtime_ns: int
    is_dir: bool = False
    kind: str = "file"
    """`file`, `dir`, or what else it is in words ("a FIFO (named pipe)", "a socket", ...)."""
    mode: int = 0o644
    """Permission bits (`stat.S_IMODE`)."""
    nlink: int = 1
    """Hard links to the file: above 1, writing in place would change the other names too."""

    @property
    def is_regular(self) -> bool:
        return self.kind == "file"


class FsBackend(Protocol):
    @property
    def delegated(self) -> bool:
        """True when reads and writes go through the editor."""
        ...

    async def read_text(self, path: Path, line: int | None = None, limit: int | None = None) -> str:
        """Text of the file, or `limit` lines from 1-based `line`. Raises `OSError`-like errors."""
        ...

    async def write_text(self, path: Path, content: str) -> None: ...

    async def stat(self, path: Path) -> FileStat | None:
        """None when the path does not exist."""
        ...


@dataclass(frozen=True, slots=True)
class ShellOutput:
    output: str
    truncated: bool
    exit_code: int | None = None
    signal: str | None = None
    exited: bool = False


@dataclass(frozen=True, slots=True)
class ShellExit:
    exit_code: int | None
    signal: str | None = None


class ShellBackend(Protocol):
    @property
    def delegated(self) -> bool:
        """True when commands run in the editor's terminal."""
        ...

    async def create(
        self,
        command: str,
        cwd: Path,
        env: dict[str, str] | None = None,
        output_limit: int | None = None,
        *,
        policy: EnvPolicy = DEFAULT_POLICY,
    ) -> str:
        """Start `command` under a shell; returns a handle (the terminal id when delegated).
        It runs without the variables `policy` withholds, with `env` laid over the rest."""
        ...

    async def output(self, handle: str) -> ShellOutput: ...

    async def wait_for_exit(self, handle: str) -> ShellExit: ...

    async def kill(self, handle: str) -> None: ...

    async def release(self, handle: str) -> None: ...


# --- local implementations --------------------------------------------------------------------
#
# Both run blocking work off the event loop: file I/O in a worker thread, processes under
# asyncio's subprocess machinery (the runtime runs on anyio's asyncio backend).


@runtime_checkable
class BinaryReader(Protocol):
    """An optional extra of a *local* fs backend: raw bytes (images, binary sniffing)."""

    async def read_bytes(self, path: Path, limit: int | None = None) -> bytes:
        """At most `limit` bytes from the start of the file (all of it when None)."""
        ...


_CHUNK = 1 << 20


def local_stat(path: Path, root: Path | None = None) -> FileStat | None:
    """`os.stat` as a `FileStat`, following symlinks; None when nothing is there. A path
    inside `root` is reached beneath it, as reads are (`_open_for_read`): a link on its way
    that leads out is refused (`tools.beneath.stat_beneath`)."""
    try:
        if root is not None and _lexically_inside(path, root):
            st = stat_beneath(root, path)
        else:
            st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    is_dir = stat_mod.S_ISDIR(st.st_mode)
    if stat_mod.S_ISREG(st.st_mode):
        kind = "file"
    elif is_dir:
        kind = "dir"
    else:
        kind = kind_of(st.st_mode)
    return FileStat(
        size=st.st_size,
        mtime_ns=st.st_mtime_ns,
        is_dir=is_dir,
        kind=kind,
        mode=stat_mod.S_IMODE(st.st_mode),
        nlink=st.st_nlink,
    )


_BLOCK = 1 << 16


def _nth_newline(chunk: bytes, n: int) -> int:
    """Index of the `n`-th (1-based) newline of `chunk`; the caller knows there are ≥ n.

    Counting 64 KiB blocks finds the block, a binary search over `bytes.count` the byte, so
    the work stays in C and near one pass even when `n` is in the tens of thousands.
    """
    lo = 0
    while True:
        in_block = chunk.count(b"\n", lo, lo + _BLOCK)
        if in_block >= n:
            break
        n -= in_block
        lo += _BLOCK
    hi = min(lo + _BLOCK, len(chunk))
    base = lo
    while lo < hi:
        mid = (lo + hi) // 2
        if chunk.count(b"\n", base, mid) >= n:
            hi = mid
        else:
            lo = mid + 1
    return lo - 1


WINDOW_LINE_BYTES = 256 * 1024
"""A window read keeps at most this much of one line (the tools show far less of it): a
200 MB file of one line costs a few megabytes, not gigabytes."""
WINDOW_BYTES = 8 * 1024 * 1024
"""And at most this much in all, whatever `limit` says."""


def _cut_utf8(data: bytes) -> bytes:
    """`data` without a UTF-8 sequence the cut split at its end."""
    end = len(data)
    back = 0
    while back < 3 and end - back > 0 and (data[end - back - 1] & 0xC0) == 0x80:
        back += 1
    if end - back > 0 and data[end - back - 1] >= 0xC0:
        return data[: end - back - 1]
    return data


def _collect(
    chunk: bytes, out: bytearray, line_len: int, want: int | None
) -> tuple[int, int, bool]:
    """Add `chunk`'s lines to `out`, each cut at `WINDOW_LINE_BYTES`; returns (length of the
    unfinished last line, lines still wanted, done)."""
    pos = 0
    while pos < len(chunk):
        nl = chunk.find(b"\n", pos)
        end = len(chunk) if nl < 0 else nl
        room = WINDOW_LINE_BYTES - line_len
        if room > 0:
            piece = chunk[pos : min(end, pos + room)]
            out += piece if len(piece) < room or end - pos <= room else _cut_utf8(piece)
        line_len += end - pos
        if nl < 0:
            return line_len, want if want is not None else -1, False
        out += b"\n"
        line_len = 0
        pos = nl + 1
        if want is not None:
            want -= 1
            if want <= 0:
                return 0, 0, True
        if len(out) >= WINDOW_BYTES:
            return 0, want if want is not None else -1, True
    return line_len, want if want is not None else -1, False


def _read_window(path: Path, line: int | None, limit: int | None, root: Path | None = None) -> str:
    """`limit` lines from 1-based `line`, reading only as far as needed. Strict UTF-8.

    Without `line` and `limit`: the whole file (callers check its size first). A window is
    bounded by `WINDOW_LINE_BYTES` per line and `WINDOW_BYTES` in all."""
    with os.fdopen(_open_for_read(path, root), "rb") as f:
        if line is None and limit is None:
            return f.read().decode("utf-8")
        skip = max(line or 1, 1) - 1
        want = limit
        out = bytearray()
        line_len = 0
        while True:
            chunk = f.read(_CHUNK)
            if not chunk:
                break
            if skip:
                count = chunk.count(b"\n")
                if count < skip:
                    skip -= count
                    continue
                chunk = chunk[_nth_newline(chunk, skip) + 1 :]
                skip = 0
            line_len, left, done = _collect(chunk, out, line_len, want)
            want = None if left < 0 else left
            if done:
                break
    return bytes(out).decode("utf-8")


def _open_for_read(path: Path, root: Path | None) -> int:
    """A descriptor of the regular file at `path`: beneath `root` when it lies inside it
    (`tools.beneath`), plainly otherwise (a read outside the workspace the session allows)."""
    if root is not None and _lexically_inside(path, root):
        return open_beneath(root, path)
    return open_regular(path)


def _lexically_inside(path: Path, root: Path) -> bool:
    rel = os.path.relpath(os.path.normpath(path), os.path.normpath(root))
    return rel != ".." and not rel.startswith("../")


def _read_head(path: Path, limit: int | None, root: Path | None = None) -> bytes:
    with os.fdopen(_open_for_read(path, root), "rb") as f:
        return f.read() if limit is None else f.read(limit)


def _replace(path: Path, data: bytes, on_temporary: Callable[[str], None] | None = None) -> None:
    """Without a workspace root: replace the file a link points to (the link stays a link),
    atomically, creating its directory if needed (`tools.beneath.replace_beneath`)."""
    target = Path(os.path.realpath(path))
    target.parent.mkdir(parents=True, exist_ok=True)
    replace_beneath(target.parent, target, data, on_temporary=on_temporary)


class LocalFsBackend:
    """Files on this machine, read and written by the agent process itself.

    With a `root` (the session's workspace), every file inside it is opened and replaced
    beneath the root's descriptor (`tools.beneath`), so a symlink swapped after the path was
    checked cannot carry a read or a write outside. Writes outside the root are refused."""

    def __init__(self, root: Path | None = None) -> None:
        self._root = root

    @property
    def delegated(self) -> bool:
        return False

    async def read_text(self, path: Path, line: int | None = None, limit: int | None = None) -> str:
        return await anyio.to_thread.run_sync(_read_window, path, line, limit, self._root)

    async def read_bytes(self, path: Path, limit: int | None = None) -> bytes:
        return await anyio.to_thread.run_sync(_read_head, path, limit, self._root)

    async def write_text(self, path: Path, content: str) -> None:
        await anyio.to_thread.run_sync(self.write_now, path, content.encode("utf-8"))

    def write_now(
        self, path: Path, data: bytes, *, on_temporary: Callable[[str], None] | None = None
    ) -> None:
        """The write itself, blocking, on the calling thread: for a caller already off the
        event loop that must do more in the same hop (a checkpoint's capture, which is told
        the write's temporary file: `tools.beneath.replace_beneath`)."""
        if self._root is None:
            _replace(path, data, on_temporary)
        else:
            replace_beneath(self._root, path, data, on_temporary=on_temporary)

    async def stat(self, path: Path) -> FileStat | None:
        return local_stat(path, self._root)


# The marker a local shell puts where it dropped the middle of a long output.
def truncation_marker(dropped: int, unit: str = "bytes") -> str:
    return f"\n[... {dropped} {unit} truncated ...]\n"


class _Capture:
    """Output kept within a byte budget: the first half and a rolling last half."""

    def __init__(self, limit: int) -> None:
        self.head_limit = limit // 2
        self.tail_limit = limit - self.head_limit
        self.head = bytearray()
        self.tail = bytearray()
        self.dropped = 0

    def add(self, data: bytes) -> None:
        room = self.head_limit - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if not data:
            return
        self.tail += data
        excess = len(self.tail) - self.tail_limit
        if excess > 0:
            del self.tail[:excess]
            self.dropped += excess

    def text(self) -> str:
        if not self.dropped:
            return (self.head + self.tail).decode("utf-8", errors="replace")
        return (
            self.head.decode("utf-8", errors="replace")
            + truncation_marker(self.dropped)
            + self.tail.decode("utf-8", errors="replace")
        )


class _Process(asyncio.SubprocessProtocol):
    """One command: its output lands in `capture`; `exited` and `closed` mark its ends.

    The process's exit and the end of its output are separate events: a background child can
    hold the pipe open long after the shell is gone. (`asyncio.subprocess.Process.wait`
    waits for both, which would hang on `sleep 1000 &`.)
    """

    def __init__(self, capture: _Capture) -> None:
        self.capture = capture
        self.exited = asyncio.Event()
        self.closed = asyncio.Event()
        self.transport: asyncio.SubprocessTransport | None = None
        self.lifeline: int | None = None
        """The write end of the command's lifeline pipe (see `_LIFELINE`)."""

    def cut_lifeline(self) -> None:
        if self.lifeline is not None:
            os.close(self.lifeline)
            self.lifeline = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.SubprocessTransport)
        self.transport = transport

    def pipe_data_received(self, fd: int, data: bytes | str) -> None:
        self.capture.add(data if isinstance(data, bytes) else data.encode())

    def process_exited(self) -> None:
        self.exited.set()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed.set()

    @property
    def pid(self) -> int:
        assert self.transport is not None
        return self.transport.get_pid()

    @property
    def returncode(self) -> int | None:
        assert self.transport is not None
        return self.transport.get_returncode()


_DEFAULT_OUTPUT_LIMIT = 1 << 20
# After the shell exits, how long to wait for the rest of its output: a background child that
# inherited stdout can keep the pipe open for ever.
_DRAIN_GRACE = 0.2
_SHELL = "/bin/bash" if os.path.exists("/bin/bash") else "/bin/sh"

_LIFELINE = (
    'exec 9<&0 </dev/null; ( ( read -r _ <&9; kill -9 0 ) >/dev/null 2>&1 & ); exec 9<&-; eval "$1"'
)
"""How a local command is run, so that nothing it starts outlives the agent.

The shell's stdin is the read end of a pipe whose write end only the agent holds. A watcher,
double-forked so the command's own `wait` never waits for it, stays in the command's process
group and blocks reading that pipe; the command itself runs with stdin from /dev/null as
before. When the pipe reaches end of file — the agent released the command, exited, or was
killed with SIGKILL — the watcher kills the whole group, itself included. Without it, a
command (a dev server, a `sleep`) would outlive a killed agent, reparented to init."""


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def group_alive(pgid: int) -> bool:
    """Whether any process of the group still runs (zombies do not count).

    `killpg(pgid, 0)` alone is not enough: an orphaned member that exited stays a zombie, and
    counts as a member, until something reaps it — which a container's init may never do.
    On Linux `/proc` says which members are zombies.
    """
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    try:
        pids = [e for e in os.listdir("/proc") if e.isdigit()]
    except OSError:
        return True
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        # After the command name: state, ppid, pgrp, ...
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
            return True
    return False


def _signal_name(returncode: int | None) -> str | None:
    if returncode is None or returncode >= 0:
        return None
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return str(-returncode)


class LocalShellBackend:
    """Commands run by `bash -c` (or `/bin/sh -c`) as a child of the agent.

    Each command leads its own session and process group (`start_new_session=True`), so
    `kill` reaches everything it started: SIGTERM to the group, then SIGKILL to whatever is
    left after `kill_grace` seconds. Stdin is /dev/null (nothing can wait for a keyboard);
    stderr is merged into stdout, as a terminal would show them. Background jobs a command
    leaves behind do not outlive `release` (use `setsid` to detach on purpose).
    """

    def __init__(self, kill_grace: float = 2.0) -> None:
        self._kill_grace = kill_grace
        self._procs: dict[str, _Process] = {}
        self._ids = itertools.count(1)

    @property
    def delegated(self) -> bool:
        return False

    async def create(
        self,
        command: str,
        cwd: Path,
        env: dict[str, str] | None = None,
        output_limit: int | None = None,
        *,
        policy: EnvPolicy = DEFAULT_POLICY,
    ) -> str:
        full_env = policy.apply(os.environ, env)
        capture = _Capture(output_limit or _DEFAULT_OUTPUT_LIMIT)
        loop = asyncio.get_running_loop()
        # The lifeline: the shell gets the read end (as stdin, moved to fd 9 by _LIFELINE);
        # only this process holds the write end (os.pipe fds are not inherited by others).
        lifeline_read, lifeline_write = os.pipe()
        try:
            _, proc = await loop.subprocess_exec(
                lambda: _Process(capture),
                _SHELL,
                "-c",
                _LIFELINE,
                "defect-bash",
                command,
                cwd=cwd,
                env=full_env,
                stdin=lifeline_read,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                start_new_session=True,
            )
        except BaseException:
            os.close(lifeline_write)
            raise
        finally:
            os.close(lifeline_read)
        proc.lifeline = lifeline_write
        handle = f"local-{next(self._ids)}"
        self._procs[handle] = proc
        return handle

    def _get(self, handle: str) -> _Process:
        try:
            return self._procs[handle]
        except KeyError:
            raise OSError(f"no such command handle: {handle} (released?)") from None

    async def output(self, handle: str) -> ShellOutput:
        p = self._get(handle)
        code = p.returncode
        return ShellOutput(
            output=p.capture.text(),
            truncated=p.capture.dropped > 0,
            exit_code=code if code is not None and code >= 0 else None,
            signal=_signal_name(code),
            exited=code is not None,
        )

    async def wait_for_exit(self, handle: str) -> ShellExit:
        p = self._get(handle)
        await p.exited.wait()
        with anyio.move_on_after(_DRAIN_GRACE):
            await p.closed.wait()
        code = p.returncode
        return ShellExit(
            exit_code=code if code is not None and code >= 0 else None,
            signal=_signal_name(code),
        )

    async def kill(self, handle: str) -> None:
        p = self._get(handle)
        pgid = p.pid
        if not group_alive(pgid):
            return
        _signal_group(pgid, signal.SIGTERM)
        with anyio.move_on_after(self._kill_grace):
            await p.exited.wait()
            # Members that outlive the shell (a trapped SIGTERM, a stubborn child) have no exit
            # to wait for: poll until none is left.
            while group_alive(pgid):  # noqa: ASYNC110
                await anyio.sleep(0.02)
            return
        _signal_group(pgid, signal.SIGKILL)
        with anyio.move_on_after(self._kill_grace):  # bounded: a process stuck in the kernel
            await p.exited.wait()

    async def release(self, handle: str) -> None:
        p = self._procs.get(handle)
        if p is None:
            return
        try:
            if p.returncode is None:
                await self.kill(handle)  # still running: the graceful way, TERM then KILL
            p.cut_lifeline()  # the watcher now kills whatever the command left behind
            with anyio.move_on_after(0.5):
                while group_alive(p.pid):  # noqa: ASYNC110
                    await anyio.sleep(0.005)
            if group_alive(p.pid):
                await self.kill(handle)
        finally:
            p.cut_lifeline()
            self._procs.pop(handle, None)
            if p.transport is not None:
                p.transport.close()
