"""`repair_outbound`: each damage a history can carry, and the wire-legal copy it becomes.

Every repaired history is also encoded and run through the strict wire validator
(`defect_fakeapi/validation.py`), so these cases pin both the exact layout the repair
chooses and that the real API would accept it. The cases follow the rules of
docs/architecture.md, Integrity (clean no-op, single / deep / multiple / batched orphans, empty
tool calls, orphaned results, relocation, merge, malformed calls, thinking, first and last
message), as `defect_core/integrity.py` states them, and images the API would refuse
(each becomes a placeholder on the copy; the fake API refuses the unrepaired copy with the
real API's message). The last section pins the wire form the
provider sends after the repair
(`providers/anthropic_wire.py`) and the decoding of a final response's blocks.
"""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest

from defect_core.integrity import (
    CONTINUE_TEXT,
    IMAGE_REMOVED_TEXT,
    INTERRUPTED_RESULT_TEXT,
    OPENING_TEXT,
    drop_malformed_tool_uses,
    is_well_formed_tool_use,
    repair_outbound,
)
from defect_core.integrity.repair import _rebuild
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
    message_to_dict,
    messages_to_json,
    user,
)
from defect_core.providers.anthropic_wire import (
    decode_assistant_content,
    decode_content_block,
    encode_message,
    encode_messages,
)
from defect_fakeapi import WireError, validate_request
from tests.support.images import PNG_1X1, b64, gif, jpeg, png, webp_vp8x

# --------------------------------------------------------------------------------------------
# Helpers


def use(call_id: str, name: str = "read_file", **tool_input: Any) -> ToolUseBlock:
    return ToolUseBlock(id=call_id, name=name, input=tool_input)


def res(call_id: str, text: str = "ok", *, is_error: bool = False) -> ToolResultBlock:
    return ToolResultBlock(tool_use_id=call_id, content=text, is_error=is_error)


def interrupted(call_id: str) -> ToolResultBlock:
    return ToolResultBlock(tool_use_id=call_id, content=INTERRUPTED_RESULT_TEXT, is_error=True)


def signed(text: str = "let me think", signature: str = "sig-abc") -> ThinkingBlock:
    return ThinkingBlock(thinking=text, signature=signature)


def assert_wire_legal(messages: list[Message]) -> None:
    body = {"model": "m", "max_tokens": 1024, "messages": encode_messages(messages)}
    try:
        validate_request(body)
    except WireError as exc:  # pragma: no cover - the failure message is the point
        pytest.fail(f"the API would reject the repaired history: {exc.message}")


def repaired(history: list[Message]) -> list[Message]:
    """Repair, and check what every repair must satisfy: legal, pure, idempotent."""
    before = messages_to_json(history)
    identities = [id(m) for m in history]
    out = repair_outbound(history)
    assert messages_to_json(history) == before, "the input was mutated"
    assert [id(m) for m in history] == identities, "the input list was mutated"
    assert_wire_legal(out)
    assert repair_outbound(out) is out, "repair is not idempotent"
    return out


def shape(messages: list[Message]) -> list[tuple[str, list[str]]]:
    """A compact picture of a history: role and one short tag per block."""

    def tag(b: ContentBlock) -> str:
        if isinstance(b, TextBlock):
            return f"text:{b.text}"
        if isinstance(b, ToolUseBlock):
            return f"use:{b.id}"
        if isinstance(b, ToolResultBlock):
            synthetic = b.content == INTERRUPTED_RESULT_TEXT and b.is_error
            return f"{'interrupted' if synthetic else 'result'}:{b.tool_use_id}"
        if isinstance(b, ThinkingBlock):
            return f"thinking:{b.signature}"
        if isinstance(b, RedactedThinkingBlock):
            return "redacted"
        return "image"

    return [(m.role, [tag(b) for b in m.content]) for m in messages]


def clean_history() -> list[Message]:
    return [
        user("read the config"),
        assistant(signed(), "reading it", use("toolu_1", path="a.toml")),
        user(res("toolu_1", "[a]\nx = 1")),
        assistant("and the other one", use("toolu_2"), use("toolu_3")),
        user(res("toolu_2"), res("toolu_3", "boom", is_error=True), "also look at b"),
        assistant("done: x is 1"),
        user("thanks, now b", ImageBlock(media_type="image/png", data=PNG_1X1)),
    ]


