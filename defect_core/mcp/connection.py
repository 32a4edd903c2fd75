"""One MCP server from start to stop: its transport, its `ClientSession`, its process.

Owns `Connection` (one server's lifecycle: start, ready or failed, lost, closed, swept; the
tool calls running on it, and what answers its elicitations, `Elicit`),
the stdio server's stderr reader (`_StderrTail`), which transports can be connected
(`supported_transports`), and how a failure is put in one line (`describe`).

Invariants:
- Each server's SDK contexts (transport, `ClientSession`) are entered and left in one
  long-lived task of its own, as anyio task groups require; calls from turn tasks only send
  requests through the `ClientSession`, which multiplexes them.
- A server that cannot start says why in `failure` (missing command, early exit with its last
  stderr line, garbage on stdout, refused connection); one that dies later says why in `lost`.
  Neither ever raises out of the connection.
- What a server printed, and every reason built from it, is redacted before it is logged or
  kept (`redaction.redact`: token shapes, `token=…`, `Bearer …`, and the values defect knows
  are secrets — its own secret variables' and the server's `env`, header and URL query
  values): a failure reaches the user and a lost server's reason reaches the model.
- A stdio server inherits defect's environment without the provider credentials and the
  secret-looking variables (`child_env.EnvPolicy`, the session's settings); its own `env`
  (the editor's, or a configured entry's `${VAR}` expansions) is laid over it as given.
- Stopping leaves no process behind: stdio processes get the SDK's shutdown (stdin closed,
  then SIGTERM/SIGKILL to the process group), then their process group is swept, so children
  a server left behind go too. The pid comes from a one-line `/bin/sh` shim that reports `$$`
  on stderr and `exec`s the server (same pid).
- Importing this module imports no `mcp` (docs/architecture.md, rule 6): the SDK (a slow import) is
  imported inside the functions that open a connection, after `McpHub`'s start-up loaded it off
  the event loop; `supported_transports` only looks it up.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import math
import os
import shutil
import signal
import sys
import threading
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlsplit

import anyio

from defect_core import __version__
from defect_core.child_env import DEFAULT_POLICY, EnvPolicy
from defect_core.log import get_logger
from defect_core.mcp.spec import McpServerSpec, one_line
from defect_core.redaction import redact

if TYPE_CHECKING:
    import mcp_types
    from mcp import ClientSession

log = get_logger("defect.mcp")

Elicit = Callable[["Connection", Any], Awaitable[Any]]
"""What answers a server's `elicitation/create` (the hub's, `mcp/elicitation.py`)."""
Completed = Callable[["Connection", str], Awaitable[None]]
"""What hears a server's `notifications/elicitation/complete` (a page it had opened is done)."""

SWEEP_GRACE = 0.5
"""Seconds a stopped server's leftover children get after SIGTERM before SIGKILL."""
SSE_READ_TIMEOUT = 24 * 3600.0
"""The SSE stream may idle for this long: the per-call timeout is what bounds a call."""
HTTP_TIMEOUT = 30.0

_PID_MARKER = "defect-mcp-pid "
_SHIM = f'printf \'{_PID_MARKER}%s\\n\' "$$" >&2; exec "$@"'
"""Run by `/bin/sh -c`: report the shell's pid, then become the server (exec keeps the pid)."""


def supported_transports() -> set[str]:
    """The MCP transports `McpHub` connects (each one proven by tests/test_mcp.py).

    Cheap enough for `initialize`: it looks the SDK up without importing it. Without the SDK
    only stdio is claimed — ACP requires accepting stdio servers; they then fail to start with
    a reason that says the package is missing.
    """
    if importlib.util.find_spec("mcp") is None:
        return {"stdio"}
    return {"stdio", "http", "sse"}


