"""The `LlmProvider` protocol: how the turn runner talks to a model, whatever the wire.

Owns the request the runner hands a provider (`ModelRequest`), the chunks a provider
streams back (`StreamChunk`), usage, `ProviderError`, and the one log line each model call
ends with (`log_call_failed`, `log_call_completed`: every provider reports alike).

Invariants:
- `ModelRequest.messages` has already been through `integrity.repair_outbound`: a provider
  encodes it and nothing else (docs/architecture.md, rule 3).
- A stream ends with exactly one `Completed` chunk or raises `ProviderError`. Deltas before a
  failure were only *shown*; the runner commits to history nothing but a `Completed` message
  (docs/architecture.md, Integrity: the stream-error guard). A provider never yields `Completed`
  for a
  stream that was cut, errored or stalled.
- `ProviderError.retryable` and `retry_after` carry the provider's judgement; the retry loop
  lives in the runner so every provider gets the same bounded, cancellable backoff.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from defect_core.log import get_logger
from defect_core.model import Message, ServerToolUseBlock, ToolSpec, WebSearchResultBlock

log = get_logger("defect.provider")

StopReason = Literal[
    "end_turn",
    "max_tokens",
    "stop_sequence",
    "tool_use",
    "pause_turn",
    "refusal",
    "model_context_window_exceeded",
]


@dataclass(frozen=True, slots=True)
class HostedWebSearch:
    """The provider's own web search, offered to the model in a request (`delegate` mode)."""

    max_uses: int = 5
    allowed_domains: tuple[str, ...] | None = None
    blocked_domains: tuple[str, ...] | None = None


HOSTED_CAPABILITIES = ("web_search",)
"""The capabilities a provider may run itself. A provider that runs some says so with a
`hosted_capabilities` attribute (a frozenset of these names); one without it runs none."""


def hosted_capabilities(provider: object) -> frozenset[str]:
    """What `provider` runs itself (empty for a provider that says nothing)."""
    found: object = getattr(provider, "hosted_capabilities", None)
    if isinstance(found, frozenset | set | tuple):
        return frozenset(str(name) for name in found)
    return frozenset()


@dataclass(frozen=True, slots=True)
class ModelRequest:
    model: str
    system: str
    messages: list[Message]
    tools: tuple[ToolSpec, ...] = ()
    max_tokens: int = 8192
    thinking_budget: int | None = None
    """Extended-thinking budget in tokens, or None for no thinking."""
    web_search: HostedWebSearch | None = None
    """The provider's web search, when the session delegates searching to it."""
    agent: str = ""
    """Who asks: "" for a session's own agent, else a subagent's profile name. Never sent on
    a wire; the offline model answers each agent from its own script."""
    cache_anchor: int | None = None
    """The first message the history is expected to rewrite next (a micro-compaction's first
    cleared result), or None: a provider with a prompt cache keeps the prefix before it."""


@dataclass(frozen=True, slots=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0
    web_search_requests: int = 0
    """Searches the provider ran itself (billed per search)."""

    @property
    def prompt_tokens(self) -> int:
        """The prompt's real size: the baseline `History.record_input_tokens` takes."""
        return self.input_tokens + self.cache_creation_input_tokens + self.cache_read_input_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cache_creation_input_tokens + other.cache_creation_input_tokens,
            self.cache_read_input_tokens + other.cache_read_input_tokens,
            self.web_search_requests + other.web_search_requests,
        )


# --- stream chunks -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TextDelta:
    text: str


@dataclass(frozen=True, slots=True)
class ThinkingDelta:
    text: str


@dataclass(frozen=True, slots=True)
class ToolUseStarted:
    """The model began a tool call; its input is still streaming."""

    id: str
    name: str


@dataclass(frozen=True, slots=True)
class ToolInputDelta:
    id: str
    partial_json: str


