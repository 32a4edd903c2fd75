"""The live model lists: what each route says it offers right now.

Owns `anthropic_models` (the Anthropic API's `GET /v1/models`, through the SDK client, every
page) and `bedrock_models` (Bedrock's `ListInferenceProfiles` and `ListFoundationModels`
through boto3, Anthropic's models only), both as `ModelInfo`s.

Invariants:
- Never on the `initialize`/`session/new` path: the provider calls these from
  `list_models`, which the runtime runs in the background (`providers/live.py`) and answers
  from the configured list until they return (docs/architecture.md, rule 6).
- What cannot be used is left out: retired models (the API's `lifecycle`), Bedrock models
  that do not stream text on demand, inference profiles of other vendors.
- Failures are exceptions of the SDK or botocore; the provider turns them into a
  `ProviderError` (`errors.translate_exception`), and the caller falls back to the
  configured list.

Why a room of its own: the listing is a second conversation with each service, with its own
endpoints and shapes (Bedrock's control plane is not the runtime the messages go to).
"""

from __future__ import annotations

import os
from typing import Any

from defect_core.config import Settings
from defect_core.providers.anthropic.catalog import DEFAULT_CONTEXT_WINDOW
from defect_core.providers.base import ModelInfo

__all__ = ["anthropic_models", "bedrock_models"]

PAGE_SIZE = 100
"""Models per page of `GET /v1/models` (the API's maximum is 1000; its default 20)."""


async def anthropic_models(client: Any) -> list[ModelInfo]:
    """Every model of `GET /v1/models`, newest first as the API orders them; the SDK's page
    iterator follows `has_more`/`last_id` to the end."""
    models: list[ModelInfo] = []
    async for info in client.models.list(limit=PAGE_SIZE):
        if getattr(info, "lifecycle", "active") == "retired":
            continue
        window = getattr(info, "max_input_tokens", None) or DEFAULT_CONTEXT_WINDOW
        models.append(ModelInfo(info.id, info.display_name or info.id, None, window))
    return models


def bedrock_models(settings: Settings) -> list[ModelInfo]:
    """Anthropic's models on Bedrock: the system inference profiles first (what on-demand
    calls of recent models need), then the foundation models that stream text on demand.
    Blocking (boto3): run it in a worker thread. `base_url` (a gateway, or the fake API in
    the tests) is used for the control plane too."""
    import boto3

    region = (
        settings.aws_region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    )
    session = boto3.Session(profile_name=settings.aws_profile, region_name=region)
    client = session.client("bedrock", endpoint_url=settings.bedrock_base_url or None)
    models: list[ModelInfo] = []
    token: str | None = None
    while True:
        page = client.list_inference_profiles(
            typeEquals="SYSTEM_DEFINED", **({"nextToken": token} if token else {})
        )
        for profile in page.get("inferenceProfileSummaries", []):
            profile_id = str(profile.get("inferenceProfileId", ""))
            if ".anthropic." not in f".{profile_id}" or profile.get("status") != "ACTIVE":
                continue
            name = str(profile.get("inferenceProfileName") or profile_id)
            models.append(ModelInfo(profile_id, name, "inference profile", DEFAULT_CONTEXT_WINDOW))
        token = page.get("nextToken")
        if not token:
            break
    page = client.list_foundation_models(byProvider="Anthropic", byOutputModality="TEXT")
    for summary in page.get("modelSummaries", []):
        lifecycle = (summary.get("modelLifecycle") or {}).get("status", "ACTIVE")
        if (
            lifecycle != "ACTIVE"
            or not summary.get("responseStreamingSupported")
            or "ON_DEMAND" not in summary.get("inferenceTypesSupported", [])
        ):
            continue
        model_id = str(summary["modelId"])
        name = str(summary.get("modelName") or model_id)
        models.append(ModelInfo(model_id, name, "foundation model", DEFAULT_CONTEXT_WINDOW))
    return models
