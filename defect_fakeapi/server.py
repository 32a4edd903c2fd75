"""A strict fake of the Anthropic Messages API and of Bedrock's streaming invoke, on 127.0.0.1.

Owns: `FakeProvider` (a threaded HTTP server and its script of replies), `Reply` and the
scripted blocks it streams, `RequestRecord` (what the fake saw), and the CLI
`python -m defect_fakeapi.server --port N --script FILE.json`, which serves a script to
another process and prints the base URL, and nothing else, on stdout.

Invariant: the fake behaves like the real service at the network edge and nowhere else. Every
request is authenticated (API key or bearer token; SigV4 header shape for Bedrock), every body
is checked by `wire_validator` (a violation answers the API's own 400 and consumes no scripted
reply), and every answer is what the real service sends: the error envelope with a
`request-id`, SSE with `event:` lines in the real order, Bedrock event-stream frames with CRCs.
Faults (HTTP errors with `retry-after-ms`, `event: error` mid-stream, cut streams, stalls, slow
streams, `max_tokens` cuts inside a tool input) are scripted per reply, never random.

Why: the agent is only as correct as the requests it sends and its handling of what comes
back. Mocks inside the SDK would test the agent against our beliefs about the SDK; this fake is
driven through the real `anthropic` SDK (`base_url=fake.url`), so only the network is fake.

Empty script: with no `default_reply`, a request that finds the script empty gets a 500
`api_error` with `x-should-retry: false` (so the SDK does not retry it) and a message naming
the request; an unexpected extra request therefore fails loudly instead of getting an answer.

The server runs in its own threads, so it serves sync tests and async (anyio/asyncio) tests
alike without touching the test's event loop; `stop()` returns promptly even mid-stall.

Routes: `POST /v1/messages` (streaming only: a request without `stream: true` gets a 400
naming the fake), `POST /v1/messages/count_tokens` (`estimate_tokens`: UTF-8 bytes of system,
messages and tools / 4), `POST /model/{id}/invoke-with-response-stream` (Bedrock; SigV4
header shape and access key id checked, the signature itself is not). Anything else is a 404.

CLI scripts are a JSON list of replies in `Reply.to_dict` form or the shorthands
`{"text": …}`, `{"tool_use": {"id", "name", "input"}}`, `{"thinking": …, "then": {…}}`,
`{"error": {"status": 529, "retry_after_ms": 10}}`, plus any `Reply` field (`cut_after`,
`stall_after`, `chunk_delay`, …). `--request-log FILE` appends one JSON line per request.
"""

from __future__ import annotations

import argparse
import base64
import collections
import contextlib
import dataclasses
import hashlib
import hmac
import json
import os
import re
import secrets
import select
import signal
import socket
import string
import sys
import threading
import time
import urllib.parse
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

from defect_fakeapi.eventstream import chunk_frame, exception_frame
from defect_fakeapi.validation import WireError, validate_bedrock_body, validate_request

__all__ = [
    "DEFAULT_API_KEY",
    "DEFAULT_AWS_ACCESS_KEY_ID",
    "DEFAULT_AWS_SECRET_KEY",
    "FakeProvider",
    "HttpError",
    "RedactedThinkingBlock",
    "Reply",
    "RequestRecord",
    "Responder",
    "ScriptBlock",
    "TextBlock",
    "ThinkingBlock",
    "ToolUseBlock",
    "Usage",
    "estimate_tokens",
    "load_script",
    "main",
    "write_script",
]

DEFAULT_API_KEY = "sk-ant-api03-fake-provider-test-key"
DEFAULT_AWS_ACCESS_KEY_ID = "AKIDTEST"
DEFAULT_AWS_SECRET_KEY = "fake-secret-key"  # the fake does not check signatures; any works
ANTHROPIC_VERSION_HEADER = "2023-06-01"

ERROR_TYPES: dict[int, str] = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}
DEFAULT_ERROR_MESSAGES: dict[int, str] = {
    400: "Invalid request",
    401: "invalid x-api-key",
    403: "Your API key does not have permission to use the specified resource.",
    404: "Not found",
    413: "Request exceeds the maximum allowed number of bytes.",
    429: "Number of requests has exceeded your rate limit. Please try again later.",
    500: "Internal server error",
    529: "Overloaded",
}
BEDROCK_ERROR_TYPES: dict[int, str] = {
    400: "ValidationException",
    401: "AccessDeniedException",
    403: "AccessDeniedException",
    404: "ResourceNotFoundException",
    408: "ModelTimeoutException",
    424: "ModelErrorException",
    429: "ThrottlingException",
    500: "InternalServerException",
    503: "ServiceUnavailableException",
    529: "ServiceUnavailableException",
}
BEDROCK_STREAM_EXCEPTIONS: dict[str, str] = {
    "overloaded_error": "throttlingException",
    "rate_limit_error": "throttlingException",
    "api_error": "internalServerException",
    "invalid_request_error": "validationException",
    "timeout_error": "modelTimeoutException",
}

_BEDROCK_PATH = re.compile(r"^/model/(?P<model>[^/]+)/invoke-with-response-stream$")
_SIGV4 = re.compile(
    r"^AWS4-HMAC-SHA256 Credential=(?P<key>[^/]+)/(?P<date>\d{8})/(?P<region>[^/]+)/"
    r"(?P<service>[^/]+)/aws4_request, ?SignedHeaders=(?P<signed>[^,]+), ?"
    r"Signature=(?P<signature>[0-9a-f]{64})$"
)
_ID_ALPHABET = string.ascii_letters + string.digits


def _random_id(prefix: str) -> str:
    return prefix + "".join(secrets.choice(_ID_ALPHABET) for _ in range(24))


