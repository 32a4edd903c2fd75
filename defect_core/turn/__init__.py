"""The turn: one user prompt → model requests and tool calls → a stop reason.

Owns the loop docs/architecture.md "The life of a turn" describes. A session builds a
`TurnRunner` from a `TurnDeps` (what the turn needs from it) and runs it with a `TurnConfig`
(the limits snapshotted when the turn starts). A turn goes through these phases, each a named
step of `runner.py`:

1. commit the prompt (`_commit_prompt`);
2. then, per model request, within `max_turn_requests`:
   a. fit the context window (`request.fit_context_window`: the compactor's turn);
   b. build the request and stream the reply (`request.build_request`,
      `request.stream_reply`: deltas forwarded at once, retries, one compaction on overflow);
   c. commit the assistant message and announce its tool calls (`_commit_reply`);
   d. run the tools (`_run_tools`: `calls.decide` — policy, or ask the user — each call in
      order, then `calls.execute` the approved ones concurrently);
   e. commit all results as one user message, in `tool_use` order (`_commit_results`);
3. stop, with a stop reason, when a reply asks for no tool (or the request limit is reached).

Hooks (`TurnDeps.hooks`, the session's `HookEngine`: `defect_core/hooks/`) fire at these
phases: `user_prompt` in step 1 (a denial refuses the prompt; context joins it);
`before_request` before each request (`_before_request`: context committed as a note);
`before_tool` in `calls.decide`, before the policy (a denial fails the call, an approval runs
it unasked unless the mode or an "always reject" refuses it); `after_tool` in
`calls.execute`, before `_commit_results` (context joins the result); `before_turn_end` at
step 3 (`_before_turn_end`: a denial sends the turn round again, within `max_rounds`; goal
mode is such a hook, `defect_core/goal.py`). Plan updates are published by the session's
plan (`PlanUpdated`, `defect_core/session/plan.py`), not by the turn; subagents are tools
run by `calls.execute` (`spawn_agent`, `defect_core/agents/`), each with a `TurnDeps` of its
own.

Modules, top down (import-linter keeps the order, pyproject.toml): `runner` (the loop) →
`request` | `call_steps` (the model request; the steps of a tool call) → `deps` (`TurnDeps`,
`TurnConfig`, `TurnResult`). The module invariants live with each.
"""

from __future__ import annotations

from defect_core.turn.call_steps import CANCELLED_RESULT_TEXT, MAX_RESULT_CHARS
from defect_core.turn.deps import TurnConfig, TurnDeps, TurnResult
from defect_core.turn.runner import TurnRunner, hook_note

__all__ = [
    "CANCELLED_RESULT_TEXT",
    "MAX_RESULT_CHARS",
    "TurnConfig",
    "TurnDeps",
    "TurnResult",
    "TurnRunner",
    "hook_note",
]
