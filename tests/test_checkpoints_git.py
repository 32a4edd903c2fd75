"""Checkpoints of shell commands: real commands in a real git work tree (and outside one)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from defect_core.checkpoints import (
    NOT_GIT_NOTE,
    BlobStore,
    CaptureLimits,
    Checkpointer,
    WorkTreeSnapshot,
    restore,
)

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
