"""Every built-in tool, registered here and nowhere else, with the condition under which a
session offers it (`BUILTIN_TOOLS`); and what one tool call of a session may use
(`call_context`).

Owns the table of built-in tools — one `BuiltinTool` row each: its name, how it is made, and its
condition, read from the session's `ToolFacts` — and `offer`, which brings a session's tool
registry in line with the table. The rows, in the order the model sees them:

- the workspace tools (`read_file`, `write_file`, `edit_file`, `bash`, `search`, `fetch`):
  every session; they need nothing of it, so the core makes them when it makes the session
  (`default_tools`; `DefaultAgentCore(tools=...)` puts a library's or a test's own in their
  place);
- `update_plan`: every session (`session/plan.py` holds the plan);
- `ask_user`: every session (`session/questions.py` asks; a session no one can answer, such as
  `defect exec`'s, answers at once that no one is there);
- `skill`: when the session has skills (`catalog/skills.py`, known with the prompt's facts);
- `spawn_agent`, `inspect_background_task`, `cancel_background_task`: when subagents are
  allowed (`subagent_max_depth` ≥ 1; `agents/delegation.py` prepares their lineage);
- `goal_done`: while a goal runs (`defect_core/goal.py`).

Not built in, and not here: an MCP server's tools, which join at the end of the list when the
server is ready (`mcp/hub.py`) or the project is trusted (`trusting.py`); a subagent's tools,
which are its parent's, narrowed (`agents/child.py`).

Invariants:
- The order the model sees is stable: it is the start of the cached prompt prefix. A row whose
  condition comes to hold joins at the end of the list, once (the skills and subagent rows
  before the system prompt is built, `goal_done` when a goal starts); one whose condition no
  longer holds leaves (`goal_done` when the goal ends). Nothing else moves, and a tool taken
  out of the registry by its owner is not put back.
- A name is registered once: a row per tool (`tests/test_toolset.py` walks the table).
- `call_context` is the one place a session's settings become what a tool call may reach
  (reads outside the workspace, fetch's private hosts, the environment its commands inherit).
- Cheap to import: the tool modules are imported when a tool is first made, not when the
  session package is (docs/architecture.md, rule 6: nothing heavy on the path of
  `initialize`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from defect_core.config import Settings
from defect_core.events import Ask, PlanEntry
from defect_core.session.protocol import Backends
from defect_core.tools.base import ProgressReporter, Tool, ToolContext, ToolRegistry

if TYPE_CHECKING:
    from defect_core.agents.child import Lineage
    from defect_core.agents.tasks import BackgroundTasks
    from defect_core.catalog.skills import Skill


@dataclass
class ToolFacts:
    """What the rows' conditions read of one session, and what its tools are made from."""

    plan: Callable[[tuple[PlanEntry, ...]], Awaitable[None]] | None = None
    """What `update_plan` replaces the plan with (`SessionPlan.replace`)."""
    ask: Ask | None = None
    """How `ask_user` asks the session's user (`SessionQuestions.ask`)."""
    skills: Sequence[Skill] = ()
    """The session's skills, once the prompt's facts are gathered."""
    lineage: Lineage | None = None
    """What subagents start from: set once they are allowed and their profiles are loaded."""
    tasks: BackgroundTasks | None = None
    """The session's background task table (beside `lineage`)."""
    goal_reached: Callable[[str], None] | None = None
    """What `goal_done` reports to, while a goal runs."""
    offered: set[str] = field(default_factory=set)
    """The rows whose condition held at the last `offer`."""


@dataclass(frozen=True, slots=True)
class Condition:
    """When a row is offered: a predicate on the session's facts, with its name in words."""

    name: str
    holds: Callable[[ToolFacts], bool]


EVERY_SESSION = Condition("every session", lambda _facts: True)
WITH_SKILLS = Condition("the session has skills", lambda facts: bool(facts.skills))
WITH_SUBAGENTS = Condition("subagents are allowed", lambda facts: facts.lineage is not None)
WHILE_GOAL = Condition("a goal is running", lambda facts: facts.goal_reached is not None)


@dataclass(frozen=True, slots=True)
class BuiltinTool:
    """One row: a built-in tool, how it is made, and when it is offered."""

    name: str
    make: Callable[[ToolFacts], Tool]
    condition: Condition
    workspace: bool = False
    """Needs nothing of the session: made by the core with the session (`default_tools`)."""


# --- how each tool is made (its module imported then, not with this one) -----------------


def _read_file(_facts: ToolFacts) -> Tool:
    from defect_core.tools.files import ReadFileTool

    return ReadFileTool()


def _write_file(_facts: ToolFacts) -> Tool:
    from defect_core.tools.files import WriteFileTool

    return WriteFileTool()


