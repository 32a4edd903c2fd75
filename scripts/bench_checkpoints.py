"""Benchmark of checkpoints: what recording one turn's prior file states costs that turn.

Owns the number behind the checkpoint promise: on a turn whose tools rewrite 100 files of
100 kB of source text, the checkpoint adds under 10 % to the turn's tool time, where the tool
time is the 100 `write_file` calls through the real write path (`WriteFileTool.run`: argument
checks, workspace boundary, read ledger, atomic write with fsync) on the local backend, and
the checkpointed turn writes through the door a checkpointed turn uses (`CheckpointingFs`:
the prior content secured before each write — the old inode held open, as the write
replaces it with a new one). Storing the captured contents — reading, hashing, compressing,
writing and fsyncing the blobs (`Checkpointer.flush`, then `finish`) —
happens after the tool calls, as in a session (`defect_core/session/checkpointing.py`), where
it overlaps the next model request: it is reported on its own line, and so is the whole
turn's overhead with it counted in. It also reports the storage one such turn uses (blobs on
disk) against the bytes captured.

Each round starts from fresh contents (not timed) and a fresh blob store, so nothing is
deduplicated against an earlier round. Rounds run in pairs, with and without checkpoints back
to back (the order alternating), and the overhead is the median of the pairs' relative
differences: other load on a shared machine hits both sides of a pair alike. The time spent
inside the checkpoint calls on the turn's path is reported too (the worker thread's hashing,
compression and blob writes overlap the tool's fsync-bound writes and are not in it).

The overhead can come out below zero: a held old file is freed when the flush closes it,
not by the rename on the tool's path as without a checkpoint (that work moves into the
blob-storing figure, with the read of the old content).

It also times a shell command's checkpoint in a git work tree of 100 committed files, one
modified (`Checkpointer.before_command`, the command, `after_command`: five git calls through
`defect_core/safe_git.py`, which lists git's configuration keys only when a configuration file
changed), reported as the median per command.

It reports and never asserts: the exit status is 0 whatever the figures. `--json PATH` also
writes `{"figures": [{"name", "value", "unit", "target", "ok"}]}` for tooling
(scripts/bench_all.py).

Usage: python scripts/bench_checkpoints.py [--json PATH] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from defect_core.checkpoints import BlobStore, Checkpointer, CheckpointingFs
from defect_core.tools.backends import FsBackend, LocalFsBackend, LocalShellBackend
from defect_core.tools.base import ToolContext
from defect_core.tools.files import WriteFileTool

FILES = 100
FILE_BYTES = 100 * 1024
TARGET_PERCENT = 10.0
WORDS = ("alpha", "beta", "gamma", "delta", "return", "value", "self", "import", "result", "item")


@dataclass(frozen=True)
class Figure:
    name: str
    value: float
    unit: str
    target: float | None
    ok: bool


def source_text(rng: random.Random) -> str:
    lines: list[str] = []
    size = 0
    while size < FILE_BYTES:
        indent = "    " * rng.randrange(3)
        line = indent + " ".join(rng.choice(WORDS) for _ in range(rng.randrange(3, 10))) + "\n"
        lines.append(line)
        size += len(line)
    return "".join(lines)[:FILE_BYTES]


class TimedFs(CheckpointingFs):
    """The checkpointing file door, timing the capture calls it makes on the turn's path."""

    def __init__(self, inner: FsBackend, checkpointer: Checkpointer) -> None:
        super().__init__(inner, checkpointer)
        self.in_path = 0.0
        before, after = checkpointer.before_write, checkpointer.after_write

        def timed_before(path: str | Path, *, replacing: bool = False) -> str | None:
            t = time.perf_counter()
            rel = before(path, replacing=replacing)
            self.in_path += time.perf_counter() - t
            return rel

        def timed_after(path: str | Path, data: str | bytes, *, rel: str | None = None) -> None:
            t = time.perf_counter()
            after(path, data, rel=rel)
            self.in_path += time.perf_counter() - t

        checkpointer.before_write = timed_before  # type: ignore[method-assign]
        checkpointer.after_write = timed_after  # type: ignore[method-assign]


@dataclass
class Turn:
    seconds: float
    in_path: float = 0.0
    """Seconds spent inside the checkpoint calls on the turn's path."""
    flush: float = 0.0
    """Seconds storing the blobs after the tool calls (`finish`)."""
    captured: int = 0
    stored: int = 0


async def one_turn(root: Path, state: Path, seed: int, *, checkpoint: bool) -> Turn:
    """One turn rewriting every file, with or without its checkpoint."""
    rng = random.Random(seed)
    for i in range(FILES):  # fresh prior contents, not timed
        (root / f"src/mod{i:03}.py").write_text(source_text(rng))
    new = [source_text(rng) for _ in range(FILES)]
    blobs = BlobStore.in_state_dir(state / f"round{seed}")
    cp = Checkpointer(root, blobs, turn_id=f"t{seed}") if checkpoint else None
    fs: FsBackend = LocalFsBackend(root)
    if cp is not None:
        fs = TimedFs(fs, cp)
    ctx = ToolContext("bench", root, fs, LocalShellBackend())
    tool = WriteFileTool()
    start = time.perf_counter()
    for i, content in enumerate(new):
        await tool.run({"path": f"src/mod{i:03}.py", "content": content}, ctx)
    seconds = time.perf_counter() - start
    if cp is None:
        return Turn(seconds)
    assert isinstance(fs, TimedFs)
    t = time.perf_counter()
    result = await anyio.to_thread.run_sync(cp.finish)
    flush = time.perf_counter() - t
    captured = sum(e.before.size or 0 for e in result.entries)
    return Turn(seconds, fs.in_path, flush, captured, blobs.total_bytes())


