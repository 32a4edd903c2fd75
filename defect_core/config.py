"""Settings: what a session runs with (provider, model, limits).

Owns `Settings`, the resolved configuration handed to the core.

Invariants:
- Settings are immutable once resolved; a session copies what it may change (model, mode,
  reasoning effort) into its own state.
- Secrets never live here: a setting may name the environment variable that holds a key,
  never the key itself.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace


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
    script_path: str | None = None
    """The offline model's script (`DEFECT_SCRIPT`)."""
    extra: dict[str, object] = field(default_factory=dict)

    def with_overrides(self, **changes: object) -> Settings:
        return replace(self, **{k: v for k, v in changes.items() if v is not None})  # type: ignore[arg-type]


def settings_from_env(
    env: Mapping[str, str] | None = None, base: Settings | None = None
) -> Settings:
    """Apply the `DEFECT_*` environment variables over `base`."""
    env = os.environ if env is None else env
    s = base or Settings()
    changes: dict[str, object] = {}
    if v := env.get("DEFECT_PROVIDER"):
        changes["provider"] = v
    if v := env.get("DEFECT_MODEL"):
        changes["model"] = v
    if v := env.get("DEFECT_SCRIPT"):
        changes["script_path"] = v
    if v := env.get("DEFECT_MAX_TURN_REQUESTS"):
        changes["max_turn_requests"] = int(v)
    return s.with_overrides(**changes)
