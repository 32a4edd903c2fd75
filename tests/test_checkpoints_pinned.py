"""Capture by holding a replaced file's old inode open (`defect_core/checkpoints/pinned.py`)
and the path resolution every captured write goes through, on real files: the file itself is
reached beneath the root, whatever a directory on its way became after the path resolved."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

from defect_core.checkpoints import BlobStore, CaptureLimits, Checkpointer, CheckpointingFs
from defect_core.checkpoints.blobs import digest_of
from defect_core.checkpoints.capture import LEADS_OUT, NOT_STORED
from defect_core.checkpoints.model import Entry, FileState
from defect_core.checkpoints.restore import current_state
from defect_core.tools import beneath
from defect_core.tools.backends import LocalFsBackend, LocalShellBackend
from defect_core.tools.base import ToolContext
from defect_core.tools.beneath import replace_beneath
from defect_core.tools.files import WriteFileTool


@pytest.fixture
def blobs(tmp_path: Path) -> BlobStore:
    return BlobStore.in_state_dir(tmp_path / "state")


@pytest.fixture
def root(tmp_path: Path) -> Path:
    workspace = tmp_path / "work"
    workspace.mkdir()
    return workspace


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def replace(root: Path, rel: str, text: str, cp: Checkpointer) -> None:
    """The checkpointed local write: capture announcing the replace, write, hint."""
    got = cp.before_write(rel, replacing=True)
    replace_beneath(root, root / rel, text.encode())
    cp.after_write(rel, text, rel=got)


def befores(cp: Checkpointer, blobs: BlobStore) -> dict[str, bytes | str | None]:
    out: dict[str, bytes | str | None] = {}
    for e in cp.finish().entries:
        out[e.path] = blobs.get(e.before.digest) if e.before.digest else e.before.reason
    return out


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts descriptors in /proc")
def test_a_replaced_file_is_held_open_until_flush_and_stored_exactly(
    root: Path, blobs: BlobStore
) -> None:
    (root / "a.py").write_bytes(b"old\r\ncontent\n")
    cp = Checkpointer(root, blobs, turn_id="t1")
    fds = open_fds()
    replace(root, "a.py", "new\n", cp)
    assert open_fds() == fds + 1  # the old inode, not a copy of its bytes
    assert [e.before.reason for e in cp.partial().entries] == [NOT_STORED]
    cp.flush()
    assert open_fds() == fds
    checkpoint = cp.finish()
    (entry,) = checkpoint.entries
    assert blobs.get(entry.before.digest or "") == b"old\r\ncontent\n"
    assert entry.after is not None and entry.after.size == 4


def test_a_pinned_file_changed_by_whoever_held_it_open_is_uncovered_never_wrong(
    root: Path, blobs: BlobStore
) -> None:
    (root / "a.txt").write_bytes(b"prior\n")
    cp = Checkpointer(root, blobs, turn_id="t1")
    with open(root / "a.txt", "r+b") as holder:
        replace(root, "a.txt", "new\n", cp)
        holder.seek(0, os.SEEK_END)
        holder.write(b"appended through an old descriptor\n")
    got = befores(cp, blobs)
    assert got == {"a.txt": "could not be read (changed by another process before it was stored)"}


def test_a_file_with_another_link_is_read_at_once(root: Path, blobs: BlobStore) -> None:
    (root / "a.txt").write_bytes(b"prior\n")
    os.link(root / "a.txt", root.parent / "elsewhere.txt")
    cp = Checkpointer(root, blobs, turn_id="t1")
    replace(root, "a.txt", "new\n", cp)
    with open(root.parent / "elsewhere.txt", "r+b") as other:  # the old inode, still named
        other.write(b"CHANGED")
    assert befores(cp, blobs) == {"a.txt": b"prior\n"}


def test_past_the_pinned_budget_prior_contents_are_read_at_once(
    root: Path, blobs: BlobStore
) -> None:
    for i in range(5):
        (root / f"f{i}").write_bytes(bytes([65 + i]) * 100)
    cp = Checkpointer(root, blobs, turn_id="t1", limits=CaptureLimits(pinned_files=2))
    fds = open_fds()
    for i in range(5):
        replace(root, f"f{i}", "changed", cp)
    assert open_fds() == fds + 2
    assert befores(cp, blobs) == {f"f{i}": bytes([65 + i]) * 100 for i in range(5)}


def test_a_failed_replace_reads_the_prior_content_before_anything_else_changes_it(
    root: Path, blobs: BlobStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The write's temporary file cannot be created (its name too long for the directory):
    the write fails, the file stays where later tools may change it in place, so it is read
    at once."""
    monkeypatch.setattr(beneath, "temporary_name", lambda: "t" * 300)
    name = "n" * 250
    (root / name).write_bytes(b"prior\n")
    cp = Checkpointer(root, blobs, turn_id="t1")
    fs = CheckpointingFs(LocalFsBackend(root), cp)
    with pytest.raises(OSError):
        anyio.run(fs.write_text, root / name, "new\n")
    with open(root / name, "ab") as later:
        later.write(b"appended in place later in the turn\n")
    assert befores(cp, blobs) == {name: b"prior\n"}


