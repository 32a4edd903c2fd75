"""Is a credential good? One cheap authenticated call to the provider, before `defect login`
saves it.

Owns `verify_credential`: for a provider (`config.ProviderSpec`, built with the process's
settings as `registry.build_named` would build it) and the credential a person just typed,
the Anthropic API's or an OpenAI-compatible server's `GET /v1/models` (one page), or
Bedrock's `ListFoundationModels`: through boto3 with a profile, over the SDK's HTTP client
with a bearer token (as `AsyncAnthropicBedrock` sends one).

Invariants:
- The call goes where the provider itself would send it: `base_url` of the user's
  configuration or `ANTHROPIC_BASE_URL` (`config.provider_settings`), never a project's
  choice (the caller reads the user's configuration only: docs/security.md).
- A failure is `VerificationFailed` with one line saying whether the provider refused the
  credential or could not be asked (network, timeout, another answer). Nothing here stores
  anything, and the secret is never in the message.
- SDKs are imported inside the call: importing this module costs nothing.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from defect_core.config import ProviderSpec, Settings, provider_settings

__all__ = ["VerificationFailed", "verify_credential"]


class VerificationFailed(Exception):
    """The credential could not be confirmed: the provider said it is wrong, or could not be
    asked; the message (one line) says which."""


def verify_credential(
    spec: ProviderSpec,
    settings: Settings,
    *,
    api_key: str | None = None,
    bearer_token: str | None = None,
    profile: str | None = None,
    region: str | None = None,
) -> str:
    """Ask the provider with this credential; where it was asked (a URL or a region), or
    `VerificationFailed`."""
    own = provider_settings(settings, spec)
    if spec.kind == "anthropic":
        return asyncio.run(_anthropic(own, api_key or ""))
    if spec.kind == "openai":
        return asyncio.run(_openai(own, spec, api_key or ""))
    if spec.kind == "bedrock":
        return _bedrock(own, bearer_token, profile, region)
    raise VerificationFailed(f"{spec.name} ({spec.kind}) needs no login")


async def _anthropic(settings: Settings, key: str) -> str:
    from defect_core.providers.anthropic.client import anthropic_client, import_sdk

    sdk = import_sdk()
    client = anthropic_client(sdk, settings, key)
    where = str(client.base_url).rstrip("/")
    try:
        await client.models.list(limit=1)
    except Exception as exc:
        raise _failure(exc, sdk.anthropic, where) from None
    finally:
        await client.close()
    return where


async def _openai(settings: Settings, spec: ProviderSpec, key: str) -> str:
    import openai

    from defect_core.providers.openai_compat.provider import OPENAI_BASE_URL

    timeout = openai.Timeout(settings.read_timeout, connect=settings.connect_timeout)
    client = openai.AsyncOpenAI(
        api_key=key, base_url=spec.base_url or OPENAI_BASE_URL, max_retries=0, timeout=timeout
    )
    where = str(client.base_url).rstrip("/")
    try:
        await client.models.list()
    except Exception as exc:
        raise _failure(exc, openai, where) from None
    finally:
        await client.close()
    return where


def _failure(exc: Exception, sdk: Any, where: str) -> VerificationFailed:
    """One line for what the SDK raised: refused, another answer, or unreachable."""
    if isinstance(exc, sdk.AuthenticationError | sdk.PermissionDeniedError):
        return VerificationFailed(
            f"{where} refused the key ({exc.status_code}): check it and try again"
        )
    if isinstance(exc, sdk.APIStatusError):
        return VerificationFailed(
            f"{where} answered {exc.status_code} when asked for its models: the key could not "
            "be checked"
        )
    if isinstance(exc, sdk.APIConnectionError):  # a timeout is one too
        return VerificationFailed(f"{where} could not be reached: {exc}")
    return VerificationFailed(f"{where}: {type(exc).__name__}: {exc}")


def _bedrock(
    settings: Settings, bearer_token: str | None, profile: str | None, region: str | None
) -> str:
    import boto3
    import botocore.exceptions

    region = (
        region
        or settings.aws_region
        or os.environ.get("AWS_REGION")
        or os.environ.get("AWS_DEFAULT_REGION")
    )
    try:
        session = boto3.Session(profile_name=None if bearer_token else profile)
        region = region or session.region_name
        if not region:
            raise VerificationFailed("no AWS region: pass --region (e.g. --region us-east-1)")
        if bearer_token:
            return _bedrock_bearer(settings, bearer_token, region)
        client = session.client(
            "bedrock", region_name=region, endpoint_url=settings.bedrock_base_url or None
        )
        client.list_foundation_models(byProvider="Anthropic")
    except botocore.exceptions.ProfileNotFound:
        raise VerificationFailed(
            f"the AWS profile {profile!r} does not exist (see `aws configure list-profiles`)"
        ) from None
    except botocore.exceptions.ClientError as exc:
        code = exc.response.get("Error", {}).get("Code", "")
        raise _bedrock_failure(region, code, exc.response.get("ResponseMetadata", {})) from None
    except botocore.exceptions.BotoCoreError as exc:
        message = f"Bedrock ({region}) could not be asked: {exc}"
        raise VerificationFailed(message) from None
    return f"Bedrock ({region})"


_REFUSALS = ("UnrecognizedClientException", "AccessDeniedException", "ExpiredTokenException")


def _bedrock_failure(region: str | None, code: str, detail: object) -> VerificationFailed:
    if code in _REFUSALS:
        return VerificationFailed(f"Bedrock ({region}) refused the credentials: {code}")
    return VerificationFailed(f"Bedrock ({region}) answered {code or detail}")


def _bedrock_bearer(settings: Settings, token: str, region: str) -> str:
    """`ListFoundationModels` with a Bedrock API key, as the SDK's Bedrock client sends one
    (`Authorization: Bearer`); boto3 would take it only from the environment, and only over
    HTTPS."""
    from defect_core.providers.anthropic.client import import_sdk

    httpx = import_sdk().httpx
    base = settings.bedrock_base_url or f"https://bedrock.{region}.amazonaws.com"
    try:
        response = httpx.get(
            base.rstrip("/") + "/foundation-models",
            params={"byProvider": "Anthropic"},
            headers={"Authorization": f"Bearer {token}", "Accept": "application/json"},
            timeout=httpx.Timeout(settings.read_timeout, connect=settings.connect_timeout),
        )
    except httpx.HTTPError as exc:
        message = f"Bedrock ({region}) could not be reached: {type(exc).__name__}"
        raise VerificationFailed(message) from None
    if response.status_code != 200:
        code = response.headers.get("x-amzn-errortype", "").split(":")[0]
        if not code and response.status_code in (401, 403):
            code = "AccessDeniedException"
        raise _bedrock_failure(region, code, response.status_code)
    return f"Bedrock ({region})"
