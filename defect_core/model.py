"""The message model: what a conversation is made of, independent of any wire.

Owns the roles (`user`, `assistant`), the content blocks a message can carry (text, image,
thinking, redacted thinking, tool use, tool result, and the provider-run web search's server
tool use and its result), the mark of a user message committed inside a running turn (a
steer, a note: `Message.inside_turn`), their JSON form, and what a model is
told about a tool it may call (`ToolSpec`: the tools describe themselves with it, the
providers encode it; it lives here, below both, so neither imports the other).

Invariants:
- Values are immutable (frozen slotted dataclasses, tuples for sequences). A
  `ToolUseBlock.input` is a plain dict because tool arguments are arbitrary JSON; nothing in
  defect mutates it.
- The JSON round trip is lossless: `message_from_json(message_to_json(m)) == m`. Storage and
  replay rely on that.
- Unknown fields in stored data are ignored, so a database written by a newer defect still
  loads; data that cannot be understood raises `MessageFormatError` naming what is wrong.

Why a model of our own: the core must not depend on the ACP SDK nor on a provider SDK
(docs/architecture.md, rule 1). The ACP bridge converts ACP content into these blocks on the way in;
each provider encodes them for its wire on the way out, after `repair_outbound`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Annotated, Any, Literal, TypeVar

from pydantic import ConfigDict, Field, TypeAdapter, ValidationError, model_validator
from pydantic.dataclasses import dataclass as value

Role = Literal["user", "assistant"]
InsideTurn = Literal["steer", "note"]
"""The mark of a user message committed inside a running turn (`Message.inside_turn`)."""

_TOLERANT = ConfigDict(extra="ignore")
"""Every value ignores fields it does not know (a newer defect's stored data still loads)."""


class _Value:
    """Base of every model value: a frozen, slotted pydantic dataclass (`@value(frozen=True,
    slots=True, kw_only=True, config=_TOLERANT)`), validated when built by keyword and
    tolerant of fields it does not know.

    Why dataclasses rather than `BaseModel`: the outbound repair reads fields of every block
    of a history on a session's first request, and a load parses every stored message. A
    `BaseModel` instance carries a `__dict__` and a fields-set of its own, and its class's
    `__getattr__` keeps every field read off CPython's fast attribute path. Slotted values
    read a field several times faster, parse from JSON in a fraction of the time and take a
    fraction of the memory (the long history of `scripts/bench_repair.py` and the loads of
    `scripts/bench_load.py` print what a history costs)."""

    __slots__ = ()


class _WeakValue(_Value):
    """A value that can be referred to weakly (`media.image_block_problem` keeps a verdict
    per image block object, dropped with the block)."""

    __slots__ = ("__weakref__",)


_V = TypeVar("_V", bound=_Value)


def replaced(original: _V, /, **changes: Any) -> _V:
    """`original` with the fields in `changes` replaced, built without validating again:
    for callers whose new field values are validated values already (blocks of other
    messages, a field of the right type), like the outbound repair's rebuilt messages."""
    return as_kind(type(original), original, **changes)


def as_kind(kind: type[_V], source: Any, /, **changes: Any) -> _V:
    """A `kind` holding `source`'s values of `kind`'s fields (`changes` for those named
    there), built without validating again (`replaced`'s reason): e.g. an instance of a
    subclass of a block type as one of the type itself."""
    new = object.__new__(kind)
    for name in kind.__dataclass_fields__:  # type: ignore[attr-defined]
        object.__setattr__(new, name, changes[name] if name in changes else getattr(source, name))
    return new


def trusted_message(role: Role, content: tuple[Any, ...]) -> Message:
    """A message of `content`, blocks that are validated values already, built without
    validating them again (`replaced`'s reason)."""
    new = object.__new__(Message)
    object.__setattr__(new, "role", role)
    object.__setattr__(new, "content", content)
    object.__setattr__(new, "inside_turn", None)
    return new


@value(frozen=True, slots=True, kw_only=True, config=_TOLERANT)
class TextBlock(_Value):
    type: Literal["text"] = "text"
    text: str


@value(frozen=True, slots=True, kw_only=True, config=_TOLERANT)
class ImageBlock(_WeakValue):
    """An image, either inline (`data` is base64, `media_type` e.g. `image/png`) or by URL."""

    type: Literal["image"] = "image"
    media_type: str | None = None
    data: str | None = None
    url: str | None = None

    @model_validator(mode="after")
    def _one_source(self) -> ImageBlock:
        if (self.data is None) == (self.url is None):
            raise ValueError("an image needs exactly one of `data` (base64) or `url`")
        if self.data is not None and not self.media_type:
            raise ValueError("an inline image needs a `media_type`")
        return self


@value(frozen=True, slots=True, kw_only=True, config=_TOLERANT)
class ThinkingBlock(_Value):
    """Model reasoning. A `signature` means the provider must get it back byte-exact."""

    type: Literal["thinking"] = "thinking"
    thinking: str
    signature: str | None = None
    origin: str | None = None
    """Who signed it: the `ModelSelection.value` (`provider/model`) that produced it; None in
    histories written before sessions could switch provider. Never sent on the wire."""


@value(frozen=True, slots=True, kw_only=True, config=_TOLERANT)
class RedactedThinkingBlock(_Value):
    type: Literal["redacted_thinking"] = "redacted_thinking"
    data: str
    origin: str | None = None
    """As `ThinkingBlock.origin`: the encrypted data is only valid where it was made."""


@value(frozen=True, slots=True, kw_only=True, config=_TOLERANT)
class ToolUseBlock(_Value):
    type: Literal["tool_use"] = "tool_use"
    id: str
    name: str
    input: dict[str, Any] = Field(default_factory=dict)


@value(frozen=True, slots=True, kw_only=True, config=_TOLERANT)
class JsonPart(_Value):
    """A structured tool output; encoded for the model as its JSON text."""

    type: Literal["json"] = "json"
    value: Any = None


ResultPart = Annotated[TextBlock | ImageBlock | JsonPart, Field(discriminator="type")]


@value(frozen=True, slots=True, kw_only=True, config=_TOLERANT)
class ToolResultBlock(_Value):
    """The outcome of one tool call: plain text, or a sequence of text/JSON/image parts."""

    type: Literal["tool_result"] = "tool_result"
    tool_use_id: str
    content: str | tuple[ResultPart, ...] = ""
    is_error: bool = False


@value(frozen=True, slots=True, kw_only=True, config=_TOLERANT)
class ServerToolUseBlock(_Value):
    """A tool the provider ran itself within the assistant message (its hosted web search):
    answered by a `WebSearchResultBlock` later in that same message, never by the client."""

    type: Literal["server_tool_use"] = "server_tool_use"
    id: str
    name: str
    input: dict[str, Any] = Field(default_factory=dict)


@value(frozen=True, slots=True, kw_only=True, config=_TOLERANT)
class WebSearchHit(_Value):
    """One search result. `encrypted_content` is the provider's, sent back byte-exact."""

    type: Literal["web_search_result"] = "web_search_result"
    url: str
    title: str
    encrypted_content: str
    page_age: str | None = None


@value(frozen=True, slots=True, kw_only=True, config=_TOLERANT)
class WebSearchError(_Value):
    """A search that failed on the provider's side (`error_code`, e.g. `max_uses_exceeded`)."""

    type: Literal["web_search_tool_result_error"] = "web_search_tool_result_error"
    error_code: str


@value(frozen=True, slots=True, kw_only=True, config=_TOLERANT)
class WebSearchResultBlock(_Value):
    """The outcome of a `ServerToolUseBlock` search: its hits, or the error."""

    type: Literal["web_search_tool_result"] = "web_search_tool_result"
    tool_use_id: str
    content: tuple[WebSearchHit, ...] | WebSearchError = ()


ContentBlock = Annotated[
    TextBlock
    | ImageBlock
    | ThinkingBlock
    | RedactedThinkingBlock
    | ToolUseBlock
    | ToolResultBlock
    | ServerToolUseBlock
    | WebSearchResultBlock,
    Field(discriminator="type"),
]


@value(frozen=True, slots=True, kw_only=True, config=_TOLERANT)
class Message(_Value):
    role: Role
    content: tuple[ContentBlock, ...]
    inside_turn: InsideTurn | None = Field(default=None, exclude_if=lambda v: v is None)
    """What a user message that did not start a turn is: `"steer"` (the user wrote while
    the turn ran, `defect_core/session/steering.py`) or `"note"` (what hooks, finished
    background tasks or a new round add inside a turn: `defect_core/turn/runner.py`). None
    for a prompt, an answer, tool results, and any message stored before the mark existed.
    `/rewind` lists only unmarked user messages as prompts (`session/rewind.py`). Only what
    the store keeps: no provider sends it, and an unmarked message's JSON has no such key."""

    # Convenience views used by the repair, the turn runner and the projections.
    def tool_uses(self) -> list[ToolUseBlock]:
        return [b for b in self.content if isinstance(b, ToolUseBlock)]

    def tool_results(self) -> list[ToolResultBlock]:
        return [b for b in self.content if isinstance(b, ToolResultBlock)]

    def text(self) -> str:
        return "".join(b.text for b in self.content if isinstance(b, TextBlock))


def user(*blocks: ContentBlock | str) -> Message:
    """A user message; bare strings become text blocks."""
    return Message(role="user", content=tuple(_block(b) for b in blocks))


def assistant(*blocks: ContentBlock | str) -> Message:
    """An assistant message; bare strings become text blocks."""
    return Message(role="assistant", content=tuple(_block(b) for b in blocks))


def _block(b: ContentBlock | str) -> ContentBlock:
    return TextBlock(text=b) if isinstance(b, str) else b


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """What the model is told about a tool."""

    name: str
    description: str
    input_schema: dict[str, Any]


class MessageFormatError(ValueError):
    """Stored or received data that is not a message. The text says what is wrong and where."""


_MESSAGE = TypeAdapter(Message)
_MESSAGES = TypeAdapter(list[Message])


def message_to_json(message: Message) -> str:
    return _MESSAGE.dump_json(message).decode()


def message_to_dict(message: Message) -> dict[str, Any]:
    return _MESSAGE.dump_python(message, mode="json")


_PART = TypeAdapter(ResultPart)
_RESULT = TypeAdapter(ToolResultBlock)


def part_to_dict(part: TextBlock | ImageBlock | JsonPart) -> dict[str, Any]:
    """The JSON value of a part of a tool result's content."""
    return _PART.dump_python(part, mode="json")


def result_from_dict(data: Any) -> ToolResultBlock:
    """A tool result block from its JSON value (raises pydantic's `ValidationError`)."""
    return _RESULT.validate_python(data)


def message_from_json(data: str | bytes) -> Message:
    try:
        return _MESSAGE.validate_json(data)
    except ValidationError as exc:
        raise MessageFormatError(_describe(exc)) from None


def message_from_dict(data: Any) -> Message:
    try:
        return _MESSAGE.validate_python(data)
    except ValidationError as exc:
        raise MessageFormatError(_describe(exc)) from None


PlainMessage = dict[str, Any]
"""A message's JSON value that `is_plain_message` accepts: read as it is, without the model."""


def is_plain_message(data: Any) -> bool:
    """Whether `data` (a stored message's JSON value) is a message made only of text,
    thinking, redacted thinking, tool use and plain-text tool result blocks, each with the
    JSON types its model requires (absent optional fields read as their defaults): then
    `message_from_dict(data)` accepts it as it is, and a reader that knows those blocks (a
    replay) reads the same values from the dict. False for anything else, valid or not
    (images, searches, a result made of parts): such a message is read through the model.
    Checked without building a model: a long session is a hundred thousand messages."""
    if type(data) is not dict or data.get("role") not in ("user", "assistant"):
        return False
    content = data.get("content")
    # map, not a generator: a load asks this of every message
    return type(content) is list and all(map(_plain_block, content))


def _plain_block(b: Any) -> bool:
    if type(b) is not dict:
        return False
    kind = b.get("type")
    if kind == "text":
        return type(b.get("text")) is str
    if kind == "thinking":
        return type(b.get("thinking")) is str and _optional_str(b, "signature", "origin")
    if kind == "redacted_thinking":
        return type(b.get("data")) is str and _optional_str(b, "origin")
    if kind == "tool_use":
        return (
            type(b.get("id")) is str
            and type(b.get("name")) is str
            and type(b.get("input", {})) is dict
        )
    if kind == "tool_result":
        return (
            type(b.get("tool_use_id")) is str
            and type(b.get("content", "")) is str
            and type(b.get("is_error", False)) is bool
        )
    return False


def _optional_str(b: dict[str, Any], *names: str) -> bool:
    return all(b.get(name) is None or type(b[name]) is str for name in names)


def messages_to_json(messages: list[Message]) -> str:
    return json.dumps([message_to_dict(m) for m in messages])


def messages_from_json(data: str | bytes) -> list[Message]:
    try:
        return _MESSAGES.validate_json(data)
    except ValidationError as exc:
        raise MessageFormatError(_describe(exc)) from None


def _describe(exc: ValidationError) -> str:
    """One line naming each problem and its location, e.g. `content.0.text: Field required`."""
    parts = []
    for err in exc.errors(include_url=False)[:5]:
        loc = ".".join(str(p) for p in err["loc"]) or "message"
        parts.append(f"{loc}: {err['msg']}")
    more = exc.error_count() - len(parts)
    suffix = f" (and {more} more)" if more > 0 else ""
    return "not a valid message: " + "; ".join(parts) + suffix
