"""Claude on the Anthropic API and on AWS Bedrock: one wire, two routes, one stream guard.

Owns `AnthropicProvider` (built by `anthropic_provider` and `bedrock_provider`), the request
body it sends (`encode_request`: messages through `anthropic_wire`, cache breakpoints,
thinking), the assembly of a streamed response into one `Completed` message
(`StreamAssembler`), and the translation of every failure the SDK can raise into a
`ProviderError` the turn runner can act on.

Invariants:
- The request is `ModelRequest.messages` (already `repair_outbound`-ed by the runner) encoded by
  `anthropic_wire`, and nothing else: no repair, no reordering here (docs/architecture.md, rule 3).
- Seed 004, layer 3 (the stream-error guard): `Completed` is yielded only for a stream that
  reached `message_stop` (or a final `message_delta` with a stop reason, then a clean end) with
  every content block closed and every tool input parsed. An `event: error`, a cut stream, a
  stall (read timeout), a dropped connection, or `max_tokens` inside a tool input raise
  `ProviderError` instead; the deltas already yielded were only shown, so no partial assistant
  message reaches history and no half-streamed tool call can run.
- No retries here: the SDK client has `max_retries=0`; each error is classified (`retryable`,
  `retry_after` from `retry-after-ms`/`retry-after`) and the runner owns the bounded,
  cancellable backoff, so a retry never repeats output the user already saw.
- At most 4 `cache_control` breakpoints: the last tool, the system prompt, and the last
  cacheable block of the last two user messages (never a thinking block).
- Cheap until used: importing this module, `models()` and `default_model()` load no SDK. The
  `anthropic` SDK (~1-2 s to import) and boto3 are imported on the first `stream`, in a worker
  thread so the event loop keeps serving the editor; the SDK client is then created once and
  reused (its connection pool is most of the per-request overhead saved).
- Credentials are looked up at stream time, never at construction: `initialize` and
  `session/new` never need them; a prompt without them raises `CredentialsMissing` whose
  message says exactly what to set. Secrets are read from the environment only.

Why one module for both routes: Bedrock carries the same Messages body and the same stream
events inside its own envelope; the SDK's `AsyncAnthropicBedrock` unwraps them, so everything
after the client (encoding, the guard, error classification) is shared.
"""

from __future__ import annotations

import asyncio
import email.utils
import importlib
import json
import os
import re
import sys
import threading
import time
from collections.abc import AsyncGenerator, Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Literal

import anyio

from defect_core.config import Settings
from defect_core.log import get_logger
from defect_core.model import (
    ContentBlock,
    Message,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolUseBlock,
)
from defect_core.providers.anthropic_wire import encode_messages
from defect_core.providers.base import (
    CONTEXT_OVERFLOW,
    Completed,
    CredentialsMissing,
    ModelInfo,
    ModelRequest,
    ProviderError,
    StopReason,
    StreamChunk,
    TextDelta,
    ThinkingDelta,
    ToolInputDelta,
    ToolUseStarted,
    Usage,
)

__all__ = [
    "ANTHROPIC_MODELS",
    "BEDROCK_MODELS",
    "AnthropicProvider",
    "StreamAssembler",
    "anthropic_provider",
    "bedrock_provider",
    "classify_status_error",
    "encode_request",
    "request_id_of",
    "retry_after_seconds",
]

log = get_logger("defect.provider")

Route = Literal["anthropic", "bedrock"]

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

BEDROCK_ANTHROPIC_VERSION = "bedrock-2023-05-31"
"""SDK 2.10-2.12 put "2026-10-21" in Bedrock bodies; Bedrock documents this value."""
MAX_CACHE_BREAKPOINTS = 4
MESSAGE_BREAKPOINTS = 2
MIN_THINKING_BUDGET = 1024
EPHEMERAL: dict[str, str] = {"type": "ephemeral"}
_CACHEABLE = frozenset({"text", "image", "document", "tool_use", "tool_result"})
_STOP_REASONS: frozenset[str] = frozenset(
    {
        "end_turn",
        "max_tokens",
        "stop_sequence",
        "tool_use",
        "pause_turn",
        "refusal",
        "model_context_window_exceeded",
    }
)
_RETRYABLE_STATUS = frozenset({408, 409, 429})
_FINAL_STREAM_ERRORS = frozenset(  # lower-cased; any other in-stream error may pass on retry
    {
        "invalid_request_error",
        "authentication_error",
        "permission_error",
        "not_found_error",
        "request_too_large",
        "validationexception",
        "accessdeniedexception",
        "resourcenotfoundexception",
    }
)


