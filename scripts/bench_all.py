"""Run every benchmark in scripts/ and print a headline table, then what missed.

Owns `make bench`: it discovers every `scripts/bench_*.py` (except itself), runs each in its
own process with `--json <tmpfile>` (and `--quick` when asked and the benchmark takes it),
reads the `{"figures": [{"name", "value", "unit", "target", "ok"}]}` it writes (optionally
`"floor"`: what the figure is compared with, measured in the same run), and prints:

- the headline (`HEADLINE`, at most 15 rows): start-up, first token (and its private ÷
  public path ratio), turn overhead, delta latency, cache share and cost, search ÷ rg, load
  + replay, peak memory. Each figure stands
  beside a floor measured in the same run and is judged by its ratio to that floor, so the
  verdict holds on a slow machine as on a fast one. Where a figure has no floor of its own
  (a latency, a load), the floor is the machine's yardstick: `python -c "import acp"`, spawn
  → exit, measured by this script before and after the benchmarks; its target was set as an
  absolute figure on a machine where that took `REFERENCE_ACP_MS`, and the row says so;
- the detail rows that missed their target or could not run (every figure with `--detail`);
- a one-line summary. Every figure, per benchmark, and the headline go to
  `bench-results.json` (`--json PATH` to move it).

Invariants:
- One benchmark at a time: they measure wall time, and two at once would skew each other.
- A benchmark that crashes, times out or writes no figures is reported (status ERROR, with
  its last line of stderr) and the others still run; a headline figure it did not produce is
  shown as not measured, never as met.
- The exit status reports whether benchmarks could run, not whether targets were met: 0 even
  with MISS rows (a loaded CI machine must not fail a build on timing), 1 only when no
  benchmark produced a figure.

Status: OK when the figure met its target, MISS when it did not, — when the figure has no
target (a reference value).

Usage: python scripts/bench_all.py [--json PATH] [--quick] [--only NAME...] [--timeout S]
                                   [--detail]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

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
    if isinstance(floor, str):
        return floor  # a floor described in words carries its own unit
    return format_value(floor, unit)


def table(runs: list[BenchRun], *, every: bool = True, judged: frozenset[str] = frozenset()) -> str:
    """The detail table: every figure, or (`every` False) only those that missed their
    target, outside `judged` (the headline's figures, "bench: name", judged there by their
    ratio to a floor), and the benchmarks that could not run."""
    rows: list[tuple[tuple[str, ...], bool]] = []
    for run in runs:
        if run.error:
            rows.append(((run.name, "—", run.error, "—", "—", "ERROR"), True))
            continue
        for figure in run.figures:
            shown = (
                status_of(figure) == "MISS" and f"{run.name}: {figure.get('name')}" not in judged
            )
            if not every and not shown:
                continue
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
        max([len(h), *(len(cells[i]) for cells, error in rows if not (error and i == 2))])
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


REFERENCE_ACP_MS = 760.0
"""`python -c "import acp"`, spawn → exit, on the 2-core machine where the absolute targets
of the latencies and loads below were set: each is judged here as its ratio to that."""
YARDSTICK = "yardstick"
_TO_MS = {"ms": 1.0, "s": 1000.0, "µs": 0.001}


@dataclass(frozen=True)
class Headline:
    """One headline row: the figure (`bench`, its name matched by `figure`, a regex at the
    start of the name), its floor and the target for value ÷ floor (≤ `ratio`, or ≥ when
    `at_least`). `floor` is "own" (the figure's `floor`), `YARDSTICK` (the machine's, in
    ms: then `set_as` is the absolute target the ratio comes from) or "bench:regex" (another
    figure's value). Several matches: `pick` the first, the last or the worst."""

    label: str
    bench: str
    figure: str
    ratio: float
    floor: str = "own"
    floor_label: str = ""
    at_least: bool = False
    set_as: str = ""
    pick: Literal["first", "last", "worst"] = "first"


def _set_on(target_ms: float) -> float:
    return target_ms / REFERENCE_ACP_MS


HEADLINE: tuple[Headline, ...] = (
    Headline("start-up: spawn → session/new", "startup", r"spawn → session/new answered",
             1.3, floor_label="import acp"),
    Headline("first token: spawn → first token", "first_token", r"spawn → first streamed token",
             1.2, floor_label="import acp, then the SDK's request path"),
    Headline("first token: private ÷ public path", "first_token",
             r"spawn → first streamed token", 1.0,
             r"first_token:spawn → first token, SDK imported whole",
             "DEFECT_PRIVATE_PATHS=off, the same run"),
    Headline("turn overhead per round trip", "turn", r"agent overhead per round trip",
             _set_on(15), YARDSTICK, set_as="15 ms"),
    Headline("delta → update, paced, median", "turn",
             r"delta → session/update latency, median \(", _set_on(2), YARDSTICK,
             set_as="2 ms"),
    Headline("delta → update, fast stream, median", "turn",
             r"delta → session/update, .*, 1 session, median", _set_on(3), YARDSTICK,
             set_as="3 ms"),
    Headline("delta → update, sessions at once, median", "turn",
             r"delta → session/update, .*sessions at once, median", _set_on(3), YARDSTICK,
             set_as="3 ms"),
    Headline("cache share of input tokens", "cache", r"cache share of input tokens", 0.9,
             floor_label="the best share of the same requests", at_least=True),
    Headline("input cost ÷ uncached", "cache", r"input cost ÷ uncached", 1.03,
             floor_label="the least cost of the same requests"),
    Headline("search (worst pattern) ÷ rg", "search", r"search .*, \d+k files$", 1.5,
             floor_label="rg, the same search", pick="worst"),
    Headline("session/load + replay", "load", r"session/load \+ replay, ", _set_on(400),
             YARDSTICK, set_as="400 ms"),
    Headline("session/load + replay, long session", "load", r"session/load \+ replay, ",
             _set_on(4000), YARDSTICK, set_as="4000 ms", pick="last"),
    Headline("load → first update, long session", "load", r"load sent → first update",
             _set_on(100), YARDSTICK, set_as="100 ms"),
    Headline("peak RSS after session/new", "startup", r"peak RSS after session/new", 2.7,
             r"startup:floor peak RSS \(import acp\)", "import acp"),
    Headline("peak RSS, long session loaded", "load", r"agent peak RSS", 6.0,
             r"startup:floor peak RSS \(import acp\)", "import acp"),
)  # fmt: skip
"""At most 15 rows (tests/test_bench_headline.py). The private ÷ public row is the one private
path defect keeps (the lazy import of the `anthropic` SDK, docs/architecture.md, "Private
internals"): it must stay under 1×, or the private path goes. The first token's floor
imports what the first request needs one after the other; the agent loads the SDK while the
editor's handshake runs, so it stays near that floor (the absolute target was 1200 ms; the
floor measured 1036 ms on a machine where `import acp` took 729 ms). The memory targets were
absolute (110 MB, 250 MB) where `import acp` peaked at 41 MB."""


def _number(value: Any, *, floor: bool = False) -> float | None:
    """`value` as a finite number (a floor: above zero, as it divides), else None."""
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if not ok or not math.isfinite(value) or value < 0 or (floor and value == 0):
        return None
    return float(value)


def _matches(runs: list[BenchRun], bench: str, pattern: str) -> list[dict[str, Any]]:
    found = re.compile(pattern)
    return [
        f
        for run in runs
        if run.name == bench and not run.error
        for f in run.figures
        if found.match(str(f.get("name", "")))
    ]


def headline_rows(runs: list[BenchRun], yardstick_ms: float | None) -> list[dict[str, Any]]:
    """The headline: one row per `HEADLINE` entry, each with its value, floor, ratio, target
    and status ("not measured" when the figure or its floor is missing)."""
    rows = []
    for h in HEADLINE:
        candidates: list[tuple[float, float, dict[str, Any]]] = []
        for f in _matches(runs, h.bench, h.figure):
            value, unit = _number(f.get("value")), str(f.get("unit") or "")
            if h.floor == YARDSTICK:
                floor = yardstick_ms if yardstick_ms else None
                value = value * _TO_MS[unit] if value is not None and unit in _TO_MS else None
            elif h.floor == "own":
                floor = _number(f.get("floor"), floor=True)
            else:
                bench, _, pattern = h.floor.partition(":")
                others = _matches(runs, bench, pattern)
                floor = _number(others[0].get("value"), floor=True) if others else None
            if value is not None and floor is not None:
                candidates.append((value, floor, f))
        if h.pick == "worst":
            candidates.sort(key=lambda c: c[0] / c[1], reverse=not h.at_least)
        elif h.pick == "last":
            candidates.reverse()
        sign = "≥" if h.at_least else "≤"
        target = f"{sign} {_ratio_text(h.ratio, h.floor == YARDSTICK)}"
        if h.set_as:
            here = f" = {format_value(h.ratio * yardstick_ms, 'ms')} here" if yardstick_ms else ""
            target += f"{here} ({h.set_as} where import acp took {REFERENCE_ACP_MS:g} ms)"
        row: dict[str, Any] = {"label": h.label, "bench": h.bench, "target": target, "ok": None}
        row["floor_label"] = "import acp: the machine" if h.floor == YARDSTICK else h.floor_label
        if not candidates:
            rows.append({**row, "value": None, "unit": "", "floor": None, "ratio": None})
            continue
        value, floor, f = candidates[0]
        ratio = value / floor
        unit = "ms" if h.floor == YARDSTICK else str(f.get("unit") or "")
        met = ratio >= h.ratio if h.at_least else ratio <= h.ratio
        rows.append(
            {**row, "value": value, "unit": unit, "floor": floor, "ratio": ratio, "ok": met}
            | {"figure": f"{h.bench}: {f.get('name')}", "yardstick": h.floor == YARDSTICK}
        )
    return rows


def _ratio_text(ratio: float, yardstick: bool) -> str:
    """A ratio to the yardstick as a percentage of it; any other as a multiple."""
    return format_value(ratio * 100, "%") if yardstick else f"{ratio:.3g}×"


def headline_table(rows: list[dict[str, Any]]) -> str:
    headers = ("headline", "value", "floor", "ratio", "target", "status")
    cells = []
    for r in rows:
        floor_unit = "ms" if r.get("yardstick") else r["unit"]
        floor = "—" if r["floor"] is None else format_value(r["floor"], floor_unit)
        cells.append(
            (
                r["label"],
                "—" if r["value"] is None else format_value(r["value"], r["unit"]),
                f"{floor} ({r['floor_label']})" if r["floor_label"] else floor,
                "—" if r["ratio"] is None else _ratio_text(r["ratio"], bool(r.get("yardstick"))),
                r["target"],
                "not measured" if r["ok"] is None else ("OK" if r["ok"] else "MISS"),
            )
        )
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(headers)]
    lines = [headers, tuple("─" * w for w in widths), *cells]
    return "\n".join(
        "  ".join(
            c.rjust(widths[i]) if i in (1, 3) and n > 1 else c.ljust(widths[i])
            for i, c in enumerate(line)
        ).rstrip()
        for n, line in enumerate(lines)
    )


