"""Context accounting speed: token estimates and micro-compaction over 10k-message histories.

Reports medians of: `VecHistory.token_estimate` with and without a real baseline,
building a `VecHistory` of 10k messages (each message is estimated once, on entry), and
`micro_compact` over 10k messages (first pass, which rewrites, and a second pass, which
finds nothing left to clear). Target: ≤ 20 ms each on a 2-core machine.

Usage: python scripts/bench_context.py [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from defect_core.compaction import Thresholds, micro_compact
from defect_core.history import VecHistory
from defect_core.model import (
    Message,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)


def history(n: int) -> list[Message]:
    out: list[Message] = []
    i = 0
    while len(out) < n:
        out.append(Message(role="user", content=(TextBlock(text=f"prompt {i} " * 10),)))
        out.append(
            Message(
                role="assistant",
                content=(
                    TextBlock(text="Let me look. " * 8),
                    ToolUseBlock(id=f"toolu_{i}", name="read_file", input={"path": f"f{i}.py"}),
                ),
            )
        )
        body = "line of code\n" * (300 if i % 3 == 0 else 20)
        out.append(
            Message(role="user", content=(ToolResultBlock(tool_use_id=f"toolu_{i}", content=body),))
        )
        out.append(Message(role="assistant", content=(TextBlock(text="Done. " * 20),)))
        i += 1
    return out[:n]


def median_ms(fn: Callable[[], object], runs: int) -> float:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    messages = history(10_000)
    with_baseline = VecHistory(messages)
    with_baseline.record_input_tokens(123_456)
    without = VecHistory(messages)
    compacted = micro_compact(messages, Thresholds()) or messages
    figures = []

    def figure(name: str, value: float, target: float | None) -> None:
        figures.append(
            {
                "name": name,
                "value": round(value, 3),
                "unit": "ms",
                "target": f"≤ {target:g} ms" if target else "—",
                "ok": None if target is None else value <= target,
            }
        )

    figure(
        "token_estimate, 10k msgs, real baseline", median_ms(with_baseline.token_estimate, 200), 20
    )
    figure("token_estimate, 10k msgs, no baseline", median_ms(without.token_estimate, 200), 20)
    figure(
        "VecHistory of 10k msgs (estimates each once)",
        median_ms(lambda: VecHistory(messages), 9),
        None,
    )
    figure(
        "micro_compact, 10k msgs (rewrites)",
        median_ms(lambda: micro_compact(messages, Thresholds()), 9),
        20,
    )
    figure(
        "micro_compact, 10k msgs (nothing left)",
        median_ms(lambda: micro_compact(compacted, Thresholds()), 9),
        20,
    )
    for f in figures:
        status = "" if f["ok"] is None else ("OK" if f["ok"] else "MISS")
        print(f"  {f['name']:<48} {f['value']:>9} ms  {f['target']:<9} {status}")
    if args.json:
        args.json.write_text(json.dumps({"figures": figures}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