@dataclass(frozen=True, slots=True)
class ServerToolStarted:
    """The provider runs one of its own tools (its web search); `block.input` is complete.

    Shown to the user as it happens; it becomes history only inside the `Completed` message."""

    block: ServerToolUseBlock


@dataclass(frozen=True, slots=True)
class ServerToolFinished:
    """The provider's result for a `ServerToolStarted` (it arrives whole)."""

    block: WebSearchResultBlock


@dataclass(frozen=True, slots=True)
class Completed:
    """The whole, well-formed assistant message. Only this is ever committed to history."""

    message: Message
    stop_reason: StopReason
    usage: Usage = field(default_factory=Usage)
    request_id: str | None = None


StreamChunk = (
    TextDelta
    | ThinkingDelta
    | ToolUseStarted
    | ToolInputDelta
    | ServerToolStarted
    | ServerToolFinished
    | Completed
)


CONTEXT_OVERFLOW = "context_overflow"
"""`ProviderError.kind` for a request the model refused as larger than its context window
("prompt is too long"): the runner compacts the history and tries once more."""


class ProviderError(Exception):
    """A model call that failed. `message` is one line a person can act on."""

    def __init__(
        self,
        message: str,
        *,
        kind: str = "provider_error",
        retryable: bool = False,
        retry_after: float | None = None,
        status: int | None = None,
        request_id: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.kind = kind
        self.retryable = retryable
        self.retry_after = retry_after
        self.status = status
        self.request_id = request_id

    def to_data(self) -> dict[str, Any]:
        data: dict[str, Any] = {"kind": self.kind, "retryable": self.retryable}
        if self.status is not None:
            data["status"] = self.status
        if self.request_id:
            data["requestId"] = self.request_id
        return data


class CredentialsMissing(ProviderError):
    """No usable credentials; `message` says exactly what to set."""

    def __init__(self, message: str) -> None:
        super().__init__(message, kind="auth_required", retryable=False)


@dataclass(frozen=True, slots=True)
class ModelInfo:
    id: str
    name: str
    description: str | None = None
    context_window: int | None = None


class LlmProvider(Protocol):
    """A model behind some wire. Implementations: `scripted` (offline), `anthropic`, `bedrock`."""

    @property
    def name(self) -> str:
        """The provider's name: a `[providers.NAME]` table's, or its kind's."""
        ...

    def models(self) -> list[ModelInfo]: ...

    def default_model(self) -> str: ...

    async def list_models(self) -> list[ModelInfo]:
        """The models the provider offers right now (may ask the network: never call it on
        the `session/new` path). Raises `ProviderError` when it cannot say; `models()` is
        then the answer."""
        ...

    def stream(self, request: ModelRequest) -> AsyncGenerator[StreamChunk, None]:
        """Stream one model call. Raises `ProviderError`; ends with one `Completed`."""
        ...


def log_call_failed(
    err: ProviderError, *, provider: str, model: str, request_id: str | None, started: float
) -> None:
    """A model call that failed: its error takes the call's request id if it has none, and the
    log says why (`started`: the call's `time.monotonic()`)."""
    if err.request_id is None:
        err.request_id = request_id
    log.info(
        "model_call_failed",
        provider=provider,
        model=model,
        request_id=err.request_id,
        kind=err.kind,
        status=err.status,
        retryable=err.retryable,
        error=err.message,
        seconds=round(time.monotonic() - started, 3),
    )


def log_call_completed(completed: Completed, *, provider: str, model: str, started: float) -> None:
    """A model call that completed: its stop reason and usage."""
    usage = completed.usage
    log.info(
        "model_call_completed",
        provider=provider,
        model=model,
        request_id=completed.request_id,
        stop_reason=completed.stop_reason,
        input_tokens=usage.input_tokens,
        cache_read_input_tokens=usage.cache_read_input_tokens,
        cache_creation_input_tokens=usage.cache_creation_input_tokens,
        output_tokens=usage.output_tokens,
        web_search_requests=usage.web_search_requests,
        seconds=round(time.monotonic() - started, 3),
    )
