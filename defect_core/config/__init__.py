"""Settings: what a session runs with (provider, model, limits), and where they come from.

One room per job, lowest first (each module's docstring states its invariants):

- `settings.py`   `Settings` (every field, its default), `ConfigError`, the effort levels
- `keys.py`       every key a file, a variable or a flag may set, and the check its value
                  must pass (the full list of keys is in its docstring)
- `providers.py`  `[providers.NAME]` tables, the providers the plain keys imply, the default
                  `ModelSelection` and the `Settings` each provider is built from
- `files.py`      where the configuration files are; one TOML file read into a layer, with
                  the line of a bad key
- `overrides.py`  the environment and the command-line flags, each read into a layer
- `capabilities.py` the hosted-capability tables (`[capabilities.web_search]`, per provider
                  `[<provider>.capabilities.web_search]`) and how they merge
- `hooks.py`      the `[hooks]` table and `trusted_projects`: which hooks a layer adds
- `trust_store.py` the user's `/trust` decisions (`trust.toml` beside `config.toml`)
- `trust.py`      project trust: what a project's own files set that needs it, whether the
                  project is trusted, which of its settings apply, where credentials may go
- `resolve.py`    the layers in order over the defaults: `load_settings`

Invariants:
- Cheap: importing this package loads the stdlib only (`tomllib`), no SDK and no
  `defect_core.mcp` (docs/architecture.md, rule 6).
- Strict and secret-free: an unknown key, a wrong type or a bad value is a `ConfigError`
  naming the file (with the line), the variable or the flag, and the key; a setting may name
  the environment variable holding a key, never the key itself.
- Imports only downwards: `Settings` names `defect_core.mcp.spec.McpServerSpec` for type
  checking, and `files.py` borrows its entry parser when a file has `[mcp]` tables.
"""

from defect_core.config.capabilities import web_search_for
from defect_core.config.files import config_paths, key_line, parse_layer, repo_root
from defect_core.config.providers import (
    default_selection,
    provider_settings,
    provider_spec,
    provider_specs,
)
from defect_core.config.resolve import load_settings, settings_from_env, settings_without_files
from defect_core.config.settings import (
    EFFORT_LEVELS,
    PROVIDER_KINDS,
    ConfigError,
    ModelSettings,
    ProviderSpec,
    Settings,
    WebSearchSettings,
)

__all__ = [
    "EFFORT_LEVELS",
    "PROVIDER_KINDS",
    "ConfigError",
    "ModelSettings",
    "ProviderSpec",
    "Settings",
    "WebSearchSettings",
    "config_paths",
    "default_selection",
    "key_line",
    "load_settings",
    "parse_layer",
    "provider_settings",
    "provider_spec",
    "provider_specs",
    "repo_root",
    "settings_from_env",
    "settings_without_files",
    "web_search_for",
]
