"""One MCP server tool behind defect's `Tool` protocol: `McpTool`.

Owns how a remote tool is offered to the model (its name, description, input schema and
safety) and how a call to it goes (`McpTool.run`, through its server's `Connection`).

Invariants:
- Tool names are `mcp__<server>__<tool>`, made to match `^[a-zA-Z0-9_-]{1,64}$` (what the
  Anthropic API accepts; `tool_name`) and unique within the hub (`unique_name`); input schemas
  are always object schemas without top-level `oneOf/anyOf/allOf` (`object_schema`), because
  one rejected tool definition would fail every request of the session.
- Safety comes from the tool's annotations: `readOnlyHint` → read-only, `destructiveHint` →
  destructive, anything else → mutating; permissions then apply as for built-in tools, and
  a call any of whose string arguments names a protected path (`tools/protected.py`) is
  asked every time.
- A call is shown whole: its title summarises the arguments and says when it cannot show
  them all, and its permission question holds every argument, every character visible
  (`tools/shown.py`).
- `McpTool.run` returns a result for everything except cancellation: an `isError` result, a
  call timeout, a server that died (and every later call to it), a protocol error all become
  `ToolOutput(is_error=True)` with a message naming the server and what happened.
- The call timeout counts the server's time, not the user's: it is held while the user answers
  the server's question (`Connection.user_answering`, `hub.py`).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import anyio

from defect_core.events import TextDisplay, ToolDisplay, ToolKind
from defect_core.log import get_logger
from defect_core.mcp.connection import Connection, describe
from defect_core.mcp.convert import tool_output
from defect_core.tools.base import Safety, ToolCallView, ToolContext, ToolOutput, clip_title
from defect_core.tools.protected import protected_in_values
from defect_core.tools.shown import fenced, visible

if TYPE_CHECKING:
    import mcp_types

log = get_logger("defect.mcp")

MAX_TOOL_NAME = 64
MCP_PREFIX = "mcp__"
"""How every MCP tool's name starts (the system prompt's guidance covers them by it)."""
MAX_DESCRIPTION_CHARS = 8_000
TITLE_CHARS = 200
"""A call's title is clipped here; its content then shows every argument."""


def _name_part(text: str) -> str:
    return re.sub(r"[^a-zA-Z0-9_-]", "_", text) or "_"


def tool_name(server: str, tool: str) -> str:
    """`mcp__<server>__<tool>`, cleaned and cut (with a hash of the original) to 64 chars."""
    name = f"{MCP_PREFIX}{_name_part(server)}__{_name_part(tool)}"
    if len(name) <= MAX_TOOL_NAME:
        return name
    digest = hashlib.sha256(f"{server}\0{tool}".encode()).hexdigest()[:8]
    return f"{name[: MAX_TOOL_NAME - 9]}_{digest}"


def unique_name(name: str, taken: set[str]) -> str:
    """`name`, or `name_2`, `name_3`… (still within 64 chars) if taken; adds it to `taken`."""
    candidate, n = name, 1
    while candidate in taken:
        n += 1
        suffix = f"_{n}"
        candidate = name[: MAX_TOOL_NAME - len(suffix)] + suffix
    taken.add(candidate)
    return candidate


def object_schema(schema: Any, *, server: str = "", tool: str = "") -> dict[str, Any]:
    """The tool's input schema as the API accepts it: an object schema, no top-level unions."""
    if not isinstance(schema, Mapping):
        return {"type": "object", "properties": {}}
    result = dict(schema)
    if result.get("type", "object") != "object":
        log.warning("mcp_schema_replaced", server=server, tool=tool, type=result.get("type"))
        return {"type": "object", "properties": {}}
    result["type"] = "object"
    for key in ("oneOf", "anyOf", "allOf"):
        if result.pop(key, None) is not None:
            log.info("mcp_schema_union_dropped", server=server, tool=tool, keyword=key)
    return result


def safety_of(annotations: Any) -> Safety:
    """readOnlyHint → read-only; destructiveHint → destructive; anything else → mutating."""
    if annotations is None:
        return Safety.MUTATING
    if getattr(annotations, "read_only_hint", None) is True:
        return Safety.READ_ONLY
    if getattr(annotations, "destructive_hint", None) is True:
        return Safety.DESTRUCTIVE
    return Safety.MUTATING


