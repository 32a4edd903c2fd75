"""Turn overhead: what defect itself adds to a tool loop against a model that answers at once.

Spawns the real `defect acp` (Anthropic provider, real SDK) with the ACP SDK's client, pointed
at the strict fake provider on 127.0.0.1 (in its own process, so its threads never compete
with the client for a GIL; both stamp times on CLOCK_MONOTONIC, which processes share).
One prompt makes the model call `read_file` on a small file 20 times (each reply also
streams a little text), then answer with text: 21 model requests. Each prompt runs in a new
session. Reported (median over --runs prompts, after one warm-up prompt that pays for the SDK
import and the first connection):

- agent overhead per round trip: (prompt wall time − time the fake spent answering) ÷ model
  requests. Everything defect does between model answers is in it: parsing the stream,
  forwarding updates, committing history, running the tool, encoding the next request, the
  SDK and HTTP on the client side. Target ≤ 15 ms.
- delta latency: from the fake writing a text delta to the socket to the `session/update`
  that carries it being read off the agent's stdout (stamped by scripts/stamp_relay.py, which
  sits on the agent's stdout pipe and reads it continuously, forwarding to the client from
  another thread: the client's own schema checks, and any backlog they build, are not
  counted).
  Measured on the final answer, whose deltas the fake spaces --pace apart (5 ms: a model
  streams tens of tokens a second), so the figure is latency, not the backlog of a burst.
  Target ≤ 2 ms at the median; p95 reported, and the median for the tool replies' deltas,
  which come all at once.
- delta latency under a fast stream: answers of --burst-deltas (200) deltas streamed within
  --burst-ms (50 ms), one session at a time, then --sessions (4) sessions streaming such an
  answer at once. Median and p95 of each; targets: burst median ≤ 3 ms, p95 ≤ 5 ms. A delta
  that reaches the client inside a coalesced update counts from its own write time, so
  coalescing can only show up as the latency it saves.
- a burst as sent: how long the fake took, first delta to last, to send each answer of the
  sessions-at-once bursts (median). It keeps each slow reply to a schedule (the n-th event
  due n × delay after the first, one already due sent at once): waiting the delay after each
  write instead, a busy machine's late wake-ups stretched 50 ms to 100-300, which measured a
  slower stream than the one named. Reported so a run shows the pace it really had.
- agent CPU per delta, --sessions at once: the agent process's CPU time (user + system, from
  /proc; Linux only) over the sessions-at-once prompts, divided by their deltas. Load-
  independent where the latencies are not: on a busy machine it says whether the work per
  delta shrank. It includes each prompt's own cost (the request, the history), spread over
  its deltas. No target: reported to compare builds.
- other load during the sessions-at-once bursts: the machine's CPU (/proc/stat) while those
  prompts ran, less the bench's own processes' (client, relay, agent, fake), in cores. In a
  burst those four need well over one core, so the latencies (the p95 above all) move with
  whatever else runs: a figure taken while others held a core says so here, as a miss of
  its target (under `QUIET_MACHINE_CORES`), so that `make bench` prints it beside the
  latencies it makes unreliable. Compare builds on such a machine by the agent CPU per
  delta, and interleave them (A, B, A, B...). Linux only.
- the bench's own processes during those prompts (the client, the relay, the fake, the
  agent), in cores, and the agent's part: on a 2-core machine they fill most of it
  themselves, and the scheduler now and then leaves the agent without a core for a few
  milliseconds while the deltas keep coming (a socket read's callback, microseconds of
  work, was seen to take 6 ms): the deltas queued behind such a stall are most of the
  p95. Linux only (/proc; its clock ticks are 10 ms, so each figure is coarse on its own).

The client checks every message of the agent against the ACP schema, as the tests do, but
once the measurement is over (`spawn_defect(validate_at_exit=True)`): a check costs the client
milliseconds of CPU per message, several times what the agent spends on it, and on a small
machine validating as they arrive made the client, not the agent, the busiest process during
a fast stream (the agent then waited for a core). A real editor does not spend that. The
client still parses each message with the ACP SDK, as an editor built on it would.

The fake's sockets get TCP_NODELAY here so it answers "instantly" (Nagle's algorithm would
otherwise hold its small writes for the client's delayed ACK, up to 40 ms, and charge that
wait to the agent).

`--public-path` runs the agent with `DEFECT_PRIVATE_PATHS=off` (the `anthropic` SDK imported
whole, as documented: docs/architecture.md, "Private internals"), to compare the two. The
call and its stream are the SDK's public API either way (defect_core/providers/anthropic/
call.py), so only the import differs, and these figures should not.

Usage: python scripts/bench_turn.py [--runs N | --quick] [--round-trips N] [--pace S]
                                   [--burst-deltas N] [--burst-ms MS] [--sessions N]
                                   [--public-path] [--json PATH]
Exits 0 whatever the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import re
import socket
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from acp import schema as s  # noqa: E402

import defect_fakeapi as fp  # noqa: E402
from defect_fakeapi.http import ApiHandler  # noqa: E402
from tests.support.acp_harness import agent_env, spawn_defect  # noqa: E402

MARK = re.compile(r"<d(\d{6})>")
TARGET_OVERHEAD_MS = 15.0
TARGET_DELTA_MS = 2.0
TARGET_BURST_P50_MS = 3.0
TARGET_BURST_P95_MS = 5.0
QUIET_MACHINE_CORES = 0.5
"""Other load (cores) above which a run's burst latencies measure the machine more than the
agent: interleaved on this 2-core machine with about one core of other load, one build's
median of 4 sessions at once ranged 3 to 12 ms over 5 runs, the next one's 10 to 63 ms.
Near saturation a few µs of CPU per delta show as several milliseconds of latency; the
targets are set for a machine without it.

