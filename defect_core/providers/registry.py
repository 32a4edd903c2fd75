"""Which providers exist and how to build one, without importing any provider SDK.

Owns the kind → factory table used by the `defect` command and by sessions (`--provider`,
`DEFECT_PROVIDER`, the `provider` setting), and `build_named`, which builds one configured
provider (`config.ProviderSpec`: a `[providers.NAME]` table or a kind the plain keys imply)
under its own name.

Invariant: importing this module, listing names or building the offline provider costs no
SDK import; the Anthropic, Bedrock and OpenAI-compatible providers import their SDK on first
use (docs/architecture.md, rule 6: editors wait on `initialize` and `session/new`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from defect_core.config import ProviderSpec, Settings, provider_settings
from defect_core.providers.base import LlmProvider

ProviderFactory = Callable[[Settings, str | None], LlmProvider]
"""Builds a provider from its settings, under a name (None: its kind's)."""


def _scripted(settings: Settings, name: str | None = None) -> LlmProvider:
    from defect_core.providers.scripted import ScriptedProvider

    models = settings.models_for("scripted")
    if settings.script_path:
        return ScriptedProvider.from_file(
            settings.script_path, name=name or "scripted", models=models
        )
    return ScriptedProvider(name=name or "scripted", models=models)


def _lazy(module: str, attribute: str) -> ProviderFactory:
    def build(settings: Settings, name: str | None = None) -> LlmProvider:
        factory = getattr(importlib.import_module(module), attribute)
        provider: LlmProvider = factory(settings, name)
        return provider

    return build


PROVIDERS: dict[str, ProviderFactory] = {
    "scripted": _scripted,
    "anthropic": _lazy("defect_core.providers.anthropic", "anthropic_provider"),
    "bedrock": _lazy("defect_core.providers.anthropic", "bedrock_provider"),
    "openai": _lazy("defect_core.providers.openai_compat", "openai_provider"),
}
ALIASES = {"offline": "scripted"}


class UnknownProvider(ValueError):
    pass


def provider_names() -> list[str]:
    return sorted(PROVIDERS)


def build_provider(name: str, settings: Settings) -> LlmProvider:
    key = ALIASES.get(name, name)
    if key not in PROVIDERS:
        raise UnknownProvider(
            f"unknown provider {name!r}; choose one of: {', '.join(provider_names())}"
        )
    return PROVIDERS[key](settings, None)


def build_named(spec: ProviderSpec, settings: Settings) -> LlmProvider:
    """The provider `spec` describes, named `spec.name`, with the process's limits from
    `settings` (`config.provider_settings`)."""
    return PROVIDERS[spec.kind](provider_settings(settings, spec), spec.name)
