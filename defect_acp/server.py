"""The ACP server: every agent-side method of ACP v1, mapped onto `AgentCore`/`Session`.

Owns `DefectAgent` (the handler object the SDK's router calls) and `serve()`, which wires it
to stdio. What flows the other way — a session's events as `session/update`, permission
questions, the replay of a stored session — is `defect_acp/updates.py`; every reach into the
SDK's internals is `defect_acp/sdk_compat.py`.

Invariants:
- The bridge reaches the runtime only through `AgentCore`/`Session` (docs/architecture.md, rule 2):
  `serve` is handed a core built by the composition root (`defect_cli/wiring.py`), and of the
  runtime only the door module (`defect_core.session.protocol`) is imported (docs/layers.md,
  contract 18).
- A `session/prompt` is answered only after every update of its turn has been written: the
  handler waits until the pump has forwarded the turn's last event. Nothing of that turn is
  sent after the answer.
- `DefectAgent` does not inherit the SDK's `Agent` protocol: the SDK would silently answer
  `{}`/`null` for a method we did not write, where a missing method must be -32601.
- Handlers take `**kwargs`: the SDK merges `_meta` entries into the keyword arguments.
- Extension requests (`_`-prefixed) reach `ext_method`: `_session/steering` is served by
  `defect_acp/steering.py`; any other is -32601.
- Errors are one line: -32602 for bad params, -32002 for an unknown session, -32000 when
  credentials are missing (a prompt, `authenticate`: `defect_acp/auth.py`), -32603 with
  `data.retryable` when the model call failed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from acp import PROTOCOL_VERSION, RequestError
from acp import schema as s
from acp.agent.connection import AgentSideConnection

from defect_acp import auth as acp_auth
from defect_acp import projection
from defect_acp.delegate import select_backends
from defect_acp.fastimport import warm_turn_path
from defect_acp.params import guard_params
from defect_acp.sdk_compat import add_request_route, agent_connection
from defect_acp.steering import INITIALIZE_META, SteeringRoute
from defect_acp.steering import METHOD as STEERING_METHOD
from defect_acp.transport import LineWriter, StdioTransport, open_stdin_reader
from defect_acp.updates import SessionPump, StreamedReplay, after_open_updates, replay
from defect_core import __version__
from defect_core.log import get_logger
from defect_core.session.protocol import (
    AgentCore,
    AgentError,
    Backends,
    Frontend,
    HistoryPart,
    LocalFsBackend,
    McpServerSpec,
    Session,
    TurnError,
)

log = get_logger("defect.acp")

SUPPORTED_PROTOCOL_VERSIONS = (PROTOCOL_VERSION,)
SHUTDOWN_GRACE_SECONDS = 1.5
"""On SIGTERM, requests already received get this long to be answered (running turns are
cancelled first, so a prompt answers `cancelled` in a fraction of it)."""


def to_request_error(err: AgentError) -> RequestError:
    """The JSON-RPC error for a runtime error, by its `code`: one line, never empty."""
    message = str(err).splitlines()[0] if str(err) else type(err).__name__
    data = err.data or None if isinstance(err, TurnError) else None
    code = {
        "not_found": -32002,
        "invalid_params": -32602,
        "invalid_request": -32600,
        "auth_required": -32000,
    }.get(err.code, -32603)
    return RequestError(code, message, data)


class DefectAgent:
    """The handler object behind the SDK's router."""

    def __init__(
        self,
        core: AgentCore,
        *,
        resume: str | None = None,
        terminal_shell: str = "/bin/sh",
        auth: acp_auth.AuthDoor | None = None,
    ) -> None:
        self._core = core
        self._auth = auth
        """The stored credentials (`defect_acp/auth.py`); None: the environment only."""
        self._terminal_shell = terminal_shell
        """What the editor's terminal runs a command line with (`terminal_shell` setting)."""
        self._resume = resume
        """`--resume [ID]`: the first session/new continues ID ("" = newest for its cwd)."""
        self._conn: AgentSideConnection | None = None
        self._client_capabilities: s.ClientCapabilities | None = None
        self._client_info: s.Implementation | None = None
        self._pumps: dict[str, SessionPump] = {}
        self._after_answer: dict[str, list[Callable[[], Awaitable[None]]]] = {}
        self._warmed = False
        self._transport: StdioTransport | None = None
        self._steering = SteeringRoute(self._session, self._pumps.get, self.send_update)

    # --- wiring -----------------------------------------------------------------------------

    def on_connect(self, conn: AgentSideConnection) -> None:
        self._conn = conn

    @property
    def connection(self) -> AgentSideConnection:
        assert self._conn is not None, "the agent is not connected"
        return self._conn

    def use_transport(self, transport: StdioTransport) -> None:
        """The protocol channel, for writing a batch of updates at once (`send_updates`)."""
        self._transport = transport

    async def send_update(self, session_id: str, update: Any) -> None:
        await self.send_updates(session_id, [update])

    async def send_updates(self, session_id: str, updates: Sequence[Any]) -> None:
        """`session/update` notifications for `updates`, in order, as one write and flush."""
        shown = [u for u in updates if u is not None]
        if not shown:
            return
        try:
            if self._transport is None:
                for update in shown:
                    await self.connection.session_update(session_id=session_id, update=update)
                return
            await self._transport.send_encoded(
                [line for update in shown if (line := projection.update_line(session_id, update))]
            )
        except ConnectionError:
            log.debug("update_dropped_connection_closed", session_id=session_id)

    async def send_lines(self, session_id: str, lines: Sequence[bytes]) -> None:
        """`session/update` lines already encoded (a replay), in order, as one write."""
        if not lines:
            return
        if self._transport is None:  # no raw channel: through the SDK, one by one
            params = [json.loads(line)["params"] for line in lines]
            notes = [s.SessionNotification.model_validate(p) for p in params]
            await self.send_updates(session_id, [note.update for note in notes])
            return
        try:
            await self._transport.send_encoded(list(lines))
        except ConnectionError:
            log.debug("update_dropped_connection_closed", session_id=session_id)

    async def on_response(self, method: str, params: Any, response: dict[str, Any]) -> None:
        """Runs after a response left: sends what must follow an answer."""
        if "result" not in response:
            return
        if method in ("session/new", "session/load", "session/resume", "session/fork"):
            result = response.get("result") or {}
            session_id = result.get("sessionId") or (params or {}).get("sessionId")
            for follow in self._after_answer.pop(session_id, []) if session_id else []:
                await follow()

    def on_cancel_request(self, request_id: Any, method: str | None, params: Any) -> None:
        """`$/cancel_request`: a cancelled `session/prompt` cancels its turn (answer: cancelled)."""
        if method == "session/prompt" and isinstance(params, dict):
            session = self._core.session(str(params.get("sessionId")))
            if session is not None:
                session.cancel_turn()

    # --- lifecycle --------------------------------------------------------------------------

    async def initialize(
        self,
        protocol_version: int,
        client_capabilities: s.ClientCapabilities | None = None,
        client_info: s.Implementation | None = None,
        **kwargs: Any,
    ) -> dict[str, Any]:
        self._client_capabilities = client_capabilities
        self._client_info = client_info
        self._steering.initialized(kwargs.get("steering"), client_capabilities)
        version = (
            protocol_version
            if protocol_version in SUPPORTED_PROTOCOL_VERSIONS
            else max(SUPPORTED_PROTOCOL_VERSIONS)
        )
        transports = self._core.mcp_transports()
        # Loading, listing and resuming stored sessions only when sessions are saved: with an
        # unusable store, nothing could be loaded after a restart (each new session says why).
        saved = self._core.storage_problem is None
        response = s.InitializeResponse(
            protocol_version=version,
            agent_capabilities=s.AgentCapabilities(
                load_session=saved,
                prompt_capabilities=s.PromptCapabilities(
                    image=True, audio=False, embedded_context=True
                ),
                mcp_capabilities=s.McpCapabilities(
                    http="http" in transports, sse="sse" in transports
                ),
                session_capabilities=s.SessionCapabilities(
                    list=s.SessionListCapabilities() if saved else None,
                    resume=s.SessionResumeCapabilities() if saved else None,
                    delete=s.SessionDeleteCapabilities(),
                    close=s.SessionCloseCapabilities(),
                    # Unstable in ACP; a fork lives in the store, so only when sessions are saved.
                    fork=s.SessionForkCapabilities() if saved else None,
                ),
                auth=acp_auth.agent_auth_capabilities(self._auth),
            ),
            auth_methods=acp_auth.auth_methods(client_capabilities),
            agent_info=s.Implementation(name="defect", title="defect", version=__version__),
            field_meta=INITIALIZE_META,  # `_session/steering` (defect_acp/steering.py)
        )
        result: dict[str, Any] = response.model_dump(mode="json", by_alias=True, exclude_none=True)
        return result

    async def authenticate(self, method_id: str, **kwargs: Any) -> s.AuthenticateResponse:
        return await acp_auth.authenticate(self._auth, method_id)

    async def logout(self, params: Any) -> dict[str, Any]:
        """`logout` (routed by hand: the pinned SDK does not)."""
        return await acp_auth.logout(self._auth, params)

    # --- sessions ---------------------------------------------------------------------------

    async def new_session(
        self,
        cwd: str,
        mcp_servers: list[Any] | None = None,
        additional_directories: list[str] | None = None,
        **kwargs: Any,
    ) -> s.NewSessionResponse:
        path = _absolute_cwd(cwd)
        if self._resume is not None:
            resumed = await self._resume_first(path, mcp_servers)
            if resumed is not None:
                return resumed
        session_id = f"sess_{uuid.uuid4().hex}"
        try:
            session = await self._core.create_session(
                session_id, path, self._backends(session_id, path), _mcp_specs(mcp_servers)
            )
        except AgentError as err:
            raise to_request_error(err) from None
        self._attach(session)
        if not self._warmed:
            # Once per process: cheap next to the editor's wait for session/new, and it
            # spares the first prompt the deferred validator builds. The provider's SDK (the
            # longest import) loads in a background thread while the user types.
            self._warmed = True
            warm_turn_path()
            self._core.warm()
        return s.NewSessionResponse(
            session_id=session.id,
            modes=projection.modes(session.current_mode(), session.available_modes()),
            config_options=projection.config_options(session.config_options()),
        )

    async def _resume_first(
        self, cwd: Path, mcp_servers: list[Any] | None
    ) -> s.NewSessionResponse | None:
        """`defect acp --resume [ID]`: the first session/new continues a stored session (and
        replays it right after the answer, once the client knows its id)."""
        wanted, self._resume = self._resume, None
        session_id = wanted or await self._core.latest_session(cwd)
        if not session_id:
            log.info("resume_nothing_to_resume", cwd=str(cwd))
            return None
        session = await self._restore(session_id, str(cwd), mcp_servers)

        async def replay_stored() -> None:
            await replay(self, session)

        self._after_answer.setdefault(session.id, []).insert(0, replay_stored)
        return s.NewSessionResponse(
            session_id=session.id,
            modes=projection.modes(session.current_mode(), session.available_modes()),
            config_options=projection.config_options(session.config_options()),
        )

    async def load_session(
        self,
        cwd: str,
        session_id: str,
        mcp_servers: list[Any] | None = None,
        **kwargs: Any,
    ) -> s.LoadSessionResponse:
        replaying = StreamedReplay(self, session_id)  # sent as the store reads it
        session = await self._restore(session_id, cwd, mcp_servers, replaying.part)
        await replaying.finish(session)
        return s.LoadSessionResponse(
            modes=projection.modes(session.current_mode(), session.available_modes()),
            config_options=projection.config_options(session.config_options()),
        )

    async def resume_session(
        self,
        session_id: str,
        cwd: str,
        mcp_servers: list[Any] | None = None,
        **kwargs: Any,
    ) -> s.ResumeSessionResponse:
        session = await self._restore(session_id, cwd, mcp_servers)
        return s.ResumeSessionResponse(
            modes=projection.modes(session.current_mode(), session.available_modes()),
            config_options=projection.config_options(session.config_options()),
        )

    async def fork_session(
        self,
        cwd: str,
        session_id: str,
        mcp_servers: list[Any] | None = None,
        additional_directories: list[str] | None = None,
        **kwargs: Any,
    ) -> s.ForkSessionResponse:
        """`session/fork` (unstable): a new session sharing `session_id`'s history so far,
        opened like a loaded one but not replayed (the client has the origin's history)."""
        path = _absolute_cwd(cwd)
        fork_id = f"sess_{uuid.uuid4().hex}"
        try:
            session = await self._core.fork_session(
                session_id, fork_id, path, self._backends(fork_id, path), _mcp_specs(mcp_servers)
            )
        except AgentError as err:
            raise to_request_error(err) from None
        self._attach(session)
        return s.ForkSessionResponse(
            session_id=session.id,
            modes=projection.modes(session.current_mode(), session.available_modes()),
            config_options=projection.config_options(session.config_options()),
        )

    async def list_sessions(
        self, cwd: str | None = None, cursor: str | None = None, **kwargs: Any
    ) -> s.ListSessionsResponse:
        try:
            page = await self._core.list_sessions(_absolute_cwd(cwd) if cwd else None, cursor)
        except AgentError as err:
            raise to_request_error(err) from None
        return s.ListSessionsResponse(
            sessions=[
                s.SessionInfo(
                    session_id=item.id, cwd=item.cwd, title=item.title, updated_at=item.updated_at
                )
                for item in page.sessions
            ],
            next_cursor=page.next_cursor,
        )

    async def close_session(self, session_id: str, **kwargs: Any) -> s.CloseSessionResponse:
        pump = self._pumps.pop(session_id, None)
        try:
            await self._core.close_session(session_id)
        except AgentError as err:
            raise to_request_error(err) from None
        finally:
            if pump is not None:
                await pump.stop()
        return s.CloseSessionResponse()

    async def delete_session(self, params: Any) -> dict[str, Any]:
        """`session/delete` (routed by hand: the pinned SDK does not). Unknown id: success."""
        session_id = params.get("sessionId") if isinstance(params, dict) else None
        if not isinstance(session_id, str) or not session_id:
            raise RequestError(-32602, "session/delete needs a sessionId string")
        pump = self._pumps.pop(session_id, None)
        if pump is not None:
            await pump.stop()
        try:
            await self._core.delete_session(session_id)
        except AgentError as err:
            raise to_request_error(err) from None
        return {}

    async def _restore(
        self,
        session_id: str,
        cwd: str,
        mcp_servers: list[Any] | None,
        on_history: Callable[[HistoryPart], Awaitable[None]] | None = None,
    ) -> Session:
        path = _absolute_cwd(cwd)
        try:
            session = await self._core.load_session(
                session_id,
                self._backends(session_id, path),
                _mcp_specs(mcp_servers),
                cwd=path,
                on_history=on_history,
            )
        except AgentError as err:
            raise to_request_error(err) from None
        if session.id not in self._pumps:
            self._attach(session)
        return session

    async def set_session_mode(
        self, session_id: str, mode_id: str, **kwargs: Any
    ) -> s.SetSessionModeResponse:
        session = self._session(session_id)
        try:
            await session.set_mode(mode_id)
        except AgentError as err:
            raise to_request_error(err) from None
        return s.SetSessionModeResponse()

    async def set_config_option(
        self, config_id: str, session_id: str, value: str | bool, **kwargs: Any
    ) -> s.SetSessionConfigOptionResponse:
        session = self._session(session_id)
        try:
            choice = str(value).lower() if isinstance(value, bool) else value  # JSON's spelling
            options = await session.set_config_option(config_id, choice)
        except AgentError as err:
            raise to_request_error(err) from None
        return s.SetSessionConfigOptionResponse(config_options=projection.config_options(options))

    async def prompt(self, session_id: str, prompt: list[Any], **kwargs: Any) -> s.PromptResponse:
        session = self._session(session_id)
        try:
            blocks = projection.prompt_to_blocks(prompt)
        except projection.UnsupportedContent as exc:
            raise RequestError(-32602, str(exc)) from None
        pump = self._pumps[session.id]
        ended_before = pump.turns_ended
        try:
            stop = await session.run_turn(blocks)
        except TurnError as err:
            await pump.wait_turn_ended(ended_before + 1)
            raise to_request_error(err) from None
        except AgentError as err:
            # Only a failed turn publishes its end: there is nothing to wait for.
            raise to_request_error(err) from None
        await pump.wait_turn_ended(ended_before + 1)
        usage = pump.last_usage
        meta = {"usage": projection.usage_meta(usage)} if usage is not None else None
        return s.PromptResponse(stop_reason=stop, field_meta=meta)

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        session = self._core.session(session_id)
        if session is None:
            log.warning("cancel_unknown_session", session_id=session_id)
            return
        session.cancel_turn()

    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """Extension requests (`_`-prefixed; the SDK hands them over without the `_`)."""
        if method == STEERING_METHOD:
            return await self._steering.handle(params)
        raise RequestError.method_not_found(f"_{method}")

    # --- helpers ----------------------------------------------------------------------------

    def _session(self, session_id: str) -> Session:
        session = self._core.session(session_id)
        if session is None:
            raise RequestError(-32002, f"session not found: {session_id}")
        return session

    def _attach(self, session: Session) -> None:
        caps = self._client_capabilities
        pump = SessionPump(self, session, caps.elicitation if caps is not None else None)
        self._pumps[session.id] = pump
        pump.start()

        async def follow() -> None:
            await after_open_updates(self, session)
            pump.refresh_models()

        self._after_answer.setdefault(session.id, []).append(follow)

    def _backends(self, session_id: str, cwd: Path | None = None) -> Backends:
        fs, shell = select_backends(
            self._client_capabilities,
            self.connection,
            session_id,
            local_fs=LocalFsBackend(root=cwd) if cwd is not None else None,
            terminal_shell=self._terminal_shell,
        )
        name = self._client_info.name if self._client_info else None
        return Backends(
            fs=fs,
            shell=shell,
            frontend=Frontend(
                name="acp",
                client_name=name,
                fs_delegated=fs.delegated,
                terminal_delegated=shell.delegated,
                interactive=True,
            ),
        )

    def cancel_turns(self) -> None:
        """Cancel every running turn (the process is ending): each prompt answers `cancelled`."""
        for session_id in list(self._pumps):
            session = self._core.session(session_id)
            if session is not None:
                session.cancel_turn()

    async def shutdown(self) -> None:
        await self._steering.aclose(SHUTDOWN_GRACE_SECONDS)
        for pump in list(self._pumps.values()):
            await pump.stop()
        await self._core.aclose()