def estimate_tokens(body: Mapping[str, Any]) -> int:
    """The fake's token count for a request: UTF-8 bytes of system, messages and tools / 4."""
    counted = {key: body[key] for key in ("system", "messages", "tools") if key in body}
    size = len(json.dumps(counted, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))
    return max(1, size // 4)


# --------------------------------------------------------------------------------------------
# Script


@dataclass(frozen=True)
class TextBlock:
    """A `text` block, streamed as `text_delta` chunks."""

    text: str


@dataclass(frozen=True)
class ThinkingBlock:
    """A `thinking` block; `signature=None` means the fake mints (and later checks) one."""

    thinking: str
    signature: str | None = None


@dataclass(frozen=True)
class RedactedThinkingBlock:
    """A `redacted_thinking` block with opaque `data`."""

    data: str


@dataclass(frozen=True)
class ToolUseBlock:
    """A `tool_use` block; the input is streamed as `input_json_delta` chunks.

    `raw_json` replaces the streamed JSON (for a cut-off input); `input` is then ignored.
    """

    id: str
    name: str
    input: Mapping[str, Any] = field(default_factory=dict)
    raw_json: str | None = None


ScriptBlock = TextBlock | ThinkingBlock | RedactedThinkingBlock | ToolUseBlock


@dataclass(frozen=True)
class Usage:
    """Usage to report; `None` input/output counts are estimated from the request/reply."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0


@dataclass(frozen=True)
class HttpError:
    """An HTTP error answer instead of a stream (the real envelope, or Bedrock's)."""

    status: int
    error_type: str
    message: str
    retry_after_ms: int | None = None
    retry_after: int | None = None
    should_retry: bool | None = None


def _tool_id() -> str:
    return _random_id("toolu_01")


@dataclass(frozen=True)
class Reply:
    """One scripted answer. Build with the constructors, adjust with the `with_*`/fault methods.

    Fault positions count stream events written before the fault (`message_start` is event 1;
    `ping` events are not counted): `error_after=0` sends `event: error` right after headers.
    """

    blocks: tuple[ScriptBlock, ...] = ()
    stop_reason: str | None = "end_turn"
    stop_sequence: str | None = None
    usage: Usage = Usage()
    http_error: HttpError | None = None
    error_after: int | None = None
    stream_error_type: str = "overloaded_error"
    stream_error_message: str = "Overloaded"
    bedrock_exception: str | None = None
    cut_after: int | None = None
    cut_abrupt: bool = False
    stall_after: int | None = None
    stall_seconds: float | None = None
    chunk_delay: float = 0.0
    chunk_size: int = 16
    ping: bool = True
    model: str | None = None

    # -- constructors ----------------------------------------------------------------------

    @classmethod
    def of(
        cls,
        blocks: Sequence[ScriptBlock],
        *,
        stop_reason: str | None = None,
        usage: Usage | None = None,
    ) -> Reply:
        """A multi-block reply; stop_reason defaults to `tool_use` when a tool is used."""
        if stop_reason is None:
            uses_tool = any(isinstance(b, ToolUseBlock) for b in blocks)
            stop_reason = "tool_use" if uses_tool else "end_turn"
        return cls(blocks=tuple(blocks), stop_reason=stop_reason, usage=usage or Usage())

    @classmethod
    def text(cls, text: str, *, stop_reason: str = "end_turn", usage: Usage | None = None) -> Reply:
        """A text reply."""
        return cls.of([TextBlock(text)], stop_reason=stop_reason, usage=usage)

    @classmethod
    def tool_use(
        cls,
        id: str | None,
        name: str,
        input: Mapping[str, Any],
        *,
        text_before: str | None = None,
        usage: Usage | None = None,
    ) -> Reply:
        """A `tool_use` reply (stop_reason `tool_use`); `id=None` generates a `toolu_01…` id."""
        blocks: list[ScriptBlock] = [TextBlock(text_before)] if text_before else []
        blocks.append(ToolUseBlock(id or _tool_id(), name, dict(input)))
        return cls.of(blocks, stop_reason="tool_use", usage=usage)

    @classmethod
    def thinking(
        cls, thinking: str, then: Reply | None = None, *, signature: str | None = None
    ) -> Reply:
        """A thinking block (signed by the fake unless `signature` is given), then `then`."""
        rest = then if then is not None else cls(stop_reason="end_turn")
        return dataclasses.replace(rest, blocks=(ThinkingBlock(thinking, signature), *rest.blocks))

    @classmethod
    def max_tokens_tool_use(
        cls,
        id: str | None,
        name: str,
        input: Mapping[str, Any],
        *,
        keep_chars: int | None = None,
        text_before: str | None = None,
    ) -> Reply:
        """Stop at `max_tokens` inside a tool input: the streamed JSON is cut after
        `keep_chars` characters (default: half)."""
        full = json.dumps(dict(input))
        keep = len(full) // 2 if keep_chars is None else keep_chars
        blocks: list[ScriptBlock] = [TextBlock(text_before)] if text_before else []
        blocks.append(ToolUseBlock(id or _tool_id(), name, dict(input), raw_json=full[:keep]))
        return cls.of(blocks, stop_reason="max_tokens")

    @classmethod
    def error(
        cls,
        status: int,
        message: str | None = None,
        *,
        error_type: str | None = None,
        retry_after_ms: int | None = None,
        retry_after: int | None = None,
        should_retry: bool | None = None,
    ) -> Reply:
        """An HTTP error answer: 529 overloaded_error, 429 rate_limit_error, 500, 400, …

        Prefer `retry_after_ms`: the SDK really sleeps for `retry-after` seconds.
        """
        return cls(
            http_error=HttpError(
                status=status,
                error_type=error_type or ERROR_TYPES.get(status, "api_error"),
                message=message or DEFAULT_ERROR_MESSAGES.get(status, "Error"),
                retry_after_ms=retry_after_ms,
                retry_after=retry_after,
                should_retry=should_retry,
            )
        )

    @classmethod
    def overloaded(cls, *, retry_after_ms: int | None = 10) -> Reply:
        """HTTP 529 `overloaded_error`."""
        return cls.error(529, retry_after_ms=retry_after_ms)

    @classmethod
    def rate_limited(cls, *, retry_after_ms: int | None = 10) -> Reply:
        """HTTP 429 `rate_limit_error`."""
        return cls.error(429, retry_after_ms=retry_after_ms)

    # -- adjustments -----------------------------------------------------------------------

    def with_usage(
        self,
        *,
        input_tokens: int | None = None,
        output_tokens: int | None = None,
        cache_creation_input_tokens: int = 0,
        cache_read_input_tokens: int = 0,
    ) -> Reply:
        """Report this usage instead of the estimate."""
        usage = Usage(
            input_tokens, output_tokens, cache_creation_input_tokens, cache_read_input_tokens
        )
        return dataclasses.replace(self, usage=usage)

    def with_stop_reason(self, stop_reason: str, stop_sequence: str | None = None) -> Reply:
        """Report this stop_reason (and stop_sequence) in `message_delta`."""
        return dataclasses.replace(self, stop_reason=stop_reason, stop_sequence=stop_sequence)

    def with_model(self, model: str) -> Reply:
        """Report this model instead of echoing the request's."""
        return dataclasses.replace(self, model=model)

    def error_mid_stream(
        self,
        after: int,
        *,
        error_type: str = "overloaded_error",
        message: str = "Overloaded",
        bedrock_exception: str | None = None,
    ) -> Reply:
        """Send `event: error` (Bedrock: an exception frame) after `after` events, then end."""
        return dataclasses.replace(
            self,
            error_after=after,
            stream_error_type=error_type,
            stream_error_message=message,
            bedrock_exception=bedrock_exception,
        )

    def cut(self, after: int, *, abrupt: bool = False) -> Reply:
        """End the stream after `after` events, before `message_stop`.

        By default the HTTP body ends cleanly (the SDK raises nothing; stop_reason stays None);
        `abrupt=True` closes the connection mid-body (the SDK raises a protocol error).
        """
        return dataclasses.replace(self, cut_after=after, cut_abrupt=abrupt)

    def stall(self, after: int, *, seconds: float | None = None) -> Reply:
        """Stop sending after `after` events for `seconds` (then resume), or, with None, until
        the client goes away or the server stops."""
        return dataclasses.replace(self, stall_after=after, stall_seconds=seconds)

    def slow(self, chunk_delay: float) -> Reply:
        """Wait `chunk_delay` seconds before each event after the first."""
        return dataclasses.replace(self, chunk_delay=chunk_delay)

    def without_ping(self) -> Reply:
        """Send no `ping` event."""
        return dataclasses.replace(self, ping=False)

    # -- JSON scripts ----------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form, read back by `Reply.from_dict`."""
        data: dict[str, Any] = {}
        defaults = Reply()
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "blocks":
                if value:
                    data["blocks"] = [_block_to_dict(b) for b in value]
            elif f.name == "usage":
                if value != Usage():
                    data["usage"] = dataclasses.asdict(value)
            elif f.name == "http_error":
                if value is not None:
                    data["error"] = dataclasses.asdict(value)
            elif value != getattr(defaults, f.name):
                data[f.name] = value
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Reply:
        """Read a reply from JSON. Besides the `to_dict` form, shorthands are accepted:
        `{"text": "hi"}`, `{"tool_use": {"id", "name", "input"}, "text_before": …}`,
        `{"thinking": "…", "then": {…}}`, `{"error": {"status": 529, …}}`."""
        data = dict(data)
        if "text" in data:
            base = cls.text(data.pop("text"))
        elif "tool_use" in data:
            use = data.pop("tool_use")
            base = cls.tool_use(
                use.get("id"),
                use["name"],
                use.get("input", {}),
                text_before=data.pop("text_before", None),
            )
        elif "thinking" in data:
            then = data.pop("then", None)
            base = cls.thinking(
                data.pop("thinking"),
                cls.from_dict(then) if then is not None else None,
                signature=data.pop("signature", None),
            )
        elif "error" in data:
            err = dict(data.pop("error"))
            status = int(err.pop("status"))
            kind = err.pop("error_type", err.pop("type", None))
            base = cls.error(status, err.pop("message", None), error_type=kind, **err)
        else:
            blocks = [_block_from_dict(b) for b in data.pop("blocks", [])]
            base = cls.of(blocks, stop_reason=data.pop("stop_reason", None))
        if "usage" in data:
            base = dataclasses.replace(base, usage=Usage(**data.pop("usage")))
        names = {f.name for f in dataclasses.fields(cls)} - {"blocks", "usage", "http_error"}
        unknown = set(data) - names
        if unknown:
            raise ValueError(f"unknown reply keys: {sorted(unknown)}")
        return dataclasses.replace(base, **data)


def _block_to_dict(block: ScriptBlock) -> dict[str, Any]:
    kinds: dict[type, str] = {
        TextBlock: "text",
        ThinkingBlock: "thinking",
        RedactedThinkingBlock: "redacted_thinking",
        ToolUseBlock: "tool_use",
    }
    data = {"type": kinds[type(block)], **dataclasses.asdict(block)}
    return {k: v for k, v in data.items() if v is not None}


def _block_from_dict(data: Mapping[str, Any]) -> ScriptBlock:
    data = dict(data)
    kind = data.pop("type")
    if kind == "text":
        return TextBlock(**data)
    if kind == "thinking":
        return ThinkingBlock(**data)
    if kind == "redacted_thinking":
        return RedactedThinkingBlock(**data)
    if kind == "tool_use":
        if "id" not in data:
            data["id"] = _tool_id()
        return ToolUseBlock(**data)
    raise ValueError(f"unknown block type {kind!r}")


def load_script(path: str | os.PathLike[str]) -> list[Reply]:
    """Read a JSON list of replies (see `Reply.from_dict`)."""
    items = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(items, list):
        raise ValueError("a script is a JSON list of replies")
    return [Reply.from_dict(item) for item in items]


def write_script(path: str | os.PathLike[str], replies: Sequence[Reply]) -> None:
    """Write replies as a JSON script for the CLI."""
    Path(path).write_text(json.dumps([r.to_dict() for r in replies], indent=2), encoding="utf-8")


# --------------------------------------------------------------------------------------------
# What the fake saw


Outcome = Literal[
    "pending",
    "rejected",
    "exhausted",
    "http_error",
    "count_tokens",
    "completed",
    "stream_error",
    "cut",
    "stalled",
    "client_disconnected",
    "not_found",
]


@dataclass
class RequestRecord:
    """One request as the fake saw it, and how it was answered."""

    index: int
    method: str
    path: str
    route: Literal["anthropic", "count_tokens", "bedrock", "unknown"]
    headers: dict[str, str]
    raw_body: bytes
    body: Any
    model: str | None = None
    status: int | None = None
    outcome: Outcome = "pending"
    rejected: bool = False
    error_type: str | None = None
    error_message: str | None = None
    reply: Reply | None = None
    events_sent: int = 0
    client_disconnected: bool = False
    done: threading.Event = field(default_factory=threading.Event, repr=False, compare=False)

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The request's `messages` (empty when the body had none)."""
        if isinstance(self.body, dict) and isinstance(self.body.get("messages"), list):
            return list(self.body["messages"])
        return []

    def to_json(self) -> dict[str, Any]:
        """JSON-ready summary (for the CLI's request log)."""
        return {
            "index": self.index,
            "method": self.method,
            "path": self.path,
            "route": self.route,
            "model": self.model,
            "status": self.status,
            "outcome": self.outcome,
            "rejected": self.rejected,
            "error_type": self.error_type,
            "error_message": self.error_message,
            "events_sent": self.events_sent,
            "client_disconnected": self.client_disconnected,
            "body": self.body,
        }


Responder = Callable[[RequestRecord], Reply]
"""A scripted entry computed from the request (for replies that depend on what was sent)."""


# --------------------------------------------------------------------------------------------
# Server


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], provider: FakeProvider) -> None:
        self.provider = provider
        super().__init__(address, _Handler)


