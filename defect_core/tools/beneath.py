"""Opening and replacing files *beneath* the workspace, whatever happens to the tree meanwhile.

Owns `open_beneath` (a file descriptor for reading) and `replace_beneath` (an atomic write),
both of which reach the file from a descriptor of the workspace root, one path component at a
time, with `O_NOFOLLOW`; and the temporaries of its atomic writes: their names
(`temporary_name`) and the sweep of the ones a killed process left (`sweep_temporaries`).

Invariant: the file opened or replaced lies inside the root at the moment it is opened — not
merely when the path was checked. `tools.workspace.resolve_path` checks a path once; a
symbolic link flipped between that check and the open (an inside target, then an outside
one) used to let a read or a write land outside. Here every directory is opened relative to
the one before it and never through a link; a link met on the way (a workspace may link
inside itself) is read with `readlink` and its target walked the same way from the root,
refused if it would leave the root, at most `MAX_HOPS` times. The last component is opened
with `O_NOFOLLOW` too, so a link swapped in at the very end fails instead of being followed.

Temporaries: an atomic write (or link) is made under `.defect.<pid>.<16 hex>.tmp` beside its
file, then renamed over it. A SIGKILL between the two leaves that file behind, a whole copy of
some content in the user's tree. The name says whose it is: `sweep_temporaries` removes, in
the directories it is given, only regular files and links named exactly so whose process is
gone (its pid is dead, or the pid's present process started after the file was made: a
reused pid) - never a user's file, never a write in flight of a live process.

Why not `openat2(RESOLVE_BENEATH)`: it is Linux-only and not in Python's standard library;
this walk gives the same guarantee with `os.open(..., dir_fd=...)`, on every POSIX system.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import stat as stat_mod
import time
from collections import deque
from collections.abc import Callable, Iterable
from pathlib import Path

from defect_core.confined import kind_of

MAX_HOPS = 40
"""Symbolic links followed (inside the root) for one path, as the kernel's own limit."""

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC

TEMPORARY = re.compile(r"\.defect\.([1-9][0-9]{0,9})\.[0-9a-f]{16}\.tmp")
"""The whole name of an atomic write's temporary: its process id, then a random part."""

_STARTED = time.time()
"""No earlier than this process's start: a temporary of its pid made before was another's."""


def temporary_name() -> str:
    """A fresh name for a temporary of this process (`TEMPORARY`); short, whatever the
    file's own name, so it fits the directory wherever the file does."""
    return f".defect.{os.getpid()}.{secrets.token_hex(8)}.tmp"


class Escape(PermissionError):
    """The path leaves the root (directly, through `..`, or through a link)."""


def _relative_parts(root: str, path: str) -> list[str]:
    base, full = os.path.normpath(root), os.path.normpath(path)
    prefix = base.rstrip("/") + "/"
    if full.startswith(prefix) and os.path.isabs(base):
        # Both absolute and normalised: beneath is a prefix, as `relpath` would find it
        # (which costs more than the walk's own system calls).
        return full[len(prefix) :].split("/")
    rel = os.path.relpath(full, base)
    if rel == ".":
        return []
    if rel == ".." or rel.startswith("../"):
        raise Escape(errno.EACCES, "outside the workspace", path)
    return rel.split("/")


def _walk(root: str, parts: list[str], *, create: bool) -> tuple[int, str, str]:
    """(descriptor of the last directory, the final name, that directory's real path).

    Every directory on the way is opened without following links; a link is resolved by
    hand and its target walked from the root (absolute) or from where it stands (relative).
    """
    if not parts:
        raise IsADirectoryError(errno.EISDIR, "is the workspace itself", root)
    real_root = os.path.realpath(root)
    fd = os.open(real_root, _DIR_FLAGS)
    walked: list[str] = []
    queue = deque(parts)
    hops = 0
    try:
        while len(queue) > 1:
            name = queue.popleft()
            if name in ("", "."):
                continue
            if name == "..":
                if not walked:
                    raise Escape(errno.EACCES, "outside the workspace", "/".join(parts))
                walked.pop()
                parent = os.open("..", _DIR_FLAGS, dir_fd=fd)
                os.close(fd)
                fd = parent
                continue
            try:
                child = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, dir_fd=fd)
                queue.appendleft(name)
                continue
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
                    raise
                hops += 1
                target = _link_target(fd, name, hops)
                if os.path.isabs(target):
                    queue = deque([*_relative_parts(real_root, target), *queue])
                    walked = []
                    os.close(fd)
                    fd = os.open(real_root, _DIR_FLAGS)
                else:
                    queue = deque([*target.split("/"), *queue])
                continue
            os.close(fd)
            fd = child
            walked.append(name)
        final = queue[0] if queue else "."
        if final in ("", ".", ".."):
            raise IsADirectoryError(errno.EISDIR, "is a directory", "/".join(parts))
        return fd, final, os.path.join(real_root, *walked)
    except BaseException:
        os.close(fd)
        raise


