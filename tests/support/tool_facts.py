"""Session facts under which every row of the built-in tool table holds
(`defect_core/session/toolset.py`), for the tests that walk every built-in tool."""

from __future__ import annotations

from pathlib import Path

from defect_core import policy
from defect_core.agents.child import Lineage
from defect_core.agents.tasks import BackgroundTask, BackgroundTasks
from defect_core.catalog.agents import load_profiles
from defect_core.catalog.skills import Skill
from defect_core.events import PlanEntry
from defect_core.providers.scripted import ScriptedProvider
from defect_core.session.toolset import BUILTIN_TOOLS, ToolFacts
from defect_core.tools.base import Tool, ToolContext, ToolRegistry
from defect_core.turn import TurnConfig


async def _keep_plan(entries: tuple[PlanEntry, ...]) -> None:
    return None


async def _task_ended(task: BackgroundTask) -> None:
    return None


def _no_context(tool_call_id: str) -> ToolContext:
    raise AssertionError("no call runs here")


def _no_config() -> TurnConfig:
    raise AssertionError("no subagent runs here")


def full_facts(cwd: Path = Path("/nonexistent")) -> ToolFacts:
    """Facts under which every condition holds: skills, subagents, a goal running."""
    profiles, _ = load_profiles(None)
    lineage = Lineage(
        session_id="s",
        cwd=cwd,
        profiles=tuple(profiles),
        provider=lambda: ScriptedProvider([]),
        config=_no_config,
        tools=ToolRegistry(),
        tool_context=_no_context,
        rules=policy.PermissionRules,
        hooks=None,
        store=None,
        max_depth=1,
    )
    return ToolFacts(
        plan=_keep_plan,
        skills=(Skill("notes", "Write notes.", cwd, "user"),),
        lineage=lineage,
        tasks=BackgroundTasks(1, _task_ended),
        goal_reached=lambda _summary: None,
    )


def every_builtin_tool() -> list[Tool]:
    """One instance of every row, in the table's order."""
    facts = full_facts()
    return [row.make(facts) for row in BUILTIN_TOOLS]