# --------------------------------------------------------------------------------------------
# Clean histories


def test_clean_history_is_returned_as_the_same_object() -> None:
    history = clean_history()
    assert_wire_legal(history)
    assert repair_outbound(history) is history


def test_clean_history_with_redacted_thinking_and_structured_results_is_untouched() -> None:
    history = [
        user("go"),
        assistant(RedactedThinkingBlock(data="opaque"), signed(), use("toolu_x")),
        user(
            ToolResultBlock(
                tool_use_id="toolu_x",
                content=(TextBlock(text="line"), JsonPart(value={"k": [1, 2]})),
            )
        ),
    ]
    assert repair_outbound(history) is history


# --------------------------------------------------------------------------------------------
# Orphan tool_use (single, deep, several in one message, batches)


def test_single_orphan_at_the_end_gets_a_synthetic_result() -> None:
    history = [user("list files"), assistant("looking", use("toolu_1"))]
    out = repaired(history)
    assert shape(out) == [
        ("user", ["text:list files"]),
        ("assistant", ["text:looking", "use:toolu_1"]),
        ("user", ["interrupted:toolu_1"]),
    ]
    assert out[0] is history[0] and out[1] is history[1]
    result = out[2].content[0]
    assert isinstance(result, ToolResultBlock)
    assert result.is_error is True
    assert (
        result.content == INTERRUPTED_RESULT_TEXT == "tool call interrupted; no result was recorded"
    )


def test_deep_orphan_with_valid_turns_after_it() -> None:
    history = [
        user("first"),
        assistant(use("toolu_lost")),
        user("second prompt after a crash"),
        assistant(use("toolu_ok")),
        user(res("toolu_ok")),
        assistant("all good"),
        user("third"),
    ]
    out = repaired(history)
    assert shape(out) == [
        ("user", ["text:first"]),
        ("assistant", ["use:toolu_lost"]),
        ("user", ["interrupted:toolu_lost", "text:second prompt after a crash"]),
        ("assistant", ["use:toolu_ok"]),
        ("user", ["result:toolu_ok"]),
        ("assistant", ["text:all good"]),
        ("user", ["text:third"]),
    ]
    # Everything after the repaired pair is the very same objects.
    assert out[3:] == history[3:]
    assert all(a is b for a, b in zip(out[3:], history[3:], strict=True))


def test_several_orphans_in_one_message_are_answered_in_use_order() -> None:
    history = [
        user("go"),
        assistant(use("toolu_c"), use("toolu_a"), use("toolu_b")),
        user(res("toolu_a", "A")),
    ]
    out = repaired(history)
    assert shape(out)[2] == (
        "user",
        ["interrupted:toolu_c", "result:toolu_a", "interrupted:toolu_b"],
    )
    assert out[2].content[1] is history[2].content[0]


def test_orphan_batches_across_the_conversation() -> None:
    history = [
        user("one"),
        assistant(use("toolu_1"), use("toolu_2")),
        user("two"),
        assistant("text", use("toolu_3")),
        user(res("toolu_3")),
        assistant(use("toolu_4")),
        user("three"),
        assistant(use("toolu_5"), use("toolu_6")),
    ]
    out = repaired(history)
    assert shape(out) == [
        ("user", ["text:one"]),
        ("assistant", ["use:toolu_1", "use:toolu_2"]),
        ("user", ["interrupted:toolu_1", "interrupted:toolu_2", "text:two"]),
        ("assistant", ["text:text", "use:toolu_3"]),
        ("user", ["result:toolu_3"]),
        ("assistant", ["use:toolu_4"]),
        ("user", ["interrupted:toolu_4", "text:three"]),
        ("assistant", ["use:toolu_5", "use:toolu_6"]),
        ("user", ["interrupted:toolu_5", "interrupted:toolu_6"]),
    ]


def test_assistant_without_tool_uses_needs_nothing() -> None:
    history = [user("hi"), assistant("hello"), user("bye")]
    assert repair_outbound(history) is history