class _StderrTail:
    """A stdio server's stderr, read in a thread: the shim's pid line, then the server's lines,
    redacted, logged (info) and the last few kept for failure messages."""

    def __init__(self, server: str, redact: Callable[[str], str]) -> None:
        read_fd, write_fd = os.pipe()
        self.writer = os.fdopen(write_fd, "w", encoding="utf-8")
        self._reader = os.fdopen(read_fd, "rb")
        self._server = server
        self._redact = redact
        self.lines: deque[str] = deque(maxlen=20)
        self.pid: int | None = None
        self._thread = threading.Thread(target=self._pump, name=f"mcp-stderr-{server}", daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        with self._reader:
            while raw := self._reader.readline(16_384):
                line = raw.decode("utf-8", "replace").rstrip()
                if self.pid is None and line.startswith(_PID_MARKER):
                    with contextlib.suppress(ValueError):
                        self.pid = int(line[len(_PID_MARKER) :])
                    continue
                if line.strip():
                    line = self._redact(line)
                    self.lines.append(line)
                    log.info("mcp_server_stderr", server=self._server, line=line[:2_000])

    async def drained(self, at_most: float = 0.5) -> None:
        """Wait (briefly) until the server's stderr reached its end."""
        await anyio.to_thread.run_sync(self._thread.join, at_most, abandon_on_cancel=True)

    def tail(self) -> str:
        return self.lines[-1] if self.lines else ""


class Connection:
    """One server: its long-lived task owns the SDK contexts from connect to close."""

    def __init__(
        self,
        spec: McpServerSpec,
        cwd: Path,
        env: EnvPolicy = DEFAULT_POLICY,
        elicit: Elicit | None = None,
        completed: Completed | None = None,
    ) -> None:
        self.spec = spec
        self.name = spec.name
        self.cwd = cwd
        self._env = env
        self._secrets = known_secrets(spec, env)
        self.session: ClientSession | None = None
        self.remote_tools: list[mcp_types.Tool] = []
        self.failure: str | None = None
        """Why the server could not start (set before `ready`)."""
        self.lost: str | None = None
        """Why a started server is gone (it died, or the connection broke)."""
        self.stream_error: str | None = None
        self.ready = anyio.Event()
        self.done = anyio.Event()
        self._closing = anyio.Event()
        self._scope = anyio.CancelScope()
        self._stderr: _StderrTail | None = None
        self._task: asyncio.Task[None] | None = None
        self._elicit = elicit
        self._completed = completed
        self.calls: list[str] = []
        """The tool calls running on this server, oldest first (`McpTool.run`): an
        elicitation is tied to the latest."""
        self._deadlines: dict[str, tuple[anyio.CancelScope, float, list[int]]] = {}
        """Each running call's time-out: (its scope, its seconds, questions held open)."""
        self.asking: dict[str, set[anyio.CancelScope]] = {}
        """The elicitations waiting on the user, by the tool call they are tied to: they end
        with it (`call_ended`)."""

    @property
    def pid(self) -> int | None:
        """The stdio server's process id (None for HTTP/SSE or before it is known)."""
        return self._stderr.pid if self._stderr is not None else None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"mcp-server-{self.name}")

    def abort(self, reason: str) -> None:
        """Give up on a server that has not started: record why and unwind its start-up.

        An unresponsive process gets SIGTERM at once rather than the SDK's grace period for
        a polite exit (it has shown it will not answer)."""
        if self.failure is None:
            tail = self._stderr.tail() if self._stderr is not None else ""
            self.failure = self.redact(f"{reason}; last stderr: {tail}" if tail else reason)
        self._signal_group(signal.SIGTERM)
        self._scope.cancel()

    def _signal_group(self, sig: int) -> bool:
        """Send `sig` to the stdio server's process group; False when there is none (left)."""
        pid = self.pid
        if pid is None or sys.platform == "win32" or pid == os.getpgrp():
            return False
        try:
            os.killpg(pid, sig)
        except (ProcessLookupError, PermissionError):
            return False
        return True

    def close(self) -> None:
        if self.ready.is_set() and self.failure is None:
            self._closing.set()
        else:
            self.abort("closed before it started")

    def deadline(self, tool_call_id: str, seconds: float) -> anyio.CancelScope:
        """The time-out of a call starting now (`McpTool.run`), which `user_answering` holds."""
        scope = anyio.CancelScope(deadline=anyio.current_time() + seconds)
        self._deadlines[tool_call_id] = (scope, seconds, [0])
        return scope

    def user_answering(self, tool_call_id: str, answering: bool) -> None:
        """While the user answers a call's elicitation its time-out is held (the server
        waits for the user, not the other way round); it runs again, whole, after."""
        if (entry := self._deadlines.get(tool_call_id)) is None:
            return
        scope, seconds, held = entry
        held[0] += 1 if answering else -1
        scope.deadline = math.inf if held[0] > 0 else anyio.current_time() + seconds

    def call_ended(self, tool_call_id: str) -> None:
        """A tool call on this server ended (or was cancelled): so do its elicitations."""
        self.calls.remove(tool_call_id)
        self._deadlines.pop(tool_call_id, None)
        for scope in self.asking.pop(tool_call_id, ()):
            scope.cancel()

    def redact(self, text: str) -> str:
        """`text` without the secrets this server may have printed (see the module)."""
        return redact(text, self._secrets)

    async def mark_lost(self, what: str) -> str:
        """Record that a started server is gone; the message says so, with its last words."""
        if self.lost is None:
            if self._stderr is not None:
                await self._stderr.drained(0.3)
            tail = self._stderr.tail() if self._stderr is not None else ""
            self.lost = self.redact(f"{what}; last stderr: {tail}" if tail else what)
            log.warning("mcp_server_lost", server=self.name, reason=self.lost)
        return f"MCP server '{self.name}' stopped working ({self.lost}); its tools cannot be used"

    async def _run(self) -> None:
        try:
            with self._scope:
                try:
                    async with AsyncExitStack() as stack:
                        session = await self._open(stack)
                        await session.initialize()
                        self.remote_tools = await _list_tools(session)
                        self.session = session
                        self.ready.set()
                        await self._closing.wait()
                except Exception as exc:
                    if self.ready.is_set():
                        if not self._closing.is_set() and self.lost is None:
                            await self.mark_lost(describe(exc))
                        else:
                            error = self.redact(str(exc))
                            log.debug("mcp_server_close_error", server=self.name, error=error)
                    elif self.failure is None:
                        self.failure = self.redact(await self._startup_failure(exc))
            if self.failure is None and not self.ready.is_set():
                self.failure = "closed before it started"
        finally:
            self.session = None
            self.ready.set()
            with anyio.CancelScope(shield=True):
                await self._sweep()
            self.done.set()

    async def _open(self, stack: AsyncExitStack) -> ClientSession:
        from mcp import ClientSession, Implementation

        spec = self.spec
        if spec.transport == "stdio":
            read, write = await self._open_stdio(stack)
        elif spec.transport == "http":
            import httpx2
            from mcp.client.streamable_http import streamable_http_client

            client = httpx2.AsyncClient(
                headers=dict(spec.headers),
                timeout=httpx2.Timeout(HTTP_TIMEOUT, read=300.0),
            )
            await stack.enter_async_context(client)
            read, write = await stack.enter_async_context(
                streamable_http_client(_require_url(spec), http_client=client)
            )
        elif spec.transport == "sse":
            from mcp.client.sse import sse_client

            read, write = await stack.enter_async_context(
                sse_client(
                    _require_url(spec),
                    headers=dict(spec.headers) or None,
                    timeout=HTTP_TIMEOUT,
                    sse_read_timeout=SSE_READ_TIMEOUT,
                )
            )
        else:
            raise _StartError(f"unsupported transport {spec.transport!r}")

        from mcp_types import ElicitCompleteNotification

        async def on_message(message: Any) -> None:
            if isinstance(message, Exception) and self.stream_error is None:
                self.stream_error = self.redact(_describe_stream_error(message))
            elif isinstance(message, ElicitCompleteNotification) and self._completed is not None:
                await self._completed(self, message.params.elicitation_id)

        async def on_elicit(context: Any, params: Any) -> Any:
            assert self._elicit is not None
            return await self._elicit(self, params)

        return await stack.enter_async_context(
            ClientSession(
                read,
                write,
                message_handler=on_message,
                elicitation_callback=on_elicit if self._elicit is not None else None,
                client_info=Implementation(name="defect", version=__version__),
            )
        )

    async def _open_stdio(self, stack: AsyncExitStack) -> Any:
        from mcp import StdioServerParameters
        from mcp.client.stdio import get_default_environment, stdio_client

        spec = self.spec
        env = self._env.apply(os.environ, dict(spec.env))
        path = env.get("PATH", get_default_environment().get("PATH", os.defpath))
        command = _resolve_command(spec.command or "", self.cwd, path)
        args = list(spec.args)
        if sys.platform != "win32" and os.access("/bin/sh", os.X_OK):
            args = ["-c", _SHIM, f"defect-mcp-{self.name}", command, *args]
            command = "/bin/sh"
        params = StdioServerParameters(command=command, args=args, env=env or None, cwd=self.cwd)
        self._stderr = _StderrTail(self.name, self.redact)
        try:
            return await stack.enter_async_context(stdio_client(params, errlog=self._stderr.writer))
        finally:
            # The child holds its own copy now; ours must go, or stderr never ends.
            self._stderr.writer.close()

    async def _startup_failure(self, exc: BaseException) -> str:
        if isinstance(exc, _StartError):
            return str(exc)
        from mcp import MCPError
        from mcp_types import CONNECTION_CLOSED

        root = _root_cause(exc)
        if self.spec.transport == "stdio" and self._stderr is not None:
            closed = isinstance(root, MCPError) and root.code == CONNECTION_CLOSED
            if closed or isinstance(root, anyio.BrokenResourceError | anyio.ClosedResourceError):
                await self._stderr.drained()
                said = self._stderr.tail() or self.stream_error
                reason = "exited during start-up"
                return f"{reason}: {said}" if said else f"{reason} (nothing on stderr)"
        reason = describe(root)
        if self.stream_error and self.stream_error not in reason:
            reason = f"{reason} ({self.stream_error})"
        return reason

    async def _sweep(self) -> None:
        """Stop what a stdio server left behind in its process group (its children)."""
        for sig, grace in ((signal.SIGTERM, SWEEP_GRACE), (signal.SIGKILL, 0.0)):
            if not self._signal_group(sig):
                return
            log.info("mcp_server_group_swept", server=self.name, pgid=self.pid, signal=sig.name)
            deadline = anyio.current_time() + grace
            while anyio.current_time() < deadline:
                await anyio.sleep(0.02)
                if not self._signal_group(0):
                    return