# --- the request -----------------------------------------------------------------------------


def encode_request(request: ModelRequest) -> dict[str, Any]:
    """The Messages body for `request` (without `stream`): wire messages, tools, system,
    cache breakpoints (≤ 4) and thinking. Pure: the same request gives the same body."""
    body: dict[str, Any] = {
        "model": request.model,
        "max_tokens": request.max_tokens,
        "messages": encode_messages(request.messages),
    }
    breakpoints = 0
    if request.tools:
        tools: list[dict[str, Any]] = [
            {"name": t.name, "description": t.description, "input_schema": t.input_schema}
            for t in request.tools
        ]
        tools[-1]["cache_control"] = dict(EPHEMERAL)
        breakpoints += 1
        body["tools"] = tools
    if request.system.strip():
        body["system"] = [
            {"type": "text", "text": request.system, "cache_control": dict(EPHEMERAL)}
        ]
        breakpoints += 1
    _mark_latest_user_messages(
        body["messages"], min(MESSAGE_BREAKPOINTS, MAX_CACHE_BREAKPOINTS - breakpoints)
    )
    budget = _thinking_budget(request)
    if budget is not None:
        body["thinking"] = {"type": "enabled", "budget_tokens": budget}
    return body


def _mark_latest_user_messages(messages: list[dict[str, Any]], count: int) -> None:
    """Put a breakpoint on the last cacheable block of each of the last `count` user messages:
    the newest caches the whole prompt for the next request; the one before re-reads what the
    previous request cached, even when the new turn added more than the 20-block look-back."""
    marked = 0
    for message in reversed(messages):
        if marked >= count:
            return
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if not isinstance(content, list):
            continue
        for index in range(len(content) - 1, -1, -1):
            block = content[index]
            if block.get("type") in _CACHEABLE and _has_content(block):
                content[index] = {**block, "cache_control": dict(EPHEMERAL)}
                marked += 1
                break


def _has_content(block: Mapping[str, Any]) -> bool:
    return block.get("type") != "text" or bool(str(block.get("text", "")).strip())


def _thinking_budget(request: ModelRequest) -> int | None:
    """The budget to send: within the API's bounds, and off for a request the API would refuse
    with thinking (a tool loop whose opening assistant message has no thinking block - it was
    produced with thinking off, or its unsigned thinking was dropped by the repair)."""
    budget = request.thinking_budget
    if budget is None:
        return None
    budget = min(budget, request.max_tokens - 1)
    if budget < MIN_THINKING_BUDGET:
        return None
    opener = _loop_opener(request.messages)
    if opener is not None:
        first = opener.content[0] if opener.content else None
        if not isinstance(first, ThinkingBlock | RedactedThinkingBlock):
            log.info("thinking_off_for_request", reason="tool loop opened without thinking")
            return None
    return budget


def _loop_opener(messages: list[Message]) -> Message | None:
    """The assistant message that opened the tool loop in progress, if one is."""

    def is_results(message: Message) -> bool:
        return (
            message.role == "user"
            and bool(message.tool_results())
            and bool(message.content)
            and message.content[0].type == "tool_result"
        )

    last = len(messages) - 1
    if last < 1 or not is_results(messages[last]):
        return None
    opener = last - 1
    while opener - 2 >= 0 and is_results(messages[opener - 1]):
        opener -= 2
    candidate = messages[opener]
    return candidate if candidate.role == "assistant" else None


# --- the response ---------------------------------------------------------------------------


