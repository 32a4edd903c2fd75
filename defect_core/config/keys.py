"""Every configuration key, and what each accepts, in files, the environment and flags.

Owns the key tables (`TOP_KEYS`, `TABLE_KEYS`, `SHAPED_KEYS`, `MODEL_PROVIDERS`,
`ENV_VARIABLES`, `FLAG_FIELDS`: a key → the `Settings` field it sets, the check its value must
pass and who may set it, `FIELD_TRUST`), the value checks themselves, and the two errors every
layer raises from them (`unknown_key`, `checked`).

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
    ask_timeout = 600.0               # seconds a question to the user waits for its answer
    allow_read_outside = false        # may tools read files outside the workspace
    terminal_shell = "/bin/sh"        # the editor's terminal runs commands as SHELL -c LINE
    require_persistence = false       # refuse new sessions when they cannot be saved
    script_path = "replies.json"      # the offline model's script (relative to the file)
    goal_max_rounds = 20              # rounds a goal may take (/goal, defect exec --goal)
    subagent_max_depth = 1            # how deep spawn_agent may nest (0: no subagents)
    background_max_tasks = 4          # background tasks one session runs at once
    trusted_projects = ["~/src/app"]  # user file only: projects whose own settings apply

    [[hooks.before_tool]]             # hooks: event -> entries (config/hooks.py has them all)
    matcher = { tool = "bash" }
    command = "./check.sh"            # JSON of the event on stdin; exit 2 denies

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

    [providers.work]                  # more providers, each under its own name (the model
    kind = "bedrock"                  # picker's group): anthropic | bedrock | scripted | openai;
    region = "eu-central-1"           # keys per kind in `config/providers.py`, which also
    profile = "work"                  # says how the plain keys above map onto providers
    models = ["eu.anthropic.claude-sonnet-4-5-20250929-v1:0"]

    [context_windows]                 # tokens, per model id (for compaction)
    "claude-sonnet-5-5" = 1000000

    [fetch]
    allow = ["127.0.0.1:8080", "intranet.example"]  # hosts fetch may reach though not public

    [checkpoints]                     # file checkpoints of each prompt, for /rewind
    max_mb = 1024                     # blobs kept in the state directory (oldest pruned first)
    max_age_days = 30                 # checkpoints older than this are pruned

    [capabilities.web_search]         # the provider's own web search (capabilities.py)
    mode = "delegate"                 # delegate | disabled (default); also per provider:
    max_uses = 5                      # [anthropic.capabilities.web_search] and the like

    [mcp.servers.github]              # MCP servers for every session (as in .mcp.json)
    command = "github-mcp-server"     # stdio: command, args, env; http/sse: type, url, headers
    args = ["stdio"]
    env = { GITHUB_TOKEN = "${GITHUB_TOKEN}" }   # ${VAR} / ${VAR:-default}: from the environment

    [steering]                        # what the user writes while a turn runs (docs/editors.md)
    interrupt_tools = false           # true: such a message stops the tool calls running then

    [command_environment]             # user file only: what commands, hooks, MCP servers inherit
    pass = ["GITHUB_TOKEN"]           # secret-looking variables they get all the same

The environment of what defect starts (`bash` commands, locally or in the editor's terminal,
hooks, stdio MCP servers; `defect_core/child_env.py`): defect's own, minus the provider
credentials it reads (`ANTHROPIC_API_KEY`, `ANTHROPIC_AUTH_TOKEN`, every `api_key_env`, the
AWS keys and tokens: `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`,
`AWS_BEARER_TOKEN_BEDROCK`) and minus every variable whose name marks it as a secret (`*_KEY`,
`*_SECRET`, `*_TOKEN`, `*_TOKEN_*`, `*PASSWORD*`, `*_API_KEY`, `*_ACCESS_KEY*`,
case-insensitive). `[command_environment] pass` gives the named ones back (a `gh` that needs
`GITHUB_TOKEN`); only the user's own file may set it, a project's file naming it is an error.
An MCP server's own `env` (the editor's, or `${VAR}` in its entry) is an explicit choice and is
kept as given.

Trust (the `Key.trust` column; `config/trust.py` applies it). A repository is untrusted
input, so a project's own files (`<repo>/.defect/config.toml`, `config.local.toml`) may set,
untrusted, only what changes how defect talks to the model the user already chose (and a
stricter rule it can only be refused by):

    model                             # one your [models] / [providers] list, if they list any
    max_tokens                        # at most your own max_tokens
    reasoning_effort
    [context_windows]
    [checkpoints] max_mb, max_age_days
    [steering] interrupt_tools        # a preference: when the user's own messages stop tools
    require_persistence               # it can only refuse to run unsaved

Everything else takes effect from a project's file only once the user trusts the project:
what starts a process (`[mcp.servers]`, `.mcp.json`, `[hooks]`, `terminal_shell`,
`script_path`), what chooses where requests and credentials go (`provider`, `[anthropic]`,
`[bedrock]`, `[providers.*]`, `[models]`), what widens reach (`allow_read_outside`,
`[fetch] allow`, `[capabilities]`, `subagent_max_depth`, `background_max_tasks`,
`goal_max_rounds`, `max_turn_requests`), and the rest (`retries`, timeouts).
`trusted_projects` is the user's file's alone. A key that is not applied is listed in the
session's opening notice, never silently dropped.

Environment: DEFECT_PROVIDER, DEFECT_MODEL, DEFECT_SCRIPT, DEFECT_MAX_TOKENS,
DEFECT_MAX_TURN_REQUESTS, DEFECT_RETRIES, DEFECT_REASONING_EFFORT, DEFECT_READ_TIMEOUT,
DEFECT_ASK_TIMEOUT, DEFECT_TERMINAL_SHELL, ANTHROPIC_BASE_URL, ANTHROPIC_BEDROCK_BASE_URL,
AWS_REGION, AWS_PROFILE. AWS_DEFAULT_REGION is what its name says: the provider falls back to it
only when no layer names a region.

Invariants:
- Strict: an unknown key, a wrong type or a bad value is a `ConfigError` naming the source and
  the key. A key that looks like a secret (`api_key`, `token`, ...) is unknown, with a hint to
  name an environment variable instead; `api_key_env` must look like a variable name, so a
  pasted key fails at start instead of landing in a checked-in file.
- One table per source, all built from the same checks: a key means the same thing in a file,
  a variable and a flag.

Why a room of its own: adding a setting is adding a row here (and its `Settings` field); the
file reader, the environment and the flags pick it up from these tables.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any, Literal, NamedTuple

from defect_core.config.settings import EFFORT_LEVELS, ConfigError

__all__ = [
    "ENV_VARIABLES",
    "FIELD_TRUST",
    "FLAG_FIELDS",
    "MODEL_PROVIDERS",
    "PROJECT",
    "SHAPED_KEYS",
    "TABLE_KEYS",
    "TOP_KEYS",
    "TRUSTED",
    "USER",
    "USER_ONLY_TABLES",
    "Bad",
    "Check",
    "Key",
    "Layer",
    "Trust",
    "at_least",
    "checked",
    "env_name",
    "env_name_list",
    "model_list",
    "string",
    "type_name",
    "unknown_key",
    "url",
]

_PROVIDER_NAMES = ("scripted", "offline", "anthropic", "bedrock")
_PROVIDER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SECRET_HINT = re.compile(r"(api_?key|secret|token|password)$", re.IGNORECASE)

Layer = dict[str, Any]
"""Settings field name → validated value; `models` maps provider → ids."""

Check = Callable[[object], object]
"""Validates one value; returns it (normalised) or raises `Bad` with the problem."""


Trust = Literal["project", "trusted", "user"]
"""Who may set a key: `project` — any file, a project's own too, trusted or not (it only
changes how defect talks to the model the user chose); `trusted` — the user's own file, the
environment, the flags, and a project's file once the user trusts that project
(`config/trust.py`); `user` — the user's own file alone (`trusted_projects`)."""
PROJECT: Trust = "project"
TRUSTED: Trust = "trusted"
USER: Trust = "user"


