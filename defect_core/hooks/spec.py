"""What a configured hook is: `HookSpec`, the event names, and which tool calls it matches.

Owns the value the configuration parses a `[hooks]` entry into (`defect_core/config/hooks.py`)
and the engine runs (`engine.py`): the event, what runs (a `command` line, or a `prompt` note),
the tool matcher, the timeout, the file it came from and whether that file may be obeyed.

Events (the keys of `[hooks]`):

    session_start    the session's first prompt in this process (new or loaded)
    user_prompt      a prompt, before the model sees it
    before_request   before each model request
    before_tool      before a tool call runs (may deny it; the model reads the reason)
    after_tool       after a tool call ran, with its result
    before_turn_end  the turn would end (may send it round again with a note)
    before_compact   before the conversation is summarised
    after_compact    after it was

Invariants:
- A hook from a project's own `.defect/config*.toml` (`project` set) runs only when `trusted`:
  the user trusts that project (`/trust`, `trusted_projects`: `defect_core/config/trust.py`);
  the configuration decides, once every layer is read. A repository just cloned never runs a
  command.
- A matcher applies to the tool events only; `*` (or no matcher) matches every tool, and
  `a|b` matches either name (each alternative a shell-style pattern).
- Plain data, the standard library only: the configuration layer imports it.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from typing import Literal

HookEvent = Literal[
    "session_start",
    "user_prompt",
    "before_request",
    "before_tool",
    "after_tool",
    "before_turn_end",
    "before_compact",
    "after_compact",
]
HOOK_EVENTS: tuple[HookEvent, ...] = (
    "session_start",
    "user_prompt",
    "before_request",
    "before_tool",
    "after_tool",
    "before_turn_end",
    "before_compact",
    "after_compact",
)
TOOL_EVENTS: tuple[HookEvent, ...] = ("before_tool", "after_tool")
DEFAULT_TIMEOUT = 5.0
"""Seconds a command hook may run before it is killed and skipped."""


@dataclass(frozen=True, slots=True)
class HookSpec:
    """One `[hooks]` entry: at `event`, run `command` (or add the `prompt` note)."""

    event: HookEvent
    command: str | None = None
    """A command line, run as `/bin/sh -c COMMAND` in the session's directory."""
    prompt: str | None = None
    """A note added to the model's input at this event (no process runs)."""
    tool: str | None = None
    """The matcher: the tool names this entry applies to (tool events only; None: all)."""
    timeout: float = DEFAULT_TIMEOUT
    origin: str = ""
    """The file the entry was read from (for logs and notices)."""
    project: str | None = None
    """The project root when the entry comes from that project's own `.defect/` files."""
    trusted: bool = True
    """False: a project's hook the user has not trusted; it never runs."""

    def matches(self, tool: str | None) -> bool:
        if self.tool is None or tool is None:
            return True
        return any(fnmatch.fnmatchcase(tool, p.strip()) for p in self.tool.split("|"))

    @property
    def label(self) -> str:
        """How logs name the entry: its event and what it runs."""
        what = self.command if self.command is not None else f"prompt {self.prompt!r}"
        return f"{self.event}: {what[:80]}"
