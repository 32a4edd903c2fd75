"""Putting the workspace back as it was before a prompt, without overwriting a user's work.

Owns `plan_restore` (which state each path returns to, and what defect left in it), `inspect`
(the preview: conflicts, files that cannot be restored, what is not covered) and `restore`.

Rewinding to before prompt N applies the checkpoints from the newest back to N: a path's
target is its `before` in the OLDEST of them that touched it (its state before prompt N's
range began), and the state it must still be in is what defect left there last: the `after`
of the newest checkpoint of the session that touched it — one of those, or a later one,
a restore's own record included (a `/rewind N files` puts back a state that a later rewind
or an undo must find, not call a conflict). A path whose present content differs from that is
a conflict: someone outside defect changed it since defect did.

Invariants:
- With a conflict, or a file that cannot be restored (its blob pruned or damaged), nothing is
  written unless `force=True`; `force` restores what can be and still reports the rest.
- Every file is restored atomically (a temporary in the same directory renamed over it, or
  an unlink for "absent"), reached through `tools.beneath` from the workspace root, so a
  restore never writes outside the workspace, whatever links the tree holds now.
- Blobs are read (and their hashes checked) before the first write.
- With a `recorder` (a `Checkpointer`), each path's present state is captured before it is
  overwritten, so the rewind itself can be undone.
- A path restored to "absent" takes with it the directories its write made
  (`FileState.dirs`), each only if it is empty again: never one that existed before, never
  one that holds anything.
- A restore first sweeps the temporaries a killed write or restore left in the directories
  it restores (`tools.beneath.sweep_temporaries`: only defect's own, of a process that is
  gone), so none outlives the next rewind.

A kill -9 in the middle of a restore leaves each file with its old content or its restored
one (never half: the rename is the only step a reader sees; the temporary it may leave is
swept when the session is next loaded or a rewind runs), and the conversation as it was
(`defect_core/session/rewind.py` moves it only after the files); the same `/rewind` run again
finds the restored files already right and finishes the rest. `DEFECT_TEST_RESTORE_PAUSE`
(seconds, unset in use) waits after each restored file, so `tests/test_rewind.py` can kill a
restore midway.
"""

from __future__ import annotations

import os
import posixpath
import stat as stat_mod
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from defect_core.checkpoints.blobs import BlobError, BlobStore, digest_of
from defect_core.checkpoints.capture import LEADS_OUT, Checkpointer
from defect_core.checkpoints.model import Checkpoint, FileState
from defect_core.checkpoints.pinned import read_regular
from defect_core.tools.beneath import (
    Escape,
    parent_beneath,
    remove_empty_directories,
    replace_beneath,
    sweep_temporaries,
    symlink_beneath,
    unlink_beneath,
)

TEST_PAUSE_ENV = "DEFECT_TEST_RESTORE_PAUSE"


@dataclass(frozen=True, slots=True)
class PathNote:
    path: str
    reason: str


@dataclass(frozen=True, slots=True)
class PlannedFile:
    path: str
    target: FileState
    expected: FileState | None
    """What defect left (None: the turn did not finish, so it is unknown)."""


@dataclass
class RestorePlan:
    files: dict[str, PlannedFile] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


@dataclass
class RestoreReport:
    applied: bool = False
    restored: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    conflicts: list[PathNote] = field(default_factory=list)
    failed: list[PathNote] = field(default_factory=list)
    uncovered: list[PathNote] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def blocked(self) -> bool:
        """Something stops a restore without `force`."""
        return bool(self.conflicts or self.failed)


def plan_restore(
    checkpoints: Sequence[Checkpoint], known: Sequence[Checkpoint] = ()
) -> RestorePlan:
    """`checkpoints` newest first: the ones to undo, from the newest back to the target.

    `known`: the session's other checkpoints (any order, those above may be among them); a
    path's expected state is the `after` of the newest one, of either, that touched it."""
    plan = RestorePlan()
    last_left: dict[str, tuple[float, FileState | None]] = {}
    for checkpoint in (*checkpoints, *known):
        for entry in checkpoint.entries:
            seen = last_left.get(entry.path)
            if seen is None or checkpoint.created_at > seen[0]:
                last_left[entry.path] = (checkpoint.created_at, entry.after)
    for checkpoint in checkpoints:  # newest first: the last seen is the oldest, the target
        for note in checkpoint.notes:
            if note not in plan.notes:
                plan.notes.append(note)
        for entry in checkpoint.entries:
            expected = last_left[entry.path][1]
            plan.files[entry.path] = PlannedFile(entry.path, entry.before, expected)
    plan.files = dict(sorted(plan.files.items()))
    return plan


def directories_of(paths: Iterable[str]) -> set[str]:
    """The directories (relative to the root, "" for the root) holding `paths`."""
    return {posixpath.dirname(rel) for rel in paths}


