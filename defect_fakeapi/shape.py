"""The shape rules of an Anthropic Messages request body, and the error they raise.

Owns `WireError` (the API's answer: status, `error.type`, `error.message`) and rule 1 of
`defect_fakeapi.validation`: required fields, types, unknown keys, roles, block types and
their fields, `cache_control` shape, tool definitions, and the tool id / name patterns, each
refused with the API's pydantic-style wording (`<path>: Field required`, `<path>: Extra
inputs are not permitted`). The hosted web search is modelled too: its tool definition
(`web_search_20250305`: name, `max_uses`, one domain list at most, never an empty one, the user
location) and its assistant blocks (`server_tool_use` with a `srvtoolu_…` id,
`web_search_tool_result` with a list of `web_search_result` blocks or an error object).

Invariant: every check names the path of the offending value exactly as the client sent it
(`messages.N.content.M...`), so an error points at the block to fix.

Why apart from the conversation rules: shape is local to one value; the rules in
`validation` are about how messages relate, and read better without this bulk in the way.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping, Sequence
from typing import Any

TOOL_ID_PATTERN = "^[a-zA-Z0-9_-]+$"
TOOL_NAME_PATTERN = "^[a-zA-Z0-9_-]{1,128}$"
SERVER_TOOL_ID_PATTERN = "^srvtoolu_[a-zA-Z0-9_]+$"
_TOOL_ID_RE = re.compile(TOOL_ID_PATTERN)
_TOOL_NAME_RE = re.compile(TOOL_NAME_PATTERN)
_SERVER_TOOL_ID_RE = re.compile(SERVER_TOOL_ID_PATTERN)

WEB_SEARCH_TOOL_TYPE = "web_search_20250305"
WEB_SEARCH_ERROR_CODES = (
    "invalid_tool_input",
    "unavailable",
    "max_uses_exceeded",
    "too_many_requests",
    "query_too_long",
    "request_too_large",
)
SERVER_TOOL_NAMES = (
    "web_search",
    "web_fetch",
    "code_execution",
    "bash_code_execution",
    "text_editor_code_execution",
    "tool_search_tool_regex",
    "tool_search_tool_bm25",
)

MAX_CACHE_BREAKPOINTS = 4
MIN_THINKING_BUDGET = 1024
THINKING_DOCS_URL = "https://docs.claude.com/en/docs/build-with-claude/extended-thinking"

BEDROCK_ANTHROPIC_VERSIONS = frozenset({"bedrock-2023-05-31", "2026-10-21"})
"""`anthropic_version` values Bedrock accepts: the classic one, and the one SDK 2.10–2.12 send."""

BLOCK_TYPES = (
    "text",
    "image",
    "document",
    "thinking",
    "redacted_thinking",
    "tool_use",
    "tool_result",
    "server_tool_use",
    "web_search_tool_result",
)
_TOOL_RESULT_CONTENT_TYPES = ("text", "image", "document")
_ASSISTANT_ONLY = frozenset(
    {"tool_use", "thinking", "redacted_thinking", "server_tool_use", "web_search_tool_result"}
)
_USER_ONLY = frozenset({"tool_result"})

_MESSAGES_KEYS = frozenset(
    {
        "model",
        "max_tokens",
        "messages",
        "system",
        "tools",
        "tool_choice",
        "thinking",
        "stream",
        "metadata",
        "stop_sequences",
        "temperature",
        "top_p",
        "top_k",
        "service_tier",
        "container",
        "context_management",
        "mcp_servers",
        "output_config",
        "output_format",
        "inference_geo",
        "speed",
        "diagnostics",
        "cache_control",
        "user_profile_id",
    }
)
_COUNT_TOKENS_KEYS = frozenset(
    {
        "model",
        "messages",
        "system",
        "tools",
        "tool_choice",
        "thinking",
        "output_config",
        "output_format",
        "speed",
        "cache_control",
        "context_management",
        "mcp_servers",
    }
)
_BEDROCK_EXTRA_KEYS = frozenset({"anthropic_version", "anthropic_beta"})
_MESSAGE_KEYS = frozenset({"role", "content"})
_CACHE_CONTROL_KEYS = frozenset({"type", "ttl"})
_BLOCK_KEYS: dict[str, frozenset[str]] = {
    "text": frozenset({"type", "text", "cache_control", "citations"}),
    "image": frozenset({"type", "source", "cache_control", "transformations"}),
    "document": frozenset({"type", "source", "cache_control", "citations", "context", "title"}),
    "thinking": frozenset({"type", "thinking", "signature"}),
    "redacted_thinking": frozenset({"type", "data"}),
    "tool_use": frozenset(
        {"type", "id", "name", "input", "cache_control", "caller", "toolset_name"}
    ),
    "tool_result": frozenset(
        {"type", "tool_use_id", "content", "is_error", "cache_control", "toolset_name"}
    ),
    "server_tool_use": frozenset({"type", "id", "name", "input", "cache_control", "caller"}),
    "web_search_tool_result": frozenset(
        {"type", "tool_use_id", "content", "cache_control", "caller"}
    ),
}
_WEB_SEARCH_RESULT_KEYS = frozenset({"type", "url", "title", "encrypted_content", "page_age"})
_WEB_SEARCH_TOOL_KEYS = frozenset(
    {
        "type",
        "name",
        "max_uses",
        "allowed_domains",
        "blocked_domains",
        "user_location",
        "cache_control",
        "allowed_callers",
        "defer_loading",
        "strict",
    }
)
_USER_LOCATION_KEYS = frozenset({"type", "city", "region", "country", "timezone"})
_TOOL_KEYS = frozenset(
    {
        "type",
        "name",
        "description",
        "input_schema",
        "cache_control",
        "allowed_callers",
        "defer_loading",
        "eager_input_streaming",
        "input_examples",
        "strict",
    }
)


class WireError(Exception):
    """The error the real API would answer: HTTP status, `error.type` and `error.message`."""

    def __init__(self, status: int, error_type: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.error_type = error_type
        self.message = message

    def __repr__(self) -> str:
        return f"WireError({self.status}, {self.error_type!r}, {self.message!r})"


def _invalid(message: str) -> WireError:
    return WireError(400, "invalid_request_error", message)


# --------------------------------------------------------------------------------------------
# Shape


def _type_name(value: object) -> str:
    return type(value).__name__


def _require(obj: Mapping[str, Any], key: str, path: str) -> Any:
    if key not in obj:
        raise _invalid(f"{path}.{key}: Field required" if path else f"{key}: Field required")
    return obj[key]


def _expect_str(value: object, path: str) -> str:
    if not isinstance(value, str):
        raise _invalid(f"{path}: Input should be a valid string")
    return value


def _expect_dict(value: object, path: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise _invalid(f"{path}: Input should be a valid dictionary")
    return value


def _expect_list(value: object, path: str) -> list[Any]:
    if not isinstance(value, list):
        raise _invalid(f"{path}: Input should be a valid list")
    return value


def _expect_int(value: object, path: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _invalid(f"{path}: Input should be a valid integer")
    return value


def _check_keys(obj: Mapping[str, Any], allowed: frozenset[str], path: str) -> None:
    for key in obj:
        if key not in allowed:
            raise _invalid(f"{path}.{key}: Extra inputs are not permitted")


def _check_cache_control(block: Mapping[str, Any], path: str) -> None:
    """`path` is the block's tagged path (`messages.0.content.1.text`, `tools.0.custom`)."""
    if block.get("cache_control") is None:
        return
    cc = _expect_dict(block["cache_control"], f"{path}.cache_control")
    if cc.get("type") != "ephemeral":
        raise _tag_error(f"{path}.cache_control", cc.get("type"), ("ephemeral",))
    _check_keys(cc, _CACHE_CONTROL_KEYS, f"{path}.cache_control.ephemeral")
    if "ttl" in cc and cc["ttl"] not in ("5m", "1h"):
        raise _invalid(f"{path}.cache_control.ephemeral.ttl: Input should be '5m' or '1h'")


