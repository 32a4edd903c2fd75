"""Checkpoints: the prior state of every file a prompt changed, and rewinding to it.

Owns the package's public names. Lowest first: `model` (the values and their JSON form),
`blobs` (the content-addressed, compressed store in the state directory), `gitsnap` (what a
shell command changed in a git work tree), `budget` (what is pruned, oldest first), `pinned`
(a replaced file's old inode held open until its content is stored), `capture`
(recording one turn's checkpoint), then `fs` (the file door that captures before every write)
and `restore` (putting files back, conflicts first).

Invariant: nothing here writes to the user's repository except a restore the user asked for,
and that only beneath the workspace root; checkpoint contents live in defect's state
directory, never as a commit, stash or ref of the user's.
"""

from defect_core.checkpoints.blobs import BlobCorrupt, BlobError, BlobMissing, BlobStore
from defect_core.checkpoints.budget import Budget, CheckpointUsage, PrunePlan, plan_prune
from defect_core.checkpoints.capture import NOT_GIT_NOTE, CaptureLimits, Checkpointer
from defect_core.checkpoints.fs import CheckpointingFs
from defect_core.checkpoints.gitsnap import WorkTreeSnapshot
from defect_core.checkpoints.model import Checkpoint, Entry, FileState
from defect_core.checkpoints.restore import (
    PathNote,
    RestorePlan,
    RestoreReport,
    inspect,
    plan_restore,
    restore,
)

__all__ = [
    "NOT_GIT_NOTE",
    "BlobCorrupt",
    "BlobError",
    "BlobMissing",
    "BlobStore",
    "Budget",
    "CaptureLimits",
    "Checkpoint",
    "CheckpointUsage",
    "Checkpointer",
    "CheckpointingFs",
    "Entry",
    "FileState",
    "PathNote",
    "PrunePlan",
    "RestorePlan",
    "RestoreReport",
    "WorkTreeSnapshot",
    "inspect",
    "plan_prune",
    "plan_restore",
    "restore",
]
