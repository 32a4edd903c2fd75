"""The fake API's script: what it answers, reply by reply, and what it saw.

Owns `Reply` (one scripted answer: content blocks, stop reason, usage, and its faults — an
HTTP error with `retry-after-ms`, `event: error` mid-stream, a cut stream, a stall, slow chunks,
a `max_tokens` cut inside a tool input), the blocks it streams (`TextBlock`, `ThinkingBlock`,
`RedactedThinkingBlock`, `ToolUseBlock`, and the hosted web search's `ServerToolUseBlock` and
`WebSearchResultBlock`), `Usage`, `HttpError`, the JSON script format
(`load_script`, `write_script`, with the CLI's shorthands) and `RequestRecord`.

Invariant: faults are scripted per reply, never random; a reply is data, so the same script
answers the same way every run, from a test or from `defect fake-api --script FILE`.

Why: the agent's handling of each failure the real service produces must be testable on
purpose, one fault at a time.
"""

from __future__ import annotations

import dataclasses
import json
import os
import secrets
import string
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from defect_fakeapi.cache import CacheUsage

ERROR_TYPES: dict[int, str] = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}
DEFAULT_ERROR_MESSAGES: dict[int, str] = {
    400: "Invalid request",
    401: "invalid x-api-key",
    403: "Your API key does not have permission to use the specified resource.",
    404: "Not found",
    413: "Request exceeds the maximum allowed number of bytes.",
    429: "Number of requests has exceeded your rate limit. Please try again later.",
    500: "Internal server error",
    529: "Overloaded",
}

_ID_ALPHABET = string.ascii_letters + string.digits


def random_id(prefix: str) -> str:
    return prefix + "".join(secrets.choice(_ID_ALPHABET) for _ in range(24))


