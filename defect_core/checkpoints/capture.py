"""Recording one turn's checkpoint: the prior state of every file its tools change.

Owns `Checkpointer`, one per prompt (turn) of one session:
- `before_write(path)`: a file tool is about to write, create, delete or move `path`;
- `after_write(path, data)`: it wrote `data` there (optional: saves hashing it again);
- `before_command()` / `after_command(watch)`: a shell command runs in between; in a git work
  tree its changes are found and captured (`gitsnap`), elsewhere the checkpoint notes that
  command side effects are not covered;
- `partial()`: the checkpoint so far (for persisting mid-turn); `finish()`: the checkpoint,
  with the state defect left each file in (what a later restore compares against).

Invariants:
- First capture wins: a path's `before` is its state before the turn first touched it,
  whatever the turn did to it afterwards.
- The prior bytes are read before `before_write` returns, so the caller may overwrite the file
  at once; hashing, compressing and storing them happens on a worker thread, overlapping the
  tool's own (fsync-bound) write. Bytes read but not yet stored are bounded
  (`CaptureLimits.pending_bytes`); past that, `before_write` stores synchronously.
- A file that cannot be captured (too large, unreadable, not a regular file, a failed blob
  write) becomes an "uncovered" entry with the reason, never a silent gap.
- Paths are resolved like the tools resolve them (links followed, within the root); a path
  outside the root is never recorded.
"""

from __future__ import annotations

import os
import stat as stat_mod
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from defect_core.checkpoints.blobs import BlobStore, digest_of
from defect_core.checkpoints.gitsnap import StatKey, WorkTreeSnapshot, stat_key
from defect_core.checkpoints.model import Checkpoint, Entry, FileState, Source

NOT_GIT_NOTE = "command side effects are not covered: the workspace is not a git work tree"


@dataclass(frozen=True, slots=True)
class CaptureLimits:
    max_file_bytes: int = 64 * 1024 * 1024
    """A larger file is not captured (its entry says so)."""
    command_budget_bytes: int = 32 * 1024 * 1024
    """Bytes of modified or untracked files read before one command (git holds the rest)."""
    pending_bytes: int = 64 * 1024 * 1024
    """Bytes read but not yet stored; past this, capture is synchronous."""


class _Slot:
    """One path of the turn: its prior state (maybe still being stored) and a hint of the
    content written last (its digest, maybe still being computed, by `lstat` key)."""

    __slots__ = ("before", "future", "source", "written")

    def __init__(self, source: Source) -> None:
        self.before: FileState | None = None
        self.future: Future[FileState] | None = None
        self.source: Source = source
        self.written: tuple[StatKey, str | Future[str]] | None = None

    def state(self) -> FileState:
        if self.before is not None:
            return self.before
        assert self.future is not None
        try:
            return self.future.result()
        except Exception as exc:  # a failed blob write: the entry says so
            return FileState.uncovered(f"could not be stored: {exc}")


