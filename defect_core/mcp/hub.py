"""A session's MCP servers: `McpHub` starts them, offers their tools, and stops them.

Owns the set of one session's connections, the time-out each has to start, how their
elicitations reach the session's user (`ask_with`, `mcp/elicitation.py`), the tools they
offer (named uniquely across servers, in the order their servers became ready), the servers
still starting, and the list of servers that failed, with why.

Invariants:
- `McpHub.start` returns at once: the servers start in the background, in one task the hub
  owns (`session/new` never waits for a server: an editor times out an agent slow to open a
  session). `wait_started` waits until each server is ready or failed; `connect` is `start`
  followed by that wait.
- Nothing raises for a server's sake: servers start concurrently, each within the time-out
  (counted once the SDK is loaded); one that cannot start (missing command, early exit,
  garbage on stdout, refused connection, no answer in time) lands in `failures` as
  `(name, one-line reason)` and the others start all the same. Once the session's front end
  has taken the failures so far (`follow_failures`), each later one is published as a
  `Notice` as it happens: the user is told of each failure once, and at once.
- A model turn waits for the servers still starting (`offer`, saying so), never longer than
  their time-out, then goes on with the tools of those ready.
- `tools` only ever grows, at its end: a server's tools join together, once, when it is
  ready, after those of the servers ready before it, and are never re-sorted nor removed (a
  server lost later keeps its tools, whose calls then fail saying so). The tool list opens
  the prompt cache's prefix (`defect_core/session/toolset.py`): a server joining breaks it
  once at most, and nothing else about the hub ever does.
- `aclose` stops the start-up task and every server and waits for them (bounded, shielded
  from cancellation), so no process outlives the session, whether its server had started or
  not (see `Connection` for how a server is stopped and swept).
- The `mcp` SDK is imported by the start-up task of a hub that has servers, on a worker
  thread (a slow import), never on the event loop nor when this module is imported
  (docs/architecture.md, rule 6).

Why a hub per session: ACP gives MCP servers per `session/new`/`session/load`, and the session
owns their lifetime — closing or deleting it must leave no process behind.
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

import anyio

from defect_core.child_env import DEFAULT_POLICY, EnvPolicy
from defect_core.events import AgentEvent, Ask, ElicitationCompleted, Notice
from defect_core.log import get_logger
from defect_core.mcp.connection import Connection, describe
from defect_core.mcp.elicitation import elicit, elicit_cancelled
from defect_core.mcp.spec import McpServerSpec, merge_servers
from defect_core.mcp.tool import MCP_PREFIX, McpTool, tool_name, unique_name
from defect_core.tools.base import ToolRegistry

log = get_logger("defect.mcp")

DEFAULT_CONNECT_TIMEOUT = 10.0
"""Seconds each server gets to start, answer `initialize` and list its tools."""
DEFAULT_CALL_TIMEOUT = 120.0
"""Seconds one tool call may take before it is abandoned as a failed result."""
CLOSE_TIMEOUT = 10.0
"""Upper bound for stopping all servers (the SDK's own stdio shutdown is bounded at ~6.5 s)."""

Publish = Callable[[AgentEvent], Awaitable[None]]
"""How the session shows the user something (its event bus)."""


def failure_line(name: str, reason: str) -> str:
    """What the user reads about a server that could not start."""
    return f"MCP server '{name}' failed to start: {reason}"


def waiting_line(names: Sequence[str]) -> str:
    """What the user reads while a prompt waits for servers still starting."""
    servers = ", ".join(f"'{name}'" for name in names)
    return f"Waiting for MCP server{'s' if len(names) > 1 else ''} {servers} to start…"


class McpHub:
    """A session's MCP servers: their tools once ready, those starting, who failed."""

    def __init__(self, call_timeout: float = DEFAULT_CALL_TIMEOUT) -> None:
        self._call_timeout = call_timeout
        self._connections: list[Connection] = []
        self._tools: list[McpTool] = []
        self._taken: set[str] = set()
        self._ready: list[str] = []
        self._failures: list[tuple[str, str]] = []
        self._starting: list[str] = []
        self._follower: Publish | None = None
        self._started = anyio.Event()
        """Set once no server is starting any more (or the hub was closed)."""
        self._scope = anyio.CancelScope()
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self._env: EnvPolicy = DEFAULT_POLICY
        """What a stdio server inherits of defect's environment (`defect_core/child_env.py`)."""
        self._ask: Ask | None = None
        """How the servers' elicitations reach the session's user (`ask_with`)."""
        self._tell: Publish | None = None

    @classmethod
    def start(
        cls,
        specs: Sequence[McpServerSpec],
        cwd: Path,
        timeout: float = DEFAULT_CONNECT_TIMEOUT,
        *,
        call_timeout: float = DEFAULT_CALL_TIMEOUT,
        env: EnvPolicy = DEFAULT_POLICY,
    ) -> McpHub:
        """Start every server in the background and return at once (no I/O here). A stdio
        server inherits defect's environment without what `env` withholds."""
        hub = cls(call_timeout=call_timeout)
        hub._env = env
        specs = merge_servers(specs, ())
        hub._starting = [spec.name for spec in specs]
        if not specs:
            hub._started.set()
            return hub
        hub._task = asyncio.create_task(hub._start_all(specs, cwd, timeout), name="mcp-hub")
        return hub

    @classmethod
    async def connect(
        cls,
        specs: Sequence[McpServerSpec],
        cwd: Path,
        timeout: float = DEFAULT_CONNECT_TIMEOUT,  # noqa: ASYNC109 (partial results, not a raise)
        *,
        call_timeout: float = DEFAULT_CALL_TIMEOUT,
        env: EnvPolicy = DEFAULT_POLICY,
    ) -> McpHub:
        """Start every server and return once each is ready or failed. A stdio server inherits
        defect's environment without what `env` withholds."""
        hub = cls.start(specs, cwd, timeout, call_timeout=call_timeout, env=env)
        try:
            await hub.wait_started()
        except BaseException:
            with anyio.CancelScope(shield=True):
                await hub.aclose()
            raise
        return hub

    def follow_failures(self, publish: Publish) -> str | None:
        """The failures so far, as one message (`failure_notice`); each later one goes to
        `publish` as a `Notice` as it happens. So a front end that shows this message once the
        session is open, then the session's events, is told of every failure once, at once."""
        self._follower = publish
        return self.failure_notice()

    def ask_with(self, ask: Ask, tell: Publish) -> None:
        """Ask the session's user through `ask` when a server elicits input
        (`mcp/elicitation.py`), and `tell` when a page it opened is done with
        (`ElicitationCompleted`); until then, and once the hub is closed, it is refused."""
        self._ask, self._tell = ask, tell

    def ask_like(self, other: McpHub) -> None:
        """Ask the user as `other` does: a hub started later for the same session (a trusted
        project's servers, `session/trusting.py`) asks through the session's questions too."""
        self._ask, self._tell = other._ask, other._tell

    async def _completed(self, conn: Connection, elicitation_id: str) -> None:
        if self._tell is not None and not self._closed:
            await self._tell(ElicitationCompleted(elicitation_id))

    async def _elicit(self, conn: Connection, params: object) -> object:
        """A server's elicitation, tied to its latest running tool call (if any), which it
        does not outlive: when that call ends first (the turn was cancelled), the question
        is withdrawn and the server told it was cancelled. While the user answers, the
        call's time-out is held (`Connection.user_answering`)."""
        ask = None if self._closed else self._ask
        call = conn.calls[-1] if conn.calls else None
        scope = anyio.CancelScope()
        if call is not None:
            conn.asking.setdefault(call, set()).add(scope)
            conn.user_answering(call, True)
        try:
            with scope:
                return await elicit(conn.name, params, call, ask)
        finally:
            if call is not None:
                conn.asking.get(call, set()).discard(scope)
                conn.user_answering(call, False)
        return elicit_cancelled(conn.name)

    async def offer(self, tools: ToolRegistry, publish: Publish) -> None:
        """Before a model turn: wait for the servers still starting (each within its
        time-out), saying so through `publish`, then add to `tools`, at its end, the ready
        servers' tools it does not have yet, in the order they joined."""
        if starting := self.starting:
            await publish(Notice(waiting_line(starting)))
            await self.wait_started()
        for tool in self._tools:
            if tools.get(tool.name) is None:
                tools.add(tool)

    async def wait_started(self) -> None:
        """Wait until no server is starting: each is ready or failed (within its time-out)."""
        await self._started.wait()

    async def _start_all(self, specs: Sequence[McpServerSpec], cwd: Path, seconds: float) -> None:
        """The start-up task: every server, until each is ready or failed (or the hub closed)."""
        try:
            with self._scope:
                await self._start_each(specs, cwd, seconds)
        except Exception as exc:  # a defect of ours, not a server's: nobody may wait for ever
            log.exception("mcp_start_failed")
            for name in list(self._starting):
                await self._failed(name, f"could not be started ({describe(exc)})")
        finally:
            self._started.set()

    async def _start_each(self, specs: Sequence[McpServerSpec], cwd: Path, seconds: float) -> None:
        try:
            # A slow import: off the event loop, so other sessions keep going.
            await anyio.to_thread.run_sync(importlib.import_module, "mcp", abandon_on_cancel=True)
        except ImportError:
            for spec in specs:
                await self._failed(spec.name, "the `mcp` package is not installed")
            return
        deadline = anyio.current_time() + seconds
        asks = (self._elicit, self._completed)
        connections = [Connection(spec, cwd, self._env, *asks) for spec in specs]
        self._connections.extend(connections)
        for conn in connections:
            conn.start()
        async with anyio.create_task_group() as tg:
            for conn in connections:
                tg.start_soon(self._watch, conn, deadline, seconds)

    async def _watch(self, conn: Connection, deadline: float, seconds: float) -> None:
        """One server until it is ready, failed, or out of time."""
        with anyio.move_on_at(deadline):
            await conn.ready.wait()
        if not conn.ready.is_set():
            conn.abort(f"did not start within {seconds:g} s")
        if conn.failure is not None or conn.session is None:
            await self._failed(conn.name, conn.failure or conn.lost or "closed before it started")
            return
        self._join(conn)

    def _join(self, conn: Connection) -> None:
        """A ready server's tools, after those of the servers ready before it."""
        for remote in conn.remote_tools:
            name = unique_name(tool_name(conn.name, remote.name), self._taken)
            self._tools.append(McpTool(conn, remote, name, self._call_timeout))
        self._ready.append(conn.name)
        self._settled(conn.name)
        log.info(
            "mcp_server_connected",
            server=conn.name,
            transport=conn.spec.transport,
            tools=len(conn.remote_tools),
            pid=conn.pid,
        )

    async def _failed(self, name: str, reason: str) -> None:
        # Recorded and handed on with no suspension point between: a follower is never told
        # of a failure `failure_notice` already said, nor misses one it did not.
        self._failures.append((name, reason))
        self._settled(name)
        log.warning("mcp_server_failed", server=name, reason=reason)
        if self._follower is not None and not self._closed:
            try:
                await self._follower(Notice(failure_line(name, reason), "warning"))
            except Exception:
                log.exception("mcp_failure_not_told", server=name)

    def _settled(self, name: str) -> None:
        if name in self._starting:
            self._starting.remove(name)

    @property
    def tools(self) -> list[McpTool]:
        """The ready servers' tools, server by server in the order they became ready."""
        return list(self._tools)

    @property
    def failures(self) -> list[tuple[str, str]]:
        """(server name, one-line reason) for each server that could not start."""
        return list(self._failures)

    @property
    def servers(self) -> list[str]:
        """Names of the servers that started, in the order they became ready."""
        return list(self._ready)

    @property
    def starting(self) -> list[str]:
        """Names of the servers still starting, in the order they were given."""
        return [] if self._closed else list(self._starting)

    @property
    def may_offer_tools(self) -> bool:
        """Whether any server offers tools, or still may (it is starting)."""
        return bool(self._tools or self.starting)

    def names_for_prompt(self) -> list[str]:
        """What the system prompt is told of these tools: the prefix every MCP tool's name
        starts with while any server offers tools or still may. The prompt is built once,
        often before the servers are ready, and its guidance covers every `mcp__` tool, so
        it need not change (nor break the prompt cache) when they join."""
        return [MCP_PREFIX] if self.may_offer_tools else []

    def pids(self) -> dict[str, int]:
        """Process ids of the stdio servers (started or not) — for diagnostics and tests."""
        return {c.name: pid for c in self._connections if (pid := c.pid) is not None}

    def failure_notice(self) -> str | None:
        """One message for the user about the servers that failed so far, or None."""
        if not self._failures:
            return None
        return "\n".join(failure_line(name, reason) for name, reason in self._failures)

    async def aclose(self) -> None:
        """Stop the start-up and every server, and wait until each is gone (bounded;
        shielded from cancellation)."""
        self._closed = True
        with anyio.CancelScope(shield=True):
            self._scope.cancel()
            with anyio.move_on_after(CLOSE_TIMEOUT) as scope:
                if self._task is not None:
                    await self._started.wait()
                for conn in self._connections:
                    conn.close()
                for conn in self._connections:
                    await conn.done.wait()
            if scope.cancelled_caught:
                stuck = [c.name for c in self._connections if not c.done.is_set()]
                log.warning("mcp_close_timeout", servers=stuck)

    async def __aenter__(self) -> McpHub:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