class Key(NamedTuple):
    """One row of a key table: the `Settings` field a key sets, the check its value must
    pass, and who may set it (`Trust`)."""

    field: str
    check: Check
    trust: Trust


class Bad(Exception):
    """A value a check refused; the message is the problem, without the key."""


def type_name(value: object) -> str:
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}.get(
        type(value), f"a {type(value).__name__}"
    )


def _string(value: object) -> str:
    if not isinstance(value, str):
        raise Bad(f"must be a string, got {type_name(value)}")
    if not value.strip():
        raise Bad("must not be empty")
    return value


def at_least(minimum: int) -> Check:
    def check(value: object) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise Bad(f"must be an integer, got {type_name(value)}")
        if value < minimum:
            raise Bad(f"must be at least {minimum}, got {value}")
        return value

    return check


def _number(*, positive: bool) -> Check:
    def check(value: object) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise Bad(f"must be a number, got {type_name(value)}")
        number = float(value)
        if not math.isfinite(number) or number < 0 or (positive and number == 0):
            raise Bad(f"must be a {'positive' if positive else 'non-negative'} number")
        return number

    return check


def _bool(value: object) -> bool:
    if not isinstance(value, bool):
        raise Bad(f"must be true or false, got {type_name(value)}")
    return value


def _one_of(*choices: str) -> Check:
    def check(value: object) -> str:
        text = _string(value)
        if text not in choices:
            raise Bad(f"must be one of {', '.join(choices)}; got {text!r}")
        return text

    return check


