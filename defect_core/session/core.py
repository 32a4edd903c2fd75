"""`DefaultAgentCore`: the process's sessions — create, load, fork, find, list, close, delete.

Owns the live sessions of one process, the settings each starts from, the providers they
share (every configured one, built once per shape, with one live model catalog), the store,
and each session's MCP servers at creation and load (and points the tools' schema cache,
`tools/schema_cache.py`, at the store's directory). What a session does once it exists is
`state.py`.

Invariants:
- A session id names one session: creating an id that is live or stored is
  `DuplicateSessionId`, and a session is never loaded twice (concurrent loads of one id wait
  for the first; a live session is returned as it is: one history, one event stream).
- A session that could not be created or loaded leaves nothing behind: its MCP servers
  (started in the background, never waited for here) are stopped and it is not registered.
- Without a usable store, a new session is refused under `require_persistence`; otherwise it
  opens unsaved and says so (`DefaultSession.notices`).
- Settings are resolved per session from its working directory when a `settings_for` loader
  is given (a project's `.defect/config.toml` applies to sessions in that project, wherever
  the editor started the agent); otherwise every session uses `settings`. Providers are
  shared between sessions whose settings shape them the same way.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any

import anyio

from defect_core.agents.delegation import read_subagents, subagent_views
from defect_core.config import ProviderSpec, Settings, provider_settings
from defect_core.events import message_id
from defect_core.hosted import hosted_web_search
from defect_core.log import get_logger
from defect_core.mcp import McpHub, merge_servers, supported_transports
from defect_core.providers.base import LlmProvider
from defect_core.providers.live import ModelCatalog, ProviderSet
from defect_core.providers.registry import build_named
from defect_core.session.checkpointing import forget_session, state_dir_of, sweep_leftovers
from defect_core.session.fork import fork_stored
from defect_core.session.persistence import ToolCallSnapshots, server_summary
from defect_core.session.protocol import (
    Backends,
    DuplicateSessionId,
    HistoryPart,
    InvalidCwd,
    InvalidOption,
    McpServerSpec,
    SessionNotFound,
    SessionPage,
    StorageError,
)
from defect_core.session.state import DefaultSession
from defect_core.session.toolset import default_tools
from defect_core.store import AsyncStore, BranchPart, SubagentRecord, ToolCallRecord
from defect_core.tools.base import Tool, ToolRegistry
from defect_core.tools.schema_cache import SCHEMAS

log = get_logger("defect.agent")


class DefaultAgentCore:
    """The process's sessions, the settings they start from, the providers and the store.

    Without a store (library use, unit tests) sessions live in memory only and cannot be
    loaded after the process ends.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        tools: Callable[[], Iterable[Tool]] | None = None,
        provider: LlmProvider | None = None,
        store: AsyncStore | None = None,
        store_problem: str | None = None,
        settings_for: Callable[[Path], Settings] | None = None,
    ) -> None:
        self._settings = settings
        self._store_problem = store_problem
        self._settings_for = settings_for
        self._tools_factory = tools or default_tools
        self._provider = provider
        self._providers: dict[tuple[object, ...], LlmProvider] = {}
        self._catalog = ModelCatalog()
        self._store = store
        if store is not None:  # the tools' derived schemas are kept beside the sessions
            SCHEMAS.use(state_dir_of(store))
        self._sessions: dict[str, DefaultSession] = {}
        self._loading: dict[str, anyio.Event] = {}

    @property
    def settings(self) -> Settings:
        return self._settings

    @property
    def store(self) -> AsyncStore | None:
        return self._store

    @property
    def storage_problem(self) -> str | None:
        """Why sessions are not saved (None when they are)."""
        if self._store is not None:
            return None
        return self._store_problem or "no session store is configured"

    def provider(self, settings: Settings | None = None) -> LlmProvider:
        """The default provider for `settings` (default: the process's)."""
        return self.providers(settings).default()

    def providers(self, settings: Settings | None = None) -> ProviderSet:
        """Every provider `settings` offers a session, each built once per shape and shared
        with the other sessions (their live model lists too: `ModelCatalog`)."""
        if self._provider is not None:
            return ProviderSet.single(self._provider, self._catalog)
        settings = settings or self._settings

        def build(spec: ProviderSpec) -> LlmProvider:
            key = (spec.name, *_provider_key(provider_settings(settings, spec)))
            if key not in self._providers:
                self._providers[key] = build_named(spec, settings)
            return self._providers[key]

        return ProviderSet(settings, build, self._catalog)

    def _session_settings(self, cwd: Path) -> Settings:
        if self._settings_for is None:
            return self._settings
        try:
            return self._settings_for(cwd)
        except ValueError as exc:  # ConfigError: names the file and the key
            raise InvalidOption(str(exc)) from None

    def warm(self) -> None:
        warm = getattr(self.provider(), "warm", None)
        if callable(warm):
            warm()

    def mcp_transports(self) -> frozenset[str]:
        return frozenset(supported_transports())

    async def create_session(
        self,
        session_id: str,
        cwd: Path,
        backends: Backends,
        mcp_servers: tuple[McpServerSpec, ...] = (),
    ) -> DefaultSession:
        await _check_cwd(cwd)
        if session_id in self._sessions or (
            self._store is not None and await self._store.exists(session_id)
        ):
            raise DuplicateSessionId(f"session id already in use: {session_id}")
        settings = self._session_settings(cwd)
        if self._store is None and self._store_problem is not None:
            if settings.require_persistence:
                raise StorageError(
                    f"sessions cannot be saved ({self._store_problem}), and the configuration "
                    "sets require_persistence"
                )
            log.warning("session_not_saved", session_id=session_id, reason=self._store_problem)
        providers = self.providers(settings)
        hosted_web_search(settings, providers.default())  # refused before any MCP server
        hub = await self._connect_mcp(cwd, mcp_servers, settings)
        try:
            session = DefaultSession(
                session_id=session_id,
                cwd=cwd,
                settings=settings,
                providers=providers,
                tools=ToolRegistry(self._tools_factory()),  # MCP tools join later (McpHub.offer)
                backends=backends,
                store=self._store,
                mcp=hub,
                mcp_servers=mcp_servers,
                unsaved_reason=self._store_problem if self._store is None else None,
            )
            if self._store is not None:
                await self._store.create(session.record())
        except BaseException:
            with anyio.CancelScope(shield=True):
                await hub.aclose()
            raise
        self._sessions[session_id] = session
        return session

    async def _connect_mcp(
        self, cwd: Path, requested: tuple[McpServerSpec, ...], settings: Settings
    ) -> McpHub:
        """The session's MCP servers: the editor's, merged over the configured ones and the
        repository's `.mcp.json` (the editor's win a name clash), started concurrently in the
        background: nothing waits for them here (`McpHub.start`). A project's own servers are
        among them only when the project is trusted (`config/trust.py`); the editor's are its
        own decision and are not gated."""
        project = settings.project.applied_mcp_json() if settings.project is not None else ()
        configured = [*settings.mcp_servers, *project]
        servers = merge_servers(requested, configured)
        return McpHub.start(servers, cwd, env=settings.env_policy())

    async def load_session(
        self,
        session_id: str,
        backends: Backends,
        mcp_servers: tuple[McpServerSpec, ...] = (),
        cwd: Path | None = None,
        on_history: Callable[[HistoryPart], Awaitable[None]] | None = None,
    ) -> DefaultSession:
        """The session, restored from the store — or the live one if it is already loaded
        (a session is never loaded twice: one history, one event stream). A restored
        session's history goes to `on_history` part by part as the store reads it (its
        subagent runs are read first, for their views), before the session is built."""
        while session_id in self._loading:  # a concurrent load of the same id
            await self._loading[session_id].wait()
        if session_id in self._sessions:
            return self._sessions[session_id]
        if self._store is None:
            raise SessionNotFound(f"session not found: {session_id}")
        self._loading[session_id] = done = anyio.Event()
        try:
            runs: list[SubagentRecord] | None = None
            on_part = None
            if on_history is not None:
                runs = await read_subagents(self._store, session_id)
                on_part = _history_parts(on_history, subagent_views(runs))
            if cwd is not None:  # refused before any of the history is handed on
                await _check_cwd(cwd)
            # Without its tool-call records: the session reads them when it needs them.
            stored = await self._store.load(session_id, on_part, calls=False)
            where = cwd or Path(stored.record.cwd)
            if cwd is None:
                await _check_cwd(where)
            settings = self._session_settings(where)
            providers = self.providers(settings)
            stored_provider = providers.get(stored.record.provider) or providers.default()
            hosted_web_search(settings, stored_provider)  # refused before any MCP server
            hub = await self._connect_mcp(where, mcp_servers, settings)
            try:
                session = DefaultSession(
                    session_id=session_id,
                    cwd=where,
                    settings=settings,
                    providers=providers,
                    tools=ToolRegistry(self._tools_factory()),  # MCP tools join later
                    backends=backends,
                    store=self._store,
                    stored=stored,
                    mcp=hub,
                    mcp_servers=mcp_servers,
                )
                await session.delegation.load(runs)
                await session.plan.load(self._store)
            except BaseException:  # the servers starting in the background stop with it
                with anyio.CancelScope(shield=True):
                    await hub.aclose()
                raise
            await sweep_leftovers(self._store, session_id, where, stored.transcript)
            if session.steering.waiting():  # steers a killed process acknowledged
                settled = await session.steering.settle(session.transcript())
                if settled is not None and on_part is not None:  # the replay shows them last
                    await on_part(BranchPart([settled], {}))
            self._sessions[session_id] = session
            await self._store.update(
                session_id,
                mcp_servers=[server_summary(spec) for spec in mcp_servers],
                permissions=session.permission_rules.to_dict(),  # in the current form
            )
            return session
        finally:
            del self._loading[session_id]
            done.set()

    async def fork_session(
        self,
        origin_id: str,
        fork_id: str,
        cwd: Path,
        backends: Backends,
        mcp_servers: tuple[McpServerSpec, ...] = (),
    ) -> DefaultSession:
        """Store a fork of `origin_id` (`fork.py`: one transaction) and open it. A fork that
        could not be opened is removed again: nothing is left behind."""
        if self._store is None:
            raise StorageError(
                f"sessions are not saved ({self.storage_problem}): none can be forked"
            )
        await _check_cwd(cwd)
        if fork_id in self._sessions or await self._store.exists(fork_id):
            raise DuplicateSessionId(f"session id already in use: {fork_id}")
        await fork_stored(self._store, origin_id, fork_id, cwd=cwd)
        try:
            return await self.load_session(fork_id, backends, mcp_servers, cwd=cwd)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await forget_session(self._store, fork_id)
            raise

    def session(self, session_id: str) -> DefaultSession | None:
        return self._sessions.get(session_id)

    async def list_sessions(
        self, cwd: Path | None = None, cursor: str | None = None
    ) -> SessionPage:
        if self._store is not None:
            return await self._store.list(str(cwd) if cwd else None, cursor)
        sessions = [s.summary() for s in self._sessions.values()]
        if cwd is not None:
            sessions = [s for s in sessions if s.cwd == str(cwd)]
        sessions.sort(key=lambda s: s.updated_at, reverse=True)
        return SessionPage(tuple(sessions))

    async def latest_session(self, cwd: Path) -> str | None:
        """The most recently updated stored session for `cwd`, if any."""
        if self._store is None:
            return None
        return await self._store.latest_for_cwd(str(cwd))

    async def close_session(self, session_id: str) -> None:
        """Cancel its running work and free it; it stays stored and can be loaded again."""
        session = self._sessions.pop(session_id, None)
        if session is not None:
            await session.close()
            return
        if self._store is None or not await self._store.exists(session_id):
            raise SessionNotFound(f"session not found: {session_id}")

    async def delete_session(self, session_id: str) -> None:
        session = self._sessions.pop(session_id, None)
        if session is not None:
            await session.close()
        if self._store is not None:
            await forget_session(self._store, session_id)

    async def aclose(self) -> None:
        for session_id in list(self._sessions):
            await self.close_session(session_id)
        if self._store is not None:
            await self._store.aclose()


