"""Property: whatever damage a history carries, `repair_outbound` makes a request the API takes.

Hypothesis builds valid conversations (user prompt -> assistant with signed thinking, text and
tool calls -> user with the results -> ... -> a final user prompt), then damages them the ways
crashes, cancels, compaction and replays do: messages dropped, duplicated, moved, the history
cut anywhere; blocks dropped, duplicated, moved between messages, reordered; orphan calls and
orphan / duplicate results added; malformed calls, unsigned thinking, blank texts (also inside
structured results), empty messages, and images the API refuses (invalid base64, garbage,
another type than declared, an unsupported type, too many pixels, a `file:` URL; in a prompt or
inside a tool result) slipped in. Assistant messages also hold the provider's own web searches
(a `server_tool_use` answered in the same message), which the damage interrupts (a use without
its result) and answers twice or out of thin air (a result without its use). For every such
history `h`:

(a) the strict wire validator (`defect_fakeapi/validation.py`) accepts
    `{"model": "m", "max_tokens": 1024, "messages": encode_messages(repair_outbound(h))}`;
(b) `h` is unchanged (deep JSON dump and object identities);
(c) every non-blank text the user or the model said in `h` is still in the output, as often;
(d) the repair is idempotent: repairing the output returns the output itself;
(e) the output has the normal form the repair promises, which is stricter than what the API
    checks: roles alternate (no merging left to the API), every user message after tool
    calls opens with their results in call order and holds no other result, and a signed
    thinking block of an assistant message is sent as the very same object;
(f) every image in the output is one the API takes (`defect_core/media.py`), every refused
    image that is sent at all stands as its placeholder, and a history without refused
    images gets no placeholder.
An undamaged conversation is returned as the same list, and the rebuild's fast mode gives the
same output as a slow-only run.

The second wire: the same repaired copy, converted for an OpenAI-compatible provider
(`providers/openai_wire.py`, with or without images, and with call ids longer than that wire
takes), breaks no rule of `CHAT_RULES`, the strict fake Chat Completions API accepts it, and
every text said is still in it.
"""

from __future__ import annotations

import itertools
import json
from collections import Counter
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from defect_core.integrity import (
    IMAGE_REMOVED_TEXT,
    is_wire_legal,
    repair,
    repair_outbound,
    violations,
)
from defect_core.integrity.repair import _rebuild
from defect_core.media import image_block_problem
from defect_core.model import (
    ContentBlock,
    ImageBlock,
    JsonPart,
    Message,
    RedactedThinkingBlock,
    ServerToolUseBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    WebSearchError,
    WebSearchHit,
    WebSearchResultBlock,
    messages_to_json,
)
from defect_core.providers.anthropic_wire import encode_messages
from defect_core.providers.openai_wire import chat_violations, encode_chat
from defect_fakeapi import WireError, validate_chat_request, validate_request
from tests.support.images import PNG_1X1, b64, gif, jpeg, png

# --------------------------------------------------------------------------------------------
# Valid conversations

said = st.text(min_size=1, max_size=12).filter(lambda s: s.strip() != "")
tool_names = st.sampled_from(["read_file", "write_file", "bash", "grep"])
result_parts = st.lists(
    st.one_of(
        said.map(lambda s: TextBlock(text=s)),
        st.integers().map(lambda v: JsonPart(value={"n": v})),
        st.just(ImageBlock(media_type="image/png", data=PNG_1X1)),
    ),
    min_size=1,
    max_size=3,
).map(tuple)
result_content: st.SearchStrategy[str | tuple[Any, ...]] = st.one_of(
    st.text(max_size=12), result_parts
)
GOOD_JPEG = ImageBlock(media_type="image/jpeg", data=b64(jpeg(1024, 768)))
REFUSED_IMAGES = (
    ImageBlock(media_type="image/png", data="!!not base64"),
    ImageBlock(media_type="image/png", data=b64(b"garbage, no image at all")),
    ImageBlock(media_type="image/png", data=b64(gif(2, 2))),
    ImageBlock(media_type="image/tiff", data=b64(b"II*\x00")),
    ImageBlock(media_type="image/jpeg", data=b64(jpeg(8001, 10))),
    ImageBlock(media_type="image/png", data=b64(png(1, 9000))),
    ImageBlock(url="file:///home/me/screenshot.png"),
)
"""Module constants: one object each, so the memo of `image_block_problem` serves them."""
signed_thinking = st.builds(
    ThinkingBlock,
    thinking=st.text(max_size=12),
    signature=st.text(alphabet="abcdefXYZ0189+/=", min_size=1, max_size=10),
)