def _edit_file(_facts: ToolFacts) -> Tool:
    from defect_core.tools.files import EditFileTool

    return EditFileTool()


def _bash(_facts: ToolFacts) -> Tool:
    from defect_core.tools.bash import BashTool

    return BashTool()


def _search(_facts: ToolFacts) -> Tool:
    from defect_core.tools.search import SearchTool

    return SearchTool()


def _fetch(_facts: ToolFacts) -> Tool:
    from defect_core.tools.fetch import FetchTool

    return FetchTool()


def _update_plan(facts: ToolFacts) -> Tool:
    from defect_core.tools.plan import UpdatePlanTool

    assert facts.plan is not None
    return UpdatePlanTool(facts.plan)


def _ask_user(facts: ToolFacts) -> Tool:
    from defect_core.tools.ask_user import AskUserTool

    return AskUserTool(facts.ask)


def _skill(facts: ToolFacts) -> Tool:
    from defect_core.tools.skill import SkillTool

    return SkillTool(facts.skills)


def _spawn_agent(facts: ToolFacts) -> Tool:
    from defect_core.agents.tools import SpawnAgentTool

    assert facts.lineage is not None
    return SpawnAgentTool(facts.lineage, facts.tasks)


def _inspect_task(facts: ToolFacts) -> Tool:
    from defect_core.agents.tools import InspectBackgroundTaskTool

    assert facts.tasks is not None
    return InspectBackgroundTaskTool(facts.tasks)


def _cancel_task(facts: ToolFacts) -> Tool:
    from defect_core.agents.tools import CancelBackgroundTaskTool

    assert facts.tasks is not None
    return CancelBackgroundTaskTool(facts.tasks)


def _goal_done(facts: ToolFacts) -> Tool:
    from defect_core.tools.goal_done import GoalDoneTool

    assert facts.goal_reached is not None
    return GoalDoneTool(facts.goal_reached)


BUILTIN_TOOLS: tuple[BuiltinTool, ...] = (
    BuiltinTool("read_file", _read_file, EVERY_SESSION, workspace=True),
    BuiltinTool("write_file", _write_file, EVERY_SESSION, workspace=True),
    BuiltinTool("edit_file", _edit_file, EVERY_SESSION, workspace=True),
    BuiltinTool("bash", _bash, EVERY_SESSION, workspace=True),
    BuiltinTool("search", _search, EVERY_SESSION, workspace=True),
    BuiltinTool("fetch", _fetch, EVERY_SESSION, workspace=True),
    BuiltinTool("update_plan", _update_plan, EVERY_SESSION),
    BuiltinTool("ask_user", _ask_user, EVERY_SESSION),
    BuiltinTool("skill", _skill, WITH_SKILLS),
    BuiltinTool("spawn_agent", _spawn_agent, WITH_SUBAGENTS),
    BuiltinTool("inspect_background_task", _inspect_task, WITH_SUBAGENTS),
    BuiltinTool("cancel_background_task", _cancel_task, WITH_SUBAGENTS),
    BuiltinTool("goal_done", _goal_done, WHILE_GOAL),
)
"""Every built-in tool, in the order the model sees them."""


def default_tools() -> list[Tool]:
    """The workspace tools, fresh: what the core gives a session it makes."""
    return [row.make(ToolFacts()) for row in BUILTIN_TOOLS if row.workspace]


def offer(tools: ToolRegistry, facts: ToolFacts) -> None:
    """Bring a session's `tools` in line with the table for `facts`: a row whose condition
    has come to hold since the last offer joins at the end; one whose condition stopped
    holding leaves. Nothing else changes (a tool the session's owner took away stays away).
    The workspace rows are the core's (`default_tools`), left as they are."""
    for row in BUILTIN_TOOLS:
        if row.workspace:
            continue
        holds, was = row.condition.holds(facts), row.name in facts.offered
        if holds and not was:
            tools.add(row.make(facts))
            facts.offered.add(row.name)
        elif was and not holds:
            tools.remove(row.name)
            facts.offered.discard(row.name)


def call_context(
    session_id: str,
    cwd: Path,
    backends: Backends,
    settings: Settings,
    state: dict[str, Any],
    tool_call_id: str,
    report: ProgressReporter,
) -> ToolContext:
    """What one tool call of a session may use; `state` is the session's tool state, shared
    by its calls."""
    return ToolContext(
        session_id=session_id,
        cwd=cwd,
        fs=backends.fs,
        shell=backends.shell,
        tool_call_id=tool_call_id,
        report=report,
        allow_read_outside=settings.allow_read_outside,
        settings=state,
        fetch_allow=settings.fetch_allow_hosts,
        env_policy=settings.env_policy(),
    )