def _link_target(dir_fd: int, name: str, hops: int) -> str:
    if hops > MAX_HOPS:
        raise OSError(errno.ELOOP, "too many levels of symbolic links", name)
    try:
        return os.readlink(name, dir_fd=dir_fd)
    except OSError:
        # Not a link: a regular file where a directory was expected.
        raise NotADirectoryError(errno.ENOTDIR, "not a directory", name) from None


def _resolve_final(root: str, path: str, *, create: bool) -> tuple[int, str, str]:
    """The directory descriptor and name of the file itself, links at the end resolved, and
    that directory's real path."""
    parts = _relative_parts(root, path)
    for hops in range(MAX_HOPS + 1):
        fd, name, directory = _walk(root, parts, create=create)
        try:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            return fd, name, directory
        if not stat_mod.S_ISLNK(st.st_mode):
            return fd, name, directory
        target = _link_target(fd, name, hops + 1)
        os.close(fd)
        real_root = os.path.realpath(root)
        if os.path.isabs(target):
            parts = _relative_parts(real_root, target)
        else:
            parts = _relative_parts(real_root, os.path.join(directory, target))
        root = real_root
    raise OSError(errno.ELOOP, "too many levels of symbolic links", path)


class NotRegularFile(OSError):
    """A FIFO, socket, device or directory where a regular file was expected."""


def open_regular(path: str | Path, *, dir_fd: int | None = None) -> int:
    """Open for reading, refusing (before any read can block) anything but a regular file.

    `O_NONBLOCK` keeps the open of a FIFO with no writer from blocking; `fstat` on the
    descriptor (not the name) says what was really opened."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY, dir_fd=dir_fd)
    try:
        st = os.fstat(fd)
        if not stat_mod.S_ISREG(st.st_mode):
            raise NotRegularFile(errno.EINVAL, f"is {kind_of(st.st_mode)}, not a regular file")
        os.set_blocking(fd, True)
        return fd
    except BaseException:
        os.close(fd)
        raise


def stat_beneath(root: str | Path, path: str | Path) -> os.stat_result:
    """`os.stat` of `path` reached beneath `root`: links inside the root are followed, a way
    out is refused (`Escape`), so a link flipped after the path was checked never shows an
    outside file's size, kind or times. `FileNotFoundError` / `NotADirectoryError` when it or
    a directory on its way is absent or is not one; the root itself is a plain `stat`."""
    root, path = os.fspath(root), os.fspath(path)
    if not _relative_parts(root, path):
        return os.stat(root)
    dir_fd, name, _ = _resolve_final(root, path, create=False)
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    finally:
        os.close(dir_fd)


def open_beneath(root: str | Path, path: str | Path) -> int:
    """A read descriptor of the regular file `path`, reached beneath `root` (see above)."""
    dir_fd, name, _ = _resolve_final(os.fspath(root), os.fspath(path), create=False)
    try:
        return open_regular(name, dir_fd=dir_fd)
    finally:
        os.close(dir_fd)


def replace_beneath(
    root: str | Path,
    path: str | Path,
    data: bytes,
    *,
    mode: int | None = None,
    on_temporary: Callable[[str], None] | None = None,
) -> None:
    """Write `data` as the new content of `path` beneath `root`, atomically.

    A temporary file in the same directory (opened through the same descriptor) is written,
    synced and renamed over the name: a reader or a crash sees the old file or the new one.
    The new file keeps an existing file's mode (or takes `mode` when given), and is a new
    inode, so a hard link to the old one (possibly outside the workspace) keeps the old content.
    `on_temporary` is told the temporary's real path before it is created: whoever watches
    the tree meanwhile (a checkpoint of a concurrent command) can tell it is the write's own.
    """
    dir_fd, name, directory = _resolve_final(os.fspath(root), os.fspath(path), create=True)
    try:
        if mode is None:
            try:
                mode = stat_mod.S_IMODE(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
            except FileNotFoundError:
                mode = None
        tmp = temporary_name()
        if on_temporary is not None:
            on_temporary(os.path.join(directory, tmp))
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666, dir_fd=dir_fd)
        try:
            if mode is not None:
                os.fchmod(fd, mode)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
            os.close(fd)
            fd = -1
            os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            if fd >= 0:
                os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dir_fd)
            raise
    finally:
        os.close(dir_fd)


def _resolve_name(root: str | Path, path: str | Path, *, create: bool) -> tuple[int, str]:
    """The directory descriptor and final name of `path` itself, a link at the end NOT
    followed: the name is what is removed or replaced (directories on the way are walked
    as above, so the name lies beneath the root)."""
    parts = _relative_parts(os.fspath(root), os.fspath(path))
    fd, name, _ = _walk(os.fspath(root), parts, create=create)
    return fd, name


def parent_beneath(root: str | Path, path: str | Path) -> tuple[int, str]:
    """The descriptor of the directory holding `path` beneath `root`, and the final name, a
    link at the end NOT followed: for looking at the name itself (`stat` without following,
    `readlink`, an `O_NOFOLLOW` open, each with `dir_fd`) where a directory swapped for a
    link after a check cannot lead outside. The caller closes the descriptor.

    `FileNotFoundError` / `NotADirectoryError` when a directory on the way is absent or is
    not one; `Escape` when the way leads out of the root."""
    return _resolve_name(root, path, create=False)


def unlink_beneath(root: str | Path, path: str | Path) -> bool:
    """Remove the name `path` beneath `root` (a file or a link, never a directory).

    False when there was nothing to remove (the name or a directory on its way is absent)."""
    try:
        dir_fd, name = _resolve_name(root, path, create=False)
    except FileNotFoundError:
        return False
    try:
        os.unlink(name, dir_fd=dir_fd)
        return True
    except FileNotFoundError:
        return False
    finally:
        os.close(dir_fd)


def symlink_beneath(root: str | Path, path: str | Path, target: str) -> None:
    """Make the name `path` beneath `root` a symbolic link to `target`, atomically (a link
    made under a temporary name, renamed over the name). The link is only made, never
    followed, so its target may point anywhere: following it is the reader's walk's job."""
    dir_fd, name = _resolve_name(root, path, create=True)
    try:
        tmp = temporary_name()
        os.symlink(target, tmp, dir_fd=dir_fd)
        try:
            os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dir_fd)
            raise
    finally:
        os.close(dir_fd)


def _process_start(pid: int) -> float | None:
    """When process `pid` started (seconds since the epoch, never later than the truth), if
    the system says (`/proc`); None when it does not."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        with open("/proc/stat", "rb") as f:
            boot = next(int(line.split()[1]) for line in f if line.startswith(b"btime "))
        return boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def _left_behind(pid: int, made: float) -> bool:
    """Whether a temporary of process `pid`, last changed at `made`, outlived its process
    (a second of margin: a file's time comes from a coarser clock than `time.time`)."""
    if pid == os.getpid():
        return made < _STARTED - 1
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False  # alive (another user's: EPERM), or unknown: left alone
    started = _process_start(pid)
    return started is not None and made < started - 1