def _provider_key(settings: Settings) -> tuple[object, ...]:
    """What shapes a provider: sessions whose settings agree here share one (and its
    connection pool, and the offline model's place in its script)."""
    return (
        settings.provider,
        settings.base_url,
        settings.api_key_env,
        settings.bedrock_base_url,
        settings.aws_region,
        settings.aws_profile,
        tuple(sorted(settings.models.items())),
        settings.read_timeout,
        settings.connect_timeout,
        settings.script_path,
    )


async def _check_cwd(cwd: Path) -> None:
    if not cwd.is_absolute():
        raise InvalidCwd(f"cwd must be an absolute path, got {str(cwd)!r}")
    if not await anyio.Path(cwd).is_dir():
        raise InvalidCwd(f"cwd is not an existing directory: {cwd}")


def _history_parts(
    on_history: Callable[[HistoryPart], Awaitable[None]], subagents: dict[str, str]
) -> Callable[[BranchPart], Awaitable[None]]:
    """The store's parts of a load as the `HistoryPart`s `on_history` is handed: one view
    for them all, over the records of the calls not yet shown (`_UntilShown`)."""
    records = _UntilShown()
    snapshots = ToolCallSnapshots(records)

    async def on_part(part: BranchPart) -> None:
        records.update(part.tool_calls)
        ids = [message_id(*name) for name in part.ids]
        await on_history(HistoryPart(part.messages, snapshots, subagents, ids))
        records.drop_shown()

    return on_part


class _UntilShown(dict[str, ToolCallRecord]):
    """The records a load's replay may still show: each part's are added as it comes, and
    those looked up while it was handed on are dropped once it has been (a replay shows each
    call once, when the part that holds its result is fed, or at the end for a call that
    never got one: those stay until they are looked up). So the load never holds every
    record of a long session at once, only those of the calls the replay is waiting on."""

    def __init__(self) -> None:
        super().__init__()
        self._shown: set[str] = set()

    def __getitem__(self, call_id: str) -> ToolCallRecord:
        self._shown.add(call_id)
        return super().__getitem__(call_id)

    def __contains__(self, call_id: object) -> bool:
        if isinstance(call_id, str):
            self._shown.add(call_id)
        return super().__contains__(call_id)

    def get(self, call_id: str, default: Any = None) -> Any:
        self._shown.add(call_id)
        return super().get(call_id, default)

    def drop_shown(self) -> None:
        for call_id in self._shown:
            self.pop(call_id, None)
        self._shown.clear()
