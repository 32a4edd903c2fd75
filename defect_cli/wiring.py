"""What a core is made of: the settings, the provider, the session store and the process's
configuration wired into a `DefaultAgentCore`, for `defect acp` and `defect exec` alike.

Owns the one place a front end's runtime is built: the ACP bridge (`defect_acp`) is handed
the finished core and reaches it only through the session door (`AgentCore`/`Session`,
docs/architecture.md, rule 2); `defect exec` gets its core here too.

Invariants:
- Nothing heavy is imported at module level, and each import happens where `defect acp` has
  always made it: the configuration after the SDK's pydantic set-up (`run_acp`), the session
  runtime only once the provider's SDK has started loading in the background
  (`preload_provider_sdk`), so `initialize` and `session/new` never wait for either.
- A broken configuration file never stops `defect acp`: the process's settings come without
  the files, and every session reports the file's error; a provider that cannot exist (an
  unknown name, a bad flag or variable) is refused at once with one line (`Refused`).
- A store that cannot be opened leaves sessions working, unsaved (`open_store`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from defect_core.config import Settings
    from defect_core.session import AgentCore
    from defect_core.store import AsyncStore

__all__ = [
    "Refused",
    "acp_core",
    "acp_settings",
    "exec_core",
    "open_store",
    "preload_provider_sdk",
    "refuse",
]


class Refused(Exception):
    """The process cannot start: the message is the one line a person reads (exit 2)."""


def acp_settings(
    flags: Mapping[str, object],
) -> tuple[Settings, Callable[[Path], Settings]]:
    """The process's settings (the user's file, environment, flags) and how a session's
    settings are read for its cwd; the provider's SDK starts loading. `Refused` when no
    provider can be built from them."""
    from defect_core import log
    from defect_core.config import ConfigError, load_settings, provider_spec, settings_without_files
    from defect_core.providers.registry import UnknownProvider, build_named

    cli = dict(flags)
    try:
        # The user's file only: a project's file applies to the sessions in that project,
        # not to the process that happens to start there.
        settings = load_settings(None, cli=cli)
    except ConfigError as exc:
        if exc.source in ("DEFECT_PROVIDER", "the --provider flag"):  # no such provider
            raise Refused(str(exc)) from exc
        # A broken file must not hide the agent: the editor still gets `initialize`, and every
        # session/new answers with this error (file, line, reason) until the file is fixed.
        log.get_logger("defect.cli").error("config_invalid", error=str(exc))
        try:
            settings = settings_without_files(cli=cli)
        except ConfigError as bad:  # the environment or a flag: the person at hand
            raise Refused(str(bad)) from bad
    try:
        spec = provider_spec(settings, settings.provider)
        # None: a table of the broken file, whose error every session reports.
        provider = build_named(spec, settings) if spec is not None else None
    except (ConfigError, UnknownProvider, ValueError) as exc:
        raise Refused(str(exc)) from exc
    preload_provider_sdk(provider)

    def settings_for(cwd: Path) -> Settings:
        return load_settings(cwd, cli=cli)

    return settings, settings_for


def preload_provider_sdk(provider: object) -> None:
    """Start loading the provider's SDK now, yielding to the editor's requests: the gate is
    closed until the event loop first sleeps (`defect_cli/idle_loop.py`)."""
    warm = getattr(provider, "warm", None)
    if callable(warm):
        from defect_core.background_import import FOREGROUND

        FOREGROUND.close()
        warm()


def acp_core(settings: Settings, settings_for: Callable[[Path], Settings]) -> AgentCore:
    """The core `defect acp` serves: the process's settings, each session's own read for its
    cwd, the session store (or why there is none)."""
    from defect_core.session import DefaultAgentCore

    store, problem = open_store()
    return DefaultAgentCore(settings, store=store, store_problem=problem, settings_for=settings_for)


def exec_core(settings: Settings, store: AsyncStore | None, store_problem: str | None) -> AgentCore:
    """The core of one `defect exec` run: the project's settings, the store opened before."""
    from defect_core.session import DefaultAgentCore

    return DefaultAgentCore(settings, store=store, store_problem=store_problem)


def open_store(*, logged: bool = True) -> tuple[AsyncStore | None, str | None]:
    """The session store, or None and why it cannot be used (a read-only or full disk, a
    damaged or locked database). Sessions then still work, unsaved: the core tells the client
    (no `loadSession`, a warning in each new session) or refuses them (`require_persistence`).
    `logged=False`: the front end shows that warning itself and nothing else reads the log."""
    from defect_core.log import get_logger
    from defect_core.session import StorageError
    from defect_core.store import AsyncStore, SqliteStore

    try:
        return AsyncStore(SqliteStore()), None
    except (StorageError, OSError) as exc:
        if not logged:
            return None, str(exc)
        get_logger("defect.cli").error(
            "session_store_unavailable", error=str(exc), effect="sessions will not be saved"
        )
        return None, str(exc)


def refuse(exc: Refused) -> int:
    """Say why the process cannot start, on stderr; the exit status."""
    sys.stderr.write(f"defect: {exc}\n")
    return 2
