"""The Anthropic Messages wire shape of message content, both directions.

Owns the translation between our message model (`defect_core.model`) and the JSON the
Messages API speaks: `encode_message` / `encode_messages` for the request's `messages` array,
and `decode_content_block` / `decode_assistant_content` for the content blocks of a final
response message. This is the one place that knows how content looks on the wire; the
Anthropic and the Bedrock providers (the same body goes inside Bedrock's envelope) both call
it, after `integrity.repair_outbound` has made the history wire-legal.

Invariants:
- Pure stdlib and our model: no SDK import, so it is cheap to import and the strict fake
  provider in the tests can check exactly what goes out.
- Encoding is faithful: a signed thinking block goes out byte-exact with its signature (the
  API refuses edited thinking), `is_error` is written only when true, nothing is invented.
  The encoder does not repair: it is given repaired messages. The one thing it refuses is
  unsigned thinking, which the API can never accept - that is a missing repair, not data.
- Decoding is strict about what it understands and names what is wrong
  (`MessageFormatError`); it ignores fields it does not use (`citations`, `cache_control`).
- The hosted web search's blocks (`server_tool_use`, `web_search_tool_result`) go back
  exactly as they came: the provider pairs them inside the assistant message, and each
  result's `encrypted_content` is the provider's own.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from defect_core.model import (
    ContentBlock,
    ImageBlock,
    JsonPart,
    Message,
    MessageFormatError,
    RedactedThinkingBlock,
    ServerToolUseBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    WebSearchError,
    WebSearchHit,
    WebSearchResultBlock,
)

__all__ = [
    "decode_assistant_content",
    "decode_content_block",
    "decode_search_content",
    "encode_block",
    "encode_message",
    "encode_messages",
]

WireBlock = dict[str, Any]


def encode_messages(messages: Iterable[Message]) -> list[dict[str, Any]]:
    """The request's `messages` array."""
    return [encode_message(m) for m in messages]


def encode_message(message: Message) -> dict[str, Any]:
    """One `{"role", "content": [blocks]}` entry of the request's `messages` array."""
    return {"role": message.role, "content": [encode_block(b) for b in message.content]}


def encode_block(block: ContentBlock) -> WireBlock:
    """One content block in its wire form."""
    if isinstance(block, TextBlock):
        return {"type": "text", "text": block.text}
    if isinstance(block, ToolUseBlock):
        return {"type": "tool_use", "id": block.id, "name": block.name, "input": block.input}
    if isinstance(block, ToolResultBlock):
        return _encode_result(block)
    if isinstance(block, ThinkingBlock):
        if not block.signature:
            raise ValueError(
                "unsigned thinking cannot be sent to the API; "
                "messages must go through repair_outbound first"
            )
        return {"type": "thinking", "thinking": block.thinking, "signature": block.signature}
    if isinstance(block, RedactedThinkingBlock):
        return {"type": "redacted_thinking", "data": block.data}
    if isinstance(block, ImageBlock):
        return _encode_image(block)
    if isinstance(block, ServerToolUseBlock):
        return {"type": "server_tool_use", "id": block.id, "name": block.name, "input": block.input}
    if isinstance(block, WebSearchResultBlock):
        return {
            "type": "web_search_tool_result",
            "tool_use_id": block.tool_use_id,
            "content": _encode_search_content(block.content),
        }
    raise TypeError(f"not a content block: {type(block).__name__}")


def _encode_image(block: ImageBlock) -> WireBlock:
    if block.data is not None:
        source = {"type": "base64", "media_type": block.media_type, "data": block.data}
    else:
        source = {"type": "url", "url": block.url}
    return {"type": "image", "source": source}


def _encode_search_content(
    content: tuple[WebSearchHit, ...] | WebSearchError,
) -> list[WireBlock] | WireBlock:
    if isinstance(content, WebSearchError):
        return {"type": "web_search_tool_result_error", "error_code": content.error_code}
    hits: list[WireBlock] = []
    for hit in content:
        wire: WireBlock = {
            "type": "web_search_result",
            "url": hit.url,
            "title": hit.title,
            "encrypted_content": hit.encrypted_content,
        }
        if hit.page_age is not None:
            wire["page_age"] = hit.page_age
        hits.append(wire)
    return hits