def sweep_temporaries(root: str | Path, directories: Iterable[str]) -> list[str]:
    """Remove the temporaries killed writes left in `directories` (relative to `root`, ""
    for the root itself, each reached beneath it; one that is absent or leads out is
    skipped); the paths removed, relative to `root`. Only names `TEMPORARY` matches whole,
    regular files or links, of a process that is gone (module docstring)."""
    removed: list[str] = []
    root = os.path.realpath(root)
    for rel in sorted(set(directories)):
        try:
            fd = _open_directory(root, rel)
        except OSError:
            continue
        try:
            for name in os.listdir(fd):
                match = TEMPORARY.fullmatch(name)
                if match is None:
                    continue
                try:
                    st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                    if not (stat_mod.S_ISREG(st.st_mode) or stat_mod.S_ISLNK(st.st_mode)):
                        continue
                    if _left_behind(int(match.group(1)), st.st_mtime):
                        os.unlink(name, dir_fd=fd)
                        removed.append(f"{rel}/{name}" if rel else name)
                except OSError:
                    continue
        finally:
            os.close(fd)
    return removed


def _open_directory(root: str, rel: str) -> int:
    """A descriptor of the directory `rel` beneath `root` (links inside the root followed)."""
    if rel in ("", "."):
        return os.open(root, _DIR_FLAGS)
    dir_fd, name, _ = _resolve_final(root, os.path.join(root, rel), create=False)
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    finally:
        os.close(dir_fd)


def remove_empty_directories(root: str | Path, path: str | Path, levels: int) -> list[str]:
    """Remove the directory holding `path` (beneath `root`) and up to `levels - 1` above it,
    innermost first, each only while it is empty (`rmdir`: never a link, never one holding
    anything; the root is never one of them). Stops at the first that stays; the paths
    removed, relative to `root`."""
    root = os.path.realpath(root)
    parts = _relative_parts(root, os.fspath(path))[:-1]
    removed: list[str] = []
    for _ in range(levels):
        if not parts:
            break
        try:
            dir_fd, name = _resolve_name(root, os.path.join(root, *parts), create=False)
        except OSError:
            break
        try:
            os.rmdir(name, dir_fd=dir_fd)
        except OSError:
            break
        finally:
            os.close(dir_fd)
        removed.append("/".join(parts))
        parts = parts[:-1]
    return removed
