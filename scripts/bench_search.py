"""Big repositories: the `search` tool on a 200k-file tree, side by side with ripgrep itself.

Generates a tree (nested packages of ~1.5 KB source files, a `.gitignore` and an ignored
`node_modules`, hidden directories, binaries, files that are not UTF-8, a few files over the
tool's 2 MB limit), then times, alternately so that the machine's load hits both alike:

- the tool (`SearchTool.run`, its real code path, max_results 2000) for a literal and for
  a regex found in few files, and for a literal found in every source file (where the cap
  decides what is read and held), and `rg` (the ripgrep wheel's binary) on the same tree
  with the same scope (`--hidden --no-require-git --max-filesize 2M`, line numbers): the
  ratio tool ÷ rg, target ≤ 1.5×;
- the time until the first results are visible (the first progress report the tool streams,
  or its answer if it sends none), target ≤ 200 ms — or, when rg itself needs longer to
  print its first match in a file the tool searches (the matches lie late in the order its
  threads happen to take the directories), 1.5× rg's time: no search can show a hit before
  it is found. The floor printed is that time of rg's;
- the CPU time of each (the tool's process and the rg it runs, from its start to its answer;
  rg's own), beside the ratio: on a machine shared with other work, wall times move with the
  load, CPU times much less;
- the peak RSS of the process running the searches, of the rg it runs, and of one reading a
  200 MB file with `read_file` (a window at its start, and one at its end): target ≤ 200 MB
  each.

Each measurement runs in a child process (so its peak RSS is its own), after one warm-up run
(the page cache warm, as for a project being worked on), 9 runs of each. Figures are
medians, but for the first results, which are means. When the first match comes depends
on which directories rg's threads happen to take first: over 40 runs on the 200k-file tree,
rg's own first match came anywhere from 55 to 410 ms, spread evenly from 150 to 400 (the
tool's: 65 to 410, means 256 and 249 ms). A median of a few such times jumps around: with 5
runs, rg's was 156 ms in one run of the benchmark and 274 in another, and it alone decided
whether the tool passed. The mean of 9 moves about half as much: resampling those 40 runs,
the verdict drawn from means of 9 misses 0.6 % of the time with the tool as fast as rg,
from medians of 5 6.6 %, from medians of 3 11 %. Without `rg` (the `ripgrep` wheel missing
and none on the PATH) the comparison is skipped with a note.
It reports and never asserts (exit status 0).

Usage: python scripts/bench_search.py [--files N | --quick] [--runs N] [--json PATH]
       [--tree DIR]  (build the tree in DIR, or reuse the one there)
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RATIO_TARGET = 1.5
FIRST_TARGET_MS = 200.0
RSS_TARGET_MB = 200.0
BIG_READ_BYTES = 200 * 1024 * 1024
WORDS = ("alpha", "beta", "gamma", "delta", "return", "value", "self", "import", "result", "item")
SKIPPED_BY_TOOL = re.compile(rb"^\./\S*/(latin|blob)\d+\.")
"""rg's lines about the files the tool skips (`build_tree`'s latin-1 files and binaries)."""
CASES = (  # name, pattern (the tool's RE2 and rg's Rust syntax agree on these)
    ("literal", "handler_77"),
    ("regex", r"def handler_\d*777\("),
    ("common", "return x"),  # in every source file: the cap, and what the search holds
)


def build_tree(root: Path, files: int) -> None:
    rng = random.Random(11)
    (root / ".gitignore").write_text("node_modules/\n*.log\n/build/\n")
    per_dir = 40
    body = [
        "\n".join(
            f"    {rng.choice(WORDS)} = {rng.choice(WORDS)}_{k} + {rng.randint(0, 9999)}"
            for k in range(30)
        )
        for _ in range(64)
    ]
    for i in range(files):
        d = root / f"pkg{i // 8000}" / f"mod{(i // 400) % 20}" / f"sub{(i // per_dir) % 10}"
        if i % per_dir == 0:
            d.mkdir(parents=True, exist_ok=True)
        kind = i % 200
        if kind == 1:  # binary
            (d / f"blob{i}.bin").write_bytes(b"\x89PNG\r\n\x00\x00" + os.urandom(1500))
        elif kind == 2:  # not UTF-8
            (d / f"latin{i}.txt").write_bytes("café handler_77 ".encode("latin-1") * 40)
        elif kind == 3:  # UTF-8, not ASCII
            (d / f"notes{i}.md").write_text(f"# Résumé — {i}\nhandler_{i} naïve\n" * 20)
        else:
            (d / f"file{i}.py").write_text(
                f"def handler_{i}(x):\n{body[i % 64]}\n    return x\n# {rng.choice(WORDS)}\n"
            )
    hidden = root / ".config" / "tool"
    hidden.mkdir(parents=True)
    (hidden / "settings.py").write_text("def handler_77(x):\n    return x\n")
    ignored = root / "node_modules" / "lib"
    ignored.mkdir(parents=True)
    for j in range(max(files // 20, 10)):
        (ignored / f"dep{j}.js").write_text(f"function handler_{j}() {{ return {j}; }}\n" * 20)
    (root / "build").mkdir()
    (root / "build" / "out.py").write_text("def handler_77(x): pass\n")
    line = "".join(f"value_{k} = handler_{k} + 1\n" for k in range(100))
    for k in range(3):  # over the tool's 2 MB limit
        (root / f"pkg0/large{k}.py").write_text(line * (1_300 + k))


CHILD = r"""
import json, resource, sys, time, anyio
from pathlib import Path
from defect_core.tools.backends import LocalFsBackend, LocalShellBackend
from defect_core.tools.base import ToolContext
from defect_core.tools.files import ReadFileTool
from defect_core.tools.search import SearchTool