async def measure(root: Path, state: Path, rounds: int) -> list[Figure]:
    """Rounds in pairs (with and without checkpoints, back to back, the order alternating),
    so a load change on a shared machine hits both sides of a pair alike."""
    (root / "src").mkdir()
    await one_turn(root, state, 0, checkpoint=True)  # warm-up: imports, page cache
    plain: list[Turn] = []
    checked: list[Turn] = []
    for n in range(1, rounds + 1):
        for with_cp in (n % 2 == 0, n % 2 == 1):
            turn = await one_turn(root, state, 2 * n + with_cp, checkpoint=with_cp)
            (checked if with_cp else plain).append(turn)
    base = statistics.median(t.seconds for t in plain)
    overhead = round(
        100
        * statistics.median(
            (c.seconds - p.seconds) / p.seconds for p, c in zip(plain, checked, strict=True)
        ),
        1,
    )
    in_path = statistics.median(t.in_path for t in checked)
    flush = statistics.median(t.flush for t in checked)
    whole = round(
        100
        * statistics.median(
            (c.seconds + c.flush - p.seconds) / p.seconds
            for p, c in zip(plain, checked, strict=True)
        ),
        1,
    )
    last = checked[-1]
    return [
        Figure(f"write_file x{FILES} x100 kB, tool time", round(base * 1000, 1), "ms", None, True),
        Figure("checkpoint calls on that turn's path", round(in_path * 1000, 1), "ms", None, True),
        Figure(
            "checkpoint overhead on that turn",
            overhead,
            "%",
            TARGET_PERCENT,
            overhead <= TARGET_PERCENT,
        ),
        Figure("blob storing after the tools (finish)", round(flush * 1000, 1), "ms", None, True),
        Figure("overhead counting that in too", whole, "%", None, True),
        Figure("checkpoint storage for that turn", round(last.stored / 1024, 1), "kB", None, True),
        Figure(
            "storage / bytes captured",
            round(100 * last.stored / max(last.captured, 1), 1),
            "%",
            None,
            True,
        ),
    ]


GIT_FILES = 100
GIT_COMMANDS = 20


def _git_setup(repo: Path, *args: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True)


def measure_shell(repo: Path, state: Path) -> Figure:
    """One shell command's checkpoint in a git work tree (the command itself not timed)."""
    repo.mkdir()
    rng = random.Random(7)
    for i in range(GIT_FILES):
        (repo / f"mod{i:03}.py").write_text(source_text(rng)[:4096])
    _git_setup(repo, "init", "-q")
    _git_setup(repo, "add", "-A")
    _git_setup(repo, "-c", "user.name=b", "-c", "user.email=b@b.invalid", "commit", "-qm", "b")
    (repo / "mod000.py").write_text("modified\n")
    time.sleep(2.1)  # older than any racy window: the state a session meets
    times: list[float] = []
    for n in range(GIT_COMMANDS + 1):
        cp = Checkpointer(repo, BlobStore.in_state_dir(state / f"shell{n}"), turn_id=f"s{n}")
        t = time.perf_counter()
        watch = cp.before_command()
        spent = time.perf_counter() - t
        (repo / "mod001.py").write_text(f"round {n}\n")
        t = time.perf_counter()
        cp.after_command(watch)
        spent += time.perf_counter() - t
        cp.finish()
        if n:  # the first one warms up
            times.append(spent)
    return Figure(
        "shell command checkpoint, git work tree",
        round(statistics.median(times) * 1000, 1),
        "ms",
        None,
        True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument("--quick", action="store_true", help="fewer rounds")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="defect-bench-checkpoints-") as tmp:
        root, state = Path(tmp) / "work", Path(tmp) / "state"
        root.mkdir()
        figures = anyio.run(measure, root, state, 4 if args.quick else 10)
        if shutil.which("git") is not None:
            figures.append(measure_shell(Path(tmp) / "git", state))

    print(f"checkpoints benchmark ({FILES} files of {FILE_BYTES // 1024} kB; medians)")
    print(f"{'figure':<40} {'value':>10} {'target':>10}  ok")
    for f in figures:
        target = f"{f.target:g} {f.unit}" if f.target is not None else "-"
        print(f"{f.name:<40} {f.value:>7.1f} {f.unit:<3} {target:>10}  {'yes' if f.ok else 'NO'}")
    if args.json:
        args.json.write_text(json.dumps({"figures": [asdict(f) for f in figures]}, indent=2))


if __name__ == "__main__":
    main()