def _search_use(use_id: str) -> ServerToolUseBlock:
    return ServerToolUseBlock(id=use_id, name="web_search", input={"query": use_id})


def _search_result(use_id: str, *, failed: bool = False) -> WebSearchResultBlock:
    if failed:
        return WebSearchResultBlock(
            tool_use_id=use_id, content=WebSearchError(error_code="max_uses_exceeded")
        )
    hit = WebSearchHit(url="https://example.test/", title="Example", encrypted_content="E")
    return WebSearchResultBlock(tool_use_id=use_id, content=(hit,))


@st.composite
def conversations(draw: st.DrawFn) -> list[Message]:
    ids = (f"toolu_{n:03d}" for n in itertools.count())
    search_ids = (f"srvtoolu_{n:03d}" for n in itertools.count())
    messages: list[Message] = []

    def searches() -> list[ContentBlock]:
        """None, or one or two hosted web searches, each answered right after its use."""
        blocks: list[ContentBlock] = []
        for _ in range(draw(st.sampled_from([0, 0, 1, 2]))):
            use_id = next(search_ids)
            blocks += [_search_use(use_id), _search_result(use_id, failed=draw(st.booleans()))]
        return blocks

    def prompt() -> Message:
        blocks: list[ContentBlock] = [
            TextBlock(text=t) for t in draw(st.lists(said, min_size=1, max_size=2))
        ]
        if draw(st.booleans()):
            blocks.append(ImageBlock(url="https://example.test/p.png"))
        if draw(st.booleans()):
            blocks.append(GOOD_JPEG)
        return Message(role="user", content=tuple(blocks))

    for _ in range(draw(st.integers(1, 4))):
        messages.append(prompt())
        for _ in range(draw(st.integers(0, 3))):
            blocks: list[ContentBlock] = []
            if draw(st.booleans()):
                blocks.append(draw(signed_thinking))
            if draw(st.booleans()):
                blocks.append(RedactedThinkingBlock(data="opaque"))
            blocks += searches()
            if draw(st.booleans()):
                blocks.append(TextBlock(text=draw(said)))
            calls = [next(ids) for _ in range(draw(st.integers(1, 3)))]
            blocks += [ToolUseBlock(id=c, name=draw(tool_names), input={"i": c}) for c in calls]
            messages.append(Message(role="assistant", content=tuple(blocks)))
            answers: list[ContentBlock] = [
                ToolResultBlock(
                    tool_use_id=c, content=draw(result_content), is_error=draw(st.booleans())
                )
                for c in calls
            ]
            if draw(st.booleans()):
                answers.append(TextBlock(text=draw(said)))
            messages.append(Message(role="user", content=tuple(answers)))
        closing: list[ContentBlock] = []
        if draw(st.booleans()):
            closing.append(draw(signed_thinking))
        closing += searches()
        closing.append(TextBlock(text=draw(said)))
        messages.append(Message(role="assistant", content=tuple(closing)))
    messages.append(prompt())
    return messages


# --------------------------------------------------------------------------------------------
# Damage

KINDS = (
    "drop_message",
    "duplicate_message",
    "move_message",
    "truncate",
    "drop_block",
    "duplicate_block",
    "move_block",
    "reorder_blocks",
    "orphan_use",
    "orphan_result",
    "duplicate_use_id",
    "malformed_use",
    "unsign_thinking",
    "blank_text",
    "blank_result_part",
    "empty_message",
    "results_before_text",
    "refused_image",
    "interrupted_search",
    "orphan_search_result",
)
damage = st.tuples(
    st.sampled_from(KINDS), st.integers(0, 999), st.integers(0, 999), st.integers(0, 999)
)


def _with(message: Message, blocks: list[ContentBlock]) -> Message:
    return Message(role=message.role, content=tuple(blocks))


def _call_ids(history: list[Message]) -> list[str]:
    return [b.id for m in history for b in m.content if isinstance(b, ToolUseBlock)]


