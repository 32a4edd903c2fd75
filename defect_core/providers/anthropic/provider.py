"""`AnthropicProvider`: one model call at a time, on the Anthropic API or on AWS Bedrock.

Owns the provider object the registry builds (`anthropic_provider`, `bedrock_provider`): its
name, its models (the configured list, and the live one from `listing.py`), the life of its
SDK client (imported late, created once per event loop, closed by
`aclose`), and `stream`, which sends the body from `request` (through `call.py`, the SDK
client without its messages resource), feeds the events to a
`StreamAssembler` and turns every failure into a `ProviderError` through `errors`.

Invariants:
- A stream ends with exactly one `Completed` or raises `ProviderError` (with the request id
  when there was one); the deltas before a failure were only shown (see `stream.py`).
- No retries here: the SDK client has `max_retries=0`; the runner owns the backoff.
- Cheap until used: building the provider, `models()` and `default_model()` load no SDK; the
  first `stream` awaits it (`client.load_sdk`: the background preload `warm` started, else a
  worker thread), so the event loop keeps serving the editor. The client is then reused (its
  connection pool is most of the per-request overhead saved) - but never across event loops,
  whose sockets it cannot share.
- The live listing never goes ahead of a first answer: `list_models` waits until every
  stream under way has handed out its first chunk (the listing starts in the background as
  a session opens, just before the first prompt; its request and the import of the SDK's
  models resource would otherwise compete with that prompt's).
- The prompt cache outlives a switch: the provider remembers the last prompt it sent per
  conversation (`last_sent.py`, once the service has accepted the call), and its first
  request back after another provider's turns keeps a breakpoint where that prompt ended
  (`request.py`), so it reads back what it cached before the switch.
- The call is logged once when it starts and once when it ends (completed or failed), with
  its request id, token usage and duration; never its content.
- A piece of the stream that came alone (after `QUIET_GAP` of an idle loop) hands the loop
  back once its events were handed on: the updates they made are written to the editor
  before the stream's next read is set up and any other work the loop holds (measured with
  and without it: scripts/bench_turn.py, the paced delta latency). The events and their
  order are unchanged.
- Once its response is closed, a stream hands the event loop back (shielded from cancel)
  before its message is assembled and committed: a stream's end is not one stretch during
  which other sessions' deltas wait (scripts/bench_turn.py, sessions at once).

Why one provider for both routes: Bedrock carries the same Messages body and the same stream
events inside its own envelope; the SDK's `AsyncAnthropicBedrock` unwraps them, so everything
after the client (encoding, the guard, error classification) is shared.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, Callable
from contextlib import aclosing
from typing import Any

import anyio

from defect_core.config import Settings
from defect_core.log import get_logger
from defect_core.providers.anthropic.call import create_stream, stream_batches
from defect_core.providers.anthropic.catalog import Route, models_for
from defect_core.providers.anthropic.client import (
    Sdk,
    anthropic_client,
    api_key,
    bedrock_client,
    bedrock_identity,
    freeze_once,
    load_sdk,
    preload_sdk,
    running_loop,
)
from defect_core.providers.anthropic.errors import request_id_of, translate_exception
from defect_core.providers.anthropic.last_sent import LastSent
from defect_core.providers.anthropic.listing import anthropic_models, bedrock_models
from defect_core.providers.anthropic.request import cache_key, encode_request, route_options
from defect_core.providers.anthropic.stream import StreamAssembler
from defect_core.providers.anthropic.stream_events import stream_event
from defect_core.providers.base import (
    ModelInfo,
    ModelRequest,
    ProviderError,
    StreamChunk,
    log_call_completed,
    log_call_failed,
)

__all__ = ["AnthropicProvider", "anthropic_provider", "bedrock_provider"]

log = get_logger("defect.provider")

QUIET_GAP = 0.003
"""Seconds the event loop sat idle, at least, waiting for a stream's next piece, for that
piece to count as one that came alone (a model pausing, a paced stream): the loop is then
handed over once after its events, before the next read. Idle is the wait less the CPU
time the loop's thread spent meanwhile (other sessions' deltas): a piece that came sooner,
or while the loop was busy, is part of a fast stream, whose pieces would each pay that
extra turn of the loop where it is scarce."""


class AnthropicProvider:
    """Claude through the official SDK, on the Anthropic API (`route="anthropic"`) or on
    Bedrock (`route="bedrock"`). Streams always; never retries by itself."""

    def __init__(self, settings: Settings, *, route: Route, name: str | None = None) -> None:
        self._settings = settings
        self._route: Route = route
        self._name = name or route
        self._sdk: Sdk | None = None
        self._client: Any = None
        self._client_key: str | None = None
        self._identity: tuple[object, ...] | None = None
        """What the Bedrock client was built from (`client.bedrock_identity`)."""
        self._lock: anyio.Lock | None = None
        self._loop: object | None = None
        self._opening = 0
        """Streams not yet past their first chunk: a listing waits for them (`list_models`)."""
        self._opened: anyio.Event | None = None
        self._last_sent = LastSent()
        """The last prompt sent per conversation: where a model back from a switch reads."""

    @property
    def name(self) -> str:
        """The provider's configured name (`[providers.NAME]`), or its route."""
        return self._name

    @property
    def route(self) -> Route:
        return self._route

    @property
    def hosted_capabilities(self) -> frozenset[str]:
        """The Anthropic API runs its web search; Bedrock has no server tools."""
        return frozenset({"web_search"}) if self._route == "anthropic" else frozenset()

    def models(self) -> list[ModelInfo]:
        return models_for(self._settings, self._route)

    def default_model(self) -> str:
        return self.models()[0].id

    async def list_models(self) -> list[ModelInfo]:
        """The models the service offers now (`GET /v1/models`; Bedrock's profiles and
        foundation models). Network: never on the `session/new` path. Raises
        `ProviderError` (missing credentials included) when the service cannot say."""
        if self._route == "bedrock":
            try:
                return await anyio.to_thread.run_sync(bedrock_models, self._settings)
            except Exception as exc:  # boto3/botocore: credentials, network, access
                raise ProviderError(
                    f"Bedrock did not list its models: {exc}", kind="list_models_failed"
                ) from None
        client, sdk = await self._ready()
        await self._streams_opened()
        try:
            # The models resource is a module the calls never load: import it off the loop.
            await anyio.to_thread.run_sync(lambda: client.models)
            return await anthropic_models(client)
        except Exception as exc:
            raise self._translate(exc, sdk, in_stream=False) from None

    # --- the call ---------------------------------------------------------------------------

    async def stream(self, request: ModelRequest) -> AsyncGenerator[StreamChunk, None]:
        """One model call, streamed. Ends with one `Completed` or raises `ProviderError`."""
        opened = self._stream_opening()
        try:
            async with aclosing(self._stream(request)) as chunks:
                async for chunk in chunks:
                    yield chunk
                    opened()
        finally:
            opened()

    def _stream_opening(self) -> Callable[[], None]:
        """Count a stream as opening until the callable returned is called (once counts: when
        it has handed out its first chunk and was asked for the next, or has ended)."""
        if self._opening == 0:
            self._opened = anyio.Event()
        self._opening += 1
        done = False

        def opened() -> None:
            nonlocal done
            if done:
                return
            done = True
            self._opening -= 1
            if self._opening == 0 and self._opened is not None:
                self._opened.set()

        return opened

    async def _streams_opened(self) -> None:
        """Wait until every stream of this loop is past its first chunk: a listing must not
        delay a first answer (its request, its import, its first token on the editor)."""
        while self._opening and self._opened is not None and self._loop is running_loop():
            await self._opened.wait()

    async def _stream(self, request: ModelRequest) -> AsyncGenerator[StreamChunk, None]:
        client, sdk = await self._ready()
        key = cache_key(request)
        body = encode_request(request, seen=self._last_sent.seen_until(key, request.messages))
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
                stream = await create_stream(client, body, **route_options(self._route))
            except Exception as exc:
                raise self._translate(exc, sdk, in_stream=False) from None
            request_id = request_id_of(stream.response.headers)
            self._last_sent.remember(key, request.messages)
            assembler = StreamAssembler(max_tokens=request.max_tokens)
            try:
                async with aclosing(stream_batches(stream, client)) as batches:
                    asked, busy = time.monotonic(), time.thread_time()
                    async for batch in batches:
                        waited = time.monotonic() - asked
                        # Alone: the loop sat idle for it (the wait less its thread's CPU).
                        alone = waited >= QUIET_GAP and (
                            waited - (time.thread_time() - busy) >= QUIET_GAP
                        )
                        for data in batch:
                            for chunk in assembler.feed(stream_event(data)):
                                yield chunk
                        if alone:  # its update leaves before the next read is set up
                            await anyio.lowlevel.checkpoint()
                        asked, busy = time.monotonic(), time.thread_time()
            except ProviderError:
                raise
            except Exception as exc:
                raise self._translate(exc, sdk, in_stream=True) from None
            finally:
                with anyio.CancelScope(shield=True):
                    await stream.close()
                    # The loop goes to the other sessions' deltas before this message is
                    # assembled and committed (shielded: a cancel cannot drop it here).
                    await anyio.lowlevel.checkpoint()
            completed = assembler.finish(request_id)
            freeze_once()  # the first call has loaded what every call needs: keep it frozen
        except ProviderError as err:
            log_call_failed(
                err,
                provider=self._route,
                model=request.model,
                request_id=request_id,
                started=started,
            )
            raise
        log_call_completed(completed, provider=self._route, model=request.model, started=started)
        yield completed

    def _translate(self, exc: Exception, sdk: Sdk, *, in_stream: bool) -> ProviderError:
        return translate_exception(
            exc,
            anthropic=sdk.anthropic,
            httpx=sdk.httpx,
            route=self._route,
            settings=self._settings,
            in_stream=in_stream,
        )

    # --- the client -------------------------------------------------------------------------

    def warm(self) -> None:
        """Start loading the SDK in the background (idempotent, never raises).

        For a front end to call as soon as it knows its provider: the first prompt then finds
        the import done (or under way) instead of starting it (`client.preload_sdk`).
        """
        preload_sdk()

    async def _ready(self) -> tuple[Any, Sdk]:
        loop = running_loop()
        if loop is not self._loop:
            # A client's connections belong to the loop that opened them; on another loop
            # (an embedding app, a test suite) start afresh rather than reuse dead sockets.
            self._loop, self._client, self._lock = loop, None, None
        if self._lock is None:
            self._lock = anyio.Lock()
        async with self._lock:
            if self._sdk is None:
                self._sdk = await load_sdk()
            if self._route == "anthropic":
                key = api_key(self._settings, self._name)
                if self._client is None or key != self._client_key:
                    self._client = anthropic_client(self._sdk, self._settings, key)
                    self._client_key = key
            else:
                identity = bedrock_identity(self._name)
                if self._client is None or identity != self._identity:  # a login or logout
                    self._client = await anyio.to_thread.run_sync(
                        bedrock_client, self._sdk, self._settings, self._name
                    )
                    self._identity = identity
            return self._client, self._sdk

    async def aclose(self) -> None:
        """Close the SDK client's connections (the provider can be used again after)."""
        client, self._client = self._client, None
        if client is not None and self._loop is running_loop():
            await client.close()


def anthropic_provider(settings: Settings, name: str | None = None) -> AnthropicProvider:
    """Claude on the Anthropic API (ANTHROPIC_API_KEY; ANTHROPIC_BASE_URL or `base_url`)."""
    return AnthropicProvider(settings, route="anthropic", name=name)


def bedrock_provider(settings: Settings, name: str | None = None) -> AnthropicProvider:
    """Claude on AWS Bedrock (the boto3 credential chain; AWS_REGION or `region`)."""
    return AnthropicProvider(settings, route="bedrock", name=name)
