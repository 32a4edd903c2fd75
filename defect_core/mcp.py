"""MCP servers as session tools: connect them, offer their tools, stop them.

Owns `McpHub` (a session's connected MCP servers), `McpTool` (one server tool behind defect's
`Tool` protocol), and where server specs come from besides the editor: a repo's `.mcp.json`
(`load_mcp_json`), a config table of the same shape (`parse_server_table`), and how they merge
with the editor's list (`merge_servers`, the request wins on a name clash). The client side is
the official `mcp` SDK (`ClientSession` over its stdio, streamable-HTTP and SSE transports).

Invariants:
- `McpHub.connect` never raises for a server's sake: servers start concurrently, each within
  one shared deadline; one that cannot start (missing command, early exit, garbage on stdout,
  refused connection, no answer in time) lands in `failures` as `(name, one-line reason)`
  and the others are connected all the same. `connect` returns at the deadline at the latest;
  a server that is still being stopped keeps stopping in the background.
- Each server's SDK contexts (transport, `ClientSession`) are entered and left in one
  long-lived task of its own, as anyio task groups require; calls from turn tasks only send
  requests through the `ClientSession`, which multiplexes them.
- `McpTool.run` returns a result for everything except cancellation: an `isError` result, a
  call timeout, a server that died (and every later call to it), a protocol error all become
  `ToolOutput(is_error=True)` with a message naming the server and what happened.
- `aclose` stops every server and waits for it (bounded, shielded from cancellation): stdio
  processes get the SDK's shutdown (stdin closed, then SIGTERM/SIGKILL to the process group),
  then their process group is swept, so children a server left behind go too. The pid comes
  from a one-line `/bin/sh` shim that reports `$$` on stderr and `exec`s the server (same pid).
- Tool names are `mcp__<server>__<tool>`, made to match `^[a-zA-Z0-9_-]{1,64}$` (what the
  Anthropic API accepts) and unique within the hub; input schemas are always object schemas
  without top-level `oneOf/anyOf/allOf`, because one rejected tool definition would fail every
  request of the session.
- Safety comes from the tool's annotations: `readOnlyHint` → read-only, `destructiveHint` →
  destructive, anything else → mutating; permissions then apply as for built-in tools.
- Importing this module imports no `mcp` (docs/architecture.md, rule 6): the SDK (~1 s) is loaded by
  the first `connect` that has servers to connect.

Why a hub per session: ACP gives MCP servers per `session/new`/`session/load`, and the session
owns their lifetime — closing or deleting it must leave no process behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import importlib
import importlib.util
import json
import os
import re
import shutil
import signal
import sys
import threading
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from contextlib import AsyncExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import anyio

from defect_core import __version__
from defect_core.events import ImageDisplay, TextDisplay, ToolDisplay, ToolKind
from defect_core.log import get_logger
from defect_core.model import ImageBlock, JsonPart, ResultPart, TextBlock
from defect_core.session import McpServerSpec
from defect_core.tools.base import Safety, ToolCallView, ToolContext, ToolOutput

if TYPE_CHECKING:
    import mcp_types
    from mcp import ClientSession

log = get_logger("defect.mcp")

DEFAULT_CONNECT_TIMEOUT = 10.0
"""Seconds every server together gets to start, answer `initialize` and list its tools."""
DEFAULT_CALL_TIMEOUT = 120.0
"""Seconds one tool call may take before it is abandoned as a failed result."""
CLOSE_TIMEOUT = 10.0
"""Upper bound for stopping all servers (the SDK's own stdio shutdown is bounded at ~6.5 s)."""
SWEEP_GRACE = 0.5
"""Seconds a stopped server's leftover children get after SIGTERM before SIGKILL."""

MAX_TOOL_NAME = 64
MAX_DESCRIPTION_CHARS = 8_000
MAX_REASON_CHARS = 400
MAX_DISPLAY_CHARS = 100_000
IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
"""Image types the model accepts inline; other images become a text note."""
MAX_IMAGE_BASE64_CHARS = 5 * 1024 * 1024 * 4 // 3
"""The API's 5 MB image limit, as base64 characters."""
SSE_READ_TIMEOUT = 24 * 3600.0
"""The SSE stream may idle for this long: the per-call timeout is what bounds a call."""
HTTP_TIMEOUT = 30.0

_PID_MARKER = "defect-mcp-pid "
_SHIM = f'printf \'{_PID_MARKER}%s\\n\' "$$" >&2; exec "$@"'
"""Run by `/bin/sh -c`: report the shell's pid, then become the server (exec keeps the pid)."""

Transport = Literal["stdio", "http", "sse"]
_TRANSPORT_ALIASES: dict[str, Transport] = {
    "stdio": "stdio",
    "http": "http",
    "streamable-http": "http",
    "streamable_http": "http",
    "streamablehttp": "http",
    "sse": "sse",
}
_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def supported_transports() -> set[str]:
    """The MCP transports `McpHub` connects (each one proven by tests/test_mcp.py).

    Cheap enough for `initialize`: it looks the SDK up without importing it. Without the SDK
    only stdio is claimed — ACP requires accepting stdio servers; they then fail to start with
    a reason that says the package is missing.
    """
    if importlib.util.find_spec("mcp") is None:
        return {"stdio"}
    return {"stdio", "http", "sse"}


# --- where specs come from ------------------------------------------------------------------


def load_mcp_json(cwd: Path) -> list[McpServerSpec]:
    """The servers of `<cwd>/.mcp.json` (`{"mcpServers": {name: entry}}`); [] when absent.

    A malformed file, or entry, is logged as a warning naming the file and ignored: a broken
    project file must not keep a session from opening.
    """
    path = cwd / ".mcp.json"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    except (OSError, UnicodeDecodeError) as exc:
        log.warning("mcp_json_ignored", path=str(path), error=_one_line(str(exc)))
        return []
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        log.warning(
            "mcp_json_ignored", path=str(path), error=f"not JSON: line {exc.lineno}: {exc.msg}"
        )
        return []
    servers = data.get("mcpServers") if isinstance(data, dict) else None
    if not isinstance(servers, dict):
        log.warning(
            "mcp_json_ignored", path=str(path), error='expected {"mcpServers": {name: server}}'
        )
        return []
    return parse_server_table(servers, source=str(path))


def parse_server_table(
    servers: Mapping[str, Any],
    source: str,
    environ: Mapping[str, str] | None = None,
) -> list[McpServerSpec]:
    """Specs from a `{name: entry}` table (`.mcp.json`'s `mcpServers`, `[mcp.servers.*]`).

    An entry is `{"command", "args"?, "env"?}` (stdio; `"type": "stdio"` optional) or
    `{"type": "http" | "sse", "url", "headers"?}`. `${VAR}` and `${VAR:-default}` in strings
    are read from the environment, so a checked-in file can name a secret without holding it.
    Entries that cannot be used are logged (naming `source`) and skipped.
    """
    env = os.environ if environ is None else environ
    specs: list[McpServerSpec] = []
    for name, entry in servers.items():
        try:
            specs.append(server_spec(str(name), entry, env))
        except ValueError as exc:
            log.warning("mcp_server_ignored", source=source, server=str(name), error=str(exc))
    return specs


def server_spec(name: str, entry: Any, environ: Mapping[str, str]) -> McpServerSpec:
    """One table entry as a spec; `ValueError` says what is wrong with it."""
    if not name:
        raise ValueError("a server needs a non-empty name")
    if not isinstance(entry, Mapping):
        raise ValueError("a server entry must be an object")
    raw_type = entry.get("type", entry.get("transport"))
    if raw_type is None:
        raw_type = "http" if "url" in entry and "command" not in entry else "stdio"
    transport = _TRANSPORT_ALIASES.get(str(raw_type).lower())
    if transport is None:
        raise ValueError(f"unknown server type {raw_type!r}; use stdio, http or sse")

    def expand(value: Any, what: str) -> str:
        if not isinstance(value, str | int | float) or isinstance(value, bool):
            raise ValueError(f"{what} must be a string")
        return _expand_env(str(value), environ, name)

    def pairs(value: Any, what: str) -> tuple[tuple[str, str], ...]:
        if value is None:
            return ()
        if not isinstance(value, Mapping):
            raise ValueError(f"{what} must be an object of strings")
        return tuple((str(k), expand(v, f"{what}.{k}")) for k, v in value.items())

    if transport == "stdio":
        command = entry.get("command")
        if not isinstance(command, str) or not command.strip():
            raise ValueError("a stdio server needs a `command`")
        args = entry.get("args", [])
        if not isinstance(args, list):
            raise ValueError("`args` must be a list of strings")
        return McpServerSpec(
            name=name,
            transport="stdio",
            command=expand(command, "command"),
            args=tuple(expand(a, "args") for a in args),
            env=pairs(entry.get("env"), "env"),
        )
    url = entry.get("url")
    if not isinstance(url, str) or not url.strip():
        raise ValueError(f"an {transport} server needs a `url`")
    return McpServerSpec(
        name=name,
        transport=transport,
        url=expand(url, "url"),
        headers=pairs(entry.get("headers"), "headers"),
    )


def _expand_env(text: str, environ: Mapping[str, str], server: str) -> str:
    def replace(match: re.Match[str]) -> str:
        var, default = match.group(1), match.group(2)
        if var in environ:
            return environ[var]
        if default is not None:
            return default
        log.warning("mcp_env_var_missing", server=server, variable=var)
        return ""

    return _ENV_REF.sub(replace, text)


def merge_servers(
    request: Sequence[McpServerSpec], configured: Sequence[McpServerSpec]
) -> tuple[McpServerSpec, ...]:
    """The request's servers, then the configured ones it does not name (request wins)."""
    merged: dict[str, McpServerSpec] = {}
    for spec in request:
        if spec.name in merged:
            log.warning("mcp_server_duplicate", server=spec.name, kept="first")
            continue
        merged[spec.name] = spec
    for spec in configured:
        merged.setdefault(spec.name, spec)
    return tuple(merged.values())


# --- names, schemas, safety -----------------------------------------------------------------


def _name_part(text: str) -> str:
    return re.sub(r"[^a-zA-Z0-9_-]", "_", text) or "_"


def tool_name(server: str, tool: str) -> str:
    """`mcp__<server>__<tool>`, cleaned and cut (with a hash of the original) to 64 chars."""
    name = f"mcp__{_name_part(server)}__{_name_part(tool)}"
    if len(name) <= MAX_TOOL_NAME:
        return name
    digest = hashlib.sha256(f"{server}\0{tool}".encode()).hexdigest()[:8]
    return f"{name[: MAX_TOOL_NAME - 9]}_{digest}"


def _unique(name: str, taken: set[str]) -> str:
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


# --- one tool -------------------------------------------------------------------------------


class McpTool:
    """One MCP server tool, offered to the model as `mcp__<server>__<tool>`."""

    def __init__(
        self,
        connection: _Connection,
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
        title = f"{self.server}: {self._display or self._remote_name}"
        summary = _summarize(args)
        return ToolCallView(title=f"{title} ({summary})" if summary else title, kind=self.kind)

    async def preview(self, args: dict[str, Any], ctx: ToolContext) -> tuple[ToolDisplay, ...]:
        text = json.dumps(args, indent=2, ensure_ascii=False, default=str)
        if len(text) > 4_000:
            text = text[:4_000] + "\n…"
        return (TextDisplay(f"MCP server `{self.server}`, tool `{self._remote_name}`:\n{text}"),)

    def permission_key(self, args: dict[str, Any]) -> str:
        return self._name

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

        try:
            result = await session.call_tool(
                self._remote_name, args or {}, read_timeout_seconds=self._call_timeout
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
            return _failed(await conn.mark_lost(_describe(exc) or "the connection is closed"))
        except Exception as exc:
            log.warning("mcp_call_failed", server=conn.name, tool=self._remote_name, exc_info=True)
            return _failed(
                f"MCP server '{conn.name}': {self._remote_name} failed: {_describe(exc)}"
            )
        return tool_output(result)


def _summarize(args: dict[str, Any], limit: int = 80) -> str:
    parts = []
    for key, value in list(args.items())[:3]:
        shown = value if isinstance(value, str) else json.dumps(value, default=str)
        shown = _one_line(shown)
        if len(shown) > 40:
            shown = shown[:39] + "…"
        parts.append(f"{key}={shown}")
    text = ", ".join(parts)
    if len(args) > 3:
        text += ", …"
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _failed(message: str) -> ToolOutput:
    return ToolOutput(message, is_error=True, display=(TextDisplay(message),))


def tool_output(result: mcp_types.CallToolResult) -> ToolOutput:
    """An MCP tool result as defect's: text, images and embedded resources kept."""
    import mcp_types as t

    parts: list[ResultPart] = []
    display: list[ToolDisplay] = []
    for block in result.content:
        if isinstance(block, t.TextContent):
            parts.append(TextBlock(text=block.text))
        elif isinstance(block, t.ImageContent):
            parts.append(_image_or_note(block.data, block.mime_type, "image"))
            if isinstance(parts[-1], ImageBlock):
                display.append(ImageDisplay(block.mime_type, block.data))
        elif isinstance(block, t.AudioContent):
            size = len(block.data) * 3 // 4
            parts.append(TextBlock(text=f"[audio {block.mime_type}, {size} bytes, not shown]"))
        elif isinstance(block, t.EmbeddedResource):
            res = block.resource
            if isinstance(res, t.TextResourceContents):
                parts.append(TextBlock(text=f"[resource {res.uri}]\n{res.text}"))
            else:
                mime = res.mime_type or "application/octet-stream"
                if mime in IMAGE_TYPES:
                    parts.append(_image_or_note(res.blob, mime, f"resource {res.uri}"))
                    if isinstance(parts[-1], ImageBlock):
                        display.append(ImageDisplay(mime, res.blob))
                else:
                    size = len(res.blob) * 3 // 4
                    parts.append(
                        TextBlock(text=f"[binary resource {res.uri} ({mime}, {size} bytes)]")
                    )
        elif isinstance(block, t.ResourceLink):
            about = f": {block.description}" if block.description else ""
            parts.append(TextBlock(text=f"[resource link {block.uri} ({block.name}){about}]"))
        else:  # a content type newer than this code
            kind = getattr(block, "type", type(block).__name__)
            parts.append(TextBlock(text=f"[{kind} content, not shown]"))
    if not parts and result.structured_content is not None:
        parts.append(JsonPart(value=result.structured_content))
    merged = _merge_text(parts)
    if not merged:
        merged = [
            TextBlock(
                text="(the tool reported an error without a message)"
                if result.is_error
                else "(the tool returned no content)"
            )
        ]
    content: str | tuple[ResultPart, ...]
    if len(merged) == 1 and isinstance(merged[0], TextBlock):
        content = merged[0].text
    else:
        content = tuple(merged)
    shown: tuple[ToolDisplay, ...] = ()
    if display:
        text = "\n".join(p.text for p in merged if isinstance(p, TextBlock))
        if len(text) > MAX_DISPLAY_CHARS:
            text = text[:MAX_DISPLAY_CHARS] + "\n[… truncated]"
        shown = (*((TextDisplay(text),) if text else ()), *display)
    return ToolOutput(
        content,
        is_error=result.is_error,
        display=shown,
        raw_output=result.structured_content,
    )


def _image_or_note(data: str, mime: str, what: str) -> ResultPart:
    if mime in IMAGE_TYPES and 0 < len(data) <= MAX_IMAGE_BASE64_CHARS:
        return ImageBlock(media_type=mime, data=data)
    size = len(data) * 3 // 4
    return TextBlock(text=f"[{what}: {mime}, {size} bytes, not shown to the model]")


def _merge_text(parts: list[ResultPart]) -> list[ResultPart]:
    """Adjacent text parts as one, so the runner's size cap sees the whole text."""
    merged: list[ResultPart] = []
    for part in parts:
        if isinstance(part, TextBlock) and merged and isinstance(merged[-1], TextBlock):
            merged[-1] = TextBlock(text=f"{merged[-1].text}\n{part.text}")
        elif not (isinstance(part, TextBlock) and not part.text):
            merged.append(part)
    return merged


# --- one server -----------------------------------------------------------------------------


class _StderrTail:
    """A stdio server's stderr, read in a thread: the shim's pid line, then the server's lines,
    logged (info) and the last few kept for failure messages."""

    def __init__(self, server: str) -> None:
        read_fd, write_fd = os.pipe()
        self.writer = os.fdopen(write_fd, "w", encoding="utf-8")
        self._reader = os.fdopen(read_fd, "rb")
        self._server = server
        self.lines: deque[str] = deque(maxlen=20)
        self.pid: int | None = None
        self._thread = threading.Thread(target=self._pump, name=f"mcp-stderr-{server}", daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        with self._reader:
            while raw := self._reader.readline(16_384):
                line = raw.decode("utf-8", "replace").rstrip()
                if self.pid is None and line.startswith(_PID_MARKER):
                    with contextlib.suppress(ValueError):
                        self.pid = int(line[len(_PID_MARKER) :])
                    continue
                if line.strip():
                    self.lines.append(line)
                    log.info("mcp_server_stderr", server=self._server, line=line[:2_000])

    async def drained(self, at_most: float = 0.5) -> None:
        """Wait (briefly) until the server's stderr reached its end."""
        await anyio.to_thread.run_sync(self._thread.join, at_most, abandon_on_cancel=True)

    def tail(self) -> str:
        return self.lines[-1] if self.lines else ""


class _Connection:
    """One server: its long-lived task owns the SDK contexts from connect to close."""

    def __init__(self, spec: McpServerSpec, cwd: Path) -> None:
        self.spec = spec
        self.name = spec.name
        self.cwd = cwd
        self.session: ClientSession | None = None
        self.remote_tools: list[mcp_types.Tool] = []
        self.failure: str | None = None
        """Why the server could not start (set before `ready`)."""
        self.lost: str | None = None
        """Why a started server is gone (it died, or the connection broke)."""
        self.stream_error: str | None = None
        self.ready = anyio.Event()
        self.done = anyio.Event()
        self._closing = anyio.Event()
        self._scope = anyio.CancelScope()
        self._stderr: _StderrTail | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def pid(self) -> int | None:
        """The stdio server's process id (None for HTTP/SSE or before it is known)."""
        return self._stderr.pid if self._stderr is not None else None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"mcp-server-{self.name}")

    def abort(self, reason: str) -> None:
        """Give up on a server that has not started: record why and unwind its start-up.

        An unresponsive process gets SIGTERM at once rather than the SDK's grace period for
        a polite exit (it has shown it will not answer)."""
        if self.failure is None:
            tail = self._stderr.tail() if self._stderr is not None else ""
            self.failure = f"{reason}; last stderr: {tail}" if tail else reason
        self._signal_group(signal.SIGTERM)
        self._scope.cancel()

    def _signal_group(self, sig: int) -> bool:
        """Send `sig` to the stdio server's process group; False when there is none (left)."""
        pid = self.pid
        if pid is None or sys.platform == "win32" or pid == os.getpgrp():
            return False
        try:
            os.killpg(pid, sig)
        except (ProcessLookupError, PermissionError):
            return False
        return True

    def close(self) -> None:
        if self.ready.is_set() and self.failure is None:
            self._closing.set()
        else:
            self.abort("closed before it started")

    async def mark_lost(self, what: str) -> str:
        """Record that a started server is gone; the message says so, with its last words."""
        if self.lost is None:
            if self._stderr is not None:
                await self._stderr.drained(0.3)
            tail = self._stderr.tail() if self._stderr is not None else ""
            self.lost = f"{what}; last stderr: {tail}" if tail else what
            log.warning("mcp_server_lost", server=self.name, reason=self.lost)
        return f"MCP server '{self.name}' stopped working ({self.lost}); its tools cannot be used"

    async def _run(self) -> None:
        try:
            with self._scope:
                try:
                    async with AsyncExitStack() as stack:
                        session = await self._open(stack)
                        await session.initialize()
                        self.remote_tools = await _list_tools(session)
                        self.session = session
                        self.ready.set()
                        await self._closing.wait()
                except Exception as exc:
                    if self.ready.is_set():
                        if not self._closing.is_set() and self.lost is None:
                            await self.mark_lost(_describe(exc))
                        else:
                            log.debug("mcp_server_close_error", server=self.name, error=str(exc))
                    elif self.failure is None:
                        self.failure = await self._startup_failure(exc)
            if self.failure is None and not self.ready.is_set():
                self.failure = "closed before it started"
        finally:
            self.session = None
            self.ready.set()
            with anyio.CancelScope(shield=True):
                await self._sweep()
            self.done.set()

    async def _open(self, stack: AsyncExitStack) -> ClientSession:
        from mcp import ClientSession, Implementation

        spec = self.spec
        if spec.transport == "stdio":
            read, write = await self._open_stdio(stack)
        elif spec.transport == "http":
            import httpx2
            from mcp.client.streamable_http import streamable_http_client

            client = httpx2.AsyncClient(
                headers=dict(spec.headers),
                timeout=httpx2.Timeout(HTTP_TIMEOUT, read=300.0),
            )
            await stack.enter_async_context(client)
            read, write = await stack.enter_async_context(
                streamable_http_client(_require_url(spec), http_client=client)
            )
        elif spec.transport == "sse":
            from mcp.client.sse import sse_client

            read, write = await stack.enter_async_context(
                sse_client(
                    _require_url(spec),
                    headers=dict(spec.headers) or None,
                    timeout=HTTP_TIMEOUT,
                    sse_read_timeout=SSE_READ_TIMEOUT,
                )
            )
        else:
            raise _StartError(f"unsupported transport {spec.transport!r}")

        async def on_message(message: Any) -> None:
            if isinstance(message, Exception) and self.stream_error is None:
                self.stream_error = _describe_stream_error(message)

        return await stack.enter_async_context(
            ClientSession(
                read,
                write,
                message_handler=on_message,
                client_info=Implementation(name="defect", version=__version__),
            )
        )

    async def _open_stdio(self, stack: AsyncExitStack) -> Any:
        from mcp import StdioServerParameters
        from mcp.client.stdio import get_default_environment, stdio_client

        spec = self.spec
        env = dict(spec.env)
        path = env.get("PATH", get_default_environment().get("PATH", os.defpath))
        command = _resolve_command(spec.command or "", self.cwd, path)
        args = list(spec.args)
        if sys.platform != "win32" and os.access("/bin/sh", os.X_OK):
            args = ["-c", _SHIM, f"defect-mcp-{self.name}", command, *args]
            command = "/bin/sh"
        params = StdioServerParameters(command=command, args=args, env=env or None, cwd=self.cwd)
        self._stderr = _StderrTail(self.name)
        try:
            return await stack.enter_async_context(stdio_client(params, errlog=self._stderr.writer))
        finally:
            # The child holds its own copy now; ours must go, or stderr never ends.
            self._stderr.writer.close()

    async def _startup_failure(self, exc: BaseException) -> str:
        if isinstance(exc, _StartError):
            return str(exc)
        from mcp import MCPError
        from mcp_types import CONNECTION_CLOSED

        root = _root_cause(exc)
        if self.spec.transport == "stdio" and self._stderr is not None:
            closed = isinstance(root, MCPError) and root.code == CONNECTION_CLOSED
            if closed or isinstance(root, anyio.BrokenResourceError | anyio.ClosedResourceError):
                await self._stderr.drained()
                said = self._stderr.tail() or self.stream_error
                reason = "exited during start-up"
                return f"{reason}: {said}" if said else f"{reason} (nothing on stderr)"
        reason = _describe(root)
        if self.stream_error and self.stream_error not in reason:
            reason = f"{reason} ({self.stream_error})"
        return reason

    async def _sweep(self) -> None:
        """Stop what a stdio server left behind in its process group (its children)."""
        for sig, grace in ((signal.SIGTERM, SWEEP_GRACE), (signal.SIGKILL, 0.0)):
            if not self._signal_group(sig):
                return
            log.info("mcp_server_group_swept", server=self.name, pgid=self.pid, signal=sig.name)
            deadline = anyio.current_time() + grace
            while anyio.current_time() < deadline:
                await anyio.sleep(0.02)
                if not self._signal_group(0):
                    return


class _StartError(Exception):
    """A server that cannot start, for a reason worth saying as is."""


def _require_url(spec: McpServerSpec) -> str:
    if not spec.url:
        raise _StartError(f"an {spec.transport} server needs a url")
    return spec.url


def _resolve_command(command: str, cwd: Path, path: str) -> str:
    """The executable the server runs, checked before spawning for a clear message."""
    if not command:
        raise _StartError("no command given")
    if os.sep in command or (os.altsep and os.altsep in command):
        candidate = Path(command) if Path(command).is_absolute() else cwd / command
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
        raise _StartError(f"command not found or not executable: {command}")
    found = shutil.which(command, path=path)
    if found is None:
        raise _StartError(f"command not found: {command}")
    return found


async def _list_tools(session: ClientSession) -> list[mcp_types.Tool]:
    from mcp_types import PaginatedRequestParams

    capabilities = session.server_capabilities
    if capabilities is not None and capabilities.tools is None:
        return []  # a server of prompts or resources only: nothing to offer the model
    tools: list[mcp_types.Tool] = []
    cursor: str | None = None
    for _ in range(100):
        params = PaginatedRequestParams(cursor=cursor) if cursor else None
        page = await session.list_tools(params=params)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            break
    return tools


def _leaves(exc: BaseException) -> Iterable[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            yield from _leaves(inner)
    else:
        yield exc


def _root_cause(exc: BaseException) -> BaseException:
    """The first real error inside (nested) exception groups."""
    for leaf in _leaves(exc):
        if not isinstance(leaf, anyio.get_cancelled_exc_class()):
            return leaf
    return exc


def _describe(exc: BaseException) -> str:
    root = _root_cause(exc)
    text = _one_line(str(root))
    name = type(root).__name__
    if not text:
        return name
    named = isinstance(root, OSError) or name.endswith(("Error", "Exception"))
    if named and name not in ("MCPError", "_StartError"):
        return f"{name}: {text}"
    return text


def _describe_stream_error(exc: Exception) -> str:
    """What a transport could not read: for a line that is not JSON-RPC, the line itself."""
    from pydantic import ValidationError

    if isinstance(exc, ValidationError):
        errors = exc.errors(include_url=False)
        seen = errors[0].get("input") if errors else None
        if isinstance(seen, str | bytes):
            text = seen.decode("utf-8", "replace") if isinstance(seen, bytes) else seen
            return f"it wrote something that is not JSON-RPC: {_one_line(text)[:120]!r}"
        return "it sent a message that is not valid MCP"
    return _describe(exc)


def _one_line(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= MAX_REASON_CHARS else line[: MAX_REASON_CHARS - 1] + "…"


# --- the hub --------------------------------------------------------------------------------


class McpHub:
    """A session's MCP servers: their tools while connected, and who failed to start."""

    def __init__(self, call_timeout: float = DEFAULT_CALL_TIMEOUT) -> None:
        self._call_timeout = call_timeout
        self._connections: list[_Connection] = []
        self._tools: list[McpTool] = []
        self._failures: list[tuple[str, str]] = []
        self._closed = False

    @classmethod
    async def connect(
        cls,
        specs: Sequence[McpServerSpec],
        cwd: Path,
        timeout: float = DEFAULT_CONNECT_TIMEOUT,  # noqa: ASYNC109 (partial results, not a raise)
        *,
        call_timeout: float = DEFAULT_CALL_TIMEOUT,
    ) -> McpHub:
        """Connect every server concurrently; return when all answered or `timeout` passed."""
        hub = cls(call_timeout=call_timeout)
        specs = merge_servers(specs, ())
        if not specs:
            return hub
        try:
            # The SDK takes ~1 s to import: off the event loop, so other sessions keep going.
            await anyio.to_thread.run_sync(importlib.import_module, "mcp")
        except ImportError:
            reason = "the `mcp` package is not installed"
            hub._failures = [(spec.name, reason) for spec in specs]
            for spec in specs:
                log.warning("mcp_server_failed", server=spec.name, reason=reason)
            return hub
        try:
            for spec in specs:
                conn = _Connection(spec, cwd)
                hub._connections.append(conn)
                conn.start()
            with anyio.move_on_after(timeout):
                for conn in hub._connections:
                    await conn.ready.wait()
            for conn in hub._connections:
                if not conn.ready.is_set():
                    conn.abort(f"did not start within {timeout:g} s")
        except BaseException:
            with anyio.CancelScope(shield=True):
                await hub.aclose()
            raise
        hub._collect()
        return hub

    def _collect(self) -> None:
        taken: set[str] = set()
        for conn in self._connections:
            if conn.failure is not None or conn.session is None:
                reason = conn.failure or conn.lost or "closed before it started"
                self._failures.append((conn.name, reason))
                log.warning(
                    "mcp_server_failed",
                    server=conn.name,
                    transport=conn.spec.transport,
                    reason=reason,
                )
                continue
            for remote in conn.remote_tools:
                name = _unique(tool_name(conn.name, remote.name), taken)
                self._tools.append(McpTool(conn, remote, name, self._call_timeout))
            log.info(
                "mcp_server_connected",
                server=conn.name,
                transport=conn.spec.transport,
                tools=len(conn.remote_tools),
                pid=conn.pid,
            )

    @property
    def tools(self) -> list[McpTool]:
        """The connected servers' tools, server by server in the order given."""
        return list(self._tools)

    @property
    def failures(self) -> list[tuple[str, str]]:
        """(server name, one-line reason) for each server that could not start."""
        return list(self._failures)

    @property
    def servers(self) -> list[str]:
        """Names of the servers that started."""
        failed = {name for name, _ in self._failures}
        return [c.name for c in self._connections if c.name not in failed]

    def pids(self) -> dict[str, int]:
        """Process ids of the stdio servers (started or not) — for diagnostics and tests."""
        return {c.name: pid for c in self._connections if (pid := c.pid) is not None}

    def failure_notice(self) -> str | None:
        """One message for the user about the servers that failed, or None."""
        if not self._failures:
            return None
        lines = [
            f"MCP server '{name}' failed to start: {reason}" for name, reason in self._failures
        ]
        return "\n".join(lines)

    async def aclose(self) -> None:
        """Stop every server and wait until each is gone (bounded; shielded from cancel)."""
        self._closed = True
        with anyio.CancelScope(shield=True):
            for conn in self._connections:
                conn.close()
            with anyio.move_on_after(CLOSE_TIMEOUT) as scope:
                for conn in self._connections:
                    await conn.done.wait()
            if scope.cancelled_caught:
                stuck = [c.name for c in self._connections if not c.done.is_set()]
                log.warning("mcp_close_timeout", servers=stuck)

    async def __aenter__(self) -> McpHub:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
