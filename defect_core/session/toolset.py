"""Which tools a new session gets: `default_tools()`, the built-in set.

Owns the one list of built-in tools a session starts with (the MCP servers' tools are added
per session by the core, `core.py`). A new built-in tool is registered here, and nowhere
else, so every session — created or loaded — offers the same set.

Invariant: cheap to import. The tool modules are imported when the first session is made,
not when the session package is (docs/architecture.md, rule 6: nothing heavy on the path of
`initialize`).
"""

from __future__ import annotations

from defect_core.tools.base import Tool


def default_tools() -> list[Tool]:
    """The built-in tools: files, bash, search."""
    from defect_core.tools.builtin import builtin_tools

    return list(builtin_tools())