@dataclass
class _Block:
    kind: str
    text: list[str] = field(default_factory=list)
    signature: list[str] = field(default_factory=list)
    data: str = ""
    tool_id: str = ""
    tool_name: str = ""
    start_input: dict[str, Any] = field(default_factory=dict)
    closed: bool = False
    parsed: dict[str, Any] | None = None
    parse_error: str | None = None


class StreamAssembler:
    """Turns the stream's events into deltas as they arrive and, at the end, into one
    well-formed message - or a `ProviderError` when the stream did not really finish."""

    def __init__(self, *, max_tokens: int) -> None:
        self.max_tokens = max_tokens
        self.started = False
        self.stopped = False
        self.stop_reason: str | None = None
        self.blocks: dict[int, _Block] = {}
        self.usage: dict[str, int] = {}
        self.model: str | None = None

    def feed(self, event: Any) -> list[StreamChunk]:
        """The chunks to forward for one SDK stream event (usually zero or one)."""
        kind = event.type
        if kind == "content_block_delta":
            return self._delta(event.index, event.delta)
        if kind == "content_block_start":
            return self._start(event.index, event.content_block)
        if kind == "content_block_stop":
            self._stop(event.index)
        elif kind == "message_start":
            self.started = True
            self.model = getattr(event.message, "model", None)
            self._record_usage(event.message.usage)
        elif kind == "message_delta":
            reason = getattr(event.delta, "stop_reason", None)
            if reason is not None:
                self.stop_reason = str(reason)
            if event.usage is not None:
                self._record_usage(event.usage)
        elif kind == "message_stop":
            self.stopped = True
        return []

    def _record_usage(self, usage: Any) -> None:
        for name in (
            "input_tokens",
            "output_tokens",
            "cache_creation_input_tokens",
            "cache_read_input_tokens",
        ):
            value = getattr(usage, name, None)
            if isinstance(value, int):
                self.usage[name] = value

    def _start(self, index: int, block: Any) -> list[StreamChunk]:
        kind = block.type
        if index in self.blocks:
            raise _malformed(f"content block {index} started twice")
        if kind == "text":
            entry = _Block("text")
            self.blocks[index] = entry
            if block.text:
                entry.text.append(block.text)
                return [TextDelta(block.text)]
            return []
        if kind == "thinking":
            entry = _Block("thinking")
            if block.thinking:
                entry.text.append(block.thinking)
            if getattr(block, "signature", None):
                entry.signature.append(block.signature)
            self.blocks[index] = entry
            return [ThinkingDelta(block.thinking)] if block.thinking else []
        if kind == "redacted_thinking":
            self.blocks[index] = _Block("redacted_thinking", data=block.data)
            return []
        if kind == "tool_use":
            start_input = block.input if isinstance(block.input, dict) else {}
            self.blocks[index] = _Block(
                "tool_use", tool_id=block.id, tool_name=block.name, start_input=start_input
            )
            return [ToolUseStarted(block.id, block.name)]
        # Server-side blocks (web search results, ...) are never requested; keep the index
        # known so its deltas are not taken for a malformed stream.
        self.blocks[index] = _Block(f"ignored:{kind}")
        return []

    def _delta(self, index: int, delta: Any) -> list[StreamChunk]:
        entry = self.blocks.get(index)
        if entry is None or entry.closed:
            raise _malformed(f"a delta for content block {index}, which is not open")
        kind = delta.type
        if kind == "text_delta" and delta.text:
            entry.text.append(delta.text)
            return [TextDelta(delta.text)]
        if kind == "thinking_delta" and delta.thinking:
            entry.text.append(delta.thinking)
            return [ThinkingDelta(delta.thinking)]
        if kind == "input_json_delta" and delta.partial_json:
            entry.text.append(delta.partial_json)
            return [ToolInputDelta(entry.tool_id, delta.partial_json)]
        if kind == "signature_delta":
            entry.signature.append(delta.signature)
        return []

    def _stop(self, index: int) -> None:
        entry = self.blocks.get(index)
        if entry is None:
            raise _malformed(f"content block {index} stopped without a start")
        entry.closed = True
        if entry.kind != "tool_use":
            return
        raw = "".join(entry.text)
        if not raw.strip():
            entry.parsed = dict(entry.start_input)
            return
        try:
            value = json.loads(raw)
        except json.JSONDecodeError as exc:
            entry.parse_error = f"{exc.msg} at character {exc.pos}"
            return
        if isinstance(value, dict):
            entry.parsed = value
        else:
            entry.parse_error = f"the input is a JSON {type(value).__name__}, not an object"

    def finish(self, request_id: str | None) -> Completed:
        """The whole message, or `ProviderError` when the stream did not finish cleanly."""
        cleanly_ended = self.stop_reason is not None and all(b.closed for b in self.blocks.values())
        if not self.started or not (self.stopped or cleanly_ended) or self.stop_reason is None:
            raise ProviderError(
                "the model's response stream ended before the message was complete "
                "(no message_stop); the partial reply was not kept",
                kind="stream_incomplete",
                retryable=True,
                request_id=request_id,
            )
        broken = [b for b in self.blocks.values() if b.kind == "tool_use" and b.parsed is None]
        if broken:
            names = ", ".join(b.tool_name for b in broken)
            if self.stop_reason == "max_tokens":
                raise ProviderError(
                    f"the model's output was cut off by max_tokens ({self.max_tokens}) inside a "
                    f"tool call ({names}), so the call was not run; raise max_tokens "
                    "(`max_tokens` in .defect/config.toml or DEFECT_MAX_TOKENS) or ask for "
                    "smaller steps",
                    kind="max_tokens_in_tool_input",
                    retryable=False,
                    request_id=request_id,
                )
            detail = "; ".join(f"{b.tool_name}: {b.parse_error or 'not closed'}" for b in broken)
            raise ProviderError(
                f"the model sent a tool call whose input is not valid JSON ({detail}); "
                "the call was not run",
                kind="malformed_tool_input",
                retryable=True,
                request_id=request_id,
            )
        content: list[ContentBlock] = []
        for index in sorted(self.blocks):
            block = self._block(self.blocks[index])
            if block is not None:
                content.append(block)
        reason = self.stop_reason
        if reason not in _STOP_REASONS:
            log.info("unknown_stop_reason", stop_reason=reason, request_id=request_id)
            reason = "end_turn"
        usage = Usage(
            input_tokens=self.usage.get("input_tokens", 0),
            output_tokens=self.usage.get("output_tokens", 0),
            cache_creation_input_tokens=self.usage.get("cache_creation_input_tokens", 0),
            cache_read_input_tokens=self.usage.get("cache_read_input_tokens", 0),
        )
        stop: StopReason = reason  # type: ignore[assignment]
        return Completed(
            message=Message(role="assistant", content=tuple(content)),
            stop_reason=stop,
            usage=usage,
            request_id=request_id,
        )

    @staticmethod
    def _block(entry: _Block) -> ContentBlock | None:
        if entry.kind == "text":
            text = "".join(entry.text)
            return TextBlock(text=text) if text else None
        if entry.kind == "thinking":
            # Byte-exact: the API refuses a thinking block whose text or signature changed.
            return ThinkingBlock(
                thinking="".join(entry.text), signature="".join(entry.signature) or None
            )
        if entry.kind == "redacted_thinking":
            return RedactedThinkingBlock(data=entry.data)
        if entry.kind == "tool_use":
            return ToolUseBlock(id=entry.tool_id, name=entry.tool_name, input=entry.parsed or {})
        return None


