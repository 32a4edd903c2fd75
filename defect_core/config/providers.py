"""Every provider a session may use: `[providers.NAME]` tables, and the ones the plain keys imply.

Owns reading a file's `[providers]` table (`parse_providers`), the list of providers the
configuration offers (`provider_specs`, the default first), the `Settings` one provider is
built from (`provider_settings`), and the default `ModelSelection` (`default_selection`).

How the single-provider keys map (backwards compatible: a configuration without
`[providers]` behaves as before):

- Each kind is also a provider of that name, implied by the plain keys: `anthropic` by
  `[anthropic]` (`api_key_env`, `base_url`) and `ANTHROPIC_BASE_URL`; `bedrock` by `[bedrock]`
  (`region`, `profile`, `base_url`), `AWS_REGION`, `AWS_PROFILE`; `scripted` (alias `offline`)
  by `script_path` / `DEFECT_SCRIPT`. `[models] KIND = [...]` is the implied provider's list.
- `provider` names the default provider: one of those kinds, or a `[providers.NAME]` table.
  `model` is the default provider's default model (else its first model).
- The model picker offers the default provider, every `[providers.NAME]` table, and each
  implied provider that `[models]` lists models for; in that order.
- A `[providers.NAME]` table stands alone: it takes nothing from `[anthropic]`, `[bedrock]`
  or `[models]`; a later layer's table of the same name replaces the earlier one whole (as
  an MCP server of one name does), so each table is checked, with its lines, in its file.

Invariants:
- `[providers.NAME.capabilities.web_search]` is that provider's hosted search
  (`capabilities.py`, scope NAME), merged key by key like the kinds' own.
- A table is complete and strict: `kind` is required, a key its kind does not use is an
  error naming the keys it does use, and a name is letters, digits, `-` and `_` (never `/`,
  which separates a `ModelSelection`'s two parts), never one of the kinds.
- Secrets stay out, as everywhere: `api_key_env` names a variable.
- `kind = "openai"` (an OpenAI-compatible Chat Completions server) exists only as a table:
  `base_url` (default OpenAI's), `api_key_env` (optional: a local server needs no key; absent,
  a placeholder is sent), `models`, and per model `[providers.NAME.model_settings."ID"]` with
  `context_window`, `max_output_tokens` (positive integers), `tools` (default true), `images`
  (default false), `reasoning` (default false: `reasoning_effort` is never sent) — what the
  model takes, since the wire does not say (`ModelSettings`).

Why a room of its own: the tables are more than key → field rows (`keys.py`), and the mapping
of the old keys onto providers is one decision, stated once, here.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from defect_core.config.capabilities import Scopes, parse_capabilities
from defect_core.config.keys import (
    Bad,
    Check,
    checked,
    env_name,
    model_list,
    string,
    type_name,
    unknown_key,
    url,
)
from defect_core.config.settings import (
    PROVIDER_KINDS,
    ConfigError,
    ModelSettings,
    ProviderKind,
    ProviderSpec,
    Settings,
)
from defect_core.selection import ModelSelection

__all__ = [
    "ALIASES",
    "TABLE_KINDS",
    "check_default_provider",
    "default_selection",
    "parse_providers",
    "provider_settings",
    "provider_spec",
    "provider_specs",
]

ALIASES = {"offline": "scripted"}
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")
_KIND_KEYS: dict[str, tuple[str, ...]] = {
    "anthropic": ("kind", "api_key_env", "base_url", "models"),
    "bedrock": ("kind", "region", "profile", "base_url", "models"),
    "scripted": ("kind", "script_path", "models"),
    "openai": ("kind", "api_key_env", "base_url", "models", "model_settings"),
}
TABLE_KINDS: tuple[ProviderKind, ...] = (*PROVIDER_KINDS, "openai")
"""The kinds a `[providers.NAME]` table may name."""
_MODEL_KEYS = ("context_window", "max_output_tokens", "tools", "images", "reasoning")


def _model_settings(value: object) -> tuple[tuple[str, ModelSettings], ...]:
    """`[providers.NAME.model_settings]`: model id → its table of `_MODEL_KEYS`."""
    if not isinstance(value, dict):
        raise Bad(f'must be a table of [model_settings."ID"] tables, got {type_name(value)}')
    found: list[tuple[str, ModelSettings]] = []
    for model, table in value.items():
        if not isinstance(table, dict):
            raise Bad(f"{model!r} must be a table, got {type_name(table)}")
        numbers: dict[str, int] = {}
        flags: dict[str, bool] = {}
        for key, item in table.items():
            if key not in _MODEL_KEYS:
                raise Bad(f"{model!r}: unknown key {key!r} (its keys: {', '.join(_MODEL_KEYS)})")
            if key in ("context_window", "max_output_tokens"):
                if isinstance(item, bool) or not isinstance(item, int) or item <= 0:
                    raise Bad(f"{model!r}: {key} must be a positive integer, got {item!r}")
                numbers[key] = item
            elif not isinstance(item, bool):
                raise Bad(f"{model!r}: {key} must be true or false, got {item!r}")
            else:
                flags[key] = item
        found.append(
            (
                model,
                ModelSettings(
                    context_window=numbers.get("context_window"),
                    max_output_tokens=numbers.get("max_output_tokens"),
                    tools=flags.get("tools", True),
                    images=flags.get("images", False),
                    reasoning=flags.get("reasoning", False),
                ),
            )
        )
    return tuple(found)


_CHECKS: dict[str, Check] = {
    "api_key_env": env_name,
    "base_url": url,
    "region": string,
    "profile": string,
    "models": model_list,
    "script_path": string,
    "model_settings": _model_settings,
}
_FIELDS = {"region": "region", "profile": "profile"}


def parse_providers(
    value: object, source: str, base_dir: Any = None, capabilities: Scopes | None = None
) -> dict[str, ProviderSpec]:
    """A file's `[providers]` table: each `[providers.NAME]` checked into a `ProviderSpec`.
    Raises `ConfigError` naming the key (`providers.NAME.KEY`). `base_dir` (a `Path`) makes a
    relative `script_path` relative to the file; `[providers.NAME.capabilities]` goes into
    `capabilities` under the scope NAME (`capabilities.py`)."""
    if not isinstance(value, dict):
        raise ConfigError(
            source,
            "providers",
            f"must be a table of [providers.NAME] tables, got {type_name(value)}",
        )
    specs: dict[str, ProviderSpec] = {}
    for name, table in value.items():
        where = f"providers.{name}"
        if not _NAME.match(name):
            raise ConfigError(
                source, where, "a provider's name is letters, digits, '-' and '_' (no '/')"
            )
        if name in PROVIDER_KINDS or name in ALIASES:
            raise ConfigError(
                source,
                where,
                f"{name!r} is the provider the plain keys configure ([{name}], [models] {name}); "
                "give this table another name",
            )
        if not isinstance(table, dict):
            raise ConfigError(source, where, f"must be a table, got {type_name(table)}")
        kind = table.get("kind")
        if kind is None:
            raise ConfigError(source, where, f"`kind` is required: one of {', '.join(TABLE_KINDS)}")
        if kind not in TABLE_KINDS:
            raise ConfigError(
                source,
                f"{where}.kind",
                f"must be one of {', '.join(TABLE_KINDS)}; got {kind!r}",
            )
        allowed = (*_KIND_KEYS[kind], "capabilities")
        fields: dict[str, Any] = {}
        for key, item in table.items():
            if key == "kind":
                continue
            if key == "capabilities":
                scopes = capabilities if capabilities is not None else {}
                parse_capabilities(item, source, name, scopes, f"{where}.capabilities")
                continue
            if key not in allowed:
                if any(key in keys for keys in _KIND_KEYS.values()):
                    raise ConfigError(
                        source,
                        f"{where}.{key}",
                        f"not a setting of a {kind} provider (its keys: {', '.join(allowed)})",
                    )
                raise unknown_key(source, f"{where}.{key}", list(allowed))
            fields[key] = checked(source, f"{where}.{key}", _CHECKS[key], item)
        if kind == "openai":
            fields.setdefault("api_key_env", "")  # no key unless a variable is named
            if not fields.get("models") and not fields.get("model_settings"):
                raise ConfigError(
                    source,
                    f"{where}.models",
                    'an openai provider lists its models: models = ["ID", ...] (the server\'s '
                    "GET /v1/models adds to the picker once it answers)",
                )
        if "script_path" in fields and base_dir is not None:
            fields["script_path"] = str((base_dir / fields["script_path"]).resolve())
        specs[name] = ProviderSpec(name=name, kind=kind, source=source, **fields)
    return specs


def _implied(settings: Settings, kind: ProviderKind) -> ProviderSpec:
    """The provider the plain keys configure for `kind`."""
    models = settings.models_for(kind)
    if kind == "anthropic":
        return ProviderSpec(
            "anthropic",
            "anthropic",
            "[anthropic]",
            api_key_env=settings.api_key_env,
            base_url=settings.base_url,
            models=models,
        )
    if kind == "bedrock":
        return ProviderSpec(
            "bedrock",
            "bedrock",
            "[bedrock]",
            base_url=settings.bedrock_base_url,
            region=settings.aws_region,
            profile=settings.aws_profile,
            models=models,
        )
    return ProviderSpec(
        "scripted", "scripted", "script_path", models=models, script_path=settings.script_path
    )


def provider_spec(settings: Settings, name: str) -> ProviderSpec | None:
    """The provider called `name` (a kind, its alias, or a `[providers.NAME]` table)."""
    name = ALIASES.get(name, name)
    if name in settings.providers:
        return settings.providers[name]
    if name in PROVIDER_KINDS:
        return _implied(settings, name)
    return None


def provider_specs(settings: Settings) -> tuple[ProviderSpec, ...]:
    """The providers the model picker offers: the default one first, then every
    `[providers.NAME]` table, then each implied provider `[models]` lists models for."""
    default = provider_spec(settings, settings.provider)
    specs: dict[str, ProviderSpec] = {}
    if default is not None:
        specs[default.name] = default
    for name, spec in settings.providers.items():
        specs.setdefault(name, spec)
    for kind in PROVIDER_KINDS:
        if settings.models_for(kind):
            specs.setdefault(kind, _implied(settings, kind))
    return tuple(specs.values())


def provider_settings(settings: Settings, spec: ProviderSpec) -> Settings:
    """The `Settings` the provider `spec` is built from: the process's limits and timeouts,
    with the provider's own kind, endpoint, credentials' place and models."""
    implied = spec.name in PROVIDER_KINDS
    origin = settings.provider_origin
    if not implied:
        origin = f"[providers.{spec.name}] in {spec.source}"
    elif spec.name != ALIASES.get(settings.provider, settings.provider):
        origin = f"the model picker ({spec.source})"
    return replace(
        settings,
        provider=spec.kind,
        api_key_env=spec.api_key_env,
        base_url=spec.base_url if spec.kind == "anthropic" else settings.base_url,
        bedrock_base_url=spec.base_url if spec.kind == "bedrock" else settings.bedrock_base_url,
        aws_region=spec.region,
        aws_profile=spec.profile,
        models={spec.kind: spec.models} if spec.models else {},
        script_path=spec.script_path,
        provider_origin=origin,
    )


def default_selection(
    settings: Settings, first_model: str, provider: str | None = None
) -> ModelSelection:
    """The default provider (`provider`, else the one `provider` names in the settings) with
    `model` (else `first_model`, that provider's first model)."""
    if provider is None:
        spec = provider_spec(settings, settings.provider)
        provider = spec.name if spec is not None else settings.provider
    return ModelSelection(provider, settings.model or first_model)


def check_default_provider(settings: Settings) -> None:
    """`provider` must name a kind or a `[providers.NAME]` table; else `ConfigError` naming
    where it was chosen."""
    if provider_spec(settings, settings.provider) is not None:
        return
    known = [*PROVIDER_KINDS, *settings.providers]
    raise ConfigError(
        settings.provider_origin,
        "provider",
        f"no provider is called {settings.provider!r}; choose one of {', '.join(known)} "
        "(or add a [providers.NAME] table)",
    )
