"""The checkpoint engine on real files: blobs, capture, restore with conflicts, pruning."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from defect_core.checkpoints import (
    BlobCorrupt,
    BlobMissing,
    BlobStore,
    Budget,
    CaptureLimits,
    Checkpoint,
    Checkpointer,
    CheckpointUsage,
    FileState,
    plan_prune,
    restore,
)
from defect_core.checkpoints.blobs import digest_of
from defect_core.tools.beneath import replace_beneath

BINARY = bytes(range(256)) * 40 + b"\x00\xff\x00"


@pytest.fixture
def blobs(tmp_path: Path) -> BlobStore:
    return BlobStore.in_state_dir(tmp_path / "state")


@pytest.fixture
def root(tmp_path: Path) -> Path:
    workspace = tmp_path / "work"
    workspace.mkdir()
    return workspace


def checkpointer(root: Path, blobs: BlobStore, turn: str = "t1", **kw: object) -> Checkpointer:
    return Checkpointer(root, blobs, turn_id=turn, session_id="s1", **kw)  # type: ignore[arg-type]


def write(root: Path, rel: str, data: bytes, cp: Checkpointer | None = None) -> None:
    """A tool's write: capture first, then the real atomic write path."""
    if cp is not None:
        cp.before_write(rel)
    replace_beneath(root, root / rel, data)
    if cp is not None:
        cp.after_write(rel, data)


# -- blobs -------------------------------------------------------------------------------


def test_blobs_round_trip_deduplicate_and_compress(blobs: BlobStore) -> None:
    text = b"def handler(request):\n    return value\n" * 2000
    name = blobs.put(text)
    assert name == digest_of(text)
    assert blobs.put(text) == name
    assert list(blobs.names()) == [name]
    assert blobs.get(name) == text
    assert blobs.stored_size(name) < len(text) // 4  # compressed
    binary = os.urandom(5000)  # incompressible: kept raw, still exact
    assert blobs.get(blobs.put(binary)) == binary
    assert blobs.get(blobs.put(b"")) == b""
    assert "checkpoints" in str(blobs.path_of(name))


def test_blob_damage_is_detected_never_returned(blobs: BlobStore) -> None:
    name = blobs.put(b"original content\n" * 100)
    path = blobs.path_of(name)
    raw = bytearray(path.read_bytes())
    raw[-1] ^= 0xFF
    path.write_bytes(bytes(raw))
    with pytest.raises(BlobCorrupt):
        blobs.get(name)
    with pytest.raises(BlobMissing):
        blobs.get("0" * 64)
    path.write_bytes(b"")  # what a power cut can leave: the next put rewrites it
    assert blobs.put(b"original content\n" * 100) == name
    assert blobs.get(name) == b"original content\n" * 100


