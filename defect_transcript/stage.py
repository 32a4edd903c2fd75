"""The stage of one transcript run: a throw-away workspace, the agent's environment, its process.

Owns `Stage` (the temporary root with `workspace/` and `state/`, the header's files written
into it, the variables every step can use, the agent's environment and command, the provider
fake of a `provider_fake` header (its `args`: flags of `defect fake-api`, such as the Chat
Completions server it plays), starting the agent — again after a `restart` — and ending
and removing all of it), `RunOptions` and `tail`.

Invariants:
- A transcript runs without keys: the agent gets the caller's environment minus `DEFECT_*`,
  `ANTHROPIC_*` and `AWS_*`, plus what the header selects (the offline model, a script for
  it, or a provider fake on 127.0.0.1).
- Every process group the stage started is killed by `kill_everything`, whatever happened
  (it is synchronous and idempotent, for `finally`).
- The agent is reached only as a client reaches it: `defect_acp.client` starts this
  checkout's `defect acp` over stdio. Only the standard library is imported besides.

Why apart from the steps: what a run stands on (files, environment, processes) changes for
other reasons than what a step means, and must be torn down even when a step never ran.
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from defect_acp.client import (
    agent_command,
    checkout_root,
    kill_group,
    spawn_agent,
    with_checkout_on_path,
)
from defect_transcript.agent import AgentProcess, MessageObserver, StepFailed
from defect_transcript.format import Transcript
from defect_transcript.patterns import Variables

STDERR_TAIL_LINES = 15
STRIPPED_ENV_PREFIXES = ("DEFECT_", "ANTHROPIC_", "AWS_")
FAKE_PROVIDER_API_KEY = "sk-ant-api03-fake-provider-test-key"
"""The key `defect fake-api` (`defect_fakeapi`) accepts by default."""


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


class Stage:
    """What one run of one transcript stands on."""

    def __init__(self, transcript: Transcript, options: RunOptions) -> None:
        self.t = transcript
        self.options = options
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
        self.pids: list[int] = []
        self.env: dict[str, str] = {}
        self.command: list[str] = []
        self.fake: asyncio.subprocess.Process | None = None

    # --- set-up -------------------------------------------------------------------------------

    async def setup(self) -> None:
        header = self.t.header
        self.workspace.mkdir()
        self.state_dir.mkdir()
        env = with_checkout_on_path(
            {k: v for k, v in os.environ.items() if not k.startswith(STRIPPED_ENV_PREFIXES)}
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
        # After the fake: a seeded file (a configuration) may name its `${provider_url}`.
        for name, content in header.files.items():
            target = self.workspace / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(str(self.vars.substitute(content)), encoding="utf-8")
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
            else agent_command()
        )
        self.command = base + [str(self.vars.substitute(a)) for a in header.agent_args]

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
        command = [*command, *spec.get("args", [])]
        argv = [str(self.vars.substitute(c)) for c in command]
        env = with_checkout_on_path(os.environ, os.getcwd())
        with (self.root / "provider-fake-stderr.log").open("ab") as stderr:
            self.fake = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=stderr,
                env=env,
                cwd=str(checkout_root()),
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
            log = tail(self.root / "provider-fake-stderr.log")
            raise StepFailed(
                f"the provider fake ({shlex.join(argv)}) printed {url!r}, not a URL\n{log}"
            )
        return url

    async def spawn(self) -> AgentProcess:
        """Start the agent (again, after a `restart`): generation 1, 2, …"""
        self.generation += 1
        with self.stderr_path.open("ab") as stderr:
            if self.generation > 1:
                stderr.write(f"--- agent restarted (generation {self.generation}) ---\n".encode())
                stderr.flush()
            try:
                proc = await spawn_agent(
                    self.command, env=self.env, cwd=self.workspace, stderr=stderr
                )
            except OSError as exc:
                raise StepFailed(
                    f"cannot start the agent {shlex.join(self.command)}: {exc}"
                ) from None
        self.pids.append(proc.pid)
        self.agent = AgentProcess(proc, self.generation)
        return self.agent

    # --- tear-down ----------------------------------------------------------------------------

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


def tail(path: Path, lines: int = STDERR_TAIL_LINES) -> str:
    """The last `lines` lines of a log file ("" when it cannot be read)."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])