def _malformed(detail: str) -> ProviderError:
    return ProviderError(
        f"the model's response stream was malformed ({detail}); the partial reply was not kept",
        kind="malformed_stream",
        retryable=True,
    )


# --- errors ---------------------------------------------------------------------------------


def retry_after_seconds(headers: Mapping[str, str] | None) -> float | None:
    """The server's `retry-after-ms` or `retry-after` (seconds or an HTTP date), in seconds."""
    if headers is None:
        return None
    raw_ms = headers.get("retry-after-ms")
    if raw_ms:
        try:
            return max(0.0, float(raw_ms) / 1000)
        except ValueError:
            pass
    raw = headers.get("retry-after")
    if raw:
        try:
            return max(0.0, float(raw))
        except ValueError:
            try:
                when = email.utils.parsedate_to_datetime(raw)
            except (TypeError, ValueError):
                return None
            return max(0.0, when.timestamp() - time.time())
    return None


def request_id_of(headers: Mapping[str, str] | None) -> str | None:
    """`request-id` (Anthropic) or `x-amzn-requestid` (Bedrock)."""
    if headers is None:
        return None
    return headers.get("request-id") or headers.get("x-amzn-requestid") or None


def classify_status_error(
    status: int, body: object, headers: Mapping[str, str] | None, *, route: Route
) -> ProviderError:
    """An HTTP error answer (or, with status 200, an `event: error` mid-stream) as a
    `ProviderError`: the provider's own type and message, whether retrying may help, and
    how long the server asked to wait."""
    error_type, message = _error_parts(body, headers)
    request_id = request_id_of(headers)
    if status == 200:
        retryable = error_type.lower() not in _FINAL_STREAM_ERRORS
        return ProviderError(
            f"the model's response stream failed: {error_type}: {message}",
            kind=error_type,
            retryable=retryable,
            status=200,
            request_id=request_id,
        )
    retryable = status in _RETRYABLE_STATUS or status >= 500
    should_retry = (headers or {}).get("x-should-retry")
    if should_retry == "true":
        retryable = True
    elif should_retry == "false":
        retryable = False
    text = f"{status} {error_type}: {message}"
    if status in (400, 413) and _CONTEXT_OVERFLOW.search(message):
        # The runner compacts and retries once: give it a kind of ours, not the wire's.
        return ProviderError(
            text, kind=CONTEXT_OVERFLOW, retryable=False, status=status, request_id=request_id
        )
    if status == 401 and route == "anthropic":
        text += " (check the key in ANTHROPIC_API_KEY, or the variable `api_key_env` names)"
    elif status in (401, 403) and route == "bedrock":
        text += " (check your AWS credentials and that this model is enabled in the region)"
    return ProviderError(
        text,
        kind=error_type,
        retryable=retryable,
        retry_after=retry_after_seconds(headers) if retryable else None,
        status=status,
        request_id=request_id,
    )


