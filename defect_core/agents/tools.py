"""The tools of delegation: `spawn_agent`, `inspect_background_task`, `cancel_background_task`.

Owns the three tools the model uses to hand work to subagents (`child.py` runs one) and to
follow the ones that run in the background (`tasks.py` keeps them).

- `spawn_agent {agent, task, run_in_background}`: in the foreground, the call lasts as long as
  the subagent, streams its progress as the call's content, and returns its final text (or
  fails with why); in the background it returns at once with a task id.
- `inspect_background_task {task_id?}`: every task (id, label, status, progress), or one task's
  status and latest progress (its outcome once it ended).
- `cancel_background_task {task_id}`: stops a running task.

Invariants:
- The input schemas are derived from the argument models (`tools/base.ModelTool`); the
  profiles are listed in `spawn_agent`'s description, built once per tool from the profiles
  the session loaded when it started, so the tool list is byte-stable for the prompt cache.
- `spawn_agent` itself runs without a question (`Safety.READ_ONLY`): what the subagent does
  is judged call by call under its parent's mode and rules (`child.py`).
- Background tasks are the session's own agent's: a subagent is never given the task tools,
  and its `spawn_agent` refuses `run_in_background`.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from defect_core.agents.child import SPAWN_AGENT, ChildOutcome, Lineage, run_child
from defect_core.agents.tasks import BackgroundTask, BackgroundTasks
from defect_core.events import TextDisplay, ToolKind
from defect_core.tools.base import (
    ModelTool,
    Safety,
    ToolCallView,
    ToolContext,
    ToolError,
    ToolOutput,
    clip_title,
)
from defect_core.tools.workspace import ToolArgs, parse_args

INSPECT = "inspect_background_task"
CANCEL = "cancel_background_task"


class SpawnArgs(ToolArgs):
    agent: str = Field(min_length=1, description="The profile to start (one of those listed).")
    task: str = Field(
        min_length=1,
        description="The whole task, self-contained (see above).",
    )
    run_in_background: bool = Field(
        default=False,
        description="Run it as a background task (see above).",
    )


class InspectArgs(ToolArgs):
    task_id: str | None = Field(
        default=None, description="A task id (`t1`); leave out to list every task."
    )


class CancelArgs(ToolArgs):
    task_id: str = Field(min_length=1, description="The id of the task to cancel (`t1`).")


class _Tool(ModelTool):
    """What the three share beyond `ModelTool`: read-only as far as the policy goes."""

    @property
    def safety(self) -> Safety:
        return Safety.READ_ONLY


class SpawnAgentTool(_Tool):
    args_model = SpawnArgs

    def __init__(self, lineage: Lineage, tasks: BackgroundTasks | None = None) -> None:
        self._lineage = lineage
        self._tasks = tasks
        listed = "\n".join(f"- {p.name}: {p.description}" for p in lineage.profiles)
        background = (
            "With run_in_background, the call returns at once with a task id: go on with "
            "other work; the outcome is delivered to you when the task ends "
            "(inspect_background_task shows progress, cancel_background_task stops it)."
            if tasks is not None
            else "Background tasks are not available here: run_in_background must be false."
        )
        self._description = (
            "Hand a self-contained task to a subagent: it works in a fresh context of its own "
            "(it sees nothing of this conversation, so put everything it needs in `task`), "
            "with your tools and permissions at most, and cannot ask the user anything. Only "
            "its final answer comes back to you, so use it to keep long searches or "
            f"multi-step side work out of your context. {background}\n\nAgents:\n{listed}"
        )

    @property
    def name(self) -> str:
        return SPAWN_AGENT

    @property
    def description(self) -> str:
        return self._description

    @property
    def kind(self) -> ToolKind:
        return "think"

    def describe(self, args: dict[str, Any], ctx: ToolContext) -> ToolCallView:
        agent = str(args.get("agent") or "subagent")
        task = str(args.get("task") or "").strip().splitlines()
        where = " (background)" if args.get("run_in_background") is True else ""
        return ToolCallView(
            title=clip_title(f"{agent}{where}: {task[0] if task else ''}", 120), kind="think"
        )

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        a = parse_args(self.args_model, args, self.name)
        profile = self._lineage.profile(a.agent)
        if profile is None:
            names = ", ".join(p.name for p in self._lineage.profiles)
            raise ToolError(f"unknown agent {a.agent!r}; the agents are: {names}")
        if a.run_in_background:
            if self._tasks is None:
                raise ToolError("run_in_background is not available to a subagent")
            return self._start_background(a, ctx)
        outcome = await run_child(
            self._lineage, profile, a.task, ctx.tool_call_id, ctx.report, self._child_tool
        )
        return _output(outcome)

    def _child_tool(self, lineage: Lineage) -> SpawnAgentTool:
        return SpawnAgentTool(lineage)

    def _start_background(self, a: SpawnArgs, ctx: ToolContext) -> ToolOutput:
        assert self._tasks is not None
        profile = self._lineage.profile(a.agent)
        assert profile is not None
        first = a.task.strip().splitlines()[0] if a.task.strip() else ""
        label = clip_title(f"{a.agent}: {first}", 80)

        async def body(task: BackgroundTask) -> tuple[bool, str]:
            outcome = await run_child(
                self._lineage,
                profile,
                a.task,
                ctx.tool_call_id,
                ctx.report,
                self._child_tool,
                background=True,
                progress=task.progress,
            )
            return outcome.status == "completed", outcome.answer

        task = self._tasks.start(label, ctx.tool_call_id, body)
        text = (
            f"Started background task {task.id} ({label}). Go on with other work: its outcome "
            "will be delivered to you when it finishes. inspect_background_task shows its "
            "progress; cancel_background_task stops it."
        )
        return ToolOutput(
            text,
            display=(TextDisplay(f"Background task {task.id} started."),),
            raw_output={"task_id": task.id},
        )


def _output(outcome: ChildOutcome) -> ToolOutput:
    failed = outcome.status != "completed"
    return ToolOutput(
        outcome.answer, is_error=failed, display=outcome.progress.display(outcome.answer)
    )


class InspectBackgroundTaskTool(_Tool):
    args_model = InspectArgs

    def __init__(self, tasks: BackgroundTasks) -> None:
        self._tasks = tasks

    @property
    def name(self) -> str:
        return INSPECT

    @property
    def description(self) -> str:
        return (
            "Look at background tasks (started by spawn_agent with run_in_background): "
            "without task_id, every task with its id, label, status and progress; with "
            "task_id, that task's status and latest progress (and its outcome once it ended)."
        )

    @property
    def kind(self) -> ToolKind:
        return "other"

    def describe(self, args: dict[str, Any], ctx: ToolContext) -> ToolCallView:
        task_id = args.get("task_id")
        return ToolCallView(
            title=f"Background task {task_id}" if task_id else "Background tasks", kind="other"
        )

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        a = parse_args(self.args_model, args, self.name)
        if a.task_id is None:
            tasks = self._tasks.all()
            text = "\n".join(t.line() for t in tasks) or "No background tasks in this session."
            return ToolOutput(text, display=(TextDisplay(text),))
        task = self._tasks.get(a.task_id)
        if task is None:
            raise ToolError(_unknown(a.task_id, self._tasks))
        ended = task.status != "running"
        view = task.progress.text(task.outcome if ended else None) or "(no progress yet)"
        text = f"{task.line()}\n\n{view}"
        if ended:
            task.delivered = True  # the model has read the outcome here: no note needed
        return ToolOutput(text, display=(TextDisplay(text),))


class CancelBackgroundTaskTool(_Tool):
    args_model = CancelArgs

    def __init__(self, tasks: BackgroundTasks) -> None:
        self._tasks = tasks

    @property
    def name(self) -> str:
        return CANCEL

    @property
    def description(self) -> str:
        return "Cancel a running background task (started by spawn_agent with run_in_background)."

    @property
    def kind(self) -> ToolKind:
        return "other"

    def describe(self, args: dict[str, Any], ctx: ToolContext) -> ToolCallView:
        return ToolCallView(title=f"Cancel background task {args.get('task_id', '')}", kind="other")

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        a = parse_args(self.args_model, args, self.name)
        task = self._tasks.get(a.task_id)
        if task is None:
            raise ToolError(_unknown(a.task_id, self._tasks))
        if task.status != "running":
            text = f"Task {task.id} had already ended ({task.status})."
        else:
            await self._tasks.cancel(task.id)
            text = f"Task {task.id} is cancelled."
        return ToolOutput(text, display=(TextDisplay(text),))


def _unknown(task_id: str, tasks: BackgroundTasks) -> str:
    ids = ", ".join(t.id for t in tasks.all()) or "none"
    return f"no background task {task_id!r} (tasks: {ids})"
