"""Subagents and background tasks: `spawn_agent` and the session's task table.

A session's agent may hand a self-contained task to a subagent: the same turn runner
(`defect_core/turn/`) in a fresh context of its own, with a profile's system prompt and a subset
of the parent's tools, never more authority than its parent and never a question to the user.
In the foreground the parent's `spawn_agent` call lasts as long as the child and returns its
final text; in the background it returns a task id at once, and the outcome reaches the model
before its next request.

Modules, lowest first (import-linter keeps the order, pyproject.toml): `progress` (what is shown
of a child) → `child` (one run: `Lineage`, `run_child`) → `tasks` (the background task table) →
`tools` (`spawn_agent`, `inspect_background_task`, `cancel_background_task`) → `delegation`
(what a session owns of it all). Profiles are catalog files (`defect_core/catalog/agents.py`).
"""
