"""Files a project names, read only from inside it: its boundary, and the one way to read them.

Owns `project_root` (the directory a working directory's project is: the nearest ancestor
holding `.git`), `config_paths` (where the user's and the project's configuration files are:
the user's boundary is their directory, and the catalog and the instruction files find their
places from it without loading the configuration), `open_within` / `read_within` (a file,
checked and opened beneath a boundary, or `Refused` saying why not) and `read_confined` (the
same, a refusal logged once and answered as no file). Every file defect reads because a
project or the user's configuration names it goes through here: the instruction files
(`prompt/instructions.py`), custom commands, skills and agent profiles (`catalog/`), the
configuration files (`config/files.py`) and `.mcp.json` (`mcp/spec.py`). The boundary is the
project root for a project's files and the user's configuration directory
(`~/.config/defect`) for the user's.

Invariants:
- A file is read only when its real path (every link resolved) lies inside the boundary's
  real path. A link inside the project to another file inside it is followed; one that leads
  out (`CLAUDE.md -> /proc/self/environ`, `AGENTS.md -> ../../.ssh/id_ed25519`, a `.defect/`
  directory that is itself a link out) is refused, as is a path through `..` that leaves.
- Only a regular file is read: a directory, FIFO, socket or device is refused before any read
  can block (the final open is `O_NONBLOCK`), and so is anything under `/proc`, `/sys` or
  `/dev` whatever the boundary (their files pose as regular ones).
- A file larger than the caller's limit is refused whole (`read_within`); `open_within`
  leaves the bounded read, and any cut, to its caller.
- The file opened is the file checked: its real path is walked again from the boundary's
  descriptor, one directory at a time with `O_NOFOLLOW`, the last name opened with
  `O_NOFOLLOW`, and the descriptor's `fstat` must be the `lstat` of the check. A link swapped
  in anywhere on the way, between the check and the open, fails the open instead of being
  followed.
- A refusal never fails a session: `read_confined` logs it to stderr once per process (the
  file named relative to its boundary, and why) and answers None, as for a missing file.

Why: a cloned repository is untrusted input. Instruction files, agent profiles and commands
reach the model's system prompt or tools before any tool call or question, so a link in a
repository would otherwise send the user's secrets to the model with nothing asked.
POSIX-only, as `tools/beneath.py`: `os.open(..., dir_fd=...)` is the walk. Imports the
standard library only (`log` on a refusal): the configuration package, which must stay that
cheap, reads its files through here.
"""

from __future__ import annotations

import errno
import os
import stat
import threading
from collections.abc import Mapping
from pathlib import Path

SYSTEM_DIRS = ("/proc", "/sys", "/dev")
"""Whose files are never a project's, even when a boundary holds them."""

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NOCTTY
_UNRESOLVED = "leads through a link that does not resolve (a loop, or a link swapped in)"
_reported: set[tuple[str, str, str]] = set()
_reported_lock = threading.Lock()


class Refused(Exception):
    """A file that is not read, and why ("resolves to …, outside the project")."""

    def __init__(self, path: Path, root: Path, reason: str) -> None:
        super().__init__(reason)
        self.path = path
        self.root = root
        self.reason = reason

    @property
    def label(self) -> str:
        """The file relative to its boundary (as it was named, links unresolved)."""
        try:
            return str(Path(os.path.normpath(self.path)).relative_to(os.path.normpath(self.root)))
        except ValueError:
            return str(self.path)

    def __str__(self) -> str:
        return f"{self.label}: {self.reason}"


def project_root(cwd: Path) -> Path:
    """The nearest ancestor of `cwd` (itself included) holding `.git`, else `cwd` (resolved)."""
    cwd = cwd.resolve()
    for directory in (cwd, *cwd.parents):
        if (directory / ".git").exists():
            return directory
    return cwd


def config_paths(cwd: Path | None, env: Mapping[str, str] | None = None) -> list[Path]:
    """The configuration files `load_settings` reads, lowest layer first (present or not): the
    user's `config.toml` (whose directory is the user's boundary, and holds the user's catalog
    and instructions) and, for a `cwd`, the project's `.defect/config.toml` and
    `config.local.toml`."""
    env = os.environ if env is None else env
    xdg = env.get("XDG_CONFIG_HOME", "")
    if xdg and Path(xdg).is_absolute():
        user_dir = Path(xdg)
    else:
        home = env.get("HOME")
        user_dir = (Path(home) if home else Path.home()) / ".config"
    paths = [user_dir / "defect" / "config.toml"]
    if cwd is not None:
        repo = project_root(cwd) / ".defect"
        paths += [repo / "config.toml", repo / "config.local.toml"]
    return paths


