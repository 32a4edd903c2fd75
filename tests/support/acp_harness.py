"""Drive the real `defect acp` process over real stdio with the ACP SDK's client side.

Owns `spawn_defect`, which starts `python -m defect_cli acp` with a chosen environment,
connects a `RecordingClient` (the test's editor) through the SDK's `ClientSideConnection`,
and validates every message the agent writes against the ACP schema as it arrives.

Validation fails loudly: the schema is loaded before the agent starts (an unloadable schema
fails the test at once), anything a check raises — a violation or a crash of the check itself
— is recorded rather than lost in the SDK, which logs and swallows what an observer raises, and
`spawn_defect` fails the test at exit when any message was not clean, whether or not the test
asked (`Agent.assert_schema_clean` checks earlier). `raw_session` validates what it reads too.

The client records every `session/update`, answers permission questions and `elicitation/create`
from policies the test sets (its answers to the agent's elicitations are checked against the
schema too), and — when the test advertises the capabilities — serves `fs/*` and `terminal/*`
for real (files on disk, subprocesses), recording each call.

Pitfalls this avoids: the SDK's spawner trims the child's environment and
pipes stderr without reading it, so the child gets an explicit `env` and its stderr goes to
a file the test can read.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shlex
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from acp import schema as s
from acp.connection import StreamDirection, StreamEvent
from acp.stdio import spawn_agent_process

from defect_core.child_env import DEFAULT_POLICY
from tests.support.acp_schema import SchemaViolation, acp_schema

REPO = Path(__file__).resolve().parents[2]

PermissionPolicy = Callable[[s.RequestPermissionRequest], str | None]
ElicitationPolicy = Callable[[str, Any], Any]
"""(message, mode) → the client's answer to `elicitation/create`: an `Accept`/`Decline`/
`CancelElicitationResponse`, or an exception to raise (the client answers with an error)."""


def decline(_message: str, _mode: Any) -> Any:
    return s.DeclineElicitationResponse(action="decline")


def allow_once(_: s.RequestPermissionRequest) -> str | None:
    return "allow_once"


@dataclass
class RecordingClient:
    """The test's editor."""

    permission: PermissionPolicy = allow_once
    updates: list[tuple[str, Any]] = field(default_factory=list)
    permission_requests: list[s.RequestPermissionRequest] = field(default_factory=list)
    reverse_calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    permission_gate: asyncio.Event | None = None
    """When set, permission and elicitation answers wait for this event (to test cancels
    while pending)."""
    elicitation: ElicitationPolicy = decline
    elicitations: list[tuple[str, Any]] = field(default_factory=list)
    """Every `elicitation/create` received: (message, mode)."""
    completed: list[str] = field(default_factory=list)
    """Every `elicitation/complete` received: its elicitation id."""
    terminal_through_shell: bool = False
    """False: `terminal/create` execs exactly `[command, *args]` with no shell, as Zed and acpx
    do. True: the line `command args...` runs through a shell, as some other editors do."""
    terminals: dict[str, asyncio.subprocess.Process] = field(default_factory=dict)
    update_event: asyncio.Event = field(default_factory=asyncio.Event)

    def on_connect(self, conn: Any) -> None:
        self.conn = conn

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.updates.append((session_id, update))
        self.update_event.set()

    async def request_permission(
        self, options: list[Any], session_id: str, tool_call: Any, **kwargs: Any
    ) -> s.RequestPermissionResponse:
        request = s.RequestPermissionRequest(
            options=options, session_id=session_id, tool_call=tool_call
        )
        self.permission_requests.append(request)
        self.update_event.set()
        if self.permission_gate is not None:
            await self.permission_gate.wait()
        answer = self.permission(request)
        if answer is None:
            return s.RequestPermissionResponse(outcome=s.DeniedOutcome(outcome="cancelled"))
        return s.RequestPermissionResponse(
            outcome=s.AllowedOutcome(outcome="selected", option_id=answer)
        )

    async def create_elicitation(self, message: str, mode: Any, **kwargs: Any) -> Any:
        self.elicitations.append((message, mode))
        self.update_event.set()
        if self.permission_gate is not None:
            await self.permission_gate.wait()
        answer = self.elicitation(message, mode)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    async def complete_elicitation(self, elicitation_id: str, **kwargs: Any) -> None:
        self.completed.append(elicitation_id)
        self.update_event.set()

    # --- delegated fs / terminal (served for real) ------------------------------------------

    async def read_text_file(
        self,
        path: str,
        session_id: str,
        limit: int | None = None,
        line: int | None = None,
        **kwargs: Any,
    ) -> s.ReadTextFileResponse:
        self.reverse_calls.append(
            ("fs/read_text_file", {"path": path, "line": line, "limit": limit})
        )
        text = Path(path).read_text()
        if line is not None or limit is not None:
            lines = text.splitlines(keepends=True)
            start = (line or 1) - 1
            text = "".join(lines[start : start + limit if limit else None])
        return s.ReadTextFileResponse(content=text)

    async def write_text_file(
        self, content: str, path: str, session_id: str, **kwargs: Any
    ) -> s.WriteTextFileResponse:
        self.reverse_calls.append(("fs/write_text_file", {"path": path, "content": content}))
        Path(path).write_text(content)
        return s.WriteTextFileResponse()

    async def create_terminal(
        self,
        command: str,
        session_id: str,
        args: list[str] | None = None,
        cwd: str | None = None,
        env: Any = None,
        output_byte_limit: int | None = None,
        **kwargs: Any,
    ) -> s.CreateTerminalResponse:
        self.reverse_calls.append(
            ("terminal/create", {"command": command, "args": args, "cwd": cwd})
        )
        pipes: dict[str, Any] = {
            "cwd": cwd,
            "stdout": asyncio.subprocess.PIPE,
            "stderr": asyncio.subprocess.STDOUT,
            "start_new_session": True,
        }
        if self.terminal_through_shell:
            line = shlex.join([command, *(args or [])])
            proc = await asyncio.create_subprocess_shell(line, **pipes)
        else:
            proc = await asyncio.create_subprocess_exec(command, *(args or []), **pipes)
        terminal_id = f"term_{len(self.terminals) + 1}"
        self.terminals[terminal_id] = proc
        return s.CreateTerminalResponse(terminal_id=terminal_id)

    async def terminal_output(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> s.TerminalOutputResponse:
        self.reverse_calls.append(("terminal/output", {"terminal_id": terminal_id}))
        proc = self.terminals[terminal_id]
        output = b""
        if proc.returncode is not None and proc.stdout is not None:
            output = await proc.stdout.read()
        status = (
            s.TerminalExitStatus(exit_code=proc.returncode) if proc.returncode is not None else None
        )
        return s.TerminalOutputResponse(
            output=output.decode(errors="replace"), truncated=False, exit_status=status
        )

    async def wait_for_terminal_exit(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> s.WaitForTerminalExitResponse:
        self.reverse_calls.append(("terminal/wait_for_exit", {"terminal_id": terminal_id}))
        code = await self.terminals[terminal_id].wait()
        return s.WaitForTerminalExitResponse(exit_code=code)

    async def kill_terminal(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> s.KillTerminalResponse:
        self.reverse_calls.append(("terminal/kill", {"terminal_id": terminal_id}))
        proc = self.terminals[terminal_id]
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, 9)
        return s.KillTerminalResponse()

    async def release_terminal(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> s.ReleaseTerminalResponse:
        self.reverse_calls.append(("terminal/release", {"terminal_id": terminal_id}))
        proc = self.terminals.pop(terminal_id, None)
        if proc is not None and proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, 9)
        return s.ReleaseTerminalResponse()

    # --- views for assertions ---------------------------------------------------------------

    def kinds(self, session_id: str | None = None) -> list[str]:
        return [
            u.session_update for sid, u in self.updates if session_id is None or sid == session_id
        ]

    def text(self, session_id: str | None = None) -> str:
        return "".join(
            u.content.text
            for sid, u in self.updates
            if (session_id is None or sid == session_id)
            and u.session_update == "agent_message_chunk"
            and hasattr(u.content, "text")
        )

    async def wait_for(self, predicate: Callable[[], bool], timeout: float = 10.0) -> None:
        async with asyncio.timeout(timeout):
            while not predicate():
                self.update_event.clear()
                await self.update_event.wait()


@dataclass
class Wire:
    """Every raw message, both directions, as (direction, message).

    `deferred`: the agent's messages are recorded as they arrive and validated by `check`
    (which `Agent.assert_schema_clean`, and so the exit of `spawn_defect`, calls), not one by
    one on arrival. For benchmarks: validating a message costs the client milliseconds of
    CPU, which on a small machine competes with the agent it measures. Every message is
    still validated, against the same schema, before the run counts as clean."""

    messages: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    deferred: bool = False
    _methods: dict[Any, str] = field(default_factory=dict)
    _asked: dict[Any, str] = field(default_factory=dict)
    """The agent's requests to the client, by id: the client's answers are checked too."""
    _unchecked: list[tuple[dict[str, Any], str | None]] = field(default_factory=list)

    def observe(self, event: StreamEvent) -> None:
        message = event.message
        if event.direction is StreamDirection.OUTGOING:
            self.messages.append(("client", message))
            if "method" in message and "id" in message:
                self._methods[message["id"]] = message["method"]
            elif "method" not in message and message.get("id") in self._asked:
                self._check_answer(message, self._asked.pop(message["id"]))
            return
        if "method" in message and "id" in message:
            self._asked[message["id"]] = message["method"]
        self.messages.append(("agent", message))
        answered = self._methods.get(message.get("id")) if "method" not in message else None
        if self.deferred:
            self._unchecked.append((message, answered))
        else:
            self._check(message, answered)

    def check(self) -> None:
        """Validate the messages recorded but not yet validated (`deferred`)."""
        unchecked, self._unchecked = self._unchecked, []
        for message, answered in unchecked:
            self._check(message, answered)

    def _check(self, message: dict[str, Any], answered: str | None) -> None:
        try:
            acp_schema().check_agent_message(message, answered)
        except AssertionError as exc:
            self.violations.append(str(exc))
        except Exception as exc:  # the check itself broke: the message went unvalidated
            self.violations.append(
                f"the schema check raised {type(exc).__name__}: {exc}\n"
                f"message: {json.dumps(message)[:2000]}"
            )

    def _check_answer(self, message: dict[str, Any], method: str) -> None:
        try:
            acp_schema().check_client_response(message, method)
        except AssertionError as exc:
            self.violations.append(str(exc))

    def from_agent(self) -> list[dict[str, Any]]:
        return [m for d, m in self.messages if d == "agent"]


@dataclass
class Agent:
    conn: Any
    process: asyncio.subprocess.Process
    client: RecordingClient
    wire: Wire
    stderr_path: Path

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def assert_schema_clean(self) -> None:
        self.wire.check()
        if self.wire.violations:
            raise SchemaViolation("\n\n".join(self.wire.violations))

    async def initialize(self, **capabilities: Any) -> s.InitializeResponse:
        fs = capabilities.pop("fs", None)
        terminal = capabilities.pop("terminal", False)
        elicitation = capabilities.pop("elicitation", ())  # "form", "url"
        caps = s.ClientCapabilities(
            fs=s.FileSystemCapabilities(read_text_file=bool(fs), write_text_file=bool(fs)),
            terminal=terminal,
            elicitation=s.ElicitationCapabilities(
                form=s.ElicitationFormCapabilities() if "form" in elicitation else None,
                url=s.ElicitationUrlCapabilities() if "url" in elicitation else None,
            )
            if elicitation
            else None,
        )
        return await self.conn.initialize(
            protocol_version=1,
            client_capabilities=caps,
            client_info=s.Implementation(name="test-client", version="0"),
        )

    async def new_session(self, cwd: Path | str) -> str:
        response = await self.conn.new_session(cwd=str(cwd), mcp_servers=[])
        return str(response.session_id)

    async def prompt(self, session_id: str, text: str) -> s.PromptResponse:
        return await self.conn.prompt(
            session_id=session_id, prompt=[s.TextContentBlock(type="text", text=text)]
        )


_STATE_DIR = tempfile.mkdtemp(prefix="defect-test-state-")
"""Sessions saved by agents the tests spawn: never the user's own state directory."""
_CONFIG_DIR = tempfile.mkdtemp(prefix="defect-test-config-")


def agent_env(**extra: str) -> dict[str, str]:
    # Nor the developer's own secrets: no agent under test needs them, and what defect sends
    # the editor's terminal (`env -u NAME …`) would depend on them.
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DEFECT_", "ANTHROPIC_")) and not DEFAULT_POLICY.withholds(k)
    }
    env["PYTHONPATH"] = str(REPO)
    env["DEFECT_STATE_DIR"] = _STATE_DIR
    env["XDG_CONFIG_HOME"] = _CONFIG_DIR  # never the developer's own ~/.config/defect
    env.setdefault("DEFECT_LOG_LEVEL", "info")
    env.update(extra)
    return env


def run_defect(
    args: list[str], env: dict[str, str], stdin: str = ""
) -> subprocess.CompletedProcess[str]:
    """`defect ARGS` run to its end from the repository (a login, a logout, a status): its
    exit status and output, for the test to judge."""
    return subprocess.run(
        [sys.executable, "-m", "defect_cli", *args],
        input=stdin,
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def script_env(
    tmp_path: Path, replies: list[dict[str, Any]] | None = None, **extra: str
) -> dict[str, str]:
    """`agent_env` for one test: sessions saved under `tmp_path/state`, and the offline model
    playing `replies` (the DEFECT_SCRIPT format) when they are given."""
    if replies is not None:
        script = tmp_path / "script.json"
        script.write_text(json.dumps(replies))
        extra.setdefault("DEFECT_SCRIPT", str(script))
    extra.setdefault("DEFECT_STATE_DIR", str(tmp_path / "state"))
    return agent_env(**extra)


@contextlib.asynccontextmanager
async def spawn_defect(
    *args: str,
    env: dict[str, str] | None = None,
    client: RecordingClient | None = None,
    cwd: Path | None = None,
    command: list[str] | None = None,
    validate_at_exit: bool = False,
) -> AsyncIterator[Agent]:
    """The real agent (`python -m defect_cli acp *args`), or `command` in its place (a test
    of the harness itself), connected to `client` and validated message by message: as each
    arrives, or with `validate_at_exit` all at once when the test body has passed or asks
    (`Wire.deferred`: for a benchmark, whose client must not compete with the agent)."""
    client = client or RecordingClient()
    acp_schema()  # raises SchemaUnavailable before anything runs unvalidated
    wire = Wire(deferred=validate_at_exit)
    # Kept open for the child's lifetime and closed in the `finally` below.
    stderr_file = tempfile.NamedTemporaryFile(  # noqa: SIM115
        prefix="defect-stderr-", suffix=".log", delete=False
    )
    stderr_path = Path(stderr_file.name)
    try:
        async with spawn_agent_process(
            lambda _agent: client,
            *(command or [sys.executable, "-m", "defect_cli", "acp", *args]),
            env=env or agent_env(),
            cwd=str(cwd or REPO),
            # A loaded CI machine can take more than the SDK's 2 s to let the agent exit
            # (MCP servers stop first); past that the SDK terminates it and can race its exit.
            transport_kwargs={"stderr": stderr_file.fileno(), "shutdown_timeout": 10.0},
            observers=[wire.observe],
            use_unstable_protocol=True,
        ) as (conn, process):
            agent = Agent(conn, process, client, wire, stderr_path)
            try:
                yield agent
            finally:
                for proc in client.terminals.values():
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, 9)
            # Reached only when the test body passed: a violation must not hide its own error.
            agent.assert_schema_clean()
    finally:
        stderr_file.close()
        stderr_path.unlink(missing_ok=True)


async def raw_session(
    lines: list[bytes], env: dict[str, str] | None = None, read_count: int = 1, timeout: float = 15
) -> tuple[list[dict[str, Any]], asyncio.subprocess.Process]:
    """Write raw lines to a fresh agent and read `read_count` JSON lines back, each one
    validated against the ACP schema (a violation raises `SchemaViolation`)."""
    schema = acp_schema()
    methods: dict[Any, str] = {}
    for line in lines:
        with contextlib.suppress(ValueError):
            sent = json.loads(line)
            if isinstance(sent, dict) and isinstance(sent.get("method"), str) and "id" in sent:
                methods[json.dumps(sent["id"])] = sent["method"]
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "defect_cli",
        "acp",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        env=env or agent_env(),
        cwd=str(REPO),
    )
    assert proc.stdin is not None and proc.stdout is not None
    for line in lines:
        proc.stdin.write(line)
    await proc.stdin.drain()
    out: list[dict[str, Any]] = []
    try:
        async with asyncio.timeout(timeout):
            while len(out) < read_count:
                raw = await proc.stdout.readline()
                if not raw:
                    break
                message = json.loads(raw)
                answered = None
                if "method" not in message:
                    answered = methods.get(json.dumps(message.get("id")))
                schema.check_agent_message(message, answered)
                out.append(message)
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
        raise
    return out, proc
