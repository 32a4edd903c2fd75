"""Recording one turn's checkpoint: the prior state of every file its tools change.

Owns `Checkpointer`, one per prompt (turn) of one session:
- `before_write(path)`: a file tool is about to write, create, delete or move `path`;
  `replacing=True` says the write puts a new inode at the name (the local backend's atomic
  replace), so the old one can be held open and read later (`pinned`);
- `after_write(path, data)`: it wrote `data` there (optional: saves reading it again);
  `write_failed(rel)`: the replace announced did not happen; `temporary(path)`: the write
  is about to make its own temporary file at `path` (renamed over the file, or removed);
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
- The prior content is secured before `before_write` returns, so the caller may overwrite
  the file at once: its bytes are read into memory, or — when the caller replaces the file
  with a new inode and nothing else links the old one — the old inode is held open
  (`CaptureLimits.pinned_files` at most) and read by `flush`, which checks it did not change
  since (else the entry is "uncovered", saying so). Reading, hashing, compressing, storing and
  fsyncing wait for `flush` (or `finish`), so a turn's tools never compete with their own
  checkpoint for the disk, and a write pays an `open` for its checkpoint, not a copy of the
  file. Bytes read but not yet stored are bounded (`CaptureLimits.pending_bytes`); past
  that, `before_write` stores synchronously (and durably).
- A partial checkpoint names every path captured so far: one whose prior content is not
  stored yet is "uncovered" with that reason (a crash then says so, never a silent gap).
- A command's checkpoint never records a file tool's own temporary file. The tools of one
  batch run concurrently, so a command's snapshot before may see a write's temporary that
  the one after does not (renamed meanwhile), or the reverse; recorded, it would be a file
  the command deleted or made, and a rewind would make a file that nobody made. The write
  names its temporary (`temporary`) before making it, so any snapshot that can see it is
  compared after it is known; a user's file that merely looks like one is still covered.
- A file that cannot be captured (too large, unreadable, not a regular file, a failed blob
  write) becomes an "uncovered" entry with the reason, never a silent gap.
- An absent file's state says how many directories on its way were absent too
  (`FileState.dirs`): the ones its write makes, and the only ones a restore may remove.
- Paths are resolved like the tools resolve them (links followed, within the root); a path
  outside the root is never recorded. The file itself is then reached beneath the root
  (`tools.beneath.parent_beneath`: its directory opened one component at a time, never
  through a link leading out, the name looked at with `dir_fd` and `O_NOFOLLOW`), so a
  directory swapped for a link to the outside after `relative` resolved the path cannot
  bring an outside file's bytes into the checkpoint (a rewind would write them into the
  workspace); such a path is "uncovered", saying so.

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
from defect_core.checkpoints.pinned import Pinned, descriptor_room, open_regular, read_regular
from defect_core.tools.beneath import Escape, parent_beneath

NOT_GIT_NOTE = "command side effects are not covered: the workspace is not a git work tree"
NOT_STORED = "its prior content was not stored yet when the turn stopped"
LEADS_OUT = "a link on its way leads out of the workspace"
TEST_PAUSE_ENV = "DEFECT_TEST_CHECKPOINT_PAUSE"


@dataclass(frozen=True, slots=True)
class CaptureLimits:
    max_file_bytes: int = 64 * 1024 * 1024
    """A larger file is not captured (its entry says so)."""
    command_budget_bytes: int = 32 * 1024 * 1024
    """Bytes of modified or untracked files read before one command (git holds the rest)."""
    pending_bytes: int = 64 * 1024 * 1024
    """Bytes read but not yet stored; past this, capture is synchronous."""
    pinned_files: int = 128
    """Replaced files held open until `flush` (each an open descriptor, and never more than
    an eighth of the descriptor limit); past this, their prior content is read at once."""


class _Written:
    """The content a tool wrote, not hashed yet (`flush` hashes it, off the tool's path)."""

    __slots__ = ("content",)

    def __init__(self, content: str | bytes) -> None:
        self.content = content

    def digest(self) -> str:
        content = self.content
        return digest_of(content.encode("utf-8") if isinstance(content, str) else content)


class _Slot:
    """One path of the turn: its prior state (or its bytes, or its old inode held open, not
    stored yet) and a hint of the content written last (the content, then its digest, by
    `lstat` key)."""

    __slots__ = ("before", "pending", "pinned", "source", "written")

    def __init__(self, source: Source) -> None:
        self.before: FileState | None = None
        self.pending: tuple[bytes, int] | None = None
        self.pinned: Pinned | None = None
        self.source: Source = source
        self.written: tuple[StatKey, str | _Written] | None = None

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
        self._root_str = str(self.root)
        self._root_prefix = self._root_str.rstrip("/") + "/"
        self.blobs = blobs
        self.turn_id = turn_id
        self.session_id = session_id
        self.limits = limits or CaptureLimits()
        self.durable = durable
        self.created_at = time.time()
        self._slots: dict[str, _Slot] = {}
        self._temporaries: set[str] = set()
        self._notes: list[str] = []
        self._lock = threading.Lock()
        self._flushing = threading.Lock()
        self._pending = 0
        self._pinned = 0
        self._pin_limit: int | None = None  # set by the first pin (a turn may write nothing)

    # -- paths -------------------------------------------------------------------------

    def relative(self, path: str | Path) -> str | None:
        """`path` (absolute, or relative to the root) as the tools reach it — links
        followed — relative to the root; None when that lies outside the root."""
        absolute = os.path.join(self._root_str, path)
        rel = self._beneath_without_links(absolute)
        if rel is not None:
            return rel
        real = os.path.realpath(absolute)
        rel = os.path.relpath(real, self.root)
        if rel == "." or rel == ".." or rel.startswith("../"):
            return None
        return rel.replace(os.sep, "/")

    def _beneath_without_links(self, absolute: str) -> str | None:
        """The fast path of `relative`, taken on every write: `absolute` names a path
        beneath the root through no link and no `..` (only the names below the root are
        examined, one `lstat` each), so it is its own resolution. None: resolve it fully."""
        if not absolute.startswith(self._root_prefix):
            return None
        rel = os.path.normpath(absolute[len(self._root_prefix) :])
        parts = rel.split("/")
        if ".." in parts or rel == ".":
            return None
        current = self._root_str
        for part in parts:
            current = f"{current}/{part}"
            try:
                if stat_mod.S_ISLNK(os.lstat(current).st_mode):
                    return None
            except OSError:
                break  # what does not exist below here is no link either (as for realpath)
        return rel

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

    def before_write(self, path: str | Path, *, replacing: bool = False) -> str | None:
        """Capture `path`'s present state, unless this turn already did (idempotent).

        `replacing`: the caller is about to put a new inode at the name (an atomic replace),
        so the old one may be held open and read by `flush`; the caller then reports a
        failed replace (`write_failed`). Returns the path relative to the root (None when
        outside it), for `after_write`."""
        rel = self.relative(path)
        if rel is None:
            return None
        slot = self._claim(rel, "tool")
        if slot is None:
            return rel
        try:
            dir_fd, name = parent_beneath(self._root_str, f"{self._root_str}/{rel}")
        except FileNotFoundError:
            slot.before = FileState.absent(self._absent_dirs(rel))
            return rel
        except NotADirectoryError:
            slot.before = FileState.absent()
            return rel
        except Escape:
            slot.before = FileState.uncovered(LEADS_OUT)
            return rel
        except OSError as exc:
            slot.before = FileState.uncovered(f"could not be examined ({exc.strerror or exc})")
            return rel
        try:
            self._capture(slot, dir_fd, name, replacing=replacing)
        finally:
            os.close(dir_fd)
        return rel

    def _absent_dirs(self, rel: str) -> int:
        """How many of the directories on the way to `rel` are absent (the write will make
        them; a restore to "absent" may remove them again once they are empty)."""
        parts = rel.split("/")[:-1]
        for depth in range(1, len(parts) + 1):
            if not os.path.lexists(f"{self._root_str}/{'/'.join(parts[:depth])}"):
                return len(parts) - depth + 1
        return 0

    def _capture(self, slot: _Slot, dir_fd: int, name: str, *, replacing: bool) -> None:
        """Secure the prior state of `name` in the directory `dir_fd` (reached beneath the
        root by `before_write`): every look at it is relative to that descriptor."""
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except (FileNotFoundError, NotADirectoryError):
            slot.before = FileState.absent()
            return
        except OSError as exc:
            slot.before = FileState.uncovered(f"could not be examined ({exc.strerror or exc})")
            return
        if stat_mod.S_ISLNK(st.st_mode):
            slot.before = FileState("symlink", target=os.readlink(name, dir_fd=dir_fd))
            return
        if not stat_mod.S_ISREG(st.st_mode):
            slot.before = FileState.uncovered("not a regular file")
            return
        if st.st_size > self.limits.max_file_bytes:
            slot.before = FileState.uncovered(
                f"{st.st_size} bytes, over the {self.limits.max_file_bytes}-byte capture limit"
            )
            return
        if replacing and st.st_nlink == 1 and self._pin(slot, dir_fd, name):
            return
        try:
            data = read_regular(name, dir_fd=dir_fd)
        except OSError as exc:
            slot.before = FileState.uncovered(f"could not be read ({exc.strerror or exc})")
            return
        self._store(slot, data, stat_mod.S_IMODE(st.st_mode))

    def _pin(self, slot: _Slot, dir_fd: int, name: str) -> bool:
        """Hold the file open for `flush`, while the pinned budget allows."""
        with self._lock:
            if self._pin_limit is None:
                self._pin_limit = min(self.limits.pinned_files, descriptor_room())
            if self._pinned >= self._pin_limit:
                return False
            self._pinned += 1
        try:
            fd, st = open_regular(name, dir_fd=dir_fd)
        except OSError:
            with self._lock:
                self._pinned -= 1
            return False  # read it now, and say why if that fails too
        with self._lock:
            slot.pinned = Pinned(fd, st)
        return True

    def write_failed(self, rel: str | None) -> None:
        """The replace announced to `before_write` did not happen: the old inode is still at
        the name, where anything may change it, so its content is read now."""
        with self._lock:
            slot = self._slots.get(rel) if rel is not None else None
            pinned = slot.pinned if slot is not None else None
            if slot is None or pinned is None:
                return
            slot.pinned = None
            self._pinned -= 1
        try:
            data = pinned.read()
        except OSError as exc:
            slot.before = FileState.uncovered(f"could not be read ({exc.strerror or exc})")
            return
        self._store(slot, data, pinned.mode)

    def temporary(self, path: str) -> None:
        """A write is about to make its temporary file at `path` (absolute, links resolved):
        never a command's change, whatever a concurrent command's snapshots see of it."""
        if path.startswith(self._root_prefix):
            with self._lock:
                self._temporaries.add(path[len(self._root_prefix) :])

    def after_write(self, path: str | Path, data: str | bytes, *, rel: str | None = None) -> None:
        """`data` (text is stored UTF-8) is what the tool just wrote at `path` (`rel`, as
        `before_write` returned it, saves resolving it again): remembered so `finish` need
        not read the file again while it is unchanged."""
        rel = rel if rel is not None else self.relative(path)
        if rel is None:
            return
        key = stat_key(f"{self._root_str}/{rel}")
        with self._lock:
            slot = self._slots.get(rel)
            if slot is None or key is None:
                return
            if self._pending + len(data) <= self.limits.pending_bytes:
                slot.written = (key, _Written(data))  # hashed by `flush`, off the tool's path
                return
        slot.written = (key, _Written(data).digest())

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
                work = [
                    s for s in self._slots.values() if s.pending is not None or s.pinned is not None
                ]
                hints = [s for s in self._slots.values() if isinstance(_hint(s), _Written)]
            stored: list[str] = []
            pause = float(os.environ.get(TEST_PAUSE_ENV) or 0)
            for slot in work:
                state = self._flush_one(slot)
                if state.digest is not None:
                    stored.append(state.digest)
                if pause > 0:
                    time.sleep(pause)
            for slot in hints:
                with self._lock:
                    written = slot.written
                if written is not None and isinstance(written[1], _Written):
                    digest = written[1].digest()
                    with self._lock:
                        if slot.written is written:
                            slot.written = (written[0], digest)
            if self.durable and stored:
                self.blobs.sync(stored)

    def _flush_one(self, slot: _Slot) -> FileState:
        """Store one slot's prior content (held in memory, or pinned open)."""
        pinned = slot.pinned
        if pinned is not None:
            try:
                state = self._put(pinned.read(), pinned.mode, durable=False)
            except OSError as exc:
                state = FileState.uncovered(f"could not be read ({exc.strerror or exc})")
            with self._lock:
                slot.before, slot.pinned = state, None
                self._pinned -= 1
            return state
        assert slot.pending is not None
        data, mode = slot.pending
        state = self._put(data, mode, durable=False)
        with self._lock:
            slot.before, slot.pending = state, None
            self._pending -= len(data)
        return state

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
        """Capture the prior state of every path the command changed; returns those paths
        (a file tool's temporary, seen to come or go meanwhile, is not one)."""
        if snap is None:
            return []
        changed = snap.changed()
        with self._lock:
            changed = [rel for rel in changed if rel not in self._temporaries]
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
        try:
            dir_fd, name = parent_beneath(self._root_str, f"{self._root_str}/{rel}")
        except (FileNotFoundError, NotADirectoryError):
            return FileState.absent()
        except Escape:
            return FileState.uncovered(f"{LEADS_OUT} after the turn")
        except OSError as exc:
            return FileState.uncovered(f"could not be examined after the turn ({exc.strerror})")
        try:
            return self._after_in(dir_fd, name, slot)
        finally:
            os.close(dir_fd)

    def _after_in(self, dir_fd: int, name: str, slot: _Slot) -> FileState:
        key = stat_key(name, dir_fd=dir_fd)
        if key is None:
            return FileState.absent()
        if stat_mod.S_ISLNK(key[4]):
            return FileState("symlink", target=os.readlink(name, dir_fd=dir_fd))
        if not stat_mod.S_ISREG(key[4]):
            return FileState.uncovered("not a regular file after the turn")
        written = slot.written
        if written is not None and written[0] == key:
            hint = written[1]
            digest = hint if isinstance(hint, str) else hint.digest()
        else:
            try:
                digest = digest_of(read_regular(name, dir_fd=dir_fd))
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


def _hint(slot: _Slot) -> str | _Written | None:
    return None if slot.written is None else slot.written[1]
