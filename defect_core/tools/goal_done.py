"""The `goal_done` tool: the model says the session's goal is reached, with a short summary.

Owns `GoalDoneTool`. It is offered only while a goal runs (`defect_core/goal.py` adds it when
`/goal` or `defect exec --goal` starts one and removes it when the goal ends), so a model in an
ordinary turn never sees it. Marking is all it does: no file, no process, no question asked.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import Field

from defect_core.events import TextDisplay, ToolKind
from defect_core.tools.base import ModelTool, Safety, ToolCallView, ToolContext, ToolOutput
from defect_core.tools.workspace import ToolArgs, parse_args

GOAL_DONE = "goal_done"


class GoalDoneArgs(ToolArgs):
    summary: str = Field(
        min_length=1, max_length=2000, description="What was done, in a sentence or two."
    )


class GoalDoneTool(ModelTool):
    args_model = GoalDoneArgs

    def __init__(self, reached: Callable[[str], None]) -> None:
        self._reached = reached

    @property
    def name(self) -> str:
        return GOAL_DONE

    @property
    def description(self) -> str:
        return (
            "Call this once the goal you were given is fully reached (and checked), with a "
            "short summary of what was done. Until then, keep working towards the goal."
        )

    @property
    def safety(self) -> Safety:
        return Safety.READ_ONLY

    @property
    def kind(self) -> ToolKind:
        return "think"

    def describe(self, args: dict[str, Any], ctx: ToolContext) -> ToolCallView:
        return ToolCallView(title="Goal reached", kind="think")

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        a = parse_args(self.args_model, args, self.name)
        self._reached(a.summary)
        return ToolOutput(
            "The goal is marked as reached. Finish with a short final answer for the user.",
            display=(TextDisplay(a.summary),),
        )