def _tag_error(path: str, tag: object, allowed: Sequence[str]) -> WireError:
    expected = ", ".join(f"'{t}'" for t in allowed)
    return _invalid(
        f"{path}: Input tag '{tag}' found using 'type' does not match any of the expected "
        f"tags: {expected}"
    )


def _check_fields(block: Mapping[str, Any], kind: str, path: str) -> None:
    """Required fields, their types and unknown keys of one block; `path` without the tag."""
    tagged = f"{path}.{kind}"
    _check_keys(block, _BLOCK_KEYS[kind], tagged)
    _check_cache_control(block, tagged)
    if kind == "text":
        _expect_str(_require(block, "text", tagged), f"{tagged}.text")
    elif kind in ("image", "document"):
        source = _expect_dict(_require(block, "source", tagged), f"{tagged}.source")
        if "type" not in source:
            raise _invalid(f"{tagged}.source.type: Field required")
        if kind == "image" and source["type"] == "base64":
            _check_base64_image(source, f"{tagged}.source.base64")
    elif kind == "thinking":
        _expect_str(_require(block, "thinking", tagged), f"{tagged}.thinking")
        _expect_str(_require(block, "signature", tagged), f"{tagged}.signature")
    elif kind == "redacted_thinking":
        _expect_str(_require(block, "data", tagged), f"{tagged}.data")
    elif kind == "tool_use":
        tool_id = _expect_str(_require(block, "id", tagged), f"{tagged}.id")
        if not _TOOL_ID_RE.match(tool_id):
            raise _invalid(f"{tagged}.id: String should match pattern '{TOOL_ID_PATTERN}'")
        _expect_str(_require(block, "name", tagged), f"{tagged}.name")
        _expect_dict(_require(block, "input", tagged), f"{tagged}.input")
    elif kind == "tool_result":
        tool_use_id = _expect_str(_require(block, "tool_use_id", tagged), f"{tagged}.tool_use_id")
        if not _TOOL_ID_RE.match(tool_use_id):
            raise _invalid(f"{tagged}.tool_use_id: String should match pattern '{TOOL_ID_PATTERN}'")
        if "is_error" in block and not isinstance(block["is_error"], bool):
            raise _invalid(f"{tagged}.is_error: Input should be a valid boolean")
        content = block.get("content")
        if content is not None and not isinstance(content, str):
            for k, item in enumerate(_expect_list(content, f"{tagged}.content")):
                ipath = f"{tagged}.content.{k}"
                item = _expect_dict(item, ipath)
                item_kind = item.get("type")
                if item_kind not in _TOOL_RESULT_CONTENT_TYPES:
                    raise _tag_error(ipath, item_kind, _TOOL_RESULT_CONTENT_TYPES)
                _check_fields(item, str(item_kind), ipath)
    elif kind == "server_tool_use":
        tool_id = _expect_str(_require(block, "id", tagged), f"{tagged}.id")
        if not _SERVER_TOOL_ID_RE.match(tool_id):
            raise _invalid(f"{tagged}.id: String should match pattern '{SERVER_TOOL_ID_PATTERN}'")
        name = _require(block, "name", tagged)
        if name not in SERVER_TOOL_NAMES:
            allowed = ", ".join(f"'{n}'" for n in SERVER_TOOL_NAMES[:-1])
            raise _invalid(f"{tagged}.name: Input should be {allowed} or '{SERVER_TOOL_NAMES[-1]}'")
        _expect_dict(_require(block, "input", tagged), f"{tagged}.input")
    elif kind == "web_search_tool_result":
        tool_use_id = _expect_str(_require(block, "tool_use_id", tagged), f"{tagged}.tool_use_id")
        if not _SERVER_TOOL_ID_RE.match(tool_use_id):
            raise _invalid(
                f"{tagged}.tool_use_id: String should match pattern '{SERVER_TOOL_ID_PATTERN}'"
            )
        _check_web_search_content(_require(block, "content", tagged), f"{tagged}.content")


