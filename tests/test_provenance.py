"""Thinking signed by one model is sent back only to that model (`defect_core/provenance.py`).

A session may switch provider between turns; a signature is only valid where it was minted.
The strict fake API checks every signature against its own secret, so two fakes are two
providers whose signatures the other refuses.
"""

from __future__ import annotations

from defect_core.integrity import repair_outbound
from defect_core.model import (
    Message,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    message_from_json,
    message_to_json,
    replaced,
    trusted_message,
)
from defect_core.provenance import own_thinking_only, stamp_origin
from defect_core.providers.anthropic_wire import encode_messages
from defect_core.selection import ModelSelection
from defect_fakeapi import FakeProvider, validate_request

A = ModelSelection("a", "claude-x")
B = ModelSelection("b", "claude-x")


def reply(fake: FakeProvider, thought: str, text: str) -> Message:
    return Message(
        role="assistant",
        content=(
            ThinkingBlock(thinking=thought, signature=fake.sign(thought)),
            TextBlock(text=text),
        ),
    )


def test_stamp_marks_signed_thinking_and_survives_storage() -> None:
    message = Message(
        role="assistant",
        content=(
            ThinkingBlock(thinking="t", signature="s"),
            RedactedThinkingBlock(data="d"),
            TextBlock(text="x"),
        ),
    )
    stamped = stamp_origin(message, A)
    assert [getattr(b, "origin", None) for b in stamped.content] == ["a/claude-x"] * 2 + [None]
    assert message_from_json(message_to_json(stamped)) == stamped
    assert stamp_origin(stamped, B) is stamped  # a stamp is never rewritten
    assert encode_messages([stamped])[0]["content"][0] == {
        "type": "thinking",
        "thinking": "t",
        "signature": "s",
    }


def test_the_other_providers_thinking_is_left_out_and_the_request_is_accepted() -> None:
    with FakeProvider() as first, FakeProvider() as second:
        history = [
            Message(role="user", content=(TextBlock(text="hi"),)),
            stamp_origin(reply(first, "thinking at a", "hello"), A),
            Message(role="user", content=(TextBlock(text="again"),)),
            stamp_origin(reply(second, "thinking at b", "hi again"), B),
            Message(role="user", content=(TextBlock(text="and now?"),)),
        ]
        for selection, fake, kept in ((B, second, "thinking at b"), (A, first, "thinking at a")):
            outbound = repair_outbound(own_thinking_only(history, selection, None))
            thoughts = [b.thinking for m in outbound for b in m.content if b.type == "thinking"]
            assert thoughts == [kept]
            body = {"model": "claude-x", "max_tokens": 2048, "messages": encode_messages(outbound)}
            validate_request(body, signature_checker=fake.check_signature)


def test_unstamped_thinking_belongs_to_the_provider_the_session_was_loaded_with() -> None:
    old = Message(role="assistant", content=(ThinkingBlock(thinking="t", signature="s"),))
    history = [Message(role="user", content=(TextBlock(text="q"),)), old]
    assert own_thinking_only(history, A, "a") is history
    assert own_thinking_only(history, B, "a")[1].content == ()
    assert own_thinking_only(history, B, None) is history


def test_a_tool_loop_opened_by_another_provider_is_sent_without_its_thinking() -> None:
    with FakeProvider() as first, FakeProvider() as second:
        opener = Message(
            role="assistant",
            content=(
                ThinkingBlock(thinking="plan", signature=first.sign("plan")),
                ToolUseBlock(id="toolu_1", name="read", input={}),
            ),
        )
        history = [
            Message(role="user", content=(TextBlock(text="go"),)),
            stamp_origin(opener, A),
            Message(role="user", content=(ToolResultBlock(tool_use_id="toolu_1", content="ok"),)),
        ]
        outbound = repair_outbound(own_thinking_only(history, B, None))
        assert [b.type for b in outbound[1].content] == ["tool_use"]
        # Without thinking the API accepts the loop; `encode_request` turns thinking off for it.
        body = {"model": "claude-x", "max_tokens": 2048, "messages": encode_messages(outbound)}
        validate_request(body, signature_checker=second.check_signature)


# --------------------------------------------------------------------------------------------
# Each request filters only its new messages (`prefix_memo.py`); nothing it remembers changes
# what is sent.


def conversation(rounds: int, signer: ModelSelection) -> list[Message]:
    out = [Message(role="user", content=(TextBlock(text="start"),))]
    for n in range(rounds):
        thought = ThinkingBlock(thinking=f"t{n}", signature="s", origin=signer.value)
        out.append(Message(role="assistant", content=(thought, TextBlock(text=f"a{n}"))))
        out.append(Message(role="user", content=(TextBlock(text=f"q{n}"),)))
    return out


def fresh(history: list[Message], selection: ModelSelection) -> list[Message]:
    """What a filter that remembers nothing sends: every message judged on its own."""
    out = []
    for m in history:
        kept = tuple(
            b for b in m.content if getattr(b, "origin", selection.value) == selection.value
        )
        out.append(m if len(kept) == len(m.content) else replaced(m, content=kept))
    return out


def test_a_switched_session_filters_each_message_once_and_sends_it_as_the_same_object() -> None:
    history = conversation(6, A)  # then the session switched to B
    first = own_thinking_only(list(history), B, None)
    assert first == fresh(history, B)
    grown = [*history, *conversation(2, B)[1:]]
    second = own_thinking_only(list(grown), B, None)
    assert second == fresh(grown, B)
    # The messages filtered on the first request are sent as the very same objects.
    assert all(a is b for a, b in zip(first, second[: len(first)], strict=True))
    # The caller's list is its own: changing it changes nothing the next request sends.
    second.clear()
    assert own_thinking_only(list(grown), B, None) == fresh(grown, B)


def test_a_rewound_or_differently_asked_history_is_filtered_afresh() -> None:
    history = conversation(6, A)
    own_thinking_only(list(history), B, None)
    # Rewound to the third message, then answered by A again: nothing of A's is foreign to A.
    rewound = [*history[:3], *conversation(1, A)[1:]]
    assert own_thinking_only(rewound, A, None) is rewound
    assert own_thinking_only(list(rewound), B, None) == fresh(rewound, B)
    # The same history asked as A keeps everything, whatever was remembered for B.
    assert own_thinking_only(history, A, None) is history
    # A history whose new tail is foreign where its remembered prefix was not.
    mixed = [*history, *conversation(1, B)[1:]]
    assert own_thinking_only(list(mixed), A, None) == fresh(mixed, A)


class _MarkedThinking(ThinkingBlock):
    """A thinking block of a subclass kind (as a newer defect or a plugin might make)."""


class _MarkedText(TextBlock):
    """A text block of a subclass kind."""


def test_blocks_of_subclass_kinds_are_judged_like_their_kind() -> None:
    # The filter passes over the exact kinds that never carry a signature; an instance of a
    # subclass is judged by what it is an instance of, like any other block.
    foreign = _MarkedThinking(thinking="t", signature="s", origin=B.value)
    ours = _MarkedThinking(thinking="u", signature="s", origin=A.value)
    text = _MarkedText(text="x")
    history = [
        Message(role="user", content=(TextBlock(text="q"),)),
        trusted_message("assistant", (foreign, ours, text)),
        Message(role="user", content=(TextBlock(text="r"),)),
    ]
    out = own_thinking_only(list(history), A, None)
    assert out[1].content == (ours, text)
    assert out[1].content[0] is ours and out[1].content[1] is text
    assert own_thinking_only(list(history), B, None)[1].content == (foreign, text)
