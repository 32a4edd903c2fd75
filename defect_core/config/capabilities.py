"""The hosted-capability keys: what the provider may run itself (today its web search).

Owns the `[capabilities.web_search]` table and its per-provider override
`[<provider>.capabilities.web_search]` (provider: `anthropic`, `bedrock`, `scripted`): reading
one file's tables (`parse_capabilities`), merging a layer over the one below
(`merge_capabilities`), and the settings a provider ends up with (`web_search_for`).

    [capabilities.web_search]          # every provider
    mode = "delegate"                  # delegate | disabled (default)
    max_uses = 5                       # searches per model request (default 5)
    allowed_domains = ["python.org"]   # only these... (or)
    blocked_domains = ["example.com"]  # ...never these: at most one of the two

    [bedrock.capabilities.web_search]  # this provider only, key by key over the above
    mode = "disabled"

Invariants:
- Layers merge key by key, per scope (everything, or one provider), and a provider's keys win
  over the global ones. The two domain lists are one setting: setting either replaces the
  other from the layers or scopes below, so a resolved search never has both.
- Both lists in one table, or an empty list, is a `ConfigError` naming the file and the key:
  the API refuses such a search (both lists at once; an empty list is "ambiguous").

Why a room of its own: a capability is a table per scope, nested in the provider tables,
unlike every other key; keeping its shape here keeps `files.py` a reader of key tables.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from defect_core.config.keys import Bad, at_least, checked, type_name, unknown_key
from defect_core.config.settings import ConfigError, WebSearchSettings

__all__ = [
    "CAPABILITY_SCOPES",
    "merge_capabilities",
    "parse_capabilities",
    "web_search_for",
]

CAPABILITY_SCOPES = ("anthropic", "bedrock", "scripted")
"""The provider tables a `capabilities` table may sit in (the global one's scope is "")."""

_WEB_SEARCH_KEYS = ("mode", "max_uses", "allowed_domains", "blocked_domains")
_DOMAIN_KEYS = ("allowed_domains", "blocked_domains")

DEFAULT_MAX_USES = 5

Scopes = dict[str, dict[str, Any]]
"""Scope ("" for every provider, else a provider name) → the web search keys it sets."""


def _mode(value: object) -> str:
    if value not in ("delegate", "disabled"):
        shown = repr(value) if isinstance(value, str) else type_name(value)
        raise Bad(f"must be delegate or disabled; got {shown}")
    return str(value)


def _domains(value: object) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise Bad(f"must be a list of domain names, got {type_name(value)}")
    if not value:
        raise Bad("must list at least one domain (the API refuses an empty list as ambiguous)")
    for index, item in enumerate(value):
        if not isinstance(item, str) or not item.strip():
            raise Bad(f"item {index} must be a non-empty string (a domain name)")
    return tuple(value)


_CHECKS = {
    "mode": _mode,
    "max_uses": at_least(1),
    "allowed_domains": _domains,
    "blocked_domains": _domains,
}


def parse_capabilities(value: object, source: str, scope: str, scopes: Scopes) -> None:
    """Read one `capabilities` table (`[capabilities]`, or `[<scope>.capabilities]`) into
    `scopes`. Raises `ConfigError` naming the dotted key."""
    where = f"{scope}.capabilities" if scope else "capabilities"
    if not isinstance(value, dict):
        raise ConfigError(source, where, f"must be a table ([{where}]), got {type_name(value)}")
    for name, table in value.items():
        if name != "web_search":
            raise unknown_key(source, f"{where}.{name}", ["web_search"])
        table_key = f"{where}.web_search"
        if not isinstance(table, dict):
            raise ConfigError(source, table_key, f"must be a table, got {type_name(table)}")
        parsed: dict[str, Any] = {}
        for key, item in table.items():
            if key not in _CHECKS:
                raise unknown_key(source, f"{table_key}.{key}", list(_WEB_SEARCH_KEYS))
            parsed[key] = checked(source, f"{table_key}.{key}", _CHECKS[key], item)
        if all(key in parsed for key in _DOMAIN_KEYS):
            raise ConfigError(
                source,
                f"{table_key}.blocked_domains",
                "allowed_domains and blocked_domains cannot both be set (the API refuses a "
                "search with both): keep one of them",
            )
        scopes.setdefault(scope, {}).update(parsed)


def _over(base: Mapping[str, Any], keys: Mapping[str, Any]) -> dict[str, Any]:
    """`keys` over `base`, key by key; a domain list replaces the other one."""
    merged = dict(base)
    if any(key in keys for key in _DOMAIN_KEYS):
        for key in _DOMAIN_KEYS:
            merged.pop(key, None)
    merged.update(keys)
    return merged


def merge_capabilities(base: Scopes, layer: Scopes) -> Scopes:
    """`layer` over `base`, scope by scope."""
    merged = {scope: dict(keys) for scope, keys in base.items()}
    for scope, keys in layer.items():
        merged[scope] = _over(merged.get(scope, {}), keys)
    return merged


def web_search_for(scopes: Scopes, provider: str) -> WebSearchSettings:
    """The web search settings of `provider`: its own keys over the global ones."""
    resolved = _over(scopes.get("", {}), scopes.get(provider, {}))
    return WebSearchSettings(
        mode=resolved.get("mode", "disabled"),
        max_uses=resolved.get("max_uses", DEFAULT_MAX_USES),
        allowed_domains=resolved.get("allowed_domains"),
        blocked_domains=resolved.get("blocked_domains"),
    )
