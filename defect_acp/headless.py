"""`defect exec`: one turn (or one goal) in the current directory, without an editor.

Owns the headless front end: it drives the runtime directly (`DefaultAgentCore`, local
backends, the session store — no ACP), prints the answer on stdout and the tool activity on
stderr, and turns the stop reason into the exit status. For CI and scripts:

    defect exec "summarise the failing tests"             # the answer, streamed, on stdout
    defect exec --mode yolo --goal "make the tests pass"  # a goal, until goal_done
    defect exec --output stream-json "list the TODOs"     # one JSON event per line

Output (`--output`):
- `text` (default): the answer's text as it streams; tool calls, goal rounds and notices on
  stderr, one line each.
- `json`: one JSON object on stdout when the turn ends, `{"type": "result", ...}` (session id,
  stop reason, exit code, the answer's text, usage, the goal's outcome).
- `stream-json`: one JSON object per line as things happen (`text`, `thought`, `tool_call`,
  `tool_call_update`, `permission_denied`, `notice`, `plan`), then the same `result` line.

Exit status (`EXIT_CODES`): 0 `end_turn`; 1 the turn failed (the model or the store: the
reason on stderr); 2 bad usage or configuration; 3 `max_turn_requests` (a goal out of rounds
too); 4 `max_tokens`; 5 `refusal`; 130 `cancelled` (SIGINT/SIGTERM).

Invariants:
- Nobody is asked: a tool call the mode would ask about is denied (the model reads that it was
  rejected, stderr says why); `--mode yolo` runs everything, `--mode accept-edits` edits files.
- stdout carries the answer (or the JSON lines) and nothing else: before the session starts,
  fd 1 is pointed at stderr and the real stdout is kept for this module's writes, so a library
  or a child process that prints cannot mix into it.
- The session is saved like an editor's (same store, same cwd), so `session/load` and
  `defect acp --resume` can continue it.
- A project is trusted by the same rules as in an editor (`defect_core/config/trust.py`), with
  nobody to ask: without `--trust-project`, what an untrusted project sets that needs trust
  (its MCP servers, hooks, hosts, widened reach) is not applied and the session's notice on
  stderr lists it; a host the user's configuration does not name for a key is refused. With
  `--trust-project` (CI on a repository the pipeline controls) all of it applies for the run;
  nothing is recorded.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream

from defect_core import events as ev
from defect_core.config import ConfigError, Settings, load_settings
from defect_core.errors import AgentError
from defect_core.log import get_logger
from defect_core.model import TextBlock
from defect_core.policy import REJECT_ONCE
from defect_core.session import Backends, DefaultAgentCore, DefaultSession, Frontend
from defect_core.store import AsyncStore
from defect_core.tools.backends import LocalFsBackend, LocalShellBackend

log = get_logger("defect.exec")

OUTPUTS = ("text", "json", "stream-json")
EXIT_CODES: dict[str, int] = {
    "end_turn": 0,
    "failed": 1,
    "usage": 2,
    "max_turn_requests": 3,
    "max_tokens": 4,
    "refusal": 5,
    "cancelled": 130,
}


@dataclass
class ExecRequest:
    prompt: str
    goal: str | None
    mode: str | None
    output: str
    flags: dict[str, object] = field(default_factory=dict)
    trust_project: bool = False
    """`--trust-project`: the project's own settings that need trust apply for this run."""


def run_exec(
    request: ExecRequest, out: IO[str], store: AsyncStore | None, store_problem: str | None
) -> int:
    """Run the request to its end; the exit status."""
    cwd = Path.cwd()
    try:
        settings = load_settings(cwd, cli=request.flags, trust_project=request.trust_project)
    except ConfigError as exc:
        sys.stderr.write(f"defect exec: {exc}\n")
        return EXIT_CODES["usage"]
    return anyio.run(_run, request, settings, cwd, out, store, store_problem)


async def _run(
    request: ExecRequest,
    settings: Settings,
    cwd: Path,
    out: IO[str],
    store: AsyncStore | None,
    store_problem: str | None,
) -> int:
    core = DefaultAgentCore(settings, store=store, store_problem=store_problem)
    printer = Printer(request.output, out)
    try:
        session = await core.create_session(
            f"exec-{uuid.uuid4().hex[:16]}",
            cwd,
            Backends(
                fs=LocalFsBackend(root=cwd),
                shell=LocalShellBackend(),
                frontend=Frontend(name="exec", client_name="defect exec"),
            ),
        )
        if request.mode is not None:
            await session.set_mode(request.mode)
        for notice in session.notices():
            printer.event(ev.Notice(notice, "warning"))
        stop, error = await _turn(session, request, printer)
    except AgentError as exc:  # a refused session (its configuration, its store)
        sys.stderr.write(f"defect exec: {exc}\n")
        return EXIT_CODES["usage"]
    finally:
        with anyio.CancelScope(shield=True):
            await core.aclose()
    code = EXIT_CODES["failed"] if error is not None else EXIT_CODES.get(stop, 1)
    if error is not None:
        sys.stderr.write(f"defect exec: the turn failed: {error}\n")
    goal = session.last_goal.to_dict() if session.last_goal is not None else None
    printer.result(session.id, stop, code, error, goal)
    return code


