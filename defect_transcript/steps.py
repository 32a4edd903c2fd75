"""Playing a transcript's steps against the agent: what each step kind means.

Owns `Play` (one play of one transcript's steps on a `Stage`: a method per step kind —
`send`, `notify`, `send_raw`, `expect`, `expect_unordered`, `expect_text`, `expect_silence`,
`reply`, `sleep`, `kill`, `restart`, `close_stdin`, `expect_exit`, `expect_file` — the
cursor over the agent's messages, the variables and captures, the agent requests waiting for
a `reply`) and what a failed wait shows (the closest messages, the unexpected one).

Invariants:
- Expectations consume the agent's messages in the order the agent wrote them. Only what the
  step's `ignore` allows (by default `session/update` notifications) is skipped; an
  unexpected response, error or agent request fails the step at once, and is shown.
- Every waiting step has a timeout (the step's, else the run's default).
- The agent is spoken to only as raw JSON-RPC lines over its stdio (`AgentProcess`). Only the
  standard library is imported besides.

Why: the meaning of each step kind is the transcript format's contract with its writers
(docs/transcripts.md); kept in one place, a step reads as what it checks.
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from defect_transcript.agent import AgentProcess, Incoming, StepFailed, id_key
from defect_transcript.format import ABSENT, ANY, Step
from defect_transcript.patterns import (
    Mismatch,
    UnknownVariable,
    Variables,
    closeness,
    match,
    show,
)
from defect_transcript.stage import RunOptions, Stage


class _Timeout(Exception):
    pass


class Play:
    """One play of one transcript's steps, on its stage."""

    def __init__(self, stage: Stage, options: RunOptions, out: TextIO) -> None:
        self.stage = stage
        self.t = stage.t
        self.vars = stage.vars
        self.workspace = stage.workspace
        self.options = options
        self.out = out
        self.default_timeout = stage.default_timeout
        self.cursor = 0
        self.pending: list[dict[str, Any]] = []
        self.next_id = 1
        self.sent_methods: dict[Any, str] = {}
        self.violations: list[str] = []
        self.steps_run = 0
        self.current: Step | None = None
        """The step being played (None during set-up and after the last step)."""

    async def start(self) -> None:
        """Set the stage up and start the agent."""
        await self.stage.setup()
        await self.spawn()

    async def spawn(self) -> None:
        agent = await self.stage.spawn()
        agent.observer = self._observe
        self.cursor = 0
        self.pending = []
        if self.options.verbose:
            command = shlex.join(self.stage.command)
            self._say(f"  · agent started: {command} (pid {agent.pid})")

    def _observe(self, message: dict[str, Any]) -> None:
        if self.options.on_message is None:
            return
        answered = None
        if "method" not in message and "id" in message:
            answered = self.sent_methods.get(id_key(message.get("id")))
        try:
            self.options.on_message(message, answered)
        except Exception as exc:
            self.violations.append(f"{show(message, 300)}\n    {exc}")

    # --- playing --------------------------------------------------------------------------

    async def play(self) -> None:
        for step in self.t.steps:
            self.current = step
            if self.options.verbose:
                note = f" — {step.options['note']}" if "note" in step.options else ""
                self._say(f"  → {step.where()}{note}")
            try:
                await getattr(self, f"_step_{step.kind}")(step)
            except UnknownVariable as exc:
                raise StepFailed(str(exc)) from None
            self.steps_run = step.number
            self.check_violations()
        self.current = None

    def check_violations(self) -> None:
        if self.violations:
            raise StepFailed(
                "the agent wrote a message its observer rejects:\n  " + self.violations[0]
            )

    def _timeout(self, step: Step) -> float:
        return float(step.options.get("timeout", self.default_timeout))

    def _live_agent(self) -> AgentProcess:
        if self.stage.agent is None:
            raise StepFailed("no agent is running")
        return self.stage.agent

    async def _next(self, deadline: float) -> Incoming | None:
        agent = self._live_agent()
        loop = asyncio.get_running_loop()
        while self.cursor >= len(agent.messages):
            if agent.eof:
                return None
            agent.arrived.clear()
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise _Timeout
            try:
                await asyncio.wait_for(agent.arrived.wait(), remaining)
            except TimeoutError:
                raise _Timeout from None
        item = agent.messages[self.cursor]
        self.cursor += 1
        if self.options.verbose:
            self._say(f"    ← {show(item.message if item.message is not None else item.raw)}")
        return item

    async def _wait_for(
        self,
        step: Step,
        accept: Callable[[dict[str, Any]], bool],
        describe: Any,
        rank: Callable[[dict[str, Any]], int],
        explain: Callable[[dict[str, Any]], Mismatch | None],
        *,
        ignore_default: str = "updates",
    ) -> dict[str, Any]:
        """Consume agent messages until `accept` takes one; skip what `ignore` allows."""
        ignore = step.options.get("ignore", ignore_default)
        timeout = self._timeout(step)
        deadline = asyncio.get_running_loop().time() + timeout
        seen: list[Incoming] = []

        def failure(problem: str, extra: Incoming | None = None) -> StepFailed:
            pool = [i for i in seen if i.message is not None]
            ranked = sorted(pool, key=lambda i: rank(i.message or {}), reverse=True)[:2]
            if extra is not None:
                ranked = [extra, *[i for i in ranked if i is not extra][:1]]
            candidates = [(i, explain(i.message) if i.message else None) for i in ranked]
            return StepFailed(problem, expected=describe, candidates=candidates, skipped=len(seen))

        while True:
            try:
                item = await self._next(deadline)
            except _Timeout:
                raise failure(
                    f"timed out after {timeout:g} s waiting for a matching message"
                ) from None
            if item is None:
                code = await self._live_agent().wait_exit(2.0)
                raise failure(f"the agent closed its output (exit code {code}) before a match")
            message = item.message
            if message is None:
                raise failure(f"the agent wrote a line that is not a JSON object: {item.raw!r}")
            if accept(message):
                return message
            if _skippable(message, ignore):
                self._remember_request(message)
                seen.append(item)
                continue
            seen.append(item)
            raise failure(_unexpected(message, ignore), extra=item)

    def _remember_request(self, message: dict[str, Any]) -> None:
        if "method" in message and "id" in message:
            self.pending.append(message)

    async def _step_send(self, step: Step) -> None:
        value = self.vars.substitute(step.value)
        message: dict[str, Any] = {"jsonrpc": "2.0"}
        if "id" not in value:
            message["id"] = self.next_id
            self.next_id += 1
        message.update(value)
        self.sent_methods[id_key(message.get("id"))] = message["method"]
        self.vars.values["last_id"] = message.get("id")
        await self._write(message, step)

    async def _step_notify(self, step: Step) -> None:
        await self._write({"jsonrpc": "2.0", **self.vars.substitute(step.value)}, step)

    async def _step_send_raw(self, step: Step) -> None:
        value = self.vars.substitute(step.value)
        text = value if isinstance(value, str) else json.dumps(value)
        await self._live_agent().write((text.rstrip("\n") + "\n").encode(), self._timeout(step))

    async def _write(self, message: dict[str, Any], step: Step) -> None:
        data = (json.dumps(message, ensure_ascii=False) + "\n").encode()
        await self._live_agent().write(data, self._timeout(step))

    async def _step_expect(self, step: Step) -> None:
        captures: dict[str, Any] = {}

        def accept(message: dict[str, Any]) -> bool:
            captures.clear()
            return match(step.value, message, self.vars, captures) is None

        message = await self._wait_for(
            step,
            accept,
            step.value,
            lambda m: closeness(step.value, m, self.vars),
            lambda m: match(step.value, m, self.vars),
        )
        self._matched(message, captures)

    def _matched(self, message: dict[str, Any], captures: dict[str, Any]) -> None:
        self.vars.values.update(captures)
        self.vars.values["last"] = message
        self._remember_request(message)

    async def _step_expect_unordered(self, step: Step) -> None:
        remaining = list(step.value)
        while remaining:
            found = self._unordered_accept(remaining)

            def rank(message: dict[str, Any]) -> int:
                return max(closeness(p, message, self.vars) for p in remaining)

            def explain(message: dict[str, Any]) -> Mismatch | None:
                best = max(remaining, key=lambda p: closeness(p, message, self.vars))
                return match(best, message, self.vars)

            message = await self._wait_for(step, found.accept, remaining, rank, explain)
            assert found.hit is not None
            index, captures = found.hit
            remaining.pop(index)
            self._matched(message, captures)

    def _unordered_accept(self, remaining: list[Any]) -> _FirstMatch:
        return _FirstMatch(remaining, self.vars)

    async def _step_expect_text(self, step: Step) -> None:
        kind = step.options.get("kind", "agent_message_chunk")
        session = step.options.get("session")
        expected = step.value
        exact = self.vars.substitute_text(expected) if isinstance(expected, str) else None
        text = ""
        state = {"diverged": False}

        def is_chunk(message: dict[str, Any]) -> bool:
            if message.get("method") != "session/update" or "id" in message:
                return False
            params = message.get("params") or {}
            update = params.get("update") or {}
            if update.get("sessionUpdate") != kind:
                return False
            return session is None or match(session, params.get("sessionId"), self.vars) is None

        def accept(message: dict[str, Any]) -> bool:
            nonlocal text
            if not is_chunk(message):
                return False
            content = message["params"]["update"].get("content") or {}
            text += str(content.get("text", "")) if content.get("type") == "text" else ""
            if exact is not None:
                if text == exact:
                    return True
                if not str(exact).startswith(text):
                    state["diverged"] = True
                    return True
                return False
            return match(expected, text, self.vars) is None

        describe = {"streamed text": expected, "kind": kind}
        try:
            await self._wait_for(step, accept, describe, lambda m: 0, lambda m: None)
        except StepFailed as failed:
            failed.problem += f"\n  streamed so far: {text!r}"
            raise
        if state["diverged"]:
            common = os.path.commonprefix([str(exact), text])  # noqa: RUF071
            raise StepFailed(
                "the streamed text differs from the expected text\n"
                f"  streamed: {text!r}\n"
                f"  they part after {len(common)} characters: …{common[-40:]!r}",
                expected=describe,
            )

    async def _step_expect_silence(self, step: Step) -> None:
        ignore = step.options.get("ignore", "none")
        deadline = asyncio.get_running_loop().time() + float(step.value)
        while True:
            try:
                item = await self._next(deadline)
            except _Timeout:
                return
            if item is None:
                return
            if item.message is not None and _skippable(item.message, ignore):
                continue
            raise StepFailed(
                f"expected no message for {float(step.value):g} s, but the agent wrote one",
                candidates=[(item, None)],
            )

    async def _step_reply(self, step: Step) -> None:
        to = step.options.get("to")

        def wanted(message: dict[str, Any]) -> bool:
            if "method" not in message or "id" not in message:
                return False
            if to is None:
                return True
            if isinstance(to, str):
                return bool(message["method"] == to)
            return match(to, message, self.vars) is None

        request = next((m for m in reversed(self.pending) if wanted(m)), None)
        if request is None:
            pattern = {"method": to} if isinstance(to, str) else (to or {"method": ANY})
            request = await self._wait_for(
                step,
                wanted,
                {"an agent request": pattern},
                lambda m: closeness(pattern, m, self.vars),
                lambda m: match(pattern, m, self.vars),
            )
        else:
            self.pending.remove(request)
        self.vars.values["request"] = request
        answer = self.vars.substitute(step.value)
        await self._write({"jsonrpc": "2.0", "id": request["id"], **answer}, step)

    async def _step_sleep(self, step: Step) -> None:
        await asyncio.sleep(float(step.value))

    async def _step_kill(self, step: Step) -> None:
        agent = self._live_agent()
        agent.kill_group()
        await agent.wait_exit(5.0)

    async def _step_restart(self, step: Step) -> None:
        stage = self.stage
        if stage.agent is not None:
            await stage.agent.stop(graceful=False)
        if "offline_script" in step.options:
            script = stage.root / f"offline-script-{stage.generation + 1}.json"
            replies = self.vars.substitute(step.options["offline_script"])
            script.write_text(json.dumps(replies), encoding="utf-8")
            stage.env["DEFECT_SCRIPT"] = str(script)
            stage.env["DEFECT_PROVIDER"] = "scripted"
        await self.spawn()

    async def _step_close_stdin(self, step: Step) -> None:
        self._live_agent().close_stdin()

    async def _step_expect_exit(self, step: Step) -> None:
        agent = self._live_agent()
        timeout = self._timeout(step)
        code = await agent.wait_exit(timeout)
        if code is None:
            raise StepFailed(f"the agent did not exit within {timeout:g} s", expected=step.value)
        if problem := match(step.value, code, self.vars):
            raise StepFailed(f"the agent exited with code {code}: {problem}", expected=step.value)

    async def _step_expect_file(self, step: Step) -> None:
        """The file's text matches `content` (default: it exists; "<absent>": it does not).

        Waits up to the step's timeout for it to hold: a tool may still be finishing."""
        path = Path(str(self.vars.substitute(step.value)))
        path = path if path.is_absolute() else self.workspace / path
        pattern = step.options.get("content", ANY)
        timeout = self._timeout(step)
        deadline = time.monotonic() + timeout
        while True:
            exists = path.is_file()
            if pattern == ABSENT:
                problem = None if not exists else Mismatch(str(path), "should not exist")
            elif not exists:
                problem = Mismatch(str(path), "no such file")
            else:
                text = path.read_text(encoding="utf-8", errors="replace")
                problem = match(pattern, text, self.vars)
            if problem is None:
                return
            if time.monotonic() >= deadline:
                raise StepFailed(f"the file does not hold after {timeout:g} s: {problem}")
            await asyncio.sleep(0.05)

    def _say(self, text: str) -> None:
        self.out.write(text + "\n")
        self.out.flush()


