"""The SDK and its clients: loading `anthropic` late, and building a client per route.

Owns `import_sdk` (the `anthropic` SDK and its `httpx2`, as an `Sdk`), its loading ahead of
need (`preload_sdk`, awaited by `load_sdk`), the credential look-ups
(`api_key`; the boto3 chain inside `bedrock_client`) and the construction of the SDK client for
each route: `AsyncAnthropic` for the Anthropic API (`anthropic_client`), `AsyncAnthropicBedrock`
for Bedrock (`bedrock_client`), both with our timeouts and no retries.

Invariants:
- Cheap until used: importing this module loads no SDK. The SDK loads lazily (only the client
  and the streaming path, `lazy_sdk.py`) in a background thread that `preload_sdk` starts as
  soon as the process knows its provider, and that runs only while the event loop sleeps
  (`defect_core/background_import.py`): never at the expense of `initialize`/`session/new`
  (docs/architecture.md, rule 6). The first `stream` awaits it through `load_sdk` (opening
  the gate for good), or imports in a worker thread if nothing preloaded; boto3 loads there.
- Credentials are looked up when a client is built (at stream time), never at construction of
  the provider: a prompt without them raises `CredentialsMissing` whose message says exactly
  what to set, and where the provider was chosen (`chosen_by`). Secrets come from the
  environment (the configuration names the variable, `api_key_env`), else from what `defect
  login` stored (`config/credentials.py`: read at this moment, so a login in another process
  is seen by the next call); never from a configuration file.
- Every client has `max_retries=0` (the runner owns retries) and the configured connect and
  read timeouts; `bedrock_client` may touch files or the network, so it runs in a thread.

Why a room of its own: everything that differs between the routes happens before the first
byte is sent, and it is all here. Several configured providers (`[providers.<name>]`) are
several `Settings` given to these same builders (`config.provider_settings`).
"""

from __future__ import annotations

import asyncio
import gc
import importlib
import os
import threading
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import anyio

from defect_core.background_import import FOREGROUND, BackgroundImport
from defect_core.config import Settings
from defect_core.config.credentials import (
    BEDROCK_ENVIRONMENT,
    stored_credential,
    stored_problem,
)
from defect_core.log import get_logger
from defect_core.providers.anthropic import lazy_sdk
from defect_core.providers.base import CredentialsMissing

__all__ = [
    "Sdk",
    "anthropic_client",
    "api_key",
    "bedrock_client",
    "bedrock_identity",
    "chosen_by",
    "freeze_once",
    "hand_back_the_loop",
    "import_sdk",
    "load_sdk",
    "preload_sdk",
    "running_loop",
]

log = get_logger("defect.provider")

# What the first streamed call needs, in the order the preload imports it: the HTTP stack,
# the SDK, and the stream's event types (`call.py` posts without the SDK's messages
# resource, which would import three times as much).
SDK_PATH = (
    "httpx2",
    "anthropic",
    "anthropic.types.raw_message_stream_event",
    "anthropic.types.message",
)
# Touched after SDK_PATH, so that the names the provider reads resolve in the background too:
# the client (and its stream), its errors.
SDK_NAMES = (
    "AsyncAnthropic",
    "AsyncStream",
    "DefaultAsyncHttpxClient",
    "APIStatusError",
    "APITimeoutError",
    "APIConnectionError",
)

_preload_lock = threading.Lock()
_preload: BackgroundImport | None = None


@dataclass(frozen=True)
class Sdk:
    """The SDK's modules, once imported: `anthropic` (clients, errors) and `httpx2` (its HTTP)."""

    anthropic: ModuleType
    httpx: ModuleType


def import_sdk() -> Sdk:
    """Import the SDK (slow: call it in a worker thread, or when it is already loaded)."""
    lazy_sdk.install()
    return Sdk(importlib.import_module("anthropic"), importlib.import_module("httpx2"))


def preload_sdk() -> None:
    """Start loading the SDK in the background (once per process; never raises)."""
    global _preload
    with _preload_lock:
        if _preload is not None:
            return
        lazy_sdk.install()
        _preload = BackgroundImport(SDK_PATH, then=_touch_names, name="defect-sdk-import")
        _preload.start()


def _touch_names() -> None:
    sdk = import_sdk()
    for name in SDK_NAMES:
        getattr(sdk.anthropic, name)


async def load_sdk() -> Sdk:
    """The SDK, for a call about to be made: waits for the preload (at full speed from now on)
    or imports it in a worker thread; the event loop keeps serving meanwhile."""
    FOREGROUND.open_for_good()
    preload = _preload
    if preload is not None:
        if not preload.wait(0):
            await anyio.to_thread.run_sync(preload.wait)
        if preload.error is None:
            return import_sdk()
        log.info("sdk_preload_failed", error=repr(preload.error))  # the import below says why
    return await anyio.to_thread.run_sync(import_sdk)


_frozen = False


def freeze_once() -> None:
    """Move every object alive now out of the cyclic collector's generations, the first time
    only: called once a first model call has completed, when the SDK's modules, classes,
    validators and client (tens of thousands of objects, as long-lived as the process, most
    of them loaded lazily by that call) are all there. The CLI does the same with what it
    imported before serving (`defect_cli/cli.py`). Left in, every full collection walked them
    all on the event loop: a stall of every stream at once (scripts/bench_turn.py prints the
    delta latencies it would show up in)."""
    global _frozen
    if not _frozen:
        _frozen = True
        gc.freeze()


