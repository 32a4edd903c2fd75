"""Resolving the settings: every layer, in order, over the built-in defaults.

Owns `load_settings` and its two reduced forms (`settings_without_files`, for when a file is
broken; `settings_from_env`, the environment over given settings), and `apply_layer`, how one
layer lands on the settings below it. The layers, each overriding the one before:

    built-in defaults                          (`Settings()`)
    < $XDG_CONFIG_HOME/defect/config.toml      (default ~/.config/defect/config.toml)
    < <repo>/.defect/config.toml               (checked in, shared by the team)
    < <repo>/.defect/config.local.toml         (personal, usually git-ignored)
    < environment                              (DEFECT_*, ANTHROPIC_*_BASE_URL, AWS_*)
    < command-line flags

`<repo>` is the nearest ancestor of the working directory (itself included) holding `.git`,
or the working directory when there is none.

Invariants:
- Tables merge key by key across layers (`models`, `context_windows`, the capabilities per
  scope; MCP servers and `[providers.NAME]` tables by name); a later layer replaces a scalar.
- `provider` names a provider that exists once every layer is in (a kind, or a
  `[providers.NAME]` table of any layer), else a `ConfigError` at the line that chose it.
- `provider_origin` names the layer that chose the provider, so a missing-credentials message
  sends the user to the right place.
- Hooks of every layer are appended, in layer order.
- A project's own files (`<repo>/.defect/config*.toml`, and `.mcp.json`'s servers) apply only
  as far as the project is trusted (`trust.py`: the key table's trust column, the rule on
  credentials); `Settings.project` says what was not applied, for the session's notice.
- A broken file fails the sessions it applies to, never the process: the editor must still see
  the agent to show the error (the front end then runs on `settings_without_files`).

Why a room of its own: the order of the layers and how they merge is the one thing every
source shares; each source's reading lives beside it (`files.py`, `overrides.py`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from defect_core.config.capabilities import merge_capabilities
from defect_core.config.files import (
    MAX_CONFIG_BYTES,
    config_paths,
    key_line,
    read_file,
    read_project_file,
    repo_root,
)
from defect_core.config.keys import Layer
from defect_core.config.overrides import env_layer, flag_layer
from defect_core.config.providers import check_default_provider
from defect_core.config.settings import ConfigError, Settings
from defect_core.config.trust import ProjectTrust, decide, finish, mcp_json_items
from defect_core.config.trust_store import trust_file
from defect_core.confined import Refused, read_within

if TYPE_CHECKING:
    from defect_core.mcp.spec import McpServerSpec

__all__ = ["apply_layer", "load_settings", "settings_from_env", "settings_without_files"]


def apply_layer(settings: Settings, layer: Layer, origin: str | None = None) -> Settings:
    """`layer` over `settings`; `origin` names the layer when it sets the provider."""
    changes = dict(layer)
    if origin is not None and "provider" in changes:
        changes["provider_origin"] = origin
    for table in ("models", "context_windows", "providers"):
        if table in changes:
            changes[table] = {**getattr(settings, table), **changes[table]}
    if "capabilities" in changes:  # per scope, key by key
        changes["capabilities"] = merge_capabilities(settings.capabilities, changes["capabilities"])
    if "mcp_servers" in changes:  # by name: a later layer replaces a server of the same name
        merged = {spec.name: spec for spec in settings.mcp_servers}
        merged.update(changes["mcp_servers"])
        changes["mcp_servers"] = tuple(merged.values())
    if "hooks" in changes:  # appended: every layer's hooks run, the lower layers' first
        changes["hooks"] = (*settings.hooks, *changes["hooks"])
    return replace(settings, **changes)


def load_settings(
    cwd: Path | None,
    env: Mapping[str, str] | None = None,
    cli: Mapping[str, object] | None = None,
    *,
    trust_project: bool = False,
) -> Settings:
    """Resolve the settings from every layer (see the module docstring).

    `cwd` None skips the repository's files; `env` defaults to `os.environ`; `cli` maps
    Settings field names to flag values (None: the flag was not given); `trust_project` trusts
    the project for this resolution (`defect exec --trust-project`).
    Raises `ConfigError` naming the file, variable or flag and the key.
    """
    env = os.environ if env is None else env
    paths = config_paths(cwd, env)
    read: list[str] = []
    settings = Settings()
    user_layer = read_file(paths[0], env)
    if user_layer is not None:
        settings = apply_layer(settings, user_layer, origin=str(paths[0]))
        read.append(str(paths[0]))
    above = env_layer(env), flag_layer(cli or {})
    project = None
    if cwd is not None:
        settings, project = _project_layers(
            settings, _above(settings, above), cwd, paths, env, read, trust_project
        )
    settings = _above(settings, above)
    if settings.retry_max_delay < settings.retry_base_delay:
        raise ConfigError(
            read[-1] if read else "configuration",
            "retry_max_delay",
            "must not be smaller than retry_base_delay",
        )
    _check_provider(settings)
    return replace(settings, sources=tuple(read), project=project)


def _above(settings: Settings, layers: tuple[Layer, Layer]) -> Settings:
    """The environment and the flags over `settings`."""
    settings = apply_layer(settings, layers[0], origin="DEFECT_PROVIDER")
    return apply_layer(settings, layers[1], origin="the --provider flag")


def _project_layers(
    settings: Settings,
    user: Settings,
    cwd: Path,
    paths: list[Path],
    env: Mapping[str, str],
    read: list[str],
    trust_project: bool,
) -> tuple[Settings, ProjectTrust | None]:
    """The project's own files over `settings`, each filtered by trust (`trust.py`); `user`
    is the user's own configuration (file, environment, flags), what credentials and limits
    are checked against. The trust is None when the project sets nothing that needs it."""
    root = repo_root(cwd)
    files = [(path, read_project_file(path, env, root)) for path in paths[1:]]
    present = [(path, found) for path, found in files if found is not None]
    mcp_items, mcp_json = mcp_json_items(cwd, root)
    items = [item for _, (_, gated) in present for item in gated] + mcp_items
    trust = decide(root, items, user, trust_file(env), paths[0], trust_project=trust_project)
    withheld: list[str] = []
    held: list[McpServerSpec] = []
    for path, (layer, _) in present:
        applied, lines = trust.split(layer, user, str(path.relative_to(root)))
        settings = apply_layer(settings, applied, origin=str(path))
        withheld += lines
        if "mcp_servers" not in applied:
            held += layer.get("mcp_servers", {}).values()
        read.append(str(path))
    trust = finish(trust, withheld, mcp_json, held)
    trust.log_withheld()
    return settings, (trust if trust.items or trust.withheld else None)


def _check_provider(settings: Settings) -> None:
    """`check_default_provider`, with the line when a file chose the provider."""
    try:
        check_default_provider(settings)
    except ConfigError as exc:
        line = None
        path = Path(exc.source)
        if path.is_absolute():
            try:  # a file already read: its own directory bounds it (a link out is refused)
                raw = read_within(path, path.parent, MAX_CONFIG_BYTES)
                line = key_line(raw.decode("utf-8"), "provider") if raw is not None else None
            except (OSError, UnicodeDecodeError, Refused):
                line = None
        raise ConfigError(exc.source, exc.key, exc.problem, line) from None


def settings_without_files(
    env: Mapping[str, str] | None = None, cli: Mapping[str, object] | None = None
) -> Settings:
    """Defaults < environment < flags: what the process runs with when a configuration file
    is broken (each session then fails with that file's error, see `load_settings`)."""
    env = os.environ if env is None else env
    settings = apply_layer(Settings(), env_layer(env), origin="DEFECT_PROVIDER")
    # Not `check_default_provider`: the provider may be a table of the broken file, and the
    # sessions report that file's error anyway.
    return apply_layer(settings, flag_layer(cli or {}), origin="the --provider flag")


def settings_from_env(
    env: Mapping[str, str] | None = None, base: Settings | None = None
) -> Settings:
    """Apply the environment layer (`DEFECT_*`, provider URLs, AWS region/profile) over `base`.

    Raises `ConfigError` (a `ValueError`) naming the variable when a value is unusable.
    """
    env = os.environ if env is None else env
    return apply_layer(base or Settings(), env_layer(env))
