"""Running transcripts: `run_transcript`, `run_files` and the failure report.

Owns one run of one transcript file (load it, skip it when its header says so or a module it
requires is missing, set its stage up, play its steps, tear everything down), `Outcome`, the
report a failed run prints — the step and its line, the problem, what was expected, the
closest messages the agent wrote instead, and the tail of the agent's stderr — and running
many files (`run_files`, `expand_paths`) with the exit status CI reads.

Invariants:
- A run never outlives its transcript: every process group it started is killed when it ends
  — passed, failed, timed out, crashed or interrupted (`Stage.kill_everything` in `finally`).
- A broken agent fails the run, never hangs it: every waiting step has a timeout (`Play`).
- Only the standard library is imported besides this package and `defect_acp.client`.

Why: CI plays these on every commit. A failure must say what was expected and what came
instead, and a broken agent must fail the run, never hang it or leave processes behind.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from defect_transcript.agent import StepFailed
from defect_transcript.format import TranscriptError, load_transcript
from defect_transcript.patterns import SHOW_LIMIT, show
from defect_transcript.stage import STDERR_TAIL_LINES, RunOptions, Stage, tail
from defect_transcript.steps import Play

__all__ = ["Outcome", "RunOptions", "expand_paths", "run_files", "run_transcript"]


@dataclass
class Outcome:
    path: Path
    status: Literal["passed", "failed", "skipped"]
    detail: str = ""
    steps_run: int = 0
    seconds: float = 0.0
    agent_pids: list[int] = field(default_factory=list)
    workspace: Path | None = None


def _missing_module(names: Iterable[str]) -> str | None:
    import importlib.util

    for name in names:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            return name
    return None


async def run_transcript(path: str | Path, options: RunOptions | None = None) -> Outcome:
    """Play one transcript file against a fresh agent; report on `options.out`."""
    options = options or RunOptions()
    out = options.out or sys.stdout
    path = Path(path)
    started = time.monotonic()
    try:
        transcript = load_transcript(path)
    except TranscriptError as exc:
        out.write(f"FAIL {path}\n  malformed transcript: {exc}\n")
        return Outcome(path, "failed", f"malformed transcript: {exc}")
    header = transcript.header
    if header.skip is not None:
        out.write(f"SKIP {path}: {header.skip}\n")
        return Outcome(path, "skipped", header.skip)
    if missing := _missing_module(header.requires):
        reason = f"requires the module {missing}, which is not available"
        out.write(f"SKIP {path}: {reason}\n")
        return Outcome(path, "skipped", reason)

    stage = Stage(transcript, options)
    run = Play(stage, options, out)
    if options.verbose:
        out.write(f"RUN  {path} (workspace {stage.workspace})\n")
    failure: str | None = None
    try:
        try:
            await run.start()
            await run.play()
        except StepFailed as failed:
            failure = _report(run, failed)
            await stage.teardown(graceful=False)
        except (Exception, asyncio.CancelledError) as exc:
            failure = f"FAIL {path}\n  the runner crashed: {type(exc).__name__}: {exc}"
            await stage.teardown(graceful=False)
            if isinstance(exc, asyncio.CancelledError):
                raise
        else:
            await stage.teardown(graceful=True)
            try:
                run.check_violations()
            except StepFailed as failed:
                failure = _report(run, failed)
    finally:
        stage.kill_everything()  # whatever happened above (even KeyboardInterrupt)
        stage.cleanup_files()
    seconds = time.monotonic() - started
    outcome = Outcome(
        path,
        "failed" if failure else "passed",
        failure or "",
        run.steps_run,
        seconds,
        list(stage.pids),
        stage.workspace,
    )
    if failure:
        out.write(failure + "\n")
        if options.keep:
            out.write(f"  kept: {stage.root}\n")
    else:
        out.write(f"PASS {path} ({len(transcript.steps)} steps, {seconds:.1f} s)\n")
    out.flush()
    return outcome


def _report(run: Play, failed: StepFailed) -> str:
    step = run.current
    if step is not None:
        where = step.where()
    elif run.steps_run:
        where = "after the last step"
    else:
        where = "set-up (before the first step)"
    lines = [f"FAIL {run.t.path} — {where}", f"  problem:  {failed.problem}"]
    limit = None if run.options.verbose else SHOW_LIMIT
    if failed.expected is not None:
        lines.append(f"  expected: {show(failed.expected, limit)}")
    elif step is not None and step.kind.startswith("expect"):
        lines.append(f"  expected: {show(step.value, limit)}")
    for n, (item, mismatch) in enumerate(failed.candidates):
        label = "actual:  " if n == 0 else "also:    "
        shown = show(item.message, limit) if item.message is not None else repr(item.raw)
        lines.append(f"  {label} {shown}")
        if mismatch is not None:
            lines.append(f"            {mismatch}")
    if failed.skipped:
        lines.append(f"  messages consumed while waiting: {failed.skipped}")
    if not failed.candidates and failed.problem.startswith("timed out"):
        lines.append("  actual:   (no message)")
    log = tail(run.stage.stderr_path)
    if log:
        lines.append(f"  agent stderr (last {STDERR_TAIL_LINES} lines):")
        lines.extend(f"    | {line}" for line in log.splitlines())
    return "\n".join(lines)


def expand_paths(paths: Iterable[str | Path]) -> list[Path]:
    """Files as given; a directory stands for its `*.jsonl` files, sorted."""
    found: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found.extend(sorted(path.glob("*.jsonl")))
        else:
            found.append(path)
    return found


async def run_files(paths: Iterable[str | Path], options: RunOptions | None = None) -> int:
    """Play every transcript; exit status 0 when none failed (skips are fine), else 1."""
    options = options or RunOptions()
    out = options.out or sys.stdout
    files = expand_paths(paths)
    if not files:
        out.write("no transcripts given\n")
        return 1
    outcomes = [await run_transcript(path, options) for path in files]
    counts = {s: sum(1 for o in outcomes if o.status == s) for s in ("passed", "failed", "skipped")}
    out.write(
        f"{counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped\n"
    )
    out.flush()
    return 1 if counts["failed"] else 0
