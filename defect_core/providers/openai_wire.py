"""The Chat Completions wire shape of a conversation, and the check of its own rules.

Owns the translation of our message model (`defect_core.model`), already repaired for the
Messages wire by `integrity.repair_outbound`, into the `messages` array of a Chat Completions
request (`encode_chat`), the tools array (`encode_tools`), the one id mapping both wires agree
on (`chat_call_id`), and `chat_violations`, the check of an encoded array against the rules of
this wire (`integrity.rules.CHAT_RULES`, stated once there beside the Messages rules).

Invariants:
- The stored history stays in defect's own model: only the outbound copy is converted, and the
  conversion is a function of the repaired messages and the model's `ModelSettings` (whether
  it takes images).
- The repaired copy keeps every Messages rule, so the Chat rules follow: the results leading
  a user message become the `tool` messages right after their assistant message, in call
  order, then the user's text; no result without its call reaches the wire.
- Thinking (signed or not), redacted thinking, the hosted search's blocks and anything else
  only the Messages wire knows never leak: an assistant message is its text and its calls.
- Ids are legal on both wires: an id over 40 characters (or of a shape the Messages wire
  forbids) is mapped to `call_` and a hash of it, the same id always to the same one, so a call
  and its result stay paired whichever wire a session switched from.
- A tool result is a `tool` message of text: its JSON parts as JSON text, an error result
  prefixed `Error: ` (the wire has no `is_error`), an empty one `(no output)`.
- Pure stdlib and our model: no SDK import (cheap, and the tests check exactly what goes out).

Why a module beside `anthropic_wire.py`: each wire's shape is known in one place.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Sequence
from typing import Any

from defect_core.integrity.rules import (
    CHAT_CALL_ID_LEGAL,
    CHAT_IMAGE_TAKEN,
    CHAT_NOTHING_FOREIGN,
    CHAT_RESULT_ANSWERS_A_CALL,
    CHAT_RESULTS_BEFORE_TEXT,
    CHAT_TOOL_CALL_ANSWERED,
    IMAGE_REMOVED_TEXT,
    Rule,
)
from defect_core.model import (
    ImageBlock,
    JsonPart,
    Message,
    TextBlock,
    ToolResultBlock,
    ToolSpec,
    ToolUseBlock,
)

__all__ = [
    "MAX_CALL_ID",
    "ChatViolation",
    "chat_call_id",
    "chat_violations",
    "encode_chat",
    "encode_tools",
]

MAX_CALL_ID = 40
"""The longest tool call id OpenAI's Chat Completions API accepts."""
NO_IMAGES_REASON = "this model is configured without images"
RESULT_IMAGE_REASON = "a tool result cannot carry an image on this wire"

_LEGAL_ID = re.compile(r"[a-zA-Z0-9_-]{1,40}").fullmatch
_MESSAGE_KEYS = {
    "system": frozenset({"role", "content"}),
    "user": frozenset({"role", "content"}),
    "assistant": frozenset({"role", "content", "tool_calls"}),
    "tool": frozenset({"role", "content", "tool_call_id"}),
}

ChatMessage = dict[str, Any]
ChatViolation = tuple[Rule, int | None]
"""A rule an encoded array breaks, and the index of the message that breaks it (None: the end)."""


def chat_call_id(call_id: str) -> str:
    """`call_id` itself when both wires take it, else `call_` and 24 hex digits of its hash."""
    if _LEGAL_ID(call_id):
        return call_id
    return "call_" + hashlib.sha256(call_id.encode("utf-8")).hexdigest()[:24]