class _ClientGone(Exception):
    """The client closed the connection (or the server is stopping) mid-answer."""


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    # -- plumbing --------------------------------------------------------------------------

    def setup(self) -> None:
        super().setup()
        self.server.provider._register(self.connection)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.provider._unregister(self.connection)

    def log_message(self, format: str, *args: Any) -> None:
        return  # keep stderr (and the CLI's stdout) quiet

    @property
    def provider(self) -> FakeProvider:
        return self.server.provider

    def _read_body(self) -> bytes:
        length = int(self.headers.get("content-length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def _send_bytes(self, status: int, body: bytes, headers: Mapping[str, str]) -> None:
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _write_chunk(self, data: bytes) -> None:
        try:
            self.wfile.write(f"{len(data):X}\r\n".encode("ascii") + data + b"\r\n")
        except OSError as err:
            raise _ClientGone from err

    def _end_chunks(self) -> None:
        try:
            self.wfile.write(b"0\r\n\r\n")
        except OSError as err:
            raise _ClientGone from err

    def _abort(self) -> None:
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)

    def _wait(self, seconds: float | None) -> Literal["elapsed", "stopped", "gone"]:
        """Sleep, waking early when the server stops or the client hangs up."""
        stop = self.provider._stopping
        deadline = None if seconds is None else time.monotonic() + seconds
        while True:
            if stop.is_set():
                return "stopped"
            remaining = 0.05 if deadline is None else deadline - time.monotonic()
            if remaining <= 0:
                return "elapsed"
            step = min(0.05, remaining)
            try:
                readable, _, _ = select.select([self.connection], [], [], step)
            except (OSError, ValueError):
                return "gone"
            if readable:
                try:
                    peek = self.connection.recv(1, socket.MSG_PEEK)
                except OSError:
                    return "gone"
                if not peek:
                    return "stopped" if stop.is_set() else "gone"
                stop.wait(step)  # the client sent more (pipelining): not a hang-up

    # -- routing ---------------------------------------------------------------------------

    def do_POST(self) -> None:
        raw = self._read_body()
        path = urllib.parse.urlsplit(self.path).path
        headers = {k.lower(): v for k, v in self.headers.items()}
        record = self.provider._new_record("POST", path, headers, raw)
        try:
            if path == "/v1/messages":
                self._anthropic(record, count_tokens=False)
            elif path == "/v1/messages/count_tokens":
                self._anthropic(record, count_tokens=True)
            elif match := _BEDROCK_PATH.match(path):
                record.route = "bedrock"
                record.model = urllib.parse.unquote(match.group("model"))
                self._bedrock(record)
            else:
                self._not_found(record)
        except _ClientGone:
            record.client_disconnected = True
            record.outcome = "client_disconnected"
            self.close_connection = True
        finally:
            self.provider._complete(record)

    def do_GET(self) -> None:
        path = urllib.parse.urlsplit(self.path).path
        headers = {k.lower(): v for k, v in self.headers.items()}
        record = self.provider._new_record("GET", path, headers, b"")
        try:
            self._not_found(record)
        finally:
            self.provider._complete(record)

    def _not_found(self, record: RequestRecord) -> None:
        record.outcome = "not_found"
        self._anthropic_error(record, 404, "not_found_error", "Not Found", rejected=True)

    # -- Anthropic -------------------------------------------------------------------------

    def _anthropic_error(
        self,
        record: RequestRecord,
        status: int,
        error_type: str,
        message: str,
        *,
        rejected: bool,
        extra_headers: Mapping[str, str] | None = None,
    ) -> None:
        request_id = _random_id("req_011C")
        envelope = {
            "type": "error",
            "error": {"type": error_type, "message": message},
            "request_id": request_id,
        }
        record.status = status
        record.rejected = rejected
        record.error_type = error_type
        record.error_message = message
        if record.outcome == "pending":
            record.outcome = "rejected" if rejected else "http_error"
        headers = {"content-type": "application/json", "request-id": request_id}
        headers.update(extra_headers or {})
        self._send_bytes(status, json.dumps(envelope).encode("utf-8"), headers)

    def _check_api_key(self, record: RequestRecord) -> str | None:
        """The 401 message for bad credentials, or None when they are good."""
        key = self.provider.api_key
        x_api_key = record.headers.get("x-api-key")
        authorization = record.headers.get("authorization", "")
        if x_api_key is not None:
            return None if hmac.compare_digest(x_api_key, key) else "invalid x-api-key"
        if authorization.startswith("Bearer "):
            token = authorization[len("Bearer ") :]
            return None if hmac.compare_digest(token, key) else "Invalid bearer token"
        return "x-api-key header is required"

    def _anthropic(self, record: RequestRecord, *, count_tokens: bool) -> None:
        record.route = "count_tokens" if count_tokens else "anthropic"
        auth_error = self._check_api_key(record)
        if auth_error is not None:
            self._anthropic_error(record, 401, "authentication_error", auth_error, rejected=True)
            return
        if "anthropic-version" not in record.headers:
            message = "anthropic-version: header is required"
            self._anthropic_error(record, 400, "invalid_request_error", message, rejected=True)
            return
        if record.body is None:
            message = "There was an issue with your request body: invalid JSON"  # judged
            self._anthropic_error(record, 400, "invalid_request_error", message, rejected=True)
            return
        if isinstance(record.body, dict):
            model = record.body.get("model")
            record.model = model if isinstance(model, str) else None
        try:
            validate_request(
                record.body,
                allow_prefill=self.provider.allow_prefill,
                allow_split_results=self.provider.allow_split_results,
                signature_checker=self.provider.check_signature,
                count_tokens=count_tokens,
            )
        except WireError as err:
            self._anthropic_error(record, err.status, err.error_type, err.message, rejected=True)
            return
        if count_tokens:
            record.status = 200
            record.outcome = "count_tokens"
            tokens = {"input_tokens": estimate_tokens(record.body)}
            headers = {"content-type": "application/json", "request-id": _random_id("req_011C")}
            self._send_bytes(200, json.dumps(tokens).encode("utf-8"), headers)
            return
        if record.body.get("stream") is not True:
            message = (
                "stream: the fake provider only serves streaming requests; send `stream: true`"
            )
            self._anthropic_error(record, 400, "invalid_request_error", message, rejected=True)
            return
        reply = self.provider._next_reply(record)
        if reply is None:
            message = self.provider._exhausted_message(record)
            record.outcome = "exhausted"
            headers = {"x-should-retry": "false"}
            self._anthropic_error(
                record, 500, "api_error", message, rejected=False, extra_headers=headers
            )
            return
        record.reply = reply
        if reply.http_error is not None:
            failure = reply.http_error
            self._anthropic_error(
                record,
                failure.status,
                failure.error_type,
                failure.message,
                rejected=False,
                extra_headers=_retry_headers(failure),
            )
            return
        self._stream(record, reply, bedrock=False)

    # -- Bedrock ---------------------------------------------------------------------------

    def _bedrock_error(
        self,
        record: RequestRecord,
        status: int,
        error_type: str,
        message: str,
        *,
        rejected: bool,
        extra_headers: Mapping[str, str] | None = None,
    ) -> None:
        record.status = status
        record.rejected = rejected
        record.error_type = error_type
        record.error_message = message
        if record.outcome == "pending":
            record.outcome = "rejected" if rejected else "http_error"
        headers = {
            "content-type": "application/json",
            "x-amzn-errortype": f"{error_type}:http://internal.amazon.com/coral/com.amazon.bedrock/",
            "x-amzn-requestid": _random_uuid(),
        }
        headers.update(extra_headers or {})
        self._send_bytes(status, json.dumps({"message": message}).encode("utf-8"), headers)

    def _check_sigv4(self, record: RequestRecord) -> tuple[str, str] | None:
        """`(errortype, message)` for a bad Authorization header, or None when it passes."""
        provider = self.provider
        authorization = record.headers.get("authorization")
        if authorization is None:
            return "MissingAuthenticationTokenException", "Missing Authentication Token"
        if provider.bedrock_bearer_token is not None and authorization.startswith("Bearer "):
            token = authorization[len("Bearer ") :]
            if hmac.compare_digest(token, provider.bedrock_bearer_token):
                return None
            return (
                "UnrecognizedClientException",
                "Invalid API Key format: Must start with pre-defined prefix",
            )
        match = _SIGV4.match(authorization)
        if match is None:
            return (
                "IncompleteSignatureException",
                "Authorization header requires 'Credential', 'Signature' and 'SignedHeaders' "
                f"parameters. Authorization={authorization[:40]}",
            )
        if match.group("service") != "bedrock":
            return (
                "InvalidSignatureException",
                "Credential should be scoped to correct service: 'bedrock'. ",
            )
        if provider.aws_region is not None and match.group("region") != provider.aws_region:
            return (
                "InvalidSignatureException",
                f"Credential should be scoped to a valid region, not '{match.group('region')}'. ",
            )
        if "x-amz-date" not in record.headers:
            return (
                "IncompleteSignatureException",
                "Authorization header requires existence of either a 'X-Amz-Date' or a 'Date' "
                "header.",
            )
        if match.group("key") != provider.aws_access_key_id:
            return (
                "UnrecognizedClientException",
                "The security token included in the request is invalid.",
            )
        signed = match.group("signed").split(";")
        if "host" not in signed or "x-amz-date" not in signed:
            return "InvalidSignatureException", "The request signature we calculated does not match"
        return None

    def _bedrock(self, record: RequestRecord) -> None:
        auth_error = self._check_sigv4(record)
        if auth_error is not None:
            self._bedrock_error(record, 403, auth_error[0], auth_error[1], rejected=True)
            return
        if record.body is None:
            message = (
                "Malformed input request: #: expected type: JSONObject, please reformat your "
                "input and try again."
            )
            self._bedrock_error(record, 400, "ValidationException", message, rejected=True)
            return
        try:
            validate_bedrock_body(
                record.body,
                allow_prefill=self.provider.allow_prefill,
                allow_split_results=self.provider.allow_split_results,
                signature_checker=self.provider.check_signature,
            )
        except WireError as err:
            self._bedrock_error(record, err.status, err.error_type, err.message, rejected=True)
            return
        reply = self.provider._next_reply(record)
        if reply is None:
            message = self.provider._exhausted_message(record)
            record.outcome = "exhausted"
            self._bedrock_error(
                record,
                500,
                "InternalServerException",
                message,
                rejected=False,
                extra_headers={"x-should-retry": "false"},
            )
            return
        record.reply = reply
        if reply.http_error is not None:
            failure = reply.http_error
            kind = BEDROCK_ERROR_TYPES.get(failure.status, "InternalServerException")
            self._bedrock_error(
                record,
                failure.status,
                kind,
                failure.message,
                rejected=False,
                extra_headers=_retry_headers(failure),
            )
            return
        self._stream(record, reply, bedrock=True)

    # -- streaming -------------------------------------------------------------------------

    def _stream(self, record: RequestRecord, reply: Reply, *, bedrock: bool) -> None:
        body = record.body
        model = reply.model or record.model or "claude-fake"
        events = build_events(
            reply,
            model=model,
            input_tokens=estimate_tokens(body),
            sign=self.provider.sign,
            bedrock=bedrock,
        )
        self.send_response(200)
        if bedrock:
            self.send_header("content-type", "application/vnd.amazon.eventstream")
            self.send_header("x-amzn-requestid", _random_uuid())
            self.send_header("x-amzn-bedrock-content-type", "application/json")
        else:
            self.send_header("content-type", "text/event-stream; charset=utf-8")
            self.send_header("cache-control", "no-cache")
            self.send_header("request-id", _random_id("req_011C"))
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        record.status = 200

        def encode(name: str, data: Mapping[str, Any]) -> bytes:
            if bedrock:
                return chunk_frame(data)
            return f"event: {name}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()

        for n, (name, data) in enumerate(events):
            if reply.error_after == n:
                if bedrock:
                    kind = reply.bedrock_exception or BEDROCK_STREAM_EXCEPTIONS.get(
                        reply.stream_error_type, "modelStreamErrorException"
                    )
                    self._write_chunk(exception_frame(kind, reply.stream_error_message))
                else:
                    error = {
                        "type": "error",
                        "error": {
                            "type": reply.stream_error_type,
                            "message": reply.stream_error_message,
                        },
                    }
                    self._write_chunk(encode("error", error))
                self._end_chunks()
                record.outcome = "stream_error"
                record.error_type = reply.stream_error_type
                record.error_message = reply.stream_error_message
                return
            if reply.cut_after == n:
                record.outcome = "cut"
                if reply.cut_abrupt:
                    self._abort()
                else:
                    self._end_chunks()
                return
            if reply.stall_after == n:
                waited = self._wait(reply.stall_seconds)
                if waited == "gone":
                    raise _ClientGone
                if waited == "stopped":
                    record.outcome = "stalled"
                    self._abort()
                    return
            if reply.chunk_delay > 0 and n > 0:
                waited = self._wait(reply.chunk_delay)
                if waited == "gone":
                    raise _ClientGone
                if waited == "stopped":
                    record.outcome = "stalled"
                    self._abort()
                    return
            self._write_chunk(encode(name, data))
            self.provider._progress(record, n + 1)
            first_block = name == "content_block_start" and data.get("index") == 0
            if first_block and reply.ping and not bedrock:
                self._write_chunk(encode("ping", {"type": "ping"}))
        self._end_chunks()
        record.outcome = "completed"


def _random_uuid() -> str:
    return str(uuid.uuid4())


def _retry_headers(err: HttpError) -> dict[str, str]:
    headers: dict[str, str] = {}
    if err.retry_after_ms is not None:
        headers["retry-after-ms"] = str(err.retry_after_ms)
    if err.retry_after is not None:
        headers["retry-after"] = str(err.retry_after)
    if err.should_retry is not None:
        headers["x-should-retry"] = "true" if err.should_retry else "false"
    return headers


def _chunks(text: str, size: int) -> Iterator[str]:
    size = max(1, size)
    for start in range(0, len(text), size):
        yield text[start : start + size]


def build_events(
    reply: Reply,
    *,
    model: str,
    input_tokens: int,
    sign: Callable[[str], str],
    bedrock: bool = False,
) -> list[tuple[str, dict[str, Any]]]:
    """The stream events for a reply, in the real order (pings are added by the writer)."""
    usage = reply.usage
    in_tokens = usage.input_tokens if usage.input_tokens is not None else input_tokens
    output_chars = 0
    events: list[tuple[str, dict[str, Any]]] = []
    message_id = _random_id("msg_bdrk_01" if bedrock else "msg_01")
    start_usage = {
        "input_tokens": in_tokens,
        "cache_creation_input_tokens": usage.cache_creation_input_tokens,
        "cache_read_input_tokens": usage.cache_read_input_tokens,
        "output_tokens": 1,
    }
    events.append(
        (
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": message_id,
                    "type": "message",
                    "role": "assistant",
                    "model": model,
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": start_usage,
                },
            },
        )
    )

    def delta(index: int, payload: dict[str, Any]) -> None:
        events.append(
            (
                "content_block_delta",
                {"type": "content_block_delta", "index": index, "delta": payload},
            )
        )

    for index, block in enumerate(reply.blocks):
        start: dict[str, Any]
        if isinstance(block, TextBlock):
            start = {"type": "text", "text": ""}
        elif isinstance(block, ThinkingBlock):
            start = {"type": "thinking", "thinking": "", "signature": ""}
        elif isinstance(block, RedactedThinkingBlock):
            start = {"type": "redacted_thinking", "data": block.data}
        else:
            start = {"type": "tool_use", "id": block.id, "name": block.name, "input": {}}
        events.append(
            (
                "content_block_start",
                {"type": "content_block_start", "index": index, "content_block": start},
            )
        )
        if isinstance(block, TextBlock):
            output_chars += len(block.text)
            for piece in _chunks(block.text, reply.chunk_size):
                delta(index, {"type": "text_delta", "text": piece})
        elif isinstance(block, ThinkingBlock):
            output_chars += len(block.thinking)
            for piece in _chunks(block.thinking, reply.chunk_size * 2):
                delta(index, {"type": "thinking_delta", "thinking": piece})
            signature = block.signature if block.signature is not None else sign(block.thinking)
            delta(index, {"type": "signature_delta", "signature": signature})
        elif isinstance(block, ToolUseBlock):
            raw = block.raw_json if block.raw_json is not None else json.dumps(dict(block.input))
            output_chars += len(raw)
            delta(index, {"type": "input_json_delta", "partial_json": ""})
            for piece in _chunks(raw, reply.chunk_size):
                delta(index, {"type": "input_json_delta", "partial_json": piece})
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))

    out_tokens = (
        usage.output_tokens if usage.output_tokens is not None else max(1, output_chars // 4)
    )
    events.append(
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": reply.stop_reason, "stop_sequence": reply.stop_sequence},
                "usage": {
                    "input_tokens": in_tokens,
                    "cache_creation_input_tokens": usage.cache_creation_input_tokens,
                    "cache_read_input_tokens": usage.cache_read_input_tokens,
                    "output_tokens": out_tokens,
                },
            },
        )
    )
    stop: dict[str, Any] = {"type": "message_stop"}
    if bedrock:
        stop["amazon-bedrock-invocationMetrics"] = {
            "inputTokenCount": in_tokens,
            "outputTokenCount": out_tokens,
            "invocationLatency": 1,
            "firstByteLatency": 1,
        }
    events.append(("message_stop", stop))
    return events