def apply(history: list[Message], kind: str, i: int, j: int, k: int) -> list[Message]:
    """One damage to a copy of `history`; a damage that does not apply leaves it as it is."""
    h = list(history)
    if kind == "empty_message":
        h.insert(i % (len(h) + 1), Message(role=("user", "assistant")[j % 2], content=()))
        return h
    if kind == "orphan_use" and (not h or j % 3 == 0):
        h.insert(i % (len(h) + 1), Message(role="assistant", content=(_use(f"toolu_o{k}"),)))
        return h
    if not h:
        return h
    n = i % len(h)
    target = h[n]
    blocks = list(target.content)
    if kind == "drop_message":
        del h[n]
    elif kind == "duplicate_message":
        h.insert(j % (len(h) + 1), target)
    elif kind == "move_message":
        del h[n]
        h.insert(j % (len(h) + 1), target)
    elif kind == "truncate":
        del h[n:]
    elif kind == "drop_block" and blocks:
        del blocks[j % len(blocks)]
        h[n] = _with(target, blocks)
    elif kind == "duplicate_block" and blocks:
        blocks.insert(k % (len(blocks) + 1), blocks[j % len(blocks)])
        h[n] = _with(target, blocks)
    elif kind == "move_block" and blocks:
        block = blocks.pop(j % len(blocks))
        h[n] = _with(target, blocks)
        m = k % len(h)
        other = list(h[m].content)
        other.insert(i % (len(other) + 1), block)
        h[m] = _with(h[m], other)
    elif kind == "reorder_blocks" and len(blocks) > 1:
        shift = 1 + j % (len(blocks) - 1)
        reordered = blocks[shift:] + blocks[:shift]
        h[n] = _with(target, reordered[::-1] if k % 2 else reordered)
    elif kind == "orphan_use":
        blocks.insert(k % (len(blocks) + 1), _use(f"toolu_o{k}"))
        h[n] = _with(target, blocks)
    elif kind == "orphan_result":
        known = _call_ids(h)
        call_id = known[k % len(known)] if known and k % 3 else f"toolu_r{k}"
        blocks.insert(j % (len(blocks) + 1), ToolResultBlock(tool_use_id=call_id, content="r"))
        h[n] = _with(target, blocks)
    elif kind == "duplicate_use_id":
        known = _call_ids(h)
        if known:
            blocks.insert(j % (len(blocks) + 1), _use(known[k % len(known)]))
            h[n] = _with(target, blocks)
    elif kind == "malformed_use":
        bad = [
            ToolUseBlock(id="", name="bash"),
            ToolUseBlock(id=f"toolu_m{k}", name=""),
            ToolUseBlock(id=f"toolu m{k}", name="bash"),
        ][k % 3]
        blocks.insert(j % (len(blocks) + 1), bad)
        h[n] = _with(target, blocks)
        h.insert(n + 1, Message(role="user", content=(ToolResultBlock(tool_use_id=bad.id),)))
    elif kind == "unsign_thinking":
        for index, block in enumerate(blocks):
            if isinstance(block, ThinkingBlock):
                blocks[index] = ThinkingBlock(thinking=block.thinking, signature=None)
                h[n] = _with(target, blocks)
                break
    elif kind == "blank_text":
        for index, block in enumerate(blocks):
            if isinstance(block, TextBlock):
                blocks[index] = TextBlock(text=["", " ", "\n\t ", "\u3000"][k % 4])
                h[n] = _with(target, blocks)
                break
    elif kind == "blank_result_part":
        for index, block in enumerate(blocks):
            if isinstance(block, ToolResultBlock):
                blank = TextBlock(text=["", " ", "\n"][k % 3])
                parts = () if isinstance(block.content, str) else block.content
                content = (*parts[: j % (len(parts) + 1)], blank, *parts[j % (len(parts) + 1) :])
                blocks[index] = ToolResultBlock(
                    tool_use_id=block.tool_use_id, content=content, is_error=block.is_error
                )
                h[n] = _with(target, blocks)
                break
    elif kind == "refused_image":
        image = REFUSED_IMAGES[k % len(REFUSED_IMAGES)]
        results = [i for i, b in enumerate(blocks) if isinstance(b, ToolResultBlock)]
        if results and j % 2:
            index = results[j % len(results)]
            result = blocks[index]
            assert isinstance(result, ToolResultBlock)
            parts = () if isinstance(result.content, str) else result.content
            at = i % (len(parts) + 1)
            blocks[index] = ToolResultBlock(
                tool_use_id=result.tool_use_id,
                content=(*parts[:at], image, *parts[at:]),
                is_error=result.is_error,
            )
        else:
            blocks.insert(j % (len(blocks) + 1), image)
        h[n] = _with(target, blocks)
    elif kind == "interrupted_search":
        # A use whose result never came: a fresh one slipped in, or a result taken away.
        results = [x for x, b in enumerate(blocks) if isinstance(b, WebSearchResultBlock)]
        if results and j % 2:
            del blocks[results[k % len(results)]]
        else:
            blocks.insert(j % (len(blocks) + 1), _search_use(f"srvtoolu_i{k}"))
        h[n] = _with(target, blocks)
    elif kind == "orphan_search_result":
        # A result of no search, or a second result of a known one, anywhere in the message.
        known = [b.id for m in h for b in m.content if isinstance(b, ServerToolUseBlock)]
        use_id = known[k % len(known)] if known and k % 3 else f"srvtoolu_r{k}"
        blocks.insert(j % (len(blocks) + 1), _search_result(use_id))
        h[n] = _with(target, blocks)
    elif kind == "results_before_text" and blocks:
        texts = [b for b in blocks if isinstance(b, TextBlock)]
        rest = [b for b in blocks if not isinstance(b, TextBlock)]
        h[n] = _with(target, texts + rest)
    return h