def _url(value: object) -> str:
    text = _string(value)
    if not re.match(r"^https?://[^\s/]+", text):
        raise Bad(f"must be an http(s) URL, got {text!r}")
    return text.rstrip("/")


def _env_name(value: object) -> str:
    text = _string(value)
    if not _ENV_NAME.match(text):
        raise Bad(
            "must be the NAME of the environment variable that holds the key "
            "(e.g. ANTHROPIC_API_KEY), never the key itself"
        )
    return text


def model_list(value: object) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise Bad(f"must be a list of model ids, got {type_name(value)}")
    models: list[str] = []
    for index, item in enumerate(value):
        if not isinstance(item, str) or not item.strip():
            raise Bad(f"item {index} must be a non-empty string (a model id)")
        if item not in models:
            models.append(item)
    if not models:
        raise Bad("must list at least one model id")
    return tuple(models)


def _provider_name(value: object) -> str:
    """A kind or a `[providers.NAME]` name; whether that provider exists is checked once
    every layer is in (`config/providers.py`, `check_default_provider`)."""
    text = _string(value)
    if not _PROVIDER_NAME.match(text):
        raise Bad(
            f"must be one of {', '.join(_PROVIDER_NAMES)} or the name of a [providers.NAME] "
            f"table; got {text!r}"
        )
    return text


def env_name_list(value: object) -> tuple[str, ...]:
    """A list of environment variable names (`[command_environment] pass`)."""
    if not isinstance(value, list):
        raise Bad(f"must be a list of environment variable names, got {type_name(value)}")
    for item in value:
        if not isinstance(item, str) or not _ENV_NAME.match(item):
            raise Bad(f"{item!r} is not an environment variable name")
    return tuple(dict.fromkeys(value))


string, url, env_name = _string, _url, _env_name
"""The checks `config/providers.py` applies to a `[providers.NAME]` table's keys."""


def host_list(value: object) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise Bad(f'must be a list of "host" or "host:port" strings, got {type_name(value)}')
    for item in value:
        if not re.fullmatch(r"(\[[0-9A-Fa-f:.]+\]|[^\s/@?#\[\]]+)(:\d{1,5})?", item.strip()):
            raise Bad(f'{item!r} is not "host" or "host:port"')
    return tuple(v.strip() for v in value)


