"""Which providers exist and how to build one, without importing any provider SDK.

Owns the name → factory table used by the `defect` command and by sessions (`--provider`,
`DEFECT_PROVIDER`, the `provider` setting).

Invariant: importing this module, listing names or building the offline provider costs no
SDK import; the Anthropic and Bedrock providers import their SDK on first use (docs/architecture.md,
rule 6: editors wait on `initialize` and `session/new`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from defect_core.config import Settings
from defect_core.providers.base import LlmProvider

ProviderFactory = Callable[[Settings], LlmProvider]


def _scripted(settings: Settings) -> LlmProvider:
    from defect_core.providers.scripted import ScriptedProvider

    if settings.script_path:
        return ScriptedProvider.from_file(settings.script_path)
    return ScriptedProvider()


def _lazy(module: str, attribute: str) -> ProviderFactory:
    def build(settings: Settings) -> LlmProvider:
        factory = getattr(importlib.import_module(module), attribute)
        provider: LlmProvider = factory(settings)
        return provider

    return build


PROVIDERS: dict[str, ProviderFactory] = {
    "scripted": _scripted,
    "anthropic": _lazy("defect_core.providers.anthropic", "anthropic_provider"),
    "bedrock": _lazy("defect_core.providers.anthropic", "bedrock_provider"),
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
    return PROVIDERS[key](settings)