def running_loop() -> object | None:
    """The running asyncio loop, which owns a client's connections; None under trio."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:  # not asyncio (trio): one client for the provider's life
        return None


def api_key(settings: Settings, name: str = "anthropic") -> str:
    """The Anthropic API key: the variable `api_key_env` names, else the one `defect login`
    stored for the provider `name` (`config/credentials.py`), else `CredentialsMissing`."""
    variable = settings.api_key_env
    key = os.environ.get(variable, "").strip()
    if key:
        return key
    stored = stored_credential(name)
    if stored is not None and stored.api_key is not None:
        return stored.api_key.reveal()
    named = (
        "ANTHROPIC_API_KEY"
        if variable == "ANTHROPIC_API_KEY"
        else (f"{variable} (named by api_key_env in your defect config)")
    )
    raise CredentialsMissing(
        f"no Anthropic API key: set {named} in the environment defect runs in "
        f"({chosen_by(settings, 'bedrock')}); or run `defect login`{_refused()}"
    )


def _refused() -> str:
    """Why the stored credentials were not used, when their file was refused."""
    problem = stored_problem()
    return f" ({problem})" if problem else ""


def anthropic_client(sdk: Sdk, settings: Settings, key: str) -> Any:
    """An `AsyncAnthropic` for `key` at `base_url` (None: the SDK's default)."""
    return sdk.anthropic.AsyncAnthropic(
        api_key=key,
        base_url=settings.base_url or None,
        max_retries=0,
        timeout=_timeout(sdk, settings),
        http_client=_http_client(sdk, settings),
    )


def bedrock_client(sdk: Sdk, settings: Settings, name: str = "bedrock") -> Any:
    """An `AsyncAnthropicBedrock`. Runs in a worker thread: boto3's credential chain may touch
    files or the network. The environment's credentials first, then what `defect login`
    stored for the provider `name` (a bearer token or a profile), then boto3's chain."""
    s = settings
    bearer = os.environ.get("AWS_BEARER_TOKEN_BEDROCK", "").strip()
    profile = None if bearer else s.aws_profile
    region = s.aws_region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    if not bearer and not _aws_in_environment():
        stored = stored_credential(name)
        if stored is not None:
            region = region or stored.region
            if stored.bearer_token is not None:
                bearer, profile = stored.bearer_token.reveal(), None
            elif stored.profile:
                profile = stored.profile
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
                    f"AWS_BEARER_TOKEN_BEDROCK ({chosen_by(s, 'anthropic')})"
                )
    if not region:
        raise CredentialsMissing(
            "no AWS region for Bedrock: set AWS_REGION (e.g. AWS_REGION=us-east-1), or "
            "`region` in [bedrock] of your defect config, or a region for your AWS profile"
        )
    token = {"api_key": bearer} if bearer else {}
    return sdk.anthropic.AsyncAnthropicBedrock(
        aws_region=region,
        aws_profile=profile,
        **token,
        base_url=s.bedrock_base_url or None,
        max_retries=0,
        timeout=_timeout(sdk, s),
        http_client=_http_client(sdk, s),
    )


def bedrock_identity(name: str = "bedrock") -> tuple[object, ...]:
    """What a Bedrock client was built from, cheaply (the variables and the stored entry,
    one `stat`): the provider builds a new client when it changes (a login, a logout)."""
    names = (*BEDROCK_ENVIRONMENT, "AWS_REGION")
    return (*(os.environ.get(n, "") for n in names), stored_credential(name))


def _aws_in_environment() -> bool:
    """Did the environment choose AWS credentials (they beat the stored ones)?"""
    chosen = BEDROCK_ENVIRONMENT[1:]  # a bearer token is not an AWS credential
    return any(os.environ.get(name, "").strip() for name in chosen)


def _timeout(sdk: Sdk, settings: Settings) -> Any:
    return sdk.httpx.Timeout(settings.read_timeout, connect=settings.connect_timeout)


def _http_client(sdk: Sdk, settings: Settings) -> Any:
    """The SDK's defaults (pool limits, keep-alive) without its wrapper's `__del__`, which
    closes a dropped client on whatever loop runs at collection time - a different, live
    loop when the one that opened the sockets is gone, where the close then fails; sending
    through asyncio's sockets (`providers/asyncio_http.py`) unless a proxy is set. Its one
    request hook hands the event loop back between the SDK's request build and httpx's send
    (`hand_back_the_loop`)."""
    from defect_core.providers.asyncio_http import sdk_client

    hooks = {"request": [hand_back_the_loop]}
    return sdk_client(sdk.anthropic, timeout=_timeout(sdk, settings), event_hooks=hooks)


async def hand_back_the_loop(request: object) -> None:
    """httpx's request hook, run once the SDK has built the request and before httpx sends
    it: let whatever else waits on the event loop run (another session's deltas), so that
    a request's build is not one uninterrupted stretch (`call.py`). It reads nothing of the
    request and changes nothing: the bytes sent are the same."""
    await anyio.lowlevel.checkpoint()


def chosen_by(settings: Settings, other: str) -> str:
    """Which setting chose this provider, and how to choose `other` in that same place."""
    origin = settings.provider_origin
    if origin.startswith(("[providers.", "the model picker")):
        return f"the provider is configured by {origin}"
    chosen = f"the provider {settings.provider!r} was chosen by {origin}"
    if origin == "the --provider flag":
        return f"{chosen}; or pass --provider {other}"
    if origin == "DEFECT_PROVIDER":
        return f"{chosen}; or set DEFECT_PROVIDER={other}"
    if origin == "the default":
        return f"{chosen}; or set DEFECT_PROVIDER={other}"
    return f'{chosen}; or set provider = "{other}" there'
