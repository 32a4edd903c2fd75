"""The params of each ACP request, checked before the SDK reads them.

Owns `ParamsGuard`, which wraps the SDK's router (the connection's request handler), and
`params_problem`, the checks it runs: a request whose params break them is answered -32602
with one line naming the field (`clientCapabilities.fs: expected an object, got a string`)
and never reaches a handler, so nothing of it is stored. What the SDK's own validation
refuses is answered the same way (the SDK would answer "Invalid params" with pydantic's error
list as data).

Why in front of the SDK: its models follow the schema's `x-deserialize-default-on-error` and
`skip-invalid-items`, so a malformed field reaches a handler silently replaced by its default
(`"fs": "yes"` reads as "no file system"; an MCP server entry without `command` is dropped
from the list, and the session starts without it). For the fields defect acts on that hides a
client's mistake from its user, so they are checked strictly here; fields defect does not read
are left to the SDK, and unknown fields are always accepted (a newer client adds fields).

The SDK also merges `_meta` entries into a handler's keyword arguments, after the params: a
`_meta` key named like a parameter (`"_meta": {"cwd": ...}`) would replace the checked value.
defect reads no `_meta`, so the guard drops such keys (and logs them) before the SDK sees them.

What is checked:
- everywhere in the params: no lone UTF-16 surrogate (`"\\ud800"` parses in JSON but is not
  text: SQLite, the model's API and the client's UTF-8 stream cannot carry it);
- `initialize`: `protocolVersion` (uint16), `clientCapabilities.fs.readTextFile`/
  `writeTextFile` and `terminal` (booleans), `clientInfo.name`;
- `session/new`, `load`, `resume`, `fork`, `list`: `cwd` (a string the OS can take as a path:
  no NUL, within the path and name length limits), `sessionId`, `mcpServers` (each a stdio
  server with `name`, `command`, `args`, `env`, or an http/sse one with `type`, `name`, `url`,
  `headers`), `additionalDirectories`;
- `session/prompt` and `_session/steering`: a non-empty `prompt` with something in it, each
  block's fields by its type, inline images as the model's API takes them and embedded blobs
  as valid base64 (a PDF starting `%PDF-`) - see `defect_core/media.py`;
- the ids of `set_mode`, `set_config_option`, `close`, `delete`, `cancel`, `authenticate`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import Any

from acp import RequestError
from acp import schema as s
from acp.agent.connection import AgentSideConnection
from pydantic import ValidationError

from defect_acp.sdk_compat import wrap_router
from defect_core.log import get_logger
from defect_core.media import document_problem, image_problem, image_url_problem

log = get_logger("defect.acp.params")

ID_MAX_CHARS = 1024
"""Longer than any id a client could have been given (defect's session ids are 37 chars)."""


class BadParams(Exception):
    """One problem, as `<field>: <what is wrong>`."""


Params = dict[str, Any]
Check = Callable[[Params], None]


# --- the guard --------------------------------------------------------------------------------


class ParamsGuard:
    """The SDK's router with the checks in front: called as the router is, and otherwise the
    router itself (routes are still added to it)."""

    def __init__(self, router: Any) -> None:
        self._router = router

    def __getattr__(self, name: str) -> Any:
        return getattr(self._router, name)

    async def __call__(self, method: str, params: Any, is_notification: bool) -> Any:
        problem = params_problem(method, params)
        if problem is not None:
            log.warning("invalid_params", method=method, problem=problem)
            if is_notification:
                return None
            raise RequestError(-32602, f"Invalid params: {problem}")
        params = _without_shadowing_meta(method, params)
        try:
            return await self._router(method, params, is_notification)
        except ValidationError as exc:
            raise RequestError(-32602, f"Invalid params: {_describe(exc)}") from None


def guard_params(conn: AgentSideConnection) -> None:
    """Put `ParamsGuard` in front of the connection's router (`sdk_compat.wrap_router`; the
    tests drive every method through it)."""
    wrap_router(conn, ParamsGuard)


def params_problem(method: str, params: Any) -> str | None:
    """The first problem of `params` for `method` as one line, or None."""
    try:
        _no_lone_surrogate(params)
        check = _CHECKS.get(method)
        if check is not None:
            check(_object(params, "params"))
    except BadParams as exc:
        return str(exc)
    return None


_PARAMETER_NAMES = frozenset(
    name
    for model in (
        s.InitializeRequest,
        s.AuthenticateRequest,
        s.NewSessionRequest,
        s.LoadSessionRequest,
        s.ResumeSessionRequest,
        s.ListSessionsRequest,
        s.CloseSessionRequest,
        s.SetSessionModeRequest,
        s.SetSessionConfigOptionBooleanRequest,
        s.PromptRequest,
        s.CancelNotification,
    )
    for name in model.model_fields
)
"""The keyword arguments the SDK passes to handlers; a `_meta` key must not replace one."""


def _without_shadowing_meta(method: str, params: Any) -> Any:
    meta = params.get("_meta") if isinstance(params, dict) else None
    if not isinstance(meta, dict) or _PARAMETER_NAMES.isdisjoint(meta):
        return params
    dropped = sorted(_PARAMETER_NAMES.intersection(meta))
    log.warning("meta_keys_dropped", method=method, keys=dropped)
    kept = {k: v for k, v in meta.items() if k not in _PARAMETER_NAMES}
    return {**params, "_meta": kept}


def _describe(exc: ValidationError) -> str:
    """The SDK's validation error as one line: the first problem and where it is."""
    first = exc.errors(include_url=False, include_context=False, include_input=False)[0]
    where = _path(*first["loc"]) or "params"
    more = exc.error_count() - 1
    return f"{where}: {first['msg']}" + (f" (and {more} more)" if more else "")


# --- helpers ----------------------------------------------------------------------------------

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _path(*parts: str | int) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def _no_lone_surrogate(params: Any) -> None:
    """Walk every key and string of the params (iteratively: the transport bounds the depth,
    not the width)."""
    stack: list[tuple[Any, str]] = [(params, "")]
    while stack:
        value, where = stack.pop()
        if isinstance(value, str):
            _text(value, where or "params")
        elif isinstance(value, dict):
            for key, item in value.items():
                name = f"{where}.{key}" if where else key
                _text(key, f"a key in {where or 'params'}")
                stack.append((item, name))
        elif isinstance(value, list):
            stack.extend((item, f"{where}[{i}]") for i, item in enumerate(value))


def _text(value: str, where: str) -> None:
    if not value.isascii():
        found = _LONE_SURROGATE.search(value)
        if found is not None:
            code = f"\\u{ord(found.group()):04x}"
            raise BadParams(f"{where}: holds a lone surrogate ({code}), which is not text")


def _object(value: Any, where: str) -> Params:
    if not isinstance(value, dict):
        raise BadParams(f"{where}: expected an object, got {_kind(value)}")
    return value


def _field(obj: Params, key: str, where: str, kind: type, *, required: bool = False) -> Any:
    """`obj[key]` checked to be of `kind` (null counts as absent unless `required`)."""
    name = f"{where}.{key}" if where else key
    value = obj.get(key)
    if value is None:
        if required:
            raise BadParams(f"{name}: required")
        return None
    ok = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
    if not ok:
        expected = {str: "a string", bool: "a boolean", int: "an integer", list: "an array"}
        raise BadParams(f"{name}: expected {expected.get(kind, 'an object')}, got {_kind(value)}")
    return value


def _strings(obj: Params, key: str, where: str, *, required: bool = False) -> None:
    items = _field(obj, key, where, list, required=required) or []
    name = f"{where}.{key}" if where else key
    for i, item in enumerate(items):
        if not isinstance(item, str):
            raise BadParams(f"{name}[{i}]: expected a string, got {_kind(item)}")


def _id(obj: Params, key: str, *, required: bool = True) -> None:
    value = _field(obj, key, "", str, required=required)
    if value is not None and len(value) > ID_MAX_CHARS:
        raise BadParams(f"{key}: {len(value)} characters, longer than any id ({ID_MAX_CHARS})")


def _limits() -> tuple[int, int]:
    """The OS's longest path and longest path component, in bytes."""
    try:
        return os.pathconf("/", "PC_PATH_MAX"), os.pathconf("/", "PC_NAME_MAX")
    except (OSError, ValueError, AttributeError):
        return 4096, 255


def _cwd(obj: Params, *, required: bool = True) -> None:
    value = _field(obj, "cwd", "", str, required=required)
    if value is None:
        return
    if "\x00" in value:
        raise BadParams("cwd: holds a NUL character, which no path can")
    size = len(value.encode())
    path_max, name_max = _limits()
    if size >= path_max:
        raise BadParams(f"cwd: {size} bytes long, over the {path_max}-byte limit of a path")
    longest = max((len(part.encode()) for part in value.split("/")), default=0)
    if longest > name_max:
        raise BadParams(f"cwd: a directory name of {longest} bytes, over the {name_max} limit")


def _pairs(server: Params, key: str, where: str) -> None:
    for i, pair in enumerate(_field(server, key, where, list, required=True)):
        item = _object(pair, f"{where}.{key}[{i}]")
        _field(item, "name", f"{where}.{key}[{i}]", str, required=True)
        _field(item, "value", f"{where}.{key}[{i}]", str, required=True)


def _mcp_servers(obj: Params, *, required: bool) -> None:
    servers = _field(obj, "mcpServers", "", list, required=required) or []
    for i, entry in enumerate(servers):
        where = f"mcpServers[{i}]"
        server = _object(entry, where)
        kind = server.get("type", "stdio")
        _field(server, "name", where, str, required=True)
        if kind in ("http", "sse"):
            _field(server, "url", where, str, required=True)
            _pairs(server, "headers", where)
        elif kind == "stdio":
            _field(server, "command", where, str, required=True)
            _strings(server, "args", where, required=True)
            _pairs(server, "env", where)
        else:
            shown = repr(kind)[:40]
            raise BadParams(f"{where}.type: {shown} is not one of stdio, http, sse")


# --- per method -------------------------------------------------------------------------------


def _initialize(p: Params) -> None:
    version = _field(p, "protocolVersion", "", int, required=True)
    if not 0 <= version <= 65535:
        raise BadParams(f"protocolVersion: {version} is not a protocol version (0-65535)")
    caps = _field(p, "clientCapabilities", "", dict)
    if caps is not None:
        fs = _field(caps, "fs", "clientCapabilities", dict)
        if fs is not None:
            _field(fs, "readTextFile", "clientCapabilities.fs", bool)
            _field(fs, "writeTextFile", "clientCapabilities.fs", bool)
        _field(caps, "terminal", "clientCapabilities", bool)
    info = _field(p, "clientInfo", "", dict)
    if info is not None:
        _field(info, "name", "clientInfo", str, required=True)


def _new(p: Params) -> None:
    _cwd(p)
    _mcp_servers(p, required=True)
    _strings(p, "additionalDirectories", "")


def _load(p: Params) -> None:
    _id(p, "sessionId")
    _new(p)


def _resume(p: Params) -> None:
    _id(p, "sessionId")
    _cwd(p)
    _mcp_servers(p, required=False)
    _strings(p, "additionalDirectories", "")


def _list(p: Params) -> None:
    _cwd(p, required=False)
    _field(p, "cursor", "", str)


def _session(p: Params) -> None:
    _id(p, "sessionId")


def _set_mode(p: Params) -> None:
    _id(p, "sessionId")
    _id(p, "modeId")


def _set_config_option(p: Params) -> None:
    _id(p, "sessionId")
    _id(p, "configId")
    _field(p, "value", "", bool if p.get("type") == "boolean" else str, required=True)


def _authenticate(p: Params) -> None:
    _id(p, "methodId")


BLOCK_TYPES = ("text", "image", "audio", "resource_link", "resource")


def _prompt(p: Params) -> None:
    _id(p, "sessionId")
    blocks = _field(p, "prompt", "", list, required=True)
    if not blocks:
        raise BadParams("prompt: empty; a prompt needs at least one content block")
    said = False
    for i, entry in enumerate(blocks):
        said = _block(_object(entry, f"prompt[{i}]"), f"prompt[{i}]") or said
    if not said:
        raise BadParams("prompt: nothing to send (every text block is empty)")


def _block(block: Params, where: str) -> bool:
    """Check one prompt block; True when it carries something (not only blank text)."""
    kind = _field(block, "type", where, str, required=True)
    if kind == "text":
        text = _field(block, "text", where, str, required=True)
        return bool(text) and not text.isspace()
    if kind == "image":
        data = _field(block, "data", where, str, required=True)
        media_type = _field(block, "mimeType", where, str, required=True)
        uri = _field(block, "uri", where, str)
        if data:
            problem = image_problem(media_type, data)
        elif uri:
            problem = image_url_problem(uri)
        else:
            problem = "no data and no uri"
        if problem is not None:
            raise BadParams(f"{where} (image): {problem}")
        return True
    if kind == "resource_link":
        _field(block, "uri", where, str, required=True)
        _field(block, "name", where, str, required=True)
        return True
    if kind == "resource":
        resource = _object(block.get("resource"), f"{where}.resource")
        uri = _field(resource, "uri", f"{where}.resource", str, required=True)
        if "blob" in resource:
            blob = _field(resource, "blob", f"{where}.resource", str, required=True)
            mime = _field(resource, "mimeType", f"{where}.resource", str)
            problem = document_problem(mime, blob)
            if problem is not None:
                raise BadParams(f"{where} (resource {uri[:80]}): {problem}")
        else:
            _field(resource, "text", f"{where}.resource", str, required=True)
        return True
    if kind == "audio":
        return True  # refused by the handler: defect does not advertise audio
    shown = repr(kind)[:40]
    raise BadParams(f"{where}.type: {shown} is not one of {', '.join(BLOCK_TYPES)}")


_CHECKS: dict[str, Check] = {
    "initialize": _initialize,
    "authenticate": _authenticate,
    "session/new": _new,
    "session/load": _load,
    "session/resume": _resume,
    "session/fork": _resume,
    "session/list": _list,
    "session/close": _session,
    "session/delete": _session,
    "session/cancel": _session,
    "session/set_mode": _set_mode,
    "session/set_config_option": _set_config_option,
    "session/prompt": _prompt,
    "_session/steering": _prompt,  # its prompt is a prompt's (defect_acp/steering.py)
}
