"""Playing transcripts: `run_transcript`, `run_files` and the failure report.

Owns one play of one transcript (`_Run`: a throw-away workspace and state directory, the
agent's environment and command, the provider fake, a method per step kind), `RunOptions`,
`Outcome`, and the report a failed run prints: the step and its line, the problem, what was
expected, the closest messages the agent wrote instead, and the tail of the agent's stderr.

Invariants:
- A run never outlives its transcript: every waiting step has a timeout, and every process
  group the run started is killed when it ends — passed, failed, timed out, crashed or
  interrupted.
- Expectations consume the agent's messages in the order the agent wrote them. Only what the
  step's `ignore` allows (by default `session/update` notifications) is skipped; an
  unexpected response, error or agent request fails the step at once, and is shown.
- A transcript runs without keys: the agent gets the caller's environment minus `DEFECT_*`,
  `ANTHROPIC_*` and `AWS_*`, plus what the header selects (the offline model, a script for
  it, or a provider fake on 127.0.0.1).
- Only the standard library is imported.

Why: CI plays these on every commit. A failure must say what was expected and what came
instead, and a broken agent must fail the run, never hang it or leave processes behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shlex
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TextIO

from defect_acp.transcript.agent import (
    LINE_LIMIT,
    AgentProcess,
    Incoming,
    MessageObserver,
    StepFailed,
    id_key,
    kill_group,
)
from defect_acp.transcript.format import (
    ABSENT,
    ANY,
    Step,
    Transcript,
    TranscriptError,
    load_transcript,
)
from defect_acp.transcript.patterns import (
    SHOW_LIMIT,
    Mismatch,
    UnknownVariable,
    Variables,
    closeness,
    match,
    show,
)

STDERR_TAIL_LINES = 15
STRIPPED_ENV_PREFIXES = ("DEFECT_", "ANTHROPIC_", "AWS_")
FAKE_PROVIDER_API_KEY = "sk-ant-api03-fake-provider-test-key"
"""The key `defect fake-api` (`defect_fakeapi`) accepts by default."""


class _Timeout(Exception):
    pass


@dataclass
class RunOptions:
    timeout: float | None = None
    """Overrides the header's default step timeout (not a step's own `timeout`)."""
    verbose: bool = False
    keep: bool = False
    """Keep the temporary workspace (its path is printed)."""
    out: TextIO | None = None
    """Where reports go (default: stdout)."""
    on_message: MessageObserver | None = None


@dataclass
class Outcome:
    path: Path
    status: Literal["passed", "failed", "skipped"]
    detail: str = ""
    steps_run: int = 0
    seconds: float = 0.0
    agent_pids: list[int] = field(default_factory=list)
    workspace: Path | None = None


class _Run:
    """One play of one transcript."""

    def __init__(self, transcript: Transcript, options: RunOptions, out: TextIO) -> None:
        self.t = transcript
        self.options = options
        self.out = out
        self.default_timeout = options.timeout or transcript.header.timeout
        self.root = Path(tempfile.mkdtemp(prefix="defect-transcript-")).resolve()
        self.workspace = self.root / "workspace"
        self.state_dir = self.root / "state"
        self.stderr_path = self.root / "agent-stderr.log"
        self.vars = Variables(
            {
                "workspace": str(self.workspace),
                "state_dir": str(self.state_dir),
                "tmp": str(self.root),
                "python": sys.executable,
                "transcript_dir": str(transcript.path.resolve().parent),
            }
        )
        self.agent: AgentProcess | None = None
        self.generation = 0
        self.cursor = 0
        self.pending: list[dict[str, Any]] = []
        self.next_id = 1
        self.sent_methods: dict[Any, str] = {}
        self.violations: list[str] = []
        self.pids: list[int] = []
        self.env: dict[str, str] = {}
        self.command: list[str] = []
        self.fake: asyncio.subprocess.Process | None = None
        self.steps_run = 0
        self.current: Step | None = None
        """The step being played (None during set-up and after the last step)."""

    # --- set-up -------------------------------------------------------------------------------

    async def setup(self) -> None:
        header = self.t.header
        self.workspace.mkdir()
        self.state_dir.mkdir()
        for name, content in header.files.items():
            target = self.workspace / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(str(self.vars.substitute(content)), encoding="utf-8")
        env = {k: v for k, v in os.environ.items() if not k.startswith(STRIPPED_ENV_PREFIXES)}
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(_repo_root()), env.get("PYTHONPATH", "")) if p
        )
        env["DEFECT_STATE_DIR"] = str(self.state_dir)
        env["DEFECT_LOG_LEVEL"] = "info"
        provider: dict[str, str | None] = {"DEFECT_PROVIDER": "scripted"}
        if header.offline_script is not None:
            script = self.root / "offline-script.json"
            replies = self.vars.substitute(header.offline_script)
            script.write_text(json.dumps(replies), encoding="utf-8")
            provider["DEFECT_SCRIPT"] = str(script)
        elif header.script_file is not None:
            provider["DEFECT_SCRIPT"] = str(self._relative(header.script_file))
        elif header.provider_fake is not None:
            url = await self._start_fake(header.provider_fake)
            self.vars.values["provider_url"] = url
            provider = {
                "DEFECT_PROVIDER": "anthropic",
                "ANTHROPIC_BASE_URL": url,
                "ANTHROPIC_API_KEY": FAKE_PROVIDER_API_KEY,
            }
            fake_env = header.provider_fake.get("env", {})
            if not isinstance(fake_env, dict):
                raise StepFailed('"provider_fake.env" must be an object')
            provider.update({k: self._env_value(v) for k, v in fake_env.items()})
        overlay = {**provider, **{k: self._env_value(v) for k, v in header.agent_env.items()}}
        for key, value in overlay.items():
            if value is None:
                env.pop(key, None)
            else:
                env[key] = value
        self.env = env
        base = (
            [str(self.vars.substitute(c)) for c in header.agent_command]
            if header.agent_command
            else [sys.executable, "-m", "defect_acp", "acp"]
        )
        self.command = base + [str(self.vars.substitute(a)) for a in header.agent_args]
        await self.spawn()

    def _env_value(self, value: Any) -> str | None:
        return None if value is None else str(self.vars.substitute(value))

    def _relative(self, name: str) -> Path:
        path = Path(str(self.vars.substitute(name)))
        return path if path.is_absolute() else self.t.path.resolve().parent / path

    async def _start_fake(self, spec: dict[str, Any]) -> str:
        script_path = self.root / "provider-script.json"
        if "script_file" in spec:
            script_path = self._relative(str(spec["script_file"]))
        else:
            replies = self.vars.substitute(spec.get("script", []))
            script_path.write_text(json.dumps(replies), encoding="utf-8")
        self.vars.values["fake_script"] = str(script_path)
        command = spec.get("command") or [
            sys.executable,
            "-m",
            "defect_fakeapi",
            "--port",
            "0",
            "--script",
            "${fake_script}",
        ]
        if isinstance(command, str):
            command = shlex.split(command)
        argv = [str(self.vars.substitute(c)) for c in command]
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(_repo_root()), os.getcwd(), env.get("PYTHONPATH", "")) if p
        )
        with (self.root / "provider-fake-stderr.log").open("ab") as stderr:
            self.fake = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=stderr,
                env=env,
                cwd=str(_repo_root()),
                start_new_session=True,
            )
        assert self.fake.stdout is not None
        try:
            line = await asyncio.wait_for(self.fake.stdout.readline(), self.default_timeout)
        except TimeoutError:
            raise StepFailed(
                f"the provider fake ({shlex.join(argv)}) printed no URL within "
                f"{self.default_timeout:g} s"
            ) from None
        url = line.decode(errors="replace").strip()
        if not url.startswith("http"):
            tail = _tail(self.root / "provider-fake-stderr.log")
            raise StepFailed(
                f"the provider fake ({shlex.join(argv)}) printed {url!r}, not a URL\n{tail}"
            )
        return url

    async def spawn(self) -> None:
        self.generation += 1
        with self.stderr_path.open("ab") as stderr:
            if self.generation > 1:
                stderr.write(f"--- agent restarted (generation {self.generation}) ---\n".encode())
                stderr.flush()
            try:
                proc = await asyncio.create_subprocess_exec(
                    *self.command,
                    stdin=asyncio.subprocess.PIPE,
                    stdout=asyncio.subprocess.PIPE,
                    stderr=stderr,
                    cwd=str(self.workspace),
                    env=self.env,
                    start_new_session=True,
                    limit=LINE_LIMIT,
                )
            except OSError as exc:
                raise StepFailed(
                    f"cannot start the agent {shlex.join(self.command)}: {exc}"
                ) from None
        self.pids.append(proc.pid)
        self.agent = AgentProcess(proc, self.generation)
        self.agent.observer = self._observe
        self.cursor = 0
        self.pending = []
        if self.options.verbose:
            self._say(f"  · agent started: {shlex.join(self.command)} (pid {proc.pid})")

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

    async def teardown(self, *, graceful: bool) -> None:
        if self.agent is not None:
            await self.agent.stop(graceful=graceful)
        if self.fake is not None:
            kill_group(self.fake)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.fake.wait(), 5)

    def kill_everything(self) -> None:
        """SIGKILL every process group this run started (idempotent, synchronous)."""
        if self.agent is not None:
            self.agent.kill_group()
        if self.fake is not None:
            kill_group(self.fake)

    def cleanup_files(self) -> None:
        if not self.options.keep:
            shutil.rmtree(self.root, ignore_errors=True)

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
        if self.agent is None:
            raise StepFailed("no agent is running")
        return self.agent

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
        if self.agent is not None:
            await self.agent.stop(graceful=False)
        if "offline_script" in step.options:
            script = self.root / f"offline-script-{self.generation + 1}.json"
            replies = self.vars.substitute(step.options["offline_script"])
            script.write_text(json.dumps(replies), encoding="utf-8")
            self.env["DEFECT_SCRIPT"] = str(script)
            self.env["DEFECT_PROVIDER"] = "scripted"
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


def _repo_root() -> Path:
    """The checkout this package runs from: this file is <root>/defect_acp/transcript/runner.py."""
    return Path(__file__).resolve().parents[2]


def _tail(path: Path, lines: int = STDERR_TAIL_LINES) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def _missing_module(names: Iterable[str]) -> str | None:
    import importlib.util

    for name in names:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            return name
    return None


async def run_transcript(path: str | Path, options: RunOptions | None = None) -> Outcome:
    """Play one transcript file against a fresh agent; report on `options.out`."""
    options = options or RunOptions()
    out = options.out or sys.stdout
    path = Path(path)
    started = time.monotonic()
    try:
        transcript = load_transcript(path)
    except TranscriptError as exc:
        out.write(f"FAIL {path}\n  malformed transcript: {exc}\n")
        return Outcome(path, "failed", f"malformed transcript: {exc}")
    header = transcript.header
    if header.skip is not None:
        out.write(f"SKIP {path}: {header.skip}\n")
        return Outcome(path, "skipped", header.skip)
    if missing := _missing_module(header.requires):
        reason = f"requires the module {missing}, which is not available"
        out.write(f"SKIP {path}: {reason}\n")
        return Outcome(path, "skipped", reason)

    run = _Run(transcript, options, out)
    if options.verbose:
        out.write(f"RUN  {path} (workspace {run.workspace})\n")
    failure: str | None = None
    try:
        try:
            await run.setup()
            await run.play()
        except StepFailed as failed:
            failure = _report(run, failed)
            await run.teardown(graceful=False)
        except (Exception, asyncio.CancelledError) as exc:
            failure = f"FAIL {path}\n  the runner crashed: {type(exc).__name__}: {exc}"
            await run.teardown(graceful=False)
            if isinstance(exc, asyncio.CancelledError):
                raise
        else:
            await run.teardown(graceful=True)
            try:
                run.check_violations()
            except StepFailed as failed:
                failure = _report(run, failed)
    finally:
        run.kill_everything()  # whatever happened above (even KeyboardInterrupt)
        run.cleanup_files()
    seconds = time.monotonic() - started
    outcome = Outcome(
        path,
        "failed" if failure else "passed",
        failure or "",
        run.steps_run,
        seconds,
        list(run.pids),
        run.workspace,
    )
    if failure:
        out.write(failure + "\n")
        if options.keep:
            out.write(f"  kept: {run.root}\n")
    else:
        out.write(f"PASS {path} ({len(transcript.steps)} steps, {seconds:.1f} s)\n")
    out.flush()
    return outcome


def _report(run: _Run, failed: StepFailed) -> str:
    step = run.current
    if step is not None:
        where = step.where()
    elif run.steps_run:
        where = "after the last step"
    else:
        where = "set-up (before the first step)"
    lines = [f"FAIL {run.t.path} — {where}", f"  problem:  {failed.problem}"]
    limit = None if run.options.verbose else SHOW_LIMIT
    if failed.expected is not None:
        lines.append(f"  expected: {show(failed.expected, limit)}")
    elif step is not None and step.kind.startswith("expect"):
        lines.append(f"  expected: {show(step.value, limit)}")
    for n, (item, mismatch) in enumerate(failed.candidates):
        label = "actual:  " if n == 0 else "also:    "
        shown = show(item.message, limit) if item.message is not None else repr(item.raw)
        lines.append(f"  {label} {shown}")
        if mismatch is not None:
            lines.append(f"            {mismatch}")
    if failed.skipped:
        lines.append(f"  messages consumed while waiting: {failed.skipped}")
    if not failed.candidates and failed.problem.startswith("timed out"):
        lines.append("  actual:   (no message)")
    tail = _tail(run.stderr_path)
    if tail:
        lines.append(f"  agent stderr (last {STDERR_TAIL_LINES} lines):")
        lines.extend(f"    | {line}" for line in tail.splitlines())
    return "\n".join(lines)


def expand_paths(paths: Iterable[str | Path]) -> list[Path]:
    """Files as given; a directory stands for its `*.jsonl` files, sorted."""
    found: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found.extend(sorted(path.glob("*.jsonl")))
        else:
            found.append(path)
    return found


async def run_files(paths: Iterable[str | Path], options: RunOptions | None = None) -> int:
    """Play every transcript; exit status 0 when none failed (skips are fine), else 1."""
    options = options or RunOptions()
    out = options.out or sys.stdout
    files = expand_paths(paths)
    if not files:
        out.write("no transcripts given\n")
        return 1
    outcomes = [await run_transcript(path, options) for path in files]
    counts = {s: sum(1 for o in outcomes if o.status == s) for s in ("passed", "failed", "skipped")}
    out.write(
        f"{counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped\n"
    )
    out.flush()
    return 1 if counts["failed"] else 0