class _FirstMatch:
    """Accepts a message that matches any remaining pattern; remembers which one."""

    def __init__(self, patterns: list[Any], variables: Variables) -> None:
        self.patterns = patterns
        self.variables = variables
        self.hit: tuple[int, dict[str, Any]] | None = None

    def accept(self, message: dict[str, Any]) -> bool:
        for i, pattern in enumerate(self.patterns):
            captures: dict[str, Any] = {}
            if match(pattern, message, self.variables, captures) is None:
                self.hit = (i, captures)
                return True
        return False


def _skippable(message: dict[str, Any], ignore: str) -> bool:
    if ignore == "all":
        return True
    if ignore == "none":
        return False
    return message.get("method") == "session/update" and "id" not in message


def _unexpected(message: dict[str, Any], ignore: str) -> str:
    if "method" in message and "id" in message:
        what = f"the agent sent a {message['method']} request (answer it with a reply step)"
    elif "method" in message:
        what = f"the agent sent a {message['method']} notification"
    elif "error" in message:
        what = f"the agent answered id {message.get('id')!r} with an error"
    else:
        what = f"the agent answered id {message.get('id')!r}"
    rule = {
        "updates": "only session/update notifications are skipped while waiting",
        "none": 'this step skips nothing ("ignore": "none")',
    }.get(ignore, "")
    return f"unexpected message: {what}; {rule}"
