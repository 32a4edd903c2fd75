"""The fake's Chat Completions side: `POST /v1/chat/completions` and its `GET /v1/models`.

Owns how the HTTP handler (`http.py`) answers a request of the second wire: authentication
(a bearer token equal to the fake's key, unless `FakeProvider.chat_key_required` is off, as on
a local server), the rules (`chat_validation.py`: a violation is OpenAI's 400 envelope and
consumes no scripted reply), the cached tokens of the fake's prefix cache when it has one
(`chat_cache.py`), the scripted answer (`chat_stream.py`: SSE `data:` lines ending
with `data: [DONE]`, or one JSON completion without `stream`), the scripted faults (an HTTP
error with `retry-after`, a cut stream, a stall, slow chunks) and the model list in OpenAI's
shape (`{"object": "list", "data": [{"id", "object": "model", "created", "owned_by"}]}`).

Invariant: every error is OpenAI's envelope `{"error": {"message", "type", "param", "code"}}`
with an `x-request-id`; the Messages wire's routes are untouched by this module (a listing is
answered here only when it does not carry the Messages API's `anthropic-version` header).

Why a module of its own: the second wire's routes, beside the first's in `http.py`, without
growing it.
"""

from __future__ import annotations

import dataclasses
import hmac
import json
from collections.abc import Mapping
from typing import Any, Literal, Protocol

from defect_fakeapi.backend import ApiBackend
from defect_fakeapi.chat_stream import DONE, build_chunks, completion, encode_chunk
from defect_fakeapi.chat_validation import ChatWireError, validate_chat_request
from defect_fakeapi.script import HttpError, RequestRecord, Usage, estimate_tokens, random_id


class ChatHandler(Protocol):
    """The request handler (`http.ChatHandler`) as this module answers through it: typed here,
    so `chat` imports nothing above it (contract 17 of docs/layers.md)."""

    @property
    def provider(self) -> ApiBackend: ...

    def send_response(self, code: int, message: str | None = None) -> None: ...

    def send_header(self, keyword: str, value: str) -> None: ...

    def end_headers(self) -> None: ...

    def _send_bytes(self, status: int, body: bytes, headers: Mapping[str, str]) -> None: ...

    def _write_chunk(self, data: bytes) -> None: ...

    def _end_chunks(self) -> None: ...

    def _abort(self) -> None: ...

    def _wait(self, seconds: float | None) -> Literal["elapsed", "stopped", "gone"]: ...


__all__ = ["CHAT_ERROR_TYPES", "retry_headers", "serve_chat", "serve_chat_models"]

CHAT_ERROR_TYPES: dict[int, tuple[str, str | None]] = {
    400: ("invalid_request_error", None),
    401: ("invalid_request_error", "invalid_api_key"),
    403: ("invalid_request_error", "unsupported_country_region_territory"),
    404: ("invalid_request_error", "model_not_found"),
    429: ("requests", "rate_limit_exceeded"),
    500: ("server_error", None),
    503: ("server_error", None),
}
"""OpenAI's `error.type` and `error.code` per status (a scripted error's status decides)."""


def _error(
    handler: ChatHandler,
    record: RequestRecord,
    status: int,
    message: str,
    *,
    rejected: bool,
    param: str | None = None,
    code: str | None = None,
    error_type: str | None = None,
    extra_headers: Mapping[str, str] | None = None,
) -> None:
    kind, default_code = CHAT_ERROR_TYPES.get(status, ("server_error", None))
    kind = error_type or kind
    envelope = {
        "error": {"message": message, "type": kind, "param": param, "code": code or default_code}
    }
    record.status = status
    record.rejected = rejected
    record.error_type = kind
    record.error_message = message
    if record.outcome == "pending":
        record.outcome = "rejected" if rejected else "http_error"
    headers = {"content-type": "application/json", "x-request-id": random_id("req_")}
    headers.update(extra_headers or {})
    handler._send_bytes(status, json.dumps(envelope).encode("utf-8"), headers)


def _auth_error(handler: ChatHandler, record: RequestRecord) -> bool:
    """Answer 401 and return True when the request's credentials are wrong."""
    provider = handler.provider
    if not provider.chat_key_required:
        return False
    authorization = record.headers.get("authorization", "")
    token = authorization[len("Bearer ") :] if authorization.startswith("Bearer ") else ""
    if token and hmac.compare_digest(token, provider.api_key):
        return False
    message = (
        "You didn't provide an API key."
        if not token
        else "Incorrect API key provided. You can find your API key in your account settings."
    )
    _error(handler, record, 401, message, rejected=True)
    return True


