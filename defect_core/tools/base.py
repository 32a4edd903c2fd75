"""What a tool is to the turn runner, and what it is given to work with.

Owns the `Tool` protocol, its `Safety` class, `ToolContext`, `ToolOutput`, `ToolError`, the
`ToolRegistry`, and `input_schema`: how a built-in tool's argument model becomes the JSON
schema the model is shown.

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
- A built-in tool's input schema is derived from the pydantic model that validates its
  arguments (`input_schema`), never written by hand beside it: what the model is promised is
  what validation accepts (tests/test_tools_schema.py holds every registered tool to that).
  The schema is compact and byte-stable, because the tool list is part of the cached prompt
  prefix and one changed byte re-bills the whole prefix.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from enum import Enum
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from defect_core.child_env import DEFAULT_POLICY, EnvPolicy
from defect_core.events import Location, ToolDisplay, ToolKind
from defect_core.model import ResultPart, ToolSpec
from defect_core.tools import shown
from defect_core.tools.command_key import CommandKey
from defect_core.tools.schema_cache import SCHEMAS

if TYPE_CHECKING:
    from pydantic import BaseModel

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
    env_policy: EnvPolicy = DEFAULT_POLICY
    """Which of defect's variables the commands a tool starts do not inherit (the session's
    settings, `Settings.env_policy`; defect_core/child_env.py)."""
    keep_partial: Callable[[str], None] | None = None
    """Where a tool stopped before its end (cancelled) leaves what it had produced so far (a
    command's output): the runner puts it in the call's result (`turn/call_steps.py`)."""


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

    def permission_key(self, args: dict[str, Any]) -> str | CommandKey:
        """What an "always" decision is remembered under: the tool, a detail of the call
        (a host), or for a command the rule `tools/command_key.py` gives it."""
        ...

    def protected(self, args: dict[str, Any], ctx: ToolContext) -> str | None:
        """Why this call is asked every time, or None: the protected path it would change or
        names (`tools/protected.py`). Cheap, side-effect free; asked only of a tool that is
        not read-only."""
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
        specs = tuple(ToolSpec(t.name, t.description, t.input_schema) for t in self._tools.values())
        SCHEMAS.flush()  # keeps any schema derived just now for the next process
        return specs

    def merged(self, other: ToolRegistry) -> ToolRegistry:
        return ToolRegistry([*self, *other])


# --- input schemas ----------------------------------------------------------------------------

_KEY_ORDER = (
    "type",
    "description",
    "enum",
    "const",
    "default",
    "minimum",
    "exclusiveMinimum",
    "maximum",
    "exclusiveMaximum",
    "minLength",
    "maxLength",
    "pattern",
    "items",
    "properties",
    "required",
    "additionalProperties",
)
"""Keys of a schema node in this order, then any others by name: the text does not depend on
the order pydantic happens to emit."""

_SUBSCHEMA = frozenset({"items", "additionalProperties", "not"})
_SUBSCHEMA_LISTS = frozenset({"anyOf", "oneOf", "allOf", "prefixItems"})
_NULL = {"type": "null"}


@cache
def input_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The input schema a tool offers for arguments validated by `model`.

    `model.model_json_schema()`, made compact and provider-ready: no `title`s, no top-level
    `description` (the tool has its own), `$ref`s to `$defs` inlined (a recursive model is
    refused), keys in a fixed order. An optional field whose default is `None` is shown as
    its plain type without a default — absent means none; validation still takes an explicit
    `null` as absent. Field descriptions come from `Field(description=...)`, defaults and
    bounds from the field, `additionalProperties: false` from `extra="forbid"`.

    Cached per model: the same dict every call, so the tool list stays byte-identical across
    turns. Callers must not change it. Kept between processes too (`schema_cache`): a new
    process reuses what an earlier one derived from the same code.
    """
    cached = SCHEMAS.get(model)
    if cached is not None:
        return cached
    raw = model.model_json_schema()
    defs: dict[str, Any] = raw.pop("$defs", {})
    schema = _compact(raw, defs, frozenset())
    schema.pop("description", None)
    SCHEMAS.put(model, schema)
    return schema


def _compact(node: dict[str, Any], defs: dict[str, Any], seen: frozenset[str]) -> dict[str, Any]:
    ref = node.get("$ref")
    if isinstance(ref, str):
        name = ref.removeprefix("#/$defs/")
        if name in seen or name not in defs:
            raise ValueError(f"cannot inline schema reference {ref!r}")
        target = _compact(defs[name], defs, seen | {name})
        rest = _compact({k: v for k, v in node.items() if k != "$ref"}, defs, seen)
        return _ordered({**target, **rest})
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in ("title", "$defs"):
            continue
        if key == "properties":
            out[key] = {name: _compact(sub, defs, seen) for name, sub in value.items()}
        elif key in _SUBSCHEMA and isinstance(value, dict):
            out[key] = _compact(value, defs, seen)
        elif key in _SUBSCHEMA_LISTS:
            out[key] = [_compact(sub, defs, seen) for sub in value]
        else:
            out[key] = value
    branches = out.get("anyOf")
    if "default" in out and out["default"] is None and isinstance(branches, list):
        others = [b for b in branches if b != _NULL]
        if len(others) == 1 < len(branches):
            del out["anyOf"], out["default"]
            out = {**others[0], **out}
    return _ordered(out)


def _ordered(node: dict[str, Any]) -> dict[str, Any]:
    known = [k for k in _KEY_ORDER if k in node]
    rest = sorted(k for k in node if k not in _KEY_ORDER)
    return {k: node[k] for k in (*known, *rest)}


class ModelTool:
    """What the built-in tools share: arguments validated by a pydantic model (`args_model`)
    whose derived schema is the one the model sees, no preview, "always" remembered per
    tool, and any string argument naming a protected path asked every time. A tool gives
    `name`, `description`, `safety`, `kind`, `describe` and `run`, and overrides `preview`,
    `permission_key` or `protected` when it has something better to say."""

    args_model: ClassVar[type[BaseModel]]
    """What `run` validates its arguments with; the input schema is derived from it."""

    @property
    def name(self) -> str:
        raise NotImplementedError

    @property
    def input_schema(self) -> dict[str, Any]:
        return input_schema(self.args_model)

    async def preview(self, args: dict[str, Any], ctx: ToolContext) -> tuple[ToolDisplay, ...]:
        return ()

    def permission_key(self, args: dict[str, Any]) -> str | CommandKey:
        return self.name

    def protected(self, args: dict[str, Any], ctx: ToolContext) -> str | None:
        """By default, the first string argument naming a protected path: a tool that knows
        which argument is its path says so more precisely."""
        from defect_core.tools.protected import protected_in_values

        return protected_in_values(args, ctx.cwd, ctx.cwd)


def clip_title(text: str, limit: int = 200, *, more: str = "") -> str:
    """A tool call's title, one visible line of at most `limit` characters
    (`tools.shown.clip_title`: nothing in it is hidden, and a clipped title says so)."""
    return shown.clip_title(text, limit, more=more)