_CONTEXT_OVERFLOW = re.compile(
    r"prompt is too long|input is too long|too many (input )?tokens|context (window|length)",
    re.IGNORECASE,
)


def _error_parts(body: object, headers: Mapping[str, str] | None) -> tuple[str, str]:
    error_type = "error"
    message = ""
    if isinstance(body, Mapping):
        inner = body.get("error")
        if isinstance(inner, Mapping):
            error_type = str(inner.get("type") or error_type)
            message = str(inner.get("message") or "")
        elif isinstance(body.get("message"), str):
            message = str(body["message"])
    elif isinstance(body, str):
        message = body
    amzn = (headers or {}).get("x-amzn-errortype")
    if amzn and error_type == "error":
        error_type = amzn.split(":", 1)[0]
    return error_type, message or "(no message)"


# --- the provider ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _Sdk:
    anthropic: ModuleType
    httpx: ModuleType


def _running_loop() -> object | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:  # not asyncio (trio): one client for the provider's life
        return None


def _import_sdk() -> _Sdk:
    return _Sdk(importlib.import_module("anthropic"), importlib.import_module("httpx2"))


class AnthropicProvider:
    """Claude through the official SDK, on the Anthropic API (`route="anthropic"`) or on
    Bedrock (`route="bedrock"`). Streams always; never retries by itself."""

    def __init__(self, settings: Settings, *, route: Route) -> None:
        self._settings = settings
        self._route: Route = route
        self._sdk: _Sdk | None = None
        self._client: Any = None
        self._client_key: str | None = None
        self._lock: anyio.Lock | None = None
        self._warming: threading.Thread | None = None
        self._loop: object | None = None

    @property
    def name(self) -> str:
        return self._route

    @property
    def route(self) -> Route:
        return self._route

    def models(self) -> list[ModelInfo]:
        configured = self._settings.models_for(self._route)
        builtins = ANTHROPIC_MODELS if self._route == "anthropic" else BEDROCK_MODELS
        if not configured:
            return list(builtins)
        known = {m.id: m for m in builtins}
        return [known.get(model_id) or _configured_model(model_id) for model_id in configured]

    def default_model(self) -> str:
        return self.models()[0].id

    # --- the call ---------------------------------------------------------------------------

    async def stream(self, request: ModelRequest) -> AsyncGenerator[StreamChunk, None]:
        """One model call, streamed. Ends with one `Completed` or raises `ProviderError`."""
        client, sdk = await self._ready()
        body = encode_request(request)
        extra: dict[str, Any] = {}
        if self._route == "bedrock":
            extra["extra_body"] = {"anthropic_version": BEDROCK_ANTHROPIC_VERSION}
        started = time.monotonic()
        request_id: str | None = None
        log.info(
            "model_call_started",
            provider=self._route,
            model=request.model,
            messages=len(request.messages),
            thinking=body.get("thinking", {}).get("budget_tokens"),
        )
        try:
            try:
                stream = await client.messages.create(**body, stream=True, **extra)
            except Exception as exc:
                raise self._translate(exc, sdk, in_stream=False) from None
            request_id = request_id_of(stream.response.headers)
            assembler = StreamAssembler(max_tokens=request.max_tokens)
            try:
                async for event in stream:
                    for chunk in assembler.feed(event):
                        yield chunk
            except ProviderError:
                raise
            except Exception as exc:
                raise self._translate(exc, sdk, in_stream=True) from None
            finally:
                with anyio.CancelScope(shield=True):
                    await stream.close()
            completed = assembler.finish(request_id)
        except ProviderError as err:
            if err.request_id is None:
                err.request_id = request_id
            log.info(
                "model_call_failed",
                provider=self._route,
                model=request.model,
                request_id=err.request_id,
                kind=err.kind,
                status=err.status,
                retryable=err.retryable,
                error=err.message,
                seconds=round(time.monotonic() - started, 3),
            )
            raise
        log.info(
            "model_call_completed",
            provider=self._route,
            model=request.model,
            request_id=request_id,
            stop_reason=completed.stop_reason,
            input_tokens=completed.usage.input_tokens,
            cache_read_input_tokens=completed.usage.cache_read_input_tokens,
            cache_creation_input_tokens=completed.usage.cache_creation_input_tokens,
            output_tokens=completed.usage.output_tokens,
            seconds=round(time.monotonic() - started, 3),
        )
        yield completed

    def _translate(self, exc: Exception, sdk: _Sdk, *, in_stream: bool) -> ProviderError:
        anthropic, httpx = sdk.anthropic, sdk.httpx
        if isinstance(exc, ProviderError):
            return exc
        if isinstance(exc, anthropic.APIStatusError):
            headers = getattr(exc.response, "headers", None)
            return classify_status_error(exc.status_code, exc.body, headers, route=self._route)
        if isinstance(exc, anthropic.APITimeoutError):
            return ProviderError(
                f"the {self._provider_label()} did not answer in time (connect timeout "
                f"{self._settings.connect_timeout:g} s, read timeout "
                f"{self._settings.read_timeout:g} s)",
                kind="timeout",
                retryable=True,
            )
        if isinstance(exc, anthropic.APIConnectionError):
            cause = exc.__cause__ or exc.__context__
            detail = f": {cause}" if cause else ""
            return ProviderError(
                f"could not reach the {self._provider_label()}{detail}",
                kind="connection",
                retryable=True,
            )
        if isinstance(exc, httpx.TimeoutException):
            return ProviderError(
                f"the model's response stream stalled: nothing arrived for "
                f"{self._settings.read_timeout:g} s; the partial reply was not kept",
                kind="stall" if in_stream else "timeout",
                retryable=True,
            )
        if isinstance(exc, httpx.TransportError):
            return ProviderError(
                f"the connection to the {self._provider_label()} broke mid-response "
                f"({type(exc).__name__}: {exc}); the partial reply was not kept",
                kind="stream_incomplete" if in_stream else "connection",
                retryable=True,
            )
        if type(exc).__module__.startswith("botocore") or (
            isinstance(exc, RuntimeError) and "AWS credentials" in str(exc)
        ):
            return CredentialsMissing(
                f"AWS credentials could not be used for Bedrock ({exc}); refresh them "
                "(e.g. `aws sso login`) or set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY"
            )
        if isinstance(exc, ValueError) and in_stream:
            return _malformed(f"{type(exc).__name__}: {exc}")
        log.error("model_call_crashed", provider=self._route, error=repr(exc), exc_info=exc)
        return ProviderError(
            f"unexpected error while calling the {self._provider_label()}: "
            f"{type(exc).__name__}: {exc}",
            kind="internal",
            retryable=False,
        )

    def _provider_label(self) -> str:
        return "Anthropic API" if self._route == "anthropic" else "Bedrock runtime"

    # --- the client -------------------------------------------------------------------------

    def warm(self) -> None:
        """Start importing the SDK in a background thread (idempotent, never raises).

        For a front end to call once it has answered `session/new`: the first prompt then
        finds the ~1-2 s import done instead of waiting for it.
        """
        if self._warming is not None or "anthropic" in sys.modules:
            return

        def load() -> None:
            try:
                _import_sdk()
            except Exception as exc:  # reported properly by the first stream
                log.info("sdk_warm_failed", error=repr(exc))

        self._warming = threading.Thread(target=load, name="defect-sdk-import", daemon=True)
        self._warming.start()

    async def _ready(self) -> tuple[Any, _Sdk]:
        loop = _running_loop()
        if loop is not self._loop:
            # A client's connections belong to the loop that opened them; on another loop
            # (an embedding app, a test suite) start afresh rather than reuse dead sockets.
            self._loop, self._client, self._lock = loop, None, None
        if self._lock is None:
            self._lock = anyio.Lock()
        async with self._lock:
            if self._sdk is None:
                warming = self._warming is not None and self._warming.is_alive()
                if not warming and "anthropic" in sys.modules and "httpx2" in sys.modules:
                    self._sdk = _import_sdk()
                else:
                    self._sdk = await anyio.to_thread.run_sync(_import_sdk)
            if self._route == "anthropic":
                key = self._api_key()
                if self._client is None or key != self._client_key:
                    self._client = self._anthropic_client(self._sdk, key)
                    self._client_key = key
            elif self._client is None:
                self._client = await anyio.to_thread.run_sync(self._bedrock_client, self._sdk)
            return self._client, self._sdk

    def _timeout(self, sdk: _Sdk) -> Any:
        s = self._settings
        return sdk.httpx.Timeout(s.read_timeout, connect=s.connect_timeout)

    def _api_key(self) -> str:
        variable = self._settings.api_key_env
        key = os.environ.get(variable, "").strip()
        if not key:
            named = (
                "ANTHROPIC_API_KEY"
                if variable == "ANTHROPIC_API_KEY"
                else (f"{variable} (named by api_key_env in your defect config)")
            )
            raise CredentialsMissing(
                f"no Anthropic API key: set {named} in the environment defect runs in "
                f"({_chosen_by(self._settings, 'bedrock')})"
            )
        return key

    def _anthropic_client(self, sdk: _Sdk, key: str) -> Any:
        return sdk.anthropic.AsyncAnthropic(
            api_key=key,
            base_url=self._settings.base_url or None,
            max_retries=0,
            timeout=self._timeout(sdk),
            http_client=self._http_client(sdk),
        )

    def _http_client(self, sdk: _Sdk) -> Any:
        """The SDK's defaults (pool limits, keep-alive) without its wrapper's `__del__`, which
        closes a dropped client on whatever loop runs at collection time - a different, live
        loop when the one that opened the sockets is gone, where the close then fails."""
        return sdk.anthropic.DefaultAsyncHttpxClient(timeout=self._timeout(sdk))

    def _bedrock_client(self, sdk: _Sdk) -> Any:
        """Runs in a worker thread: boto3's credential chain may touch files or the network."""
        s = self._settings
        bearer = os.environ.get("AWS_BEARER_TOKEN_BEDROCK", "").strip()
        profile = None if bearer else s.aws_profile
        region = (
            s.aws_region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
        )
        if not bearer or not region:
            import boto3
            import botocore.exceptions

            try:
                session = boto3.Session(profile_name=profile)
            except botocore.exceptions.ProfileNotFound:
                raise CredentialsMissing(
                    f"the AWS profile {profile!r} does not exist: fix AWS_PROFILE (or `profile` "
                    "in [bedrock] of your defect config), or run `aws configure sso`"
                ) from None
            region = region or session.region_name
            if not bearer:
                try:
                    credentials = session.get_credentials()
                except botocore.exceptions.BotoCoreError as exc:
                    raise CredentialsMissing(
                        f"AWS credentials could not be loaded for Bedrock ({exc}); refresh them "
                        "with `aws sso login`, or set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY"
                    ) from None
                if credentials is None:
                    raise CredentialsMissing(
                        "no AWS credentials for Bedrock: set AWS_ACCESS_KEY_ID and "
                        "AWS_SECRET_ACCESS_KEY, or AWS_PROFILE (then `aws sso login` for an SSO "
                        "profile), or run on an instance/role with credentials, or set "
                        f"AWS_BEARER_TOKEN_BEDROCK ({_chosen_by(s, 'anthropic')})"
                    )
        if not region:
            raise CredentialsMissing(
                "no AWS region for Bedrock: set AWS_REGION (e.g. AWS_REGION=us-east-1), or "
                "`region` in [bedrock] of your defect config, or a region for your AWS profile"
            )
        return sdk.anthropic.AsyncAnthropicBedrock(
            aws_region=region,
            aws_profile=profile,
            base_url=s.bedrock_base_url or None,
            max_retries=0,
            timeout=self._timeout(sdk),
            http_client=self._http_client(sdk),
        )

    async def aclose(self) -> None:
        """Close the SDK client's connections (the provider can be used again after)."""
        client, self._client = self._client, None
        if client is not None and self._loop is _running_loop():
            await client.close()


