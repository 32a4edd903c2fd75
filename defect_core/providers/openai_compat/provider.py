"""`OpenAICompatProvider`: one model call at a time on a Chat Completions server.

Owns the provider object the registry builds for a `[providers.NAME]` table of
`kind = "openai"` (`openai_provider`): its name, its models (the configured list, and the
server's `GET /v1/models`), the life of its `openai` SDK client (imported late, created once
per event loop, closed by `aclose`), and `stream`, which sends the body from `request.py`,
feeds the chunks to a `ChatAssembler` and turns every failure into a `ProviderError` through
`errors.py`.

Invariants:
- A stream ends with exactly one `Completed` or raises `ProviderError` (with the request id
  when there was one); the deltas before a failure were only shown (`assemble.py`).
- No retries here: the SDK client has `max_retries=0`; the runner owns the backoff, with the
  `retry_after` the server asked for. Timeouts are the settings' `read_timeout` and
  `connect_timeout`.
- Cheap until used (docs/architecture.md, rule 6): building the provider, `models()` and
  `default_model()` load no SDK; `warm` starts the import in the background
  (`background_import.py`), and the first `stream` or listing awaits it (or imports `openai`
  in a worker thread), so the event loop keeps serving the editor.
- It runs no hosted capability: a session delegating web search to it fails at `session/new`
  (`hosted.py`).
- A key only where one is configured: `api_key_env` names the variable, else `defect login`
  stored one for this provider's name (`config/credentials.py`; a missing one is
  `CredentialsMissing` naming the variable); without either the placeholder `no-key` goes as
  the bearer token (the SDK sends one always; a local server ignores it), never another
  provider's key.
- The call is logged when it starts and when it ends, with its usage; never its content.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import AsyncGenerator
from types import ModuleType
from typing import Any

import anyio

from defect_core.background_import import FOREGROUND, BackgroundImport
from defect_core.config import ProviderSpec, Settings
from defect_core.config.credentials import stored_credential
from defect_core.log import get_logger
from defect_core.providers.base import (
    CredentialsMissing,
    ModelInfo,
    ModelRequest,
    ProviderError,
    StreamChunk,
    log_call_completed,
    log_call_failed,
)
from defect_core.providers.openai_compat.assemble import ChatAssembler
from defect_core.providers.openai_compat.errors import translate_exception
from defect_core.providers.openai_compat.request import encode_request, model_infos

__all__ = ["OpenAICompatProvider", "openai_provider"]

log = get_logger("defect.provider")

OPENAI_BASE_URL = "https://api.openai.com/v1"
NO_KEY = "no-key"
"""The bearer token of a provider configured without `api_key_env` (a local server)."""


_preload: BackgroundImport | None = None
_preload_lock = threading.Lock()


def _import_sdk() -> ModuleType:
    import openai

    return openai


def preload_sdk() -> None:
    """Start importing `openai` in the background, while the editor waits on nothing (once per
    process; never raises): `background_import.py` runs it only while the foreground idles."""
    global _preload
    with _preload_lock:
        if _preload is None:
            _preload = BackgroundImport(("openai",), name="defect-openai-import")
            _preload.start()


async def load_sdk() -> ModuleType:
    """The SDK, for a call about to be made: the preload's (waited for at full speed from now
    on) or imported in a worker thread; the event loop keeps serving meanwhile."""
    FOREGROUND.open_for_good()  # whoever needs a module now lets every import run
    preload = _preload
    if preload is not None and not preload.wait(0):
        await anyio.to_thread.run_sync(preload.wait)
    return await anyio.to_thread.run_sync(_import_sdk)


class OpenAICompatProvider:
    """A model behind an OpenAI-compatible Chat Completions server. Streams; never retries."""

    def __init__(self, settings: Settings, spec: ProviderSpec) -> None:
        self._settings = settings
        self._spec = spec
        self._sdk: ModuleType | None = None
        self._client: Any = None
        self._client_key: str | None = None
        self._loop: object | None = None
        self._lock: anyio.Lock | None = None

    @property
    def name(self) -> str:
        return self._spec.name

    @property
    def spec(self) -> ProviderSpec:
        return self._spec

    def warm(self) -> None:
        """Start loading the SDK in the background (idempotent, never raises): for a front end
        to call as soon as it knows its provider, so the first prompt finds it loaded."""
        preload_sdk()

    @property
    def hosted_capabilities(self) -> frozenset[str]:
        """None: a Chat Completions server runs no tool of its own for defect."""
        return frozenset()

    def models(self) -> list[ModelInfo]:
        ids = self._spec.models or tuple(name for name, _ in self._spec.model_settings)
        if not ids:
            raise ProviderError(
                f'[providers.{self.name}] lists no models: add models = ["..."]',
                kind="no_models",
            )
        return model_infos(self._spec, ids)

    def default_model(self) -> str:
        return self.models()[0].id

    async def list_models(self) -> list[ModelInfo]:
        """The server's `GET /v1/models` (network: never on the `session/new` path)."""
        client, sdk = await self._ready()
        try:
            page = await client.models.list()
            ids = [str(model.id) async for model in page]
        except Exception as exc:
            raise translate_exception(
                exc, openai=sdk, provider=self.name, in_stream=False
            ) from None
        if not ids:
            raise ProviderError(f"{self.name} listed no models", kind="list_models_failed")
        return model_infos(self._spec, ids)

    # --- the call ---------------------------------------------------------------------------

    async def stream(self, request: ModelRequest) -> AsyncGenerator[StreamChunk, None]:
        """One model call, streamed. Ends with one `Completed` or raises `ProviderError`."""
        client, sdk = await self._ready()
        body = encode_request(self._spec, request)
        started = time.monotonic()
        request_id: str | None = None
        log.info(
            "model_call_started",
            provider=self.name,
            model=request.model,
            messages=len(body["messages"]),
            reasoning_effort=body.get("reasoning_effort"),
        )
        try:
            try:
                stream = await client.chat.completions.create(**body)
            except Exception as exc:
                raise translate_exception(
                    exc, openai=sdk, provider=self.name, in_stream=False
                ) from None
            request_id = stream.response.headers.get("x-request-id")
            assembler = ChatAssembler(max_tokens=request.max_tokens, provider=self.name)
            try:
                async for chunk in stream:
                    for out in assembler.feed(chunk.to_dict()):
                        yield out
            except ProviderError:
                raise
            except Exception as exc:
                raise translate_exception(
                    exc, openai=sdk, provider=self.name, in_stream=True
                ) from None
            finally:
                with anyio.CancelScope(shield=True):
                    await stream.close()
            completed = assembler.finish(request_id)
        except ProviderError as err:
            log_call_failed(
                err, provider=self.name, model=request.model, request_id=request_id, started=started
            )
            raise
        log_call_completed(completed, provider=self.name, model=request.model, started=started)
        yield completed

    # --- the client -------------------------------------------------------------------------

    def _api_key(self) -> str:
        """The variable `api_key_env` names, else the key `defect login` stored for this
        provider (`config/credentials.py`), else none when no variable is named."""
        variable = self._spec.api_key_env
        key = os.environ.get(variable, "").strip() if variable else ""
        if key:
            return key
        stored = stored_credential(self.name)
        if stored is not None and stored.api_key is not None:
            return stored.api_key.reveal()
        if not variable:
            return ""
        raise CredentialsMissing(
            f"no API key for {self.name}: set {variable} (named by api_key_env in "
            f"[providers.{self.name}], {self._spec.source}) in the environment defect "
            "runs in, or remove api_key_env for a server that needs no key; or run "
            f"`defect login --provider {self.name}`"
        )

    async def _ready(self) -> tuple[Any, ModuleType]:
        loop = _running_loop()
        if loop is not self._loop:
            # A client's connections belong to the loop that opened them.
            self._loop, self._client, self._lock = loop, None, None
        if self._lock is None:
            self._lock = anyio.Lock()
        async with self._lock:
            if self._sdk is None:
                self._sdk = await load_sdk()
            key = self._api_key()
            if self._client is None or key != self._client_key:
                from defect_core.providers.asyncio_http import sdk_client

                sdk = self._sdk
                timeout = sdk.Timeout(
                    self._settings.read_timeout, connect=self._settings.connect_timeout
                )
                self._client = sdk.AsyncOpenAI(
                    api_key=key or NO_KEY,
                    base_url=self._spec.base_url or OPENAI_BASE_URL,
                    max_retries=0,
                    timeout=timeout,
                    # the SDK's defaults, over asyncio's sockets unless a proxy is set
                    http_client=sdk_client(sdk, timeout=timeout),
                )
                self._client_key = key
            return self._client, self._sdk

    async def aclose(self) -> None:
        """Close the SDK client's connections (the provider can be used again after)."""
        client, self._client = self._client, None
        if client is not None and self._loop is _running_loop():
            await client.close()


def _running_loop() -> object:
    return asyncio.get_running_loop()


def openai_provider(settings: Settings, name: str | None = None) -> OpenAICompatProvider:
    """The `[providers.NAME]` table `name` of `kind = "openai"` (a bare `openai` kind: a
    provider of that name with OpenAI's endpoint and `OPENAI_API_KEY`)."""
    spec = settings.providers.get(name or "")
    if spec is None or spec.kind != "openai":
        spec = ProviderSpec(
            name or "openai",
            "openai",
            "the openai kind's defaults",
            api_key_env="OPENAI_API_KEY",
            models=settings.models_for("openai"),
        )
    return OpenAICompatProvider(settings, spec)