def test_kill_9_mid_write_leaves_no_half_blob(tmp_path: Path, blobs: BlobStore) -> None:
    """A process killed in the middle of writing a blob: no blob becomes visible, the
    temporary it left is swept, and the next put of the same content succeeds."""
    script = textwrap.dedent(
        f"""
        import os, signal
        from pathlib import Path
        from defect_core.checkpoints.blobs import BlobStore
        real_write = os.write
        def half_then_die(fd, data):
            real_write(fd, bytes(data[: len(data) // 2]))
            os.kill(os.getpid(), signal.SIGKILL)
        os.write = half_then_die
        BlobStore(Path({str(blobs.root)!r})).put(os.urandom(1 << 20))
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, check=False)
    assert done.returncode == -signal.SIGKILL
    assert list(blobs.names()) == []
    leftovers = list((blobs.root / "tmp").iterdir())
    assert len(leftovers) == 1 and leftovers[0].stat().st_size > 0
    report = blobs.sweep(live=(), grace_seconds=0)
    assert report.removed == 1
    assert list((blobs.root / "tmp").iterdir()) == []


def test_sweep_keeps_live_and_young_blobs(blobs: BlobStore) -> None:
    live, dead = blobs.put(b"live"), blobs.put(b"dead")
    assert blobs.sweep(live=[live], grace_seconds=3600).removed == 0  # dead is still young
    report = blobs.sweep(live=[live], grace_seconds=0)
    assert (report.removed, set(blobs.names())) == (1, {live})
    assert report.freed_bytes > 0
    assert not blobs.has(dead)


# -- capture -----------------------------------------------------------------------------


def test_capture_records_prior_states_first_capture_wins(root: Path, blobs: BlobStore) -> None:
    (root / "a.txt").write_bytes(b"one\n")
    (root / "bin.dat").write_bytes(BINARY)
    (root / "tool.sh").write_bytes(b"#!/bin/sh\n")
    (root / "tool.sh").chmod(0o755)
    cp = checkpointer(root, blobs)
    write(root, "a.txt", b"two\n", cp)
    write(root, "a.txt", b"three\n", cp)  # the second write keeps the first prior state
    write(root, "bin.dat", b"now text", cp)
    write(root, "new/created.txt", b"fresh", cp)
    write(root, "tool.sh", b"#!/bin/sh\necho\n", cp)
    cp.before_write(root.parent / "outside.txt")  # outside the root: never recorded
    checkpoint = cp.finish()
    by_path = {e.path: e for e in checkpoint.entries}
    assert sorted(by_path) == ["a.txt", "bin.dat", "new/created.txt", "tool.sh"]
    assert blobs.get(by_path["a.txt"].before.digest or "") == b"one\n"
    assert by_path["a.txt"].after == FileState("file", digest_of(b"three\n"), 6, 0o644)
    assert blobs.get(by_path["bin.dat"].before.digest or "") == BINARY
    assert by_path["new/created.txt"].before == FileState.absent(dirs=1)  # "new" made by the write
    assert by_path["tool.sh"].before.mode == 0o755
    assert checkpoint.finished and checkpoint.notes == ()
    assert Checkpoint.from_json(checkpoint.to_json()) == checkpoint


def test_files_that_share_a_new_directory_take_it_with_them_whatever_recorded_it(
    root: Path, blobs: BlobStore
) -> None:
    """Two writes into one new directory: the first captured records `made`, the deeper one
    only `made/deep` (by then `made` existed). The restore removes both once both files are
    gone, whichever file it handles first."""
    cp = checkpointer(root, blobs)
    write(root, "made/b.txt", b"b", cp)
    write(root, "made/deep/a.txt", b"a", cp)
    checkpoint = cp.finish()
    by_path = {e.path: e for e in checkpoint.entries}
    assert by_path["made/b.txt"].before == FileState.absent(dirs=1)
    assert by_path["made/deep/a.txt"].before == FileState.absent(dirs=1)
    report = restore(root, [checkpoint], blobs)
    assert report.applied and sorted(report.restored) == ["made/b.txt", "made/deep/a.txt"]
    assert list(root.iterdir()) == []


def test_capture_follows_links_like_the_tools_and_says_what_it_cannot_capture(
    root: Path, blobs: BlobStore
) -> None:
    (root / "real.txt").write_text("real\n")
    (root / "link.txt").symlink_to("real.txt")
    (root / "big.bin").write_bytes(b"x" * 2048)
    (root / "adir").mkdir()
    cp = checkpointer(root, blobs, limits=CaptureLimits(max_file_bytes=1024))
    cp.before_write("link.txt")  # the tools write through the link: its target is captured
    cp.before_write("big.bin")
    cp.before_write("adir")
    entries = {e.path: e for e in cp.finish().entries}
    assert sorted(entries) == ["adir", "big.bin", "real.txt"]
    assert blobs.get(entries["real.txt"].before.digest or "") == b"real\n"
    assert entries["big.bin"].before.kind == "uncovered"
    assert "capture limit" in (entries["big.bin"].before.reason or "")
    assert entries["adir"].before.reason == "not a regular file"


def test_partial_checkpoint_is_unfinished_and_has_no_after(root: Path, blobs: BlobStore) -> None:
    (root / "a.txt").write_text("before\n")
    cp = checkpointer(root, blobs)
    write(root, "a.txt", b"after\n", cp)
    cp.close()
    partial = cp.partial()
    assert not partial.finished
    assert [(e.path, e.after) for e in partial.entries] == [("a.txt", None)]
    assert blobs.get(partial.entries[0].before.digest or "") == b"before\n"


def test_synchronous_capture_past_the_pending_budget(root: Path, blobs: BlobStore) -> None:
    for i in range(5):
        (root / f"f{i}").write_bytes(bytes([i]) * 1000)
    cp = checkpointer(root, blobs, limits=CaptureLimits(pending_bytes=0))
    for i in range(5):
        write(root, f"f{i}", b"changed", cp)
    entries = cp.finish().entries
    assert [blobs.get(e.before.digest or "") for e in entries] == [
        bytes([i]) * 1000 for i in range(5)
    ]


# -- restore -----------------------------------------------------------------------------


def test_restore_is_byte_exact_for_edits_creations_deletions_binary_and_modes(
    root: Path, blobs: BlobStore
) -> None:
    (root / "a.txt").write_bytes(b"line one\r\nline two\r\n")
    (root / "bin.dat").write_bytes(BINARY)
    (root / "gone.txt").write_bytes(b"to be deleted\n")
    (root / "run.sh").write_bytes(b"#!/bin/sh\n")
    (root / "run.sh").chmod(0o750)
    (root / "ln").symlink_to("a.txt")
    cp = checkpointer(root, blobs)
    write(root, "a.txt", b"rewritten\n", cp)
    write(root, "bin.dat", b"\x00" * 10, cp)
    write(root, "deep/new.txt", b"created\n", cp)
    cp.before_write("gone.txt")
    (root / "gone.txt").unlink()
    cp.before_write(root / "run.sh")
    replace_beneath(root, root / "run.sh", b"#!/bin/sh\nexit 1\n", mode=0o644)
    checkpoint = cp.finish()

    report = restore(root, [checkpoint], blobs)
    assert report.applied and not report.conflicts and not report.failed
    assert sorted(report.restored) == ["a.txt", "bin.dat", "deep/new.txt", "gone.txt", "run.sh"]
    assert (root / "a.txt").read_bytes() == b"line one\r\nline two\r\n"
    assert (root / "bin.dat").read_bytes() == BINARY
    assert (root / "gone.txt").read_bytes() == b"to be deleted\n"
    assert not (root / "deep/new.txt").exists()
    assert (root / "run.sh").stat().st_mode & 0o777 == 0o750
    assert os.readlink(root / "ln") == "a.txt"
    assert sorted(p.name for p in root.iterdir() if p.name.endswith(".tmp")) == []


def test_a_user_edit_after_the_turn_is_a_conflict_and_is_kept(root: Path, blobs: BlobStore) -> None:
    for name in ("a", "b", "d"):
        (root / f"{name}.txt").write_text(f"{name}1\n")
    cp = checkpointer(root, blobs)
    for name in ("a", "b", "d"):
        write(root, f"{name}.txt", f"{name}2\n".encode(), cp)
    write(root, "c.txt", b"created by defect\n", cp)
    checkpoint = cp.finish()
    (root / "a.txt").write_text("the user's own edit\n")
    (root / "b.txt").unlink()
    (root / "c.txt").unlink()  # already as before the turn: nothing to restore, no conflict

    report = restore(root, [checkpoint], blobs)
    assert not report.applied and report.restored == []
    assert {(c.path, c.reason) for c in report.conflicts} == {
        ("a.txt", "changed since defect changed it"),
        ("b.txt", "deleted since defect changed it"),
    }
    assert (root / "a.txt").read_text() == "the user's own edit\n"
    assert (root / "d.txt").read_text() == "d2\n"  # nothing restored, not even the clean one

    forced = restore(root, [checkpoint], blobs, force=True)
    assert forced.applied and sorted(forced.restored) == ["a.txt", "b.txt", "d.txt"]
    assert forced.unchanged == ["c.txt"]
    assert [(root / f"{n}.txt").read_text() for n in "abd"] == ["a1\n", "b1\n", "d1\n"]


def test_restore_back_through_several_prompts(root: Path, blobs: BlobStore) -> None:
    (root / "a.txt").write_text("p0\n")
    turns = []
    for n in (1, 2, 3):
        cp = checkpointer(root, blobs, turn=f"t{n}")
        write(root, "a.txt", f"p{n}\n".encode(), cp)
        if n == 2:
            write(root, "only2.txt", b"2\n", cp)
        turns.append(cp.finish())
    newest_first = turns[::-1]
    report = restore(root, newest_first[:2], blobs)  # undo prompts 3 and 2
    assert report.applied and not report.conflicts
    assert (root / "a.txt").read_text() == "p1\n"
    assert not (root / "only2.txt").exists()


def test_a_rewind_records_its_own_checkpoint_so_it_can_be_undone(
    root: Path, blobs: BlobStore
) -> None:
    (root / "a.txt").write_text("before\n")
    cp = checkpointer(root, blobs)
    write(root, "a.txt", b"after\n", cp)
    write(root, "new.txt", b"new\n", cp)
    turn = cp.finish()
    undo = checkpointer(root, blobs, turn="rewind")
    assert restore(root, [turn], blobs, recorder=undo).applied
    rewind = undo.finish()
    assert (root / "a.txt").read_text() == "before\n" and not (root / "new.txt").exists()
    assert restore(root, [rewind], blobs).applied
    assert (root / "a.txt").read_text() == "after\n"
    assert (root / "new.txt").read_text() == "new\n"


def test_unfinished_turns_and_lost_blobs_block_the_restore(root: Path, blobs: BlobStore) -> None:
    (root / "a.txt").write_text("before\n")
    cp = checkpointer(root, blobs)
    write(root, "a.txt", b"after\n", cp)
    cp.close()
    partial = cp.partial()
    report = restore(root, [partial], blobs)
    assert not report.applied
    assert [c.reason for c in report.conflicts] == [
        "the turn did not finish: its result is unknown"
    ]

    finished = Checkpoint.from_json({**partial.to_json(), "finished": True})
    for name in list(blobs.names()):
        blobs.path_of(name).unlink()
    done = restore(root, [finished], blobs, force=True)
    assert [f.path for f in done.failed] == ["a.txt"] and "missing" in done.failed[0].reason
    assert (root / "a.txt").read_text() == "after\n"


def test_restore_never_writes_outside_the_workspace(
    tmp_path: Path, root: Path, blobs: BlobStore
) -> None:
    (root / "sub").mkdir()
    (root / "sub" / "a.txt").write_text("inside\n")
    cp = checkpointer(root, blobs)
    write(root, "sub/a.txt", b"changed\n", cp)
    checkpoint = cp.finish()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "a.txt").write_text("outside, untouched\n")
    (root / "sub" / "a.txt").unlink()
    (root / "sub").rmdir()
    (root / "sub").symlink_to(outside)  # the directory now leads out of the workspace

    report = restore(root, [checkpoint], blobs, force=True)
    assert [f.path for f in report.failed] == ["sub/a.txt"]
    assert (outside / "a.txt").read_text() == "outside, untouched\n"


# -- budget ------------------------------------------------------------------------------


def test_pruning_is_oldest_first_by_age_and_by_shared_size() -> None:
    day = 86400.0
    usages = [
        CheckpointUsage("c1", 0 * day, frozenset({"x", "shared"})),
        CheckpointUsage("c2", 10 * day, frozenset({"y", "shared"})),
        CheckpointUsage("c3", 20 * day, frozenset({"z"})),
    ]
    sizes = {"x": 100, "y": 100, "z": 100, "shared": 1000}
    by_age = plan_prune(usages, sizes, Budget(max_bytes=10**9, max_age_seconds=14 * day), 25 * day)
    assert by_age.drop == ["c1", "c2"]
    assert by_age.freed_bytes == 1200 and by_age.kept_bytes == 100
    assert "older than 14 days" in by_age.summary()

    by_size = plan_prune(usages, sizes, Budget(max_bytes=1250), 25 * day)
    assert by_size.drop == ["c1"]  # c1's own blob frees 100; the shared one stays for c2
    assert (by_size.freed_bytes, by_size.kept_bytes) == (100, 1200)

    tight = plan_prune(usages, sizes, Budget(max_bytes=50), 25 * day)
    assert tight.drop == ["c1", "c2"] and tight.over_budget  # the newest stays undoable
    assert "exceeds the size budget" in tight.summary()

    assert plan_prune(usages, sizes, Budget(), 25 * day).drop == []


# -- the file door -----------------------------------------------------------------------


def test_the_real_file_tools_are_checkpointed_through_the_file_door(
    root: Path, blobs: BlobStore
) -> None:
    """write_file and edit_file, unchanged, writing through `CheckpointingFs`: the turn's
    checkpoint holds every prior state, and a restore puts them back byte-exact."""
    import anyio

    from defect_core.checkpoints import CheckpointingFs
    from defect_core.tools.backends import LocalFsBackend, LocalShellBackend
    from defect_core.tools.base import ToolContext
    from defect_core.tools.files import EditFileTool, ReadFileTool, WriteFileTool

    (root / "a.py").write_bytes(b"x = 1\r\ny = 2\r\n")
    cp = checkpointer(root, blobs)
    fs = CheckpointingFs(LocalFsBackend(root), cp)
    ctx = ToolContext("s1", root, fs, LocalShellBackend())

    async def turn() -> None:
        await ReadFileTool().run({"path": "a.py"}, ctx)
        await EditFileTool().run(
            {"path": "a.py", "old_string": "x = 1", "new_string": "x = 9"}, ctx
        )
        await WriteFileTool().run({"path": "pkg/new.py", "content": "created\n"}, ctx)
        await WriteFileTool().run({"path": "a.py", "content": "rewritten\n"}, ctx)

    anyio.run(turn)
    checkpoint = cp.finish()
    entries = {e.path: e for e in checkpoint.entries}
    assert sorted(entries) == ["a.py", "pkg/new.py"]
    assert blobs.get(entries["a.py"].before.digest or "") == b"x = 1\r\ny = 2\r\n"
    assert entries["a.py"].after is not None
    assert entries["a.py"].after.digest == digest_of((root / "a.py").read_bytes())
    assert restore(root, [checkpoint], blobs).applied
    assert (root / "a.py").read_bytes() == b"x = 1\r\ny = 2\r\n"
    assert not (root / "pkg" / "new.py").exists()
