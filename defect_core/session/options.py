"""A session's settings a user may change: mode, model, reasoning effort — and what they mean
for a turn (thinking budget, context window).

Owns the choices offered (`config_options`; the model picker's `(provider, model)` pairs,
grouped by provider: `model_choices`), the check of a requested value (`checked_choice`,
`check_mode`, `resolve_model`), and the translations a turn needs: an effort as a thinking
budget (`thinking_budget`), a model as a context window (`context_window`), and the whole
`TurnConfig` a turn runs with (`turn_config`).

Invariants:
- A value is applied only if it is one of the choices offered; anything else is an
  `InvalidOption` naming the choices, so a client can show the user what to pick instead.
- The configured model is always offered, even when the provider's catalogue does not list
  it: what a session runs on is never missing from its own option list.
- A model choice's value is its `ModelSelection.value` (`provider/model`): the same model id
  at two providers is two choices.
- Pure functions of their arguments (the session, `state.py`, keeps the values and applies
  them): the same session state always offers the same options.
"""

from __future__ import annotations

from defect_core import policy
from defect_core.config import Settings, default_selection
from defect_core.errors import InvalidOption
from defect_core.log import get_logger
from defect_core.providers.base import HostedWebSearch, ModelInfo
from defect_core.providers.live import ProviderSet
from defect_core.selection import ModelSelection
from defect_core.session.protocol import ConfigOption, OptionChoice
from defect_core.store import SessionRecord
from defect_core.turn import TurnConfig

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


def context_window(settings: Settings, info: ModelInfo | None, model: str) -> int:
    """The model's context window: configured, else what its provider says (`info`), else a
    conservative default (with a warning, once per model, saying how to set it)."""
    configured = settings.context_windows.get(model)
    if configured:
        return configured
    if info is not None and info.context_window:
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


Candidates = list[tuple[str, list[ModelInfo]]]
"""Each provider's name and the models it offers now (`providers.live.ProviderSet`)."""


def model_choices(candidates: Candidates, current: ModelSelection) -> tuple[OptionChoice, ...]:
    """Every `(provider, model)` pair, grouped by provider (the current one always among
    them); with several providers, each label names its provider too (for clients that show
    the choices without their headings)."""
    several = len(candidates) > 1
    choices: list[OptionChoice] = []
    for provider, models in candidates:
        group: list[OptionChoice] = []
        for info in models:
            label = f"{info.name} ({provider})" if several else info.name
            group.append(
                OptionChoice(
                    ModelSelection(provider, info.id).value, label, info.description, provider
                )
            )
        if provider == current.provider and current.value not in {c.value for c in group}:
            label = f"{current.model} ({provider})" if several else current.model
            group.insert(0, OptionChoice(current.value, label, "configured model", provider))
        choices.extend(group)
    if current.value not in {c.value for c in choices}:  # a provider no longer offered
        choices.insert(
            0, OptionChoice(current.value, current.value, "configured model", current.provider)
        )
    return tuple(choices)


def resolve_model(value: str, choices: tuple[OptionChoice, ...], current: ModelSelection) -> str:
    """The choice `value` names: a `provider/model` value, or a bare model id (what older
    clients send) of the current provider, else of the one provider offering it."""
    values = [c.value for c in choices]
    if value in values:
        return value
    mine = ModelSelection(current.provider, value).value
    if mine in values:
        return mine
    offering = [v for v in values if ModelSelection.parse(v) and v.partition("/")[2] == value]
    return offering[0] if len(offering) == 1 else value


def config_options(
    candidates: Candidates, mode: str, selection: ModelSelection, effort: str
) -> list[ConfigOption]:
    """The options a session offers, with its current values."""
    several = len(candidates) > 1
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
            current=selection.value,
            choices=model_choices(candidates, selection),
            description="Model and provider; a change applies from the next prompt"
            if several
            else f"Model used by the {selection.provider} provider",
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


def first_selection(
    settings: Settings, providers: ProviderSet, record: SessionRecord | None, session_id: str
) -> tuple[ModelSelection, str | None]:
    """The selection a session starts with: the stored one (restored by a load), else the
    configuration's default; and the provider unstamped thinking is taken to come from (the
    stored one: histories written before sessions could switch had only that one)."""
    default = providers.default()
    if record is None:
        return default_selection(settings, default.default_model(), default.name), None
    if providers.get(record.provider) is not None:
        return ModelSelection(record.provider, record.model), record.provider
    fallback = default_selection(settings, default.default_model(), default.name)
    log.warning(
        "stored_provider_unavailable",
        session_id=session_id,
        provider=record.provider,
        model=record.model,
        using=fallback.value,
        fix="configure that provider again ([providers.NAME]) to continue on it",
    )
    return fallback, record.provider


def turn_config(
    settings: Settings,
    providers: ProviderSet,
    selection: ModelSelection,
    session: tuple[str, str, str, str],
    web_search: HostedWebSearch | None,
    unstamped_provider: str | None,
) -> TurnConfig:
    """What one turn runs with: the settings, under the session's choices. `session` is its
    id, system prompt, mode and reasoning effort."""
    session_id, system_prompt, mode, effort = session
    info = providers.model_info(selection.provider, selection.model)
    return TurnConfig(
        session_id=session_id,
        model=selection.model,
        system_prompt=system_prompt,
        mode=mode,
        max_tokens=settings.max_tokens,
        max_turn_requests=settings.max_turn_requests,
        thinking_budget=thinking_budget(effort, settings.max_tokens),
        context_window=context_window(settings, info, selection.model),
        retries=settings.retries,
        retry_base_delay=settings.retry_base_delay,
        retry_max_delay=settings.retry_max_delay,
        web_search=web_search,
        provider=selection.provider,
        unstamped_provider=unstamped_provider,
        max_rounds=settings.goal_max_rounds,
    )
