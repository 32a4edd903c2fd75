"""Settings: what a session runs with (provider, model, limits), and where they come from.

Owns `Settings`, the resolved configuration handed to the core, and `load_settings`, which
resolves it from layers, each overriding the one before:

    built-in defaults
    < $XDG_CONFIG_HOME/defect/config.toml      (default ~/.config/defect/config.toml)
    < <repo>/.defect/config.toml               (checked in, shared by the team)
    < <repo>/.defect/config.local.toml         (personal, usually git-ignored)
    < environment                              (DEFECT_*, ANTHROPIC_*_BASE_URL, AWS_*)
    < command-line flags

`<repo>` is the nearest ancestor of the working directory (itself included) holding `.git`,
or the working directory when there is none.

Keys (every one optional; tables merge key by key across layers):

    provider = "anthropic"            # scripted (offline) | anthropic | bedrock
    model = "claude-sonnet-5-5"       # default model; else the provider's first model
    max_tokens = 16000                # output tokens per model request
    max_turn_requests = 50            # model requests one prompt may make
    reasoning_effort = "medium"       # off | low | medium | high (thinking budget)
    retries = 4                       # retries of a retryable model-call failure
    retry_base_delay = 1.0            # seconds; exponential backoff with jitter
    retry_max_delay = 30.0            # seconds; also caps a server's retry-after
    read_timeout = 120.0              # seconds without a byte before a stream is stalled
    connect_timeout = 10.0            # seconds to open a connection
    allow_read_outside = false        # may tools read files outside the workspace
    terminal_shell = "/bin/sh"        # the editor's terminal runs commands as SHELL -c LINE
    require_persistence = false       # refuse new sessions when they cannot be saved
    script_path = "replies.json"      # the offline model's script (relative to the file)

    [anthropic]
    api_key_env = "ANTHROPIC_API_KEY" # the NAME of the variable holding the key
    base_url = "https://api.anthropic.com"

    [bedrock]
    region = "eu-central-1"
    profile = "work"                  # an AWS profile (SSO, role, keys: the boto3 chain)
    base_url = "https://bedrock-runtime.eu-central-1.amazonaws.com"

    [models]                          # what the model option offers, per provider
    anthropic = ["claude-sonnet-5-5", "claude-opus-5-5"]
    bedrock = ["eu.anthropic.claude-sonnet-4-5-20250929-v1:0"]

    [context_windows]                 # tokens, per model id (for compaction)
    "claude-sonnet-5-5" = 1000000

    [fetch]
    allow = ["127.0.0.1:8080", "intranet.example"]  # hosts fetch may reach though not public

    [mcp.servers.github]              # MCP servers for every session (as in .mcp.json)
    command = "github-mcp-server"     # stdio: command, args, env; http/sse: type, url, headers
    args = ["stdio"]
    env = { GITHUB_TOKEN = "${GITHUB_TOKEN}" }   # ${VAR} / ${VAR:-default}: from the environment

Environment: DEFECT_PROVIDER, DEFECT_MODEL, DEFECT_SCRIPT, DEFECT_MAX_TOKENS,
DEFECT_MAX_TURN_REQUESTS, DEFECT_RETRIES, DEFECT_REASONING_EFFORT, DEFECT_READ_TIMEOUT,
DEFECT_TERMINAL_SHELL, ANTHROPIC_BASE_URL, ANTHROPIC_BEDROCK_BASE_URL, AWS_REGION,
AWS_PROFILE. AWS_DEFAULT_REGION is what its name says: the provider falls back to it only
when no layer names a region.

Invariants:
- Settings are immutable once resolved; a session copies what it may change (model, mode,
  reasoning effort) into its own state.
- Secrets never live here: a setting may name the environment variable that holds a key,
  never the key itself. A key such as `api_key` is unknown, and `api_key_env` must look like a
  variable name, so a pasted key fails at start instead of landing in a checked-in file.
- Strict: an unknown key, a wrong type or a bad value is a `ConfigError` naming the file
  (with the line, for a file), or the variable, or the flag, and the key. A typo must not
  silently run a session on defaults. A broken file fails the sessions it applies to, never
  the process: the editor must still see the agent to show the error.
- Cheap: importing this module loads the stdlib only (`tomllib`), no SDK
  (docs/architecture.md, rule 6); `[mcp]` tables borrow `defect_core.mcp`'s entry parser,
  imported only when present.
"""