def _use(call_id: str) -> ToolUseBlock:
    return ToolUseBlock(id=call_id, name="bash", input={"command": "true"})


@st.composite
def damaged(draw: st.DrawFn) -> tuple[list[Message], list[tuple[str, int, int, int]]]:
    history = draw(conversations())
    damages = draw(st.lists(damage, max_size=6))
    for kind, i, j, k in damages:
        history = apply(history, kind, i, j, k)
    return history, damages


# --------------------------------------------------------------------------------------------
# The property


def assert_normal_form(out: list[Message]) -> None:
    assert out and out[0].role == "user" and out[-1].role == "user"
    calls: list[str] = []
    for previous, message in zip([None, *out], out, strict=False):
        assert previous is None or previous.role != message.role, "roles do not alternate"
        results = [b.tool_use_id for b in message.content if isinstance(b, ToolResultBlock)]
        if message.role == "user":
            assert results == calls, "results do not answer the previous calls in order"
            assert all(isinstance(b, ToolResultBlock) for b in message.content[: len(calls)])
            calls = []
        else:
            calls = [b.id for b in message.content if isinstance(b, ToolUseBlock)]


def _images(history: list[Message]) -> list[ImageBlock]:
    """Every image of a history, in user messages and inside tool results."""
    found: list[ImageBlock] = []
    for message in history:
        for block in message.content:
            if isinstance(block, ImageBlock):
                found.append(block)
            elif isinstance(block, ToolResultBlock) and not isinstance(block.content, str):
                found.extend(p for p in block.content if isinstance(p, ImageBlock))
    return found


def _placeholders(history: list[Message]) -> list[str]:
    texts: list[str] = []
    for message in history:
        for block in message.content:
            parts = (block,)
            if isinstance(block, ToolResultBlock) and not isinstance(block.content, str):
                parts = block.content
            texts.extend(
                p.text
                for p in parts
                if isinstance(p, TextBlock) and p.text.startswith("[image removed: ")
            )
    return texts


def _said(history: list[Message]) -> Counter[str]:
    return Counter(
        b.text
        for m in history
        for b in m.content
        if isinstance(b, TextBlock) and b.text.strip() != ""
    )


