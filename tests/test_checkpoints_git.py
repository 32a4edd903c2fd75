"""Checkpoints of shell commands: real commands in a real git work tree (and outside one)."""

from __future__ import annotations

import os
import subprocess
import threading
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest

from defect_core.checkpoints import (
    NOT_GIT_NOTE,
    BlobStore,
    CaptureLimits,
    Checkpointer,
    CheckpointingFs,
    WorkTreeSnapshot,
    restore,
)
from defect_core.checkpoints.shell import CheckpointingShell
from defect_core.tools.backends import LocalFsBackend, LocalShellBackend
from defect_core.tools.beneath import TEMPORARY, replace_beneath

BINARY = bytes(range(256)) * 8


@pytest.fixture(autouse=True)
def quiet_git(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The user's git configuration stays out of the tests."""
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(tmp_path / "gitconfig"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for name in ("GIT_AUTHOR_NAME", "GIT_COMMITTER_NAME"):
        monkeypatch.setenv(name, "Test")
    for name in ("GIT_AUTHOR_EMAIL", "GIT_COMMITTER_EMAIL"):
        monkeypatch.setenv(name, "test@example.invalid")


def sh(root: Path, command: str) -> None:
    subprocess.run(["/bin/sh", "-c", command], cwd=root, check=True, capture_output=True)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    sh(root, "git init -q && git config core.autocrlf false")
    (root / ".gitignore").write_text("build/\n")
    (root / "tracked.txt").write_text("tracked, committed\n")
    (root / "to_rename.py").write_text("print('hello')\n")
    (root / "dirty.txt").write_text("committed version\n")
    (root / "image.bin").write_bytes(BINARY)
    (root / "exec.sh").write_text("#!/bin/sh\n")
    (root / "exec.sh").chmod(0o755)
    sh(root, "git add -A && git commit -qm initial")
    (root / "dirty.txt").write_text("uncommitted edit\n")  # differs from the index
    (root / "untracked.txt").write_text("never added\n")
    (root / "build").mkdir()
    (root / "build" / "out.o").write_bytes(b"ignored object")
    return root


def git_state(root: Path) -> tuple[bytes, bytes, bytes]:
    """What defect must never change in the user's repository: index, refs, stashes."""
    refs = subprocess.run(["git", "for-each-ref"], cwd=root, capture_output=True, check=True)
    stash = subprocess.run(["git", "stash", "list"], cwd=root, capture_output=True, check=True)
    return (root / ".git" / "index").read_bytes(), refs.stdout, stash.stdout


def run_command(cp: Checkpointer, root: Path, command: str) -> list[str]:
    watch = cp.before_command()
    sh(root, command)
    return cp.after_command(watch)


def snapshot_files(root: Path) -> dict[str, tuple[bytes, int]]:
    out = {}
    for path in root.rglob("*"):
        if ".git" in path.relative_to(root).parts or not path.is_file():
            continue
        out[str(path.relative_to(root))] = (path.read_bytes(), path.stat().st_mode & 0o777)
    return out


def test_a_command_changes_are_captured_and_restored_byte_exact(tmp_path: Path, repo: Path) -> None:
    blobs = BlobStore.in_state_dir(tmp_path / "state")
    before = snapshot_files(repo)
    repo_before = git_state(repo)
    cp = Checkpointer(repo, blobs, turn_id="t1")
    changed = run_command(
        cp,
        repo,
        "mv to_rename.py renamed.py && echo more >> tracked.txt && echo again > dirty.txt"
        " && rm untracked.txt && printf new > created.txt && head -c 100 /dev/zero > image.bin"
        " && chmod 644 exec.sh && echo rebuilt > build/out.o",
    )
    checkpoint = cp.finish()
    assert changed == [
        "created.txt",
        "dirty.txt",
        "exec.sh",
        "image.bin",
        "renamed.py",
        "to_rename.py",
        "tracked.txt",
        "untracked.txt",
    ]
    assert {e.source for e in checkpoint.entries} == {"bash"}
    assert checkpoint.notes == ()
    assert git_state(repo) == repo_before  # nothing of ours in their repository

    report = restore(repo, [checkpoint], blobs)
    assert report.applied and not report.conflicts and not report.failed
    after = snapshot_files(repo)
    before["build/out.o"] = after["build/out.o"]  # ignored by git: not covered
    assert after == before
    assert git_state(repo) == repo_before


def test_files_past_the_budget_are_reported_not_silently_lost(tmp_path: Path, repo: Path) -> None:
    blobs = BlobStore.in_state_dir(tmp_path / "state")
    (repo / "large_untracked.log").write_bytes(b"x" * 5000)
    cp = Checkpointer(repo, blobs, turn_id="t1", limits=CaptureLimits(command_budget_bytes=1000))
    run_command(cp, repo, "echo changed > large_untracked.log && echo changed > untracked.txt")
    entries = {e.path: e for e in cp.finish().entries}
    assert entries["large_untracked.log"].before.kind == "uncovered"
    assert "over the budget" in (entries["large_untracked.log"].before.reason or "")
    assert entries["untracked.txt"].before.kind == "file"

    report = restore(repo, [cp.finish()], blobs)
    assert [u.path for u in report.uncovered] == ["large_untracked.log"]
    assert (repo / "untracked.txt").read_text() == "never added\n"
    assert (repo / "large_untracked.log").read_text() == "changed\n"


def test_first_capture_wins_between_tools_and_commands(tmp_path: Path, repo: Path) -> None:
    blobs = BlobStore.in_state_dir(tmp_path / "state")
    cp = Checkpointer(repo, blobs, turn_id="t1")
    cp.before_write("tracked.txt")
    (repo / "tracked.txt").write_text("edited by a tool\n")
    changed = run_command(cp, repo, "echo by a command >> tracked.txt")
    assert changed == ["tracked.txt"]
    (entry,) = cp.finish().entries
    assert entry.source == "tool"
    assert blobs.get(entry.before.digest or "") == b"tracked, committed\n"


def test_what_a_snapshot_secures_before_a_command(repo: Path) -> None:
    """Clean tracked files are left to git; modified and untracked ones are read; ignored
    ones are not listed at all."""
    snap = WorkTreeSnapshot.take(repo, budget_bytes=1 << 20, max_file_bytes=1 << 20)
    assert snap is not None
    assert snap.prior("tracked.txt").kind == "git"
    assert snap.prior("dirty.txt").data == b"uncommitted edit\n"
    assert snap.prior("untracked.txt").data == b"never added\n"
    assert snap.prior("build/out.o").kind == "absent"  # ignored: not listed
    assert "build/out.o" not in snap.keys
    assert snap.changed() == []


def test_a_workspace_below_the_repository_top(tmp_path: Path, repo: Path) -> None:
    sub = repo / "pkg"
    sub.mkdir()
    (sub / "mod.py").write_text("x = 1\n")
    sh(repo, "git add pkg && git commit -qm pkg")
    blobs = BlobStore.in_state_dir(tmp_path / "state")
    cp = Checkpointer(sub, blobs, turn_id="t1")
    changed = run_command(cp, sub, "echo 'x = 2' > mod.py && echo top > ../tracked.txt")
    assert changed == ["mod.py"]  # only what lies beneath the workspace root
    checkpoint = cp.finish()
    assert restore(sub, [checkpoint], blobs).applied
    assert (sub / "mod.py").read_text() == "x = 1\n"


def test_outside_git_command_side_effects_are_said_not_covered(tmp_path: Path) -> None:
    root = tmp_path / "plain"
    root.mkdir()
    (root / "a.txt").write_text("a\n")
    blobs = BlobStore.in_state_dir(tmp_path / "state")
    cp = Checkpointer(root, blobs, turn_id="t1")
    assert run_command(cp, root, "echo b > a.txt") == []
    checkpoint = cp.finish()
    assert checkpoint.notes == (NOT_GIT_NOTE,)
    report = restore(root, [checkpoint], blobs)
    assert report.notes == [NOT_GIT_NOTE] and report.restored == []
    assert not os.path.exists(root / ".git")


class Hold:
    """Holds the thread that reaches it until `go` (then lets every later one pass). The
    waits are bounded only so that a broken test fails instead of hanging."""

    def __init__(self) -> None:
        self.reached, self.go = threading.Event(), threading.Event()

    def __call__(self) -> None:
        if not self.go.is_set():
            self.reached.set()
            assert self.go.wait(120), "never let go"

    async def until_reached(self) -> None:
        assert await anyio.to_thread.run_sync(self.reached.wait, 120), "never reached"


@pytest.mark.parametrize("seen", ["before, not after", "after, not before", "before and after"])
def test_a_write_in_flight_during_a_command_leaves_no_temporary_to_rewind(
    tmp_path: Path, repo: Path, monkeypatch: pytest.MonkeyPatch, seen: str
) -> None:
    """A file tool and a command of one batch run concurrently. The tool's atomic write
    holds a temporary beside its file until the rename; the command's snapshots must not
    take that temporary for a file the command deleted (the rewind would then make a file
    nobody made), made, or changed. The write is held just after making its temporary and
    just before renaming it, while the command's snapshots are taken, so each order of the
    race happens for certain."""
    blobs = BlobStore.in_state_dir(tmp_path / "state")
    # The user's own file that merely looks like a temporary is still the command's to cover.
    (repo / ".notes.txt.0badcafe.tmp").write_text("the user's\n")
    before = snapshot_files(repo)
    cp = Checkpointer(repo, blobs, turn_id="t1")
    fs = CheckpointingFs(LocalFsBackend(repo), cp)
    shell = CheckpointingShell(LocalShellBackend(), cp)
    made, renamed = Hold(), Hold()
    real_open, real_replace = os.open, os.replace

    def held_open(path: str, flags: int, *args: Any, **kw: Any) -> int:
        fd = real_open(path, flags, *args, **kw)
        if str(path).endswith(".tmp") and flags & os.O_EXCL:
            made()  # the temporary exists, empty
        return fd

    def held_replace(src: str, dst: str, **kw: Any) -> None:
        if str(src).endswith(".tmp"):
            renamed()  # the temporary is written, not renamed yet
        real_replace(src, dst, **kw)

    monkeypatch.setattr(os, "open", held_open)
    monkeypatch.setattr(os, "replace", held_replace)
    command = "rm .notes.txt.0badcafe.tmp && echo by the command > untracked.txt"

    async def batch() -> None:
        written = anyio.Event()

        async def write() -> None:
            await fs.write_text(repo / "made" / "new.txt", "fresh\n")
            written.set()

        async with anyio.create_task_group() as tg:
            if seen == "before, not after":
                made.go.set()
                tg.start_soon(write)
                await renamed.until_reached()
                handle = await shell.create(command, repo)  # snapshot: the temporary
                renamed.go.set()
                await written.wait()
                await shell.wait_for_exit(handle)
                await shell.release(handle)  # snapshot: the temporary gone
            elif seen == "after, not before":
                made.go.set()
                handle = await shell.create(command, repo)  # snapshot: no temporary
                tg.start_soon(write)
                await shell.wait_for_exit(handle)
                await renamed.until_reached()
                await shell.release(handle)  # snapshot: the temporary
                renamed.go.set()
            else:
                tg.start_soon(write)
                await made.until_reached()
                handle = await shell.create(command, repo)  # snapshot: the temporary, empty
                made.go.set()
                await renamed.until_reached()
                await shell.wait_for_exit(handle)
                await shell.release(handle)  # snapshot: the temporary, written
                renamed.go.set()

    anyio.run(batch)
    checkpoint = cp.finish()
    entries = {e.path: e.source for e in checkpoint.entries}
    assert entries == {
        ".notes.txt.0badcafe.tmp": "bash",
        "made/new.txt": "tool",
        "untracked.txt": "bash",
    }
    assert sorted(os.listdir(repo / "made")) == ["new.txt"]

    report = restore(repo, [checkpoint], blobs)
    assert report.applied and not report.conflicts and not report.failed
    assert not report.uncovered
    assert snapshot_files(repo) == before  # no temporary made, the user's file back


def test_a_write_names_its_temporary_by_its_real_path_before_making_it(tmp_path: Path) -> None:
    """The name a checkpoint is told is the one git lists: in the directory the file really
    lies in (a link to a directory followed), and given before the temporary exists."""
    root = tmp_path / "w"
    (root / "real").mkdir(parents=True)
    (root / "linked").symlink_to("real")
    told: list[tuple[str, bool]] = []
    replace_beneath(
        root,
        root / "linked" / "a.txt",
        b"x\n",
        on_temporary=lambda p: told.append((p, os.path.lexists(p))),
    )
    ((path, existed),) = told
    assert os.path.dirname(path) == os.path.realpath(root / "real")
    assert TEMPORARY.fullmatch(os.path.basename(path)), path
    assert os.path.basename(path).startswith(f".defect.{os.getpid()}.")
    assert not existed and not os.path.lexists(path)
    assert (root / "real" / "a.txt").read_bytes() == b"x\n"
