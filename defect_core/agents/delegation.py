"""`Delegation`: what a session owns of subagents — their tools, its task table, their records.

Owns the session's side of delegation: loading the agent profiles (`catalog/agents.py`) once,
off the `session/new` path, into the `Lineage` that `spawn_agent` starts subagents from (the
tools themselves, `tools.py`, are registered in the session's table of built-in tools,
`session/toolset.py`, offered when a lineage exists); the background task table (`tasks.py`)
and what the editor sees when a task ends; the outcomes waiting for the model (`take_notes`,
the turn's `TurnDeps.notes`); the stored subagent runs a `session/load` replays (`views`); and
closing it all with the session.

Invariants:
- The lineage is prepared once, before the system prompt is built, so the tool list (and the
  profiles listed in `spawn_agent`'s description) stays byte-stable for the session.
- No lineage, and so no `spawn_agent` nor task tools, when `subagent_max_depth` is 0.
- A task that ends is shown on the call that started it: a `tool_call_update` with its final
  status (`completed`, or `failed` for a failure or a cancel) and its progress and outcome.
- `aclose` cancels every background task and waits for them (the session's `close`).
- Its subagents read the session's permission mode as it is at each of their tool calls
  (`mode`), and ask through the session's question after a switch to a mode that asks
  (`ask_permission`): a mode change reaches a background task still running.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio

from defect_core import policy
from defect_core.agents.child import Lineage
from defect_core.agents.progress import transcript_view
from defect_core.agents.tasks import BackgroundTask, BackgroundTasks
from defect_core.catalog.agents import load_profiles
from defect_core.config import Settings
from defect_core.errors import StorageError
from defect_core.events import AgentEvent, ToolCallUpdated, ToolStatus
from defect_core.hooks.engine import HookEngine
from defect_core.log import get_logger
from defect_core.model import ContentBlock
from defect_core.providers.base import LlmProvider
from defect_core.store import AsyncStore, SubagentRecord
from defect_core.tools.base import ToolContext, ToolRegistry
from defect_core.turn import TurnConfig
from defect_core.turn.deps import PermissionWaiter

log = get_logger("defect.agents")

TOOL_HOOK_EVENTS = ("before_tool", "after_tool")


class Delegation:
    """A session's subagents and background tasks."""

    def __init__(
        self,
        *,
        session_id: str,
        cwd: Path,
        settings: Settings,
        store: AsyncStore | None,
        publish: Callable[[AgentEvent], Awaitable[None]],
        provider: Callable[[], LlmProvider],
        config: Callable[[], TurnConfig],
        tool_context: Callable[[str], ToolContext],
        rules: Callable[[], policy.PermissionRules],
        mode: Callable[[], str] | None = None,
        ask_permission: PermissionWaiter | None = None,
    ) -> None:
        self._session_id = session_id
        self._cwd = cwd
        self._settings = settings
        self._store = store
        self._publish = publish
        self._provider = provider
        self._config = config
        self._tool_context = tool_context
        self._rules = rules
        self._mode = mode
        self._ask = ask_permission
        self._prepared = False
        self.lineage: Lineage | None = None
        """What subagents start from (None: not prepared yet, or subagents not allowed)."""
        self._stored: list[SubagentRecord] = []
        self.tasks = BackgroundTasks(settings.background_max_tasks, self._task_ended)

    async def prepare(self, tools: ToolRegistry) -> Lineage | None:
        """Load the profiles into the `lineage` subagents start from, with the session's
        `tools` (once); None when subagents are not allowed."""
        if self._prepared or self._settings.subagent_max_depth < 1:
            return self.lineage
        self._prepared = True
        profiles, problems = await anyio.to_thread.run_sync(load_profiles, self._cwd)
        for problem in problems:
            log.warning("agent_profile_skipped", problem=str(problem))
        hooks = HookEngine(
            [h for h in self._settings.hooks if h.trusted and h.event in TOOL_HOOK_EVENTS],
            session_id=self._session_id,
            cwd=self._cwd,
            env=self._settings.env_policy(),
        )
        self.lineage = Lineage(
            session_id=self._session_id,
            cwd=self._cwd,
            profiles=tuple(profiles),
            provider=self._provider,
            config=self._config,
            tools=tools,
            tool_context=self._tool_context,
            rules=self._rules,
            hooks=hooks,
            store=self._store,
            max_depth=self._settings.subagent_max_depth,
            mode=self._mode,
            ask=self._ask,
        )
        return self.lineage

    def take_notes(self) -> list[ContentBlock]:
        """Finished background tasks the model has not been told of, as user-side notes."""
        return list(self.tasks.take_notes())

    async def _task_ended(self, task: BackgroundTask) -> None:
        status: ToolStatus = "completed" if task.status == "completed" else "failed"
        await self._publish(
            ToolCallUpdated(
                task.tool_call_id,
                status=status,
                content=task.progress.display(
                    f"Background task {task.id} {task.status}: {task.outcome}"
                ),
                raw_output={"task_id": task.id, "status": task.status},
            )
        )

    async def load(self, stored: list[SubagentRecord] | None = None) -> None:
        """Read the session's stored subagent runs (a loaded session's replay shows them),
        unless they were read already (`stored`: `read_subagents`)."""
        if stored is not None:
            self._stored = stored
        elif self._store is not None:
            self._stored = await read_subagents(self._store, self._session_id)

    def views(self) -> dict[str, str]:
        """What each stored subagent did, by the `spawn_agent` call that started it."""
        return subagent_views(self._stored)

    async def aclose(self) -> None:
        await self.tasks.aclose()


async def read_subagents(store: AsyncStore, session_id: str) -> list[SubagentRecord]:
    """The session's stored subagent runs; none (and a warning) if they cannot be read."""
    try:
        return await store.subagents(session_id)
    except StorageError as exc:
        log.warning("subagents_not_loaded", session_id=session_id, error=str(exc))
        return []


def subagent_views(runs: list[SubagentRecord]) -> dict[str, str]:
    """What each stored subagent did, by the `spawn_agent` call that started it."""
    return {
        r.tool_call_id: transcript_view(r.messages, finished=r.status == "completed")
        for r in runs
        if r.messages
    }
