"""The `goal_done` tool: the model says the session's goal is reached, with a short summary.

Owns `GoalDoneTool`. It is offered only while a goal runs (`defect_core/goal.py` adds it when
`/goal` or `defect exec --goal` starts one and removes it when the goal ends), so a model in an
ordinary turn never sees it. Marking is all it does: no file, no process, no question asked.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import Field

from defect_core.events import TextDisplay, ToolDisplay, ToolKind
from defect_core.tools.base import Safety, ToolCallView, ToolContext, ToolOutput, input_schema
from defect_core.tools.workspace import ToolArgs, parse_args

GOAL_DONE = "goal_done"


class GoalDoneArgs(ToolArgs):
    summary: str = Field(
        min_length=1, max_length=2000, description="What was done, in a sentence or two."
    )


class GoalDoneTool:
    args_model = GoalDoneArgs
    """What `run` validates its arguments with; the input schema is derived from it."""

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
    def input_schema(self) -> dict[str, Any]:
        return input_schema(self.args_model)

    @property
    def safety(self) -> Safety:
        return Safety.READ_ONLY

    @property
    def kind(self) -> ToolKind:
        return "think"

    def describe(self, args: dict[str, Any], ctx: ToolContext) -> ToolCallView:
        return ToolCallView(title="Goal reached", kind="think")

    async def preview(self, args: dict[str, Any], ctx: ToolContext) -> tuple[ToolDisplay, ...]:
        return ()

    def permission_key(self, args: dict[str, Any]) -> str:
        return self.name

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        a = parse_args(self.args_model, args, self.name)
        self._reached(a.summary)
        return ToolOutput(
            "The goal is marked as reached. Finish with a short final answer for the user.",
            display=(TextDisplay(a.summary),),
        )