def estimate_tokens(body: Mapping[str, Any]) -> int:
    """The fake's token count for a request: UTF-8 bytes of system, messages and tools / 4."""
    counted = {key: body[key] for key in ("system", "messages", "tools") if key in body}
    size = len(json.dumps(counted, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))
    return max(1, size // 4)


# --------------------------------------------------------------------------------------------
# Script


@dataclass(frozen=True)
class TextBlock:
    """A `text` block, streamed as `text_delta` chunks."""

    text: str


@dataclass(frozen=True)
class ThinkingBlock:
    """A `thinking` block; `signature=None` means the fake mints (and later checks) one."""

    thinking: str
    signature: str | None = None


@dataclass(frozen=True)
class RedactedThinkingBlock:
    """A `redacted_thinking` block with opaque `data`."""

    data: str


@dataclass(frozen=True)
class ToolUseBlock:
    """A `tool_use` block; the input is streamed as `input_json_delta` chunks.

    `raw_json` replaces the streamed JSON (for a cut-off input); `input` is then ignored.
    """

    id: str
    name: str
    input: Mapping[str, Any] = field(default_factory=dict)
    raw_json: str | None = None


@dataclass(frozen=True)
class ServerToolUseBlock:
    """A `server_tool_use` block (the API running its web search): started with an empty
    input, which then streams as `input_json_delta` chunks like a client tool's."""

    id: str
    input: Mapping[str, Any] = field(default_factory=dict)
    name: str = "web_search"


@dataclass(frozen=True)
class SearchHit:
    """One `web_search_result`; `encrypted_content` is minted when not given."""

    url: str
    title: str
    page_age: str | None = None
    encrypted_content: str | None = None


@dataclass(frozen=True)
class WebSearchResultBlock:
    """A `web_search_tool_result` block, sent whole in `content_block_start` (no deltas):
    the `hits`, or with `error_code` a `web_search_tool_result_error`."""

    tool_use_id: str
    hits: tuple[SearchHit, ...] = ()
    error_code: str | None = None

    def wire_content(self) -> list[dict[str, Any]] | dict[str, Any]:
        """The block's `content` as the API sends it."""
        if self.error_code is not None:
            return {"type": "web_search_tool_result_error", "error_code": self.error_code}
        return [
            {
                "type": "web_search_result",
                "url": hit.url,
                "title": hit.title,
                "encrypted_content": hit.encrypted_content or random_id("Eq"),
                "page_age": hit.page_age,
            }
            for hit in self.hits
        ]


ScriptBlock = (
    TextBlock
    | ThinkingBlock
    | RedactedThinkingBlock
    | ToolUseBlock
    | ServerToolUseBlock
    | WebSearchResultBlock
)


@dataclass(frozen=True)
class Usage:
    """Usage to report; `None` input/output counts are estimated from the request/reply."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0


@dataclass(frozen=True)
class HttpError:
    """An HTTP error answer instead of a stream (the real envelope, or Bedrock's)."""

    status: int
    error_type: str
    message: str
    retry_after_ms: int | None = None
    retry_after: int | None = None
    should_retry: bool | None = None


def _tool_id() -> str:
    return random_id("toolu_01")


def server_tool_id() -> str:
    return random_id("srvtoolu_01")


@dataclass(frozen=True)
class Reply:
    """One scripted answer. Build with the constructors, adjust with the `with_*`/fault methods.

    Fault positions count stream events written before the fault (`message_start` is event 1;
    `ping` events are not counted): `error_after=0` sends `event: error` right after headers.
    """

    blocks: tuple[ScriptBlock, ...] = ()
    stop_reason: str | None = "end_turn"
    stop_sequence: str | None = None
    usage: Usage = Usage()
    http_error: HttpError | None = None
    error_after: int | None = None
    stream_error_type: str = "overloaded_error"
    stream_error_message: str = "Overloaded"
    bedrock_exception: str | None = None
    cut_after: int | None = None
    cut_abrupt: bool = False
    stall_after: int | None = None
    stall_seconds: float | None = None
    chunk_delay: float = 0.0
    chunk_size: int = 16
    ping: bool = True
    model: str | None = None
    chat_usage: bool = True
    """False: a Chat Completions answer leaves its usage chunk out although the request asked
    for it (`stream_options.include_usage`), as some servers do (`chat_stream.py`)."""
    chat_dialect: str = "openai"
    """`llama.cpp`: a Chat Completions answer in the shapes llama.cpp's server sends, as
    `scripts/real_server_check.py` saw them (`chat_stream.py` lists them)."""

    # -- constructors ----------------------------------------------------------------------

    @classmethod
    def of(
        cls,
        blocks: Sequence[ScriptBlock],
        *,
        stop_reason: str | None = None,
        usage: Usage | None = None,
    ) -> Reply:
        """A multi-block reply; stop_reason defaults to `tool_use` when a tool is used."""
        if stop_reason is None:
            uses_tool = any(isinstance(b, ToolUseBlock) for b in blocks)
            stop_reason = "tool_use" if uses_tool else "end_turn"
        return cls(blocks=tuple(blocks), stop_reason=stop_reason, usage=usage or Usage())

    @classmethod
    def text(cls, text: str, *, stop_reason: str = "end_turn", usage: Usage | None = None) -> Reply:
        """A text reply."""
        return cls.of([TextBlock(text)], stop_reason=stop_reason, usage=usage)

    @classmethod
    def tool_use(
        cls,
        id: str | None,
        name: str,
        input: Mapping[str, Any],
        *,
        text_before: str | None = None,
        usage: Usage | None = None,
    ) -> Reply:
        """A `tool_use` reply (stop_reason `tool_use`); `id=None` generates a `toolu_01…` id."""
        blocks: list[ScriptBlock] = [TextBlock(text_before)] if text_before else []
        blocks.append(ToolUseBlock(id or _tool_id(), name, dict(input)))
        return cls.of(blocks, stop_reason="tool_use", usage=usage)

    @classmethod
    def thinking(
        cls, thinking: str, then: Reply | None = None, *, signature: str | None = None
    ) -> Reply:
        """A thinking block (signed by the fake unless `signature` is given), then `then`."""
        rest = then if then is not None else cls(stop_reason="end_turn")
        return dataclasses.replace(rest, blocks=(ThinkingBlock(thinking, signature), *rest.blocks))

    @classmethod
    def web_search(
        cls,
        query: str,
        hits: Sequence[SearchHit] = (),
        *,
        id: str | None = None,
        error_code: str | None = None,
        text_after: str | None = None,
        stop_reason: str = "end_turn",
    ) -> Reply:
        """The API's hosted search: a `server_tool_use` for `query`, its result (`hits`, or
        the `error_code`), then `text_after`; `usage.server_tool_use` counts the search."""
        use_id = id or server_tool_id()
        blocks: list[ScriptBlock] = [
            ServerToolUseBlock(use_id, {"query": query}),
            WebSearchResultBlock(use_id, tuple(hits), error_code),
        ]
        if text_after:
            blocks.append(TextBlock(text_after))
        return cls.of(blocks, stop_reason=stop_reason)

    @classmethod
    def max_tokens_tool_use(
        cls,
        id: str | None,
        name: str,
        input: Mapping[str, Any],
        *,
        keep_chars: int | None = None,
        text_before: str | None = None,
    ) -> Reply:
        """Stop at `max_tokens` inside a tool input: the streamed JSON is cut after
        `keep_chars` characters (default: half)."""
        full = json.dumps(dict(input))
        keep = len(full) // 2 if keep_chars is None else keep_chars
        blocks: list[ScriptBlock] = [TextBlock(text_before)] if text_before else []
        blocks.append(ToolUseBlock(id or _tool_id(), name, dict(input), raw_json=full[:keep]))
        return cls.of(blocks, stop_reason="max_tokens")

    @classmethod
    def error(
        cls,
        status: int,
        message: str | None = None,
        *,
        error_type: str | None = None,
        retry_after_ms: int | None = None,
        retry_after: int | None = None,
        should_retry: bool | None = None,
    ) -> Reply:
        """An HTTP error answer: 529 overloaded_error, 429 rate_limit_error, 500, 400, …

        Prefer `retry_after_ms`: the SDK really sleeps for `retry-after` seconds.
        """
        return cls(
            http_error=HttpError(
                status=status,
                error_type=error_type or ERROR_TYPES.get(status, "api_error"),
                message=message or DEFAULT_ERROR_MESSAGES.get(status, "Error"),
                retry_after_ms=retry_after_ms,
                retry_after=retry_after,
                should_retry=should_retry,
            )
        )

    @classmethod
    def overloaded(cls, *, retry_after_ms: int | None = 10) -> Reply:
        """HTTP 529 `overloaded_error`."""
        return cls.error(529, retry_after_ms=retry_after_ms)

    @classmethod
    def rate_limited(cls, *, retry_after_ms: int | None = 10) -> Reply:
        """HTTP 429 `rate_limit_error`."""
        return cls.error(429, retry_after_ms=retry_after_ms)

    # -- adjustments -----------------------------------------------------------------------

    def with_usage(
        self,
        *,
        input_tokens: int | None = None,
        output_tokens: int | None = None,
        cache_creation_input_tokens: int = 0,
        cache_read_input_tokens: int = 0,
    ) -> Reply:
        """Report this usage instead of the estimate."""
        usage = Usage(
            input_tokens, output_tokens, cache_creation_input_tokens, cache_read_input_tokens
        )
        return dataclasses.replace(self, usage=usage)

    def with_stop_reason(self, stop_reason: str, stop_sequence: str | None = None) -> Reply:
        """Report this stop_reason (and stop_sequence) in `message_delta`."""
        return dataclasses.replace(self, stop_reason=stop_reason, stop_sequence=stop_sequence)

    def with_model(self, model: str) -> Reply:
        """Report this model instead of echoing the request's."""
        return dataclasses.replace(self, model=model)

    def error_mid_stream(
        self,
        after: int,
        *,
        error_type: str = "overloaded_error",
        message: str = "Overloaded",
        bedrock_exception: str | None = None,
    ) -> Reply:
        """Send `event: error` (Bedrock: an exception frame) after `after` events, then end."""
        return dataclasses.replace(
            self,
            error_after=after,
            stream_error_type=error_type,
            stream_error_message=message,
            bedrock_exception=bedrock_exception,
        )

    def cut(self, after: int, *, abrupt: bool = False) -> Reply:
        """End the stream after `after` events, before `message_stop`.

        By default the HTTP body ends cleanly (the SDK raises nothing; stop_reason stays None);
        `abrupt=True` closes the connection mid-body (the SDK raises a protocol error).
        """
        return dataclasses.replace(self, cut_after=after, cut_abrupt=abrupt)

    def stall(self, after: int, *, seconds: float | None = None) -> Reply:
        """Stop sending after `after` events for `seconds` (then resume), or, with None, until
        the client goes away or the server stops."""
        return dataclasses.replace(self, stall_after=after, stall_seconds=seconds)

    def slow(self, chunk_delay: float) -> Reply:
        """Wait `chunk_delay` seconds before each event after the first."""
        return dataclasses.replace(self, chunk_delay=chunk_delay)

    def without_ping(self) -> Reply:
        """Send no `ping` event."""
        return dataclasses.replace(self, ping=False)

    # -- JSON scripts ----------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form, read back by `Reply.from_dict`."""
        data: dict[str, Any] = {}
        defaults = Reply()
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "blocks":
                if value:
                    data["blocks"] = [_block_to_dict(b) for b in value]
            elif f.name == "usage":
                if value != Usage():
                    data["usage"] = dataclasses.asdict(value)
            elif f.name == "http_error":
                if value is not None:
                    data["error"] = dataclasses.asdict(value)
            elif value != getattr(defaults, f.name):
                data[f.name] = value
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Reply:
        """Read a reply from JSON. Besides the `to_dict` form, shorthands are accepted:
        `{"text": "hi"}`, `{"tool_use": {"id", "name", "input"}, "text_before": …}`,
        `{"thinking": "…", "then": {…}}`, `{"error": {"status": 529, …}}`."""
        data = dict(data)
        if "text" in data:
            base = cls.text(data.pop("text"))
        elif "tool_use" in data:
            use = data.pop("tool_use")
            base = cls.tool_use(
                use.get("id"),
                use["name"],
                use.get("input", {}),
                text_before=data.pop("text_before", None),
            )
        elif "thinking" in data:
            then = data.pop("then", None)
            base = cls.thinking(
                data.pop("thinking"),
                cls.from_dict(then) if then is not None else None,
                signature=data.pop("signature", None),
            )
        elif "error" in data:
            err = dict(data.pop("error"))
            status = int(err.pop("status"))
            kind = err.pop("error_type", err.pop("type", None))
            base = cls.error(status, err.pop("message", None), error_type=kind, **err)
        else:
            blocks = [_block_from_dict(b) for b in data.pop("blocks", [])]
            base = cls.of(blocks, stop_reason=data.pop("stop_reason", None))
        if "usage" in data:
            base = dataclasses.replace(base, usage=Usage(**data.pop("usage")))
        names = {f.name for f in dataclasses.fields(cls)} - {"blocks", "usage", "http_error"}
        unknown = set(data) - names
        if unknown:
            raise ValueError(f"unknown reply keys: {sorted(unknown)}")
        return dataclasses.replace(base, **data)


def _block_to_dict(block: ScriptBlock) -> dict[str, Any]:
    kinds: dict[type, str] = {
        TextBlock: "text",
        ThinkingBlock: "thinking",
        RedactedThinkingBlock: "redacted_thinking",
        ToolUseBlock: "tool_use",
        ServerToolUseBlock: "server_tool_use",
        WebSearchResultBlock: "web_search_tool_result",
    }
    data = {"type": kinds[type(block)], **dataclasses.asdict(block)}
    return {k: v for k, v in data.items() if v is not None}


def _block_from_dict(data: Mapping[str, Any]) -> ScriptBlock:
    data = dict(data)
    kind = data.pop("type")
    if kind == "text":
        return TextBlock(**data)
    if kind == "thinking":
        return ThinkingBlock(**data)
    if kind == "redacted_thinking":
        return RedactedThinkingBlock(**data)
    if kind == "tool_use":
        if "id" not in data:
            data["id"] = _tool_id()
        return ToolUseBlock(**data)
    if kind == "server_tool_use":
        return ServerToolUseBlock(**data)
    if kind == "web_search_tool_result":
        hits = tuple(SearchHit(**hit) for hit in data.pop("hits", ()))
        return WebSearchResultBlock(hits=hits, **data)
    raise ValueError(f"unknown block type {kind!r}")


def load_script(path: str | os.PathLike[str]) -> list[Reply]:
    """Read a JSON list of replies (see `Reply.from_dict`)."""
    items = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(items, list):
        raise ValueError("a script is a JSON list of replies")
    return [Reply.from_dict(item) for item in items]


def write_script(path: str | os.PathLike[str], replies: Sequence[Reply]) -> None:
    """Write replies as a JSON script for the CLI."""
    Path(path).write_text(json.dumps([r.to_dict() for r in replies], indent=2), encoding="utf-8")


# --------------------------------------------------------------------------------------------
# What the fake saw


Outcome = Literal[
    "pending",
    "rejected",
    "exhausted",
    "http_error",
    "count_tokens",
    "models",
    "completed",
    "stream_error",
    "cut",
    "stalled",
    "client_disconnected",
    "not_found",
]


@dataclass
class RequestRecord:
    """One request as the fake saw it, and how it was answered."""

    index: int
    method: str
    path: str
    route: Literal["anthropic", "count_tokens", "models", "bedrock", "chat", "unknown"]
    headers: dict[str, str]
    raw_body: bytes
    body: Any
    model: str | None = None
    status: int | None = None
    outcome: Outcome = "pending"
    rejected: bool = False
    error_type: str | None = None
    error_message: str | None = None
    reply: Reply | None = None
    events_sent: int = 0
    client_disconnected: bool = False
    cache_usage: CacheUsage | None = None
    """What the simulated prompt cache reported (only with `FakeProvider(prompt_cache=...)`)."""
    done: threading.Event = field(default_factory=threading.Event, repr=False, compare=False)

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The request's `messages` (empty when the body had none)."""
        if isinstance(self.body, dict) and isinstance(self.body.get("messages"), list):
            return list(self.body["messages"])
        return []

    def to_json(self) -> dict[str, Any]:
        """JSON-ready summary (for the CLI's request log)."""
        return {
            "index": self.index,
            "method": self.method,
            "path": self.path,
            "route": self.route,
            "model": self.model,
            "status": self.status,
            "outcome": self.outcome,
            "rejected": self.rejected,
            "error_type": self.error_type,
            "error_message": self.error_message,
            "events_sent": self.events_sent,
            "client_disconnected": self.client_disconnected,
            "body": self.body,
        }


Responder = Callable[[RequestRecord], Reply]
"""A scripted entry computed from the request (for replies that depend on what was sent)."""
