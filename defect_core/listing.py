"""What a list of sessions is: `SessionSummary` (one stored session) and `SessionPage`.

Owns the two values `AgentCore.list_sessions` answers with. The store builds them from its
rows (`store/`), the runtime from its live sessions (`session/core.py`), and the ACP bridge shows
them (`session/list`).

Invariant: plain immutable values that import nothing of defect. They sit at the bottom of the
layers (docs/layers.md) so that the store, which produces them, never imports the session door
(`session/protocol.py`, which re-exports them) from below.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SessionSummary:
    id: str
    cwd: str
    title: str | None
    updated_at: str
    """ISO 8601, UTC."""


@dataclass(frozen=True, slots=True)
class SessionPage:
    sessions: tuple[SessionSummary, ...]
    next_cursor: str | None = None
