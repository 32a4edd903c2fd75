"""The streamed Messages call, made through the SDK client's own `post`.

Owns `create_stream(client, body, extra_body=...)`: the request `client.messages.create(**body,
stream=True, extra_body=...)` sends, sent without importing the SDK's messages resource.

Why: `anthropic.resources.messages.messages` imports, at module level, the batches resource,
the request-parameter types of both the Messages API and its beta (about 600 modules of
pydantic models and typed dicts) and `lib.streaming` (which parametrises generic models as
it loads): about half of the SDK's import time, all of it on the first prompt's wait, and
none of it used by a streamed `create`, which only puts the body in its key order and calls
the client's `_post`. This module makes that same call (same path, body, headers, options,
span name and route), so the SDK's own client still builds, signs (Bedrock), sends, retries
and decodes the request; the SDK loads only its client, errors and stream event types.

Invariants:
- The request is the one `messages.create` sends, byte for byte: the body's keys in the
  method's order (its three required keys, then the others alphabetically, `stream` among
  them), an empty `extra_headers`, the same span options. A test sends both through the strict
  fake API and compares the raw bodies and headers (tests/test_provider_anthropic_call.py), so
  an SDK release that changes `create` fails there first.
- The span attributes `create` computes (`messages_create_request_attributes`) are computed
  only when OpenTelemetry has a tracer provider set; with none (the default) every span is a
  no-op that drops its attributes, and loading the SDK's tracing module would only load the
  beta types again. What `create` alone adds is skipped: its `DeprecationWarning`/`UserWarning`
  for retired models (stderr only).
- Cheap until used: importing this module loads no SDK; the call resolves the SDK's modules
  (loaded by then: `client.load_sdk`) when it runs.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

__all__ = ["MESSAGES_PATH", "SPAN_NAME", "create_stream", "ordered_body"]

MESSAGES_PATH = "/v1/messages"
SPAN_NAME = "anthropic.messages.create"
# `messages.create`'s required keyword arguments: its body lists them first.
_REQUIRED = ("max_tokens", "messages", "model")
_TRACING = "anthropic.lib._tracing._api_call"


def ordered_body(body: Mapping[str, Any]) -> dict[str, Any]:
    """`body` with `stream: true`, in the key order `messages.create` sends."""
    streamed = {**body, "stream": True}
    keys = [k for k in _REQUIRED if k in streamed]
    keys += sorted(k for k in streamed if k not in _REQUIRED)
    return {k: streamed[k] for k in keys}


async def create_stream(
    client: Any, body: Mapping[str, Any], *, extra_body: Mapping[str, Any] | None = None
) -> Any:
    """`await client.messages.create(**body, stream=True, extra_body=extra_body)`: the SDK's
    `AsyncStream` of the raw stream events, each as the JSON the SDK parsed (to read with
    `stream_events.stream_event`: its deltas without a model apiece), or the SDK's
    exception."""
    base = importlib.import_module("anthropic._base_client")
    streaming = importlib.import_module("anthropic._streaming")
    message = importlib.import_module("anthropic.types.message")
    options = base.make_request_options(
        extra_headers={},
        extra_body=extra_body,
        span_name=SPAN_NAME,
        span_route=MESSAGES_PATH,
        span_attributes=span_attributes,
    )
    return await client.post(
        MESSAGES_PATH,
        body=ordered_body(body),
        options=options,
        cast_to=message.Message,
        stream=True,
        stream_cls=streaming.AsyncStream[object],
    )


def span_attributes(body: object) -> Mapping[str, Any]:
    """What `messages.create` starts its span with: the SDK's own attributes when a tracer
    provider is set, else none (a no-op span keeps no attribute)."""
    from opentelemetry import trace

    if isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        return {}
    computed: Mapping[str, Any] = importlib.import_module(
        _TRACING
    ).messages_create_request_attributes(body)
    return computed
