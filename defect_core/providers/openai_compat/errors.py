"""Every failure of a Chat Completions call as a `ProviderError` the turn runner can act on.

Owns the classification of what the `openai` SDK, its HTTP client and the server can raise
(`translate_exception`): an HTTP error answer (`APIStatusError`: its status, the body's
`error.message` and `error.code`, `Retry-After`), an error inside the stream (`APIError`), a
connection or timeout failure, and `retry_after_seconds`, the wait the server asked for.

Invariants:
- No retries here: an error only says whether retrying may help (`retryable`: 408, 409, 429,
  5xx, the transport) and how long the server asked to wait (`retry_after`, from
  `retry-after-ms` or `retry-after`, seconds or an HTTP date); the runner owns the backoff.
- A prompt larger than the context window is `CONTEXT_OVERFLOW` (`context_length_exceeded`,
  or the servers' "maximum context length" wordings): the runner compacts and tries again.
- No SDK import: the SDK's exception classes arrive with the module `translate_exception` is
  given, so this module is cheap and its pure parts are tested without the SDK.
- Messages are one line a person can act on, naming the provider.
"""

from __future__ import annotations

import email.utils
import re
import time
from collections.abc import Mapping
from types import ModuleType
from typing import Any

from defect_core.providers.base import CONTEXT_OVERFLOW, ProviderError

__all__ = ["retry_after_seconds", "translate_exception"]

_RETRYABLE_STATUS = frozenset({408, 409, 429})
_CONTEXT_OVERFLOW = re.compile(
    r"context[_ ]length[_ ]exceeded|maximum context length|context window|too many tokens|"
    r"prompt is too long",
    re.IGNORECASE,
)


def retry_after_seconds(headers: Mapping[str, str] | None) -> float | None:
    """The wait a response asks for: `retry-after-ms`, else `retry-after` (seconds or date)."""
    if not headers:
        return None
    millis = headers.get("retry-after-ms")
    if millis:
        try:
            return max(0.0, float(millis) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _body_error(body: object) -> tuple[str | None, str | None]:
    """(`error.message`, `error.code`) of an error body, in OpenAI's envelope or bare."""
    if isinstance(body, Mapping):
        inner: Any = body.get("error", body)
        if isinstance(inner, Mapping):
            message = inner.get("message")
            code = inner.get("code")
            return (
                str(message) if message else None,
                str(code) if code else None,
            )
        if isinstance(inner, str):
            return inner, None
    return None, None


def translate_exception(
    exc: BaseException, *, openai: ModuleType, provider: str, in_stream: bool
) -> ProviderError:
    """`exc` (raised by the SDK or its HTTP client) as a `ProviderError`."""
    if isinstance(exc, ProviderError):
        return exc
    if isinstance(exc, openai.APIStatusError):
        headers = exc.response.headers
        request_id = headers.get("x-request-id")
        message, code = _body_error(exc.body)
        message = message or exc.message
        status = exc.status_code
        if code == "context_length_exceeded" or (
            status in (400, 413) and _CONTEXT_OVERFLOW.search(message or "")
        ):
            return ProviderError(
                f"{provider}: the conversation is larger than the model's context window "
                f"({message})",
                kind=CONTEXT_OVERFLOW,
                status=status,
                request_id=request_id,
            )
        if status in (401, 403):
            return ProviderError(
                f"{provider} refused the credentials ({status}: {message}); check the key its "
                "api_key_env names",
                kind="auth_failed",
                status=status,
                request_id=request_id,
            )
        retryable = status in _RETRYABLE_STATUS or status >= 500
        return ProviderError(
            f"{provider} answered {status}: {message}",
            kind="rate_limited" if status == 429 else "provider_error",
            retryable=retryable,
            retry_after=retry_after_seconds(headers),
            status=status,
            request_id=request_id,
        )
    if isinstance(exc, openai.APITimeoutError):
        return ProviderError(
            f"{provider} did not answer in time (read_timeout, connect_timeout)",
            kind="timeout",
            retryable=True,
        )
    if isinstance(exc, openai.APIConnectionError):
        return ProviderError(
            f"could not reach {provider}: {exc.__cause__ or exc}", kind="network", retryable=True
        )
    if isinstance(exc, openai.APIError):  # an `error` object inside the stream
        message, code = _body_error(exc.body)
        text = message or exc.message
        if code == "context_length_exceeded" or _CONTEXT_OVERFLOW.search(text or ""):
            return ProviderError(f"{provider}: {text}", kind=CONTEXT_OVERFLOW)
        return ProviderError(f"{provider} failed mid-stream: {text}", retryable=True)
    where = "while streaming" if in_stream else "before answering"
    return ProviderError(
        f"{provider}: the connection failed {where}: {type(exc).__name__}: {exc}",
        kind="network",
        retryable=True,
    )
