"""Recording one turn's checkpoint: the prior state of every file its tools change.

Owns `Checkpointer`, one per prompt (turn) of one session:
- `before_write(path)`: a file tool is about to write, create, delete or move `path`;
- `after_write(path, data)`: it wrote `data` there (optional: saves hashing it again);
- `before_command()` / `after_command(watch)`: a shell command runs in between; in a git work
  tree its changes are found and captured (`gitsnap`), elsewhere the checkpoint notes that
  command side effects are not covered;
- `flush()`: store the prior contents read so far (hash, compress, write, fsync), off the
  tools' path: the session calls it once a batch of tool calls is over, while the next
  model request runs;
- `partial()`: the checkpoint so far (for persisting mid-turn); `finish()`: the checkpoint,
  with the state defect left each file in (what a later restore compares against).

Invariants:
- First capture wins: a path's `before` is its state before the turn first touched it,
  whatever the turn did to it afterwards.
- The prior bytes are read before `before_write` returns, so the caller may overwrite the file
  at once; they are kept in memory, and hashing, compressing, storing and fsyncing them waits
  for `flush` (or `finish`), so a turn's tools never compete with their own checkpoint for
  the disk. Bytes read but not yet stored are bounded (`CaptureLimits.pending_bytes`); past
  that, `before_write` stores synchronously (and durably).
- A partial checkpoint names every path captured so far: one whose prior content is not
  stored yet is "uncovered" with that reason (a crash then says so, never a silent gap).
- A file that cannot be captured (too large, unreadable, not a regular file, a failed blob
  write) becomes an "uncovered" entry with the reason, never a silent gap.
- Paths are resolved like the tools resolve them (links followed, within the root); a path
  outside the root is never recorded.

`DEFECT_TEST_CHECKPOINT_PAUSE` (seconds, unset in use) waits in `flush` after each stored
content, so `tests/test_rewind.py` can kill -9 a checkpoint midway and find the previous one
whole.
"""

from __future__ import annotations

import os
import stat as stat_mod
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from defect_core.checkpoints.blobs import BlobStore, digest_of
from defect_core.checkpoints.gitsnap import StatKey, WorkTreeSnapshot, stat_key
from defect_core.checkpoints.model import Checkpoint, Entry, FileState, Source

NOT_GIT_NOTE = "command side effects are not covered: the workspace is not a git work tree"
NOT_STORED = "its prior content was not stored yet when the turn stopped"
TEST_PAUSE_ENV = "DEFECT_TEST_CHECKPOINT_PAUSE"


@dataclass(frozen=True, slots=True)
class CaptureLimits:
    max_file_bytes: int = 64 * 1024 * 1024
    """A larger file is not captured (its entry says so)."""
    command_budget_bytes: int = 32 * 1024 * 1024
    """Bytes of modified or untracked files read before one command (git holds the rest)."""
    pending_bytes: int = 64 * 1024 * 1024
    """Bytes read but not yet stored; past this, capture is synchronous."""


class _Slot:
    """One path of the turn: its prior state (or its bytes, not stored yet) and a hint of
    the content written last (its bytes, then its digest, by `lstat` key)."""

    __slots__ = ("before", "pending", "source", "written")

    def __init__(self, source: Source) -> None:
        self.before: FileState | None = None
        self.pending: tuple[bytes, int] | None = None
        self.source: Source = source
        self.written: tuple[StatKey, str | bytes] | None = None

    def state(self) -> FileState:
        return self.before if self.before is not None else FileState.uncovered(NOT_STORED)


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
        self._flushing = threading.Lock()
        self._pending = 0

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
            if self._pending + len(data) <= self.limits.pending_bytes:
                slot.written = (key, data)  # hashed by `flush`, off the tool's path
                return
        slot.written = (key, digest_of(data))

    def _store(self, slot: _Slot, data: bytes, mode: int) -> None:
        """Keep the prior bytes for `flush` while the pending budget allows, else store now."""
        with self._lock:
            if self._pending + len(data) <= self.limits.pending_bytes:
                self._pending += len(data)
                slot.pending = (data, mode)
                return
        slot.before = self._put(data, mode, durable=self.durable)

    def _put(self, data: bytes, mode: int, *, durable: bool) -> FileState:
        try:
            digest = self.blobs.put(data, durable=durable)
        except OSError as exc:
            return FileState.uncovered(f"could not be stored ({exc.strerror or exc})")
        return FileState("file", digest=digest, size=len(data), mode=mode)

    def flush(self) -> None:
        """Store every prior content read so far and hash what the tools wrote; when
        durable, fsync the new blobs and their directories (in parallel) before returning,
        so a checkpoint saved after it never names a blob a power cut could lose."""
        with self._flushing:
            with self._lock:
                work = [s for s in self._slots.values() if s.pending is not None]
                hints = [s for s in self._slots.values() if isinstance(_hint(s), bytes)]
            stored: list[str] = []
            pause = float(os.environ.get(TEST_PAUSE_ENV) or 0)
            for slot in work:
                assert slot.pending is not None
                data, mode = slot.pending
                state = self._put(data, mode, durable=False)
                if state.digest is not None:
                    stored.append(state.digest)
                with self._lock:
                    slot.before, slot.pending = state, None
                    self._pending -= len(data)
                if pause > 0:
                    time.sleep(pause)
            for slot in hints:
                with self._lock:
                    written = slot.written
                if written is not None and isinstance(written[1], bytes):
                    digest = digest_of(written[1])
                    with self._lock:
                        if slot.written is written:
                            slot.written = (written[0], digest)
            if self.durable and stored:
                self.blobs.sync(stored)

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
        written = slot.written
        if written is not None and written[0] == key:
            hint = written[1]
            digest = hint if isinstance(hint, str) else digest_of(hint)
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
        """Store what is pending (durably, when `durable`) and record what defect left in
        each file: the checkpoint to commit once this returns."""
        self.flush()
        return self._checkpoint(self._entries(finished=True), finished=True)

    def close(self) -> None:
        """Store what is pending (when the turn's checkpoint is abandoned mid-way)."""
        self.flush()


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


def _hint(slot: _Slot) -> str | bytes | None:
    return None if slot.written is None else slot.written[1]