from __future__ import annotations

import math
import os
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from defect_core.mcp.spec import McpServerSpec

__all__ = [
    "EFFORT_LEVELS",
    "ConfigError",
    "Settings",
    "config_paths",
    "load_settings",
    "settings_from_env",
    "settings_without_files",
]

EFFORT_LEVELS = ("off", "low", "medium", "high")
_PROVIDER_NAMES = ("scripted", "offline", "anthropic", "bedrock")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SECRET_HINT = re.compile(r"(api_?key|secret|token|password)$", re.IGNORECASE)


class ConfigError(ValueError):
    """A configuration that cannot be used. `str(e)` names where (file, variable or flag),
    the key, and what is wrong."""

    def __init__(self, source: str, key: str | None, problem: str, line: int | None = None) -> None:
        place = f"{source}, line {line}" if line is not None else source
        where = f"{place}: {key}" if key else place
        super().__init__(f"{where}: {problem}")
        self.source = source
        self.key = key
        self.problem = problem
        self.line = line


@dataclass(frozen=True, slots=True)
class Settings:
    provider: str = "scripted"
    model: str | None = None
    """None: the provider's default model."""
    max_tokens: int = 16_000
    max_turn_requests: int = 50
    """Model requests one prompt may make before the turn stops with `max_turn_requests`."""
    retries: int = 4
    retry_base_delay: float = 1.0
    retry_max_delay: float = 30.0
    reasoning_effort: str = "medium"
    """`off`, `low`, `medium`, `high`: maps to a thinking budget where the model supports it."""
    allow_read_outside: bool = False
    require_persistence: bool = False
    """Refuse `session/new` when the session store cannot be used, instead of running the
    session unsaved (with a warning)."""
    script_path: str | None = None
    """The offline model's script (`DEFECT_SCRIPT`)."""
    base_url: str | None = None
    """The Anthropic API's base URL (None: the SDK's default or `ANTHROPIC_BASE_URL`)."""
    api_key_env: str = "ANTHROPIC_API_KEY"
    """The name of the environment variable holding the Anthropic API key."""
    bedrock_base_url: str | None = None
    """A custom Bedrock runtime endpoint (None: the region's)."""
    aws_region: str | None = None
    aws_profile: str | None = None
    models: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Model ids the model option offers, per provider name; a missing entry: built-ins."""
    context_windows: dict[str, int] = field(default_factory=dict)
    """Context window in tokens per model id, overriding what the provider knows."""
    mcp_servers: tuple[McpServerSpec, ...] = ()
    """MCP servers every session starts with (`[mcp.servers.NAME]`), besides `.mcp.json`'s."""
    read_timeout: float = 120.0
    """Seconds without a byte from the provider before a stream counts as stalled."""
    connect_timeout: float = 10.0
    terminal_shell: str = "/bin/sh"
    """The program the editor's terminal runs a command line with (`SHELL -c LINE`): clients
    exec `terminal/create`'s command without a shell."""
    fetch_allow_hosts: tuple[str, ...] = ()
    """`host` / `host:port` entries the fetch tool may reach although their addresses are not
    public (`[fetch] allow`; a later layer's list replaces an earlier one)."""
    sources: tuple[str, ...] = ()
    """The configuration files that were read, lowest layer first (for logs and errors)."""
    provider_origin: str = "the default"
    """What chose `provider`: a file's path, `DEFECT_PROVIDER`, `the --provider flag` or the
    default; a missing-credentials hint names it, so the user changes the right place."""

    def with_overrides(self, **changes: object) -> Settings:
        return replace(self, **{k: v for k, v in changes.items() if v is not None})  # type: ignore[arg-type]

    def models_for(self, provider: str) -> tuple[str, ...]:
        """The configured model ids of a provider (empty: use the provider's built-ins)."""
        return self.models.get(provider, ())