def _configured_model(model_id: str) -> ModelInfo:
    """A model named only in configuration. Every Claude model has at least a 200k window;
    for anything else the window is left unknown (the session then assumes a small one)."""
    window = DEFAULT_CONTEXT_WINDOW if "claude" in model_id.lower() else None
    return ModelInfo(model_id, model_id, "configured model", window)


def anthropic_provider(settings: Settings) -> AnthropicProvider:
    """Claude on the Anthropic API (ANTHROPIC_API_KEY; ANTHROPIC_BASE_URL or `base_url`)."""
    return AnthropicProvider(settings, route="anthropic")


def bedrock_provider(settings: Settings) -> AnthropicProvider:
    """Claude on AWS Bedrock (the boto3 credential chain; AWS_REGION or `region`)."""
    return AnthropicProvider(settings, route="bedrock")


def _chosen_by(settings: Settings, other: str) -> str:
    """Which setting chose this provider, and how to choose `other` in that same place."""
    origin = settings.provider_origin
    chosen = f"the provider {settings.provider!r} was chosen by {origin}"
    if origin == "the --provider flag":
        return f"{chosen}; or pass --provider {other}"
    if origin == "DEFECT_PROVIDER":
        return f"{chosen}; or set DEFECT_PROVIDER={other}"
    if origin == "the default":
        return f"{chosen}; or set DEFECT_PROVIDER={other}"
    return f'{chosen}; or set provider = "{other}" there'
