"""Which tools a new session gets (`default_tools()`, the built-in set), and what one call of
them may use (`call_context`).

Owns the one list of built-in tools a session starts with (the MCP servers' tools are added
per session by the core, `core.py`). A new built-in tool is registered here, and nowhere
else, so every session — created or loaded — offers the same set. `call_context` is the one
place a session's settings become what a tool call may reach (reads outside the workspace,
fetch's private hosts, the environment its commands inherit).

Invariant: cheap to import. The tool modules are imported when the first session is made,
not when the session package is (docs/architecture.md, rule 6: nothing heavy on the path of
`initialize`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from defect_core.config import Settings
from defect_core.session.protocol import Backends
from defect_core.tools.base import ProgressReporter, Tool, ToolContext


def default_tools() -> list[Tool]:
    """The built-in tools: files, bash, search."""
    from defect_core.tools.builtin import builtin_tools

    return list(builtin_tools())


def call_context(
    session_id: str,
    cwd: Path,
    backends: Backends,
    settings: Settings,
    state: dict[str, Any],
    tool_call_id: str,
    report: ProgressReporter,
) -> ToolContext:
    """What one tool call of a session may use; `state` is the session's tool state, shared
    by its calls."""
    return ToolContext(
        session_id=session_id,
        cwd=cwd,
        fs=backends.fs,
        shell=backends.shell,
        tool_call_id=tool_call_id,
        report=report,
        allow_read_outside=settings.allow_read_outside,
        settings=state,
        fetch_allow=settings.fetch_allow_hosts,
        env_policy=settings.env_policy(),
    )
