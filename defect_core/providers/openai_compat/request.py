"""The body of one Chat Completions call, and what each configured model takes.

Owns `model_settings_for` (a model's `ModelSettings`: configured, else the defaults),
`model_infos` (the configured models as the picker shows them) and `encode_request`: the
`model`, the `messages` (`openai_wire.encode_chat` of the repaired messages, then checked
against the wire's own rules, `openai_wire.chat_violations`), `tools`, `max_tokens`,
`reasoning_effort`, `stream` and `stream_options`.

Invariants:
- A parameter the model does not take is never sent: `reasoning_effort` only to a model
  configured with `reasoning = true` (and only when the session's effort is not `off`; then
  the limit goes as `max_completion_tokens`, which reasoning models require); no `tools` to a
  model configured with `tools = false`, and the system prompt then says why the model has
  none; images only to a model configured with `images = true`.
- `max_tokens` never exceeds the model's `max_output_tokens`.
- An encoded array that breaks a rule of this wire is not sent: `WireRuleBroken` (a defect of
  the conversion, named by its rule) rather than a request the server refuses.
"""

from __future__ import annotations

from typing import Any

from defect_core.config import ModelSettings, ProviderSpec
from defect_core.providers.base import ModelInfo, ModelRequest, ProviderError
from defect_core.providers.openai_wire import chat_violations, encode_chat, encode_tools

__all__ = [
    "NO_TOOLS_NOTE",
    "WireRuleBroken",
    "encode_request",
    "model_infos",
    "model_settings_for",
    "reasoning_effort",
]

DEFAULT_MODEL_SETTINGS = ModelSettings()
NO_TOOLS_NOTE = (
    "\n\nThis model is configured without tools (`tools = false` in "
    '[providers.{provider}.model_settings."{model}"]): no tool can be called in this '
    "conversation, so files cannot be read or changed nor commands run. Answer from what the "
    "conversation holds, and say so when a task needs tools."
)
"""Appended to the system prompt of a model offered no tools (the conversation says why)."""


class WireRuleBroken(ProviderError):
    """The converted copy breaks a rule of the Chat Completions wire (a conversion defect)."""

    def __init__(self, rules: list[str]) -> None:
        super().__init__(
            "the request was not sent: its Chat Completions copy breaks "
            + ", ".join(sorted(set(rules))),
            kind="wire_rule_broken",
        )


def model_settings_for(spec: ProviderSpec, model: str) -> ModelSettings:
    """What `model` takes at the provider `spec` (defaults for a model not configured)."""
    for name, settings in spec.model_settings:
        if name == model:
            return settings
    return DEFAULT_MODEL_SETTINGS


def model_infos(spec: ProviderSpec, ids: list[str] | tuple[str, ...]) -> list[ModelInfo]:
    """`ids` as the picker shows them, each with its configured context window."""
    return [
        ModelInfo(id=i, name=i, context_window=model_settings_for(spec, i).context_window)
        for i in ids
    ]


def reasoning_effort(thinking_budget: int | None) -> str | None:
    """The session's effort as `reasoning_effort` (None: off), from its thinking budget."""
    if not thinking_budget:
        return None
    if thinking_budget <= 2_048:
        return "low"
    return "medium" if thinking_budget <= 8_192 else "high"


def encode_request(spec: ProviderSpec, request: ModelRequest) -> dict[str, Any]:
    """The JSON body of `request` for the model's server."""
    settings = model_settings_for(spec, request.model)
    system = request.system
    if not settings.tools and request.tools:
        system += NO_TOOLS_NOTE.format(provider=spec.name, model=request.model)
    messages = encode_chat(system, request.messages, images=settings.images)
    broken = chat_violations(messages, images=settings.images)
    if broken:
        raise WireRuleBroken([rule.name for rule, _ in broken])
    limit = request.max_tokens
    if settings.max_output_tokens is not None:
        limit = min(limit, settings.max_output_tokens)
    body: dict[str, Any] = {
        "model": request.model,
        "messages": messages,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    effort = reasoning_effort(request.thinking_budget) if settings.reasoning else None
    if effort is not None:
        body["reasoning_effort"] = effort
        body["max_completion_tokens"] = limit
    else:
        body["max_tokens"] = limit
    if settings.tools and request.tools:
        body["tools"] = encode_tools(request.tools)
    return body
