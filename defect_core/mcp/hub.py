"""A session's MCP servers: `McpHub` connects them, offers their tools, and stops them.

Owns the set of one session's connections, the deadline they start within, the tools they
offer (named uniquely across servers) and the list of servers that failed, with why.

Invariants:
- `McpHub.connect` never raises for a server's sake: servers start concurrently, each within
  one shared deadline; one that cannot start (missing command, early exit, garbage on stdout,
  refused connection, no answer in time) lands in `failures` as `(name, one-line reason)`
  and the others are connected all the same. `connect` returns at the deadline at the latest;
  a server that is still being stopped keeps stopping in the background.
- `aclose` stops every server and waits for it (bounded, shielded from cancellation), so no
  process outlives the session (see `Connection` for how a server is stopped and swept).
- The `mcp` SDK is imported by the first `connect` that has servers to connect, on a worker
  thread (~1 s), never on the event loop nor when this module is imported
  (docs/architecture.md, rule 6).

Why a hub per session: ACP gives MCP servers per `session/new`/`session/load`, and the session
owns their lifetime — closing or deleting it must leave no process behind.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from pathlib import Path

import anyio

from defect_core.child_env import DEFAULT_POLICY, EnvPolicy
from defect_core.log import get_logger
from defect_core.mcp.connection import Connection
from defect_core.mcp.spec import McpServerSpec, merge_servers
from defect_core.mcp.tool import McpTool, tool_name, unique_name

log = get_logger("defect.mcp")

DEFAULT_CONNECT_TIMEOUT = 10.0
"""Seconds every server together gets to start, answer `initialize` and list its tools."""
DEFAULT_CALL_TIMEOUT = 120.0
"""Seconds one tool call may take before it is abandoned as a failed result."""
CLOSE_TIMEOUT = 10.0
"""Upper bound for stopping all servers (the SDK's own stdio shutdown is bounded at ~6.5 s)."""


class McpHub:
    """A session's MCP servers: their tools while connected, and who failed to start."""

    def __init__(self, call_timeout: float = DEFAULT_CALL_TIMEOUT) -> None:
        self._call_timeout = call_timeout
        self._connections: list[Connection] = []
        self._tools: list[McpTool] = []
        self._failures: list[tuple[str, str]] = []
        self._closed = False

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
        """Connect every server concurrently; return when all answered or `timeout` passed.
        A stdio server inherits defect's environment without what `env` withholds."""
        hub = cls(call_timeout=call_timeout)
        specs = merge_servers(specs, ())
        if not specs:
            return hub
        try:
            # The SDK takes ~1 s to import: off the event loop, so other sessions keep going.
            await anyio.to_thread.run_sync(importlib.import_module, "mcp")
        except ImportError:
            reason = "the `mcp` package is not installed"
            hub._failures = [(spec.name, reason) for spec in specs]
            for spec in specs:
                log.warning("mcp_server_failed", server=spec.name, reason=reason)
            return hub
        try:
            for spec in specs:
                conn = Connection(spec, cwd, env)
                hub._connections.append(conn)
                conn.start()
            with anyio.move_on_after(timeout):
                for conn in hub._connections:
                    await conn.ready.wait()
            for conn in hub._connections:
                if not conn.ready.is_set():
                    conn.abort(f"did not start within {timeout:g} s")
        except BaseException:
            with anyio.CancelScope(shield=True):
                await hub.aclose()
            raise
        hub._collect()
        return hub

    def _collect(self) -> None:
        taken: set[str] = set()
        for conn in self._connections:
            if conn.failure is not None or conn.session is None:
                reason = conn.failure or conn.lost or "closed before it started"
                self._failures.append((conn.name, reason))
                log.warning(
                    "mcp_server_failed",
                    server=conn.name,
                    transport=conn.spec.transport,
                    reason=reason,
                )
                continue
            for remote in conn.remote_tools:
                name = unique_name(tool_name(conn.name, remote.name), taken)
                self._tools.append(McpTool(conn, remote, name, self._call_timeout))
            log.info(
                "mcp_server_connected",
                server=conn.name,
                transport=conn.spec.transport,
                tools=len(conn.remote_tools),
                pid=conn.pid,
            )

    @property
    def tools(self) -> list[McpTool]:
        """The connected servers' tools, server by server in the order given."""
        return list(self._tools)

    @property
    def failures(self) -> list[tuple[str, str]]:
        """(server name, one-line reason) for each server that could not start."""
        return list(self._failures)

    @property
    def servers(self) -> list[str]:
        """Names of the servers that started."""
        failed = {name for name, _ in self._failures}
        return [c.name for c in self._connections if c.name not in failed]

    def pids(self) -> dict[str, int]:
        """Process ids of the stdio servers (started or not) — for diagnostics and tests."""
        return {c.name: pid for c in self._connections if (pid := c.pid) is not None}

    def failure_notice(self) -> str | None:
        """One message for the user about the servers that failed, or None."""
        if not self._failures:
            return None
        lines = [
            f"MCP server '{name}' failed to start: {reason}" for name, reason in self._failures
        ]
        return "\n".join(lines)

    async def aclose(self) -> None:
        """Stop every server and wait until each is gone (bounded; shielded from cancel)."""
        self._closed = True
        with anyio.CancelScope(shield=True):
            for conn in self._connections:
                conn.close()
            with anyio.move_on_after(CLOSE_TIMEOUT) as scope:
                for conn in self._connections:
                    await conn.done.wait()
            if scope.cancelled_caught:
                stuck = [c.name for c in self._connections if not c.done.is_set()]
                log.warning("mcp_close_timeout", servers=stuck)

    async def __aenter__(self) -> McpHub:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