# --------------------------------------------------------------------------------------------
# The provider


class FakeProvider:
    """The fake Anthropic + Bedrock endpoint. Start it (`with FakeProvider() as fake:`), point
    the SDK at `fake.url`, script answers with `fake.enqueue(...)`, inspect `fake.requests`."""

    def __init__(
        self,
        *,
        api_key: str = DEFAULT_API_KEY,
        aws_access_key_id: str = DEFAULT_AWS_ACCESS_KEY_ID,
        aws_region: str | None = None,
        bedrock_bearer_token: str | None = None,
        default_reply: Reply | None = None,
        allow_prefill: bool = False,
        allow_split_results: bool = False,
        host: str = "127.0.0.1",
        port: int = 0,
        request_log: str | os.PathLike[str] | None = None,
    ) -> None:
        self.api_key = api_key
        self.aws_access_key_id = aws_access_key_id
        self.aws_region = aws_region
        self.bedrock_bearer_token = bedrock_bearer_token
        self.default_reply = default_reply
        self.allow_prefill = allow_prefill
        self.allow_split_results = allow_split_results
        self._host = host
        self._port = port
        self._request_log = Path(request_log) if request_log is not None else None
        self._secret = secrets.token_bytes(32)
        self._lock = threading.Lock()
        self._script: collections.deque[Reply | Responder] = collections.deque()
        self._requests: list[RequestRecord] = []
        self._changed = threading.Condition(self._lock)
        self._stopping = threading.Event()
        self._connections: set[socket.socket] = set()
        self._handler_threads: set[threading.Thread] = set()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> FakeProvider:
        """Bind and serve in a background thread; returns self."""
        if self._server is not None:
            raise RuntimeError("FakeProvider already started")
        self._stopping.clear()
        self._server = _Server((self._host, self._port), self)
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"fake-provider:{self.port}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Stop serving, cut open connections (ending stalls at once), join the threads."""
        server = self._server
        if server is None:
            return
        self._stopping.set()
        server.shutdown()
        with self._lock:
            connections = list(self._connections)
            handlers = list(self._handler_threads)
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
        server.server_close()
        deadline = time.monotonic() + timeout
        for thread in handlers:
            thread.join(max(0.0, deadline - time.monotonic()))
        if self._thread is not None:
            self._thread.join(max(0.0, deadline - time.monotonic()))
        self._server = None
        self._thread = None

    def __enter__(self) -> FakeProvider:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    async def __aenter__(self) -> FakeProvider:
        return self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        import anyio.to_thread

        await anyio.to_thread.run_sync(self.stop)

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("FakeProvider is not started")
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        """Base URL for `anthropic.AsyncAnthropic(base_url=…)` and for AnthropicBedrock."""
        return f"http://{self._host}:{self.port}"

    # -- script ----------------------------------------------------------------------------

    def enqueue(self, *replies: Reply | Responder) -> FakeProvider:
        """Append replies (or callables `RequestRecord -> Reply`) to the FIFO script."""
        with self._lock:
            self._script.extend(replies)
        return self

    @property
    def pending(self) -> int:
        """Scripted replies not yet consumed."""
        with self._lock:
            return len(self._script)

    def assert_script_consumed(self) -> None:
        """Fail when scripted replies were never requested."""
        left = self.pending
        if left:
            raise AssertionError(f"{left} scripted repl{'y' if left == 1 else 'ies'} never served")

    def _next_reply(self, record: RequestRecord) -> Reply | None:
        with self._lock:
            item = self._script.popleft() if self._script else None
        if item is None:
            return self.default_reply
        return item if isinstance(item, Reply) else item(record)

    def _exhausted_message(self, record: RequestRecord) -> str:
        return (
            f"fake provider: script exhausted, no reply queued for request #{record.index} "
            f"({record.method} {record.path})"
        )

    # -- signatures ------------------------------------------------------------------------

    def sign(self, thinking: str) -> str:
        """The signature this fake mints for a thinking text (HMAC-SHA256, base64)."""
        digest = hmac.new(self._secret, thinking.encode("utf-8"), hashlib.sha256).digest()
        return base64.b64encode(b"fake-sig:" + digest).decode("ascii")

    def check_signature(self, thinking: str, signature: str) -> bool:
        """True when `signature` is the one this fake minted for exactly `thinking`."""
        return hmac.compare_digest(self.sign(thinking), signature)

    # -- requests --------------------------------------------------------------------------

    @property
    def requests(self) -> list[RequestRecord]:
        """A snapshot of the requests seen so far, oldest first."""
        with self._lock:
            return list(self._requests)

    def wait_for_requests(self, count: int, timeout: float = 5.0) -> list[RequestRecord]:
        """Block until `count` requests have been fully answered; returns the snapshot."""

        def finished(records: list[RequestRecord]) -> bool:
            return sum(1 for r in records if r.done.is_set()) >= count

        return self.wait_until(finished, timeout)

    def wait_until(
        self, predicate: Callable[[list[RequestRecord]], bool], timeout: float = 5.0
    ) -> list[RequestRecord]:
        """Block until `predicate(requests)` holds (re-checked whenever a request arrives,
        streams an event or finishes); returns the snapshot. From async code run it with
        `anyio.to_thread.run_sync`."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not predicate(list(self._requests)):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError("condition on the fake provider's requests not met")
                self._changed.wait(remaining)
            return list(self._requests)

    def _new_record(
        self, method: str, path: str, headers: dict[str, str], raw: bytes
    ) -> RequestRecord:
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = None
        with self._lock:
            record = RequestRecord(
                index=len(self._requests),
                method=method,
                path=path,
                route="unknown",
                headers=headers,
                raw_body=raw,
                body=body,
            )
            self._requests.append(record)
            self._changed.notify_all()
        return record

    def _progress(self, record: RequestRecord, events_sent: int) -> None:
        with self._lock:
            record.events_sent = events_sent
            self._changed.notify_all()

    def _complete(self, record: RequestRecord) -> None:
        if record.outcome == "pending":
            record.outcome = "completed"
        with self._lock:
            record.done.set()
            self._changed.notify_all()
            if self._request_log is not None:
                with self._request_log.open("a", encoding="utf-8") as log:
                    log.write(json.dumps(record.to_json()) + "\n")

    def _register(self, connection: socket.socket) -> None:
        with self._lock:
            self._connections.add(connection)
            self._handler_threads.add(threading.current_thread())

    def _unregister(self, connection: socket.socket) -> None:
        with self._lock:
            self._connections.discard(connection)
            self._handler_threads.discard(threading.current_thread())


# --------------------------------------------------------------------------------------------
# CLI


def main(argv: Sequence[str] | None = None) -> int:
    """Serve a JSON script until SIGTERM/SIGINT; print the base URL (only) on stdout."""
    parser = argparse.ArgumentParser(prog="python -m defect_fakeapi.server")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--script", help="JSON list of replies (see Reply.from_dict)")
    parser.add_argument("--api-key", default=DEFAULT_API_KEY)
    parser.add_argument("--aws-access-key-id", default=DEFAULT_AWS_ACCESS_KEY_ID)
    parser.add_argument("--default-text", help="answer this text when the script is empty")
    parser.add_argument("--allow-prefill", action="store_true")
    parser.add_argument("--request-log", help="append one JSON line per request to this file")
    args = parser.parse_args(argv)

    replies = load_script(args.script) if args.script else []
    provider = FakeProvider(
        api_key=args.api_key,
        aws_access_key_id=args.aws_access_key_id,
        default_reply=Reply.text(args.default_text) if args.default_text else None,
        allow_prefill=args.allow_prefill,
        host=args.host,
        port=args.port,
        request_log=args.request_log,
    )
    provider.enqueue(*replies)
    finished = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        finished.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    with provider:
        sys.stdout.write(provider.url + "\n")
        sys.stdout.flush()
        while not finished.wait(0.2):
            pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
