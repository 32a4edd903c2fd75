"""One subagent run: the same turn runner, in a fresh context, with less authority than its parent.

Owns `Lineage` (what a subagent is started from: its parent's provider, tools, permission mode
and rules, the profiles, the store, and how deep it sits), `ChildOutcome`, and `run_child`,
which builds the child's `TurnDeps` and `TurnConfig` and runs one `TurnRunner` turn with the
task as its prompt.

Invariants:
- Isolated: the child starts from an empty history of its own, never the parent's; the
  parent sees only its final text (`ChildOutcome.answer`), the editor its progress.
- Never more authority than its parent: its tools are the parent's (narrowed by the profile's
  `tools`), its "always" answers are a copy of the parent's at spawn time, the user's tool
  hooks apply, and it is not interactive — a call the parent's policy would ask about is
  refused (`TurnDeps.interactive`, `turn/call_steps.py`), so a child never waits on a question,
  and its `ask_user` answers at once that no one is there to answer.
- The session's mode binds it as it changes: each of its tool calls is judged under the
  session's mode at that moment (`Lineage.mode`), so a switch to `read-only` refuses a
  running background child's next command, saying the mode changed. After a switch to a mode
  that asks, its calls ask the user through the session's own question (`Lineage.ask`; the
  title names the subagent), and a question the client cancels is a rejection, since a child
  has no turn of the user's to cancel.
- Depth is bounded: `spawn_agent` is offered to a child only below `subagent_max_depth`
  (depth 0 is the session's own agent), and the background-task tools and `update_plan`
  never (`TOP_LEVEL_ONLY`).
- Durable as it goes: the run is recorded (`subagents`) before its first request and every
  message of the child is appended to its own log (`subagent_messages`) before it goes on, so a
  kill at any moment leaves a transcript that loads; a cancel records the run `cancelled` and
  lets the cancellation through.
- Its requests are built like any turn's (`turn/request.py`: `repair_outbound`), marked with
  the profile's name (`TurnConfig.agent`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import anyio

from defect_core import policy
from defect_core.agents.progress import ChildProgress, final_text
from defect_core.catalog.agents import AgentProfile
from defect_core.errors import StorageError, TurnError
from defect_core.events import AgentEvent, PermissionRequested, ToolCallUpdated, ToolDisplay
from defect_core.history import VecHistory
from defect_core.hooks.engine import HookEngine
from defect_core.log import get_logger
from defect_core.model import Message, TextBlock
from defect_core.providers.base import LlmProvider
from defect_core.store import AsyncStore, SubagentRecord
from defect_core.tools.ask_user import AskUserTool
from defect_core.tools.base import Tool, ToolContext, ToolRegistry
from defect_core.tools.plan import UPDATE_PLAN
from defect_core.turn import TurnConfig, TurnDeps, TurnRunner
from defect_core.turn.deps import PermissionWaiter

log = get_logger("defect.agents")

SPAWN_AGENT = "spawn_agent"
TOP_LEVEL_ONLY = frozenset({"inspect_background_task", "cancel_background_task", UPDATE_PLAN})
"""Tools of the session's own agent only: a child never sees the task table, nor the
session's plan (the one plan the user sees is the session agent's)."""

Report = Callable[[tuple[ToolDisplay, ...]], Awaitable[None]]


@dataclass(frozen=True)
class Lineage:
    """What a subagent is started from: its parent, read at spawn time."""

    session_id: str
    cwd: Path
    profiles: tuple[AgentProfile, ...]
    provider: Callable[[], LlmProvider]
    config: Callable[[], TurnConfig]
    """The parent's turn configuration now: model, mode, limits."""
    tools: ToolRegistry
    tool_context: Callable[[str], ToolContext]
    rules: Callable[[], policy.PermissionRules]
    hooks: HookEngine | None
    """The user's tool hooks (`before_tool`, `after_tool`), which bind children too."""
    store: AsyncStore | None
    max_depth: int
    depth: int = 0
    """0: the session's own agent; its children are at 1."""
    mode: Callable[[], str] | None = None
    """The session's permission mode now (None: the mode at spawn time, fixed)."""
    ask: PermissionWaiter | None = None
    """The session's permission question, for a call the mode asks about once it changed
    (None: such a call is refused)."""

    def profile(self, name: str) -> AgentProfile | None:
        return next((p for p in self.profiles if p.name == name), None)


@dataclass
class ChildOutcome:
    status: Literal["completed", "failed"]
    answer: str
    """The child's final text, or why it failed (with its last words, if any)."""
    progress: ChildProgress


SpawnTool = Callable[[Lineage], Tool]
"""Makes the `spawn_agent` tool of a lineage (`tools.py`; passed in to keep this module below)."""