def _absolute_cwd(cwd: str) -> Path:
    path = Path(cwd)
    if not path.is_absolute():
        raise RequestError(-32602, f"cwd must be an absolute path, got {cwd!r}")
    return path


def _mcp_specs(servers: list[Any] | None) -> tuple[McpServerSpec, ...]:
    specs: list[McpServerSpec] = []
    for server in servers or []:
        if isinstance(server, s.McpServerStdio):
            specs.append(
                McpServerSpec(
                    name=server.name,
                    transport="stdio",
                    command=server.command,
                    args=tuple(server.args or ()),
                    env=tuple((e.name, e.value) for e in server.env or ()),
                )
            )
        elif isinstance(server, s.HttpMcpServer | s.SseMcpServer):
            specs.append(
                McpServerSpec(
                    name=server.name,
                    transport="http" if isinstance(server, s.HttpMcpServer) else "sse",
                    url=server.url,
                    headers=tuple((h.name, h.value) for h in server.headers or ()),
                )
            )
    return tuple(specs)


async def serve(
    core: AgentCore,
    protocol_fd: int,
    *,
    resume: str | None = None,
    stop: asyncio.Event | None = None,
    terminal_shell: str = "/bin/sh",
    auth: acp_auth.AuthDoor | None = None,
) -> None:
    """Serve ACP on stdin and `protocol_fd` until stdin closes or `stop` is set (SIGTERM).

    Either end is graceful and bounded: running turns are cancelled, requests already received
    are answered — a running `session/prompt` with `cancelled`, its partial turn committed as
    any cancel commits it — within `SHUTDOWN_GRACE_SECONDS`, then every session is closed."""
    agent = DefectAgent(core, resume=resume, terminal_shell=terminal_shell, auth=auth)
    reader = await open_stdin_reader()
    writer = await LineWriter(protocol_fd).open()
    transport = StdioTransport(
        reader,
        writer,
        on_response=agent.on_response,
        on_cancel_request=agent.on_cancel_request,
        on_eof=agent.cancel_turns,
    )
    agent.use_transport(transport)
    conn = agent_connection(agent, transport)
    # Methods the pinned SDK does not route.
    add_request_route(conn, "session/delete", agent.delete_session)
    add_request_route(conn, "logout", agent.logout)
    guard_params(conn)
    listening = asyncio.ensure_future(conn.listen())
    stopping = asyncio.ensure_future(stop.wait()) if stop is not None else None
    try:
        await asyncio.wait(
            [t for t in (listening, stopping) if t is not None],
            return_when=asyncio.FIRST_COMPLETED,
        )
        if listening.done():
            listening.result()  # the input ended (after `on_eof` and the answers), or it failed
        else:
            log.info("shutdown_requested")
            agent.cancel_turns()
            await transport.wait_answered(SHUTDOWN_GRACE_SECONDS)
    finally:
        for task in (listening, stopping):
            if task is not None and not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        await agent.shutdown()
        with contextlib.suppress(Exception):
            await conn.close()