def serve_chat_models(handler: ChatHandler, record: RequestRecord) -> None:
    """`GET /v1/models` in OpenAI's shape: every model of `FakeProvider.chat_models`."""
    record.route = "models"
    if _auth_error(handler, record):
        return
    failure = handler.provider.models_error
    if failure is not None:
        _error(handler, record, failure.status, failure.message, rejected=False)
        return
    page = {
        "object": "list",
        "data": [
            {"id": model, "object": "model", "created": 1_700_000_000, "owned_by": "fake"}
            for model in handler.provider.chat_models
        ],
    }
    record.status = 200
    record.outcome = "models"
    headers = {"content-type": "application/json", "x-request-id": random_id("req_")}
    handler._send_bytes(200, json.dumps(page).encode("utf-8"), headers)


def serve_chat(handler: ChatHandler, record: RequestRecord) -> None:
    """`POST /v1/chat/completions`: judged, then answered from the script."""
    record.route = "chat"
    provider = handler.provider
    if _auth_error(handler, record):
        return
    body = record.body
    if isinstance(body, dict) and isinstance(body.get("model"), str):
        record.model = body["model"]
    try:
        validate_chat_request(body, reasoning_models=provider.chat_reasoning_models)
    except ChatWireError as err:
        _error(handler, record, 400, err.message, rejected=True, param=err.param, code=err.code)
        return
    assert isinstance(body, dict)
    reply = provider._next_reply(record)
    if reply is None:
        record.outcome = "exhausted"
        _error(handler, record, 500, provider._exhausted_message(record), rejected=False)
        return
    record.reply = reply
    if reply.http_error is not None:
        failure = reply.http_error
        _error(
            handler,
            record,
            failure.status,
            failure.message,
            rejected=False,
            extra_headers=retry_headers(failure),
        )
        return
    model = reply.model or str(body["model"])
    cache = provider.chat_prompt_cache
    if cache is not None and reply.usage.input_tokens is None:
        usage = cache.account(body)
        record.cache_usage = usage
        counted = Usage(
            input_tokens=usage.input_tokens,
            output_tokens=reply.usage.output_tokens,
            cache_read_input_tokens=usage.cache_read_input_tokens,
        )
        reply = dataclasses.replace(reply, usage=counted)
    estimated = estimate_tokens({"messages": body["messages"], "tools": body.get("tools") or []})
    if body.get("stream") is not True:
        answer = completion(
            reply,
            model=model,
            estimated_tokens=estimated,
            reasoning_field=provider.chat_reasoning_field,
        )
        record.status = 200
        record.outcome = "completed"
        headers = {"content-type": "application/json", "x-request-id": random_id("req_")}
        handler._send_bytes(200, json.dumps(answer).encode("utf-8"), headers)
        return
    options = body.get("stream_options") or {}
    chunks = build_chunks(
        reply,
        model=model,
        include_usage=options.get("include_usage") is True,
        estimated_tokens=estimated,
        reasoning_field=provider.chat_reasoning_field,
    )
    _stream(handler, record, chunks, reply_faults=reply)


def _stream(
    handler: ChatHandler, record: RequestRecord, chunks: list[dict[str, Any]], reply_faults: Any
) -> None:
    reply = reply_faults
    handler.send_response(200)
    handler.send_header("content-type", "text/event-stream; charset=utf-8")
    handler.send_header("cache-control", "no-cache")
    handler.send_header("x-request-id", random_id("req_"))
    handler.send_header("transfer-encoding", "chunked")
    handler.end_headers()
    record.status = 200
    for n, data in enumerate(chunks):
        if reply.cut_after == n:
            record.outcome = "cut"
            if reply.cut_abrupt:
                handler._abort()
            else:
                handler._end_chunks()
            return
        delay = reply.stall_seconds if reply.stall_after == n else None
        stalled = reply.stall_after == n
        if stalled or (reply.chunk_delay > 0 and n > 0):
            waited = handler._wait(delay if stalled else reply.chunk_delay)
            if waited != "elapsed":
                record.outcome = "stalled" if waited == "stopped" else "client_disconnected"
                record.client_disconnected = waited == "gone"
                handler._abort()
                return
        handler._write_chunk(encode_chunk(data))
        handler.provider._progress(record, n + 1)
    handler._write_chunk(DONE)
    handler._end_chunks()
    record.outcome = "completed"


def retry_headers(err: HttpError) -> dict[str, str]:
    """The headers a scripted error asks the client to wait or not retry with (both wires)."""
    headers: dict[str, str] = {}
    if err.retry_after_ms is not None:
        headers["retry-after-ms"] = str(err.retry_after_ms)
    if err.retry_after is not None:
        headers["retry-after"] = str(err.retry_after)
    if err.should_retry is not None:
        headers["x-should-retry"] = "true" if err.should_retry else "false"
    return headers