def test_assistant_with_empty_content_disappears_and_the_users_merge() -> None:
    history = [user("hi"), Message(role="assistant", content=()), user("anyone?")]
    out = repaired(history)
    assert shape(out) == [("user", ["text:hi", "text:anyone?"])]


def test_assistant_with_only_blank_text_and_unsigned_thinking_disappears() -> None:
    history = [
        user("hi"),
        assistant("  ", ThinkingBlock(thinking="partial"), ""),
        user("again"),
    ]
    out = repaired(history)
    assert shape(out) == [("user", ["text:hi", "text:again"])]


# --------------------------------------------------------------------------------------------
# Orphaned, duplicate, relocated and reordered results


def test_orphaned_results_are_stripped() -> None:
    history = [
        user(res("toolu_ghost"), "question"),
        assistant("answer", use("toolu_1")),
        user(res("toolu_1"), res("toolu_never_asked"), "more"),
        assistant("fine"),
        user(res("toolu_1"), "next"),  # answers nothing in the previous message
    ]
    out = repaired(history)
    assert shape(out) == [
        ("user", ["text:question"]),
        ("assistant", ["text:answer", "use:toolu_1"]),
        ("user", ["result:toolu_1", "text:more"]),
        ("assistant", ["text:fine"]),
        ("user", ["text:next"]),
    ]


def test_message_of_only_orphaned_results_disappears_and_assistants_merge() -> None:
    history = [
        user("q"),
        assistant("part one"),
        user(res("toolu_ghost")),
        assistant("part two"),
        user("ok"),
    ]
    out = repaired(history)
    assert shape(out) == [
        ("user", ["text:q"]),
        ("assistant", ["text:part one", "text:part two"]),
        ("user", ["text:ok"]),
    ]


def test_duplicate_results_keep_the_first() -> None:
    first, second = res("toolu_1", "first"), res("toolu_1", "second")
    history = [user("q"), assistant(use("toolu_1")), user(first, second, "after")]
    out = repaired(history)
    assert shape(out)[2] == ("user", ["result:toolu_1", "text:after"])
    assert out[2].content[0] is first


def test_results_found_later_are_relocated_after_their_use() -> None:
    late = res("toolu_1", "late but real")
    history = [
        user("q"),
        assistant(use("toolu_1")),
        user("interjection"),
        assistant("meanwhile", use("toolu_2")),
        user(res("toolu_2"), late),
    ]
    out = repaired(history)
    assert shape(out) == [
        ("user", ["text:q"]),
        ("assistant", ["use:toolu_1"]),
        ("user", ["result:toolu_1", "text:interjection"]),
        ("assistant", ["text:meanwhile", "use:toolu_2"]),
        ("user", ["result:toolu_2"]),
    ]
    assert out[2].content[0] is late


def test_result_before_its_use_is_not_moved_backwards_in_time() -> None:
    history = [
        user(res("toolu_1"), "q"),
        assistant(use("toolu_1")),
        user("next"),
    ]
    out = repaired(history)
    assert shape(out) == [
        ("user", ["text:q"]),
        ("assistant", ["use:toolu_1"]),
        ("user", ["interrupted:toolu_1", "text:next"]),
    ]


def test_text_placed_before_results_is_moved_after_them() -> None:
    history = [
        user("q"),
        assistant(use("toolu_1"), use("toolu_2")),
        user("note first", res("toolu_2"), ImageBlock(url="https://x/y.png"), res("toolu_1")),
    ]
    out = repaired(history)
    assert shape(out)[2] == (
        "user",
        ["result:toolu_1", "result:toolu_2", "text:note first", "image"],
    )


def test_results_out_of_call_order_are_put_in_call_order() -> None:
    history = [
        user("q"),
        assistant(use("toolu_1"), use("toolu_2")),
        user(res("toolu_2"), res("toolu_1")),
    ]
    out = repaired(history)
    assert shape(out)[2] == ("user", ["result:toolu_1", "result:toolu_2"])


def test_a_leading_result_for_another_call_does_not_count_as_the_answer() -> None:
    history = [user("q"), assistant(use("toolu_1")), user(res("toolu_other"), "hm")]
    out = repaired(history)
    assert shape(out)[2] == ("user", ["interrupted:toolu_1", "text:hm"])


