"""The message model's JSON form: lossless, tolerant of the new, precise about the broken.

Storage and replay rely on `message_from_json(message_to_json(m)) == m` for every block type;
a database written by a newer defect (unknown fields) must still load; data that is not a
message must raise `MessageFormatError` saying which field is wrong.
"""

from __future__ import annotations

import json
import weakref
from dataclasses import FrozenInstanceError
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from defect_core.model import (
    ContentBlock,
    ImageBlock,
    JsonPart,
    Message,
    MessageFormatError,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    assistant,
    message_from_dict,
    message_from_json,
    message_to_dict,
    message_to_json,
    messages_from_json,
    messages_to_json,
    part_to_dict,
    replaced,
    result_from_dict,
    trusted_message,
    user,
)

EVERY_BLOCK: list[ContentBlock] = [
    TextBlock(text='héllo\n\t\u2603 "quoted" \\ backslash'),
    ImageBlock(media_type="image/png", data="iVBORw0KGgo="),
    ImageBlock(url="https://example.test/a.png"),
    ThinkingBlock(thinking="hmm", signature="EqQBCkYIBxgC+/=="),
    ThinkingBlock(thinking="unsigned"),
    ThinkingBlock(thinking="", signature=""),
    RedactedThinkingBlock(data="opaque=="),
    ToolUseBlock(id="toolu_01", name="edit", input={"path": "a.py", "n": [1, 2.5, None, True]}),
    ToolUseBlock(id="toolu_02", name="noargs"),
    ToolResultBlock(tool_use_id="toolu_01", content="done"),
    ToolResultBlock(tool_use_id="toolu_01", content="", is_error=True),
    ToolResultBlock(
        tool_use_id="toolu_02",
        content=(
            TextBlock(text="out"),
            JsonPart(value={"a": {"b": [1, "x", None]}}),
            JsonPart(),
            ImageBlock(media_type="image/jpeg", data="/9j/"),
        ),
        is_error=False,
    ),
]


@pytest.mark.parametrize("block", EVERY_BLOCK, ids=lambda b: b.type)
def test_every_block_type_round_trips_through_json(block: ContentBlock) -> None:
    message = Message(role="assistant", content=(block,))
    assert message_from_json(message_to_json(message)) == message
    assert message_from_dict(message_to_dict(message)) == message
    assert message_from_dict(json.loads(json.dumps(message_to_dict(message)))) == message


def test_a_list_of_messages_round_trips() -> None:
    messages = [user("q", EVERY_BLOCK[1]), assistant(*EVERY_BLOCK[3:9]), user(*EVERY_BLOCK[9:])]
    loaded = messages_from_json(messages_to_json(messages))
    assert loaded == messages
    assert all(isinstance(m.content, tuple) for m in loaded)


def test_the_inside_turn_mark_round_trips_and_only_a_marked_message_stores_it() -> None:
    steer = Message(role="user", content=(TextBlock(text="and this"),), inside_turn="steer")
    assert message_from_json(message_to_json(steer)) == steer
    assert message_to_dict(steer)["inside_turn"] == "steer"
    assert steer != user("and this")  # a steer is not the prompt of the same words
    assert "inside_turn" not in message_to_json(user("a prompt"))
    assert message_from_dict({"role": "user", "content": []}).inside_turn is None  # older data
    with pytest.raises(MessageFormatError):
        message_from_dict({"role": "user", "content": [], "inside_turn": "prompt"})


def test_helpers_build_text_blocks_from_strings() -> None:
    message = user("a", ToolResultBlock(tool_use_id="t"), "b")
    assert message.role == "user"
    assert message.content[0] == TextBlock(text="a")
    assert message.text() == "ab"
    assert message.tool_results() == [ToolResultBlock(tool_use_id="t")]
    assert assistant(ToolUseBlock(id="x", name="n")).tool_uses()[0].id == "x"


def test_values_are_immutable() -> None:
    message = user("a")
    with pytest.raises(FrozenInstanceError):
        message.role = "assistant"  # type: ignore[misc]
    with pytest.raises(FrozenInstanceError):
        message.content[0].text = "b"  # type: ignore[misc,union-attr]


@pytest.mark.parametrize("block", EVERY_BLOCK, ids=lambda b: b.type)
def test_values_are_slotted_and_only_images_are_weakly_referable(block: ContentBlock) -> None:
    # What the outbound repair's speed rests on: no per-value `__dict__` (model.py, `_Value`).
    for value in (block, user("a")):
        assert not hasattr(value, "__dict__"), type(value).__name__
    if isinstance(block, ImageBlock):
        assert weakref.ref(block)() is block  # media.image_block_problem keeps verdicts so
    else:
        with pytest.raises(TypeError):
            weakref.ref(block)


def test_replaced_changes_only_the_named_fields_and_keeps_the_original() -> None:
    thinking = ThinkingBlock(thinking="t", signature="s")
    stamped = replaced(thinking, origin="anthropic/claude")
    assert type(stamped) is ThinkingBlock
    assert stamped == ThinkingBlock(thinking="t", signature="s", origin="anthropic/claude")
    assert thinking.origin is None
    message = user("a", "b")
    shorter = replaced(message, content=message.content[:1])
    assert shorter == user("a") and message == user("a", "b")
    assert replaced(message) == message and replaced(message) is not message