class Checkpointer:
    def __init__(
        self,
        root: Path,
        blobs: BlobStore,
        *,
        turn_id: str,
        session_id: str = "",
        limits: CaptureLimits | None = None,
        durable: bool = True,
    ) -> None:
        self.root = Path(os.path.realpath(root))
        self.blobs = blobs
        self.turn_id = turn_id
        self.session_id = session_id
        self.limits = limits or CaptureLimits()
        self.durable = durable
        self.created_at = time.time()
        self._slots: dict[str, _Slot] = {}
        self._notes: list[str] = []
        self._lock = threading.Lock()
        self._pending = 0
        self._pool: ThreadPoolExecutor | None = None

    # -- paths -------------------------------------------------------------------------

    def relative(self, path: str | Path) -> str | None:
        """`path` (absolute, or relative to the root) as the tools reach it — links
        followed — relative to the root; None when that lies outside the root."""
        absolute = os.path.join(self.root, path)
        real = os.path.realpath(absolute)
        rel = os.path.relpath(real, self.root)
        if rel == "." or rel == ".." or rel.startswith("../"):
            return None
        return rel.replace(os.sep, "/")

    def _claim(self, rel: str, source: Source) -> _Slot | None:
        with self._lock:
            if rel in self._slots:
                return None
            slot = self._slots[rel] = _Slot(source)
            return slot

    def _note(self, note: str) -> None:
        with self._lock:
            if note not in self._notes:
                self._notes.append(note)

    # -- file tools --------------------------------------------------------------------

    def before_write(self, path: str | Path) -> None:
        """Capture `path`'s present state, unless this turn already did (idempotent)."""
        rel = self.relative(path)
        if rel is None:
            return
        slot = self._claim(rel, "tool")
        if slot is None:
            return
        full = self.root / rel
        try:
            st = os.lstat(full)
        except (FileNotFoundError, NotADirectoryError):
            slot.before = FileState.absent()
            return
        except OSError as exc:
            slot.before = FileState.uncovered(f"could not be examined ({exc.strerror or exc})")
            return
        if stat_mod.S_ISLNK(st.st_mode):
            slot.before = FileState("symlink", target=os.readlink(full))
            return
        if not stat_mod.S_ISREG(st.st_mode):
            slot.before = FileState.uncovered("not a regular file")
            return
        if st.st_size > self.limits.max_file_bytes:
            slot.before = FileState.uncovered(
                f"{st.st_size} bytes, over the {self.limits.max_file_bytes}-byte capture limit"
            )
            return
        try:
            data = _read(full)
        except OSError as exc:
            slot.before = FileState.uncovered(f"could not be read ({exc.strerror or exc})")
            return
        self._store(slot, data, stat_mod.S_IMODE(st.st_mode))

    def after_write(self, path: str | Path, data: bytes) -> None:
        """`data` is what the tool just wrote at `path`: remembered so `finish` need not
        read and hash the file again while it is unchanged."""
        rel = self.relative(path)
        if rel is None:
            return
        key = stat_key(self.root / rel)
        with self._lock:
            slot = self._slots.get(rel)
        if slot is None or key is None:
            return
        with self._lock:
            pool = self._pool
        if pool is not None:  # hashed on the worker, overlapping the next write
            slot.written = (key, pool.submit(digest_of, data))
        else:
            slot.written = (key, digest_of(data))

    def _store(self, slot: _Slot, data: bytes, mode: int) -> None:
        """Store the prior bytes: on the worker while the pending budget allows, else now."""
        size = len(data)
        with self._lock:
            overlap = self._pending + size <= self.limits.pending_bytes
            if overlap:
                self._pending += size
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(1, thread_name_prefix="checkpoint")
                pool = self._pool

        def store() -> FileState:
            try:
                digest = self.blobs.put(data, durable=self.durable)
            finally:
                if overlap:
                    with self._lock:
                        self._pending -= size
            return FileState("file", digest=digest, size=size, mode=mode)

        if overlap:
            slot.future = pool.submit(store)
        else:
            try:
                slot.before = store()
            except OSError as exc:
                slot.before = FileState.uncovered(f"could not be stored ({exc.strerror or exc})")

    # -- shell commands ----------------------------------------------------------------

    def before_command(self) -> WorkTreeSnapshot | None:
        """Snapshot the work tree before a command; None (and a note) outside git."""
        try:
            snap = WorkTreeSnapshot.take(
                self.root,
                budget_bytes=self.limits.command_budget_bytes,
                max_file_bytes=self.limits.max_file_bytes,
            )
        except (OSError, ValueError) as exc:
            self._note(f"command side effects are not covered: {exc}")
            return None
        if snap is None:
            self._note(NOT_GIT_NOTE)
        return snap

    def after_command(self, snap: WorkTreeSnapshot | None) -> list[str]:
        """Capture the prior state of every path the command changed; returns those paths."""
        if snap is None:
            return []
        changed = snap.changed()
        for rel in changed:
            slot = self._claim(rel, "bash")
            if slot is None:
                continue  # first capture wins
            prior = snap.prior(rel)
            if prior.kind == "absent":
                slot.before = FileState.absent()
            elif prior.kind == "symlink":
                slot.before = FileState("symlink", target=prior.target)
            elif prior.kind == "bytes" and prior.data is not None:
                self._store(slot, prior.data, prior.mode)
            elif prior.kind == "git" and prior.oid:
                try:
                    data = snap.git_blob(prior.oid)
                except OSError as exc:
                    slot.before = FileState.uncovered(f"git no longer has it: {exc}")
                    continue
                self._store(slot, data, prior.mode)
            else:
                slot.before = FileState.uncovered(prior.reason or "unknown before the command")
        return changed

    # -- the result --------------------------------------------------------------------

    def _entries(self, *, finished: bool) -> tuple[Entry, ...]:
        with self._lock:
            slots = list(self._slots.items())
        entries = []
        for rel, slot in slots:
            if not finished and slot.before is None:
                assert slot.future is not None
                if not slot.future.done():
                    continue  # not stored yet: a partial checkpoint holds only what is
            before = slot.state()
            after = self._after(rel, slot) if finished else None
            entries.append(Entry(rel, before, after, slot.source))
        return tuple(sorted(entries, key=lambda e: e.path))

    def _after(self, rel: str, slot: _Slot) -> FileState:
        full = self.root / rel
        key = stat_key(full)
        if key is None:
            return FileState.absent()
        if stat_mod.S_ISLNK(key[4]):
            return FileState("symlink", target=os.readlink(full))
        if not stat_mod.S_ISREG(key[4]):
            return FileState.uncovered("not a regular file after the turn")
        if slot.written is not None and slot.written[0] == key:
            hint = slot.written[1]
            digest = hint if isinstance(hint, str) else hint.result()
        else:
            try:
                digest = digest_of(_read(full))
            except OSError as exc:
                return FileState.uncovered(f"could not be read after the turn ({exc.strerror})")
        return FileState("file", digest=digest, size=key[0], mode=stat_mod.S_IMODE(key[4]))

    def _checkpoint(self, entries: tuple[Entry, ...], *, finished: bool) -> Checkpoint:
        with self._lock:
            notes = tuple(self._notes)
        return Checkpoint(
            self.turn_id,
            str(self.root),
            self.created_at,
            entries,
            notes,
            finished,
            self.session_id,
        )

    def partial(self) -> Checkpoint:
        """What is captured so far, marked unfinished (no `after` states): persisted during
        a turn, it lets a turn cut short by a crash still be rewound (with care)."""
        return self._checkpoint(self._entries(finished=False), finished=False)

    def finish(self) -> Checkpoint:
        """Wait for the stores, record what defect left in each file, and (when durable)
        make the blobs' renames durable, before the checkpoint's metadata is committed."""
        entries = self._entries(finished=True)
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        checkpoint = self._checkpoint(entries, finished=True)
        if self.durable:
            self.blobs.sync_dirs(checkpoint.blob_digests())
        return checkpoint

    def close(self) -> None:
        """Stop the worker (after `finish`, or when the turn's checkpoint is abandoned)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None


def _read(path: Path) -> bytes:
    """A regular file's bytes, never through a link at the end, never blocking on a FIFO."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    try:
        if not stat_mod.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(0, "not a regular file")
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)
