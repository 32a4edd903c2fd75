"""A model behind an OpenAI-compatible Chat Completions server (`kind = "openai"`).

One room per job, lowest first (each module's docstring states its invariants):

- `errors.py`    every failure as a `ProviderError`: HTTP answers, in-stream errors, the
                 transport, `retry-after`
- `assemble.py`  `ChatAssembler`: chunks into deltas and one `Completed` message, or a
                 `ProviderError` (the stream-error guard on this wire)
- `request.py`   the body of one call: messages (`providers/openai_wire.py`, checked against
                 the wire's rules), tools, limits, `reasoning_effort` - only what the model
                 takes (`ModelSettings`)
- `provider.py`  `OpenAICompatProvider`: models (configured, and `GET /v1/models`), the SDK
                 client's life, `stream` tying it together

Invariant: importing this package loads no SDK (`openai`, `httpx2`): the registry imports it
when a session builds its provider, on the `session/new` path (docs/architecture.md, rule 6).
The SDK is imported by the first `stream` or listing, in a worker thread.
"""

from defect_core.providers.openai_compat.assemble import ChatAssembler
from defect_core.providers.openai_compat.provider import OpenAICompatProvider, openai_provider
from defect_core.providers.openai_compat.request import encode_request, model_settings_for

__all__ = [
    "ChatAssembler",
    "OpenAICompatProvider",
    "encode_request",
    "model_settings_for",
    "openai_provider",
]
