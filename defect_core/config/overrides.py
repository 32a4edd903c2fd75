"""The layers above the files: the environment and the command-line flags.

Owns `env_layer` (`DEFECT_*`, `ANTHROPIC_*_BASE_URL`, `AWS_REGION`, `AWS_PROFILE`: the table
`ENV_VARIABLES` of `keys.py`) and `flag_layer` (the `defect acp` flags, given as `Settings`
field names → values), each read into a validated layer.

Invariants:
- An empty variable and a flag left at None are not given: they override nothing.
- A bad value is a `ConfigError` naming the variable (source "environment") or the flag
  (source "command line") and the problem; the same checks as in a file apply.
- Only the variables of the table are read: the environment's secrets (API keys, AWS
  credentials) are read by the providers when they need them, never copied into `Settings`.

Why apart from the files: no paths, no lines, no TOML - and the process falls back on exactly
these two layers when a configuration file is broken (`settings_without_files`).
"""

from __future__ import annotations

from collections.abc import Mapping

from defect_core.config.keys import (
    ENV_VARIABLES,
    FLAG_FIELDS,
    Layer,
    at_least,
    checked,
    model_list,
    unknown_key,
)
from defect_core.config.settings import ConfigError

__all__ = ["env_layer", "flag_layer"]


def env_layer(env: Mapping[str, str]) -> Layer:
    """The variables of `ENV_VARIABLES` that `env` sets, converted and checked."""
    layer: Layer = {}
    for variable, (name, convert, check) in ENV_VARIABLES.items():
        raw = env.get(variable)
        if raw is None or not raw.strip():
            continue
        try:
            value = convert(raw.strip())
        except ValueError:
            kind = "an integer" if convert is int else "a number"
            raise ConfigError("environment", variable, f"must be {kind}, got {raw!r}") from None
        layer[name] = checked("environment", variable, check, value)
    return layer


def flag_layer(cli: Mapping[str, object]) -> Layer:
    """The flags that were given (`Settings` field names; `models` and `context_windows` as
    mappings), checked."""
    layer: Layer = {}
    for name, value in cli.items():
        if value is None:
            continue
        if name == "models":
            if not isinstance(value, Mapping):
                raise ConfigError("command line", name, "must map provider names to model lists")
            layer["models"] = {
                p: checked("command line", f"models.{p}", model_list, list(ids))
                for p, ids in value.items()
            }
            continue
        if name == "context_windows":
            if not isinstance(value, Mapping):
                raise ConfigError("command line", name, "must map model ids to token counts")
            layer[name] = {
                m: checked("command line", f"context_windows.{m}", at_least(1024), tokens)
                for m, tokens in value.items()
            }
            continue
        check = FLAG_FIELDS.get(name)
        if check is None:
            raise unknown_key("command line", name, sorted(FLAG_FIELDS))
        layer[name] = checked("command line", name, check, value)
    return layer