def _encode_result(block: ToolResultBlock) -> WireBlock:
    content: str | list[WireBlock]
    if isinstance(block.content, str):
        content = block.content
    else:
        content = []
        for part in block.content:
            if isinstance(part, TextBlock):
                content.append({"type": "text", "text": part.text})
            elif isinstance(part, JsonPart):
                content.append({"type": "text", "text": json.dumps(part.value)})
            else:
                content.append(_encode_image(part))
    wire: WireBlock = {"type": "tool_result", "tool_use_id": block.tool_use_id, "content": content}
    if block.is_error:
        wire["is_error"] = True
    return wire


def decode_assistant_content(blocks: Iterable[Mapping[str, Any]]) -> Message:
    """The assistant message made of a final response's `content` array."""
    decoded: list[ContentBlock] = []
    for index, block in enumerate(blocks):
        try:
            decoded.append(decode_content_block(block))
        except MessageFormatError as exc:
            raise MessageFormatError(f"content.{index}: {exc}") from None
    return Message(role="assistant", content=tuple(decoded))


def decode_content_block(block: Mapping[str, Any]) -> ContentBlock:
    """One content block of a response message: text, thinking, redacted thinking, tool use,
    server tool use, web search result.

    Raises `MessageFormatError` naming the field for anything else or anything malformed.
    """
    if not isinstance(block, Mapping):
        raise MessageFormatError(f"a content block must be an object, got {type(block).__name__}")
    kind = block.get("type")
    if kind == "text":
        return TextBlock(text=_str(block, "text"))
    if kind == "thinking":
        signature = block.get("signature")
        if signature is not None and not isinstance(signature, str):
            raise MessageFormatError("thinking.signature: must be a string")
        return ThinkingBlock(thinking=_str(block, "thinking"), signature=signature)
    if kind == "redacted_thinking":
        return RedactedThinkingBlock(data=_str(block, "data"))
    if kind == "tool_use":
        tool_input = block.get("input", {})
        if not isinstance(tool_input, Mapping):
            raise MessageFormatError(
                f"tool_use.input: must be an object, got {type(tool_input).__name__}"
            )
        return ToolUseBlock(
            id=_str(block, "id", "tool_use"),
            name=_str(block, "name", "tool_use"),
            input=dict(tool_input),
        )
    if kind == "server_tool_use":
        tool_input = block.get("input", {})
        if not isinstance(tool_input, Mapping):
            raise MessageFormatError("server_tool_use.input: must be an object")
        return ServerToolUseBlock(
            id=_str(block, "id"), name=_str(block, "name"), input=dict(tool_input)
        )
    if kind == "web_search_tool_result":
        return WebSearchResultBlock(
            tool_use_id=_str(block, "tool_use_id"),
            content=decode_search_content(block.get("content")),
        )
    raise MessageFormatError(f"type: unsupported content block type {kind!r}")


def decode_search_content(content: object) -> tuple[WebSearchHit, ...] | WebSearchError:
    """A `web_search_tool_result`'s `content`: its hits, or the error object."""
    if isinstance(content, Mapping):
        code = content.get("error_code")
        if content.get("type") != "web_search_tool_result_error" or not isinstance(code, str):
            raise MessageFormatError("web_search_tool_result.content: not a list nor an error")
        return WebSearchError(error_code=code)
    if not isinstance(content, list):
        raise MessageFormatError("web_search_tool_result.content: must be a list or an error")
    hits: list[WebSearchHit] = []
    for item in content:
        if not isinstance(item, Mapping) or item.get("type") != "web_search_result":
            raise MessageFormatError("web_search_tool_result.content: not a web_search_result")
        page_age = item.get("page_age")
        hits.append(
            WebSearchHit(
                url=_str(item, "url"),
                title=_str(item, "title"),
                encrypted_content=_str(item, "encrypted_content"),
                page_age=page_age if isinstance(page_age, str) else None,
            )
        )
    return tuple(hits)


def _str(block: Mapping[str, Any], key: str, kind: str | None = None) -> str:
    value = block.get(key)
    if not isinstance(value, str):
        where = f"{kind or block.get('type')}.{key}"
        problem = "field required" if value is None else f"must be a string, got {value!r}"
        raise MessageFormatError(f"{where}: {problem}")
    return value
