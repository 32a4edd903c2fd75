"""One command hook, run as a process: what it is given, how long it may take, what it said.

Owns `run_command` and `HookOutcome`, the answer of one hook. A command hook runs as
`/bin/sh -c COMMAND` (so a hook line may use pipes, `&&` and `$VARIABLES`, as in a Makefile),
in the session's directory, in a process group of its own, with the event described as one
JSON object on its stdin and `DEFECT_HOOK_EVENT`, `DEFECT_SESSION_ID` and `DEFECT_PROJECT_DIR`
in its environment — defect's own without the provider credentials and the secret-looking
variables (`defect_core/child_env.py`: a hook is a command like any other). Its answer:

    exit 0, no output            nothing to say (the event goes on)
    exit 0, a JSON object        {"decision": "allow" | "deny", "reason": "…", "context": "…"}
    exit 0, other text           that text is context for the model
    exit 2                       deny; the reason is its stderr (else its stdout)
    any other exit, a timeout    the hook failed: logged and skipped

Invariants:
- A hook never kills a turn: a failure, a timeout, a crash to start or an answer that is not
  understood is logged (naming the hook and its file) and is no answer (`None`).
- A hook outlives nothing: at its timeout, or when the turn is cancelled, its whole process
  group is killed before this returns.
- What a hook says is bounded (`MAX_ANSWER_CHARS`): a chatty hook cannot flood the context.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from defect_core.child_env import DEFAULT_POLICY, EnvPolicy
from defect_core.hooks.spec import HookSpec
from defect_core.log import get_logger

log = get_logger("defect.hooks")

MAX_ANSWER_CHARS = 10_000
DENY_EXIT = 2

Decision = Literal["allow", "deny"]


@dataclass(frozen=True, slots=True)
class HookOutcome:
    """What one hook answered. `stop` and `announce` are for built-in hooks only."""

    decision: Decision | None = None
    reason: str = ""
    """Why it denied: the model reads it (a refused tool call, a turn sent round again)."""
    context: str = ""
    """Text added to the model's input at this event."""
    stop: Literal["max_turn_requests"] | None = None
    """End the turn now with this stop reason (a goal out of rounds)."""
    announce: str = ""
    """A short line the user sees (e.g. "Goal round 2/20")."""


async def run_command(
    spec: HookSpec,
    payload: dict[str, Any],
    cwd: Path,
    session_id: str,
    policy: EnvPolicy = DEFAULT_POLICY,
) -> HookOutcome | None:
    """Run `spec.command` with `payload` on stdin; its outcome, or None (nothing, or failed)."""
    assert spec.command is not None
    env = policy.apply(
        os.environ,
        {
            "DEFECT_HOOK_EVENT": spec.event,
            "DEFECT_SESSION_ID": session_id,
            "DEFECT_PROJECT_DIR": str(cwd),
        },
    )
    where = {"hook": spec.label, "origin": spec.origin}
    try:
        proc = await asyncio.create_subprocess_exec(
            "/bin/sh",
            "-c",
            spec.command,
            cwd=str(cwd),
            env=env,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
    except OSError as exc:
        log.warning("hook_failed", **where, error=f"could not start: {exc}")
        return None
    data = json.dumps(payload, ensure_ascii=False).encode()
    try:
        out, err = await asyncio.wait_for(proc.communicate(data), spec.timeout)
    except TimeoutError:
        _kill(proc)
        await proc.wait()
        log.warning("hook_failed", **where, error=f"timed out after {spec.timeout:g} s")
        return None
    except BaseException:  # cancelled with the turn: the hook goes with it
        _kill(proc)
        with contextlib.suppress(BaseException):
            await asyncio.shield(proc.wait())
        raise
    _kill(proc)  # whatever it left running in its group
    stdout = out.decode(errors="replace").strip()
    stderr = err.decode(errors="replace").strip()
    if proc.returncode == DENY_EXIT:
        reason = (stderr or stdout or "denied by a hook")[:MAX_ANSWER_CHARS]
        return HookOutcome(decision="deny", reason=reason)
    if proc.returncode != 0:
        log.warning(
            "hook_failed", **where, error=f"exit status {proc.returncode}", stderr=stderr[-400:]
        )
        return None
    return _answer(stdout, where)


def _answer(stdout: str, where: dict[str, str]) -> HookOutcome | None:
    if not stdout:
        return None
    if not stdout.startswith("{"):
        return HookOutcome(context=stdout[:MAX_ANSWER_CHARS])
    try:
        answer = json.loads(stdout)
    except json.JSONDecodeError as exc:
        log.warning("hook_failed", **where, error=f"its output is not JSON: {exc}")
        return None
    decision = answer.get("decision")
    reason, context = answer.get("reason", ""), answer.get("context", "")
    if decision not in (None, "allow", "deny") or not (
        isinstance(reason, str) and isinstance(context, str)
    ):
        log.warning(
            "hook_failed",
            **where,
            error='expected {"decision": "allow" | "deny", "reason": str, "context": str}',
        )
        return None
    return HookOutcome(
        decision=decision, reason=reason[:MAX_ANSWER_CHARS], context=context[:MAX_ANSWER_CHARS]
    )


def _kill(proc: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
