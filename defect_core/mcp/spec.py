"""Which MCP servers a session asks for: `McpServerSpec`, where specs come from, how they merge.

Owns the spec of one server (stdio: command/args/env; http/sse: url/headers), the entry
parser shared by a repo's `.mcp.json` (`read_mcp_json`, `load_mcp_json`) and a config table
of the same shape (`parse_server_table`, `server_spec`, which `config.py` borrows for
`[mcp.servers.NAME]`), and how those merge with the editor's list (`merge_servers`).

Invariants:
- The request wins: on a name clash `merge_servers` keeps the editor's server, and the first
  of two requested servers with one name.
- `${VAR}` and `${VAR:-default}` in strings are read from the environment, so a checked-in
  file can name a secret without holding it; a missing variable becomes "" and a warning.
- A broken `.mcp.json`, or one broken entry, is logged (naming the file and the server) and
  ignored: a project file must not keep a session from opening. `server_spec` itself raises
  `ValueError` so that the strict config loader can turn it into a `ConfigError`.
- `.mcp.json` is read only when its real path lies inside the project root (the nearest
  ancestor holding `.git`), it is a regular file and at most `MAX_MCP_JSON_BYTES`
  (`defect_core/confined.py`); one that is not is ignored and logged once.
- This module imports nothing of the session, the tools or the MCP SDK: it is plain data and
  parsing, the lowest room of the package, so the configuration layer and the session door
  may use it (docs/layers.md).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from defect_core.confined import project_root, read_confined
from defect_core.log import get_logger

log = get_logger("defect.mcp")

MAX_MCP_JSON_BYTES = 1024 * 1024
MAX_REASON_CHARS = 400
"""How long a one-line reason (a failure, a log field) may get before it is cut."""

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


@dataclass(frozen=True, slots=True)
class McpServerSpec:
    """An MCP server the editor asked for (stdio: command/args/env; http/sse: url/headers)."""

    name: str
    transport: Transport
    command: str | None = None
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    url: str | None = None
    headers: tuple[tuple[str, str], ...] = ()


def load_mcp_json(cwd: Path) -> list[McpServerSpec]:
    """The servers of `<cwd>/.mcp.json` (`{"mcpServers": {name: entry}}`); [] when absent.

    A malformed file, or entry, is logged as a warning naming the file and ignored: a broken
    project file must not keep a session from opening. A file whose real path leaves the
    project, or that is not a regular file, or is too large, is ignored too (logged once).
    """
    return parse_server_table(read_mcp_json(cwd), source=str(cwd / ".mcp.json"))


def read_mcp_json(cwd: Path) -> dict[str, Any]:
    """The `mcpServers` table of `<cwd>/.mcp.json` as written ({} when absent or unusable,
    logged): the one reader of that file, for `load_mcp_json` and for project trust
    (`defect_core/config/trust.py`, which shows the entries as written before any start)."""
    path = cwd / ".mcp.json"
    try:
        raw = read_confined(path, project_root(cwd), MAX_MCP_JSON_BYTES)
        if raw is None:
            return {}
        text = raw.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        log.warning("mcp_json_ignored", path=str(path), error=one_line(str(exc)))
        return {}
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        log.warning(
            "mcp_json_ignored", path=str(path), error=f"not JSON: line {exc.lineno}: {exc.msg}"
        )
        return {}
    servers = data.get("mcpServers") if isinstance(data, dict) else None
    if not isinstance(servers, dict):
        log.warning(
            "mcp_json_ignored", path=str(path), error='expected {"mcpServers": {name: server}}'
        )
        return {}
    return servers


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


def one_line(text: str) -> str:
    """`text` on one line, cut to `MAX_REASON_CHARS`: how every reason of this package reads."""
    line = " ".join(text.split())
    return line if len(line) <= MAX_REASON_CHARS else line[: MAX_REASON_CHARS - 1] + "…"