async def _turn(
    session: DefaultSession, request: ExecRequest, printer: Printer
) -> tuple[str, str | None]:
    """Run the turn while printing its events; (stop reason, failure message or None)."""
    text = request.prompt
    if request.goal is not None:
        session_prompt = session.start_goal(request.goal)
        if text:
            session_prompt.append(TextBlock(text=text))
    else:
        session_prompt = [TextBlock(text=text)]
    stream = session.subscribe()
    assert isinstance(stream, MemoryObjectReceiveStream)  # read without waiting, below
    outcome: dict[str, Any] = {"stop": "cancelled", "error": None}

    def handle(event: ev.AgentEvent) -> None:
        if isinstance(event, ev.PermissionRequested):
            session.resolve_permission(event.tool_call_id, REJECT_ONCE)
            printer.denied(event, session.current_mode())
        else:
            printer.event(event)

    async def follow() -> None:
        async for event in stream:
            handle(event)

    async with stream:
        async with anyio.create_task_group() as tg:
            tg.start_soon(follow)
            with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                tg.start_soon(_cancel_on_signal, signals, session)
                try:
                    outcome["stop"] = await session.run_turn(session_prompt)
                except AgentError as exc:
                    outcome["stop"], outcome["error"] = "failed", str(exc)
            tg.cancel_scope.cancel()
        # Every event of the turn was sent before `run_turn` returned: what the follower has
        # not read yet is in the stream's buffer, read here without waiting.
        while True:
            try:
                handle(stream.receive_nowait())
            except (anyio.WouldBlock, anyio.EndOfStream):
                break
    return str(outcome["stop"]), outcome["error"]


async def _cancel_on_signal(signals: Any, session: DefaultSession) -> None:
    async for _ in signals:
        session.cancel_turn()


class Printer:
    """Writes what happens: the answer to `out`, the activity to stderr (or JSON lines)."""

    def __init__(self, output: str, out: IO[str]) -> None:
        self._output = output
        self._out = out
        self._titles: dict[str, str] = {}
        self._text: list[str] = []
        self._usage: dict[str, int] | None = None

    def _line(self, data: dict[str, Any]) -> None:
        self._out.write(json.dumps(data, ensure_ascii=False, default=str) + "\n")
        self._out.flush()

    def _activity(self, line: str) -> None:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()

    def event(self, event: ev.AgentEvent) -> None:
        stream = self._output == "stream-json"
        if isinstance(event, ev.AgentTextDelta):
            self._text.append(event.text)
            if stream:
                self._line({"type": "text", "text": event.text})
            elif self._output == "text":
                self._out.write(event.text)
                self._out.flush()
        elif isinstance(event, ev.AgentThoughtDelta):
            if stream:
                self._line({"type": "thought", "text": event.text})
        elif isinstance(event, ev.ToolCallStarted):
            self._titles[event.tool_call_id] = event.title
            if stream:
                self._line(
                    {
                        "type": "tool_call",
                        "id": event.tool_call_id,
                        "name": event.name,
                        "title": event.title,
                        "kind": event.kind,
                        "input": event.raw_input,
                    }
                )
            self._activity(f"→ {event.title}")
        elif isinstance(event, ev.ToolCallUpdated) and event.status in ("completed", "failed"):
            title = self._titles.get(event.tool_call_id, event.tool_call_id)
            detail = _first_text(event.content) if event.status == "failed" else ""
            if stream:
                self._line(
                    {
                        "type": "tool_call_update",
                        "id": event.tool_call_id,
                        "status": event.status,
                        "text": _first_text(event.content),
                    }
                )
            mark = "✓" if event.status == "completed" else "✗"
            self._activity(f"{mark} {title}" + (f": {detail}" if detail else ""))
        elif isinstance(event, ev.PlanUpdated):
            entries = [
                {"content": e.content, "priority": e.priority, "status": e.status}
                for e in event.entries
            ]
            if stream:
                self._line({"type": "plan", "entries": entries})
            marks = {"completed": "✓", "in_progress": "▶", "pending": "○"}
            steps = " · ".join(f"{marks[e.status]} {e.content}" for e in event.entries)
            self._activity(f"plan: {steps or '(cleared)'}")
        elif isinstance(event, ev.Notice):
            if stream:
                self._line({"type": "notice", "level": event.level, "text": event.text})
            self._activity(f"> {event.text}")
        elif isinstance(event, ev.TurnEnded) and event.usage is not None:
            u = event.usage
            self._usage = {
                "input_tokens": u.input_tokens,
                "output_tokens": u.output_tokens,
                "requests": u.requests,
            }

    def denied(self, event: ev.PermissionRequested, mode: str) -> None:
        why = f"mode {mode!r} would ask, and defect exec has nobody to ask (use --mode yolo)"
        if self._output == "stream-json":
            self._line(
                {"type": "permission_denied", "id": event.tool_call_id, "title": event.title}
            )
        self._activity(f"✗ denied: {event.title} ({why})")

    def result(
        self,
        session_id: str,
        stop: str,
        code: int,
        error: str | None,
        goal: dict[str, Any] | None,
    ) -> None:
        if self._output == "text":
            if self._text and not "".join(self._text).endswith("\n"):
                self._out.write("\n")
                self._out.flush()
            return
        self._line(
            {
                "type": "result",
                "session_id": session_id,
                "stop_reason": stop,
                "exit_code": code,
                "text": "".join(self._text),
                "error": error,
                "usage": self._usage,
                "goal": goal,
            }
        )


def _first_text(content: tuple[ev.ToolDisplay, ...] | None) -> str:
    for item in content or ():
        if isinstance(item, ev.TextDisplay):
            return item.text.strip().splitlines()[0][:200] if item.text.strip() else ""
    return ""


def claim_stdout() -> IO[str]:
    """The real stdout, for the answer alone; fd 1 (and `sys.stdout`) now go to stderr."""
    sys.stdout.flush()
    fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return os.fdopen(fd, "w", encoding="utf-8", buffering=1)