# --- values ---------------------------------------------------------------------------------

Check = Callable[[object], object]
"""Validates one value; returns it (normalised) or raises `_Bad` with the problem."""


class _Bad(Exception):
    pass


def _type_name(value: object) -> str:
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}.get(
        type(value), f"a {type(value).__name__}"
    )


def _string(value: object) -> str:
    if not isinstance(value, str):
        raise _Bad(f"must be a string, got {_type_name(value)}")
    if not value.strip():
        raise _Bad("must not be empty")
    return value


def _int(minimum: int) -> Check:
    def check(value: object) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise _Bad(f"must be an integer, got {_type_name(value)}")
        if value < minimum:
            raise _Bad(f"must be at least {minimum}, got {value}")
        return value

    return check


def _number(*, positive: bool) -> Check:
    def check(value: object) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise _Bad(f"must be a number, got {_type_name(value)}")
        number = float(value)
        if not math.isfinite(number) or number < 0 or (positive and number == 0):
            raise _Bad(f"must be a {'positive' if positive else 'non-negative'} number")
        return number

    return check


def _bool(value: object) -> bool:
    if not isinstance(value, bool):
        raise _Bad(f"must be true or false, got {_type_name(value)}")
    return value


def _one_of(*choices: str) -> Check:
    def check(value: object) -> str:
        text = _string(value)
        if text not in choices:
            raise _Bad(f"must be one of {', '.join(choices)}; got {text!r}")
        return text

    return check


def _url(value: object) -> str:
    text = _string(value)
    if not re.match(r"^https?://[^\s/]+", text):
        raise _Bad(f"must be an http(s) URL, got {text!r}")
    return text.rstrip("/")


def _env_name(value: object) -> str:
    text = _string(value)
    if not _ENV_NAME.match(text):
        raise _Bad(
            "must be the NAME of the environment variable that holds the key "
            "(e.g. ANTHROPIC_API_KEY), never the key itself"
        )
    return text


def _model_list(value: object) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise _Bad(f"must be a list of model ids, got {_type_name(value)}")
    models: list[str] = []
    for index, item in enumerate(value):
        if not isinstance(item, str) or not item.strip():
            raise _Bad(f"item {index} must be a non-empty string (a model id)")
        if item not in models:
            models.append(item)
    if not models:
        raise _Bad("must list at least one model id")
    return tuple(models)


def _host_list(value: object) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _Bad(f'must be a list of "host" or "host:port" strings, got {_type_name(value)}')
    for item in value:
        if not re.fullmatch(r"(\[[0-9A-Fa-f:.]+\]|[^\s/@?#\[\]]+)(:\d{1,5})?", item.strip()):
            raise _Bad(f'{item!r} is not "host" or "host:port"')
    return tuple(v.strip() for v in value)


_TOP: dict[str, tuple[str, Check]] = {
    "provider": ("provider", _one_of(*_PROVIDER_NAMES)),
    "model": ("model", _string),
    "max_tokens": ("max_tokens", _int(1)),
    "max_turn_requests": ("max_turn_requests", _int(1)),
    "reasoning_effort": ("reasoning_effort", _one_of(*EFFORT_LEVELS)),
    "retries": ("retries", _int(0)),
    "retry_base_delay": ("retry_base_delay", _number(positive=False)),
    "retry_max_delay": ("retry_max_delay", _number(positive=False)),
    "read_timeout": ("read_timeout", _number(positive=True)),
    "connect_timeout": ("connect_timeout", _number(positive=True)),
    "allow_read_outside": ("allow_read_outside", _bool),
    "require_persistence": ("require_persistence", _bool),
    "script_path": ("script_path", _string),
    "terminal_shell": ("terminal_shell", _string),
}
_TABLES: dict[str, dict[str, tuple[str, Check]]] = {
    "anthropic": {
        "api_key_env": ("api_key_env", _env_name),
        "base_url": ("base_url", _url),
    },
    "bedrock": {
        "region": ("aws_region", _string),
        "profile": ("aws_profile", _string),
        "base_url": ("bedrock_base_url", _url),
    },
    "fetch": {"allow": ("fetch_allow_hosts", _host_list)},
}
_MODEL_PROVIDERS = ("anthropic", "bedrock", "scripted")