def current_state(root: Path, rel: str) -> FileState:
    """The present state of `rel` (its content hashed), as the checkpoints record states;
    reached beneath `root` (`tools.beneath.parent_beneath`), so a link on the way that
    leads out is reported as such, never followed to hash an outside file."""
    try:
        dir_fd, name = parent_beneath(root, root / rel)
    except (FileNotFoundError, NotADirectoryError):
        return FileState.absent()
    except Escape:
        return FileState.uncovered(LEADS_OUT)
    try:
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except (FileNotFoundError, NotADirectoryError):
            return FileState.absent()
        if stat_mod.S_ISLNK(st.st_mode):
            return FileState("symlink", target=os.readlink(name, dir_fd=dir_fd))
        if not stat_mod.S_ISREG(st.st_mode):
            return FileState.uncovered("not a regular file now")
        digest = digest_of(read_regular(name, dir_fd=dir_fd))
    finally:
        os.close(dir_fd)
    return FileState("file", digest=digest, size=st.st_size, mode=stat_mod.S_IMODE(st.st_mode))


def _describe_change(expected: FileState, now: FileState) -> str:
    if now.kind == "absent":
        return "deleted since defect changed it"
    if expected.kind == "absent":
        return "created since defect removed it"
    return "changed since defect changed it"


def inspect(
    root: Path, plan: RestorePlan, blobs: BlobStore
) -> tuple[RestoreReport, dict[str, bytes]]:
    """The preview of a restore (nothing written) and the blob contents it would write."""
    report = RestoreReport(notes=list(plan.notes))
    contents: dict[str, bytes] = {}
    for rel, planned in plan.files.items():
        try:
            now = current_state(root, rel)
        except OSError as exc:
            report.failed.append(PathNote(rel, f"cannot be read now ({exc.strerror or exc})"))
            continue
        if planned.target.kind == "uncovered":
            report.uncovered.append(PathNote(rel, planned.target.reason or "not captured"))
            continue
        if now.same_content(planned.target) and (
            planned.target.kind != "file" or now.mode == planned.target.mode
        ):
            report.unchanged.append(rel)
            continue
        expected = planned.expected
        if expected is None:
            report.conflicts.append(PathNote(rel, "the turn did not finish: its result is unknown"))
        elif expected.kind == "uncovered" or not now.same_content(expected):
            report.conflicts.append(PathNote(rel, _describe_change(expected, now)))
        if planned.target.kind == "file" and planned.target.digest:
            try:
                contents[planned.target.digest] = blobs.get(planned.target.digest)
            except BlobError as exc:
                report.failed.append(PathNote(rel, str(exc)))
    return report, contents


def restore(
    root: Path,
    checkpoints: Sequence[Checkpoint],
    blobs: BlobStore,
    *,
    force: bool = False,
    recorder: Checkpointer | None = None,
    known: Sequence[Checkpoint] = (),
) -> RestoreReport:
    """Restore every path the checkpoints (newest first) touched to its state before the
    oldest of them. Without `force`, a conflict or an unrestorable file stops it whole.
    `known`: the session's other checkpoints, for what defect left last (`plan_restore`)."""
    root = Path(os.path.realpath(root))
    plan = plan_restore(checkpoints, known)
    sweep_temporaries(root, directories_of(plan.files))
    report, contents = inspect(root, plan, blobs)
    if report.blocked and not force:
        return report
    skip = {n.path for n in (*report.failed, *report.uncovered)} | set(report.unchanged)
    pause = float(os.environ.get(TEST_PAUSE_ENV) or 0)
    emptied: list[tuple[str, int]] = []  # the directories defect made, tried once files are back
    for rel, planned in plan.files.items():
        target = planned.target
        if rel in skip:
            if rel in report.unchanged and target.kind == "absent" and target.dirs:
                emptied.append((rel, target.dirs))  # a rerun's
            continue
        try:
            if recorder is not None:
                recorder.before_write(rel)
            if target.kind == "absent":
                unlink_beneath(root, root / rel)
                if target.dirs:
                    emptied.append((rel, target.dirs))
            elif target.kind == "symlink" and target.target is not None:
                symlink_beneath(root, root / rel, target.target)
            elif target.kind == "file" and target.digest is not None:
                if os.path.islink(root / rel):
                    unlink_beneath(root, root / rel)  # replace the link itself, not what it names
                replace_beneath(root, root / rel, contents[target.digest], mode=target.mode)
        except OSError as exc:
            report.failed.append(PathNote(rel, f"not restored: {exc.strerror or exc}"))
            continue
        report.restored.append(rel)
        if pause > 0:
            time.sleep(pause)
    # Deepest first, after every file: files written at once into one new directory may each
    # have recorded a different part of the path as made (whichever was captured first).
    for rel, levels in sorted(emptied, key=lambda item: item[0].count("/"), reverse=True):
        remove_empty_directories(root, root / rel, levels)
    report.applied = True
    return report
