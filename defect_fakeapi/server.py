"""A strict fake of the Anthropic Messages API and of Bedrock's streaming invoke, on 127.0.0.1.

Owns: `FakeProvider`, the object a test or the CLI holds: it starts the threaded HTTP server
(`defect_fakeapi.http`) on an ephemeral port, queues the script of replies
(`defect_fakeapi.script`), records every request, mints and checks thinking signatures, and
stops promptly; it is the `backend.ApiBackend` its server's handlers use. The modules
beside it: `http` (routes, auth, streaming), `sse` and `eventstream` (encoding), `validation`
and `shape` (the request rules), `script` (replies and faults), `cli` (`defect fake-api`).

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

TLS: with `tls=` a server context, the fake speaks HTTPS (the real API's transport), for the
tests of what the agent does under TLS; by default it speaks plain HTTP.

The server runs in its own threads, so it serves sync tests and async (anyio/asyncio) tests
alike without touching the test's event loop; `stop()` returns promptly even mid-stall.

Routes: `POST /v1/chat/completions` and its `GET /v1/models` (the second wire, `chat.py`),
`POST /v1/messages` (streaming only: a request without `stream: true` gets a 400
naming the fake), `POST /v1/messages/count_tokens` (`estimate_tokens`: UTF-8 bytes of system,
messages and tools / 4), `GET /v1/models` (`models`, paginated like the real list; held by
`models_gate`, failed by `models_error`), `POST /model/{id}/invoke-with-response-stream`
(Bedrock; SigV4 header shape and access key id checked, the signature itself is not), and
Bedrock's `GET /foundation-models` (the same check; what `defect login` asks). Anything else
is a 404.

CLI scripts are a JSON list of replies in `Reply.to_dict` form or the shorthands
`{"text": …}`, `{"tool_use": {"id", "name", "input"}}`, `{"thinking": …, "then": {…}}`,
`{"error": {"status": 529, "retry_after_ms": 10}}`, plus any `Reply` field (`cut_after`,
`stall_after`, `chunk_delay`, …). `--request-log FILE` appends one JSON line per request.
"""

from __future__ import annotations

import base64
import collections
import contextlib
import hashlib
import hmac
import json
import os
import secrets
import socket
import ssl
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

from defect_fakeapi.cache import PromptCache
from defect_fakeapi.chat_cache import ChatPrefixCache
from defect_fakeapi.http import ApiServer
from defect_fakeapi.models import DEFAULT_MODELS
from defect_fakeapi.script import HttpError, Reply, RequestRecord, Responder

DEFAULT_API_KEY = "sk-ant-api03-fake-provider-test-key"
DEFAULT_AWS_ACCESS_KEY_ID = "AKIDTEST"
DEFAULT_AWS_SECRET_KEY = "fake-secret-key"  # the fake does not check signatures; any works
ANTHROPIC_VERSION_HEADER = "2023-06-01"


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
        prompt_cache: PromptCache | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        request_log: str | os.PathLike[str] | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.api_key = api_key
        self.aws_access_key_id = aws_access_key_id
        self.aws_region = aws_region
        self.bedrock_bearer_token = bedrock_bearer_token
        self.default_reply = default_reply
        self.allow_prefill = allow_prefill
        self.allow_split_results = allow_split_results
        self.prompt_cache = prompt_cache
        """When set, answers report the cache usage the real API would (`cache.py`)."""
        self.models: list[dict[str, Any]] = [dict(m) for m in DEFAULT_MODELS]
        """What `GET /v1/models` lists, in order (entries as `models.model_entry` writes them)."""
        self.chat_models: list[str] = ["tiny-coder", "tiny-reasoner"]
        """What `GET /v1/models` lists to a Chat Completions client (`chat.py`)."""
        self.chat_reasoning_models: set[str] = {"tiny-reasoner"}
        """The chat models that take `reasoning_effort` (others refuse it)."""
        self.chat_key_required = True
        """False: the Chat Completions routes take any key or none, as a local server does."""
        self.chat_reasoning_field = "reasoning_content"
        """The delta field a reply's thinking streams in: `reasoning_content` (DeepSeek's) or
        `reasoning` (OpenRouter's)."""
        self.chat_prompt_cache: ChatPrefixCache | None = None
        """When set, chat answers report the cached tokens a server's automatic prefix cache
        would (`chat_cache.py`), unless the reply scripts its own input counts."""
        self.models_gate: threading.Event | None = None
        """When set, `GET /v1/models` waits until the event is set (a slow listing)."""
        self.models_error: HttpError | None = None
        """When set, `GET /v1/models` answers this error instead of the list."""
        self._host = host
        self._port = port
        self._request_log = Path(request_log) if request_log is not None else None
        self._tls = tls
        """When set, the fake serves HTTPS with it, as the real API does (`url` says https)."""
        self._secret = secrets.token_bytes(32)
        self._lock = threading.Lock()
        self._script: collections.deque[Reply | Responder] = collections.deque()
        self._requests: list[RequestRecord] = []
        self._listings: list[RequestRecord] = []
        self._changed = threading.Condition(self._lock)
        self._stopping = threading.Event()
        self._connections: set[socket.socket] = set()
        self._handler_threads: set[threading.Thread] = set()
        self._server: ApiServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> FakeProvider:
        """Bind and serve in a background thread; returns self."""
        if self._server is not None:
            raise RuntimeError("FakeProvider already started")
        self._stopping.clear()
        self._server = ApiServer((self._host, self._port), self, self._tls)
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
        scheme = "http" if self._tls is None else "https"
        return f"{scheme}://{self._host}:{self.port}"

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

    @property
    def listings(self) -> list[RequestRecord]:
        """The GET requests (`/v1/models`, and Bedrock's listings, which the fake answers 404)
        seen so far, oldest first. Kept apart from `requests` (the model calls): an agent lists
        models in the background, and a test counting its model calls must not count those."""
        with self._lock:
            return list(self._listings)

    def wait_for_listings(
        self, count: int, timeout: float = 5.0, *, answered: bool = True
    ) -> list[RequestRecord]:
        """Block until `count` listings have been answered (or failed) - or only arrived, with
        `answered=False` (one held by `models_gate`); returns them."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while sum(1 for r in self._listings if r.done.is_set() or not answered) < count:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError("the model listings were not all answered")
                self._changed.wait(remaining)
            return list(self._listings)

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
        self, method: str, path: str, headers: dict[str, str], raw: bytes, *, listing: bool = False
    ) -> RequestRecord:
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = None
        with self._lock:
            kept = self._listings if listing else self._requests
            record = RequestRecord(
                index=len(kept),
                method=method,
                path=path,
                route="unknown",
                headers=headers,
                raw_body=raw,
                body=body,
            )
            kept.append(record)
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