def test_results_split_over_two_user_messages_are_joined() -> None:
    history = [
        user("q"),
        assistant(use("toolu_1"), use("toolu_2")),
        user(res("toolu_1")),
        user(res("toolu_2"), "and a remark"),
    ]
    out = repaired(history)
    assert shape(out) == [
        ("user", ["text:q"]),
        ("assistant", ["use:toolu_1", "use:toolu_2"]),
        ("user", ["result:toolu_1", "result:toolu_2", "text:and a remark"]),
    ]


# --------------------------------------------------------------------------------------------
# Malformed and duplicate tool calls


@pytest.mark.parametrize(
    "bad",
    [
        ToolUseBlock(id="", name="read_file"),
        ToolUseBlock(id="toolu_bad", name=""),
        ToolUseBlock(id="toolu bad", name="read_file"),
        ToolUseBlock(id="toolu_bad\n", name="read_file"),
        ToolUseBlock(id="toolu\nbad", name="read_file"),
        ToolUseBlock(id="tööl", name="read_file"),
    ],
    ids=["empty-id", "empty-name", "space-in-id", "trailing-newline", "inner-newline", "non-ascii"],
)
def test_malformed_calls_are_dropped_with_their_results(bad: ToolUseBlock) -> None:
    history = [
        user("q"),
        assistant("trying", bad, use("toolu_ok")),
        user(res(bad.id), res("toolu_ok")),
    ]
    out = repaired(history)
    assert shape(out) == [
        ("user", ["text:q"]),
        ("assistant", ["text:trying", "use:toolu_ok"]),
        ("user", ["result:toolu_ok"]),
    ]
    assert not is_well_formed_tool_use(bad)


def test_malformed_call_alone_leaves_its_text_and_no_result() -> None:
    history = [
        user("q"),
        assistant("about to call", ToolUseBlock(id="toolu_9", name="")),
        user(res("toolu_9"), "next"),
    ]
    out = repaired(history)
    assert shape(out) == [
        ("user", ["text:q"]),
        ("assistant", ["text:about to call"]),
        ("user", ["text:next"]),
    ]


def test_duplicate_tool_use_ids_keep_the_first_use_and_its_result() -> None:
    first_result = res("toolu_1", "first run")
    history = [
        user("q"),
        assistant(use("toolu_1", path="a")),
        user(first_result),
        assistant("again", use("toolu_1", path="b")),  # a replayed duplicate
        user(res("toolu_1", "second run"), "then"),
    ]
    out = repaired(history)
    assert shape(out) == [
        ("user", ["text:q"]),
        ("assistant", ["use:toolu_1"]),
        ("user", ["result:toolu_1"]),
        ("assistant", ["text:again"]),
        ("user", ["text:then"]),
    ]
    assert out[2].content[0] is first_result
    kept = out[1].content[0]
    assert isinstance(kept, ToolUseBlock) and kept.input == {"path": "a"}


def test_result_of_a_dropped_duplicate_does_not_answer_the_first_use() -> None:
    history = [
        user("q"),
        assistant(use("toolu_1")),
        user("crash, new prompt"),
        assistant(use("toolu_1")),
        user(res("toolu_1", "belongs to the duplicate")),
    ]
    out = repaired(history)
    assert shape(out) == [
        ("user", ["text:q"]),
        ("assistant", ["use:toolu_1"]),
        ("user", ["interrupted:toolu_1", "text:crash, new prompt"]),
    ]


def test_result_after_a_replayed_assistant_message_belongs_to_the_replay() -> None:
    call = assistant(use("toolu_1"))
    history = [user("q"), call, call, user(res("toolu_1"))]  # the same message committed twice
    out = repaired(history)
    assert shape(out) == [
        ("user", ["text:q"]),
        ("assistant", ["use:toolu_1"]),
        ("user", ["interrupted:toolu_1"]),
    ]
    assert out == _rebuild(history, resync=False)


def test_duplicate_id_within_one_message() -> None:
    history = [user("q"), assistant(use("toolu_1"), use("toolu_1")), user(res("toolu_1"))]
    out = repaired(history)
    assert shape(out) == [
        ("user", ["text:q"]),
        ("assistant", ["use:toolu_1"]),
        ("user", ["result:toolu_1"]),
    ]


# --------------------------------------------------------------------------------------------
# Thinking


