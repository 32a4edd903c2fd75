"""Every failure of a model call as a `ProviderError` the turn runner can act on.

Owns the classification of what can go wrong on either route: an HTTP error answer or an
`event: error` mid-stream (`classify_status_error`), an exception the SDK, httpx or botocore
raised (`translate_exception`), a stream that broke the protocol (`malformed`), and the two
headers that matter for them (`retry_after_seconds`, `request_id_of`).

Invariants:
- No retries here: each error only says whether retrying may help (`retryable`) and how long
  the server asked to wait (`retry_after`, from `retry-after-ms`/`retry-after`); the runner owns
  the bounded, cancellable backoff, so a retry never repeats output the user already saw.
- A prompt larger than the context window is `CONTEXT_OVERFLOW`, whatever the wire calls it:
  the runner compacts and tries once more.
- Messages are one line a person can act on: what failed, on which route, and what to change.
- No SDK import: the SDK's exception classes arrive with the modules `translate_exception` is
  given, so this module stays cheap and its pure parts are tested without the SDK.

Why a room of its own: both routes raise the same SDK exceptions and carry the same error
bodies (Bedrock adds `x-amzn-errortype`); a new error kind, or a new provider's error shape,
is added here and nowhere else.
"""

from __future__ import annotations

import email.utils
import re
import time
from collections.abc import Mapping
from types import ModuleType

from defect_core.config import Settings
from defect_core.log import get_logger
from defect_core.providers.anthropic.catalog import Route
from defect_core.providers.base import CONTEXT_OVERFLOW, CredentialsMissing, ProviderError

__all__ = [
    "classify_status_error",
    "malformed",
    "provider_label",
    "request_id_of",
    "retry_after_seconds",
    "translate_exception",
]

log = get_logger("defect.provider")

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
_CONTEXT_OVERFLOW = re.compile(
    r"prompt is too long|input is too long|too many (input )?tokens|context (window|length)",
    re.IGNORECASE,
)


def provider_label(route: Route) -> str:
    """The service a message names: "Anthropic API" or "Bedrock runtime"."""
    return "Anthropic API" if route == "anthropic" else "Bedrock runtime"


def malformed(detail: str) -> ProviderError:
    """A stream that broke the protocol (a delta for a closed block, unparsable events)."""
    return ProviderError(
        f"the model's response stream was malformed ({detail}); the partial reply was not kept",
        kind="malformed_stream",
        retryable=True,
    )


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


def translate_exception(
    exc: Exception,
    *,
    anthropic: ModuleType,
    httpx: ModuleType,
    route: Route,
    settings: Settings,
    in_stream: bool,
) -> ProviderError:
    """Whatever the call raised - opening it (`in_stream=False`) or reading its events - as a
    `ProviderError`. `anthropic` and `httpx` are the SDK's modules (their exception classes)."""
    if isinstance(exc, ProviderError):
        return exc
    label = provider_label(route)
    if isinstance(exc, anthropic.APIStatusError):
        headers = getattr(exc.response, "headers", None)
        return classify_status_error(exc.status_code, exc.body, headers, route=route)
    if isinstance(exc, anthropic.APITimeoutError):
        return ProviderError(
            f"the {label} did not answer in time (connect timeout "
            f"{settings.connect_timeout:g} s, read timeout "
            f"{settings.read_timeout:g} s)",
            kind="timeout",
            retryable=True,
        )
    if isinstance(exc, anthropic.APIConnectionError):
        cause = exc.__cause__ or exc.__context__
        detail = f": {cause}" if cause else ""
        return ProviderError(
            f"could not reach the {label}{detail}",
            kind="connection",
            retryable=True,
        )
    if isinstance(exc, httpx.TimeoutException):
        return ProviderError(
            f"the model's response stream stalled: nothing arrived for "
            f"{settings.read_timeout:g} s; the partial reply was not kept",
            kind="stall" if in_stream else "timeout",
            retryable=True,
        )
    if isinstance(exc, httpx.TransportError):
        return ProviderError(
            f"the connection to the {label} broke mid-response "
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
        return malformed(f"{type(exc).__name__}: {exc}")
    log.error("model_call_crashed", provider=route, error=repr(exc), exc_info=exc)
    return ProviderError(
        f"unexpected error while calling the {label}: {type(exc).__name__}: {exc}",
        kind="internal",
        retryable=False,
    )
