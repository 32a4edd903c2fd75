"""Goal mode: the agent works on its own towards an objective until it says it is reached.

Owns `GoalState` (the objective, the round, the outcome) and `GoalRun`, which runs one goal in
a session: it registers goal mode's "keep working" as a built-in `before_turn_end` hook
(`hooks/engine.py`) while the goal runs, and takes it away when it ends. The `goal_done` tool
(`tools/goal_done.py`) is offered while a goal runs by the session's table of built-in tools
(`session/toolset.py`), reporting to `GoalRun.reached`. The turn runner does the rest: a
`before_turn_end` denial sends the turn round again with the hook's note, and `max_rounds`
bounds the rounds (`defect_core/turn/runner.py`).

How a goal runs (`/goal <objective>` in a session, `defect exec --goal "<objective>"`):
1. the prompt is the objective, framed so the model knows to call `goal_done` at the end;
2. whenever the turn would end, the hook looks: `goal_done` called → the turn ends `end_turn`;
   rounds left → the turn goes on with "Keep working towards: <objective>" as a user-side note,
   and the user sees "Goal round N/M"; no round left → the turn ends `max_turn_requests`;
3. a cancel stops it at once (the turn's own cancel).

Invariants:
- A goal lasts one turn, and ends with it however that turn ends (`finish`), so a later
  ordinary turn never inherits it (nor its `goal_done`: the session offers that tool only
  between the goal's start and its `finish`).
- Rounds never exceed `max_rounds` (`goal_max_rounds`); each round has the usual request
  limit (`max_turn_requests`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from defect_core.hooks.engine import HookEngine, HookOutcome
from defect_core.tools.goal_done import GOAL_DONE

GoalOutcome = Literal["running", "reached", "out_of_rounds", "stopped"]


@dataclass
class GoalState:
    objective: str
    max_rounds: int
    round: int = 1
    outcome: GoalOutcome = "running"
    summary: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "objective": self.objective,
            "max_rounds": self.max_rounds,
            "round": self.round,
            "outcome": self.outcome,
            "summary": self.summary,
        }


def goal_prompt(objective: str) -> str:
    """The first round's prompt."""
    return (
        f"Your goal: {objective}\n\n"
        "Work towards it on your own, step by step, without waiting for the user. When the "
        f"goal is fully reached (and checked), call the `{GOAL_DONE}` tool with a short summary."
    )


def keep_working(objective: str) -> str:
    """The note that starts each further round."""
    return (
        f"Keep working towards: {objective}\n"
        f"(Call `{GOAL_DONE}` with a short summary once the goal is reached.)"
    )


class GoalRun:
    """One goal, attached to a session's hooks for the turn that pursues it."""

    def __init__(self, objective: str, max_rounds: int, hooks: HookEngine) -> None:
        self.state = GoalState(objective, max_rounds)
        self._hooks = hooks
        hooks.add_builtin("before_turn_end", self._before_turn_end)

    @property
    def announcement(self) -> str:
        return f"Goal round {self.state.round}/{self.state.max_rounds}: {self.state.objective}"

    def reached(self, summary: str) -> None:
        """What `goal_done` reports: the goal is reached, with its summary."""
        self.state.outcome = "reached"
        self.state.summary = summary

    async def _before_turn_end(self, _event: dict[str, Any]) -> HookOutcome | None:
        state = self.state
        if state.outcome == "reached":
            return None
        if state.round >= state.max_rounds:
            state.outcome = "out_of_rounds"
            return HookOutcome(stop="max_turn_requests")
        state.round += 1
        return HookOutcome(
            decision="deny",
            reason=keep_working(state.objective),
            announce=self.announcement,
        )

    def finish(self) -> GoalState:
        """Detach from the session (its turn ended, however it ended)."""
        self._hooks.remove_builtin("before_turn_end", self._before_turn_end)
        if self.state.outcome == "running":
            self.state.outcome = "stopped"
        return self.state