def test_unsigned_thinking_is_dropped_and_signed_kept_byte_exact() -> None:
    sig = signed("weird  spacing\n\t", "EqQBCkYIBxgCKkBX+/==")
    empty_but_signed = ThinkingBlock(thinking="", signature="sig-empty")
    redacted = RedactedThinkingBlock(data="opaque")
    history = [
        user("q"),
        assistant(sig, ThinkingBlock(thinking="no signature"), "answer"),
        user("more"),
        assistant(
            empty_but_signed,
            ThinkingBlock(thinking="x", signature=""),
            redacted,
            use("toolu_1"),
        ),
        user(res("toolu_1")),
    ]
    out = repaired(history)
    assert shape(out)[1] == ("assistant", ["thinking:EqQBCkYIBxgCKkBX+/==", "text:answer"])
    assert out[1].content[0] is sig
    assert out[3].content[0] is empty_but_signed
    assert out[3].content[1] is redacted
    wire = encode_messages(out)[1]["content"][0]
    assert wire == {
        "type": "thinking",
        "thinking": "weird  spacing\n\t",
        "signature": "EqQBCkYIBxgCKkBX+/==",
    }


def test_blocks_in_the_wrong_role_are_dropped() -> None:
    history = [
        user("q", signed(), use("toolu_u")),
        assistant("a", ImageBlock(url="https://x/y.png"), res("toolu_u")),
        user("next"),
    ]
    out = repaired(history)
    assert shape(out) == [
        ("user", ["text:q"]),
        ("assistant", ["text:a"]),
        ("user", ["text:next"]),
    ]


# --------------------------------------------------------------------------------------------
# Empty text, empty messages, merging


def test_empty_and_whitespace_text_and_empty_messages_are_removed() -> None:
    history = [
        user("", "real question", " \n\t"),
        Message(role="user", content=()),
        assistant("\u3000", "answer"),
        user(TextBlock(text="\n")),
        assistant("more"),
        user("end"),
    ]
    out = repaired(history)
    assert shape(out) == [
        ("user", ["text:real question"]),
        ("assistant", ["text:answer", "text:more"]),
        ("user", ["text:end"]),
    ]


def test_blank_text_parts_of_a_structured_result_are_removed() -> None:
    history = [
        user("q"),
        assistant(use("toolu_1")),
        user(
            ToolResultBlock(
                tool_use_id="toolu_1",
                content=(TextBlock(text=""), TextBlock(text="data"), TextBlock(text="  ")),
                is_error=True,
            )
        ),
    ]
    out = repaired(history)
    result = out[2].content[0]
    assert isinstance(result, ToolResultBlock)
    assert result.content == (TextBlock(text="data"),)
    assert result.is_error is True


# --------------------------------------------------------------------------------------------
# Images the API would refuse: stored by an older defect or returned by a tool, each would fail
# every later request of the session. On the copy sent they become `[image removed: <why>]`.

BAD_IMAGES: list[tuple[ImageBlock, str, str]] = [
    # (the image, the placeholder's reason, the real API's 400 for `messages.0.content.0`)
    (
        ImageBlock(media_type="image/png", data="!!not base64"),
        "not valid base64",
        "messages.0.content.0.image.source.base64: invalid base64 data",
    ),
    (
        ImageBlock(media_type="image/png", data=b64(b"\x00garbage, not an image\x00")),
        "not a valid PNG",
        "Could not process image",
    ),
    (
        ImageBlock(media_type="image/png", data=b64(jpeg(4, 4))),
        "not a valid PNG (the bytes are a JPEG)",
        "messages.0.content.0.image.source.base64.data: Image does not match the provided "
        "media type image/png",
    ),
    (
        ImageBlock(media_type="image/bmp", data=b64(b"BM" + bytes(60))),
        "type 'image/bmp' is not supported (PNG, JPEG, GIF or WebP)",
        "messages.0.content.0.image.source.base64.media_type: Input should be 'image/jpeg', "
        "'image/png', 'image/gif' or 'image/webp'",
    ),
    (
        ImageBlock(media_type="image/png", data=b64(png(9000, 20))),
        "9000x20 pixels, over the 8000-pixel limit",
        "messages.0.content.0.image.source.base64.data: At least one of the image dimensions "
        "exceed max allowed size: 8000 pixels",
    ),
    (
        ImageBlock(media_type="image/gif", data=b64(gif(20, 8001))),
        "20x8001 pixels, over the 8000-pixel limit",
        "messages.0.content.0.image.source.base64.data: At least one of the image dimensions "
        "exceed max allowed size: 8000 pixels",
    ),
    (
        ImageBlock(media_type="image/png", data=b64(png(10, 10)) + "A" * (5 * 1024 * 1024)),
        f"larger than 5 MB ({len(b64(png(10, 10))) + 5 * 1024 * 1024} bytes of base64)",
        "messages.0.content.0.image.source.base64: image exceeds 5 MB maximum: "
        f"{len(b64(png(10, 10))) + 5 * 1024 * 1024} bytes > 5242880 bytes",
    ),
]