def encode_tools(tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    """The request's `tools`: each a `function` with its name, description and JSON schema."""
    return [
        {
            "type": "function",
            "function": {
                "name": tool.name,
                "description": tool.description,
                "parameters": dict(tool.input_schema),
            },
        }
        for tool in tools
    ]


def encode_chat(system: str, messages: Iterable[Message], *, images: bool) -> list[ChatMessage]:
    """The request's `messages`: the system prompt, then each repaired message converted."""
    out: list[ChatMessage] = []
    if system:
        out.append({"role": "system", "content": system})
    for message in messages:
        if message.role == "assistant":
            encoded = _assistant(message)
            if encoded is not None:
                out.append(encoded)
        else:
            out.extend(_user(message, images=images))
    return out


def _assistant(message: Message) -> ChatMessage | None:
    text = "".join(b.text for b in message.content if type(b) is TextBlock)
    calls = [
        {
            "id": chat_call_id(block.id),
            "type": "function",
            "function": {
                "name": block.name,
                "arguments": json.dumps(block.input, ensure_ascii=False),
            },
        }
        for block in message.content
        if isinstance(block, ToolUseBlock)
    ]
    if not text and not calls:
        return None  # only thinking or server-tool blocks: nothing of it crosses this wire
    encoded: ChatMessage = {"role": "assistant", "content": text or None}
    if calls:
        encoded["tool_calls"] = calls
    return encoded


def _user(message: Message, *, images: bool) -> list[ChatMessage]:
    out: list[ChatMessage] = []
    parts: list[dict[str, Any]] = []
    for block in message.content:
        if isinstance(block, ToolResultBlock):
            out.append(
                {
                    "role": "tool",
                    "tool_call_id": chat_call_id(block.tool_use_id),
                    "content": _result_text(block),
                }
            )
        elif isinstance(block, TextBlock):
            parts.append({"type": "text", "text": block.text})
        elif isinstance(block, ImageBlock):
            parts.append(_image(block, images=images))
    if parts:
        if all(p["type"] == "text" for p in parts):
            out.append({"role": "user", "content": "\n\n".join(p["text"] for p in parts)})
        else:
            out.append({"role": "user", "content": parts})
    return out


def _result_text(block: ToolResultBlock) -> str:
    content = block.content
    if isinstance(content, str):
        text = content
    else:
        pieces: list[str] = []
        for part in content:
            if isinstance(part, TextBlock):
                pieces.append(part.text)
            elif isinstance(part, JsonPart):
                pieces.append(json.dumps(part.value, ensure_ascii=False))
            else:
                pieces.append(IMAGE_REMOVED_TEXT.format(reason=RESULT_IMAGE_REASON))
        text = "\n".join(pieces)
    if block.is_error:
        text = f"Error: {text}" if text else "Error"
    return text or "(no output)"


def _image(block: ImageBlock, *, images: bool) -> dict[str, Any]:
    if not images:
        return {"type": "text", "text": IMAGE_REMOVED_TEXT.format(reason=NO_IMAGES_REASON)}
    url = block.url if block.url is not None else f"data:{block.media_type};base64,{block.data}"
    return {"type": "image_url", "image_url": {"url": url}}


# ---------------------------------------------------------------------------------------------
# The check: what the encoded array guarantees (`integrity.rules.CHAT_RULES`).


def chat_violations(messages: Sequence[ChatMessage], *, images: bool) -> list[ChatViolation]:
    """Each rule of `CHAT_RULES` the array breaks, with where; empty for a legal array."""
    found: list[ChatViolation] = []
    open_calls: set[str] = set()
    opened_at: int | None = None
    for index, message in enumerate(messages):
        role = message.get("role")
        if role not in _MESSAGE_KEYS or set(message) - _MESSAGE_KEYS[role]:
            found.append((CHAT_NOTHING_FOREIGN, index))
            continue
        if role == "tool":
            call_id = message.get("tool_call_id")
            if call_id in open_calls:
                open_calls.discard(call_id)
            else:
                found.append((CHAT_RESULT_ANSWERS_A_CALL, index))
            if not isinstance(call_id, str) or not _LEGAL_ID(call_id):
                found.append((CHAT_CALL_ID_LEGAL, index))
            if not isinstance(message.get("content"), str):
                found.append((CHAT_IMAGE_TAKEN, index))
            continue
        found.extend((rule, index) for rule in _content_rules(message, images=images))
        if open_calls and role == "user" and _answers_next(messages, index + 1, open_calls):
            found.append((CHAT_RESULTS_BEFORE_TEXT, index))  # text between calls and results
            continue
        if open_calls:
            found.append((CHAT_TOOL_CALL_ANSWERED, opened_at))
            open_calls = set()
        if role == "assistant":
            for call in message.get("tool_calls") or ():
                found.extend((rule, index) for rule in _call_rules(call))
                open_calls.add(call.get("id"))
            opened_at = index
    if open_calls:
        found.append((CHAT_TOOL_CALL_ANSWERED, opened_at))
    return found


def _answers_next(messages: Sequence[ChatMessage], index: int, open_calls: set[Any]) -> bool:
    """The message at `index` is a `tool` message answering one of `open_calls`."""
    if index >= len(messages):
        return False
    following = messages[index]
    return following.get("role") == "tool" and following.get("tool_call_id") in open_calls


def _content_rules(message: ChatMessage, *, images: bool) -> list[Rule]:
    content = message.get("content")
    if content is None or isinstance(content, str):
        return []
    rules: list[Rule] = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "image_url":
            url = str(part.get("image_url", {}).get("url", ""))
            legal = url.startswith(("data:image/", "http://", "https://"))
            if not images or message.get("role") != "user" or not legal:
                rules.append(CHAT_IMAGE_TAKEN)
        elif kind != "text" or set(part) != {"type", "text"}:
            rules.append(CHAT_NOTHING_FOREIGN)
    return rules


def _call_rules(call: Any) -> list[Rule]:
    rules: list[Rule] = []
    if not isinstance(call, dict) or not _LEGAL_ID(str(call.get("id", ""))):
        rules.append(CHAT_CALL_ID_LEGAL)
    function = call.get("function") if isinstance(call, dict) else None
    arguments = function.get("arguments") if isinstance(function, dict) else None
    try:
        parsed = json.loads(arguments) if isinstance(arguments, str) else None
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict):
        rules.append(CHAT_NOTHING_FOREIGN)
    return rules