def test_the_write_tool_through_the_file_door_releases_every_descriptor(
    root: Path, blobs: BlobStore
) -> None:
    for i in range(20):
        (root / f"m{i}.py").write_text(f"prior {i}\n")
    cp = Checkpointer(root, blobs, turn_id="t1")
    ctx = ToolContext("s1", root, CheckpointingFs(LocalFsBackend(root), cp), LocalShellBackend())
    fds = open_fds()

    async def turn() -> None:
        for i in range(20):
            await WriteFileTool().run({"path": f"m{i}.py", "content": f"new {i}\n"}, ctx)

    anyio.run(turn)
    checkpoint = cp.finish()
    assert open_fds() == fds
    assert {e.path: blobs.get(e.before.digest or "") for e in checkpoint.entries} == {
        f"m{i}.py": f"prior {i}\n".encode() for i in range(20)
    }
    assert all(e.after is not None and e.after.digest for e in checkpoint.entries)


def test_paths_resolve_as_the_tools_resolve_them(root: Path, blobs: BlobStore) -> None:
    """The fast path (no link below the root) and the full one agree with `realpath`."""
    (root / "src" / "pkg").mkdir(parents=True)
    (root / "src" / "pkg" / "m.py").write_text("x\n")
    (root / "alias").symlink_to("src")
    (root / "out").symlink_to(root.parent)
    (root / "file").write_text("f\n")
    cp = Checkpointer(root, blobs, turn_id="t1")
    cases = [
        "src/pkg/m.py",
        "src//pkg/./m.py",
        "alias/pkg/m.py",
        "src/pkg/../pkg/m.py",
        "alias/../file",
        "src/absent/deeper/x.py",
        "file/under-a-file",
        "out/work/file",
        "out/elsewhere.txt",
        "..",
        ".",
        str(root / "src" / "pkg" / "m.py"),
        str(root.parent / "x"),
    ]
    for case in cases:
        real = os.path.realpath(os.path.join(root, case))
        rel = os.path.relpath(real, root)
        expected = None if rel == "." or rel == ".." or rel.startswith("../") else rel
        assert cp.relative(case) == expected, case


@pytest.mark.parametrize("replacing", [False, True], ids=["read", "pinned"])
def test_a_directory_swapped_for_a_link_after_resolving_never_brings_outside_bytes_in(
    tmp_path: Path, root: Path, blobs: BlobStore, monkeypatch: pytest.MonkeyPatch, replacing: bool
) -> None:
    """Between `relative` (the path resolved, no link on it) and the capture, `d` becomes a
    link: leading out, the capture says so and stores nothing of the outside file (a rewind
    would write it into the workspace); leading to another directory inside, that one's file
    is captured, as the write would reach it."""
    (root / "d").mkdir()
    (root / "d" / "f.txt").write_text("inside\n")
    (root / "other").mkdir()
    (root / "other" / "f.txt").write_text("other\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "f.txt").write_text("SECRET\n")
    got: dict[str, Entry] = {}
    for name, target in (("out", outside), ("in", root / "other")):
        cp = Checkpointer(root, blobs, turn_id=name)
        resolve = cp.relative

        def swap_after_resolving(
            path: str | Path, target: Path = target, resolve: Callable[..., str | None] = resolve
        ) -> str | None:
            rel = resolve(path)
            shutil.rmtree(root / "d")
            (root / "d").symlink_to(target)
            return rel

        monkeypatch.setattr(cp, "relative", swap_after_resolving)
        assert cp.before_write("d/f.txt", replacing=replacing) == "d/f.txt"
        (got[name],) = cp.finish().entries
        if name == "out":
            assert current_state(root, "d/f.txt") == FileState.uncovered(LEADS_OUT)
        (root / "d").unlink()
        (root / "d").mkdir()
        (root / "d" / "f.txt").write_text("inside\n")
    assert got["out"].before == FileState.uncovered(LEADS_OUT)
    assert got["out"].after == FileState.uncovered(f"{LEADS_OUT} after the turn")
    assert not blobs.has(digest_of(b"SECRET\n"))
    assert blobs.get(got["in"].before.digest or "") == b"other\n"
    assert got["in"].after is not None and got["in"].after.digest == digest_of(b"other\n")
