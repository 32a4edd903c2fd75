"""Configuration files: where they are, and each one read into a validated layer.

Owns the file locations (`repo_root`; `config_paths` lives in `defect_core/confined.py`,
below the catalog that needs it too), reading one TOML file (`read_file`), validating its
parsed tables against the key tables of `keys.py` (`parse_layer`, including `[models]`,
`[context_windows]`, `[mcp.servers.NAME]`, `[providers.NAME]` (through `providers.py`), the
hosted-capability tables of `capabilities.py` and `[hooks]` / `trusted_projects`
(`hooks.py`)), and finding the line a bad key is on (`key_line`).

Invariants:
- A missing file is no layer, not an error; an unreadable file, bytes that are not UTF-8,
  invalid TOML or a bad key is a `ConfigError` naming the file, with the line where it can be
  found (tomllib's own position for syntax; `key_line` for a key).
- A project's files (`<repo>/.defect/config.toml`, `config.local.toml`) are read only when
  their real path lies inside the project root, the user's file only inside the user's
  configuration directory; each must be a regular file of at most `MAX_CONFIG_BYTES`
  (`defect_core/confined.py`). One that is not (a link out of the project, a `.defect/` that
  is itself a link out, a FIFO, a device, a directory) is no layer, logged once: a
  repository must not make defect read, nor hang on, a file outside it.
- A relative `script_path` is relative to the file that names it.
- A project's own file (`project` given) is read whole and checked like any other, and may not
  set `trusted_projects` nor a table of `USER_ONLY_TABLES` (`[command_environment]`: which
  secrets commands inherit); what it sets that needs trust is listed beside its layer
  (`read_project_file`, `trust.gated_items`) and applied only as `trust.py` decides.
- `[mcp]` tables borrow `defect_core.mcp.spec`'s entry parser, imported only when a file has
  one: importing `defect_core.mcp.spec` runs the `defect_core.mcp` package, which the
  configuration must not load on the `initialize` path (docs/architecture.md, rule 6).

Why a room of its own: files are the only layer with lines, paths and TOML; the environment
and the flags (`overrides.py`) share the key tables but none of this.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from defect_core.config.capabilities import CAPABILITY_SCOPES, parse_capabilities
from defect_core.config.hooks import parse_hooks, trusted_list
from defect_core.config.keys import (
    MODEL_PROVIDERS,
    SHAPED_KEYS,
    TABLE_KEYS,
    TOP_KEYS,
    USER_ONLY_TABLES,
    Layer,
    at_least,
    checked,
    model_list,
    type_name,
    unknown_key,
)
from defect_core.config.providers import parse_providers
from defect_core.config.settings import ConfigError
from defect_core.config.trust import Gated, gated_items
from defect_core.confined import config_paths, project_root, read_confined

__all__ = [
    "config_paths",
    "key_line",
    "parse_layer",
    "read_file",
    "read_project_file",
    "repo_root",
]

MAX_CONFIG_BYTES = 1024 * 1024
"""A configuration file larger than this is refused (no layer), not read."""


def parse_layer(
    data: Mapping[str, Any],
    source: str,
    base_dir: Path | None = None,
    env: Mapping[str, str] | None = None,
    project: str | None = None,
) -> Layer:
    """Validate one file's parsed TOML into a layer. Raises `ConfigError` naming the key.

    `env` resolves `${VAR}` in MCP server entries (default: `os.environ`); `project` is the
    project root when the file is one of that project's own (`<repo>/.defect/`)."""
    layer: Layer = {}
    known_top = [*TOP_KEYS, *TABLE_KEYS, *SHAPED_KEYS]
    capabilities: dict[str, dict[str, Any]] = {}
    for key, value in data.items():
        if key in TOP_KEYS:
            name, check, _ = TOP_KEYS[key]
            layer[name] = checked(source, key, check, value)
            if name == "script_path" and base_dir is not None:
                layer[name] = str((base_dir / str(layer[name])).resolve())
        elif key in TABLE_KEYS:
            if key in USER_ONLY_TABLES and project is not None:
                raise ConfigError(
                    source, key, "only your user configuration may set this (a project cannot)"
                )
            if not isinstance(value, dict):
                raise ConfigError(source, key, f"must be a table ([{key}]), got {type_name(value)}")
            table = TABLE_KEYS[key]
            for sub, sub_value in value.items():
                dotted = f"{key}.{sub}"
                if sub == "capabilities":
                    parse_capabilities(sub_value, source, key, capabilities)
                    continue
                if sub not in table:
                    raise unknown_key(source, dotted, list(table))
                name, check, _ = table[sub]
                layer[name] = checked(source, dotted, check, sub_value)
        elif key == "models":
            if not isinstance(value, dict):
                raise ConfigError(
                    source, key, f"must be a table ([models]), got {type_name(value)}"
                )
            models: dict[str, tuple[str, ...]] = {}
            for provider, ids in value.items():
                dotted = f"models.{provider}"
                if provider not in MODEL_PROVIDERS:
                    raise unknown_key(source, dotted, list(MODEL_PROVIDERS))
                models[provider] = checked(source, dotted, model_list, ids)  # type: ignore[assignment]
            layer["models"] = models
        elif key == "context_windows":
            if not isinstance(value, dict):
                raise ConfigError(
                    source, key, f"must be a table ([context_windows]), got {type_name(value)}"
                )
            layer["context_windows"] = {
                model: checked(source, f"context_windows.{model}", at_least(1024), tokens)
                for model, tokens in value.items()
            }
        elif key == "providers":
            layer["providers"] = parse_providers(value, source, base_dir, capabilities)
        elif key == "mcp":
            layer["mcp_servers"] = _mcp_servers(value, source, env)
        elif key == "capabilities":
            parse_capabilities(value, source, "", capabilities)
        elif key == "hooks":
            layer["hooks"] = parse_hooks(value, source, project)
        elif key == "trusted_projects":
            if project is not None:
                raise ConfigError(
                    source,
                    key,
                    "only your user configuration may trust a project "
                    "(a project cannot trust itself)",
                )
            layer["trusted_projects"] = checked(source, key, trusted_list, value)
        elif key in CAPABILITY_SCOPES:  # a provider without a table of its own: `scripted`
            if not isinstance(value, dict):
                raise ConfigError(source, key, f"must be a table ([{key}]), got {type_name(value)}")
            for sub, sub_value in value.items():
                if sub != "capabilities":
                    raise unknown_key(source, f"{key}.{sub}", ["capabilities"])
                parse_capabilities(sub_value, source, key, capabilities)
        else:
            raise unknown_key(source, key, known_top)
    if capabilities:
        layer["capabilities"] = capabilities
    return layer