_CLI_FIELDS: dict[str, Check] = {
    **{name: check for name, check in _TOP.values()},
    **{name: check for table in _TABLES.values() for name, check in table.values()},
}

_ENV: dict[str, tuple[str, Callable[[str], object], Check]] = {
    "DEFECT_PROVIDER": ("provider", str, _TOP["provider"][1]),
    "DEFECT_MODEL": ("model", str, _string),
    "DEFECT_SCRIPT": ("script_path", str, _string),
    "DEFECT_MAX_TOKENS": ("max_tokens", int, _int(1)),
    "DEFECT_MAX_TURN_REQUESTS": ("max_turn_requests", int, _int(1)),
    "DEFECT_RETRIES": ("retries", int, _int(0)),
    "DEFECT_REASONING_EFFORT": ("reasoning_effort", str, _TOP["reasoning_effort"][1]),
    "DEFECT_READ_TIMEOUT": ("read_timeout", float, _number(positive=True)),
    "DEFECT_TERMINAL_SHELL": ("terminal_shell", str, _string),
    "ANTHROPIC_BASE_URL": ("base_url", str, _url),
    "ANTHROPIC_BEDROCK_BASE_URL": ("bedrock_base_url", str, _url),
    "AWS_REGION": ("aws_region", str, _string),
    "AWS_PROFILE": ("aws_profile", str, _string),
}


# --- layers ---------------------------------------------------------------------------------

Layer = dict[str, Any]
"""Settings field name → validated value; `models` maps provider → ids."""


def _unknown(source: str, key: str, known: list[str]) -> ConfigError:
    leaf = key.rsplit(".", 1)[-1]
    if _SECRET_HINT.search(leaf):
        hint = (
            "secrets are never read from configuration files; put the key in an environment "
            "variable and name that variable with `api_key_env` in [anthropic]"
        )
    else:
        hint = f"known keys here: {', '.join(known)}"
    return ConfigError(source, key, f"unknown key ({hint})")


def _check(source: str, key: str, check: Check, value: object) -> object:
    try:
        return check(value)
    except _Bad as bad:
        raise ConfigError(source, key, str(bad)) from None


