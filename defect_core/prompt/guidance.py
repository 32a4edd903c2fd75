"""How to use each built-in tool well: one short paragraph per tool, shown in the system prompt.

Owns `TOOL_GUIDANCE`. The tool's own description (sent with its input schema) says what it
does; the guidance here says when to reach for it and what to avoid, the advice that spans
tools. Only the tools a session actually offers get their paragraph, in the order the session
lists them, so the prompt never mentions a tool the model cannot call.

To add a tool: give it an entry here (a sentence or two; every word is paid on every request).
"""

from __future__ import annotations

from collections.abc import Iterable

TOOL_GUIDANCE: dict[str, str] = {
    "read_file": (
        "Read a file before editing it. For a big file read the part you need (offset/limit) "
        "instead of the whole file."
    ),
    "write_file": (
        "Create new files or replace a file entirely; for a change to an existing file prefer "
        "edit_file."
    ),
    "edit_file": (
        "Replace an exact, unique snippet of a file you have read; include enough surrounding "
        "lines to make it unique."
    ),
    "bash": (
        "Run builds, tests, git and other commands in the workspace. Prefer the search tool "
        "over grep/find, and the file tools over cat/sed for reading and editing."
    ),
    "search": "Find files by name pattern or lines by regular expression before you read.",
    "fetch": (
        "Read a web page or document by URL (converted to Markdown). Only fetch URLs the user "
        "gave or that you found in the workspace or earlier results."
    ),
    "update_plan": (
        "For multi-step work (three steps or more), set a plan before you start and update it "
        "as you go: exactly one step in_progress, mark each completed as soon as it is done. "
        "Skip it for a simple question or a one-step change."
    ),
    "ask_user": (
        "Ask only when a decision is the user's and you cannot settle it from the workspace; "
        "offer concrete options. If no one answers, go on with your best judgement and say "
        "what you assumed."
    ),
}

MCP_GUIDANCE = (
    "Tools whose names start with `mcp__` come from MCP servers the editor connected; use them "
    "when their description fits the task."
)


def tool_guidance(tool_names: Iterable[str]) -> list[str]:
    """The guidance lines for the tools offered, in their order (`- name: advice`)."""
    lines: list[str] = []
    mcp = False
    for name in tool_names:
        if name.startswith("mcp__"):
            mcp = True
        elif name in TOOL_GUIDANCE:
            lines.append(f"- {name}: {TOOL_GUIDANCE[name]}")
    if mcp:
        lines.append(f"- {MCP_GUIDANCE}")
    return lines
