"""What a tool is to the turn runner, and what it is given to work with.

Owns the `Tool` protocol, its `Safety` class, `ToolContext`, `ToolOutput`, `ToolError` and the
`ToolRegistry`.

Invariants:
- A tool touches files and processes only through `ctx.fs` / `ctx.shell` (docs/architecture.md,
  rule 4),
  so the bridge can route them to the editor (`fs/*`, `terminal/*`) or run them locally.
- `describe` is cheap and side-effect free: the runner calls it to announce the call (title,
  kind, locations) before any permission is asked. `preview` may read (e.g. compute an edit's
  diff for the permission question) but never writes.
- `run` reports failure by raising `ToolError` (a message the model can act on) or by
  returning `ToolOutput(is_error=True)`; anything else escaping is a bug the runner still
  turns into a failed result, so a tool can never kill a turn.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from defect_core.events import Location, ToolDisplay, ToolKind
from defect_core.model import ResultPart, ToolSpec

if TYPE_CHECKING:
    from defect_core.tools.backends import FsBackend, ShellBackend


class Safety(Enum):
    READ_ONLY = "read_only"
    MUTATING = "mutating"
    DESTRUCTIVE = "destructive"


@dataclass(frozen=True, slots=True)
class ToolCallView:
    """How a call is shown before it runs."""

    title: str
    kind: ToolKind
    locations: tuple[Location, ...] = ()
    content: tuple[ToolDisplay, ...] = ()


@dataclass(frozen=True, slots=True)
class ToolOutput:
    """A finished call: `content` goes to the model, `display` to the user."""

    content: str | tuple[ResultPart, ...]
    is_error: bool = False
    display: tuple[ToolDisplay, ...] = ()
    locations: tuple[Location, ...] | None = None
    raw_output: Any = None


class ToolError(Exception):
    """A failure the model should read and can act on (bad arguments, no match, ...)."""


ProgressReporter = Callable[[tuple[ToolDisplay, ...]], Awaitable[None]]


async def _no_progress(_: tuple[ToolDisplay, ...]) -> None:
    return None


@dataclass(slots=True)
class ToolContext:
    """What one tool call may use. Built per call by the turn runner."""

    session_id: str
    cwd: Path
    fs: FsBackend
    shell: ShellBackend
    tool_call_id: str = ""
    report: ProgressReporter = _no_progress
    """Send intermediate display content (e.g. a terminal id) while the tool runs."""
    allow_read_outside: bool = False
    settings: dict[str, Any] = field(default_factory=dict)
    fetch_allow: tuple[str, ...] = ()
    """Hosts the `fetch` tool may reach although their addresses are not public
    (`[fetch] allow`, see defect_core/tools/netguard.py)."""


class Tool(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def description(self) -> str: ...

    @property
    def input_schema(self) -> dict[str, Any]: ...

    @property
    def safety(self) -> Safety: ...

    @property
    def kind(self) -> ToolKind: ...

    def describe(self, args: dict[str, Any], ctx: ToolContext) -> ToolCallView: ...

    async def preview(self, args: dict[str, Any], ctx: ToolContext) -> tuple[ToolDisplay, ...]:
        """Display content for a permission question (a diff for edits); may read, never writes."""
        ...

    def permission_key(self, args: dict[str, Any]) -> str:
        """What an "always" decision is remembered under (the tool, or a command prefix)."""
        ...

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutput: ...


class ToolRegistry:
    """The tools a session offers, by name, in a stable order."""

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for tool in tools:
            self.add(tool)

    def add(self, tool: Tool) -> None:
        self._tools[tool.name] = tool

    def remove(self, name: str) -> None:
        self._tools.pop(name, None)

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def __iter__(self) -> Any:
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)

    def specs(self) -> tuple[ToolSpec, ...]:
        return tuple(ToolSpec(t.name, t.description, t.input_schema) for t in self._tools.values())

    def merged(self, other: ToolRegistry) -> ToolRegistry:
        return ToolRegistry([*self, *other])
