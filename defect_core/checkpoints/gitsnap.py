"""What a shell command changed in a git work tree, and what those files held before it ran.

Owns `WorkTreeSnapshot`: taken before a command, it lists the tracked and the untracked,
not-ignored files beneath the workspace root (`git ls-files`) with their `lstat` keys (size,
mtime_ns, ctime_ns, inode, mode), and secures, for each file that might change, a way to get
its present content back:
- a tracked file identical to the index (`git diff-files` does not list it): the index's blob
  id — git already holds the bytes, read (`git cat-file`) only if the command changes it;
- a symbolic link: its target, read now (cheap);
- any other file (modified tracked, untracked): its bytes, read now (not hashed nor stored:
  only the files the command changes are), smallest first, within a byte budget; a file past
  the budget is listed as not covered, with the reason.
After the command, `changed` stats the same listing again (plus what is new) and returns only
the paths whose key differs: created, modified, deleted, or either side of a rename.

Invariants:
- Nothing here writes to the repository, and the repository runs nothing: git runs through
  `safe_git.run_git`, read-only (`GIT_OPTIONAL_LOCKS=0`, so not even the index's stat cache
  is refreshed), with no fsmonitor, filter, hook, lazy fetch or replaced object, and without
  the user's `GIT_*` variables, so git looks at the workspace's own repository. The key
  names it overrides are read again whenever a configuration file changed (`safe_git`'s
  cache): the command in between may have written `.git/config`.
- A prior is only ever what the file held before the command: an index blob is trusted only
  for files git itself says are unchanged against the index.
- Memory held between before and after is bounded by the budget.

Outside a git work tree (or without git) `take` returns None: a command's side effects are
then not covered, and the checkpoint says so.
"""

from __future__ import annotations

import os
import stat as stat_mod
from dataclasses import dataclass, field
from pathlib import Path

from defect_core.safe_git import run_git

StatKey = tuple[int, int, int, int, int]
"""(size, mtime_ns, ctime_ns, inode, mode) of an `lstat`; equal keys mean unchanged content."""

GIT_TIMEOUT = 30.0
GITLINK = "160000"


def stat_key(path: str | Path, *, dir_fd: int | None = None) -> StatKey | None:
    try:
        st = os.stat(path, dir_fd=dir_fd, follow_symlinks=False)
    except (FileNotFoundError, NotADirectoryError):
        return None
    return (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_mode)


@dataclass(frozen=True, slots=True)
class Prior:
    """A file's content before the command, or how to get it.

    kind "git": index blob `oid`; "bytes": `data`; "symlink": `target`; "uncovered":
    `reason`. `mode` is the file's permission bits."""

    kind: str
    mode: int = 0o644
    oid: str | None = None
    data: bytes | None = None
    target: str | None = None
    reason: str | None = None
    key: StatKey | None = None


def _git(root: Path, *args: str, check: bool = True) -> bytes:
    done = run_git(root, *args, timeout=GIT_TIMEOUT)
    if check and done.returncode != 0:
        raise OSError(f"git {args[0]} failed: {done.stderr.decode(errors='replace').strip()}")
    return done.stdout


def _split(out: bytes) -> list[str]:
    return [p for p in os.fsdecode(out).split("\0") if p]


def is_work_tree(root: Path) -> bool:
    try:
        out = _git(root, "rev-parse", "--is-inside-work-tree", check=False)
    except OSError:
        return False
    return out.strip() == b"true"


def _listing(root: Path) -> list[str]:
    out = _git(root, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
    return sorted({p for p in _split(out) if not p.endswith("/")})


@dataclass
class WorkTreeSnapshot:
    root: Path
    keys: dict[str, StatKey | None]
    priors: dict[str, Prior]
    uncovered: list[tuple[str, str]] = field(default_factory=list)

    @classmethod
    def take(
        cls,
        root: Path,
        *,
        budget_bytes: int,
        max_file_bytes: int,
    ) -> WorkTreeSnapshot | None:
        """The state before a command, or None outside a git work tree (or without git)."""
        if not is_work_tree(root):
            return None
        staged: dict[str, tuple[str, str]] = {}
        for line in _split(_git(root, "ls-files", "-z", "--stage")):
            meta, _, path = line.partition("\t")
            index_mode, oid, stage = meta.split(" ")
            if stage == "0" and index_mode != GITLINK:
                staged[path] = (index_mode, oid)
        dirty = set(_split(_git(root, "diff-files", "-z", "--name-only", "--relative")))
        untracked = [
            p
            for p in _split(_git(root, "ls-files", "-z", "--others", "--exclude-standard"))
            if not p.endswith("/")
        ]
        snap = cls(root, {}, {})
        to_read: list[tuple[int, str, StatKey]] = []
        for rel in [*staged, *untracked]:
            key = stat_key(root / rel)
            snap.keys[rel] = key
            if key is None:
                continue
            mode = key[4]
            if stat_mod.S_ISLNK(mode):
                snap.priors[rel] = Prior("symlink", target=os.readlink(root / rel), key=key)
            elif not stat_mod.S_ISREG(mode):
                snap.priors[rel] = Prior("uncovered", reason="not a regular file", key=key)
            elif rel in staged and rel not in dirty:
                perm = stat_mod.S_IMODE(mode)
                snap.priors[rel] = Prior("git", mode=perm, oid=staged[rel][1], key=key)
            else:
                to_read.append((key[0], rel, key))
        spent = 0
        for size, rel, key in sorted(to_read):
            perm = stat_mod.S_IMODE(key[4])
            if size > max_file_bytes or spent + size > budget_bytes:
                reason = f"not captured before the command ({size} bytes, over the budget)"
                snap.priors[rel] = Prior("uncovered", perm, reason=reason, key=key)
                continue
            try:
                data = _read_unchanged(root / rel, key)
            except OSError as exc:
                reason = f"could not be read before the command ({exc.strerror or exc})"
                snap.priors[rel] = Prior("uncovered", perm, reason=reason, key=key)
                continue
            spent += len(data)
            snap.priors[rel] = Prior("bytes", perm, data=data, key=key)
        return snap

    def changed(self) -> list[str]:
        """After the command: every path created, modified or deleted since `take`."""
        try:
            after = _listing(self.root)
        except OSError:
            after = []
        paths = set(self.keys) | set(after)
        return sorted(p for p in paths if stat_key(self.root / p) != self.keys.get(p))

    def prior(self, rel: str) -> Prior:
        """What `rel` held before the command: "absent" when it did not exist then."""
        if rel in self.priors:
            return self.priors[rel]
        if self.keys.get(rel) is None:
            return Prior("absent")
        return Prior("uncovered", reason="unknown before the command")

    def git_blob(self, oid: str) -> bytes:
        return _git(self.root, "cat-file", "blob", oid)


def _read_unchanged(path: Path, key: StatKey) -> bytes:
    """The file's bytes, refusing a file replaced or changed between its stat and its read."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    try:
        st = os.fstat(fd)
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
    finally:
        os.close(fd)
    if (st.st_size, st.st_ino, st.st_mtime_ns) != (key[0], key[3], key[1]):
        raise OSError(0, "it changed while being read")
    return b"".join(chunks)
