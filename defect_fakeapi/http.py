"""The fake API's HTTP side: routes, authentication, error envelopes and streaming.

Owns `ApiServer` and `ApiHandler`: `POST /v1/messages` (streaming only), `POST
/v1/messages/count_tokens`, `GET /v1/models` (paginated, `models.py`), `POST
/model/{id}/invoke-with-response-stream` (Bedrock), the Chat Completions routes (`chat.py`),
404 for anything else. Every request is authenticated (API key or bearer token; the SigV4
header shape and access key id for Bedrock, not the signature), every body goes through
`defect_fakeapi.validation` (a violation answers the API's own 400 and consumes no scripted
reply), and every answer is what the real service sends: the error envelope with a
`request-id`, SSE with `event:` lines, Bedrock event-stream frames.

Invariant: a stall or a slow stream never blocks `FakeProvider.stop()`: every wait watches
the provider's stop event and the client's socket.

Why: only the network is fake; the agent's SDK must see the same bytes the real API sends.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import re
import select
import socket
import ssl
import sys
import time
import urllib.parse
import uuid
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

from defect_fakeapi.backend import ApiBackend
from defect_fakeapi.chat import retry_headers, serve_chat, serve_chat_models
from defect_fakeapi.eventstream import chunk_frame, exception_frame
from defect_fakeapi.models import ModelsQueryError, models_page, serve_foundation_models
from defect_fakeapi.script import Reply, RequestRecord, estimate_tokens, random_id
from defect_fakeapi.sse import build_events
from defect_fakeapi.validation import WireError, validate_bedrock_body, validate_request

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


# --------------------------------------------------------------------------------------------
# Server


class ApiServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(
        self,
        address: tuple[str, int],
        provider: ApiBackend,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.provider = provider
        self.tls = tls
        """When set, every connection speaks TLS with it (the real API's transport)."""
        super().__init__(address, ApiHandler)

    def get_request(self) -> tuple[Any, Any]:
        connection, address = super().get_request()
        if self.tls is not None:
            # The handshake happens on the handler's thread, at its first read, so a client
            # that never completes it holds up no other connection.
            connection = self.tls.wrap_socket(
                connection, server_side=True, do_handshake_on_connect=False
            )
        return connection, address

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hung up (a reset while the next request was awaited) is no error."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class _ClientGone(Exception):
    """The client closed the connection (or the server is stopping) mid-answer."""


class ApiHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: ApiServer

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
    def provider(self) -> ApiBackend:
        return self.server.provider

    def _read_body(self) -> bytes:
        length = int(self.headers.get("content-length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def _send_bytes(self, status: int, body: bytes, headers: Mapping[str, str]) -> None:
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("content-length", str(len(body)))
        try:
            self.end_headers()
            self.wfile.write(body)
        except OSError as err:  # the client went away (a session closed mid-listing)
            raise _ClientGone from err

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
                    # The TCP bytes, under TLS too (an SSL socket peeks at nothing): under TLS
                    # a client's close alert reads as data, so its hang-up shows at the next
                    # write rather than here.
                    peek = socket.socket.recv(self.connection, 1, socket.MSG_PEEK)
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
        if len(raw) < int(self.headers.get("content-length") or 0):
            # The client went away in the middle of its body (a killed agent): nothing was
            # judged, nothing can be answered. Not a rejection: the API never saw a request.
            record.client_disconnected = True
            record.outcome = "client_disconnected"
            return
        try:
            if path == "/v1/messages":
                self._anthropic(record, count_tokens=False)
            elif path == "/v1/messages/count_tokens":
                self._anthropic(record, count_tokens=True)
            elif path == "/v1/chat/completions":
                serve_chat(self, record)
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
        url = urllib.parse.urlsplit(self.path)
        headers = {k.lower(): v for k, v in self.headers.items()}
        # Every GET is a listing (the agent's model calls are POSTs): kept apart from the calls.
        record = self.provider._new_record("GET", url.path, headers, b"", listing=True)
        try:
            if url.path == "/v1/models" and "anthropic-version" not in headers:
                serve_chat_models(self, record)  # the Chat Completions wire's listing
            elif url.path == "/v1/models":
                self._models(record, url.query)
            elif url.path == "/foundation-models":
                serve_foundation_models(self, record)
            else:
                self._not_found(record)
        except _ClientGone:
            record.client_disconnected = True
            record.outcome = "client_disconnected"
            self.close_connection = True
        finally:
            self.provider._complete(record)

    def _models(self, record: RequestRecord, query: str) -> None:
        """`GET /v1/models`: authenticated, paginated (`defect_fakeapi.models`); held while
        the provider's `models_gate` is closed, answered with `models_error` when set."""
        record.route = "models"
        auth_error = self._check_api_key(record)
        if auth_error is not None:
            self._anthropic_error(record, 401, "authentication_error", auth_error, rejected=True)
            return
        gate = self.provider.models_gate
        while gate is not None and not gate.wait(0.05):
            if self._wait(0) != "elapsed":
                raise _ClientGone
        if self.provider.models_error is not None:
            failure = self.provider.models_error
            self._anthropic_error(
                record, failure.status, failure.error_type, failure.message, rejected=False
            )
            return
        try:
            page = models_page(self.provider.models, query)
        except ModelsQueryError as err:
            self._anthropic_error(record, 400, "invalid_request_error", str(err), rejected=True)
            return
        record.status = 200
        record.outcome = "models"
        headers = {"content-type": "application/json", "request-id": random_id("req_011C")}
        self._send_bytes(200, json.dumps(page).encode("utf-8"), headers)

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
        request_id = random_id("req_011C")
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
            headers = {"content-type": "application/json", "request-id": random_id("req_011C")}
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
                extra_headers=retry_headers(failure),
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
                extra_headers=retry_headers(failure),
            )
            return
        self._stream(record, reply, bedrock=True)

    # -- streaming -------------------------------------------------------------------------

    def _stream(self, record: RequestRecord, reply: Reply, *, bedrock: bool) -> None:
        body = record.body
        model = reply.model or record.model or "claude-fake"
        cache = self.provider.prompt_cache
        if cache is not None and reply.usage.input_tokens is None:
            usage = cache.account(body, record.model or model)
            record.cache_usage = usage
            reply = reply.with_usage(
                input_tokens=usage.input_tokens,
                output_tokens=reply.usage.output_tokens,
                cache_creation_input_tokens=usage.cache_creation_input_tokens,
                cache_read_input_tokens=usage.cache_read_input_tokens,
            )
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
            self.send_header("request-id", random_id("req_011C"))
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