def cpu():
    own, rgs = (resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    return own.ru_utime + own.ru_stime + rgs.ru_utime + rgs.ru_stime

def vmhwm():
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")

async def main(root, job, arg):
    first = []
    async def report(display):
        if not first:
            first.append(time.perf_counter())
    ctx = ToolContext("bench", Path(root), LocalFsBackend(), LocalShellBackend(), report=report)
    tool = ReadFileTool() if job == "read" else SearchTool()
    if job == "read":
        path, offset = arg.rsplit(":", 1)
        args = {"path": path, "offset": int(offset)}
    else:
        args = {"pattern": arg, "max_results": 2000}
    start, cpu_start = time.perf_counter(), cpu()
    out = await tool.run(args, ctx)
    end, cpu_end = time.perf_counter(), cpu()
    shown = (first[0] if first else end) - start
    rg_rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(json.dumps({"seconds": end - start, "cpu": cpu_end - cpu_start, "first": shown,
                      "rss": vmhwm(), "rg_rss": rg_rss,
                      "head": out.content.splitlines()[0] if out.content else ""}))

anyio.run(main, *sys.argv[1:4])
"""


def run_tool(root: Path, job: str, arg: str) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(root), job, arg],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    return dict(json.loads(done.stdout.splitlines()[-1]))


def children_cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def run_rg(rg: str, root: Path, pattern: str) -> tuple[float, float, float]:
    """rg's time to finish, to its first line the tool would also show (a match in a file
    the tool searches: not one it skips as binary or not UTF-8), and its CPU time."""
    cpu_start = children_cpu()
    command = [rg, "--no-config", "--hidden", "--no-require-git", "--max-filesize", "2M"]
    start = time.perf_counter()
    proc = subprocess.Popen(
        [*command, "-n", "-e", pattern, "."], cwd=root, stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    assert proc.stdout is not None
    first = float("nan")
    for line in proc.stdout:
        if first != first and not SKIPPED_BY_TOOL.search(line):
            first = time.perf_counter() - start
    proc.wait()
    return time.perf_counter() - start, first, children_cpu() - cpu_start


def find_rg() -> str | None:
    beside = Path(sys.executable).with_name("rg")
    return str(beside) if beside.exists() else shutil.which("rg")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--quick", action="store_true", help="20,000 files")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--tree", type=Path, help="build the tree there, or reuse it")
    args = parser.parse_args()
    files = 20_000 if args.quick else args.files
    rg = find_rg()
    figures: list[dict[str, Any]] = []

    def figure(
        name: str, value: float, unit: str, target: str, ok: bool | None, **more: Any
    ) -> None:
        figures.append({"name": name, "value": round(value, 2 if unit == "×" else 1),
                        "unit": unit, "target": target, "ok": ok, **more})  # fmt: skip

    with tempfile.TemporaryDirectory(prefix="defect-bench-search-") as tmp:
        root = args.tree or Path(tmp) / "tree"
        if not (root / ".gitignore").exists():
            root.mkdir(parents=True, exist_ok=True)
            started = time.perf_counter()
            build_tree(root, files)
            print(f"tree of {files:,} files built in {time.perf_counter() - started:.1f} s")
        peak_rss = rg_rss = 0.0
        for name, pattern in CASES:
            tool_s: list[float] = []
            first_s: list[float] = []
            rg_s: list[float] = []
            rg_first_s: list[float] = []
            cpu_s: list[float] = []
            rg_cpu_s: list[float] = []
            for n in range(args.runs + 1):
                result = run_tool(root, "search", pattern)
                seconds, rg_first, rg_cpu = (
                    run_rg(rg, root, pattern) if rg else (math.nan, math.nan, math.nan)
                )
                peak_rss = max(peak_rss, result["rss"])
                rg_rss = max(rg_rss, result["rg_rss"])
                if n:  # the first run warms the page cache
                    tool_s.append(result["seconds"])
                    first_s.append(result["first"])
                    rg_s.append(seconds)
                    rg_first_s.append(rg_first)
                    cpu_s.append(result["cpu"])
                    rg_cpu_s.append(rg_cpu)
            tool, first = statistics.median(tool_s), statistics.fmean(first_s)
            print(f"  {name}: {result['head']}")
            floor = statistics.median(rg_s) if rg else math.nan
            more = {"floor": round(floor * 1000, 1)} if rg else {}
            figure(f"search {name}, {files // 1000}k files", tool * 1000, "ms", "—", None, **more)
            if rg:
                figure(f"search {name} ÷ rg", tool / floor, "×", "≤ 1.5×",
                       tool / floor <= RATIO_TARGET)  # fmt: skip
            cpu_used = statistics.median(cpu_s)
            rg_cpu = statistics.median(rg_cpu_s) if rg else math.nan
            more = {"floor": round(rg_cpu * 1000, 1)} if rg else {}
            figure(f"search {name}: CPU time", cpu_used * 1000, "ms", "—", None, **more)
            if rg:
                figure(f"search {name} ÷ rg, CPU time", cpu_used / rg_cpu, "×", "—", None)
            # The first result cannot come before rg finds it: when the matches lie late in
            # rg's walk (its threads take directories in no set order), the target is the
            # one the totals have, 1.5× rg's own time.
            rg_first = statistics.fmean(rg_first_s) if rg else math.nan
            target_ms = max(FIRST_TARGET_MS, RATIO_TARGET * rg_first * 1000) if rg else 200.0
            more = {"floor": round(rg_first * 1000, 1)} if rg else {}
            figure(f"search {name}: first results (mean)", first * 1000, "ms",
                   "≤ 200 ms or 1.5× rg", first * 1000 <= target_ms, **more)  # fmt: skip
        figure("search peak RSS", peak_rss, "MB", "≤ 200 MB", peak_rss <= RSS_TARGET_MB)
        figure("search peak RSS of its rg", rg_rss, "MB", "≤ 200 MB", rg_rss <= RSS_TARGET_MB)
        if args.tree is None:
            shutil.rmtree(root)
        big = Path(tmp) / "big.txt"
        lines = 0
        with big.open("w") as out:
            row = "".join(f"line {k:07d} {' '.join(WORDS)}\n" for k in range(1000))
            while out.tell() < BIG_READ_BYTES:
                out.write(row)
                lines += 1000
        for where, offset in (("start", 1), ("end", lines - 100)):
            read = run_tool(Path(tmp), "read", f"{big}:{offset}")
            figure(f"read_file of a 200 MB file ({where}): peak RSS", read["rss"], "MB",
                   "≤ 200 MB", read["rss"] <= RSS_TARGET_MB)  # fmt: skip
            print(f"  read ({where}): {read['head']}")
    if not rg:
        print("note: no `rg` (`make install` installs it) — the comparison was skipped")
    print(f"search on a {files:,}-file tree, {args.runs} runs (first results: their mean)")
    for f in figures:
        status = "" if f["ok"] is None else ("OK" if f["ok"] else "MISS")
        rg_ms = f" (rg {f['floor']} ms)" if "floor" in f else ""
        print(f"  {f['name']:<44} {f['value']:>9} {f['unit']:<3} {f['target']:<19} {status}{rg_ms}")
    if args.json:
        args.json.write_text(json.dumps({"figures": figures}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