def known_secrets(spec: McpServerSpec, env: EnvPolicy) -> list[str]:
    """The values a server's output must not show: defect's secret variables', the server's
    own `env` and header values, and its URL's password and query values."""
    values = [*env.secret_values(), *(v for _, v in spec.env), *(v for _, v in spec.headers)]
    if spec.url:
        with contextlib.suppress(ValueError):
            parts = urlsplit(spec.url)
            values += [parts.password or "", *(v for _, v in parse_qsl(parts.query))]
    return values


class _StartError(Exception):
    """A server that cannot start, for a reason worth saying as is."""


def _require_url(spec: McpServerSpec) -> str:
    if not spec.url:
        raise _StartError(f"an {spec.transport} server needs a url")
    return spec.url


def _resolve_command(command: str, cwd: Path, path: str) -> str:
    """The executable the server runs, checked before spawning for a clear message."""
    if not command:
        raise _StartError("no command given")
    if os.sep in command or (os.altsep and os.altsep in command):
        candidate = Path(command) if Path(command).is_absolute() else cwd / command
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
        raise _StartError(f"command not found or not executable: {command}")
    found = shutil.which(command, path=path)
    if found is None:
        raise _StartError(f"command not found: {command}")
    return found


async def _list_tools(session: ClientSession) -> list[mcp_types.Tool]:
    from mcp_types import PaginatedRequestParams

    capabilities = session.server_capabilities
    if capabilities is not None and capabilities.tools is None:
        return []  # a server of prompts or resources only: nothing to offer the model
    tools: list[mcp_types.Tool] = []
    cursor: str | None = None
    for _ in range(100):
        params = PaginatedRequestParams(cursor=cursor) if cursor else None
        page = await session.list_tools(params=params)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            break
    return tools


