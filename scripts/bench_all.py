"""Run every benchmark in scripts/ and print one table: figure, value, target, status.

Owns `make bench`: it discovers every `scripts/bench_*.py` (except itself), runs each in its
own process with `--json <tmpfile>` (and `--quick` when asked and the benchmark takes it),
reads the `{"figures": [{"name", "value", "unit", "target", "ok"}]}` it writes (optionally
`"floor"`: what the figure is compared with, measured in the same run or quoted — a peer, the
machine's own limit), prints ONE table — the figures a reader needs to judge speed at a
glance — and writes every figure, per benchmark, to `bench-results.json` (`--json PATH` to
move it).

Invariants:
- One benchmark at a time: they measure wall time, and two at once would skew each other.
- A benchmark that crashes, times out or writes no figures is reported (status ERROR, with
  its last line of stderr) and the others still run.
- The exit status reports whether benchmarks could run, not whether targets were met: 0 even
  with MISS rows (a loaded CI machine must not fail a build on timing), 1 only when no
  benchmark produced a figure.

Status: OK when the benchmark says the figure met its target, MISS when it says it did not,
— when the figure has no target (a reference value).

Usage: python scripts/bench_all.py [--json PATH] [--quick] [--only NAME...] [--timeout S]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SCRIPTS = Path(__file__).resolve().parent
REPO = SCRIPTS.parent
DEFAULT_TIMEOUT = 600.0


@dataclass
class BenchRun:
    name: str
    script: Path
    seconds: float = 0.0
    figures: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "script": str(self.script.relative_to(REPO)),
            "status": "error" if self.error else "ok",
            "error": self.error,
            "seconds": round(self.seconds, 2),
            "figures": [{**f, "status": status_of(f)} for f in self.figures],
        }


def discover(only: list[str] | None = None) -> list[Path]:
    found = sorted(p for p in SCRIPTS.glob("bench_*.py") if p.name != Path(__file__).name)
    if only:
        wanted = {n.removeprefix("bench_").removesuffix(".py") for n in only}
        found = [p for p in found if bench_name(p) in wanted]
    return found


def bench_name(script: Path) -> str:
    return script.stem.removeprefix("bench_")


def run_one(script: Path, *, quick: bool, timeout: float) -> BenchRun:
    run = BenchRun(bench_name(script), script)
    with tempfile.TemporaryDirectory(prefix="defect-bench-") as tmp:
        out = Path(tmp) / "figures.json"
        command = [sys.executable, str(script), "--json", str(out)]
        if quick and "--quick" in script.read_text(encoding="utf-8"):
            command.append("--quick")
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
        started = time.monotonic()
        try:
            done = subprocess.run(
                command,
                cwd=REPO,
                env=env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired:
            run.seconds = time.monotonic() - started
            run.error = f"timed out after {timeout:g} s"
            return run
        except OSError as exc:
            run.error = f"cannot start: {exc}"
            return run
        run.seconds = time.monotonic() - started
        if done.returncode != 0:
            run.error = f"exit {done.returncode}: {last_line(done.stderr or done.stdout)}"
            return run
        said = last_line(done.stderr) if done.stderr.strip() else ""
        try:
            data = json.loads(out.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            run.error = f"no figures written ({type(exc).__name__}: {exc}) {said}".rstrip()
            return run
    figures = data.get("figures") if isinstance(data, dict) else None
    if not isinstance(figures, list) or not figures:
        run.error = f"no figures in its JSON; its last words: {said or '(none)'}"
        return run
    run.figures = [f for f in figures if isinstance(f, dict)]
    return run


def last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:160] if lines else "(no output)"


def status_of(figure: dict[str, Any]) -> str:
    """OK / MISS as the benchmark judged it; — when the figure has no target to meet."""
    if figure.get("target") in (None, "", "—", "-", "reference") or figure.get("ok") is None:
        return "—"
    return "OK" if figure["ok"] else "MISS"


def format_value(value: Any, unit: str) -> str:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        text = str(value)
    elif isinstance(value, int):
        text = f"{value:,}"
    elif abs(value) >= 100:
        text = f"{value:,.0f}"
    elif abs(value) >= 10:
        text = f"{value:.1f}"
    elif abs(value) >= 1:
        text = f"{value:.2f}"
    else:
        text = f"{value:.3g}"
    return f"{text} {unit}".strip() if unit else text


def format_target(target: Any, unit: str) -> str:
    if target is None or target == "":
        return "—"
    if isinstance(target, int | float) and not isinstance(target, bool):
        return f"≤ {format_value(target, unit)}"
    return str(target)


def format_floor(floor: Any, unit: str) -> str:
    if floor is None or floor == "":
        return "—"
    return format_value(floor, unit)


def table(runs: list[BenchRun]) -> str:
    rows: list[tuple[tuple[str, ...], bool]] = []
    for run in runs:
        if run.error:
            rows.append(((run.name, "—", run.error, "—", "—", "ERROR"), True))
            continue
        for figure in run.figures:
            unit = str(figure.get("unit") or "")
            figure_cells = (
                run.name,
                str(figure.get("name", "?")),
                format_value(figure.get("value"), unit),
                format_target(figure.get("target"), unit),
                format_floor(figure.get("floor"), unit),
                status_of(figure),
            )
            rows.append((figure_cells, False))
    headers = ("benchmark", "figure", "value", "target", "floor", "status")
    widths = [
        max(len(h), *(len(cells[i]) for cells, error in rows if not (error and i == 2)))
        for i, h in enumerate(headers)
    ]

    def line(cells: tuple[str, ...], *, numeric: bool = False) -> str:
        parts = [
            cell.rjust(widths[i]) if numeric and i in (2, 4) else cell.ljust(widths[i])
            for i, cell in enumerate(cells)
        ]
        return "  ".join(parts).rstrip()

    out = [line(headers), line(tuple("─" * w for w in widths))]
    for cells, error in rows:
        if error:
            # the error text may be long: status first, the reason last
            out.append(line((cells[0], cells[1], "—", "—", "—", "ERROR")) + f"  {cells[2]}")
        else:
            out.append(line(cells, numeric=True))
    return "\n".join(out)


def summary(runs: list[BenchRun]) -> dict[str, int]:
    statuses = [status_of(f) for r in runs for f in r.figures]
    return {
        "benchmarks": len(runs),
        "errors": sum(1 for r in runs if r.error),
        "figures": len(statuses),
        "ok": statuses.count("OK"),
        "miss": statuses.count("MISS"),
        "untargeted": statuses.count("—"),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--json", type=Path, default=REPO / "bench-results.json", help="combined results file"
    )
    parser.add_argument("--quick", action="store_true", help="pass --quick where supported")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="run only these benchmarks")
    parser.add_argument(
        "--timeout", type=float, default=DEFAULT_TIMEOUT, help="seconds per benchmark"
    )
    args = parser.parse_args(argv)

    scripts = discover(args.only)
    if not scripts:
        print("no benchmarks found (scripts/bench_*.py)", file=sys.stderr)
        return 1
    runs: list[BenchRun] = []
    for script in scripts:
        print(f"running {script.name} …", file=sys.stderr, flush=True)
        run = run_one(script, quick=args.quick, timeout=args.timeout)
        note = f"ERROR: {run.error}" if run.error else f"{len(run.figures)} figures"
        print(f"  {run.seconds:.1f} s, {note}", file=sys.stderr, flush=True)
        runs.append(run)

    print(table(runs))
    totals = summary(runs)
    print(
        f"\n{totals['ok']} OK, {totals['miss']} MISS, {totals['untargeted']} without target, "
        f"{totals['errors']} benchmark errors — figures in {args.json}"
    )
    args.json.write_text(
        json.dumps(
            {
                "generated": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "python": sys.version.split()[0],
                "summary": totals,
                "benchmarks": [r.as_json() for r in runs],
            },
            indent=2,
            ensure_ascii=False,
        )
        + "\n",
        encoding="utf-8",
    )
    return 0 if totals["figures"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