def removed(reason: str) -> str:
    return "text:" + IMAGE_REMOVED_TEXT.format(reason=reason)


@pytest.mark.parametrize(("image", "reason", "api_error"), BAD_IMAGES)
def test_an_image_the_api_refuses_fails_the_request_until_repaired(
    image: ImageBlock, reason: str, api_error: str
) -> None:
    history = [user(image, "what is this?"), assistant("no idea"), user("and now?")]
    with pytest.raises(WireError) as refused:
        validate_request({"model": "m", "max_tokens": 1024, "messages": encode_messages(history)})
    assert refused.value.message == api_error
    out = repaired(history)
    assert shape(out) == [
        ("user", [removed(reason), "text:what is this?"]),
        ("assistant", ["text:no idea"]),
        ("user", ["text:and now?"]),
    ]
    assert out[1] is history[1] and out[2] is history[2], "undamaged messages are reused"
    assert history[0].content[0] is image, "the stored history keeps the image"


def test_images_are_judged_in_tool_results_and_by_url_too() -> None:
    good = ImageBlock(media_type="image/webp", data=b64(webp_vp8x(640, 480)))
    history = [
        user("take screenshots", ImageBlock(url="file:///home/me/shot.png")),
        assistant(use("toolu_1", name="screenshot")),
        user(
            ToolResultBlock(
                tool_use_id="toolu_1",
                content=(
                    TextBlock(text="two shots"),
                    ImageBlock(media_type="image/jpeg", data=b64(png(3, 3))),
                    good,
                    ImageBlock(url="https://example.test/ok.png"),
                ),
            )
        ),
    ]
    out = repaired(history)
    assert shape(out)[0] == ("user", ["text:take screenshots", removed("not an http(s) URL")])
    result = out[2].content[0]
    assert isinstance(result, ToolResultBlock)
    assert result.content == (
        TextBlock(text="two shots"),
        TextBlock(text=IMAGE_REMOVED_TEXT.format(reason="not a valid JPEG (the bytes are a PNG)")),
        good,
        ImageBlock(url="https://example.test/ok.png"),
    )
    assert result.content[2] is good


def test_images_the_api_takes_leave_the_history_as_the_same_object() -> None:
    history = [
        user("look", *(ImageBlock(media_type=t, data=b64(b(20, 20))) for t, b in KINDS)),
        assistant(use("toolu_1")),
        user(
            ToolResultBlock(
                tool_use_id="toolu_1",
                content=(ImageBlock(media_type="image/png", data=b64(png(8000, 8000))),),
            )
        ),
    ]
    assert_wire_legal(history)
    assert repair_outbound(history) is history


KINDS = (("image/png", png), ("image/jpeg", jpeg), ("image/gif", gif), ("image/webp", webp_vp8x))


def test_consecutive_plain_messages_are_merged_even_though_the_api_would_accept_them() -> None:
    first, second = user("a"), user("b")
    out = repaired([first, second])
    assert shape(out) == [("user", ["text:a", "text:b"])]
    assert out[0].content[0] is first.content[0] and out[0].content[1] is second.content[0]


def test_consecutive_same_role_messages_are_merged_results_first() -> None:
    history = [
        user("a"),
        user("b"),
        assistant("c", use("toolu_1")),
        assistant("d"),
        user("e"),
        user(res("toolu_1")),
        user("f"),
    ]
    out = repaired(history)
    assert shape(out) == [
        ("user", ["text:a", "text:b"]),
        ("assistant", ["text:c", "use:toolu_1", "text:d"]),
        ("user", ["result:toolu_1", "text:e", "text:f"]),
    ]