def _check_web_search_content(content: object, path: str) -> None:
    """A `web_search_tool_result`'s content: a list of `web_search_result` blocks, or one
    `web_search_tool_result_error` object with a known `error_code`."""
    if isinstance(content, Mapping):
        if content.get("type") != "web_search_tool_result_error":
            raise _tag_error(path, content.get("type"), ("web_search_tool_result_error",))
        tagged = f"{path}.web_search_tool_result_error"
        _check_keys(content, frozenset({"type", "error_code"}), tagged)
        if _require(content, "error_code", tagged) not in WEB_SEARCH_ERROR_CODES:
            allowed = ", ".join(f"'{c}'" for c in WEB_SEARCH_ERROR_CODES[:-1])
            raise _invalid(
                f"{tagged}.error_code: Input should be {allowed} or '{WEB_SEARCH_ERROR_CODES[-1]}'"
            )
        return
    for k, item in enumerate(_expect_list(content, path)):
        ipath = f"{path}.{k}"
        item = _expect_dict(item, ipath)
        if item.get("type") != "web_search_result":
            raise _tag_error(ipath, item.get("type"), ("web_search_result",))
        tagged = f"{ipath}.web_search_result"
        _check_keys(item, _WEB_SEARCH_RESULT_KEYS, tagged)
        for key in ("url", "title", "encrypted_content"):
            _expect_str(_require(item, key, tagged), f"{tagged}.{key}")
        if item.get("page_age") is not None:
            _expect_str(item["page_age"], f"{tagged}.page_age")