_MCP_ENTRY_KEYS = ("type", "transport", "command", "args", "env", "url", "headers")


def _mcp_servers(value: object, source: str, env: Mapping[str, str] | None) -> dict[str, Any]:
    """`[mcp.servers.NAME]` tables as specs by name (the entry shape of `.mcp.json`)."""
    from defect_core.mcp.spec import server_spec

    if not isinstance(value, dict):
        raise ConfigError(source, "mcp", f"must be a table ([mcp]), got {type_name(value)}")
    for key in value:
        if key != "servers":
            raise unknown_key(source, f"mcp.{key}", ["servers"])
    servers = value.get("servers", {})
    if not isinstance(servers, dict):
        raise ConfigError(source, "mcp.servers", "must be a table of [mcp.servers.NAME] tables")
    specs: dict[str, Any] = {}
    for name, entry in servers.items():
        where = f"mcp.servers.{name}"
        if not isinstance(entry, dict):
            raise ConfigError(source, where, f"must be a table, got {type_name(entry)}")
        for key in entry:
            if key not in _MCP_ENTRY_KEYS:
                raise unknown_key(source, f"{where}.{key}", list(_MCP_ENTRY_KEYS))
        try:
            specs[name] = server_spec(name, entry, os.environ if env is None else env)
        except ValueError as exc:
            raise ConfigError(source, where, str(exc)) from None
    return specs


def read_file(path: Path, env: Mapping[str, str], project: str | None = None) -> Layer | None:
    """The layer of the file at `path`, or None when there is no such file, or one that must
    not be read (`project`: the project root when the file is one of that project's own, and
    the boundary it must lie in; else the user's file, bounded by its own directory)."""
    read = _read(path, env, project)
    return None if read is None else read[0]


def read_project_file(
    path: Path, env: Mapping[str, str], project: Path
) -> tuple[Layer, list[Gated]] | None:
    """A project's own file: its layer, and what it sets that needs trust (`trust.py`)."""
    read = _read(path, env, str(project))
    if read is None:
        return None
    layer, data = read
    try:
        source = str(path.relative_to(project))
    except ValueError:
        source = str(path)
    return layer, gated_items(data, source)


def _read(
    path: Path, env: Mapping[str, str], project: str | None
) -> tuple[Layer, dict[str, Any]] | None:
    boundary = Path(project) if project is not None else path.parent
    try:
        raw = read_confined(path, boundary, MAX_CONFIG_BYTES)
    except OSError as exc:
        raise ConfigError(str(path), None, f"cannot be read: {exc.strerror or exc}") from None
    if raw is None:
        return None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise ConfigError(str(path), None, "is not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        # tomllib's message ends with "(at line L, column C)": the line is in the text.
        raise ConfigError(str(path), None, f"is not valid TOML: {exc}") from None
    try:
        layer = parse_layer(data, str(path), base_dir=path.parent, env=env, project=project)
    except ConfigError as exc:
        if exc.line is not None or exc.key is None:
            raise
        line = key_line(raw.decode("utf-8"), exc.key)
        raise ConfigError(exc.source, exc.key, exc.problem, line) from None
    return layer, data


def key_line(text: str, key: str) -> int | None:
    """The 1-based line where `key` (dotted: `table.sub`) is set or its table opens."""
    parts = key.split(".")
    leaf = re.escape(parts[-1])
    assignment = re.compile(rf'^\s*(?:"{leaf}"|\'{leaf}\'|{leaf})\s*=')
    header = re.compile(rf"^\s*\[+\s*{re.escape(key)}\s*\]+")
    table = ".".join(parts[:-1])
    current = ""
    anywhere: int | None = None  # e.g. a dotted key (`anthropic.base_url = ...`) at the top
    for number, line in enumerate(text.splitlines(), start=1):
        opened = re.match(r"^\s*\[+\s*([^\]]+?)\s*\]+", line)
        if opened:
            current = opened.group(1).replace('"', "").replace("'", "")
            if header.match(line):
                return number
            continue
        if assignment.match(line):
            if current == table:
                return number
            anywhere = anywhere or number
    return anywhere


repo_root = project_root
"""The nearest ancestor of `cwd` (itself included) holding `.git`, else `cwd`: it lives in
`defect_core/confined.py`, below `mcp.spec`, which bounds `.mcp.json` by it too."""
