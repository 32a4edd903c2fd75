"""The streamed Messages call, made through the SDK client's own `post`.

Owns `create_stream(client, body, extra_body=...)`: the request `client.messages.create(**body,
stream=True, extra_body=...)` sends, sent without importing the SDK's messages resource; and
`stream_batches(stream, client)`: the events of the stream it returned, one batch per piece of
the body httpx hands over (`response.aiter_raw()`, its public reader).

Why: `anthropic.resources.messages.messages` imports, at module level, the batches resource,
the request-parameter types of both the Messages API and its beta (hundreds of modules of
pydantic models and typed dicts) and `lib.streaming` (which parametrises generic models as
it loads): much of the SDK's import time, all of it on the first prompt's wait, and none of
it used by a streamed `create`, which only puts the body in its key order and posts it. The
SDK documents its client's `post` for requests its resources do not type (the path, `body`
or `content`, `cast_to`, `options` as the public `anthropic.RequestOptions`, `stream` and
`stream_cls`): this module makes `create`'s request through it, so the SDK's own client still
builds, signs (Bedrock), sends, retries and decodes the request, and loads only its client,
errors and stream event types.

Invariants:
- Public API only: the client's `post`, `anthropic.RequestOptions` keys, `anthropic.AsyncStream`
  and its `response`, `anthropic.APIStatusError`, the `anthropic.types` the call names. No
  private name of the SDK is read here nor anywhere in the call (tests/test_sdk_quarantine.py);
  so the call is the same whatever `lazy_sdk.enabled` says, and the switch changes only how
  the SDK is imported (`lazy_sdk.py`).
- The request is the one `messages.create` sends, byte for byte: the body's keys in the
  method's order (its three required keys, then the others alphabetically, `stream` among
  them), an empty `extra_headers`, the extra body. A test sends both through the strict fake
  API and compares the raw bodies and headers (tests/test_provider_anthropic_call.py), so an
  SDK release that changes `create` fails there first.
- What `create` alone adds: its span's name, route and attributes (the public options cannot
  name them), which only a set OpenTelemetry tracer provider records. With one set, the call
  is `client.messages.create` itself, iterated by the SDK, so every span is the SDK's; with
  none (the default) every span is a no-op. `create`'s `DeprecationWarning`/`UserWarning` for
  retired models (stderr only) is skipped.
- On the Anthropic API route with tracing off, the body goes to the client as the bytes
  `create` would have sent (`content=`: the SDK's own encoder settings over the same plain
  JSON), so the SDK neither copies the whole body (a Python walk of every container, on the
  event loop, per request: about as much as encoding it) nor encodes it again. Anywhere the
  SDK must see the body as data - Bedrock's client (it moves the model into the path), an
  extra body, a value that is not plain JSON - it gets the data. A test pins which way each
  route takes and that both send the same bytes (tests/test_provider_anthropic_call.py).
- The request is built in slices, the event loop handed back between them: after the body's
  translation (`request.encode_request`), after its encoding, and, through the request hook
  every client is built with (`client.py`), between the SDK's request build and httpx's
  send. A build held the loop in one piece, during which the deltas of every other session
  streaming waited (scripts/bench_turn.py, sessions at once). A test pins
  that another task runs between the slices (tests/test_provider_anthropic_call.py).
- Cheap until used: importing this module loads no SDK; the call resolves the SDK's modules
  (loaded by then: `client.load_sdk`) when it runs.
- `stream_batches` reads the response with defect's own SSE reader (`sse.py`: the same
  events and errors) where the SDK would decode it with its plain SSE decoder and no tracing
  observer waits for the stream's items: the Anthropic API's client (`anthropic.AsyncAnthropic`
  itself), no tracer provider set. Anywhere else (Bedrock's event stream, a traced call) the
  SDK's stream is iterated as it is, one event per batch. A test pins that the client this
  project builds takes defect's reader, and that it yields and raises what the SDK's
  iteration does (tests/test_provider_anthropic_sse.py). It is kept for a fast stream's
  deltas: read by the SDK one by one, a burst's p95 latency (scripts/bench_turn.py, one
  session) missed its target more often.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import AsyncGenerator, Mapping
from typing import Any

import anyio

from defect_core.providers.anthropic.sse import read_events

__all__ = ["MESSAGES_PATH", "create_stream", "ordered_body", "stream_batches"]

MESSAGES_PATH = "/v1/messages"
# `messages.create`'s required keyword arguments: its body lists them first.
_REQUIRED = ("max_tokens", "messages", "model")
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)
"""The SDK's body encoder without its `default`: it takes plain JSON values only, and encodes
them as the SDK does (tests/test_provider_anthropic_call.py compares the bytes)."""


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
    exception. With a tracer provider set, `messages.create` itself (the docstring)."""
    if _traced():
        return await client.messages.create(**body, stream=True, extra_body=extra_body)
    anthropic = importlib.import_module("anthropic")
    options: dict[str, Any] = {"headers": {}}  # what `create` passes: `anthropic.RequestOptions`
    if extra_body is not None:
        options["extra_json"] = extra_body
    ordered = ordered_body(body)
    # The loop is handed back between the phases of building the request (the body's
    # translation before this call, its encoding, the SDK's own build; the client's request
    # hook splits that last one, `client._http_client`): other sessions' deltas waiting on
    # the loop go out between them instead of behind the whole build.
    await anyio.lowlevel.checkpoint()
    content = _encoded(client, ordered, extra_body)
    await anyio.lowlevel.checkpoint()
    return await client.post(
        MESSAGES_PATH,
        **({"body": ordered} if content is None else {"content": content}),
        options=options,
        cast_to=importlib.import_module("anthropic.types.message").Message,
        stream=True,
        stream_cls=anthropic.AsyncStream[object],
    )


def _encoded(client: Any, body: dict[str, Any], extra_body: object) -> bytes | None:
    """The bytes the SDK would send for `body`, for it to send as they are; None where the
    SDK must see the body itself: another client than the Anthropic API's (Bedrock moves the
    model into the path), an extra body to merge, or a value that is not plain JSON (the SDK
    converts it first, or refuses it)."""
    anthropic = importlib.import_module("anthropic")
    if extra_body is not None or type(client) is not anthropic.AsyncAnthropic:
        return None
    try:
        return _ENCODER.encode(body).encode()
    except (TypeError, ValueError):
        return None


def stream_batches(stream: Any, client: Any) -> AsyncGenerator[list[Any], None]:
    """The events of `stream` (what `create_stream(client, ...)` returned), each as the JSON
    the SDK would have yielded, one list per piece of the body httpx hands over; raises what
    the SDK's iteration raises. Close it (or read it to its end), then close `stream`."""
    anthropic = importlib.import_module("anthropic")
    if type(client) is not anthropic.AsyncAnthropic or _traced():
        return _one_by_one(stream)
    response = stream.response

    def make_error(message: str, body: object) -> Exception:
        # What the SDK raises for an `error` event of a stream whose answer was a success
        # (its status maps to no typed error): tests/test_provider_anthropic_sse.py.
        return anthropic.APIStatusError(message, response=response, body=body)

    encoded = response.headers.get("content-encoding", "identity") != "identity"
    chunks = response.aiter_bytes() if encoded else response.aiter_raw()
    return read_events(chunks, make_error, response.status_code)


async def _one_by_one(stream: Any) -> AsyncGenerator[list[Any], None]:
    async for data in stream:
        yield [data]


def _traced() -> bool:
    """Whether OpenTelemetry has a tracer provider set (spans then record)."""
    from opentelemetry import trace

    return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
