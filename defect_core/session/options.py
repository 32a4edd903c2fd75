"""A session's settings a user may change: mode, model, reasoning effort — and what they mean
for a turn (thinking budget, context window).

Owns the choices offered (`config_options`), the check of a requested value
(`checked_choice`, `check_mode`), and the translations a turn needs: an effort as a thinking
budget (`thinking_budget`), a model as a context window (`context_window`).

Invariants:
- A value is applied only if it is one of the choices offered; anything else is an
  `InvalidOption` naming the choices, so a client can show the user what to pick instead.
- The configured model is always offered, even when the provider's catalogue does not list
  it: what a session runs on is never missing from its own option list.
- Pure functions of their arguments (the session, `state.py`, keeps the values and applies
  them): the same session state always offers the same options.
"""

from __future__ import annotations

from defect_core import policy
from defect_core.config import Settings
from defect_core.errors import InvalidOption
from defect_core.log import get_logger
from defect_core.providers.base import LlmProvider
from defect_core.session.protocol import ConfigOption, OptionChoice

log = get_logger("defect.agent")

DEFAULT_CONTEXT_WINDOW = 100_000
"""For a model whose window is not known: conservative, so compaction starts early."""
EFFORTS: tuple[OptionChoice, ...] = (
    OptionChoice("off", "Off", "No extended thinking."),
    OptionChoice("low", "Low", "A little thinking before answering."),
    OptionChoice("medium", "Medium", "Think before answering (default)."),
    OptionChoice("high", "High", "Think at length; slower and more thorough."),
)
THINKING_BUDGETS = {"off": 0, "low": 2_048, "medium": 8_192, "high": 24_576}
_unknown_windows: set[str] = set()
"""Models already warned about (once per process), whose window was assumed."""


def thinking_budget(effort: str, max_tokens: int) -> int | None:
    """The effort as a thinking budget: ≥ 1024 and < max_tokens, or None (off)."""
    budget = min(THINKING_BUDGETS.get(effort, 0), max_tokens - 1024)
    return budget if budget >= 1024 else None


def context_window(settings: Settings, provider: LlmProvider, model: str) -> int:
    """The model's context window: configured, else the provider's catalogue, else a
    conservative default (with a warning, once per model, saying how to set it)."""
    configured = settings.context_windows.get(model)
    if configured:
        return configured
    for info in provider.models():
        if info.id == model and info.context_window:
            return info.context_window
    if model not in _unknown_windows:
        _unknown_windows.add(model)
        log.warning(
            "context_window_unknown",
            model=model,
            assumed=DEFAULT_CONTEXT_WINDOW,
            fix="set context_windows in the configuration",
        )
    return DEFAULT_CONTEXT_WINDOW


def check_mode(mode_id: str) -> None:
    if not policy.is_known_mode(mode_id):
        known = ", ".join(m.id for m in policy.MODES)
        raise InvalidOption(f"unknown mode {mode_id!r}; available modes: {known}")


def config_options(provider: LlmProvider, mode: str, model: str, effort: str) -> list[ConfigOption]:
    """The options a session offers, with its current values."""
    models = tuple(OptionChoice(m.id, m.name, m.description) for m in provider.models())
    if model not in {c.value for c in models}:
        models = (OptionChoice(model, model, "configured model"), *models)
    return [
        ConfigOption(
            id="mode",
            name="Mode",
            category="mode",
            current=mode,
            choices=tuple(OptionChoice(m.id, m.name, m.description) for m in policy.MODES),
            description="When defect asks before acting",
        ),
        ConfigOption(
            id="model",
            name="Model",
            category="model",
            current=model,
            choices=models,
            description=f"Model used by the {provider.name} provider",
        ),
        ConfigOption(
            id="reasoning_effort",
            name="Reasoning effort",
            category="thought_level",
            current=effort,
            choices=EFFORTS,
            description="How much the model thinks before answering",
        ),
    ]


def checked_choice(options: list[ConfigOption], option_id: str, value: str) -> ConfigOption:
    """The option `option_id`, once `value` is known to be one of its choices."""
    by_id = {o.id: o for o in options}
    option = by_id.get(option_id)
    if option is None:
        raise InvalidOption(f"unknown config option {option_id!r}; available: {', '.join(by_id)}")
    if value not in {c.value for c in option.choices}:
        allowed = ", ".join(c.value for c in option.choices)
        raise InvalidOption(f"invalid value {value!r} for {option_id}; choose one of: {allowed}")
    return option