def parse_layer(
    data: Mapping[str, Any],
    source: str,
    base_dir: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> Layer:
    """Validate one file's parsed TOML into a layer. Raises `ConfigError` naming the key.

    `env` resolves `${VAR}` in MCP server entries (default: `os.environ`)."""
    layer: Layer = {}
    known_top = [*_TOP, *_TABLES, "models", "context_windows", "mcp"]
    for key, value in data.items():
        if key in _TOP:
            name, check = _TOP[key]
            layer[name] = _check(source, key, check, value)
            if name == "script_path" and base_dir is not None:
                layer[name] = str((base_dir / str(layer[name])).resolve())
        elif key in _TABLES:
            if not isinstance(value, dict):
                raise ConfigError(
                    source, key, f"must be a table ([{key}]), got {_type_name(value)}"
                )
            table = _TABLES[key]
            for sub, sub_value in value.items():
                dotted = f"{key}.{sub}"
                if sub not in table:
                    raise _unknown(source, dotted, list(table))
                name, check = table[sub]
                layer[name] = _check(source, dotted, check, sub_value)
        elif key == "models":
            if not isinstance(value, dict):
                raise ConfigError(
                    source, key, f"must be a table ([models]), got {_type_name(value)}"
                )
            models: dict[str, tuple[str, ...]] = {}
            for provider, ids in value.items():
                dotted = f"models.{provider}"
                if provider not in _MODEL_PROVIDERS:
                    raise _unknown(source, dotted, list(_MODEL_PROVIDERS))
                models[provider] = _check(source, dotted, _model_list, ids)  # type: ignore[assignment]
            layer["models"] = models
        elif key == "context_windows":
            if not isinstance(value, dict):
                raise ConfigError(
                    source, key, f"must be a table ([context_windows]), got {_type_name(value)}"
                )
            layer["context_windows"] = {
                model: _check(source, f"context_windows.{model}", _int(1024), tokens)
                for model, tokens in value.items()
            }
        elif key == "mcp":
            layer["mcp_servers"] = _mcp_servers(value, source, env)
        else:
            raise _unknown(source, key, known_top)
    return layer


_MCP_ENTRY_KEYS = ("type", "transport", "command", "args", "env", "url", "headers")


def _mcp_servers(value: object, source: str, env: Mapping[str, str] | None) -> dict[str, Any]:
    """`[mcp.servers.NAME]` tables as specs by name (the entry shape of `.mcp.json`)."""
    from defect_core.mcp.spec import server_spec

    if not isinstance(value, dict):
        raise ConfigError(source, "mcp", f"must be a table ([mcp]), got {_type_name(value)}")
    for key in value:
        if key != "servers":
            raise _unknown(source, f"mcp.{key}", ["servers"])
    servers = value.get("servers", {})
    if not isinstance(servers, dict):
        raise ConfigError(source, "mcp.servers", "must be a table of [mcp.servers.NAME] tables")
    specs: dict[str, Any] = {}
    for name, entry in servers.items():
        where = f"mcp.servers.{name}"
        if not isinstance(entry, dict):
            raise ConfigError(source, where, f"must be a table, got {_type_name(entry)}")
        for key in entry:
            if key not in _MCP_ENTRY_KEYS:
                raise _unknown(source, f"{where}.{key}", list(_MCP_ENTRY_KEYS))
        try:
            specs[name] = server_spec(name, entry, os.environ if env is None else env)
        except ValueError as exc:
            raise ConfigError(source, where, str(exc)) from None
    return specs


def _read_file(path: Path, env: Mapping[str, str]) -> Layer | None:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except IsADirectoryError:
        raise ConfigError(str(path), None, "is a directory, not a TOML file") from None
    except OSError as exc:
        raise ConfigError(str(path), None, f"cannot be read: {exc.strerror or exc}") from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise ConfigError(str(path), None, "is not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        # tomllib's message ends with "(at line L, column C)": the line is in the text.
        raise ConfigError(str(path), None, f"is not valid TOML: {exc}") from None
    try:
        return parse_layer(data, str(path), base_dir=path.parent, env=env)
    except ConfigError as exc:
        if exc.line is not None or exc.key is None:
            raise
        line = key_line(raw.decode("utf-8"), exc.key)
        raise ConfigError(exc.source, exc.key, exc.problem, line) from None


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


def _env_layer(env: Mapping[str, str]) -> Layer:
    layer: Layer = {}
    for variable, (name, convert, check) in _ENV.items():
        raw = env.get(variable)
        if raw is None or not raw.strip():
            continue
        try:
            value = convert(raw.strip())
        except ValueError:
            kind = "an integer" if convert is int else "a number"
            raise ConfigError("environment", variable, f"must be {kind}, got {raw!r}") from None
        layer[name] = _check("environment", variable, check, value)
    return layer


def _cli_layer(cli: Mapping[str, object]) -> Layer:
    layer: Layer = {}
    for name, value in cli.items():
        if value is None:
            continue
        if name == "models":
            if not isinstance(value, Mapping):
                raise ConfigError("command line", name, "must map provider names to model lists")
            layer["models"] = {
                p: _check("command line", f"models.{p}", _model_list, list(ids))
                for p, ids in value.items()
            }
            continue
        if name == "context_windows":
            if not isinstance(value, Mapping):
                raise ConfigError("command line", name, "must map model ids to token counts")
            layer[name] = {
                m: _check("command line", f"context_windows.{m}", _int(1024), tokens)
                for m, tokens in value.items()
            }
            continue
        check = _CLI_FIELDS.get(name)
        if check is None:
            raise _unknown("command line", name, sorted(_CLI_FIELDS))
        layer[name] = _check("command line", name, check, value)
    return layer


def _apply(settings: Settings, layer: Layer, origin: str | None = None) -> Settings:
    changes = dict(layer)
    if origin is not None and "provider" in changes:
        changes["provider_origin"] = origin
    for table in ("models", "context_windows"):
        if table in changes:
            changes[table] = {**getattr(settings, table), **changes[table]}
    if "mcp_servers" in changes:  # by name: a later layer replaces a server of the same name
        merged = {spec.name: spec for spec in settings.mcp_servers}
        merged.update(changes["mcp_servers"])
        changes["mcp_servers"] = tuple(merged.values())
    return replace(settings, **changes)


def repo_root(cwd: Path) -> Path:
    """The nearest ancestor of `cwd` (itself included) holding `.git`, else `cwd`."""
    cwd = cwd.resolve()
    for directory in (cwd, *cwd.parents):
        if (directory / ".git").exists():
            return directory
    return cwd


def config_paths(cwd: Path | None, env: Mapping[str, str] | None = None) -> list[Path]:
    """The configuration files `load_settings` reads, lowest layer first (present or not)."""
    env = os.environ if env is None else env
    xdg = env.get("XDG_CONFIG_HOME", "")
    if xdg and Path(xdg).is_absolute():
        user_dir = Path(xdg)
    else:
        home = env.get("HOME")
        user_dir = (Path(home) if home else Path.home()) / ".config"
    paths = [user_dir / "defect" / "config.toml"]
    if cwd is not None:
        repo = repo_root(cwd) / ".defect"
        paths += [repo / "config.toml", repo / "config.local.toml"]
    return paths


def load_settings(
    cwd: Path | None,
    env: Mapping[str, str] | None = None,
    cli: Mapping[str, object] | None = None,
) -> Settings:
    """Resolve the settings from every layer (see the module docstring).

    `cwd` None skips the repository's files; `env` defaults to `os.environ`; `cli` maps
    Settings field names to flag values (None: the flag was not given).
    Raises `ConfigError` naming the file, variable or flag and the key.
    """
    env = os.environ if env is None else env
    settings = Settings()
    read: list[str] = []
    for path in config_paths(cwd, env):
        layer = _read_file(path, env)
        if layer is not None:
            settings = _apply(settings, layer, origin=str(path))
            read.append(str(path))
    settings = _apply(settings, _env_layer(env), origin="DEFECT_PROVIDER")
    settings = _apply(settings, _cli_layer(cli or {}), origin="the --provider flag")
    if settings.retry_max_delay < settings.retry_base_delay:
        raise ConfigError(
            read[-1] if read else "configuration",
            "retry_max_delay",
            "must not be smaller than retry_base_delay",
        )
    return replace(settings, sources=tuple(read))


def settings_without_files(
    env: Mapping[str, str] | None = None, cli: Mapping[str, object] | None = None
) -> Settings:
    """Defaults < environment < flags: what the process runs with when a configuration file
    is broken (each session then fails with that file's error, see `load_settings`)."""
    env = os.environ if env is None else env
    settings = _apply(Settings(), _env_layer(env), origin="DEFECT_PROVIDER")
    return _apply(settings, _cli_layer(cli or {}), origin="the --provider flag")


def settings_from_env(
    env: Mapping[str, str] | None = None, base: Settings | None = None
) -> Settings:
    """Apply the environment layer (`DEFECT_*`, provider URLs, AWS region/profile) over `base`.

    Raises `ConfigError` (a `ValueError`) naming the variable when a value is unusable.
    """
    env = os.environ if env is None else env
    return _apply(base or Settings(), _env_layer(env))
