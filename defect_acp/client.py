"""The client side of `defect acp`: start it as an editor does, and end it without leftovers.

Owns what every client of defect's own shares — `defect transcript run|record`
(`defect_transcript`), the demo of `make run` (`scripts/demo_client.py`) and the benchmarks:
`agent_command` (this checkout's `python -m defect_cli acp`), `with_checkout_on_path` (so that
command imports this checkout), `spawn_agent` (the agent in its own process group, its stdio
piped, lines up to `LINE_LIMIT`), `kill_group` and `end_agent`.

This is the public client API of the package: scripts and the transcript tool import this
module, and nothing else of `defect_acp` (docs/layers.md). What goes over the pipes is up to
the caller: the transcript tool writes and reads raw JSON-RPC lines (it must be able to send
what no SDK would), the demo wraps them in the ACP SDK's `ClientSideConnection`.

Invariants:
- The agent and everything it starts end together: it is started with `start_new_session` and
  ended with `killpg(SIGKILL)` on its group — never `proc.kill()`, which would reap it behind
  asyncio's child watcher and turn exit code -9 into 255.
- Only the standard library is imported (`defect --help` builds the transcript parser, and a
  client never needs the server's modules, the runtime or the ACP SDK).

Why: a client that leaks an agent (or a tool the agent spawned) hangs CI; one place starts and
ends it, the same way for every client.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO

LINE_LIMIT = 64 * 1024 * 1024
"""The longest line a client reads from the agent (the agent's own limit is 50 MiB)."""
STDIN_CLOSE_GRACE_SECONDS = 3.0
"""How long `end_agent(graceful=True)` waits for the agent to exit after its stdin closed
(defect answers what it received and exits 0 well within it)."""
KILL_WAIT_SECONDS = 5.0


def checkout_root() -> Path:
    """The directory this `defect_acp` package sits in (the checkout, or site-packages)."""
    return Path(__file__).resolve().parents[1]


def agent_command(python: str | None = None) -> list[str]:
    """`defect acp` as this interpreter runs it: `python -m defect_cli acp`."""
    return [python or sys.executable, "-m", "defect_cli", "acp"]


def with_checkout_on_path(env: Mapping[str, str], *extra: str) -> dict[str, str]:
    """A copy of `env` whose `PYTHONPATH` starts with this checkout (then `extra`), so that
    `agent_command()` imports this copy of defect whatever the working directory."""
    paths = (str(checkout_root()), *extra, env.get("PYTHONPATH", ""))
    return {**env, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}


async def spawn_agent(
    command: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | Path | None = None,
    stderr: int | IO[bytes] | None = None,
) -> asyncio.subprocess.Process:
    """Start the agent in its own process group, stdin and stdout piped (raises `OSError`
    when it cannot start). `stderr` None: the agent writes to ours."""
    return await asyncio.create_subprocess_exec(
        *command,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=stderr,
        cwd=str(cwd) if cwd is not None else None,
        env=dict(env) if env is not None else None,
        start_new_session=True,
        limit=LINE_LIMIT,
    )


def kill_group(proc: asyncio.subprocess.Process) -> None:
    """SIGKILL the process group `proc` leads (it was started by `spawn_agent`).

    Only `killpg`: `proc.kill()` would poll the child first, reaping it behind asyncio's child
    watcher, which then reports exit code 255 instead of -9."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


async def wait_exit(proc: asyncio.subprocess.Process, seconds: float) -> int | None:
    """The agent's exit code, or None if it is still running after `seconds`."""
    try:
        return await asyncio.wait_for(proc.wait(), seconds)
    except TimeoutError:
        return None


def close_stdin(proc: asyncio.subprocess.Process) -> None:
    if proc.stdin is not None and not proc.stdin.is_closing():
        proc.stdin.close()


async def end_agent(proc: asyncio.subprocess.Process, *, graceful: bool) -> int | None:
    """End the agent and its group: when `graceful`, close its stdin and give it
    `STDIN_CLOSE_GRACE_SECONDS` to exit on its own; then kill the group. Returns the exit code
    (None if even the kill did not end it within `KILL_WAIT_SECONDS`)."""
    if graceful and proc.returncode is None:
        close_stdin(proc)
        await wait_exit(proc, STDIN_CLOSE_GRACE_SECONDS)
    kill_group(proc)
    return await wait_exit(proc, KILL_WAIT_SECONDS)