@settings(
    max_examples=500,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(damaged())
def test_repair_makes_any_damaged_history_wire_legal(
    case: tuple[list[Message], list[tuple[str, int, int, int]]],
) -> None:
    history, damages = case
    before = messages_to_json(history)
    identities = [id(m) for m in history]

    out = repair_outbound(history)

    # (a) the strict validator accepts the request.
    body = {"model": "m", "max_tokens": 1024, "messages": encode_messages(out)}
    try:
        validate_request(body)
    except WireError as exc:
        raise AssertionError(f"{exc.message}\ndamages: {damages}") from None

    # (b) the input is untouched.
    assert messages_to_json(history) == before
    assert [id(m) for m in history] == identities

    # (c) nothing anyone said is lost.
    kept, original = _said(out), _said(history)
    assert all(kept[text] >= count for text, count in original.items()), damages

    # (d) idempotent, down to the object.
    assert repair_outbound(out) is out

    # The fast mode of the rebuild (clean stretches emitted as they are) changes nothing: a
    # slow-only run, which takes every message apart, lays out the same conversation.
    assert _rebuild(history, resync=False) == out

    # (e) the normal form.
    assert_normal_form(out)
    # The validator and the repair draw on one table of rules: the output breaks none, and the
    # input breaks one exactly when the repair had something to fix (which fix a message
    # breaking several rules needs is the repair's choice, so the rules need not be the same).
    assert violations(out) == []
    found = violations(history)
    assert is_wire_legal(history) == (not found)
    fixes = repair(history).fixes
    assert bool(fixes) == (out is not history) == bool(found), (found, fixes, damages)
    sent = {id(b) for m in out for b in m.content if isinstance(b, ThinkingBlock)}
    for m in history:
        if m.role == "assistant":
            for b in m.content:
                if isinstance(b, ThinkingBlock) and b.signature:
                    assert id(b) in sent

    # (f) images: only those the API takes are sent; the others stand as placeholders.
    assert all(image_block_problem(image) is None for image in _images(out))
    refused = [image for image in _images(history) if image_block_problem(image) is not None]
    placeholders = _placeholders(out)
    reasons = {IMAGE_REMOVED_TEXT.format(reason=image_block_problem(i)) for i in refused}
    assert set(placeholders) <= reasons, damages
    # A refused image in a prompt is always sent (as its placeholder); one inside a tool result
    # or in an assistant message may go with the block that held it.
    in_prompts = [
        b
        for m in history
        if m.role == "user"
        for b in m.content
        if isinstance(b, ImageBlock) and image_block_problem(b) is not None
    ]
    assert len(in_prompts) <= len(placeholders) <= len(refused), damages

    if not damages:
        assert out is history


@settings(max_examples=100, deadline=None)
@given(conversations())
def test_undamaged_conversations_are_returned_unchanged(history: list[Message]) -> None:
    assert repair_outbound(history) is history
    validate_request({"model": "m", "max_tokens": 1024, "messages": encode_messages(history)})


@settings(max_examples=200, deadline=None)
@given(
    conversations(),
    st.sampled_from(range(len(REFUSED_IMAGES))),
    st.integers(0, 999),
    st.integers(0, 999),
    st.booleans(),
)
def test_a_refused_image_is_sent_as_its_placeholder_wherever_it_stands(
    history: list[Message], which: int, i: int, j: int, in_result: bool
) -> None:
    damaged_history = apply(history, "refused_image", i, 2 * j + in_result, which)
    image = REFUSED_IMAGES[which]
    holder = next(m for m in damaged_history if image in _images([m]))
    out = repair_outbound(damaged_history)
    validate_request({"model": "m", "max_tokens": 1024, "messages": encode_messages(out)})
    assert all(image_block_problem(b) is None for b in _images(out))
    expected = IMAGE_REMOVED_TEXT.format(reason=image_block_problem(image))
    sent = 1 if holder.role == "user" else 0  # an assistant message cannot carry an image
    assert _placeholders(out) == [expected] * sent
    assert _rebuild(damaged_history, resync=False) == out
    assert repair_outbound(out) is out


def _lengthened(history: list[Message]) -> list[Message]:
    """`history` with every call id made longer than the Chat wire's 40 characters (the call
    and its results alike), as ids another provider minted may be."""

    def longer(call_id: str) -> str:
        return f"{call_id}_{'z' * 40}"

    out: list[Message] = []
    for message in history:
        blocks: list[ContentBlock] = []
        for block in message.content:
            if isinstance(block, ToolUseBlock):
                block = ToolUseBlock(id=longer(block.id), name=block.name, input=block.input)
            elif isinstance(block, ToolResultBlock):
                block = ToolResultBlock(
                    tool_use_id=longer(block.tool_use_id),
                    content=block.content,
                    is_error=block.is_error,
                )
            blocks.append(block)
        out.append(Message(role=message.role, content=tuple(blocks)))
    return out


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(damaged(), st.booleans(), st.booleans())
def test_any_damaged_history_converts_to_a_chat_request_the_fake_accepts(
    case: tuple[list[Message], list[tuple[str, int, int, int]]], images: bool, long_ids: bool
) -> None:
    """The second wire: the same repair, then the Chat Completions conversion, breaks no rule
    of that wire (`CHAT_RULES`) and the strict fake Chat Completions API takes it."""
    history, damages = case
    if long_ids:
        history = _lengthened(history)
    sent = encode_chat("system", repair_outbound(history), images=images)
    assert chat_violations(sent, images=images) == [], damages
    try:
        validate_chat_request({"model": "m", "messages": sent, "stream": True})
    except WireError as exc:
        raise AssertionError(f"{exc.message}\ndamages: {damages}") from None
    # Every text the user or the model said reaches this wire too.
    dumped = json.dumps(sent)
    assert all(json.dumps(text)[1:-1] in dumped for text in _said(history)), damages
