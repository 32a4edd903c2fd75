"""A session's background tasks: subagents that run on after the turn that started them.

Owns `BackgroundTask` (id, label, status, progress, outcome) and `BackgroundTasks`, the
session's task table: `start` (at most `limit` running at once), `cancel`, `take_notes` (the
outcomes not yet told to the model) and `aclose`.

Invariants:
- A task runs in its own asyncio task, outside any turn: the end of the turn that started it
  does not stop it; `cancel`, the session's `close` (`session/close`, delete) and process
  exit (the core closes every session) do, and `aclose` waits until each has ended, so its
  last writes land before the store closes.
- Each task ends exactly once, in `completed`, `failed` or `cancelled`; its `on_end` callback
  runs once, shielded (the session publishes the update the editor sees).
- Each finished outcome is delivered to the model once (`take_notes`), as a user-side note
  the turn runner commits before its next request (`TurnDeps.notes`); a task the model
  cancelled itself is not delivered again, and one cancelled by `close` never is.
- Ids are short and stable within a session (`t1`, `t2`, …), never reused.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Literal

import anyio

from defect_core.agents.progress import ChildProgress
from defect_core.log import get_logger
from defect_core.model import TextBlock
from defect_core.tools.base import ToolError

log = get_logger("defect.agents")

TaskStatus = Literal["running", "completed", "failed", "cancelled"]


@dataclass
class BackgroundTask:
    id: str
    label: str
    tool_call_id: str
    """The `spawn_agent` call that started it (its editor view, its stored transcript)."""
    progress: ChildProgress = field(default_factory=ChildProgress)
    status: TaskStatus = "running"
    outcome: str = ""
    delivered: bool = False
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    handle: asyncio.Task[None] | None = None

    def line(self) -> str:
        calls = self.progress.tool_calls
        return f"{self.id}  {self.status:<9}  {self.label}  ({calls} tool call{'s' * (calls != 1)})"


TaskBody = Callable[[BackgroundTask], Awaitable[tuple[bool, str]]]
"""Runs a task: (succeeded, outcome text)."""
TaskEnded = Callable[[BackgroundTask], Awaitable[None]]


class BackgroundTasks:
    """The task table of one session."""

    def __init__(self, limit: int, on_end: TaskEnded) -> None:
        self.limit = limit
        self._on_end = on_end
        self._tasks: dict[str, BackgroundTask] = {}
        self._closed = False

    def running(self) -> list[BackgroundTask]:
        return [t for t in self._tasks.values() if t.status == "running"]

    def all(self) -> list[BackgroundTask]:
        return list(self._tasks.values())

    def get(self, task_id: str) -> BackgroundTask | None:
        return self._tasks.get(task_id)

    def start(self, label: str, tool_call_id: str, body: TaskBody) -> BackgroundTask:
        """Start `body` as a task now; `ToolError` (for the model) when the limit is reached."""
        if self._closed:
            raise ToolError("the session is closing: no background task can start")
        running = self.running()
        if len(running) >= self.limit:
            ids = ", ".join(t.id for t in running)
            raise ToolError(
                f"{len(running)} background tasks are already running ({ids}), the most this "
                f"session allows (background_max_tasks = {self.limit}). Wait for one to finish, "
                "cancel one with cancel_background_task, or run this one in the foreground."
            )
        task = BackgroundTask(id=f"t{len(self._tasks) + 1}", label=label, tool_call_id=tool_call_id)
        self._tasks[task.id] = task
        task.handle = asyncio.get_running_loop().create_task(
            self._run(task, body), name=f"background-{task.id}"
        )
        return task

    async def _run(self, task: BackgroundTask, body: TaskBody) -> None:
        succeeded, outcome = False, "the task was cancelled"
        try:
            with task.scope:
                succeeded, outcome = await body(task)
                task.status = "completed" if succeeded else "failed"
        except Exception as exc:  # a bug in a task must not go unseen, nor kill the session
            log.exception("background_task_crashed", task=task.id)
            task.status, outcome = "failed", f"the task crashed: {type(exc).__name__}: {exc}"
        finally:
            if task.status == "running":
                task.status = "cancelled"
            task.outcome = outcome
            with anyio.CancelScope(shield=True):
                try:
                    await self._on_end(task)
                except Exception:
                    log.exception("background_task_report_failed", task=task.id)

    async def cancel(self, task_id: str) -> BackgroundTask | None:
        """Cancel a running task and wait until it has ended; None if unknown."""
        task = self._tasks.get(task_id)
        if task is None:
            return None
        if task.status == "running":
            task.delivered = True  # the model asked for it: no note to tell it again
            task.scope.cancel()
            if task.handle is not None:
                await asyncio.wait({task.handle})
        return task

    def take_notes(self) -> list[TextBlock]:
        """The outcomes finished since the last call, as notes for the model (each once)."""
        notes = []
        for task in self._tasks.values():
            if task.status != "running" and not task.delivered:
                task.delivered = True
                notes.append(TextBlock(text=note(task)))
        return notes

    async def aclose(self) -> None:
        """Cancel every running task and wait for each to end. Idempotent."""
        self._closed = True
        handles = []
        for task in self.running():
            task.delivered = True
            task.scope.cancel()
            if task.handle is not None:
                handles.append(task.handle)
        if handles:
            await asyncio.wait(handles)


def note(task: BackgroundTask) -> str:
    """How a finished task is told to the model."""
    return (
        f'<background-task id="{task.id}" status="{task.status}">\n'
        f"{task.label}\n\n{task.outcome}\n</background-task>"
    )
