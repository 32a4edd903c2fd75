"""Hooks: the user's own commands and notes, run at named moments of a session.

One room per job, lowest first (each module's docstring states its invariants):

- `spec.py`    what a configured hook is (`HookSpec`), the event names, the tool matcher
- `runner.py`  one command hook run as a process: its input, its timeout, its answer
- `engine.py`  `HookEngine`: the hooks of one session, fired by the session and the turn
               phases (`defect_core/turn/__init__.py` lists where), and the built-in hooks
               (goal mode's "keep working", `defect_core/goal.py`) beside the configured ones

This package module imports nothing: the configuration (`defect_core/config/hooks.py`) reads
`spec.py` on the `initialize` path, and importing the package must not load the runner.
"""
