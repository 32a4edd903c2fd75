"""Start-up speed: what an editor waits for when it spawns `defect acp`.

Reports the median of N runs (default 12) of:
- spawn → `initialize` answered,
- spawn → `session/new` answered,
- the first `session/prompt` on the offline model ("hello"), from sending it to its answer,
- peak RSS of the agent after `session/new` (VmHWM),
next to the floor: `python -c "import acp"` (spawn → exit), what `python -X importtime`
charges to `import acp` (the import alone, without interpreter start-up: the offline model's
first request needs nothing more) and its peak RSS, measured in the same run. Targets:
session/new ≤ 1.0 s and ≤ 1.3× the floor; hello turn ≤ 20 ms; RSS ≤ 110 MB.

The client side is raw JSON lines over pipes (no SDK), so the figures are the agent's own.
Usage: python scripts/bench_startup.py [--runs N] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


_STATE = tempfile.mkdtemp(prefix="defect-bench-state-")


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DEFECT_", "ANTHROPIC_"))}
    env["DEFECT_STATE_DIR"] = _STATE
    env["PYTHONPATH"] = str(REPO)
    env["DEFECT_PROVIDER"] = "scripted"
    env["DEFECT_LOG_LEVEL"] = "warning"
    return env


def _line(obj: dict[str, Any]) -> bytes:
    return (json.dumps(obj) + "\n").encode()


def _read_response(proc: subprocess.Popen[bytes], request_id: int) -> dict[str, Any]:
    assert proc.stdout is not None
    while True:
        raw = proc.stdout.readline()
        if not raw:
            raise RuntimeError("the agent closed stdout before answering")
        message = json.loads(raw)
        if message.get("id") == request_id and "method" not in message:
            return dict(message)


def _peak_rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def one_agent_run(workspace: str) -> dict[str, float]:
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "defect_cli", "acp"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=_env(),
        cwd=workspace,
    )
    assert proc.stdin is not None
    try:
        proc.stdin.write(
            _line(
                {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "initialize",
                    "params": {"protocolVersion": 1},
                }
            )
        )
        proc.stdin.flush()
        _read_response(proc, 1)
        t_init = time.perf_counter() - start
        proc.stdin.write(
            _line(
                {
                    "jsonrpc": "2.0",
                    "id": 2,
                    "method": "session/new",
                    "params": {"cwd": workspace, "mcpServers": []},
                }
            )
        )
        proc.stdin.flush()
        session = _read_response(proc, 2)["result"]["sessionId"]
        t_new = time.perf_counter() - start
        rss = _peak_rss_mb(proc.pid)
        prompt = {
            "jsonrpc": "2.0",
            "id": 3,
            "method": "session/prompt",
            "params": {"sessionId": session, "prompt": [{"type": "text", "text": "hello"}]},
        }
        t0 = time.perf_counter()
        proc.stdin.write(_line(prompt))
        proc.stdin.flush()
        answer = _read_response(proc, 3)
        t_prompt = time.perf_counter() - t0
        assert answer["result"]["stopReason"] == "end_turn", answer
        prompt["id"] = 4
        t0 = time.perf_counter()
        proc.stdin.write(_line(prompt))
        proc.stdin.flush()
        _read_response(proc, 4)
        t_warm = time.perf_counter() - t0
    finally:
        proc.stdin.close()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
    return {"init": t_init, "new": t_new, "prompt": t_prompt, "warm": t_warm, "rss": rss}


def floor_run() -> dict[str, float]:
    start = time.perf_counter()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import acp, pathlib, sys; sys.stdout.write(pathlib.Path('/proc/self/status')"
            ".read_text())",
        ],
        stdout=subprocess.PIPE,
        env=_env(),
    )
    out, _ = proc.communicate()
    elapsed = time.perf_counter() - start
    rss = float("nan")
    for line in out.decode().splitlines():
        if line.startswith("VmHWM:"):
            rss = int(line.split()[1]) / 1024
    return {"import": elapsed, "rss": rss}


def importtime_acp() -> float:
    """Seconds `python -X importtime` charges to `import acp` (cumulative)."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import acp"],
        env=_env(),
        capture_output=True,
        text=True,
        check=True,
    )
    for line in done.stderr.splitlines():
        parts = line.split("|")
        if len(parts) == 3 and parts[2].rstrip() == " acp":
            return int(parts[1]) / 1e6
    raise RuntimeError("python -X importtime reported no `acp` line")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=12)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    agent_runs: list[dict[str, float]] = []
    floor_runs: list[dict[str, float]] = []
    import_times: list[float] = []
    with tempfile.TemporaryDirectory(prefix="defect-bench-") as workspace:
        one_agent_run(workspace)  # warm the page cache once; not counted
        floor_run()
        for _ in range(args.runs):  # interleave, so both see the same machine state
            floor_runs.append(floor_run())
            import_times.append(importtime_acp())
            agent_runs.append(one_agent_run(workspace))

    def med(runs: list[dict[str, float]], key: str) -> float:
        return statistics.median(r[key] for r in runs)

    floor = med(floor_runs, "import")
    new = med(agent_runs, "new")
    figures = [
        {
            "name": "floor: python -c 'import acp'",
            "value": round(floor * 1000, 1),
            "unit": "ms",
            "target": "reference",
            "ok": None,
        },
        {
            "name": "floor: -X importtime acp (cum.)",
            "value": round(statistics.median(import_times) * 1000, 1),
            "unit": "ms",
            "target": "reference",
            "ok": None,
        },
        {
            "name": "spawn → initialize answered",
            "value": round(med(agent_runs, "init") * 1000, 1),
            "unit": "ms",
            "target": "—",
            "ok": None,
        },
        {
            "name": "spawn → session/new answered",
            "value": round(new * 1000, 1),
            "unit": "ms",
            "target": "≤ 1000 ms",
            "ok": new <= 1.0,
            "floor": round(floor * 1000, 1),
        },
        {
            "name": "session/new ÷ import-acp floor",
            "value": round(new / floor, 2),
            "unit": "×",
            "target": "≤ 1.3×",
            "ok": new / floor <= 1.3,
            "floor": 1.0,
        },
        {
            "name": "first offline 'hello' turn",
            "value": round(med(agent_runs, "prompt") * 1000, 1),
            "unit": "ms",
            "target": "≤ 20 ms",
            "ok": med(agent_runs, "prompt") <= 0.020,
        },
        {
            "name": "second offline 'hello' turn",
            "value": round(med(agent_runs, "warm") * 1000, 1),
            "unit": "ms",
            "target": "—",
            "ok": None,
        },
        {
            "name": "peak RSS after session/new",
            "value": round(med(agent_runs, "rss"), 1),
            "unit": "MB",
            "target": "≤ 110 MB",
            "ok": med(agent_runs, "rss") <= 110,
        },
        {
            "name": "floor peak RSS (import acp)",
            "value": round(med(floor_runs, "rss"), 1),
            "unit": "MB",
            "target": "reference",
            "ok": None,
        },
    ]
    print(f"start-up, median of {args.runs} runs")
    for f in figures:
        status = "" if f["ok"] is None else ("OK" if f["ok"] else "MISS")
        print(f"  {f['name']:<36} {f['value']:>9} {f['unit']:<3} {f['target']:<10} {status}")
    if args.json:
        args.json.write_text(json.dumps({"figures": figures}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