def yardstick_ms(runs: int = 3) -> float | None:
    """The machine's yardstick now: `python -c "import acp"`, spawn → exit, median of `runs`
    (None when it cannot run)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        try:
            subprocess.run([sys.executable, "-c", "import acp"], env=env, check=True, timeout=60)
        except (OSError, subprocess.SubprocessError):
            return None
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


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
    parser.add_argument("--detail", action="store_true", help="print every figure")
    args = parser.parse_args(argv)

    scripts = discover(args.only)
    if not scripts:
        print("no benchmarks found (scripts/bench_*.py)", file=sys.stderr)
        return 1
    yardsticks = [y for y in [yardstick_ms()] if y is not None]
    runs: list[BenchRun] = []
    for script in scripts:
        print(f"running {script.name} …", file=sys.stderr, flush=True)
        run = run_one(script, quick=args.quick, timeout=args.timeout)
        note = f"ERROR: {run.error}" if run.error else f"{len(run.figures)} figures"
        print(f"  {run.seconds:.1f} s, {note}", file=sys.stderr, flush=True)
        runs.append(run)

    yardsticks += [y for y in [yardstick_ms()] if y is not None]
    yardstick = statistics.median(yardsticks) if yardsticks else None
    headline = headline_rows(runs, yardstick)
    if args.only:  # a partial run: the rows of the benchmarks it ran
        headline = [r for r in headline if r["bench"] in {run.name for run in runs}]
    print(headline_table(headline))
    if yardstick is not None:
        print(
            f"(import acp, spawn → exit: {yardstick:,.0f} ms on this machine now, "
            f"{REFERENCE_ACP_MS:g} ms where the absolute targets were set)"
        )
    totals = summary(runs)
    judged = frozenset(str(r["figure"]) for r in headline if "figure" in r)
    detail = table(runs, every=args.detail, judged=judged)
    if len(detail.splitlines()) > 2:
        title = (
            "every figure" if args.detail else "outside the headline: what missed or did not run"
        )
        print(f"\n{title}\n{detail}")
    met = sum(1 for r in headline if r["ok"])
    print(
        f"\nheadline: {met} of {len(headline)} met. All figures: {totals['ok']} OK, "
        f"{totals['miss']} MISS, {totals['untargeted']} without target, "
        f"{totals['errors']} benchmark errors — every figure in {args.json}"
    )
    args.json.write_text(
        json.dumps(
            {
                "generated": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "python": sys.version.split()[0],
                "summary": totals,
                "yardstick_ms": yardstick,
                "headline": headline,
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
