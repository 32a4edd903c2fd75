"""The agent under test: a process in its own process group, its stdout read line by line.

Owns `AgentProcess` (writes to the agent's stdin with a timeout, keeps every line the agent
writes as an `Incoming`, ends the agent), `StepFailed` (what a step raises when it does not
hold — it lives here because the first such failure is writing to an agent that is gone) and
what the runner and the recorder share about the wire: `id_key`.

Invariant: the agent and everything it starts end together: it is started and ended by
`defect_acp.client` (`spawn_agent`, `end_agent`: its own process group, killed as a group).
Every line the agent writes is kept, in order, JSON or not. Only the standard library (and
`defect_acp.client`, which imports nothing else) is imported.

Why: a transcript must never outlive its run (a leaked agent, or a tool it spawned, hangs
CI), and a failure report must be able to show exactly what the agent wrote.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from defect_acp import client
from defect_transcript.patterns import Mismatch


@dataclass(frozen=True)
class Incoming:
    """One line the agent wrote; `message` is None when the line was not a JSON object."""

    index: int
    raw: str
    message: dict[str, Any] | None
    at: float


class StepFailed(Exception):
    """A step did not hold; carries what the failure report shows."""

    def __init__(
        self,
        problem: str,
        *,
        expected: Any = None,
        candidates: Sequence[tuple[Incoming, Mismatch | None]] = (),
        skipped: int = 0,
    ) -> None:
        super().__init__(problem)
        self.problem = problem
        self.expected = expected
        self.candidates = list(candidates)
        self.skipped = skipped


MessageObserver = Callable[[dict[str, Any], "str | None"], None]
"""Called with each agent message and, for a response, the method it answers (may raise)."""


class AgentProcess:
    """A spawned agent in its own process group, its stdout read line by line."""

    def __init__(self, proc: asyncio.subprocess.Process, generation: int) -> None:
        self.proc = proc
        self.generation = generation
        self.messages: list[Incoming] = []
        self.arrived = asyncio.Event()
        self.eof = False
        self.killed = False
        self.observer: Callable[[dict[str, Any]], None] | None = None
        self._reader = asyncio.create_task(self._read(), name="transcript-agent-reader")

    @property
    def pid(self) -> int:
        return self.proc.pid

    async def _read(self) -> None:
        stdout = self.proc.stdout
        assert stdout is not None
        started = time.monotonic()
        try:
            while True:
                try:
                    line = await stdout.readline()
                except ValueError:
                    line = b'"(a line longer than the reader\'s limit)"\n'
                if not line:
                    break
                raw = line.decode("utf-8", errors="replace").rstrip("\r\n")
                try:
                    parsed = json.loads(raw)
                except json.JSONDecodeError:
                    parsed = None
                message = parsed if isinstance(parsed, dict) else None
                self.messages.append(
                    Incoming(len(self.messages), raw, message, time.monotonic() - started)
                )
                if message is not None and self.observer is not None:
                    self.observer(message)
                self.arrived.set()
        finally:
            self.eof = True
            self.arrived.set()

    async def write(self, data: bytes, seconds: float) -> None:
        stdin = self.proc.stdin
        if stdin is None or stdin.is_closing():
            raise StepFailed("the agent's stdin is closed (after close_stdin or kill)")
        try:
            stdin.write(data)
            await asyncio.wait_for(stdin.drain(), seconds)
        except (BrokenPipeError, ConnectionResetError):
            raise StepFailed(
                f"the agent is gone (exit code {self.proc.returncode}); cannot write to it"
            ) from None
        except TimeoutError:
            raise StepFailed(f"the agent did not read its stdin within {seconds:g} s") from None

    def close_stdin(self) -> None:
        client.close_stdin(self.proc)

    def kill_group(self) -> None:
        """SIGKILL the agent and everything in its process group."""
        self.killed = True
        client.kill_group(self.proc)

    async def wait_exit(self, seconds: float) -> int | None:
        return await client.wait_exit(self.proc, seconds)

    async def stop(self, *, graceful: bool) -> None:
        """End the agent: close stdin and wait a little when `graceful`, then kill the group."""
        self.killed = True
        await client.end_agent(self.proc, graceful=graceful)
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._reader


def id_key(value: Any) -> str:
    """A JSON-RPC id as a dict key (the id 1 and the id "1" stay apart)."""
    return json.dumps(value, sort_keys=True)
