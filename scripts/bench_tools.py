"""Benchmark of the tools the model calls most: search, a read_file window, edit_file.

Owns the numbers behind the tools' promises on a 2-core machine: `search` over a 20k-file
tree <= 1.5 s, `read_file` of a window of a 50 MB file <= 50 ms, `edit_file` of a 10k-line
file <= 50 ms. Each runs the real tool (`run`, argument checks, workspace boundary, read
ledger, atomic write) with the local backends against files in a temporary directory.

It reports and never asserts: the exit status is 0 whatever the figures (a loaded CI machine
must not fail a build on timing). `--json PATH` also writes
`{"figures": [{"name", "value", "unit", "target", "ok"}]}` for tooling. Timings are medians
(search of 5 runs, reads and edits of 20), measured with `time.perf_counter` after one
warm-up run, so the page cache is warm as it is for a project being worked on.

Usage: python scripts/bench_tools.py [--json PATH] [--quick]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from defect_core.tools.backends import LocalFsBackend, LocalShellBackend
from defect_core.tools.base import ToolContext
from defect_core.tools.files import EditFileTool, ReadFileTool
from defect_core.tools.search import SearchTool

TREE_FILES = 20_000
IGNORED_FILES = 2_000
BIG_FILE_BYTES = 50 * 1024 * 1024
EDIT_LINES = 10_000

WORDS = ("alpha", "beta", "gamma", "delta", "return", "value", "self", "import", "result", "item")


@dataclass(frozen=True)
class Figure:
    name: str
    value: float
    unit: str
    target: float | None
    ok: bool


def build_tree(root: Path) -> None:
    """20k source files (~2 KB each) in nested packages, plus a .gitignored node_modules."""
    rng = random.Random(7)
    (root / ".gitignore").write_text("node_modules/\n*.pyc\n/dist\n")
    for i in range(TREE_FILES):
        directory = root / "src" / f"pkg{i % 50:02}" / f"mod{i // 50 % 20:02}"
        directory.mkdir(parents=True, exist_ok=True)
        lines = [" ".join(rng.choice(WORDS) for _ in range(6)) for _ in range(40)]
        if i % 1000 == 0:
            lines.append(f"def handler_{i}(request):")
        (directory / f"file{i:05}.py").write_text("\n".join(lines) + "\n")
    for i in range(IGNORED_FILES):
        directory = root / "node_modules" / f"lib{i % 100:03}"
        directory.mkdir(parents=True, exist_ok=True)
        (directory / f"index{i}.js").write_text(f"function handler_{i}(request) {{}}\n")


def build_big_file(path: Path) -> int:
    """A ~50 MB log of numbered lines; returns its number of lines."""
    line = "2025-01-01T00:00:00Z INFO request served in 12 ms, status 200 OK ....\n"
    count = BIG_FILE_BYTES // len(line)
    with open(path, "w") as f:
        chunk = line * 10_000
        for _ in range(count // 10_000):
            f.write(chunk)
    return count // 10_000 * 10_000


def build_edit_file(path: Path) -> None:
    body = [f"    value_{i} = compute({i}, factor=2)  # line {i}" for i in range(EDIT_LINES)]
    path.write_text("def setup():\n" + "\n".join(body) + "\n")


async def median_seconds(action: Callable[[int], Awaitable[Any]], runs: int) -> float:
    await action(-1)  # warm up
    samples = []
    for n in range(runs):
        start = time.perf_counter()
        await action(n)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


async def measure(root: Path, quick: bool) -> list[Figure]:
    ctx = ToolContext("bench", root, LocalFsBackend(), LocalShellBackend())
    search, read, edit = SearchTool(), ReadFileTool(), EditFileTool()
    figures: list[Figure] = []

    def figure(name: str, seconds: float, target_ms: float | None) -> None:
        ms = round(seconds * 1000, 2)
        ok = target_ms is None or ms <= target_ms
        figures.append(Figure(name, ms, "ms", target_ms, ok))

    async def grep(_: int) -> None:
        out = await search.run({"pattern": r"def handler_\d+\("}, ctx)
        assert isinstance(out.content, str) and out.content.startswith("20 matching lines")

    async def find(_: int) -> None:
        await search.run({"glob": "**/mod07/*.py"}, ctx)

    search_runs = 3 if quick else 5
    figure(f"search regex, {TREE_FILES} files", await median_seconds(grep, search_runs), 1500)
    figure(f"search glob, {TREE_FILES} files", await median_seconds(find, search_runs), None)

    lines = build_big_file(root / "big.log")
    runs = 5 if quick else 20

    async def read_start(_: int) -> None:
        await read.run({"path": "big.log"}, ctx)

    async def read_middle(n: int) -> None:
        await read.run({"path": "big.log", "offset": lines // 2 + n, "limit": 2000}, ctx)

    async def read_end(_: int) -> None:
        await read.run({"path": "big.log", "offset": lines - 1999, "limit": 2000}, ctx)

    figure("read_file 2000 lines at the start of 50 MB", await median_seconds(read_start, runs), 50)
    figure("read_file 2000 lines mid 50 MB", await median_seconds(read_middle, runs), 50)
    figure("read_file 2000 lines at the end of 50 MB", await median_seconds(read_end, runs), 50)

    build_edit_file(root / "edit.py")

    async def edit_exact(n: int) -> None:
        i = 5000 + n
        old = f"value_{i} = compute({i}, factor=2)"
        await edit.run({"path": "edit.py", "old_string": old, "new_string": old + " + 1"}, ctx)

    async def edit_tolerant(n: int) -> None:
        i = 7000 + 2 * n  # two lines, their indentation lost: found by the tolerant fallback
        old = "\n".join(f"value_{j} = compute({j}, factor=2)  # line {j}" for j in (i, i + 1))
        new = old.replace("factor=2", "factor=3")
        await edit.run({"path": "edit.py", "old_string": old, "new_string": new}, ctx)

    figure(f"edit_file exact, {EDIT_LINES} lines", await median_seconds(edit_exact, runs), 50)
    figure(f"edit_file tolerant, {EDIT_LINES} lines", await median_seconds(edit_tolerant, runs), 50)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="defect-bench-tools-") as tmp:
        root = Path(tmp)
        started = time.perf_counter()
        build_tree(root)
        built = time.perf_counter() - started
        figures = anyio.run(measure, root, args.quick)

    print(f"tools benchmark (tree built in {built:.1f} s; medians)")
    print(f"{'figure':<46} {'value':>10} {'target':>10}  ok")
    for f in figures:
        target = f"{f.target:g} {f.unit}" if f.target is not None else "-"
        print(f"{f.name:<46} {f.value:>7.2f} {f.unit} {target:>10}  {'yes' if f.ok else 'NO'}")
    if args.json:
        args.json.write_text(json.dumps({"figures": [asdict(f) for f in figures]}, indent=2))


if __name__ == "__main__":
    main()
