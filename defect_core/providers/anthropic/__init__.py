"""Claude on the Anthropic API and on AWS Bedrock: one wire, two routes, one stream guard.

One room per job, lowest first (each module's docstring states its invariants):

- `lazy_sdk.py`  the SDK's quarantine: every private name of `anthropic` defect reads (for
                 the lazy import of the SDK, nothing else), behind one switch
- `catalog.py`   the routes and their models: built-in lists, configured ids
                 (room for a live model listing)
- `request.py`   the Messages body of one call: messages (content via
                 `providers/anthropic_wire.py`), tools, system, cache breakpoints, thinking
                 (room for server tools such as `web_search_20250305`)
- `errors.py`    every failure as a `ProviderError`: HTTP answers, in-stream errors, SDK
                 and transport exceptions, `retry-after`
- `stream.py`    `StreamAssembler`: stream events into deltas and one `Completed` message,
                 or a `ProviderError` (the stream-error guard; room for server-tool blocks)
- `client.py`    the SDK, imported late, and a client per route: `AsyncAnthropic` or
                 `AsyncAnthropicBedrock`, credentials, timeouts (each configured provider
                 is its own `Settings` given to these builders)
- `listing.py`   the live model lists: `GET /v1/models`, Bedrock's profiles and models
- `call.py`      the streamed `POST /v1/messages` through the SDK client's public `post`,
                 without the SDK's messages resource (a third of the SDK to import)
- `provider.py`  `AnthropicProvider`: models, the client's life, `stream` tying it together

Invariant: importing this package loads no SDK (`anthropic`, `httpx2`, `boto3`): the registry
imports it when a session builds its provider, on the `session/new` path
(docs/architecture.md, rule 6). The SDK is imported by the first `stream`, in a worker thread.
"""

from defect_core.providers.anthropic.catalog import ANTHROPIC_MODELS, BEDROCK_MODELS, Route
from defect_core.providers.anthropic.errors import (
    classify_status_error,
    request_id_of,
    retry_after_seconds,
)
from defect_core.providers.anthropic.provider import (
    AnthropicProvider,
    anthropic_provider,
    bedrock_provider,
)
from defect_core.providers.anthropic.request import BEDROCK_ANTHROPIC_VERSION, encode_request
from defect_core.providers.anthropic.stream import StreamAssembler

__all__ = [
    "ANTHROPIC_MODELS",
    "BEDROCK_ANTHROPIC_VERSION",
    "BEDROCK_MODELS",
    "AnthropicProvider",
    "Route",
    "StreamAssembler",
    "anthropic_provider",
    "bedrock_provider",
    "classify_status_error",
    "encode_request",
    "request_id_of",
    "retry_after_seconds",
]
