"""The fake API's model list: `GET /v1/models`, paginated as the real one is.

Owns the models the fake offers by default (`DEFAULT_MODELS`, in the API's shape), how one
is written (`model_entry`), Bedrock's `ListFoundationModels` of the same models
(`serve_foundation_models`), and one page of the list for a query string (`models_page`):
`limit` (1-1000, default 20), `after_id` or `before_id`, answered as
`{"data", "has_more", "first_id", "last_id"}`.

Invariant: the answer is the real API's, including its refusals: a `limit` out of range or
not a number, or a cursor naming no model, is a 400 `invalid_request_error` naming the
parameter; `first_id`/`last_id` are null on an empty page.

Why a room of its own: `http.py` routes and authenticates; what a page holds is data, tested
on its own and through the real SDK's page iterator.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Sequence
from typing import Any

__all__ = [
    "DEFAULT_MODELS",
    "ModelsQueryError",
    "model_entry",
    "models_page",
    "serve_foundation_models",
]

DEFAULT_LIMIT = 20
MAX_LIMIT = 1000


def model_entry(
    model_id: str,
    display_name: str | None = None,
    *,
    created_at: str = "2025-09-29T00:00:00Z",
    max_input_tokens: int | None = 200_000,
    lifecycle: str = "active",
) -> dict[str, Any]:
    """One model as `GET /v1/models` lists it."""
    return {
        "type": "model",
        "id": model_id,
        "display_name": display_name or model_id,
        "created_at": created_at,
        "lifecycle": lifecycle,
        "max_input_tokens": max_input_tokens,
    }


DEFAULT_MODELS: tuple[dict[str, Any], ...] = (
    model_entry("claude-sonnet-5-5", "Claude Sonnet 5.5"),
    model_entry("claude-opus-5-5", "Claude Opus 5.5"),
    model_entry("claude-haiku-5-5", "Claude Haiku 5.5"),
)


class ModelsQueryError(ValueError):
    """A query the real API refuses with a 400; the message is the API's."""


def models_page(models: Sequence[dict[str, Any]], query: str) -> dict[str, Any]:
    """The page of `models` the query string asks for. Raises `ModelsQueryError`."""
    params = urllib.parse.parse_qs(query, keep_blank_values=True)
    raw_limit = params.get("limit", [str(DEFAULT_LIMIT)])[-1]
    try:
        limit = int(raw_limit)
    except ValueError:
        raise ModelsQueryError(
            f"limit: Input should be a valid integer, got {raw_limit!r}"
        ) from None
    if not 1 <= limit <= MAX_LIMIT:
        raise ModelsQueryError(
            f"limit: Input should be greater than or equal to 1 and less than or equal to "
            f"{MAX_LIMIT}"
        )
    ids = [m["id"] for m in models]
    after = params.get("after_id", [None])[-1]
    before = params.get("before_id", [None])[-1]
    if after and before:
        raise ModelsQueryError("after_id and before_id cannot both be set")
    start, end = 0, len(models)
    if after:
        if after not in ids:
            raise ModelsQueryError(f"after_id: no model with id {after!r}")
        start = ids.index(after) + 1
        end = min(len(models), start + limit)
    elif before:
        if before not in ids:
            raise ModelsQueryError(f"before_id: no model with id {before!r}")
        end = ids.index(before)
        start = max(0, end - limit)
    else:
        end = min(len(models), limit)
    data = [dict(m) for m in models[start:end]]
    has_more = end < len(models) if not before else start > 0
    return {
        "data": data,
        "has_more": has_more,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
    }


def serve_foundation_models(handler: Any, record: Any) -> None:
    """Bedrock's `ListFoundationModels` (`GET /foundation-models`) on the request `handler`
    (`http.py`), authenticated as the runtime is (SigV4 shape and key id, or the bearer
    token): the check `defect login` makes. Every model of `models` as an Anthropic model
    that streams text on demand."""
    record.route = "foundation_models"
    auth_error = handler._check_sigv4(record)
    if auth_error is not None:
        handler._bedrock_error(record, 403, auth_error[0], auth_error[1], rejected=True)
        return
    summaries = [
        {
            "modelId": f"anthropic.{entry['id']}-v1:0",
            "modelName": str(entry.get("display_name", entry["id"])),
            "providerName": "Anthropic",
            "inputModalities": ["TEXT"],
            "outputModalities": ["TEXT"],
            "responseStreamingSupported": True,
            "inferenceTypesSupported": ["ON_DEMAND"],
            "modelLifecycle": {"status": "ACTIVE"},
        }
        for entry in handler.provider.models
    ]
    record.status = 200
    record.outcome = "models"
    body = json.dumps({"modelSummaries": summaries}).encode("utf-8")
    handler._send_bytes(200, body, {"content-type": "application/json"})