_IMAGE_MEDIA_TYPES = ("image/jpeg", "image/png", "image/gif", "image/webp")
_MAX_IMAGE_BASE64 = 5 * 1024 * 1024


def _check_base64_image(source: Mapping[str, Any], path: str) -> None:
    """Inline images as the API refuses them: media type not PNG, JPEG, GIF or WebP; over
    5 MB of base64; invalid base64; bytes of no known image type ("Could not process image",
    also the answer to a PNG without its `IHDR`) or of another type than declared; a PNG or
    GIF over 8000 pixels a side (JPEG and WebP dimensions are not read here)."""
    if source.get("media_type") not in _IMAGE_MEDIA_TYPES:
        allowed = ", ".join(f"'{t}'" for t in _IMAGE_MEDIA_TYPES[:-1])
        raise _invalid(f"{path}.media_type: Input should be {allowed} or 'image/webp'")
    data = _expect_str(_require(source, "data", path), f"{path}.data")
    if len(data) > _MAX_IMAGE_BASE64:
        raise _invalid(
            f"{path}: image exceeds 5 MB maximum: {len(data)} bytes > {_MAX_IMAGE_BASE64} bytes"
        )
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise _invalid(f"{path}: invalid base64 data") from None
    if raw.startswith(b"\x89PNG\r\n\x1a\n"):
        if raw[12:16] != b"IHDR":
            raise _invalid("Could not process image")
        actual, size = "image/png", (int.from_bytes(raw[16:20]), int.from_bytes(raw[20:24]))
    elif raw.startswith((b"GIF87a", b"GIF89a")):
        size = (int.from_bytes(raw[6:8], "little"), int.from_bytes(raw[8:10], "little"))
        actual = "image/gif"
    elif raw.startswith(b"\xff\xd8\xff"):
        actual, size = "image/jpeg", (0, 0)
    elif raw.startswith(b"RIFF") and raw[8:12] == b"WEBP":
        actual, size = "image/webp", (0, 0)
    else:
        raise _invalid("Could not process image")
    if actual != source["media_type"]:
        raise _invalid(
            f"{path}.data: Image does not match the provided media type {source['media_type']}"
        )
    if max(size) > 8000:
        raise _invalid(
            f"{path}.data: At least one of the image dimensions exceed max allowed size: "
            "8000 pixels"
        )


def _check_block(block: object, path: str, role: str) -> None:
    block = _expect_dict(block, path)
    kind = block.get("type")
    if kind is None:
        raise _invalid(f"{path}.type: Field required")
    if kind not in BLOCK_TYPES:
        raise _tag_error(path, kind, BLOCK_TYPES)
    if role == "user" and kind in _ASSISTANT_ONLY:  # judged
        raise _invalid(f"{path}: `{kind}` blocks can only be in `assistant` messages")
    if role == "assistant" and kind in _USER_ONLY:  # judged
        raise _invalid(f"{path}: `{kind}` blocks can only be in `user` messages")
    _check_fields(block, str(kind), path)


def _check_tools(tools: object) -> None:
    for i, tool in enumerate(_expect_list(tools, "tools")):
        path = f"tools.{i}"
        tool = _expect_dict(tool, path)
        if tool.get("type") == WEB_SEARCH_TOOL_TYPE:
            _check_web_search_tool(tool, f"{path}.{WEB_SEARCH_TOOL_TYPE}")
            continue
        if tool.get("type") not in (None, "custom"):
            # Other versioned server/client tools (bash_20250124, ...) are not modelled.
            _expect_str(_require(tool, "name", path), f"{path}.name")
            continue
        tagged = f"{path}.custom"
        _check_keys(tool, _TOOL_KEYS, tagged)
        name = _expect_str(_require(tool, "name", tagged), f"{tagged}.name")
        if not _TOOL_NAME_RE.match(name):
            raise _invalid(f"{tagged}.name: String should match pattern '{TOOL_NAME_PATTERN}'")
        schema = _expect_dict(_require(tool, "input_schema", tagged), f"{tagged}.input_schema")
        if schema.get("type") != "object":
            raise _invalid(f"{tagged}.input_schema.type: Input should be 'object'")
        _check_cache_control(tool, tagged)