The body's reader, measured with `python scripts/bench_turn.py`, builds interleaved, 4 runs
each on a quiet machine (other load under 0.1 core), medians of paced delta / 4 sessions at
once, median and p95 / agent CPU per delta: one piece per network read off httpcore2's and
anyio's internals (before the public-API re-shape) 0.55 ms / 2.05 ms, 5.9 ms / 70 µs;
httpx2's own transport (one HTTP chunk per step through httpcore2 and h11, anyio's timer
and cancel scope per read) 0.49 ms / 3.0-12 ms / 75-95 µs; the providers' own transport
(defect_core/providers/asyncio_http.py: one piece per network read, public APIs only)
0.41 ms / 1.6 ms, 4.5 ms / 66 µs, and without the provider's hand-over after a piece that
came alone (`QUIET_GAP`, defect_core/providers/anthropic/provider.py) 0.58 ms / 2.15 ms.
The 4-sessions median moves by milliseconds between runs of one build, and the CPU figure
is counted in 10 ms clock ticks (12.5 µs per delta here): compare medians of many runs."""


def marked_text(first: int, count: int) -> str:
    """`count` delta-sized pieces, each carrying its own number; with `chunk_size` equal to
    the piece length the fake streams exactly one piece per `text_delta`."""
    return "".join(f"<d{n:06d}> word " for n in range(first, first + count))


PIECE = len(marked_text(0, 1))


@dataclass
class Timings:
    """What the fake saw, stamped on this process's clock."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    request_started: dict[int, float] = field(default_factory=dict)
    request_done: dict[int, float] = field(default_factory=dict)
    delta_written: dict[int, float] = field(default_factory=dict)
    delta_received: dict[int, float] = field(default_factory=dict)

    def snapshot(self) -> dict[str, dict[int, float]]:
        with self.lock:
            return {
                "request_started": dict(self.request_started),
                "request_done": dict(self.request_done),
                "delta_written": dict(self.delta_written),
            }