def _leaves(exc: BaseException) -> Iterable[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            yield from _leaves(inner)
    else:
        yield exc


def _root_cause(exc: BaseException) -> BaseException:
    """The first real error inside (nested) exception groups."""
    for leaf in _leaves(exc):
        if not isinstance(leaf, anyio.get_cancelled_exc_class()):
            return leaf
    return exc


def describe(exc: BaseException) -> str:
    """The real error inside `exc` in one line, named by its type where that helps."""
    root = _root_cause(exc)
    text = one_line(str(root))
    name = type(root).__name__
    if not text:
        return name
    named = isinstance(root, OSError) or name.endswith(("Error", "Exception"))
    if named and name not in ("MCPError", "_StartError"):
        return f"{name}: {text}"
    return text


def _describe_stream_error(exc: Exception) -> str:
    """What a transport could not read: for a line that is not JSON-RPC, the line itself."""
    from pydantic import ValidationError

    if isinstance(exc, ValidationError):
        errors = exc.errors(include_url=False)
        seen = errors[0].get("input") if errors else None
        if isinstance(seen, str | bytes):
            text = seen.decode("utf-8", "replace") if isinstance(seen, bytes) else seen
            return f"it wrote something that is not JSON-RPC: {one_line(text)[:120]!r}"
        return "it sent a message that is not valid MCP"
    return describe(exc)