# --------------------------------------------------------------------------------------------
# First and last message


def test_history_starting_with_the_assistant_gets_an_opening_user_message() -> None:
    history = [assistant("summary of earlier work"), user("go on")]
    out = repaired(history)
    assert shape(out) == [
        ("user", [f"text:{OPENING_TEXT}"]),
        ("assistant", ["text:summary of earlier work"]),
        ("user", ["text:go on"]),
    ]
    assert OPENING_TEXT == "(conversation continues)"


def test_history_whose_leading_user_message_empties_gets_an_opening() -> None:
    history = [user(res("toolu_0")), assistant("hi"), user("q")]
    out = repaired(history)
    assert shape(out)[0] == ("user", [f"text:{OPENING_TEXT}"])


def test_trailing_assistant_with_tool_uses_ends_with_their_results() -> None:
    history = [user("q"), assistant("calling", use("toolu_1"), use("toolu_2"))]
    out = repaired(history)
    assert shape(out)[-1] == ("user", ["interrupted:toolu_1", "interrupted:toolu_2"])


def test_trailing_plain_assistant_gets_a_continue_message() -> None:
    history = [user("q"), assistant("the answer")]
    out = repaired(history)
    assert shape(out) == [
        ("user", ["text:q"]),
        ("assistant", ["text:the answer"]),
        ("user", [f"text:{CONTINUE_TEXT}"]),
    ]
    assert out[1] is history[1]


def test_empty_history_becomes_one_opening_message() -> None:
    out = repaired([])
    assert shape(out) == [("user", [f"text:{OPENING_TEXT}"])]


def test_history_of_nothing_but_noise_becomes_one_opening_message() -> None:
    out = repaired([user(" "), assistant(ThinkingBlock(thinking="t")), user(res("toolu_z"))])
    assert shape(out) == [("user", [f"text:{OPENING_TEXT}"])]


# --------------------------------------------------------------------------------------------
# Purity


def test_input_is_never_mutated_even_when_everything_is_wrong() -> None:
    history = [
        assistant("starts wrong", use("toolu_1"), use("toolu_1"), ThinkingBlock(thinking="u")),
        user("text first", res("toolu_1"), res("toolu_1"), res("toolu_x"), ""),
        user(res("toolu_1")),
        assistant(ToolUseBlock(id="", name="")),
    ]
    dump = [message_to_dict(m) for m in history]
    frozen = copy.deepcopy(dump)
    snapshot = list(history)
    out = repaired(history)
    assert [message_to_dict(m) for m in history] == frozen
    assert history == snapshot and all(a is b for a, b in zip(history, snapshot, strict=True))
    assert out is not history


class QuotedText(TextBlock):
    """A subclass, as an embedding application might define."""


def test_blocks_of_a_subclass_are_sent_as_the_block_type_itself() -> None:
    history = [user(QuotedText(text="quoted")), assistant("a"), user("b")]
    out = repaired(history)
    assert shape(out) == [
        ("user", ["text:quoted"]),
        ("assistant", ["text:a"]),
        ("user", ["text:b"]),
    ]
    assert type(out[0].content[0]) is TextBlock


def test_synthetic_messages_are_valid_models() -> None:
    history = [assistant("x", use("toolu_1"), use("toolu_1")), user(res("toolu_1"), "y")]
    for message in repaired(history):
        assert message_from_dict(message_to_dict(message)) == message


# --------------------------------------------------------------------------------------------
# The stream-end filter


def test_drop_malformed_tool_uses_keeps_good_calls_and_returns_same_object_when_clean() -> None:
    good = assistant("t", use("toolu_1"))
    assert drop_malformed_tool_uses(good) is good
    cut = assistant("t", use("toolu_1"), ToolUseBlock(id="toolu_2", name=""))
    filtered = drop_malformed_tool_uses(cut)
    assert shape([filtered]) == [("assistant", ["text:t", "use:toolu_1"])]
    assert filtered.content[1] is cut.content[1]
    only_bad = assistant(ToolUseBlock(id="", name="bash"))
    assert drop_malformed_tool_uses(only_bad).content == ()


