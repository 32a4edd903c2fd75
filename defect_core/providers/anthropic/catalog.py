"""Which Claude models each route offers: the built-in lists and the configured ones.

Owns the two routes (`Route`: the Anthropic API, AWS Bedrock), their built-in model lists
(`ANTHROPIC_MODELS`, `BEDROCK_MODELS`) and `models_for`, which answers `LlmProvider.models()`
from the configuration (`[models] anthropic = [...]`) or the built-ins.

Invariants:
- Offline and cheap: no SDK, no network, no credentials. `models()` and `default_model()` are
  asked while an editor waits on `session/new` (docs/architecture.md, rule 6).
- A configured list replaces the built-ins, in its order (its first entry is the default);
  a configured id that is also built in keeps the built-in name and context window.

Why a room of its own: the list is data, not wire. The live listing (the API's
`GET /v1/models`, Bedrock's profiles) is `listing.py`; this offline answer is what
`session/new` shows until it arrives.
"""

from __future__ import annotations

from typing import Literal

from defect_core.config import Settings
from defect_core.providers.base import ModelInfo

__all__ = [
    "ANTHROPIC_MODELS",
    "BEDROCK_MODELS",
    "DEFAULT_CONTEXT_WINDOW",
    "Route",
    "configured_model",
    "models_for",
]

Route = Literal["anthropic", "bedrock"]
"""Where the Messages body goes: the Anthropic API, or AWS Bedrock (same body and events)."""

DEFAULT_CONTEXT_WINDOW = 200_000
ANTHROPIC_MODELS: tuple[ModelInfo, ...] = (
    ModelInfo(
        "claude-sonnet-5-5",
        "Claude Sonnet 5.5",
        "Fast and capable (default).",
        DEFAULT_CONTEXT_WINDOW,
    ),
    ModelInfo(
        "claude-opus-5-5", "Claude Opus 5.5", "Most capable; slower.", DEFAULT_CONTEXT_WINDOW
    ),
    ModelInfo(
        "claude-haiku-5-5", "Claude Haiku 5.5", "Fastest; for simple tasks.", DEFAULT_CONTEXT_WINDOW
    ),
)
"""Built-in choices for the Anthropic API (config `[models] anthropic` replaces them)."""
BEDROCK_MODELS: tuple[ModelInfo, ...] = (
    ModelInfo(
        "us.anthropic.claude-sonnet-4-5-20250929-v1:0",
        "Claude Sonnet 4.5 (US profile)",
        "Bedrock cross-region inference profile (default).",
        DEFAULT_CONTEXT_WINDOW,
    ),
    ModelInfo(
        "us.anthropic.claude-opus-4-5-20251101-v1:0",
        "Claude Opus 4.5 (US profile)",
        "Bedrock cross-region inference profile.",
        DEFAULT_CONTEXT_WINDOW,
    ),
    ModelInfo(
        "us.anthropic.claude-haiku-4-5-20251001-v1:0",
        "Claude Haiku 4.5 (US profile)",
        "Bedrock cross-region inference profile.",
        DEFAULT_CONTEXT_WINDOW,
    ),
)
"""Built-in choices for Bedrock (config `[models] bedrock` replaces them: ids or profiles)."""


def models_for(settings: Settings, route: Route) -> list[ModelInfo]:
    """The models `route` offers: the configured ids, or the built-ins when none are."""
    configured = settings.models_for(route)
    builtins = ANTHROPIC_MODELS if route == "anthropic" else BEDROCK_MODELS
    if not configured:
        return list(builtins)
    known = {m.id: m for m in builtins}
    return [known.get(model_id) or configured_model(model_id) for model_id in configured]


def configured_model(model_id: str) -> ModelInfo:
    """A model named only in configuration. Every Claude model has at least a 200k window;
    for anything else the window is left unknown (the session then assumes a small one)."""
    window = DEFAULT_CONTEXT_WINDOW if "claude" in model_id.lower() else None
    return ModelInfo(model_id, model_id, "configured model", window)