async def run_child(
    lineage: Lineage,
    profile: AgentProfile,
    task: str,
    tool_call_id: str,
    report: Report,
    spawn_tool: SpawnTool,
    *,
    background: bool = False,
    progress: ChildProgress | None = None,
) -> ChildOutcome:
    """Run `profile` on `task` as the child of the call `tool_call_id`; `report` gets its
    progress as it changes."""
    progress = progress or ChildProgress()
    transcript: list[Message] = []
    history = VecHistory()
    store = lineage.store
    record = SubagentRecord(
        session_id=lineage.session_id,
        tool_call_id=tool_call_id,
        agent=profile.name,
        task=task,
        background=background,
    )

    async def commit(message: Message) -> None:
        history.append(message)
        transcript.append(message)
        if store is not None:
            await store.append_subagent_message(lineage.session_id, tool_call_id, message)

    async def publish(event: AgentEvent) -> None:
        if progress.see(event):
            await report(progress.display())

    def tool_context(call_id: str) -> ToolContext:
        async def call_report(display: tuple[ToolDisplay, ...]) -> None:
            await publish(ToolCallUpdated(call_id, content=display))

        ctx = lineage.tool_context(call_id)
        return dataclasses.replace(ctx, tool_call_id=call_id, report=call_report)

    parent_rules = lineage.rules()
    rules = policy.PermissionRules(set(parent_rules.allowed), set(parent_rules.rejected))
    config = _child_config(lineage, profile)
    provider = lineage.provider()
    tools = _child_tools(lineage, profile)
    child_lineage = dataclasses.replace(
        lineage,
        provider=lambda: provider,
        config=lambda: config,
        tools=tools,
        tool_context=tool_context,
        rules=lambda: rules,
        depth=lineage.depth + 1,
    )
    allowed = profile.tools is None or SPAWN_AGENT in profile.tools
    if child_lineage.depth < lineage.max_depth and allowed:
        tools.add(spawn_tool(child_lineage))  # its children get at most `tools`
    deps = TurnDeps(
        history=history,
        commit=commit,
        provider=provider,
        tools=tools,
        tool_context=tool_context,
        rules=rules,
        ask_permission=_asker(lineage, profile),
        rules_changed=_nothing,
        publish=publish,
        cancel_turn=lambda: None,
        hooks=lineage.hooks,
        interactive=False,
        mode=lineage.mode,
        asks_after_mode_change=lineage.ask is not None,
    )
    await _record(store, record)
    status = "cancelled"
    try:
        result = await TurnRunner(deps).run([TextBlock(text=task)], config)
    except TurnError as err:
        status = "failed"
        outcome = ChildOutcome(
            "failed", _with_last_words(f"the subagent failed: {err}", transcript), progress
        )
    else:
        said = final_text(transcript)
        if result.stop_reason == "end_turn":
            status = "completed"
            outcome = ChildOutcome("completed", said or "(the subagent gave no answer)", progress)
        else:
            status = "failed"
            why = _STOPS.get(result.stop_reason, f"the subagent stopped ({result.stop_reason})")
            outcome = ChildOutcome("failed", _with_last_words(why, transcript), progress)
    finally:
        with anyio.CancelScope(shield=True):
            await _record(store, dataclasses.replace(record, status=status))
    return outcome


_STOPS = {
    "max_turn_requests": "the subagent used all the requests it may make before it finished",
    "max_tokens": "the subagent's answer was cut at the output limit",
    "refusal": "the model refused the subagent's task",
    "cancelled": "the subagent was cancelled",
}


def _with_last_words(why: str, transcript: list[Message]) -> str:
    said = final_text(transcript)
    return f"{why}. Its last words:\n{said}" if said else f"{why}."


def _child_config(lineage: Lineage, profile: AgentProfile) -> TurnConfig:
    base = lineage.config()
    prompt = (
        f"{profile.prompt}\n\n# Environment\nWorking directory: {lineage.cwd}\n"
        f"You are the subagent `{profile.name}`; your final message is your answer."
    )
    return dataclasses.replace(
        base,
        system_prompt=prompt,
        model=profile.model or base.model,
        max_turn_requests=profile.max_requests or base.max_turn_requests,
        max_rounds=1,
        agent=profile.name,
    )


def _child_tools(lineage: Lineage, profile: AgentProfile) -> ToolRegistry:
    """The parent's tools the profile allows, less `spawn_agent` (given back by the caller
    only above the depth limit) and the top-level ones."""
    allowed = set(profile.tools) if profile.tools is not None else None
    tools = ToolRegistry()
    for tool in lineage.tools:
        if tool.name in TOP_LEVEL_ONLY or tool.name == SPAWN_AGENT:
            continue
        if allowed is None or tool.name in allowed:
            tools.add(tool.alone() if isinstance(tool, AskUserTool) else tool)
    if allowed is not None:
        missing = sorted(allowed - {t.name for t in lineage.tools} - {SPAWN_AGENT})
        if missing:
            log.warning("profile_tools_unavailable", profile=profile.name, tools=missing)
    return tools


async def _record(store: AsyncStore | None, record: SubagentRecord) -> None:
    """Save the run's row; a store that fails is logged (the messages carry the truth)."""
    if store is None:
        return
    try:
        await store.save_subagent(record)
    except StorageError as exc:
        log.warning("subagent_not_recorded", tool_call_id=record.tool_call_id, error=str(exc))


def _asker(lineage: Lineage, profile: AgentProfile) -> PermissionWaiter:
    """How a child asks (only after a mode change, `turn/call_steps.py`): the session's question,
    its title naming the subagent; a cancelled question is a rejection."""
    ask = lineage.ask

    async def asked(request: PermissionRequested) -> str | None:
        if ask is None:
            return policy.REJECT_ONCE  # not reached: `asks_after_mode_change` is False
        labelled = dataclasses.replace(request, title=f"{profile.name}: {request.title}")
        answer = await ask(labelled)
        return policy.REJECT_ONCE if answer is None else answer

    return asked


async def _nothing() -> None:
    return None
