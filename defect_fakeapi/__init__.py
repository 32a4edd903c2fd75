"""A strict fake of the Anthropic Messages API and of Bedrock's streaming invoke, on 127.0.0.1.

Run it as `defect fake-api --script FILE.json` (or `python -m defect_fakeapi`), or hold a
`FakeProvider` in a test: point the real `anthropic` SDK at its `url`, script its answers with
`Reply`s, and read back what it saw (`RequestRecord`). It rejects exactly what the real API
rejects (`validate_request`, the rules in `defect_fakeapi.validation`) with the API's own
error, and streams exactly what the real API streams. See `docs/provider-wire.md`.

Modules, one job each: `server` (`FakeProvider`), `http` (routes, auth, streaming), `backend`
(what `http` asks of its owner), `models` (the model list), `sse` and `eventstream`
(encoding), `validation` and `shape` (request rules), `script` (replies and faults), `cache`
(the prompt cache), `cli` (`defect fake-api`); the Chat Completions wire beside it: `chat`
(its routes), `chat_validation` (its rules), `chat_stream` (its chunks), `chat_cache` (a
server's automatic prefix cache). They are layered without a cycle (contract 17 of
docs/layers.md).

This package is a tool for tests and offline runs: nothing on `defect acp`'s path imports it.
"""

from defect_fakeapi.cache import CacheUsage, PromptCache
from defect_fakeapi.chat_cache import ChatPrefixCache
from defect_fakeapi.chat_validation import ChatWireError, validate_chat_request
from defect_fakeapi.cli import main
from defect_fakeapi.models import DEFAULT_MODELS, model_entry, models_page
from defect_fakeapi.script import (
    HttpError,
    RedactedThinkingBlock,
    Reply,
    RequestRecord,
    Responder,
    ScriptBlock,
    SearchHit,
    ServerToolUseBlock,
    TextBlock,
    ThinkingBlock,
    ToolUseBlock,
    Usage,
    WebSearchResultBlock,
    estimate_tokens,
    load_script,
    write_script,
)
from defect_fakeapi.server import (
    DEFAULT_API_KEY,
    DEFAULT_AWS_ACCESS_KEY_ID,
    DEFAULT_AWS_SECRET_KEY,
    FakeProvider,
)
from defect_fakeapi.validation import (
    WireError,
    count_cache_breakpoints,
    validate_bedrock_body,
    validate_request,
)

__all__ = [
    "DEFAULT_API_KEY",
    "DEFAULT_AWS_ACCESS_KEY_ID",
    "DEFAULT_AWS_SECRET_KEY",
    "DEFAULT_MODELS",
    "CacheUsage",
    "ChatPrefixCache",
    "ChatWireError",
    "FakeProvider",
    "HttpError",
    "PromptCache",
    "RedactedThinkingBlock",
    "Reply",
    "RequestRecord",
    "Responder",
    "ScriptBlock",
    "SearchHit",
    "ServerToolUseBlock",
    "TextBlock",
    "ThinkingBlock",
    "ToolUseBlock",
    "Usage",
    "WebSearchResultBlock",
    "WireError",
    "count_cache_breakpoints",
    "estimate_tokens",
    "load_script",
    "main",
    "model_entry",
    "models_page",
    "validate_bedrock_body",
    "validate_chat_request",
    "validate_request",
    "write_script",
]