class TimedFake(fp.FakeProvider):
    """The strict fake, with time stamps where a request starts and ends."""

    def __init__(self, timings: Timings, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.timings = timings

    def _new_record(
        self, method: str, path: str, headers: dict[str, str], raw: bytes, **kwargs: Any
    ) -> fp.RequestRecord:
        started = time.perf_counter()
        record = super()._new_record(method, path, headers, raw, **kwargs)
        with self.timings.lock:
            self.timings.request_started[record.index] = started
        return record

    def _complete(self, record: fp.RequestRecord) -> None:
        with self.timings.lock:
            self.timings.request_done[record.index] = time.perf_counter()
        super()._complete(record)


def instrument_handler(timings: Timings) -> None:
    """Stamp every text delta as it leaves the fake, answer without Nagle delays, and keep a
    slow reply to its schedule."""
    handler = ApiHandler
    original_setup = handler.setup
    original_write = handler._write_chunk
    original_wait = handler._wait
    due: dict[int, float] = {}  # handler → when its stream's next event is due

    def setup(self: ApiHandler) -> None:
        original_setup(self)
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def write_chunk(self: ApiHandler, data: bytes) -> None:
        now = time.perf_counter()  # before the write: the agent may read it at once
        if data.startswith(b"event: message_start"):
            due[id(self)] = time.monotonic()  # a stream starts: its schedule starts now
        original_write(self, data)
        if b"text_delta" in data:
            with timings.lock:
                for match in MARK.finditer(data.decode("utf-8", "replace")):
                    timings.delta_written[int(match.group(1))] = now

    def wait(self: ApiHandler, seconds: float | None) -> Any:
        """The fake waits `seconds` from its last write; on a busy machine each wake-up comes
        late, and 200 deltas meant for 50 ms took 100 to 300. Here the n-th event is due
        n × `seconds` after the stream's first, and an event already due goes at once, as
        a model's deltas held up on the way arrive together."""
        start = due.get(id(self))
        if seconds is None or seconds <= 0 or start is None:
            return original_wait(self, seconds)
        due[id(self)] = start = start + seconds
        late = time.monotonic() - start
        return "elapsed" if late >= 0 else original_wait(self, -late)

    handler.setup = setup  # type: ignore[method-assign]
    handler._write_chunk = write_chunk  # type: ignore[method-assign]
    handler._wait = wait  # type: ignore[method-assign]


def script(round_trips: int, first_mark: int, deltas_per_reply: int, pace: float) -> list[fp.Reply]:
    """`round_trips` tool calls whose text deltas come in a burst, then a text answer whose
    deltas come `pace` seconds apart (as a model streams), numbered from `first_mark`."""
    replies: list[fp.Reply] = []
    mark = first_mark
    for _ in range(round_trips):
        reply = fp.Reply.tool_use(
            None,
            "read_file",
            {"path": "small.txt"},
            text_before=marked_text(mark, deltas_per_reply),
        )
        replies.append(_with_chunk_size(reply))
        mark += deltas_per_reply
    final = fp.Reply.text(marked_text(mark, deltas_per_reply * 4))
    replies.append(_with_chunk_size(final).slow(pace))
    return replies


def _with_chunk_size(reply: fp.Reply) -> fp.Reply:
    import dataclasses

    return dataclasses.replace(reply, chunk_size=PIECE)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


def agent_cpu_seconds(relay_pid: int) -> float | None:
    """CPU time (user + system) of the agent, the relay's child; None where /proc cannot say."""
    try:
        return process_cpu(agent_pid(relay_pid))
    except (OSError, IndexError, ValueError):
        return None


def agent_pid(relay_pid: int) -> int:
    """The agent's pid: the relay's child (scripts/stamp_relay.py)."""
    return int(Path(f"/proc/{relay_pid}/task/{relay_pid}/children").read_text().split()[0])


def process_cpu(pid: int) -> float:
    """CPU time (user + system, every thread) of process `pid`."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_and_own_cpu(pids: list[int]) -> tuple[float, float] | None:
    """CPU time the whole machine has spent (every core, idle excluded) and that `pids` (with
    the agent, the relay's child) have spent; None where /proc cannot say."""
    try:
        jiffies = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        own = sum(process_cpu(pid) for pid in [*pids, agent_pid(pids[0])])
    except (OSError, IndexError, ValueError):
        return None
    busy = sum(jiffies) - sum(jiffies[3:5])  # all but idle and iowait
    return busy / os.sysconf("SC_CLK_TCK"), own


class BurstLoad(NamedTuple):
    """CPU seconds spent during one sessions-at-once prompt, and its wall seconds."""

    other: float  # by processes other than the bench's own
    own: float  # by the bench's own: client, relay, fake and agent
    agent: float  # by the agent
    wall: float


def cores(bursts: list[BurstLoad], part: str, at_least: float | None = None) -> float:
    """How many cores `part` of the load kept busy over all `bursts` (NaN without any), not
    below `at_least` when given (/proc's coarse ticks can make a difference negative)."""
    wall = sum(b.wall for b in bursts)
    if not wall:
        return float("nan")
    busy = sum(getattr(b, part) for b in bursts) / wall
    return busy if at_least is None else max(at_least, busy)


def serve_fake(conn: Any) -> None:
    """The fake's own process: serve, and answer the bench's commands over a pipe."""
    timings = Timings()
    instrument_handler(timings)
    with TimedFake(timings) as fake:
        conn.send(fake.url)
        while True:
            command, argument = conn.recv()
            if command == "enqueue":
                fake.enqueue(*[fp.Reply.from_dict(d) for d in argument])
                conn.send(len(fake.requests))
            elif command == "wait":
                records = fake.wait_for_requests(argument, timeout=60)
                rejected = [r.error_message for r in records if r.rejected]
                conn.send({"rejected": rejected, **timings.snapshot()})
            else:
                break


class FakeProcess:
    def __init__(self) -> None:
        context = multiprocessing.get_context("spawn")
        self._conn, child = context.Pipe()
        self._process = context.Process(target=serve_fake, args=(child,), daemon=True)
        self._process.start()
        self.url: str = self._conn.recv()
        self.pid: int = self._process.pid or 0
        self._lock = threading.Lock()

    def call(self, command: str, argument: Any = None) -> Any:
        with self._lock:
            self._conn.send((command, argument))
            return self._conn.recv()

    def stop(self) -> None:
        with self._lock:
            self._conn.send(("stop", None))
        self._process.join(5)
        if self._process.is_alive():
            self._process.kill()


@dataclass
class Burst:
    """The fast-stream part: `deltas` text deltas within `seconds`, `sessions` at once."""

    deltas: int = 200
    seconds: float = 0.05
    sessions: int = 4


def burst_reply(first_mark: int, burst: Burst) -> fp.Reply:
    reply = _with_chunk_size(fp.Reply.text(marked_text(first_mark, burst.deltas)))
    return reply.slow(burst.seconds / burst.deltas)


async def run(
    runs: int,
    round_trips: int,
    deltas_per_reply: int,
    pace: float,
    fast: Burst,
    private_paths: bool = True,
) -> dict[str, Any]:
    received: dict[int, float] = {}

    overheads: list[float] = []
    walls: list[float] = []
    fake_parts: list[float] = []
    burst_marks: list[int] = []
    paced_marks: list[int] = []
    fast_marks: list[int] = []
    parallel_marks: list[int] = []
    bursts: list[BurstLoad] = []  # the machine's load during each sessions-at-once prompt
    fake = FakeProcess()
    try:
        with tempfile.TemporaryDirectory(prefix="defect-bench-turn-") as workspace:
            (Path(workspace) / "small.txt").write_text("one\ntwo\nthree\n", encoding="utf-8")
            env = agent_env(
                DEFECT_PROVIDER="anthropic",
                ANTHROPIC_BASE_URL=fake.url,
                ANTHROPIC_API_KEY=fp.DEFAULT_API_KEY,
                DEFECT_REASONING_EFFORT="off",
                DEFECT_LOG_LEVEL="warning",
                **({} if private_paths else {"DEFECT_PRIVATE_PATHS": "off"}),
            )
            stamps = Path(workspace) / "stamps.txt"
            relay = [sys.executable, str(REPO / "scripts" / "stamp_relay.py"), str(stamps)]
            profile = os.environ.get("BENCH_TURN_PROFILE")
            python = [sys.executable, *(["-m", "cProfile", "-o", profile] if profile else [])]
            command = [*relay, *python, "-m", "defect_cli", "acp"]
            async with spawn_defect(
                env=env, cwd=Path(workspace), command=command, validate_at_exit=True
            ) as agent:
                await agent.initialize()
                mark = 0
                for n in range(runs + 1):  # the first prompt warms up and is not counted
                    # One prompt per session: the figure is about one prompt's tool loop (the
                    # SDK copies the whole body per request, so a longer history costs more).
                    sid = await agent.new_session(workspace)
                    replies = script(round_trips, mark, deltas_per_reply, pace)
                    burst = list(range(mark, mark + deltas_per_reply * round_trips))
                    paced = list(range(burst[-1] + 1, burst[-1] + 1 + deltas_per_reply * 4))
                    mark = paced[-1] + 1
                    before = await asyncio.to_thread(
                        fake.call, "enqueue", [r.to_dict() for r in replies]
                    )
                    started = time.perf_counter()
                    response = await agent.conn.prompt(
                        session_id=sid, prompt=[s.TextContentBlock(type="text", text="go")]
                    )
                    wall = time.perf_counter() - started
                    if response.stop_reason != "end_turn":
                        raise RuntimeError(f"the turn ended with {response.stop_reason}")
                    seen = await asyncio.to_thread(fake.call, "wait", before + len(replies))
                    if seen["rejected"]:
                        raise RuntimeError(f"the fake rejected a request: {seen['rejected'][0]}")
                    if n == 0:
                        continue
                    indices = list(range(before, before + len(replies)))
                    fake_time = sum(
                        seen["request_done"][i] - seen["request_started"][i] for i in indices
                    )
                    walls.append(wall)
                    fake_parts.append(fake_time)
                    overheads.append((wall - fake_time) / len(indices))
                    burst_marks.extend(burst)
                    paced_marks.extend(paced)

                async def answer(sid: str) -> None:
                    response = await agent.conn.prompt(
                        session_id=sid, prompt=[s.TextContentBlock(type="text", text="go")]
                    )
                    if response.stop_reason != "end_turn":
                        raise RuntimeError(f"the turn ended with {response.stop_reason}")

                # Fast streams: one session at a time, then `fast.sessions` sessions at once.
                for width, marks in ((1, fast_marks), (fast.sessions, parallel_marks)):
                    for _ in range(runs):
                        sids = [await agent.new_session(workspace) for _ in range(width)]
                        replies = []
                        for _ in sids:
                            replies.append(burst_reply(mark, fast))
                            marks.extend(range(mark, mark + fast.deltas))
                            mark += fast.deltas
                        before = await asyncio.to_thread(
                            fake.call, "enqueue", [r.to_dict() for r in replies]
                        )
                        cpu_before = agent_cpu_seconds(agent.process.pid)
                        pids = [agent.process.pid, fake.pid, os.getpid()]
                        machine_before = machine_and_own_cpu(pids)
                        wall_before = time.perf_counter()
                        await asyncio.gather(*(answer(sid) for sid in sids))
                        cpu_after = agent_cpu_seconds(agent.process.pid)
                        machine_after = machine_and_own_cpu(pids)
                        if (
                            width > 1
                            and machine_before
                            and machine_after
                            and cpu_before is not None
                            and cpu_after is not None
                        ):
                            own = machine_after[1] - machine_before[1]
                            bursts.append(
                                BurstLoad(
                                    other=(machine_after[0] - machine_before[0]) - own,
                                    own=own,
                                    agent=cpu_after - cpu_before,
                                    wall=time.perf_counter() - wall_before,
                                )
                            )
                        seen = await asyncio.to_thread(fake.call, "wait", before + len(replies))
                        if seen["rejected"]:
                            raise RuntimeError(f"the fake rejected: {seen['rejected'][0]}")
                written = (await asyncio.to_thread(fake.call, "wait", 0))["delta_written"]
            for line in stamps.read_text(encoding="ascii").splitlines():
                number, at = line.split()
                received.setdefault(int(number), float(at))
    finally:
        await asyncio.to_thread(fake.stop)

    def latencies(marks: list[int]) -> list[float]:
        return [(received[m] - written[m]) * 1000 for m in marks if m in received and m in written]

    def spans(marks: list[int]) -> list[float]:
        """How long each burst really took the fake to send, first delta to last, in ms."""
        groups = (marks[i : i + fast.deltas] for i in range(0, len(marks), fast.deltas))
        times = ([written[m] for m in group if m in written] for group in groups)
        return [(max(t) - min(t)) * 1000 for t in times if t]

    paced_ms = latencies(paced_marks)
    burst_ms = latencies(burst_marks)
    fast_ms = latencies(fast_marks)
    parallel_ms = latencies(parallel_marks)
    every = (burst_marks, paced_marks, fast_marks, parallel_marks)
    return {
        "fast_p50_ms": statistics.median(fast_ms) if fast_ms else float("nan"),
        "fast_p95_ms": percentile(fast_ms, 0.95),
        "parallel_p50_ms": statistics.median(parallel_ms) if parallel_ms else float("nan"),
        "parallel_p95_ms": percentile(parallel_ms, 0.95),
        "parallel_span_ms": statistics.median(spans(parallel_marks) or [float("nan")]),
        "parallel_cpu_us": (
            sum(b.agent for b in bursts) / len(parallel_marks) * 1e6
            if bursts and parallel_marks
            else float("nan")
        ),
        "parallel_other_cores": cores(bursts, "other", at_least=0.0),
        "parallel_own_cores": cores(bursts, "own"),
        "parallel_agent_cores": cores(bursts, "agent"),
        "overhead_ms": statistics.median(overheads) * 1000,
        "wall_ms": statistics.median(walls) * 1000,
        "fake_ms": statistics.median(fake_parts) * 1000,
        "requests": round_trips + 1,
        "delta_p50_ms": statistics.median(paced_ms) if paced_ms else float("nan"),
        "delta_p95_ms": percentile(paced_ms, 0.95),
        "burst_p50_ms": statistics.median(burst_ms) if burst_ms else float("nan"),
        "deltas": len(paced_ms) + len(burst_ms) + len(fast_ms) + len(parallel_ms),
        "deltas_expected": sum(len(marks) for marks in every),
    }


def fast_figures(result: dict[str, Any], deltas: int, ms: float, sessions: int) -> list[Any]:
    """The fast-stream figures: one session, then `sessions` at once."""
    figures = []
    for key, label in (("fast", "1 session"), ("parallel", f"{sessions} sessions at once")):
        p50, p95 = result[f"{key}_p50_ms"], result[f"{key}_p95_ms"]
        name = f"delta → session/update, {deltas} deltas in {ms:g} ms, {label}"
        figures += [
            figure(f"{name}, median", round(p50, 3), "ms", f"≤ {TARGET_BURST_P50_MS:g} ms",
                   p50 <= TARGET_BURST_P50_MS),
            figure(f"{name}, p95", round(p95, 3), "ms", f"≤ {TARGET_BURST_P95_MS:g} ms",
                   p95 <= TARGET_BURST_P95_MS),
        ]  # fmt: skip
    return figures


def figure(
    name: str, value: float | str, unit: str, target: str = "—", ok: bool | None = None
) -> dict[str, Any]:
    """One printed figure: its target, and whether it was met (None: for reference)."""
    return {"name": name, "value": value, "unit": unit, "target": target, "ok": ok}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="measured prompts (default 5)")
    parser.add_argument("--round-trips", type=int, default=20)
    parser.add_argument("--deltas", type=int, default=8, help="text deltas per tool reply")
    parser.add_argument(
        "--pace", type=float, default=0.005, help="seconds between the answer's deltas"
    )
    parser.add_argument("--burst-deltas", type=int, default=200, help="deltas per fast answer")
    parser.add_argument("--burst-ms", type=float, default=50.0, help="how fast they come, in ms")
    parser.add_argument("--sessions", type=int, default=4, help="sessions streaming at once")
    parser.add_argument("--quick", action="store_true", help="2 measured prompts")
    parser.add_argument(
        "--public-path",
        action="store_true",
        help="the SDK used as documented (DEFECT_PRIVATE_PATHS=off), to compare",
    )
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if args.quick:
        args.runs = min(args.runs, 2)
    try:
        burst = Burst(args.burst_deltas, args.burst_ms / 1000, args.sessions)
        result = asyncio.run(
            run(
                args.runs,
                args.round_trips,
                args.deltas,
                args.pace,
                burst,
                private_paths=not args.public_path,
            )
        )
    except Exception as exc:  # a benchmark reports; it does not fail the build
        sys.stderr.write(f"bench_turn: could not measure: {type(exc).__name__}: {exc}\n")
        result = None

    figures: list[dict[str, Any]] = []
    if result is not None:
        overhead = result["overhead_ms"]
        pace_ms = args.pace * 1000
        p50 = result["delta_p50_ms"]
        n = args.sessions
        r = result
        latency = "delta → session/update latency"
        figures = [
            figure(f"prompt wall time ({r['requests']} model requests)", round(r["wall_ms"], 1),
                   "ms"),
            figure("of which the fake answering", round(r["fake_ms"], 1), "ms"),
            figure("agent overhead per round trip", round(overhead, 2), "ms",
                   f"≤ {TARGET_OVERHEAD_MS:g} ms", overhead <= TARGET_OVERHEAD_MS),
            figure(f"{latency}, median ({pace_ms:g} ms apart)", round(p50, 3), "ms",
                   f"≤ {TARGET_DELTA_MS:g} ms", p50 <= TARGET_DELTA_MS),
            figure(f"{latency}, p95 ({pace_ms:g} ms apart)", round(r["delta_p95_ms"], 3), "ms"),
            figure(f"{latency}, median (in a burst)", round(r["burst_p50_ms"], 3), "ms"),
            *fast_figures(r, args.burst_deltas, args.burst_ms, n),
            figure(f"a burst as sent, {n} sessions at once (first to last)",
                   round(r["parallel_span_ms"], 1), "ms", f"{args.burst_ms:g} ms"),
            figure(f"agent CPU per delta, {n} sessions at once (prompt included)",
                   round(r["parallel_cpu_us"], 1), "µs"),
            figure(f"other load during the {n}-sessions bursts",
                   round(r["parallel_other_cores"], 2), "cores",
                   f"< {QUIET_MACHINE_CORES:g} cores, or the latencies are the machine's",
                   r["parallel_other_cores"] < QUIET_MACHINE_CORES),
            figure(f"the bench's own processes during the {n}-sessions bursts",
                   round(r["parallel_own_cores"], 2), "cores"),
            figure(f"of which the agent, during the {n}-sessions bursts",
                   round(r["parallel_agent_cores"], 2), "cores"),
            figure("deltas matched (received / sent)", f"{r['deltas']}/{r['deltas_expected']}",
                   "", "all", r["deltas"] == r["deltas_expected"]),
        ]  # fmt: skip
        width = max(len(f["name"]) for f in figures)
        print(f"{'figure':<{width}}  {'value':>12}  {'target':<10}  ok")
        for f in figures:
            value = f"{f['value']} {f['unit']}".strip()
            ok = "—" if f["ok"] is None else ("yes" if f["ok"] else "NO")
            print(f"{f['name']:<{width}}  {value:>12}  {f['target']:<10}  {ok}")
    if args.json is not None:
        args.json.write_text(
            json.dumps({"figures": figures}, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