class McpTool:
    """One MCP server tool, offered to the model as `mcp__<server>__<tool>`."""

    def __init__(
        self,
        connection: Connection,
        remote: mcp_types.Tool,
        name: str,
        call_timeout: float,
    ) -> None:
        self._connection = connection
        self._remote_name = remote.name
        self._name = name
        self._display = remote.title or (
            remote.annotations.title if remote.annotations and remote.annotations.title else None
        )
        description = remote.description or self._display or remote.name
        if len(description) > MAX_DESCRIPTION_CHARS:
            description = description[: MAX_DESCRIPTION_CHARS - 1] + "…"
        self._description = description
        self._schema = object_schema(remote.input_schema, server=connection.name, tool=remote.name)
        self._safety = safety_of(remote.annotations)
        self._call_timeout = call_timeout

    @property
    def name(self) -> str:
        return self._name

    @property
    def server(self) -> str:
        return self._connection.name

    @property
    def remote_name(self) -> str:
        """The tool's name on its server."""
        return self._remote_name

    @property
    def description(self) -> str:
        return self._description

    @property
    def input_schema(self) -> dict[str, Any]:
        return self._schema

    @property
    def safety(self) -> Safety:
        return self._safety

    @property
    def kind(self) -> ToolKind:
        return "read" if self._safety is Safety.READ_ONLY else "other"

    def describe(self, args: dict[str, Any], ctx: ToolContext) -> ToolCallView:
        """The server, the tool and a summary of the arguments; when the summary cannot show
        them whole, the title says so and the call's content holds them all."""
        name = f"{self.server}: {self._display or self._remote_name}"
        summary, whole = _summarize(args)
        full = f"{name} ({summary})" if summary else name
        title = clip_title(full, TITLE_CHARS)
        if whole and title == visible(full.strip()):
            return ToolCallView(title=title, kind=self.kind)
        return ToolCallView(
            title=f"{title} (all arguments below)", kind=self.kind, content=self._arguments(args)
        )

    async def preview(self, args: dict[str, Any], ctx: ToolContext) -> tuple[ToolDisplay, ...]:
        return self._arguments(args)

    def _arguments(self, args: dict[str, Any]) -> tuple[ToolDisplay, ...]:
        """Every argument, every character visible (`tools/shown.py`): what the user allows."""
        text = json.dumps(args, indent=2, ensure_ascii=False, default=str)
        head = f"MCP server `{visible(self.server)}`, tool `{visible(self._remote_name)}`:"
        return (TextDisplay(f"{head}\n{fenced(visible(text, block=True), 'json')}"),)

    def permission_key(self, args: dict[str, Any]) -> str:
        return self._name

    def protected(self, args: dict[str, Any], ctx: ToolContext) -> str | None:
        """Any string argument naming a protected path: what a server does with its
        arguments is unknown, so a path named anywhere counts."""
        return protected_in_values(args, ctx.cwd, ctx.cwd)

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        conn = self._connection
        session = conn.session
        if conn.lost is not None or session is None:
            return _failed(
                f"MCP server '{conn.name}' is not running ({conn.lost or 'closed'}); "
                "its tools cannot be used in this session"
            )
        from mcp import MCPError
        from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT

        conn.calls.append(ctx.tool_call_id)
        # The call's own time-out, held while the user answers its server's question.
        deadline = conn.deadline(ctx.tool_call_id, self._call_timeout)
        try:
            with deadline:
                result = await session.call_tool(self._remote_name, args or {})
            if deadline.cancelled_caught:
                return _failed(
                    f"MCP server '{conn.name}' did not answer {self._remote_name} within "
                    f"{self._call_timeout:g} s; the call was abandoned"
                )
        except MCPError as exc:
            if exc.code == REQUEST_TIMEOUT:
                return _failed(
                    f"MCP server '{conn.name}' did not answer {self._remote_name} within "
                    f"{self._call_timeout:g} s; the call was abandoned"
                )
            if exc.code == CONNECTION_CLOSED:
                return _failed(await conn.mark_lost("the server closed the connection"))
            return _failed(f"MCP server '{conn.name}': {self._remote_name} failed: {exc.message}")
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream) as exc:
            return _failed(await conn.mark_lost(describe(exc) or "the connection is closed"))
        except Exception as exc:  # an HTTP error names the URL: its query may hold a token
            error = conn.redact(describe(exc))
            log.warning("mcp_call_failed", server=conn.name, tool=self._remote_name, error=error)
            return _failed(f"MCP server '{conn.name}': {self._remote_name} failed: {error}")
        finally:
            conn.call_ended(ctx.tool_call_id)
        return tool_output(result)


def _summarize(args: dict[str, Any], limit: int = 80) -> tuple[str, bool]:
    """(the first arguments on one line, whether that shows every argument whole)."""
    parts = []
    whole = len(args) <= 3
    for key, value in list(args.items())[:3]:
        shown = value if isinstance(value, str) else json.dumps(value, default=str)
        shown = visible(shown)
        if len(shown) > 40:
            shown = shown[:39] + "…"
            whole = False
        parts.append(f"{visible(str(key))}={shown}")
    text = ", ".join(parts)
    if len(args) > 3:
        text += ", …"
    if len(text) > limit:
        return text[: limit - 1] + "…", False
    return text, whole


def _failed(message: str) -> ToolOutput:
    return ToolOutput(message, is_error=True, display=(TextDisplay(message),))