TOP_KEYS: dict[str, Key] = {
    "provider": Key("provider", _provider_name, TRUSTED),
    "model": Key("model", _string, PROJECT),
    "max_tokens": Key("max_tokens", at_least(1), PROJECT),
    "max_turn_requests": Key("max_turn_requests", at_least(1), TRUSTED),
    "reasoning_effort": Key("reasoning_effort", _one_of(*EFFORT_LEVELS), PROJECT),
    "retries": Key("retries", at_least(0), TRUSTED),
    "retry_base_delay": Key("retry_base_delay", _number(positive=False), TRUSTED),
    "retry_max_delay": Key("retry_max_delay", _number(positive=False), TRUSTED),
    "read_timeout": Key("read_timeout", _number(positive=True), TRUSTED),
    "connect_timeout": Key("connect_timeout", _number(positive=True), TRUSTED),
    "ask_timeout": Key("ask_timeout", _number(positive=True), TRUSTED),
    "allow_read_outside": Key("allow_read_outside", _bool, TRUSTED),
    "require_persistence": Key("require_persistence", _bool, PROJECT),
    "script_path": Key("script_path", _string, TRUSTED),
    "terminal_shell": Key("terminal_shell", _string, TRUSTED),
    "goal_max_rounds": Key("goal_max_rounds", at_least(1), TRUSTED),
    "subagent_max_depth": Key("subagent_max_depth", at_least(0), TRUSTED),
    "background_max_tasks": Key("background_max_tasks", at_least(1), TRUSTED),
}
TABLE_KEYS: dict[str, dict[str, Key]] = {
    "anthropic": {
        "api_key_env": Key("api_key_env", _env_name, TRUSTED),
        "base_url": Key("base_url", _url, TRUSTED),
    },
    "bedrock": {
        "region": Key("aws_region", _string, TRUSTED),
        "profile": Key("aws_profile", _string, TRUSTED),
        "base_url": Key("bedrock_base_url", _url, TRUSTED),
    },
    "fetch": {"allow": Key("fetch_allow_hosts", host_list, TRUSTED)},
    "checkpoints": {
        "max_mb": Key("checkpoint_max_mb", at_least(1), PROJECT),
        "max_age_days": Key("checkpoint_max_age_days", _number(positive=True), PROJECT),
    },
    "command_environment": {"pass": Key("command_env_pass", env_name_list, USER)},
    "steering": {"interrupt_tools": Key("steering_interrupt_tools", _bool, PROJECT)},
}
USER_ONLY_TABLES = ("command_environment",)
"""Tables only the user's own file may set: a project's file naming one is refused
(`config/files.py`), as it is refused `trusted_projects`."""
SHAPED_KEYS: dict[str, tuple[str, Trust]] = {
    "models": ("models", TRUSTED),
    "context_windows": ("context_windows", PROJECT),
    "providers": ("providers", TRUSTED),
    "mcp": ("mcp_servers", TRUSTED),
    "capabilities": ("capabilities", TRUSTED),
    "hooks": ("hooks", TRUSTED),
    "trusted_projects": ("trusted_projects", USER),
}
"""The table-shaped keys (read by `files.py` and the rooms it borrows from): key → the
`Settings` field it sets and its trust. A provider's own `[<kind>.capabilities]` table is the
`capabilities` field too."""
FIELD_TRUST: dict[str, Trust] = {
    **{key.field: key.trust for key in TOP_KEYS.values()},
    **{key.field: key.trust for table in TABLE_KEYS.values() for key in table.values()},
    **dict(SHAPED_KEYS.values()),
}
"""`Settings` field → who may set it: what `config/trust.py` filters a project's layer by."""
MODEL_PROVIDERS = ("anthropic", "bedrock", "scripted")

FLAG_FIELDS: dict[str, Check] = {
    **{key.field: key.check for key in TOP_KEYS.values()},
    **{key.field: key.check for table in TABLE_KEYS.values() for key in table.values()},
}

ENV_VARIABLES: dict[str, tuple[str, Callable[[str], object], Check]] = {
    "DEFECT_PROVIDER": ("provider", str, TOP_KEYS["provider"].check),
    "DEFECT_MODEL": ("model", str, _string),
    "DEFECT_SCRIPT": ("script_path", str, _string),
    "DEFECT_MAX_TOKENS": ("max_tokens", int, at_least(1)),
    "DEFECT_MAX_TURN_REQUESTS": ("max_turn_requests", int, at_least(1)),
    "DEFECT_RETRIES": ("retries", int, at_least(0)),
    "DEFECT_REASONING_EFFORT": ("reasoning_effort", str, TOP_KEYS["reasoning_effort"].check),
    "DEFECT_READ_TIMEOUT": ("read_timeout", float, _number(positive=True)),
    "DEFECT_ASK_TIMEOUT": ("ask_timeout", float, _number(positive=True)),
    "DEFECT_TERMINAL_SHELL": ("terminal_shell", str, _string),
    "ANTHROPIC_BASE_URL": ("base_url", str, _url),
    "ANTHROPIC_BEDROCK_BASE_URL": ("bedrock_base_url", str, _url),
    "AWS_REGION": ("aws_region", str, _string),
    "AWS_PROFILE": ("aws_profile", str, _string),
}


def unknown_key(source: str, key: str, known: list[str]) -> ConfigError:
    """The error for a key no table knows: the keys it could have meant, or for a key that
    looks like a secret, where secrets go instead."""
    leaf = key.rsplit(".", 1)[-1]
    if _SECRET_HINT.search(leaf):
        hint = (
            "secrets are never read from configuration files; put the key in an environment "
            "variable and name that variable with `api_key_env` in [anthropic]"
        )
    else:
        hint = f"known keys here: {', '.join(known)}"
    return ConfigError(source, key, f"unknown key ({hint})")


def checked(source: str, key: str, check: Check, value: object) -> object:
    """`value` through `check`, or a `ConfigError` naming `source` and `key`."""
    try:
        return check(value)
    except Bad as bad:
        raise ConfigError(source, key, str(bad)) from None