def open_within(path: Path, root: Path) -> int | None:
    """A read descriptor of the regular file `path`, which lies beneath `root` once every link
    is resolved (the caller closes it, and bounds its read). None when there is no file at
    `path`; `Refused` when there is one that must not be read."""
    fd, _ = _open_checked(path, root)
    return fd


def read_within(path: Path, root: Path, limit: int) -> bytes | None:
    """The bytes of `path` (see `open_within`); `Refused` too when it is over `limit` bytes."""
    fd, size = _open_checked(path, root)
    if fd is None:
        return None
    try:
        if size > limit:
            raise Refused(path, root, f"is {size:,} bytes, over the limit of {limit:,}")
        chunks: list[bytes] = []
        total = 0
        while total <= limit:
            chunk = os.read(fd, limit + 1 - total)
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
    finally:
        os.close(fd)
    if total > limit:
        raise Refused(path, root, f"grew past the limit of {limit:,} bytes while it was read")
    return b"".join(chunks)


def read_confined(path: Path, root: Path, limit: int) -> bytes | None:
    """`read_within`, a refusal logged once (naming the file and why) and answered None."""
    try:
        return read_within(path, root, limit)
    except Refused as refused:
        report(refused)
        return None


def report(refused: Refused) -> None:
    """Log a refusal to stderr, once per process for one file and reason."""
    key = (str(refused.root), str(refused.path), refused.reason)
    with _reported_lock:
        if key in _reported:
            return
        _reported.add(key)
    from defect_core.log import get_logger  # only on a refusal: the configuration imports this

    get_logger("defect.confined").warning(
        "file_refused", file=refused.label, root=str(refused.root), reason=refused.reason
    )


def _open_checked(path: Path, root: Path) -> tuple[int | None, int]:
    """The descriptor and size of the checked file (None, 0 when there is none)."""
    real_root = os.path.realpath(root)
    real = os.path.realpath(path)
    parts = _parts_within(real_root, real)
    if parts is None:
        raise Refused(path, root, f"resolves to {real}, outside {real_root}")
    if any(real == d or real.startswith(d + "/") for d in SYSTEM_DIRS):
        raise Refused(path, root, f"resolves to {real}, a system file")
    if not parts:
        raise Refused(path, root, "is a directory, not a regular file")
    try:
        dir_fd = os.open(real_root, _DIR_FLAGS)
    except (FileNotFoundError, NotADirectoryError):
        return None, 0
    try:
        for name in parts[:-1]:
            try:
                child = os.open(name, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=dir_fd)
            except FileNotFoundError:
                return None, 0
            except OSError as err:  # Linux says ENOTDIR for a link here, others ELOOP
                if err.errno in (errno.ELOOP, errno.EMLINK) or _is_link(name, dir_fd):
                    raise Refused(path, root, _UNRESOLVED) from None
                if err.errno == errno.ENOTDIR:
                    return None, 0
                raise
            os.close(dir_fd)
            dir_fd = child
        try:
            seen = os.stat(parts[-1], dir_fd=dir_fd, follow_symlinks=False)
        except (FileNotFoundError, NotADirectoryError):
            return None, 0
        if stat.S_ISLNK(seen.st_mode):
            raise Refused(path, root, _UNRESOLVED)
        if not stat.S_ISREG(seen.st_mode):
            raise Refused(path, root, f"is {kind_of(seen.st_mode)}, not a regular file")
        try:
            fd = os.open(parts[-1], _FILE_FLAGS, dir_fd=dir_fd)
        except FileNotFoundError:
            return None, 0
        except OSError as err:
            if err.errno in (errno.ELOOP, errno.EMLINK):
                raise Refused(path, root, _UNRESOLVED) from None
            raise
    finally:
        os.close(dir_fd)
    opened = os.fstat(fd)
    if not stat.S_ISREG(opened.st_mode) or (opened.st_dev, opened.st_ino) != (
        seen.st_dev,
        seen.st_ino,
    ):
        os.close(fd)
        raise Refused(path, root, "changed while it was opened")
    os.set_blocking(fd, True)
    return fd, opened.st_size


def _parts_within(real_root: str, real: str) -> list[str] | None:
    """`real`'s names below `real_root` (both real paths); None when it is not beneath it."""
    if real == real_root:
        return []
    prefix = real_root.rstrip("/") + "/"
    if not real.startswith(prefix):
        return None
    return real[len(prefix) :].split("/")


def _is_link(name: str, dir_fd: int) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def kind_of(mode: int) -> str:
    """What a file is, in words, for a refusal ("a FIFO", "a character device", ...)."""
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    return "not a regular file"
