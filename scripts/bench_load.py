"""Loading long sessions: `session/load` of 10,000 and 100,000 messages through `defect acp`,
and what a turn costs per streamed delta on such a history.

What an editor waits for when it reopens a long conversation: the real `defect acp` process
reads the session from SQLite, rebuilds its history and tool-call states, and replays the whole
conversation as `session/update`s before it answers `session/load` (docs/architecture.md, Storage).

The sessions are written straight into fresh stores (`SqliteStore` + `SessionRecord` +
`append_message` + `upsert_tool_call`) with realistic turns: a user prompt, assistant text
with thinking and tool calls (read_file, edit_file, bash, search), a user message with the
batch of tool results (file contents, diffs, command output), until the log holds the
count; every tool call has its `ToolCallRecord` (title, kind, final status, display).

Each run spawns `python -m defect_cli acp` and times, on the client side (raw JSON lines over
pipes, no SDK, so the figures are the agent's own):
- spawn → `initialize` answered (process start-up, reference),
- `session/load` sent → answered, with every replayed update read off the pipe (the
  load + replay part): 10k messages (target ≤ 400 ms), 100k messages (target ≤ 4 s),
- `session/load` sent → first `session/update` read (target ≤ 100 ms on 100k: the replay
  streams while the rest is read),
- the agent's peak RSS (VmHWM) once the 100k load is answered (target ≤ 250 MB),
- the agent's CPU time (utime + stime of all its threads, /proc/<pid>/stat) from
  `session/load` sent to answered, 10k and 100k (reference: on a shared machine the wall
  figures above wait on other processes too; this is the agent's own work),
- spawn → `session/load` answered (what the editor waits for in all, reference).
Then a turn on the loaded history: the offline model (`scripted`, no network) streams a
3,000-word answer as fast as it can, and the time from its first `agent_message_chunk` to
its last, per delta, is measured on the 100k-message history and on a 100-message one in
the same run (the floor): the target is that the long history costs no more per delta
(≤ 1.5× the short one), i.e. nothing per delta is O(history). The per-request work (the
history handed to the model) is outside that span; it is reported as the time from the
prompt sent to the first streamed chunk, beside the 100-message one (reference: a loaded
session's first request parses the messages it kept in their stored form,
`defect_core/stored_messages.py`, and walks them once for the outbound repair). Compaction
is kept out of the way by a context window large enough for the 100k history
(`.defect/config.toml`).

Medians: 5 runs of 10k, 3 of 100k, 2 turns each (`--runs`, `--long-runs`), after one
untimed warm-up run of each load. Every replay is checked for completeness (every message and
tool call shown) so a fast but truncated replay cannot pass.

Usage: python scripts/bench_load.py [--runs N] [--messages N] [--long N] [--quick] [--json PATH]
Exit status 0 regardless of the figures (a loaded machine must not fail a build on timing).
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from defect_core.events import DiffDisplay, TextDisplay, ToolDisplay  # noqa: E402
from defect_core.model import (  # noqa: E402
    ContentBlock,
    Message,
    Role,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from defect_core.store import (  # noqa: E402
    DB_FILENAME,
    SessionRecord,
    SqliteStore,
    ToolCallRecord,
    tool_display_to_json,
)

TARGET_SECONDS = 0.4
"""Load + replay of the 10k-message session."""
TARGET_LONG_SECONDS = 4.0
"""Load + replay of the 100k-message session."""
TARGET_FIRST_UPDATE = 0.1
"""`session/load` sent → first replayed update, on the 100k-message session."""
TARGET_RSS_MB = 250.0
TARGET_DELTA_RATIO = 1.5
"""Per-delta cost on the 100k history ÷ on the 100-message one."""
SESSION_ID = "sess_bench_load_10k"
LONG_ID = "sess_bench_load_long"
SHORT_ID = "sess_bench_load_short"
PROVIDER = "anthropic"
MODEL = "claude-sonnet-4-5"
OFFLINE_PROVIDER = "scripted"  # the turns need a model: the offline one, no network
OFFLINE_MODEL = "offline"
SHORT_MESSAGES = 100
ANSWER_WORDS = 3000

# --- a realistic conversation ----------------------------------------------------------------

_CODE_LINE = "    result = compute_totals(records, currency=currency, rounding=ROUND_HALF_EVEN)\n"


def _file_text(lines: int, seed: int) -> str:
    return "".join(f"{seed + n:>6}\t{_CODE_LINE}" for n in range(lines))


@dataclass(frozen=True)
class _Call:
    use: ToolUseBlock
    result: ToolResultBlock
    record: ToolCallRecord


def _call(turn: int, slot: int, session_id: str, cwd: Path) -> _Call:
    """One tool call with its result and replay record, cycling through the built-in tools."""
    call_id = f"toolu_01bench{turn:07d}x{slot:02d}aaaaaaaaa"[:32]
    path = f"src/module_{turn % 97}/file_{slot}.py"
    kind_index = (turn + slot) % 4
    displays: tuple[ToolDisplay, ...]
    if kind_index == 0:
        text = _file_text(40, turn)
        use = ToolUseBlock(id=call_id, name="read_file", input={"path": path})
        title, kind = f"Read {path}", "read"
        displays = (TextDisplay(text),)
    elif kind_index == 1:
        old = _CODE_LINE * 6
        new = old.replace("ROUND_HALF_EVEN", "ROUND_HALF_UP")
        use = ToolUseBlock(
            id=call_id,
            name="edit_file",
            input={"path": path, "old_string": old, "new_string": new},
        )
        text = f"Edited {path}: 1 replacement."
        title, kind = f"Edit {path}", "edit"
        displays = (DiffDisplay(path=str(cwd / path), old_text=old, new_text=new),)
    elif kind_index == 2:
        command = f"python -m pytest tests/test_module_{turn % 97}.py -q"
        text = "." * 60 + f"\n60 passed in {turn % 7}.{slot}1s\n"
        use = ToolUseBlock(id=call_id, name="bash", input={"command": command})
        title, kind = command, "execute"
        displays = (TextDisplay(text),)
    else:
        pattern = f"compute_totals\\(.*turn{turn}"
        text = "".join(f"src/module_{n}/file_1.py:{n + 3}: {_CODE_LINE}" for n in range(12))
        use = ToolUseBlock(id=call_id, name="search", input={"pattern": pattern})
        title, kind = f"Search {pattern}", "search"
        displays = (TextDisplay(text),)
    record = ToolCallRecord(
        session_id=session_id,
        tool_call_id=call_id,
        title=title,
        kind=kind,  # type: ignore[arg-type]
        status="completed",
        content=[tool_display_to_json(d) for d in displays],
        raw_input=dict(use.input),
    )
    return _Call(use, ToolResultBlock(tool_use_id=call_id, content=text), record)


def build_session(
    db: Path,
    cwd: Path,
    messages: int,
    session_id: str = SESSION_ID,
    provider: str = PROVIDER,
    model: str = MODEL,
) -> tuple[int, int]:
    """Write the session; returns (messages written, tool calls written)."""
    written = calls = 0
    # The build is set-up, not the thing measured: skip the per-commit fsync.
    with SqliteStore(db, synchronous="OFF") as store:
        store.create(
            SessionRecord(
                id=session_id,
                cwd=str(cwd),
                provider=provider,
                model=model,
                mode="ask",
                title="Refactor the totals computation across modules",
            )
        )

        def append(role: Role, content: list[ContentBlock]) -> None:
            nonlocal written
            store.append_message(session_id, Message(role=role, content=tuple(content)))
            written += 1

        turn = 0
        while written < messages:
            remaining = messages - written
            prompt = (
                f"Turn {turn}: update module_{turn % 97} so totals round half up, "
                "then run its tests and tell me what changed."
            )
            append("user", [TextBlock(text=prompt)])
            if remaining == 1:
                break  # an odd count ends on a prompt not yet answered
            # Two tool rounds of 1-3 calls when they fit, so the log ends on a whole turn.
            rounds = 2 if remaining >= 6 else 1 if remaining >= 4 else 0
            for step in range(rounds):
                batch = [
                    _call(turn, step * 3 + slot, session_id, cwd)
                    for slot in range(1 + (turn + step) % 3)
                ]
                assistant: list[ContentBlock] = []
                if step == 0:
                    assistant.append(
                        ThinkingBlock(
                            thinking="I should look at the module and its tests first. " * 4,
                            signature="EqQBCkYIBxgCKkD" + "x" * 120,
                        )
                    )
                assistant.append(TextBlock(text=f"Let me check module_{turn % 97} ({step})."))
                assistant.extend(c.use for c in batch)
                append("assistant", assistant)
                for c in batch:
                    store.upsert_tool_call(c.record)
                    calls += 1
                append("user", [c.result for c in batch])
            summary = (
                f"Done: module_{turn % 97} now rounds half up; its 60 tests pass. "
                "The change touches compute_totals only; callers are unaffected. " * 2
            )
            append("assistant", [TextBlock(text=summary)])
            turn += 1
    return written, calls


# --- one run of the real agent -------------------------------------------------------------


def _env(state: Path, script: Path | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DEFECT_", "ANTHROPIC_"))}
    env["PYTHONPATH"] = str(REPO)
    env["DEFECT_STATE_DIR"] = str(state)
    env["DEFECT_LOG_LEVEL"] = "warning"
    env["XDG_CONFIG_HOME"] = str(state / "config")  # no user configuration in the figures
    if script is not None:
        env["DEFECT_SCRIPT"] = str(script)
    return env


@dataclass
class Seen:
    """What came before an answer: updates, and when (perf_counter; 0.0: never)."""

    updates: int = 0
    first: float = 0.0
    first_watched: float = 0.0
    last_watched: float = 0.0
    answered: float = 0.0


class Agent:
    """One `defect acp` process, spoken to in raw JSON lines."""

    def __init__(self, state: Path, cwd: Path, script: Path | None = None) -> None:
        self.started = time.perf_counter()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "defect_cli", "acp"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=_env(state, script),
            cwd=str(cwd),
        )
        self.cwd = cwd
        self._next_id = 0

    def send(self, method: str, params: dict[str, Any]) -> int:
        assert self.proc.stdin is not None
        self._next_id += 1
        message = {"jsonrpc": "2.0", "id": self._next_id, "method": method, "params": params}
        self.proc.stdin.write((json.dumps(message) + "\n").encode())
        self.proc.stdin.flush()
        return self._next_id

    def answer(self, request_id: int, watch: bytes = b"") -> Seen:
        """Read until the answer to `request_id`, noting the updates that came before it."""
        assert self.proc.stdout is not None
        seen = Seen()
        while True:
            raw = self.proc.stdout.readline()
            if not raw:
                raise RuntimeError("the agent closed stdout before answering")
            if b'"session/update"' in raw:  # a notification: counted, not parsed (client cost)
                now = time.perf_counter()
                seen.updates += 1
                seen.first = seen.first or now
                if watch and watch in raw:
                    seen.first_watched = seen.first_watched or now
                    seen.last_watched = now
                continue
            message = json.loads(raw)
            if message.get("id") == request_id and "method" not in message:
                if "error" in message:
                    raise RuntimeError(f"request {request_id} failed: {message['error']}")
                seen.answered = time.perf_counter()
                return seen

    def cpu_seconds(self) -> float:
        """The agent's CPU time so far, every thread (NaN where /proc is not Linux's)."""
        stat = Path(f"/proc/{self.proc.pid}/stat")
        if not stat.exists():
            return float("nan")
        fields = stat.read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def peak_rss_mb(self) -> float:
        status = Path(f"/proc/{self.proc.pid}/status")
        for line in status.read_text().splitlines() if status.exists() else []:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        return float("nan")  # not Linux: no figure

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def load_run(state: Path, cwd: Path, session_id: str) -> dict[str, float]:
    """Spawn, initialize, load `session_id`; the timings, the update count and the RSS."""
    agent = Agent(state, cwd)
    try:
        agent.answer(agent.send("initialize", {"protocolVersion": 1}))
        t_init = time.perf_counter()
        cpu = agent.cpu_seconds()
        load = {"cwd": str(cwd), "sessionId": session_id, "mcpServers": []}
        seen = agent.answer(agent.send("session/load", load))
        t_load = seen.answered
        cpu = agent.cpu_seconds() - cpu
        rss = agent.peak_rss_mb()
    finally:
        agent.close()
    return {
        "init": t_init - agent.started,
        "load": t_load - t_init,
        "first": (seen.first or t_load) - t_init,
        "total": t_load - agent.started,
        "updates": float(seen.updates),
        "rss": rss,
        "cpu": cpu,
    }


def delta_run(state: Path, cwd: Path, session_id: str, script: Path) -> tuple[float, float]:
    """Seconds per streamed delta of a 3,000-word answer on `session_id`'s history, and from
    the prompt sent to its first streamed chunk (the request's work on the loaded history:
    its messages parsed, the outbound copy repaired)."""
    agent = Agent(state, cwd, script)
    try:
        agent.answer(agent.send("initialize", {"protocolVersion": 1}))
        load = {"cwd": str(cwd), "sessionId": session_id, "mcpServers": []}
        agent.answer(agent.send("session/load", load))
        prompt = {"sessionId": session_id, "prompt": [{"type": "text", "text": "Go on."}]}
        sent = time.perf_counter()
        seen = agent.answer(agent.send("session/prompt", prompt), b"agent_message_chunk")
    finally:
        agent.close()
    if not seen.first_watched:
        raise RuntimeError("the turn streamed no answer")
    per_delta = (seen.last_watched - seen.first_watched) / (ANSWER_WORDS - 1)
    return per_delta, seen.first_watched - sent


def expected_updates(db: Path, session_id: str = SESSION_ID) -> int:
    """What a complete replay shows: one update per user text, agent text, thought and tool
    call (tool results are shown through their tool call, not on their own)."""
    with SqliteStore(db) as store:
        stored = store.load(session_id)
    count = 0
    for message in stored.transcript:
        for block in message.content:
            if isinstance(block, TextBlock | ThinkingBlock | ToolUseBlock):
                count += 1
    return count


def write_script(path: Path) -> Path:
    """The offline model's answer: `ANSWER_WORDS` words, streamed one delta each, at once.
    Its usage is given, as a real API reports it: the offline model would otherwise count
    the whole history after the last delta (once a request, not per delta, but inside the
    span measured)."""
    words = " ".join(f"word{n}" for n in range(ANSWER_WORDS))
    usage = {"input_tokens": 1000, "output_tokens": ANSWER_WORDS}
    path.write_text(json.dumps({"replies": [{"text": words, "usage": usage}], "loop": True}))
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--long-runs", type=int, default=3)
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--long", type=int, default=100_000)
    parser.add_argument("--quick", action="store_true", help="30k for the long session, fewer runs")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if args.quick:
        args.runs, args.long_runs, args.long = 3, 1, min(args.long, 30_000)

    with tempfile.TemporaryDirectory(prefix="defect-bench-load-") as tmp:
        root = Path(tmp)
        state, long_state, cwd = root / "state", root / "long-state", root / "work"
        for directory in (state, long_state, cwd / ".defect"):
            directory.mkdir(parents=True)
        # The turns must not compact the long history away: a window it fits in.
        (cwd / ".defect" / "config.toml").write_text(
            f'[context_windows]\n"{OFFLINE_MODEL}" = 2000000000\n'
        )
        script = write_script(root / "answer.json")
        db, long_db = state / DB_FILENAME, long_state / DB_FILENAME
        t0 = time.perf_counter()
        written, calls = build_session(db, cwd, args.messages)
        offline = {"provider": OFFLINE_PROVIDER, "model": OFFLINE_MODEL}
        long_written, long_calls = build_session(long_db, cwd, args.long, LONG_ID, **offline)
        build_session(long_db, cwd, SHORT_MESSAGES, SHORT_ID, **offline)
        built = time.perf_counter() - t0
        want = expected_updates(db)
        want_long = expected_updates(long_db, LONG_ID)
        size_mb = sum(p.stat().st_size for p in state.iterdir()) / 1e6
        long_mb = sum(p.stat().st_size for p in long_state.iterdir()) / 1e6

        load_run(state, cwd, SESSION_ID)  # warm the page cache and the bytecode; not counted
        runs = [load_run(state, cwd, SESSION_ID) for _ in range(args.runs)]
        load_run(long_state, cwd, LONG_ID)
        long_runs = [load_run(long_state, cwd, LONG_ID) for _ in range(args.long_runs)]
        # Turns last: each adds its prompt and answer to the history it ran on.
        long_delta: list[tuple[float, float]] = []
        short_delta: list[tuple[float, float]] = []
        for _ in range(2 if args.quick else 3):
            short_delta.append(delta_run(long_state, cwd, SHORT_ID, script))
            long_delta.append(delta_run(long_state, cwd, LONG_ID, script))

    def med(results: list[dict[str, float]], key: str) -> float:
        return statistics.median(r[key] for r in results)

    complete = all(int(r["updates"]) == want for r in runs)
    complete_long = all(int(r["updates"]) == want_long for r in long_runs)
    load, long_load = med(runs, "load"), med(long_runs, "load")
    first, rss = med(long_runs, "first"), max(r["rss"] for r in long_runs)
    per_delta = statistics.median(d for d, _ in long_delta)
    per_delta_short = statistics.median(d for d, _ in short_delta)
    first_chunk = statistics.median(c for _, c in long_delta)
    first_chunk_short = statistics.median(c for _, c in short_delta)
    ratio = per_delta / per_delta_short if per_delta_short else float("inf")
    figures: list[dict[str, Any]] = [
        {
            "name": "spawn → initialize answered",
            "value": round(med(runs, "init") * 1000, 1),
            "unit": "ms",
            "target": "reference",
            "ok": None,
        },
        {
            "name": f"session/load + replay, {written} messages",
            "value": round(load * 1000, 1),
            "unit": "ms",
            "target": f"≤ {TARGET_SECONDS * 1000:.0f} ms",
            "ok": load <= TARGET_SECONDS and complete,
        },
        {
            "name": "spawn → session/load answered",
            "value": round(med(runs, "total") * 1000, 1),
            "unit": "ms",
            "target": "reference",
            "ok": None,
        },
        {
            "name": "updates replayed per load",
            "value": int(med(runs, "updates")),
            "unit": "",
            "target": f"= {want}",
            "ok": complete,
        },
        {
            "name": f"session/load + replay, {long_written} messages",
            "value": round(long_load * 1000, 1),
            "unit": "ms",
            "target": f"≤ {TARGET_LONG_SECONDS * 1000:.0f} ms",
            "ok": long_load <= TARGET_LONG_SECONDS and complete_long,
        },
        {
            "name": f"agent CPU, load + replay, {written} msgs",
            "value": round(med(runs, "cpu") * 1000, 1),
            "unit": "ms",
            "target": "reference",
            "ok": None,
        },
        {
            "name": f"agent CPU, load + replay, {long_written} msgs",
            "value": round(med(long_runs, "cpu") * 1000, 1),
            "unit": "ms",
            "target": "reference",
            "ok": None,
        },
        {
            "name": f"load sent → first update, {long_written} msgs",
            "value": round(first * 1000, 1),
            "unit": "ms",
            "target": f"≤ {TARGET_FIRST_UPDATE * 1000:.0f} ms",
            "ok": first <= TARGET_FIRST_UPDATE,
        },
        {
            "name": f"agent peak RSS, {long_written} msgs loaded",
            "value": round(rss, 1),
            "unit": "MB",
            "target": f"≤ {TARGET_RSS_MB:.0f} MB",
            "ok": rss <= TARGET_RSS_MB,
        },
        {
            "name": f"turn: per delta, {long_written + 2}+ msg history",
            "value": round(per_delta * 1e6, 1),
            "unit": "µs",
            "target": f"≤ {TARGET_DELTA_RATIO}× floor",
            "floor": f"{per_delta_short * 1e6:.1f} µs on {SHORT_MESSAGES} msgs",
            "ok": ratio <= TARGET_DELTA_RATIO,
        },
        {
            "name": f"turn: prompt → first chunk, {long_written}+ msgs",
            "value": round(first_chunk * 1000, 1),
            "unit": "ms",
            "target": "reference",
            "floor": f"{first_chunk_short * 1000:.1f} ms on {SHORT_MESSAGES} msgs",
            "ok": None,
        },
    ]
    print(
        f"session/load of {written} messages, {calls} tool calls ({size_mb:.1f} MB on disk) "
        f"and of {long_written} messages, {long_calls} tool calls ({long_mb:.1f} MB), built in "
        f"{built:.1f} s; medians of {args.runs} and {args.long_runs} runs"
    )
    for f in figures:
        status = "" if f["ok"] is None else ("OK" if f["ok"] else "MISS")
        floor = f"  (floor: {f['floor']})" if "floor" in f else ""
        print(f"  {f['name']:<44} {f['value']:>9} {f['unit']:<3} {f['target']:<14} {status}{floor}")
    if args.json:
        args.json.write_text(json.dumps({"figures": figures}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
