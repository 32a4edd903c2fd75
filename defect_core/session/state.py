"""`DefaultSession`: one conversation's state, its turns and what the store keeps of it.

Owns session state (history, transcript, event bus, tools, mode, the `(provider, model)`
selection and the switch between providers, reasoning effort, title, permission memory), the
one-turn-at-a-time rule, cancellation, and the writes that make the session durable. The pieces
with rules of their own live beside it in this package (each named in docs/architecture.md's
module map); subagents and background tasks are its `delegation`
(`defect_core/agents/delegation.py`); `core.py` creates and loads sessions.

Invariants:
- A session runs at most one turn; `cancel_turn` cancels that turn's scope and is idempotent.
- Every message goes to history through `_commit` (and to the store when there is one) before
  the turn goes on; `TurnEnded`/`TurnFailed` is the last event of a turn, so a front end that
  waits for it has seen every update of that turn.
- Model and effort changes apply from the next turn (a running turn keeps its `TurnConfig`);
  a mode change, from the next tool call of every task: turn, subagents, background tasks
  (`TurnDeps.mode`, `agents/child.py`). A model change may change provider: the next
  request goes to the new one, with only the thinking it signed (`provenance.py`), and the
  store keeps the pair so a load restores it.
- With a store, a message is durable before the turn goes on (each `_commit` awaits its own
  transaction); tool-call states, title, mode, options and "always" answers are written as
  they change, so a session killed at any point loads as it was. The store keeps the truth:
  an orphan `tool_use` is stored as-is and only the outbound copy is repaired.
- A store that fails is never silent: a message it cannot save stops the turn with the reason
  (the turn runner), replay state it cannot save is a warning to the user (`persistence.py`),
  and without a usable store each new session opens with a warning saying so (`notices`) —
  or is refused under `require_persistence` (`core.py`).
  Every turn that started ends with `TurnEnded`/`TurnFailed`.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import ObjectReceiveStream

from defect_core import policy
from defect_core.agents.delegation import Delegation
from defect_core.checkpoints import Budget
from defect_core.compaction import CompactionReport, Compactor
from defect_core.config import Settings
from defect_core.events import (
    AgentEvent,
    AgentTextDelta,
    CommandOffer,
    CommandsChanged,
    ConfigChanged,
    EventBus,
    ModeChanged,
    NextMessageId,
    Notice,
    PlanEntry,
    TitleChanged,
    ToolCallUpdated,
    ToolDisplay,
    TurnEnded,
    TurnFailed,
    TurnStopReason,
    message_id,
)
from defect_core.goal import GoalRun, GoalState, goal_prompt
from defect_core.history import StoredMessages, VecHistory
from defect_core.hooks.engine import HookEngine
from defect_core.hosted import hosted_web_search
from defect_core.log import get_logger
from defect_core.mcp import McpHub
from defect_core.model import ContentBlock, Message, TextBlock
from defect_core.prompt import start_prompt_facts, system_prompt_from
from defect_core.provenance import own_thinking_only
from defect_core.providers.base import LlmProvider
from defect_core.providers.live import ProviderSet
from defect_core.selection import ModelSelection
from defect_core.session import options
from defect_core.session.call_records import SessionToolCalls
from defect_core.session.checkpointing import MessageId, SessionCheckpoints
from defect_core.session.notices import opening_notices
from defect_core.session.permissions import SessionPermissions
from defect_core.session.persistence import ReplayStateWriter, server_summary
from defect_core.session.plan import SessionPlan
from defect_core.session.protocol import (
    AgentError,
    Answer,
    Backends,
    ConfigOption,
    InvalidOption,
    McpServerSpec,
    SessionSummary,
    StoredToolCalls,
    TurnError,
    TurnInProgress,
)
from defect_core.session.questions import SessionQuestions
from defect_core.session.rewind import Rewinder
from defect_core.session.slash_commands import CommandBook, CommandFacts, CommandScope, SlashCommand
from defect_core.session.steering import SessionSteers
from defect_core.session.titles import SessionTitle
from defect_core.session.toolset import ToolFacts, call_context, offer
from defect_core.session.trusting import ProjectTrusting
from defect_core.store import AsyncStore, SessionRecord, StoredSession, now_iso
from defect_core.tools.base import ToolContext, ToolRegistry
from defect_core.turn import TurnConfig, TurnDeps, TurnResult, TurnRunner, hook_note

log = get_logger("defect.agent")


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="milliseconds")


class DefaultSession:
    def __init__(
        self,
        *,
        session_id: str,
        cwd: Path,
        settings: Settings,
        providers: ProviderSet,
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
        self._mcp = mcp
        self._mcp_servers = mcp_servers
        self._cwd = cwd
        self._settings = settings
        self._providers = providers
        self._tools = tools
        self._backends = backends
        self._store = store
        self._bus = EventBus()
        self._writer = ReplayStateWriter(session_id, store, self._bus.publish)
        self._history = VecHistory(stored.history if stored else None)
        self._transcript = StoredMessages.of(stored.transcript if stored else None)
        self._ids: list[MessageId] = list(stored.ids) if stored else []
        """Each transcript message's name in the store (`/rewind` finds prompts by it)."""
        budget = Budget(settings.checkpoint_max_mb << 20, settings.checkpoint_max_age_days * 86400)
        self._checkpoints = SessionCheckpoints(session_id, cwd, store, budget, self._publish)
        self._calls = SessionToolCalls(
            session_id, store, self._writer.tool_call, stored.tool_calls if stored else None
        )
        """Tool-call records: this process's; the stored ones are read when a replay asks."""
        record = stored.record if stored else None
        self.plan = SessionPlan(session_id, self._writer.plan, self._publish)
        self._mode: str = record.mode if record else policy.DEFAULT_MODE
        self._selection, self._unstamped_provider = options.first_selection(
            settings, providers, record, session_id
        )
        stored_config = record.config if record else {}
        self._effort = stored_config.get("reasoning_effort", settings.reasoning_effort)
        self._permissions = SessionPermissions(
            session_id, record.permissions if record else None, self._bus.publish
        )
        self._title = SessionTitle(record.title if record else None)
        self._updated_at = record.updated_at if record else _now()
        self._prompt_facts = start_prompt_facts(
            cwd,
            shell=settings.terminal_shell if backends.frontend.terminal_delegated else None,
        )
        self._system_prompt = ""
        """Built once, before the first request (`_ready_prompt`); stable for the cache."""
        self._web_search = hosted_web_search(settings, self._provider)
        self._commands = CommandBook(cwd, CommandFacts(saved=store is not None))
        env = settings.env_policy()
        self._trusting = ProjectTrusting(
            settings.project, cwd, tools, self._permissions.ask, mcp, env
        )
        self._hooks = HookEngine(settings.hooks, session_id=session_id, cwd=cwd, env=env)
        self._start_source: str | None = "load" if stored else "new"
        """`session_start` is fired with the first prompt (off `session/new`); None: fired."""
        self.steering = SessionSteers(  # what the user writes while a turn runs
            session_id, store, self._bus.publish, self._commit, lambda: {"reasoning_effort":
            self._effort}, stored_config, interrupt_tools=settings.steering_interrupt_tools,
        )  # fmt: skip
        self._goal: GoalRun | None = None
        self.last_goal: GoalState | None = None
        self._tool_state: dict[str, Any] = {}
        self._running, self._turn = False, 0
        self._scope: anyio.CancelScope | None = None
        self._closed = False
        self._compactor = Compactor(
            history=self._history,
            provider=self._provider,
            publish=self._publish,
            write_back=self._writer.write_back,
            before_compact=self._before_compact,
            after_compact=self._after_compact,
        )
        self._compactor.use_provider(self._provider, self._own_thinking_only)
        self.delegation = Delegation(
            session_id=session_id,
            cwd=cwd,
            settings=settings,
            store=store,
            publish=self._publish,
            provider=lambda: self._provider,
            config=self._turn_config,
            tool_context=self._tool_context,
            rules=lambda: self._permissions.rules,
            mode=self.current_mode,
            ask_permission=self._permissions.ask,
        )  # subagents and background tasks (`defect_core/agents/`)
        self._asks = SessionQuestions.of(session_id, self._publish, backends, settings, mcp)
        self._tool_facts = ToolFacts(self.plan.replace, self._asks.ask, tasks=self.delegation.tasks)
        offer(tools, self._tool_facts)  # the built-in tools a new session offers (toolset.py)

    # --- identity --------------------------------------------------------------------------

    @property
    def id(self) -> str:
        return self._id

    @property
    def cwd(self) -> Path:
        return self._cwd

    @property
    def title(self) -> str | None:
        return self._title.title

    @property
    def updated_at(self) -> str:
        return self._updated_at

    @property
    def tools(self) -> ToolRegistry:
        return self._tools

    @property
    def selection(self) -> ModelSelection:
        """The `(provider, model)` the next turn talks to."""
        return self._selection

    @property
    def _provider(self) -> LlmProvider:
        provider = self._providers.get(self._selection.provider)
        assert provider is not None  # a selection is only ever made of a provider of the set
        return provider

    def _own_thinking_only(self, messages: list[Message]) -> list[Message]:
        return own_thinking_only(messages, self._selection, self._unstamped_provider)

    def subscribe(self) -> ObjectReceiveStream[AgentEvent]:
        return self._bus.subscribe()

    def history_snapshot(self) -> list[Message]:
        return self._history.snapshot()

    def transcript(self) -> list[Message]:
        return list(self._transcript)

    def message_ids(self) -> list[str]:
        return [message_id(*name) for name in self._ids]

    async def tool_calls(self) -> StoredToolCalls:
        return await self._calls.snapshots()

    def current_plan(self) -> tuple[PlanEntry, ...]:
        return self.plan.entries

    def subagent_views(self) -> dict[str, str]:
        """What each stored subagent did, by the `spawn_agent` call that started it."""
        return self.delegation.views()

    def record(self) -> SessionRecord:
        """What the store keeps of this session besides its messages."""
        return SessionRecord(
            id=self._id,
            cwd=str(self._cwd),
            provider=self._selection.provider,
            model=self._selection.model,
            mode=self._mode,
            title=self._title.title,
            config={"reasoning_effort": self._effort},
            permissions=self._permissions.rules.to_dict(),
            mcp_servers=[server_summary(spec) for spec in self._mcp_servers],
        )

    def summary(self) -> SessionSummary:
        return SessionSummary(self._id, str(self._cwd), self._title.title, self._updated_at)

    # --- turns ------------------------------------------------------------------------------

    async def run_turn(self, prompt: list[ContentBlock]) -> TurnStopReason:
        command = self._commands.builtin(prompt)  # `/goal <objective>`: as `defect exec` does
        goal = command[1].strip() if command is not None and command[0].name == "goal" else ""
        return await (self.run_goal(goal) if goal else self._run_turn(prompt, None))

    async def run_goal(self, objective: str, prompt: Sequence[ContentBlock] = ()) -> TurnStopReason:
        """A turn pursuing `objective` until `goal_done` (`goal.py`); `prompt` follows its own."""
        return await self._run_turn(list(prompt), objective)

    async def _run_turn(self, prompt: list[ContentBlock], goal: str | None) -> TurnStopReason:
        if self._running:
            raise TurnInProgress(
                "a turn is already running in this session; wait for it or cancel it first"
            )
        if not prompt and goal is None:
            raise InvalidOption("the prompt is empty")
        self._running, self._turn = True, self._turn + 1
        self.steering.starting()  # wait_idle waits from here: commands and hooks included
        turn = self._turn
        try:
            await self.refresh_commands()
            await self._ready_prompt()
            if goal is not None:
                prompt = [*self.start_goal(goal), *prompt]
            elif (command := self._commands.builtin(prompt)) is not None:
                answered = await self._run_command(turn, *command)
                if not isinstance(answered, list):
                    return answered
                prompt = answered  # a command's prompt the turn goes on with
            if (custom := self._commands.custom_prompt(prompt)) is not None:
                prompt = [TextBlock(text=custom.text)]
            self._title.turn_started(prompt)
            prompt = await self._session_started(prompt)
            runner = TurnRunner(
                TurnDeps(
                    history=self._history, commit=self._commit, provider=self._provider,
                    tools=self._tools, tool_context=self._tool_context,
                    rules=self._permissions.rules, ask_permission=self._permissions.ask,
                    rules_changed=self._rules_changed, publish=self._publish,
                    cancel_turn=self.cancel_turn, compactor=self._compactor, hooks=self._hooks,
                    notes=self.delegation.take_notes, mode=self.current_mode,
                    steers=self.steering,  # the user's messages while it runs (steering.py)
                )
            )  # fmt: skip
            result: TurnResult | None = None
            self._checkpoints.begin()
            self.steering.begin()
            try:
                with anyio.CancelScope() as scope:
                    self._scope = scope
                    if self._mcp is not None:  # waits for servers starting; their tools join
                        await self._mcp.offer(self._tools, self._bus.publish)
                    result = await runner.run(prompt, self._turn_config())
            finally:
                await self.steering.end()  # a steer left waiting joins the history
                await self._checkpoints.end()  # saved before the turn's last event
            stop: TurnStopReason = "cancelled" if result is None else result.stop_reason
            usage = None if result is None else result.turn_usage()
            with anyio.CancelScope(shield=True):
                await self._bus.publish(TurnEnded(turn, stop, usage))
            return stop
        except AgentError as err:
            # However the turn stopped, it ends with an event: a front end that waits for a
            # turn's last update (the ACP bridge) must never wait for ever.
            data = err.data if isinstance(err, TurnError) else {}
            with anyio.CancelScope(shield=True):
                await self._bus.publish(TurnFailed(turn, str(err), data))
            raise
        finally:
            if self._goal is not None:
                self.last_goal, self._goal = self._goal.finish(), None
                self._tool_facts.goal_reached = None
                offer(self._tools, self._tool_facts)
            self._title.turn_ended()
            self._scope, self._running = None, False
            self.steering.turn_over()
            self._updated_at = _now()

    async def _ready_prompt(self) -> None:
        """The system prompt, built from facts gathered off the `session/new` path."""
        if not self._system_prompt:
            facts = await anyio.to_thread.run_sync(
                self._prompt_facts.result, abandon_on_cancel=True
            )
            self._tool_facts.skills = facts.skills
            self._tool_facts.lineage = await self.delegation.prepare(self._tools)
            offer(self._tools, self._tool_facts)
            names = [spec.name for spec in self._tools.specs()]
            names += self._mcp.names_for_prompt() if self._mcp is not None else []
            self._system_prompt = system_prompt_from(facts, self._backends.frontend, names)

    def cancel_turn(self) -> None:
        if self._scope is not None:
            self._scope.cancel()

    def _turn_config(self) -> TurnConfig:
        session = (self._id, self._system_prompt, self._mode, self._effort)
        return options.turn_config(
            self._settings, self._providers, self._selection, session, self._web_search,
            self._unstamped_provider,
        )  # fmt: skip

    # --- goals and hooks --------------------------------------------------------------------

    def start_goal(self, objective: str) -> list[ContentBlock]:
        """Make the next turn pursue `objective` (`defect_core/goal.py`); its prompt."""
        self._goal = GoalRun(objective, self._settings.goal_max_rounds, self._hooks)
        self._tool_facts.goal_reached = self._goal.reached
        offer(self._tools, self._tool_facts)
        return [TextBlock(text=goal_prompt(objective))]

    async def _session_started(self, prompt: list[ContentBlock]) -> list[ContentBlock]:
        """Fire `session_start` once, with the first prompt; the round-1 goal announcement."""
        if self._goal is not None:
            await self._publish(Notice(self._goal.announcement))
        if self._start_source is None:
            return prompt
        verdict = await self._hooks.fire("session_start", {"source": self._start_source})
        self._start_source = None
        return [*prompt, hook_note("session_start", verdict.context)] if verdict.context else prompt

    async def _before_compact(self, kind: str, focus: str) -> str:
        return (await self._hooks.fire("before_compact", {"kind": kind, "focus": focus})).context

    async def _after_compact(self, report: CompactionReport) -> None:
        data = {"kind": report.kind, "messages": report.messages_summarised}
        await self._hooks.fire("after_compact", data)

    async def _run_command(
        self, turn: int, command: SlashCommand, args: str
    ) -> TurnStopReason | list[ContentBlock]:
        """A built-in command (`slash_commands.py`): its answer is shown, without a model call
        and outside the history; or it hands back the prompt the turn goes on with."""
        with anyio.CancelScope() as scope:
            self._scope = scope
            reply = await command.handler(self._command_scope(), args)
            if isinstance(reply, list):
                return reply
            await self._bus.publish(AgentTextDelta(reply))
        stop: TurnStopReason = "cancelled" if scope.cancelled_caught else "end_turn"
        with anyio.CancelScope(shield=True):
            await self._bus.publish(TurnEnded(turn, stop))
        return stop

    def _command_scope(self) -> CommandScope:
        return CommandScope(
            self._id, self._store, self._compactor, self._history, self._transcript, self._ids,
            self._turn_config, self._tools.specs, self._rewinder, self._trusting,
            self.start_goal, self._commands,
        )  # fmt: skip

    def _rewinder(self) -> Rewinder:
        async def adopt(stored: StoredSession) -> None:  # the store's branch, now the live one
            self._history.replace(stored.history)
            self._transcript, self._ids = StoredMessages.of(stored.transcript), list(stored.ids)
            await self.plan.follow(self._transcript)

        return Rewinder(
            session_id=self._id, cwd=self._cwd, store=self._store, checkpoints=self._checkpoints,
            transcript=self._transcript, ids=self._ids, adopt=adopt,
        )  # fmt: skip

    def _tool_context(self, tool_call_id: str) -> ToolContext:
        async def report(display: tuple[ToolDisplay, ...]) -> None:
            await self._publish(ToolCallUpdated(tool_call_id, content=display))

        return self._checkpoints.wrap(
            call_context(
                self._id,
                self._cwd,
                self._backends,
                self._settings,
                self._tool_state,
                tool_call_id,
                report,
            )
        )

    # --- what the turn hands back: messages, events, rewrites -------------------------------

    async def _commit(self, message: Message) -> None:
        self._history.append(message)
        self._transcript.append(message)
        seq = len(self._transcript)
        if self._store is not None:
            seq = await self._store.append_message(self._id, message)
        self._ids.append((self._id, seq))
        await self._bus.publish(NextMessageId(message_id(self._id, seq + 1)))
        await self._checkpoints.committed(message, (self._id, seq))
        title = self._title.committed(message)
        if title is not None:
            await self._writer.update(title=title)
            await self._bus.publish(TitleChanged(title, now_iso()))

    async def _publish(self, event: AgentEvent) -> None:
        """Keep what a replay needs (tool-call states), persist it, then fan the event out."""
        await self._calls.apply(event)
        await self._bus.publish(event)
        if isinstance(event, ToolCallUpdated) and event.status in ("completed", "failed"):
            await self._checkpoints.tool_done()

    async def _rules_changed(self) -> None:
        await self._writer.update(permissions=self._permissions.rules.to_dict())

    # --- permissions ------------------------------------------------------------------------

    def resolve_permission(self, tool_call_id: str, option_id: str | None) -> None:
        self._permissions.resolve(tool_call_id, option_id)

    def answer_question(self, question_id: str, answer: Answer) -> None:
        self._asks.answer(question_id, answer)

    @property
    def permission_rules(self) -> policy.PermissionRules:
        return self._permissions.rules

    # --- modes and options ------------------------------------------------------------------

    def current_mode(self) -> str:
        return self._mode

    def available_modes(self) -> tuple[policy.ModeInfo, ...]:
        return policy.MODES

    async def set_mode(self, mode_id: str) -> None:
        options.check_mode(mode_id)
        if mode_id != self._mode:
            self._mode = mode_id
            await self._writer.update(mode=mode_id)
            await self._bus.publish(ModeChanged(mode_id))

    def config_options(self) -> list[ConfigOption]:
        return options.config_options(
            self._providers.candidates(), self._mode, self._selection, self._effort
        )

    async def set_config_option(self, option_id: str, value: str) -> list[ConfigOption]:
        current = self.config_options()
        if option_id == "model":
            model = next(o for o in current if o.id == "model")
            value = options.resolve_model(value, model.choices, self._selection)
        option = options.checked_choice(current, option_id, value)
        if option_id == "mode":
            await self.set_mode(value)
        elif value != option.current:
            if option_id == "model":
                await self._select(value)
            else:
                self._effort = value
                await self._writer.update(config=self.steering.config())
            await self._bus.publish(ConfigChanged(option_id, value))
        return self.config_options()

    async def _select(self, value: str) -> None:
        """Talk to another `(provider, model)` from the next turn: its hosted capabilities are
        checked first (a switch the configuration cannot serve is refused, nothing changes),
        the compactor follows, and the store keeps both halves."""
        selection = ModelSelection.parse(value)
        assert selection is not None  # every choice is a `provider/model` value
        provider = self._providers.get(selection.provider)
        assert provider is not None
        web_search = hosted_web_search(self._settings, provider)
        previous, self._selection = self._selection, selection
        self._web_search = web_search
        self._compactor.use_provider(provider, self._own_thinking_only)
        change = {"previous": previous.value, "selection": selection.value}
        log.info("model_selected", session_id=self._id, **change)
        await self._writer.update(provider=selection.provider, model=selection.model)

    async def refresh_models(self) -> None:
        """Ask every provider for its live model list (network: a front end calls this after
        it has answered `session/new` or a load) and, when a list changed, tell the front end
        (`ConfigChanged` of the model option)."""
        if await self._providers.refresh() and not self._closed:
            await self._bus.publish(ConfigChanged("model", self._selection.value))

    def slash_commands(self) -> tuple[CommandOffer, ...]:
        return self._commands.offered()

    async def refresh_commands(self, *, announce: bool = True) -> None:
        """Reload the custom commands; a changed offer reaches the client as an update
        (unless the caller sends the whole list itself: `announce=False`)."""
        if await self._commands.refresh() and announce:
            await self._publish(CommandsChanged(self._commands.offered()))

    def notices(self) -> tuple[str, ...]:
        """What the user reads when the session opens (`notices.py`); an MCP server failing
        later is told as it fails (a `Notice`)."""
        project, dropped = self._settings.project, self._permissions.dropped_notice()
        return opening_notices(self._unsaved_reason, self._mcp, project, self._bus.publish, dropped)

    # --- lifecycle --------------------------------------------------------------------------

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.cancel_turn()
        await self.delegation.aclose()
        await self._compactor.aclose()
        if self._mcp is not None:
            await self._mcp.aclose()
        await self._trusting.aclose()
        self._permissions.cancel_all()
        self._asks.cancel_all()
        self._checkpoints.close()
        self._bus.close()
