"""The `update_plan` tool: the model keeps a plan of its work, and the user sees it.

Owns `UpdatePlanTool`, its argument model (`PlanArgs`: the ACP plan itself, `{"entries":
[{"content", "priority", "status"}]}`) and `plan_summary`, the short confirmation the model
reads back. The session holds the plan and gives the tool the callback that replaces it
(`defect_core/session/plan.py`): that callback stores the plan and publishes `PlanUpdated`,
which the ACP bridge sends as a `plan` update (`defect_acp/projection.py`).

Invariants:
- Every call carries the whole plan: an update replaces the previous one, never merges into
  it, so what the user sees is exactly what the model last sent (an empty list clears it).
- Arguments are validated by `PlanArgs` before anything changes; a refused call leaves the
  plan as it was and tells the model what was wrong.
- More than one entry `in_progress` is accepted, and the confirmation says so: the plan is a
  view of the work, and refusing it would cost a round trip for a display detail (the system
  prompt asks for exactly one, `prompt/guidance.py`). Zero is fine (before starting, at the
  end).
- It touches no file and runs nothing (`Safety.READ_ONLY`): it works in every mode, read-only
  included, and is never asked about.
- The result is a one-line confirmation, not the plan echoed back: the model wrote the plan,
  and every echoed token would be paid again on each later request.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Any

from pydantic import Field, StringConstraints

from defect_core.events import PlanEntry, PlanPriority, PlanStatus, ToolKind
from defect_core.tools.base import ModelTool, Safety, ToolCallView, ToolContext, ToolOutput
from defect_core.tools.workspace import ToolArgs, parse_args

UPDATE_PLAN = "update_plan"

MAX_ENTRIES = 50
"""More steps than anyone reads in a plan; a longer list is a mistake worth reporting."""


class PlanEntryArgs(ToolArgs):
    content: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)] = Field(
        max_length=500, description="The step, in a short sentence."
    )
    priority: PlanPriority
    status: PlanStatus


class PlanArgs(ToolArgs):
    entries: list[PlanEntryArgs] = Field(
        max_length=MAX_ENTRIES,
        description="The whole plan, in order; it replaces the previous one.",
    )


PlanSink = Callable[[tuple[PlanEntry, ...]], Awaitable[None]]
"""Where a validated plan goes: the session stores it and publishes `PlanUpdated`."""


class UpdatePlanTool(ModelTool):
    args_model = PlanArgs

    def __init__(self, sink: PlanSink) -> None:
        self._sink = sink

    @property
    def name(self) -> str:
        return UPDATE_PLAN

    @property
    def description(self) -> str:
        return (
            "Show the user your plan for multi-step work, and keep it current: send the whole "
            "plan each time (it replaces the previous one), with each step's priority and "
            "status (pending, in_progress, completed)."
        )

    @property
    def safety(self) -> Safety:
        return Safety.READ_ONLY

    @property
    def kind(self) -> ToolKind:
        return "think"

    def describe(self, args: dict[str, Any], ctx: ToolContext) -> ToolCallView:
        return ToolCallView(title="Update plan", kind="think")

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        a = parse_args(self.args_model, args, self.name)
        entries = tuple(PlanEntry(e.content, e.priority, e.status) for e in a.entries)
        await self._sink(entries)
        return ToolOutput(
            plan_summary(entries),
            raw_output={"entries": len(entries)},
        )


def plan_summary(entries: tuple[PlanEntry, ...]) -> str:
    """The confirmation the model reads: counts, the step in progress, and a note when more
    than one step is in progress."""
    if not entries:
        return "Plan cleared."
    counts = {s: sum(e.status == s for e in entries) for s in ("completed", "in_progress")}
    pending = len(entries) - counts["completed"] - counts["in_progress"]
    text = (
        f"Plan updated: {len(entries)} steps ({counts['completed']} completed, "
        f"{counts['in_progress']} in progress, {pending} pending)."
    )
    if counts["in_progress"] > 1:
        text += (
            f" Note: {counts['in_progress']} steps are in_progress; keep exactly one "
            "in_progress and mark finished steps completed."
        )
    return text