def test_trusted_message_equals_the_validated_one() -> None:
    blocks = (TextBlock(text="a"), ToolUseBlock(id="toolu_1", name="read_file"))
    built = trusted_message("assistant", blocks)
    assert built == Message(role="assistant", content=blocks)
    assert message_to_json(built) == message_to_json(Message(role="assistant", content=blocks))


def test_result_parts_and_results_convert_to_and_from_json() -> None:
    parts = (TextBlock(text="x"), JsonPart(value={"k": [1, None]}))
    assert [part_to_dict(p) for p in parts] == [
        {"type": "text", "text": "x"},
        {"type": "json", "value": {"k": [1, None]}},
    ]
    data = {"type": "tool_result", "tool_use_id": "t", "content": "ok", "is_error": True}
    assert result_from_dict(data) == ToolResultBlock(tool_use_id="t", content="ok", is_error=True)
    with pytest.raises(ValidationError):
        result_from_dict({"type": "tool_result"})


# --------------------------------------------------------------------------------------------
# Generated messages

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)
images = st.one_of(
    st.builds(ImageBlock, media_type=st.sampled_from(["image/png", "image/gif"]), data=st.text()),
    st.builds(ImageBlock, url=st.text(min_size=1)),
)
texts = st.builds(TextBlock, text=st.text())
blocks: st.SearchStrategy[ContentBlock] = st.one_of(
    texts,
    images,
    st.builds(ThinkingBlock, thinking=st.text(), signature=st.none() | st.text()),
    st.builds(RedactedThinkingBlock, data=st.text()),
    st.builds(
        ToolUseBlock,
        id=st.text(),
        name=st.text(),
        input=st.dictionaries(st.text(max_size=6), json_values, max_size=4),
    ),
    st.builds(
        ToolResultBlock,
        tool_use_id=st.text(),
        content=st.text()
        | st.lists(texts | images | st.builds(JsonPart, value=json_values), max_size=3).map(tuple),
        is_error=st.booleans(),
    ),
)
messages = st.builds(
    Message,
    role=st.sampled_from(["user", "assistant"]),
    content=st.lists(blocks, max_size=5).map(tuple),
)


@settings(max_examples=200, deadline=None)
@given(messages)
def test_generated_messages_round_trip(message: Message) -> None:
    assert message_from_json(message_to_json(message)) == message
    assert message_from_dict(json.loads(message_to_json(message))) == message


@settings(max_examples=50, deadline=None)
@given(st.lists(messages, max_size=4))
def test_generated_histories_round_trip(history: list[Message]) -> None:
    assert messages_from_json(messages_to_json(history)) == history


# --------------------------------------------------------------------------------------------
# Unknown and malformed data


def test_unknown_fields_are_ignored() -> None:
    stored: dict[str, Any] = {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "hi", "citations": [{"url": "u"}], "cache_control": {}},
            {"type": "tool_use", "id": "t1", "name": "n", "input": {}, "caller": "direct"},
            {"type": "thinking", "thinking": "x", "signature": "s", "added_in": "v9"},
        ],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 3},
    }
    expected = assistant(
        "hi", ToolUseBlock(id="t1", name="n"), ThinkingBlock(thinking="x", signature="s")
    )
    assert message_from_dict(stored) == expected
    assert message_from_json(json.dumps(stored)) == expected


@pytest.mark.parametrize(
    ("data", "names"),
    [
        ({"role": "user", "content": [{"type": "text"}]}, ["content.0", "text"]),
        ({"role": "robot", "content": []}, ["role"]),
        ({"role": "user"}, ["content", "Field required"]),
        ({"role": "user", "content": [{"type": "video"}]}, ["content.0", "video"]),
        ({"role": "user", "content": [{"text": "no type"}]}, ["content.0"]),
        (
            {"role": "user", "content": [{"type": "image", "url": "u", "data": "d"}]},
            ["content.0.image", "exactly one"],
        ),
        ({"role": "user", "content": [{"type": "image", "data": "d"}]}, ["media_type"]),
        (
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "a", "name": "n", "input": [1]}],
            },
            ["content.0.tool_use.input"],
        ),
        (
            {"role": "user", "content": [{"type": "tool_result", "content": "x"}]},
            ["content.0.tool_result.tool_use_id"],
        ),
        ("just a string", ["message"]),
    ],
)
def test_malformed_data_raises_naming_the_field(data: Any, names: list[str]) -> None:
    with pytest.raises(MessageFormatError) as caught:
        message_from_dict(data)
    text = str(caught.value)
    assert text.startswith("not a valid message: ")
    for name in names:
        assert name in text
    if isinstance(data, dict):
        with pytest.raises(MessageFormatError) as caught_json:
            message_from_json(json.dumps(data))
        for name in names:
            assert name in str(caught_json.value)


def test_invalid_json_raises_message_format_error() -> None:
    with pytest.raises(MessageFormatError, match="Invalid JSON"):
        message_from_json("{not json")
    with pytest.raises(MessageFormatError, match="Invalid JSON"):
        messages_from_json(b"[")


def test_a_bad_message_in_a_list_is_located_by_index() -> None:
    data = json.dumps([{"role": "user", "content": []}, {"role": "user", "content": [{}]}])
    with pytest.raises(MessageFormatError, match=r"1\.content\.0"):
        messages_from_json(data)


def test_many_errors_are_summarised() -> None:
    data = {"role": "user", "content": [{"type": "text"} for _ in range(8)]}
    with pytest.raises(MessageFormatError, match=r"\(and 3 more\)"):
        message_from_dict(data)
