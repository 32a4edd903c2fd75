"""`defect exec`: one turn (or one goal) in the current directory, without an editor.

Owns the headless front end: it drives the runtime through the same door as the ACP bridge
(`AgentCore`/`Session`, on a core from `defect_cli/wiring.py`, with local backends and the
session store — no ACP), prints the answer on stdout and the tool activity on stderr, and
turns the stop reason into the exit status. A goal runs as an editor's `/goal` does
(`Session.run_goal`). For CI and scripts:

    defect exec "summarise the failing tests"             # the answer, streamed, on stdout
    defect exec --mode yolo --goal "make the tests pass"  # a goal, until goal_done
    defect exec --output stream-json "list the TODOs"     # one JSON event per line
    defect exec --input-format stream-json < messages.jsonl  # the prompt, then steers

Output (`--output`, written by `defect_cli/exec_output.py`):
- `text` (default): the answer's text as it streams (a blank line between the texts of
  successive model requests); tool calls with their results, goal rounds and notices on
  stderr.
- `json`: one JSON object on stdout when the turn ends, `{"type": "result", ...}` (session id,
  stop reason, exit code, the answer's text, usage, the goal's outcome, every tool call with
  its result).
- `stream-json`: one JSON object per line as things happen (`text`, `thought`, `tool_call`,
  `tool_call_update` with the whole result, `permission_denied`, `notice`, `plan`), then the
  same `result` line.

Input (`--input-format`): `text` (default) reads the prompt from the argument or stdin;
`stream-json` reads one JSON message per line (Claude Code's shape, `defect_cli/exec_input.py`):
the first is the prompt (unless the argument or `--goal` gives one), each later one is a steer
delivered at the running turn's next safe point, and the run ends at the end of input once
the last turn has ended.

Exit status (`EXIT_CODES`): 0 `end_turn`; 1 the turn failed (the model or the store: the
reason on stderr); 2 bad usage or configuration (a `--model` the provider does not offer);
3 `max_turn_requests` (a goal out of rounds too); 4 `max_tokens`; 5 `refusal`; 6 the model
called tools and every call was refused because no one could approve it; 130 `cancelled`
(SIGINT/SIGTERM, or stdout's reader went away).

Invariants:
- Nobody is asked: a tool call the mode would ask about is refused with the answer
  `policy.NOBODY_TO_ASK` (the model reads that no one was there to approve it, never that a
  user rejected it; stderr says it once, with why); `--mode yolo` runs everything,
  `--mode accept-edits` edits files.
- stdout carries the answer (or the JSON lines) and nothing else: before the session starts,
  fd 1 is pointed at stderr and the real stdout is kept for this module's writes, so a library
  or a child process that prints cannot mix into it.
- `--model` is chosen as `session/set_config_option` chooses a model: one the provider does
  not offer is refused (exit 2), never sent to the provider as if it were configured.
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

import os
import signal
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream

from defect_cli.exec_input import StdinLines, converse
from defect_cli.exec_output import OUTPUTS, Printer
from defect_cli.wiring import exec_core
from defect_core import events as ev
from defect_core.config import ConfigError, Settings, load_settings
from defect_core.errors import AgentError, InvalidOption
from defect_core.log import get_logger
from defect_core.model import ContentBlock, TextBlock
from defect_core.policy import NOBODY_TO_ASK
from defect_core.session import (
    Backends,
    Frontend,
    LocalFsBackend,
    LocalShellBackend,
    Session,
)
from defect_core.store import AsyncStore

log = get_logger("defect.exec")

__all__ = ["EXIT_CODES", "OUTPUTS", "ExecRequest", "claim_stdout", "run_exec"]

EXIT_CODES: dict[str, int] = {
    "end_turn": 0,
    "failed": 1,
    "usage": 2,
    "max_turn_requests": 3,
    "max_tokens": 4,
    "refusal": 5,
    "denied": 6,
    "cancelled": 130,
}


@dataclass
class ExecRequest:
    prompt: str
    goal: str | None
    mode: str | None
    output: str
    flags: dict[str, object] = field(default_factory=dict)
    model: str | None = None
    """`--model`: chosen as `session/set_config_option` chooses it, so a model the provider
    does not offer is refused (the configuration's flags would take any id)."""
    trust_project: bool = False
    """`--trust-project`: the project's own settings that need trust apply for this run."""
    input_format: str = "text"
    """`stream-json`: the user's messages are JSON lines on stdin (`exec_input.py`)."""


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
    core = exec_core(settings, store, store_problem)
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
        if request.model is not None:
            await _select_model(session, request.model)
        for notice in session.notices():
            printer.event(ev.Notice(notice, "warning"))
        lines = StdinLines() if request.input_format == "stream-json" else None
        first: list[ContentBlock] | None = None  # the prompt, read as stdin's first message
        if lines is not None:
            lines.start()
            if not request.prompt and request.goal is None:
                first = await lines.first()
                if first is None:
                    raise InvalidOption("no message on stdin (--input-format stream-json)")
        stop, error = await _turn(session, request, printer, lines, first)
    except AgentError as exc:  # a refused session (configuration, store) or --model
        sys.stderr.write(f"defect exec: {exc}\n")
        return EXIT_CODES["usage"]
    finally:
        with anyio.CancelScope(shield=True):
            await core.aclose()
    code = EXIT_CODES["failed"] if error is not None else EXIT_CODES.get(stop, 1)
    why = f"the turn failed: {error}" if error is not None else None
    if code == 0 and printer.denied and not printer.ran:
        # Nothing the model wanted to do could be done: the run did not do its job.
        code = EXIT_CODES["denied"]
        why = (
            f"every tool call was refused: mode {session.current_mode()!r} asks for them and "
            "no one is there to approve (--mode accept-edits or yolo)"
        )
    goal = session.last_goal.to_dict() if session.last_goal is not None else None
    printer.result(session.id, stop, code, error, goal)  # the answer's last line first
    if why is not None:
        sys.stderr.write(f"defect exec: {why}\n")
    return code


async def _select_model(session: Session, model: str) -> None:
    """Talk to `model`, one of the models the provider offers (its live list is asked for
    only when its catalogue does not name it); else `InvalidOption`, naming the choices."""
    try:
        await session.set_config_option("model", model)
    except InvalidOption:
        await session.refresh_models()
        await session.set_config_option("model", model)


async def _turn(
    session: Session,
    request: ExecRequest,
    printer: Printer,
    lines: StdinLines | None,
    stdin_prompt: list[ContentBlock] | None,
) -> tuple[str, str | None]:
    """Run the turn (or the goal; with `lines`, steered and followed by stdin's messages)
    while printing its events, its prompt `stdin_prompt` when stdin gave it; (stop reason,
    failure message or None)."""
    text: list[ContentBlock] = [TextBlock(text=request.prompt)] if request.prompt else []
    text = stdin_prompt or text
    stream = session.subscribe()
    assert isinstance(stream, MemoryObjectReceiveStream)  # read without waiting, below
    outcome: dict[str, Any] = {"stop": "cancelled", "error": None}

    def handle(event: ev.AgentEvent) -> None:
        if isinstance(event, ev.PermissionRequested):
            printer.refused(event, session.current_mode())
            session.resolve_permission(event.tool_call_id, NOBODY_TO_ASK)
        else:
            printer.event(event)
        if printer.broken:  # nobody reads the answer any more
            session.cancel_turn()

    async def follow() -> None:
        async for event in stream:
            handle(event)

    async with stream:
        async with anyio.create_task_group() as tg:
            tg.start_soon(follow)
            with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                tg.start_soon(_cancel_on_signal, signals, session)
                goal = request.goal

                async def first() -> ev.TurnStopReason:
                    if goal is not None:
                        return await session.run_goal(goal, text)
                    return await session.run_turn(text)

                try:
                    outcome["stop"] = await (
                        first() if lines is None else converse(session, first, lines)
                    )
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


async def _cancel_on_signal(signals: Any, session: Session) -> None:
    async for _ in signals:
        session.cancel_turn()


def claim_stdout() -> IO[str]:
    """The real stdout, for the answer alone; fd 1 (and `sys.stdout`) now go to stderr."""
    sys.stdout.flush()
    fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return os.fdopen(fd, "w", encoding="utf-8", buffering=1)
