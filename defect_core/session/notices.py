"""What a session tells its user when it opens: the things that work differently from what
they would assume.

Owns `opening_notices`. Invariant: a notice names the cause and what it means for the user
(this session is not saved; an MCP server failed; settings of an untrusted project were not
applied, and how to trust it; stored "always" answers were dropped) — a silent degradation is
the failure this module exists to prevent. The session (`state.py`) hands over what it knows;
nothing here touches the store or the network. MCP servers start in the background
(`defect_core/mcp/hub.py`): those that failed so far are listed here, and each later failure
is published as it happens, so none is told twice and none waits for a prompt.
"""

from __future__ import annotations

from defect_core.config.trust import ProjectTrust
from defect_core.mcp import McpHub
from defect_core.mcp.hub import Publish


def opening_notices(
    unsaved_reason: str | None,
    mcp: McpHub | None,
    project: ProjectTrust | None,
    publish: Publish,
    dropped_rules: str | None = None,
) -> tuple[str, ...]:
    """The warnings a front end shows after `session/new` or a load, in order; from then on
    an MCP server that fails is told through `publish` (a `Notice`). `dropped_rules`: stored
    "always" answers a load did not restore (`permissions.py`)."""
    notices: list[str] = []
    if unsaved_reason is not None:
        notices.append(
            f"This session is not being saved, so it will be lost when defect exits: "
            f"{unsaved_reason}"
        )
    notice = mcp.follow_failures(publish) if mcp is not None else None
    if notice:
        notices.append(notice)
    if project is not None and (trust_notice := project.notice()):
        notices.append(trust_notice)
    if dropped_rules:
        notices.append(dropped_rules)
    return tuple(notices)