# --------------------------------------------------------------------------------------------
# The wire form of the repaired copy (`providers/anthropic_wire.py`): what the provider sends
# after `repair_outbound`, and how it reads a final response's blocks back.


def test_every_block_encodes_to_the_messages_api_shape() -> None:
    history = [
        user(
            "look",
            ImageBlock(media_type="image/png", data=PNG_1X1),
            ImageBlock(url="https://example.test/a.png"),
        ),
        assistant(
            signed("th", "sig"),
            RedactedThinkingBlock(data="opaque"),
            "ok",
            use("toolu_1", path="a"),
            use("toolu_2"),
        ),
        user(
            res("toolu_1", "text result"),
            ToolResultBlock(
                tool_use_id="toolu_2",
                content=(
                    TextBlock(text="part"),
                    JsonPart(value={"k": [1, None]}),
                    ImageBlock(url="https://example.test/b.png"),
                ),
                is_error=True,
            ),
        ),
    ]
    assert encode_messages(history) == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "look"},
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/png", "data": PNG_1X1},
                },
                {"type": "image", "source": {"type": "url", "url": "https://example.test/a.png"}},
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "th", "signature": "sig"},
                {"type": "redacted_thinking", "data": "opaque"},
                {"type": "text", "text": "ok"},
                {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {"path": "a"}},
                {"type": "tool_use", "id": "toolu_2", "name": "read_file", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "text result"},
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_2",
                    "content": [
                        {"type": "text", "text": "part"},
                        {"type": "text", "text": '{"k": [1, null]}'},
                        {
                            "type": "image",
                            "source": {"type": "url", "url": "https://example.test/b.png"},
                        },
                    ],
                    "is_error": True,
                },
            ],
        },
    ]
    assert_wire_legal(history)


def test_encoding_unsigned_thinking_is_refused() -> None:
    with pytest.raises(ValueError, match="repair_outbound"):
        encode_messages([assistant(ThinkingBlock(thinking="t"))])


def test_response_blocks_decode_into_an_assistant_message() -> None:
    wire: list[dict[str, Any]] = [
        {"type": "thinking", "thinking": "plan", "signature": "EqQB"},
        {"type": "redacted_thinking", "data": "opaque"},
        {"type": "text", "text": "Reading.", "citations": None},
        {"type": "tool_use", "id": "toolu_9", "name": "read_file", "input": {"path": "x"}},
    ]
    message = decode_assistant_content(wire)
    assert message == assistant(
        ThinkingBlock(thinking="plan", signature="EqQB"),
        RedactedThinkingBlock(data="opaque"),
        "Reading.",
        use("toolu_9", path="x"),
    )
    # What was decoded goes back out unchanged: the signature survives byte-exact.
    assert encode_message(message)["content"][0] == wire[0]
    assert [decode_content_block(b) for b in wire] == list(message.content)


@pytest.mark.parametrize(
    ("block", "where"),
    [
        ({"type": "text"}, "text.text: field required"),
        ({"type": "text", "text": 3}, "text.text: must be a string"),
        ({"type": "tool_use", "id": "t", "input": {}}, "tool_use.name: field required"),
        ({"type": "tool_use", "id": "t", "name": "n", "input": [1]}, "tool_use.input"),
        ({"type": "thinking", "thinking": "x", "signature": 5}, "thinking.signature"),
        ({"type": "redacted_thinking"}, "redacted_thinking.data"),
        ({"type": "server_tool_use", "id": "s"}, "server_tool_use.name: field required"),
        ({"type": "web_search_tool_result", "tool_use_id": "s", "content": 3}, "content"),
        ({"type": "code_execution_tool_result"}, "unsupported content block type"),
        ({"text": "no type"}, "unsupported content block type None"),
    ],
)
def test_malformed_response_blocks_raise_naming_the_field(
    block: dict[str, Any], where: str
) -> None:
    with pytest.raises(MessageFormatError, match=re.escape(where)):
        decode_content_block(block)
    with pytest.raises(MessageFormatError, match=r"^content\.1: "):
        decode_assistant_content([{"type": "text", "text": "ok"}, block])