def _check_web_search_tool(tool: Mapping[str, Any], tagged: str) -> None:
    """The hosted web search tool's definition: its name is `web_search`, `max_uses` a
    positive integer, at most one of the domain lists (each non-empty strings), and an
    `approximate` user location."""
    _check_keys(tool, _WEB_SEARCH_TOOL_KEYS, tagged)
    if _require(tool, "name", tagged) != "web_search":
        raise _invalid(f"{tagged}.name: Input should be 'web_search'")
    if tool.get("max_uses") is not None:
        max_uses = _expect_int(tool["max_uses"], f"{tagged}.max_uses")
        if max_uses < 1:
            raise _invalid(f"{tagged}.max_uses: Input should be greater than 0")
    for key in ("allowed_domains", "blocked_domains"):
        if tool.get(key) is None:
            continue
        domains = _expect_list(tool[key], f"{tagged}.{key}")
        if not domains:
            raise _invalid(
                f"{tagged}.{key}: Empty list of domains is ambiguous. Provide at least one "
                "domain or null."
            )
        for k, domain in enumerate(domains):
            _expect_str(domain, f"{tagged}.{key}.{k}")
    if tool.get("allowed_domains") is not None and tool.get("blocked_domains") is not None:
        raise _invalid(  # judged: the tool's own wording
            f"{tagged}: Cannot specify both allowed_domains and blocked_domains in the same request"
        )
    location = tool.get("user_location")
    if location is not None:
        location = _expect_dict(location, f"{tagged}.user_location")
        if location.get("type") != "approximate":
            raise _tag_error(f"{tagged}.user_location", location.get("type"), ("approximate",))
        _check_keys(location, _USER_LOCATION_KEYS, f"{tagged}.user_location.approximate")
        for key in ("city", "region", "country", "timezone"):
            if location.get(key) is not None:
                _expect_str(location[key], f"{tagged}.user_location.approximate.{key}")
    _check_cache_control(tool, tagged)


def _check_system(system: object) -> None:
    if isinstance(system, str):
        return
    for i, block in enumerate(_expect_list(system, "system")):
        path = f"system.{i}"
        block = _expect_dict(block, path)
        if block.get("type") != "text":
            raise _tag_error(path, block.get("type"), ("text",))
        _check_fields(block, "text", path)


def _blocks_of(message: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The message's content as blocks; string content is shorthand for one text block."""
    content = message["content"]
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    return list(content)


def _check_shape(body: Mapping[str, Any], *, count_tokens: bool, require_model: bool) -> None:
    allowed = _COUNT_TOKENS_KEYS if count_tokens else _MESSAGES_KEYS
    for key in body:
        if key not in allowed:
            raise _invalid(f"{key}: Extra inputs are not permitted")
    if require_model:
        model = _expect_str(_require(body, "model", ""), "model")
        if not model:
            raise _invalid("model: String should have at least 1 character")
    if not count_tokens:
        max_tokens = _expect_int(_require(body, "max_tokens", ""), "max_tokens")
        if max_tokens < 1:
            raise _invalid("max_tokens: Input should be greater than or equal to 1")
        if "stream" in body and not isinstance(body["stream"], bool):
            raise _invalid("stream: Input should be a valid boolean")
    if "system" in body:
        _check_system(body["system"])
    if "tools" in body:
        _check_tools(body["tools"])
    messages = _expect_list(_require(body, "messages", ""), "messages")
    if not messages:
        raise _invalid("messages: at least one message is required")
    for n, message in enumerate(messages):
        path = f"messages.{n}"
        message = _expect_dict(message, path)
        _check_keys(message, _MESSAGE_KEYS, path)
        role = _require(message, "role", path)
        if role not in ("user", "assistant"):
            raise _invalid(f"{path}.role: Input should be 'user' or 'assistant'")
        content = _require(message, "content", path)
        if isinstance(content, str):
            continue
        for m, block in enumerate(_expect_list(content, f"{path}.content")):
            _check_block(block, f"{path}.content.{m}", role)
