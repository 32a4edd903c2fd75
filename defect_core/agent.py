"""`DefaultAgentCore` and `DefaultSession`: the runtime behind the `AgentCore`/`Session` doors.

Owns session state (history, event bus, tools, mode, model, reasoning effort, remembered
permissions, title), the one-turn-at-a-time rule, cancellation and the permission hand-off
between the turn and whoever answers `PermissionRequested` (the ACP bridge).

Invariants:
- A session runs at most one turn; `cancel_turn` cancels that turn's scope and is idempotent.
- Every message goes to history through `_commit` (and to the store when there is one) before
  the turn goes on; `TurnEnded`/`TurnFailed` is the last event of a turn, so a front end that
  waits for it has seen every update of that turn.
- Mode, model and effort changes apply from the next turn; a running turn keeps the
  `TurnConfig` it started with.
- With a store, a message is durable before the turn goes on (each `_commit` awaits its own
  transaction); tool-call states, title, mode, options and "always" answers are written as
  they change, so a session killed at any point loads as it was. The store keeps the truth:
  an orphan `tool_use` is stored as-is and only the outbound copy is repaired.
- A store that fails is never silent: a message it cannot save stops the turn with the reason
  (the turn runner), replay state it cannot save is a warning to the user (`_save_state`),
  and without a usable store each new session opens with a warning saying so — or is refused
  under `require_persistence`. Every turn that started ends with `TurnEnded`/`TurnFailed`.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import ObjectReceiveStream

from defect_core import policy
from defect_core.compaction import ContextManager, context_report, parse_slash_command
from defect_core.config import Settings
from defect_core.events import (
    AgentEvent,
    AgentTextDelta,
    ConfigChanged,
    EventBus,
    ModeChanged,
    Notice,
    PermissionRequested,
    TitleChanged,
    ToolCallStarted,
    ToolCallUpdated,
    ToolDisplay,
    TurnEnded,
    TurnStopReason,
)
from defect_core.events import TurnFailed as TurnFailedEvent
from defect_core.history import VecHistory, overhead_tokens
from defect_core.log import get_logger
from defect_core.mcp import McpHub, load_mcp_json, merge_servers
from defect_core.model import ContentBlock, Message, TextBlock
from defect_core.prompt import start_prompt_facts, system_prompt_from
from defect_core.providers.base import LlmProvider
from defect_core.providers.registry import build_provider
from defect_core.session import (
    AgentError,
    Backends,
    ConfigOption,
    DuplicateSessionId,
    InvalidCwd,
    InvalidOption,
    McpServerSpec,
    OptionChoice,
    SessionNotFound,
    SessionPage,
    SessionSummary,
    StorageError,
    ToolCallSnapshot,
    TurnFailed,
    TurnInProgress,
)
from defect_core.store import AsyncStore, SessionRecord, StoredSession, ToolCallRecord
from defect_core.tools.base import Tool, ToolContext, ToolRegistry
from defect_core.turn import TurnConfig, TurnResult, TurnRunner

log = get_logger("defect.agent")

DEFAULT_CONTEXT_WINDOW = 100_000
"""For a model whose window is not known: conservative, so compaction starts early."""
SLASH_COMMANDS: tuple[tuple[str, str], ...] = (
    ("compact", "Summarise the conversation so far to free context (optionally: what to keep)"),
    ("context", "Show how much of the context window is used, and by what"),
)
_unknown_windows: set[str] = set()
EFFORTS: tuple[OptionChoice, ...] = (
    OptionChoice("off", "Off", "No extended thinking."),
    OptionChoice("low", "Low", "A little thinking before answering."),
    OptionChoice("medium", "Medium", "Think before answering (default)."),
    OptionChoice("high", "High", "Think at length; slower and more thorough."),
)
THINKING_BUDGETS = {"off": 0, "low": 2_048, "medium": 8_192, "high": 24_576}
TITLE_LIMIT = 80


def thinking_budget(effort: str, max_tokens: int) -> int | None:
    """The effort as a thinking budget: ≥ 1024 and < max_tokens, or None (off)."""
    budget = min(THINKING_BUDGETS.get(effort, 0), max_tokens - 1024)
    return budget if budget >= 1024 else None


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="milliseconds")


class DefaultSession:
    def __init__(
        self,
        *,
        session_id: str,
        cwd: Path,
        settings: Settings,
        provider: LlmProvider,
        tools: ToolRegistry,
        backends: Backends,
        store: AsyncStore | None = None,
        stored: StoredSession | None = None,
        mcp: McpHub | None = None,
        mcp_servers: tuple[McpServerSpec, ...] = (),
        unsaved_reason: str | None = None,
    ) -> None:
        self._id = session_id
        self._unsaved_reason = unsaved_reason
        """Why this session is not saved, for the user (None: saved, or a library's choice)."""
        self._store_failing = False
        self._mcp = mcp
        self._mcp_servers = mcp_servers
        self._cwd = cwd
        self._settings = settings
        self._provider = provider
        self._tools = tools
        self._backends = backends
        self._store = store
        self._bus = EventBus()
        self._history = VecHistory(stored.history if stored else None)
        self._transcript: list[Message] = list(stored.transcript) if stored else []
        self._tool_calls: dict[str, ToolCallRecord] = dict(stored.tool_calls) if stored else {}
        record = stored.record if stored else None
        self._mode: str = record.mode if record else policy.DEFAULT_MODE
        self._model = record.model if record else settings.model or provider.default_model()
        self._effort = (
            record.config.get("reasoning_effort", settings.reasoning_effort)
            if record
            else settings.reasoning_effort
        )
        self._rules = policy.PermissionRules.from_dict(record.permissions if record else None)
        self._title: str | None = record.title if record else None
        self._updated_at = record.updated_at if record else _now()
        self._prompt_facts = start_prompt_facts(
            cwd,
            shell=settings.terminal_shell if backends.frontend.terminal_delegated else None,
        )
        self._system_prompt = ""
        """Built once, before the first request (`_ready_prompt`); stable for the cache."""
        self._tool_state: dict[str, Any] = {}
        self._running = False
        self._turn = 0
        self._title_prompt: list[ContentBlock] | None = None
        """The prompt that names the session once the model answers it (see `_commit`)."""
        self._scope: anyio.CancelScope | None = None
        self._pending: dict[str, tuple[anyio.Event, list[str | None]]] = {}
        self._closed = False
        self._context = ContextManager(
            history=self._history,
            provider=provider,
            publish=self._publish,
            checkpoint=self._checkpoint,
        )

    # --- identity --------------------------------------------------------------------------

    @property
    def id(self) -> str:
        return self._id

    @property
    def cwd(self) -> Path:
        return self._cwd

    @property
    def title(self) -> str | None:
        return self._title

    @property
    def updated_at(self) -> str:
        return self._updated_at

    @property
    def tools(self) -> ToolRegistry:
        return self._tools

    def subscribe(self) -> ObjectReceiveStream[AgentEvent]:
        return self._bus.subscribe()

    def history_snapshot(self) -> list[Message]:
        return self._history.snapshot()

    def transcript(self) -> list[Message]:
        return list(self._transcript)

    def tool_calls(self) -> dict[str, ToolCallSnapshot]:
        return {
            call_id: ToolCallSnapshot(
                tool_call_id=call_id,
                title=r.title,
                kind=r.kind,
                status=r.status,
                content=r.displays(),
                locations=r.location_values(),
                raw_input=r.raw_input,
                raw_output=r.raw_output,
            )
            for call_id, r in self._tool_calls.items()
        }

    def record(self) -> SessionRecord:
        """What the store keeps of this session besides its messages."""
        return SessionRecord(
            id=self._id,
            cwd=str(self._cwd),
            provider=self._provider.name,
            model=self._model,
            mode=self._mode,
            title=self._title,
            config={"reasoning_effort": self._effort},
            permissions=self._rules.to_dict(),
            mcp_servers=[server_summary(spec) for spec in self._mcp_servers],
        )

    # --- turns ------------------------------------------------------------------------------

    async def run_turn(self, prompt: list[ContentBlock]) -> TurnStopReason:
        if self._running:
            raise TurnInProgress(
                "a turn is already running in this session; wait for it or cancel it first"
            )
        if not prompt:
            raise InvalidOption("the prompt is empty")
        command = _slash_command(prompt)
        if command is not None and command[0] not in {name for name, _ in SLASH_COMMANDS}:
            command = None  # not ours: the model reads it as text
        self._running = True
        self._turn += 1
        turn = self._turn
        try:
            await self._ready_prompt()
            if command is not None:
                return await self._run_command(turn, *command)
            self._title_prompt = prompt
            runner = TurnRunner(
                history=self._history,
                provider=self._provider,
                tools=self._tools,
                publish=self._publish,
                commit=self._commit,
                ask_permission=self._ask_permission,
                make_context=self._tool_context,
                rules=self._rules,
                on_rules_changed=self._rules_changed,
                on_cancel_requested=self.cancel_turn,
                context=self._context,
            )
            result: TurnResult | None = None
            with anyio.CancelScope() as scope:
                self._scope = scope
                result = await runner.run(prompt, self._turn_config())
            stop: TurnStopReason = "cancelled" if result is None else result.stop_reason
            usage = {}
            if result is not None:
                usage = {
                    "inputTokens": result.usage.input_tokens,
                    "outputTokens": result.usage.output_tokens,
                    "cacheReadInputTokens": result.usage.cache_read_input_tokens,
                    "cacheCreationInputTokens": result.usage.cache_creation_input_tokens,
                    "requests": result.requests,
                }
            with anyio.CancelScope(shield=True):
                await self._bus.publish(TurnEnded(turn, stop, usage))
            return stop
        except AgentError as err:
            # However the turn stopped, it ends with an event: a front end that waits for a
            # turn's last update (the ACP bridge) must never wait for ever.
            data = err.data if isinstance(err, TurnFailed) else {}
            with anyio.CancelScope(shield=True):
                await self._bus.publish(TurnFailedEvent(turn, str(err), data))
            raise
        finally:
            self._title_prompt = None
            self._scope = None
            self._running = False
            self._updated_at = _now()

    async def _ready_prompt(self) -> None:
        """The system prompt, built from facts gathered off the `session/new` path."""
        if not self._system_prompt:
            facts = await anyio.to_thread.run_sync(
                self._prompt_facts.result, abandon_on_cancel=True
            )
            names = [spec.name for spec in self._tools.specs()]
            self._system_prompt = system_prompt_from(facts, self._backends.frontend, names)

    def cancel_turn(self) -> None:
        if self._scope is not None:
            self._scope.cancel()

    def _turn_config(self) -> TurnConfig:
        s = self._settings
        return TurnConfig(
            session_id=self._id,
            model=self._model,
            system_prompt=self._system_prompt,
            mode=self._mode,
            max_tokens=s.max_tokens,
            max_turn_requests=s.max_turn_requests,
            thinking_budget=thinking_budget(self._effort, s.max_tokens),
            context_window=self._context_window(),
            retries=s.retries,
            retry_base_delay=s.retry_base_delay,
            retry_max_delay=s.retry_max_delay,
        )

    def _context_window(self) -> int:
        configured = self._settings.context_windows.get(self._model)
        if configured:
            return configured
        for info in self._provider.models():
            if info.id == self._model and info.context_window:
                return info.context_window
        if self._model not in _unknown_windows:
            _unknown_windows.add(self._model)
            log.warning(
                "context_window_unknown",
                model=self._model,
                assumed=DEFAULT_CONTEXT_WINDOW,
                fix="set context_windows in the configuration",
            )
        return DEFAULT_CONTEXT_WINDOW

    async def _run_command(self, turn: int, name: str, args: str) -> TurnStopReason:
        """A slash command: answered here, without a model call, and not put in history."""
        config = self._turn_config()
        tools = self._tools.specs()
        text: str
        with anyio.CancelScope() as scope:
            self._scope = scope
            if name == "context":
                used = self._context.estimate(config.system_prompt, tools)
                text = context_report(
                    self._history.snapshot(),
                    used,
                    config.context_window,
                    overhead_tokens(config.system_prompt, tools),
                )
            else:
                report = await self._context.compact(
                    model=config.model,
                    system=config.system_prompt,
                    tools=tools,
                    max_tokens=config.max_tokens,
                    window=config.context_window,
                    reason="/compact",
                    focus=args,
                )
                text = (
                    "Nothing to compact yet: the conversation is too short."
                    if report is None
                    else f"Compacted {report.messages_summarised} messages: "
                    f"~{report.tokens_before:,} → ~{report.tokens_after:,} tokens."
                )
            await self._bus.publish(AgentTextDelta(text))
        stop: TurnStopReason = "cancelled" if scope.cancelled_caught else "end_turn"
        with anyio.CancelScope(shield=True):
            await self._bus.publish(TurnEnded(turn, stop, {}))
        return stop

    async def _checkpoint(self, history: list[Message]) -> None:
        """Compaction rewrote the history: the store keeps it (the transcript is untouched)."""
        if self._store is not None:
            with anyio.CancelScope(shield=True):
                await self._store.checkpoint(self._id, history)

    async def _commit(self, message: Message) -> None:
        self._history.append(message)
        self._transcript.append(message)
        if self._store is not None:
            await self._store.append_message(self._id, message)
        if message.role == "assistant" and self._title_prompt is not None:
            # Titled once the model has answered: a first prompt that failed before any
            # output (no credentials, a 400) must not name the session in session/list.
            prompt, self._title_prompt = self._title_prompt, None
            await self._maybe_title(prompt)

    async def _publish(self, event: AgentEvent) -> None:
        """Keep what a replay needs (tool-call states), persist it, then fan the event out."""
        record: ToolCallRecord | None = None
        if isinstance(event, ToolCallStarted):
            record = ToolCallRecord.started(self._id, event)
        elif isinstance(event, ToolCallUpdated) and event.tool_call_id in self._tool_calls:
            record = self._tool_calls[event.tool_call_id].updated(event)
        if record is not None:
            self._tool_calls[record.tool_call_id] = record
            if self._store is not None:
                await self._save_state(self._store.upsert_tool_call(record))
        await self._bus.publish(event)

    async def _persist(self, **fields: Any) -> None:
        if self._store is not None:
            await self._save_state(self._store.update(self._id, **fields))

    async def _save_state(self, write: Awaitable[Any]) -> None:
        """Write what a replay shows (tool-call states, title, mode, options, "always"
        answers). A store that fails here does not stop the session — what the model sees is
        the message log, whose failures stop the turn — but the user is told, once until a
        write works again."""
        try:
            with anyio.CancelScope(shield=True):
                await write
        except (StorageError, SessionNotFound) as exc:
            log.warning("store_write_failed", session_id=self._id, error=str(exc))
            if not self._store_failing:
                self._store_failing = True
                text = f"defect could not save this session's state: {exc}"
                await self._bus.publish(Notice(text, level="warning"))
            return
        self._store_failing = False

    async def _maybe_title(self, prompt: list[ContentBlock]) -> None:
        if self._title is not None:
            return
        text = "".join(b.text for b in prompt if isinstance(b, TextBlock)).strip()
        if not text:
            return
        line = text.splitlines()[0].strip()
        self._title = line if len(line) <= TITLE_LIMIT else line[: TITLE_LIMIT - 1] + "…"
        await self._persist(title=self._title)
        await self._bus.publish(TitleChanged(self._title))

    def _tool_context(self, tool_call_id: str) -> ToolContext:
        async def report(display: tuple[ToolDisplay, ...]) -> None:
            await self._publish(ToolCallUpdated(tool_call_id, content=display))

        return ToolContext(
            session_id=self._id,
            cwd=self._cwd,
            fs=self._backends.fs,
            shell=self._backends.shell,
            tool_call_id=tool_call_id,
            report=report,
            allow_read_outside=self._settings.allow_read_outside,
            settings=self._tool_state,
        )

    # --- permissions ------------------------------------------------------------------------

    async def _ask_permission(self, request: PermissionRequested) -> str | None:
        event = anyio.Event()
        answer: list[str | None] = [None]
        self._pending[request.tool_call_id] = (event, answer)
        try:
            await self._bus.publish(request)
            await event.wait()
        finally:
            self._pending.pop(request.tool_call_id, None)
        return answer[0]

    async def _rules_changed(self) -> None:
        await self._persist(permissions=self._rules.to_dict())

    def resolve_permission(self, tool_call_id: str, option_id: str | None) -> None:
        pending = self._pending.get(tool_call_id)
        if pending is None:
            log.warning("permission_answer_ignored", session_id=self._id, tool_call_id=tool_call_id)
            return
        event, answer = pending
        answer[0] = option_id
        event.set()

    @property
    def permission_rules(self) -> policy.PermissionRules:
        return self._rules

    # --- modes and options ------------------------------------------------------------------

    def current_mode(self) -> str:
        return self._mode

    def available_modes(self) -> tuple[policy.ModeInfo, ...]:
        return policy.MODES

    async def set_mode(self, mode_id: str) -> None:
        if not policy.is_known_mode(mode_id):
            known = ", ".join(m.id for m in policy.MODES)
            raise InvalidOption(f"unknown mode {mode_id!r}; available modes: {known}")
        if mode_id != self._mode:
            self._mode = mode_id
            await self._persist(mode=mode_id)
            await self._bus.publish(ModeChanged(mode_id))

    def config_options(self) -> list[ConfigOption]:
        models = tuple(OptionChoice(m.id, m.name, m.description) for m in self._provider.models())
        if self._model not in {c.value for c in models}:
            models = (OptionChoice(self._model, self._model, "configured model"), *models)
        return [
            ConfigOption(
                id="mode",
                name="Mode",
                category="mode",
                current=self._mode,
                choices=tuple(OptionChoice(m.id, m.name, m.description) for m in policy.MODES),
                description="When defect asks before acting",
            ),
            ConfigOption(
                id="model",
                name="Model",
                category="model",
                current=self._model,
                choices=models,
                description=f"Model used by the {self._provider.name} provider",
            ),
            ConfigOption(
                id="reasoning_effort",
                name="Reasoning effort",
                category="thought_level",
                current=self._effort,
                choices=EFFORTS,
                description="How much the model thinks before answering",
            ),
        ]

    async def set_config_option(self, option_id: str, value: str) -> list[ConfigOption]:
        options = {o.id: o for o in self.config_options()}
        option = options.get(option_id)
        if option is None:
            raise InvalidOption(
                f"unknown config option {option_id!r}; available: {', '.join(options)}"
            )
        if value not in {c.value for c in option.choices}:
            allowed = ", ".join(c.value for c in option.choices)
            raise InvalidOption(
                f"invalid value {value!r} for {option_id}; choose one of: {allowed}"
            )
        if option_id == "mode":
            await self.set_mode(value)
        elif value != option.current:
            if option_id == "model":
                self._model = value
                await self._persist(model=value)
            else:
                self._effort = value
                await self._persist(config={"reasoning_effort": value})
            await self._bus.publish(ConfigChanged(option_id, value))
        return self.config_options()

    def slash_commands(self) -> tuple[tuple[str, str], ...]:
        return SLASH_COMMANDS

    def notices(self) -> tuple[str, ...]:
        """What the user should read when the session opens (no saving, failed MCP servers)."""
        notices: list[str] = []
        if self._unsaved_reason is not None:
            notices.append(
                f"This session is not being saved, so it will be lost when defect exits: "
                f"{self._unsaved_reason}"
            )
        notice = self._mcp.failure_notice() if self._mcp is not None else None
        if notice:
            notices.append(notice)
        return tuple(notices)

    # --- lifecycle --------------------------------------------------------------------------

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.cancel_turn()
        await self._context.aclose()
        if self._mcp is not None:
            await self._mcp.aclose()
        for event, answer in list(self._pending.values()):
            answer[0] = None
            event.set()
        self._bus.close()

    def summary(self) -> SessionSummary:
        return SessionSummary(self._id, str(self._cwd), self._title, self._updated_at)


class DefaultAgentCore:
    """The process's sessions, the settings they start from, the providers and the store.

    Settings are resolved per session from its working directory when a `settings_for`
    loader is given (a project's `.defect/config.toml` applies to sessions in that project,
    wherever the editor started the agent); otherwise every session uses `settings`.
    Providers are shared between sessions whose settings shape them the same way.

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
        self._store = store
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
        """The provider for `settings` (default: the process's), built once per shape."""
        if self._provider is not None:
            return self._provider
        settings = settings or self._settings
        key = _provider_key(settings)
        if key not in self._providers:
            self._providers[key] = build_provider(settings.provider, settings)
        return self._providers[key]

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
        hub = await self._connect_mcp(cwd, mcp_servers, settings)
        try:
            session = DefaultSession(
                session_id=session_id,
                cwd=cwd,
                settings=settings,
                provider=self.provider(settings),
                tools=ToolRegistry([*self._tools_factory(), *hub.tools]),
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
        repository's `.mcp.json` (the editor's win a name clash), started concurrently."""
        configured = [*settings.mcp_servers, *load_mcp_json(cwd)]
        return await McpHub.connect(merge_servers(requested, configured), cwd)

    async def load_session(
        self,
        session_id: str,
        backends: Backends,
        mcp_servers: tuple[McpServerSpec, ...] = (),
        cwd: Path | None = None,
    ) -> DefaultSession:
        """The session, restored from the store — or the live one if it is already loaded
        (a session is never loaded twice: one history, one event stream)."""
        while session_id in self._loading:  # a concurrent load of the same id
            await self._loading[session_id].wait()
        if session_id in self._sessions:
            return self._sessions[session_id]
        if self._store is None:
            raise SessionNotFound(f"session not found: {session_id}")
        self._loading[session_id] = done = anyio.Event()
        try:
            stored = await self._store.load(session_id)
            where = cwd or Path(stored.record.cwd)
            await _check_cwd(where)
            settings = self._session_settings(where)
            hub = await self._connect_mcp(where, mcp_servers, settings)
            session = DefaultSession(
                session_id=session_id,
                cwd=where,
                settings=settings,
                provider=self.provider(settings),
                tools=ToolRegistry([*self._tools_factory(), *hub.tools]),
                backends=backends,
                store=self._store,
                stored=stored,
                mcp=hub,
                mcp_servers=mcp_servers,
            )
            self._sessions[session_id] = session
            await self._store.update(
                session_id, mcp_servers=[server_summary(spec) for spec in mcp_servers]
            )
            return session
        finally:
            del self._loading[session_id]
            done.set()

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
            await self._store.delete(session_id)

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


def server_summary(spec: McpServerSpec) -> dict[str, Any]:
    """What the store keeps of an MCP server: enough to say which it was, no secrets (env and
    header values are left out; the editor sends the servers again on load)."""
    summary: dict[str, Any] = {"name": spec.name, "transport": spec.transport}
    if spec.transport == "stdio":
        summary["command"] = spec.command
        summary["args"] = list(spec.args)
        summary["env"] = [name for name, _ in spec.env]
    else:
        summary["url"] = spec.url
        summary["headers"] = [name for name, _ in spec.headers]
    return summary


def _slash_command(prompt: list[ContentBlock]) -> tuple[str, str] | None:
    if len(prompt) != 1 or not isinstance(prompt[0], TextBlock):
        return None
    return parse_slash_command(prompt[0].text)


def default_tools() -> list[Tool]:
    """The built-in tools: files, bash, search."""
    from defect_core.tools.builtin import builtin_tools

    return list(builtin_tools())
