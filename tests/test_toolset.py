"""The table of built-in tools (`defect_core/session/toolset.py`), walked row by row: every
built-in tool is registered there once, with its condition; a session offers each row exactly
when its condition holds, in the table's order, a row that comes to hold joining at the end.

On the table itself, on a registry driven by `offer`, and on real sessions (the offline model).
"""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

import pytest

import defect_core.agents
import defect_core.tools
from defect_core.config import Settings
from defect_core.model import TextBlock
from defect_core.providers.scripted import ScriptedProvider
from defect_core.session import Backends, DefaultAgentCore, DefaultSession
from defect_core.session.toolset import (
    BUILTIN_TOOLS,
    EVERY_SESSION,
    WHILE_GOAL,
    WITH_SKILLS,
    WITH_SUBAGENTS,
    ToolFacts,
    default_tools,
    offer,
)
from defect_core.tools.base import ModelTool, ToolRegistry
from defect_core.tools.files import ReadFileTool
from tests.support.tool_facts import full_facts

pytestmark = pytest.mark.anyio

TABLE = [
    ("read_file", EVERY_SESSION),
    ("write_file", EVERY_SESSION),
    ("edit_file", EVERY_SESSION),
    ("bash", EVERY_SESSION),
    ("search", EVERY_SESSION),
    ("fetch", EVERY_SESSION),
    ("update_plan", EVERY_SESSION),
    ("ask_user", EVERY_SESSION),
    ("skill", WITH_SKILLS),
    ("spawn_agent", WITH_SUBAGENTS),
    ("inspect_background_task", WITH_SUBAGENTS),
    ("cancel_background_task", WITH_SUBAGENTS),
    ("goal_done", WHILE_GOAL),
]
"""The order the model sees, and when each is offered: a change here is a change to the
cached prompt prefix, made on purpose."""

WORKSPACE = ["read_file", "write_file", "edit_file", "bash", "search", "fetch"]


class Joined(ReadFileTool):
    """Stands for a tool that is not built in (an MCP server's)."""

    _name = "mcp__docs__lookup"


def names(tools: ToolRegistry) -> list[str]:
    return [t.name for t in tools]


def concrete_tool_classes() -> set[type]:
    """Every tool class of the tools and agents packages that none of theirs subclasses."""
    packages = (defect_core.tools, defect_core.agents)
    for package in packages:
        for module in pkgutil.walk_packages(package.__path__, f"{package.__name__}."):
            importlib.import_module(module.name)

    def ours(cls: type) -> bool:
        return cls.__module__.startswith(tuple(f"{p.__name__}." for p in packages))

    found: set[type] = set()
    pending: list[type] = [ModelTool]
    while pending:
        cls = pending.pop()
        subclasses = [sub for sub in cls.__subclasses__() if ours(sub)]
        pending += subclasses
        if not subclasses and ours(cls):
            found.add(cls)
    return found


def test_every_built_in_tool_is_registered_once_with_its_condition() -> None:
    assert [(row.name, row.condition) for row in BUILTIN_TOOLS] == TABLE
    facts = full_facts()
    made = [row.make(facts) for row in BUILTIN_TOOLS]
    assert [tool.name for tool in made] == [row.name for row in BUILTIN_TOOLS]
    assert all(row.condition.holds(facts) for row in BUILTIN_TOOLS)
    # Every tool class there is is made by exactly one row: none is registered anywhere else.
    kinds = [type(tool) for tool in made]
    assert len(set(kinds)) == len(kinds)
    assert set(kinds) == concrete_tool_classes()
    assert [row.name for row in BUILTIN_TOOLS if row.workspace] == WORKSPACE
    assert [tool.name for tool in default_tools()] == WORKSPACE


def test_offer_adds_a_row_when_it_holds_at_the_end_and_removes_it_when_it_stops() -> None:
    whole = full_facts()
    facts = ToolFacts(plan=whole.plan, tasks=whole.tasks)
    tools = ToolRegistry(default_tools())
    offer(tools, facts)
    assert names(tools) == [*WORKSPACE, "update_plan", "ask_user"]
    facts.skills, facts.lineage = whole.skills, whole.lineage
    offer(tools, facts)
    subagents = (n for n, c in TABLE if c is WITH_SUBAGENTS)
    ready = [*WORKSPACE, "update_plan", "ask_user", "skill", *subagents]
    assert names(tools) == ready
    mcp = Joined()  # an MCP server's tool, joined after the prompt was built
    tools.add(mcp)
    facts.goal_reached = whole.goal_reached
    offer(tools, facts)
    assert names(tools) == [*ready, mcp.name, "goal_done"]
    facts.goal_reached = None
    offer(tools, facts)
    assert names(tools) == [*ready, mcp.name]


async def test_a_session_offers_each_row_under_its_condition(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    skilled, plain = tmp_path / "skilled", tmp_path / "plain"
    skill = skilled / ".defect" / "skills" / "notes" / "SKILL.md"
    skill.parent.mkdir(parents=True)
    skill.write_text("---\nname: notes\ndescription: Write notes.\n---\nBe brief.")
    plain.mkdir()
    replies = [{"text": "hello"}, {"text": "working on it"}]
    settings = Settings(goal_max_rounds=1)
    core = DefaultAgentCore(settings, provider=ScriptedProvider(replies))
    backends = Backends(None, None)  # type: ignore[arg-type]
    session: DefaultSession = await core.create_session("s", skilled, backends)
    # before the first prompt:
    assert names(session.tools) == [*WORKSPACE, "update_plan", "ask_user"]
    await session.run_turn([TextBlock(text="hi")])
    ready = [name for name, condition in TABLE if condition is not WHILE_GOAL]
    assert names(session.tools) == ready
    prompt = session.start_goal("write the notes")
    assert names(session.tools) == [*ready, "goal_done"]
    assert await session.run_turn(prompt) == "max_turn_requests"
    assert names(session.tools) == ready, "goal_done leaves with the goal"

    lean = DefaultAgentCore(Settings(subagent_max_depth=0), provider=ScriptedProvider(replies))
    other: DefaultSession = await lean.create_session("p", plain, backends)
    await other.run_turn([TextBlock(text="hi")])
    assert names(other.tools) == [*WORKSPACE, "update_plan", "ask_user"]
    await core.aclose()
    await lean.aclose()


def test_a_tool_taken_away_by_its_owner_is_not_offered_again() -> None:
    whole = full_facts()
    facts = ToolFacts(plan=whole.plan, tasks=whole.tasks)
    tools = ToolRegistry(default_tools())
    offer(tools, facts)
    tools.remove("update_plan")  # a library's choice (tests/test_compaction.py sizes so)
    facts.skills = whole.skills
    offer(tools, facts)
    assert names(tools) == [*WORKSPACE, "ask_user", "skill"]
