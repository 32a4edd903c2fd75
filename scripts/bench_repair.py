"""Benchmark of the per-request hot path: `repair_outbound` and `VecHistory` accounting.

Owns the numbers behind two promises of docs/architecture.md: the outbound repair of a clean
history costs a request only its new messages (the clean 10k-message history with a tool round
appended <= 5 ms; `integrity/proven.py` remembers what earlier requests proved), the first
request of a session one cheap O(n) scan (clean 10k <= 5 ms, the bound of any other
request: the scan reads slotted values, `model._Value`), and it stays linear when
something needs repair (corrupted 10k <= 30 ms); `VecHistory.append` is O(1) (<= 20 us per op)
and `token_estimate` is O(1) with a baseline. The whole outbound copy of a request (the thinking
filter of `provenance.py`, then the repair) is measured too, on a clean history and on one
whose thinking another model signed (all of it filtered out): <= 5 ms for a next request.

Each repair figure is printed beside its floor, measured in the same run: for a first request,
a bare walk that reads every message's role and every block's type (the least any check of
every block does); for a next request, copying the history's list (what `History.snapshot`
pays on every request anyway). A first request is measured with the memo emptied before each
run; a next request with the memo holding the proof of the history before its last tool round,
and a new list (as `snapshot` makes) of the same message objects.

It reports and never asserts: the exit status is 0 whatever the figures (a loaded CI machine
must not fail a build on timing). `--json PATH` also writes
`{"figures": [{"name", "value", "unit", "target", "ok", "floor"}]}` for tooling. Timings are
medians of several runs, measured with `time.perf_counter` after a short warm-up; on a shared
machine they move with its load, so read them next to the load average printed with them.

Usage: python scripts/bench_repair.py [--json PATH] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from defect_core.history import VecHistory
from defect_core.integrity import repair_outbound
from defect_core.integrity.proven import forget_clean_prefixes
from defect_core.model import (
    ContentBlock,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from defect_core.prefix_memo import forget_all
from defect_core.provenance import own_thinking_only
from defect_core.selection import ModelSelection


@dataclass(frozen=True)
class Figure:
    name: str
    value: float
    unit: str
    target: float | None
    ok: bool
    floor: float | None = None


def clean_history(size: int) -> list[Message]:
    """A realistic agent history: a prompt, eight tool rounds (signed thinking, text, one or two
    calls; their results), a closing answer, the next prompt... Roles alternate, so cut to an
    odd length it ends with a user message: `size` messages, or `size + 1` for an even size."""
    messages: list[Message] = []
    call = 0
    length = size + 1 if size % 2 == 0 else size
    while len(messages) < length:
        messages.append(_user(TextBlock(text="Please fix the failing test in tests/x.py")))
        for _ in range(8):
            calls = [f"toolu_{call + n:08d}" for n in range(1 + call % 2)]
            call += len(calls)
            uses = [ToolUseBlock(id=c, name="read_file", input={"path": "x.py"}) for c in calls]
            messages.append(
                _assistant(
                    ThinkingBlock(thinking="I should read the file.", signature="EqQBCkYIBx=="),
                    TextBlock(text="Let me look at the file."),
                    *uses,
                )
            )
            messages.append(
                _user(*(ToolResultBlock(tool_use_id=c, content="def test(): ...") for c in calls))
            )
        messages.append(_assistant(TextBlock(text="Done. The change is in place.")))
    return messages[:length]


def corrupted_history(size: int) -> list[Message]:
    """The clean history with about 1% of its messages damaged the ways crashes do: a deep
    orphan at the start, dropped result messages (orphans, consecutive assistants), text
    before results, unsigned thinking, blank text and a duplicated message."""
    messages = clean_history(size)
    out: list[Message] = []
    for index, message in enumerate(messages):
        slot = index % 400
        if index > 0 and slot == 3 and message.role == "user":
            continue  # the results of a tool round were never written
        if slot == 101 and message.role == "user":
            message = _user(TextBlock(text="(typed while tools ran)"), *message.content)
        if slot == 202 and message.role == "assistant":
            message = _assistant(ThinkingBlock(thinking="cut short"), *message.content[1:])
        if slot == 303:
            message = Message(role=message.role, content=(*message.content, TextBlock(text=" ")))
        out.append(message)
        if slot == 350:
            out.append(message)
    out[2:3] = []  # a deep orphan right at the start: the clean check fails at once
    return out


def _user(*blocks: ContentBlock) -> Message:
    return Message(role="user", content=blocks)


def _assistant(*blocks: ContentBlock) -> Message:
    return Message(role="assistant", content=blocks)


def warm_up(seconds: float = 0.5) -> None:
    """Run the hot path for a while first: a virtual CPU that was idle starts slow."""
    history = clean_history(2_000)
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        repair_outbound(history)


def median_seconds(
    action: Callable[[], object], runs: int, before: Callable[[], object] | None = None
) -> float:
    """The median time of `action`, each run after `before` (not timed)."""
    if before is not None:
        before()
    action()  # warm up
    samples = []
    for _ in range(runs):
        if before is not None:
            before()
        start = time.perf_counter()
        action()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def bare_walk(history: list[Message]) -> None:
    """Read every message's role and every block's type: the floor of any check of them all."""
    for message in history:
        message.role  # noqa: B018 - the read is the point
        for block in message.content:
            type(block)


def last_round_start(history: list[Message]) -> int:
    """Where the last tool round of `history` (an assistant message and its answer) starts."""
    return len(history) - 2


def lost_results_history(size: int) -> list[Message]:
    """Heavy damage: every tool round lost its results (each becomes a synthetic answer)."""
    out = []
    for message in clean_history(size):
        if message.role == "user":
            kept = tuple(b for b in message.content if not isinstance(b, ToolResultBlock))
            message = _user(*kept, TextBlock(text="(cancelled)"))
        out.append(message)
    return out


def unsigned_history(size: int) -> list[Message]:
    """Heavy damage: no thinking block is signed (every assistant message is rebuilt)."""
    return [
        Message(
            role=m.role,
            content=tuple(
                ThinkingBlock(thinking=b.thinking) if isinstance(b, ThinkingBlock) else b
                for b in m.content
            ),
        )
        for m in clean_history(size)
    ]


def bench_repair(quick: bool) -> list[Figure]:
    figures = []
    first_targets = {("clean", 10_000): 5.0, ("corrupted", 10_000): 30.0}
    next_targets = {("clean", 10_000): 5.0}
    kinds: list[tuple[str, Callable[[int], list[Message]], tuple[int, ...]]] = [
        ("clean", clean_history, (1_000, 10_000, 100_000)),
        ("corrupted", corrupted_history, (1_000, 10_000, 100_000)),
        ("every round's results lost", lost_results_history, (10_000,)),
        ("no thinking signed", unsigned_history, (10_000,)),
    ]
    for kind, build, sizes in kinds:
        for size in sizes:
            runs = 3 if quick or size == 100_000 else 11
            history = build(size)
            forget_clean_prefixes()
            result = repair_outbound(history)
            if (result is history) != (kind == "clean"):
                raise SystemExit(f"benchmark bug: the {kind} {size} history is not what it says")
            label = f"repair_outbound {kind}, {size // 1000}k messages"
            # A session's first request: nothing proven yet.
            ms = 1_000 * median_seconds(
                partial(repair_outbound, history), runs, before=forget_clean_prefixes
            )
            floor = median_seconds(partial(bare_walk, history), runs) * 1_000
            target = first_targets.get((kind, size))
            figures.append(
                Figure(
                    name=f"{label}, first request",
                    value=round(ms, 3),
                    unit="ms",
                    target=target,
                    ok=target is None or ms <= target,
                    floor=round(floor, 3),
                )
            )
            if kind not in ("clean", "corrupted"):
                continue
            # The next request: the history before its last tool round was proven by the last
            # one; `snapshot` hands over a new list of the same message objects.
            before_round = history[: last_round_start(history)]

            def prove(proven: list[Message] = before_round) -> None:
                forget_clean_prefixes()
                repair_outbound(list(proven))

            sent = list(history)
            ms = median_seconds(partial(repair_outbound, sent), runs, before=prove) * 1_000
            floor = median_seconds(partial(list, history), runs) * 1_000
            target = next_targets.get((kind, size))
            figures.append(
                Figure(
                    name=f"{label}, next request (a tool round appended)",
                    value=round(ms, 3),
                    unit="ms",
                    target=target,
                    ok=target is None or ms <= target,
                    floor=round(floor, 3),
                )
            )
    return figures


SELECTION = ModelSelection("anthropic", "claude-sonnet-4-5")


def outbound_copy(history: list[Message]) -> list[Message]:
    """What `turn/request.py` sends: the thinking filter, then the repair."""
    return repair_outbound(own_thinking_only(history, SELECTION, "anthropic"))


def switched_history(size: int) -> list[Message]:
    """The clean history, its thinking signed by another model: all of it is filtered out."""
    return [
        Message(
            role=m.role,
            content=tuple(
                ThinkingBlock(thinking=b.thinking, signature=b.signature, origin="other/model")
                if isinstance(b, ThinkingBlock)
                else b
                for b in m.content
            ),
        )
        for m in clean_history(size)
    ]


def bench_outbound(quick: bool) -> list[Figure]:
    """The whole outbound copy of a request (`own_thinking_only` + `repair_outbound`)."""
    figures = []
    runs = 3 if quick else 11
    for kind, build in (("clean", clean_history), ("after a model switch", switched_history)):
        history = build(10_000)
        label = f"outbound copy (thinking filter + repair), {kind}, 10k messages"
        ms = 1_000 * median_seconds(partial(outbound_copy, list(history)), runs, before=forget_all)
        floor = 1_000 * median_seconds(partial(bare_walk, history), runs)
        figures.append(
            Figure(f"{label}, first request", round(ms, 3), "ms", None, True, round(floor, 3))
        )
        before_round = history[: last_round_start(history)]

        def prove(proven: list[Message] = before_round) -> None:
            forget_all()
            outbound_copy(list(proven))

        ms = 1_000 * median_seconds(partial(outbound_copy, list(history)), runs, before=prove)
        floor = 1_000 * median_seconds(partial(list, history), runs)
        figures.append(
            Figure(
                f"{label}, next request (a tool round appended)",
                round(ms, 3),
                "ms",
                5.0,
                ms <= 5.0,
                round(floor, 3),
            )
        )
    return figures


def bench_history(quick: bool) -> list[Figure]:
    figures = []
    count = 20_000 if quick else 100_000
    messages = clean_history(count)
    for with_baseline in (False, True):
        samples = []
        for _ in range(3):
            history = VecHistory()
            if with_baseline:
                history.record_input_tokens(1_000)
            start = time.perf_counter()
            for message in messages:
                history.append(message)
            samples.append((time.perf_counter() - start) / count)
        us = statistics.median(samples) * 1e6
        label = "with baseline" if with_baseline else "no baseline"
        figures.append(
            Figure(
                f"VecHistory.append ({label}, {count} ops)", round(us, 3), "us/op", 20.0, us <= 20
            )
        )
    # O(1): the cost per op must not grow with the length of the history.
    history = VecHistory(messages)
    history.record_input_tokens(1_000)
    tail = clean_history(2_000)
    start = time.perf_counter()
    for message in tail:
        history.append(message)
    us_long = (time.perf_counter() - start) / len(tail) * 1e6
    figures.append(
        Figure(
            f"VecHistory.append on a {count}-message history",
            round(us_long, 3),
            "us/op",
            20.0,
            us_long <= 20,
        )
    )

    sized = VecHistory(clean_history(10_000))
    us = median_seconds(sized.token_estimate, 11) * 1e6
    figures.append(Figure("token_estimate 10k, no baseline", round(us, 1), "us", None, True))
    sized.record_input_tokens(50_000)
    sized.append(clean_history(3)[1])
    us = median_seconds(sized.token_estimate, 101) * 1e6
    figures.append(Figure("token_estimate 10k, with baseline", round(us, 3), "us", 20.0, us <= 20))
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument("--quick", action="store_true", help="fewer runs (smoke test)")
    args = parser.parse_args(argv)

    warm_up()
    figures = bench_repair(args.quick) + bench_outbound(args.quick) + bench_history(args.quick)
    width = max(len(f.name) for f in figures)
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    print(f"{'figure':<{width}}  {'value':>12}  {'target':>10}  {'floor':>9}  ok")
    for f in figures:
        target = "-" if f.target is None else f"<= {f.target:g}"
        floor = "-" if f.floor is None else f"{f.floor:.3f}"
        ok = "yes" if f.ok else "NO"
        print(f"{f.name:<{width}}  {f.value:>9.3f} {f.unit:<5}  {target:>10}  {floor:>9}  {ok}")
    if args.json is not None:
        args.json.write_text(json.dumps({"figures": [asdict(f) for f in figures]}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
