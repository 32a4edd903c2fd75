"""Tests for `defect_fakeapi.validation`: one test per Messages API rule, exact messages.

Owns: the evidence that the strict fake rejects what the real API rejects, with the API's
words, and accepts the conversations a correct agent sends.

Invariant: every expected message here is spelled out literally (not imported from the
validator), so a change in wording fails a test instead of silently following the code.

Why: the rest of the suite trusts the fake provider to catch malformed conversations; that
trust is only as good as these checks.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from defect_fakeapi import WireError, validate_bedrock_body, validate_request

PATTERN = "^[a-zA-Z0-9_-]+$"
MISSING = (
    "messages.{n}: `tool_use` ids were found without `tool_result` blocks immediately after: "
    "{ids}. Each `tool_use` block must have a corresponding `tool_result` block in the next "
    "message."
)
UNEXPECTED = (
    "messages.{n}.content.{m}: unexpected `tool_use_id` found in `tool_result` blocks: {id}. "
    "Each `tool_result` block must have a corresponding `tool_use` block in the previous "
    "message."
)
THINKING_FIRST = (
    "messages.{n}.content.0.type: Expected `thinking` or `redacted_thinking`, but found "
    "`{found}`. When `thinking` is enabled, a final `assistant` message must start with a "
    "thinking block (preceeding the lastmost set of `tool_use` and `tool_result` blocks). We "
    "recommend you include thinking blocks from previous turns. To avoid this requirement, "
    "disable `thinking`. Please consult our documentation at "
    "https://docs.claude.com/en/docs/build-with-claude/extended-thinking"
)
MODIFIED = (
    "messages.{n}.content.{m}: `thinking` or `redacted_thinking` blocks in the latest "
    "assistant message cannot be modified. These blocks must remain as they were in the "
    "original response."
)


def req(messages: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"model": "claude-test", "max_tokens": 4096, "messages": messages, **extra}


def user(*content: Any) -> dict[str, Any]:
    return {"role": "user", "content": list(content) if len(content) != 1 else _one(content[0])}


def assistant(*content: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": list(content)}


def _one(content: Any) -> Any:
    return content if isinstance(content, str) else [content]


def text(value: str, **extra: Any) -> dict[str, Any]:
    return {"type": "text", "text": value, **extra}


def use(tool_id: str, name: str = "read", **extra: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": tool_id, "name": name, "input": {"p": 1}, **extra}


def result(tool_id: str, content: Any = "ok", **extra: Any) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": tool_id, "content": content, **extra}


def thinking(value: str = "hmm", signature: str = "sig") -> dict[str, Any]:
    return {"type": "thinking", "thinking": value, "signature": signature}


def rejected(body: Any, **kwargs: Any) -> str:
    with pytest.raises(WireError) as info:
        validate_request(body, **kwargs)
    assert info.value.status == 400
    assert info.value.error_type == "invalid_request_error"
    return info.value.message


THINK = {"type": "enabled", "budget_tokens": 1024}


# ------------------------------------------------------------------ accepted conversations


def test_accepts_a_full_tool_loop_with_thinking_and_trailing_text() -> None:
    body = req(
        [
            user("read a"),
            assistant(thinking(), text("reading"), use("toolu_A"), use("toolu_B")),
            user(result("toolu_A"), result("toolu_B", [text("b")]), text("also this")),
            assistant(use("toolu_C")),
            user(result("toolu_C", is_error=True)),
        ],
        thinking=THINK,
        tools=[{"name": "read", "input_schema": {"type": "object"}}],
        system=[text("be brief", cache_control={"type": "ephemeral"})],
        stream=True,
    )
    validate_request(body)


def test_string_content_is_shorthand_for_one_text_block() -> None:
    validate_request(req([user("hi"), assistant(text("hello")), user("again")]))


# ------------------------------------------------------------------ basic message rules


def test_first_message_must_be_user() -> None:
    body = req([assistant(text("hi")), user("x")])
    assert rejected(body) == 'messages: first message must use the "user" role'


@pytest.mark.parametrize("empty", ["", []])
def test_empty_content_rejected_except_final_assistant(empty: Any) -> None:
    body = req([user("a"), {"role": "assistant", "content": empty}, user("b")])
    assert rejected(body) == (
        "messages.1: all messages must have non-empty content except for the optional final "
        "assistant message"
    )
    validate_request(req([user("a"), {"role": "assistant", "content": empty}]), allow_prefill=True)


def test_prefill_rejected_unless_allowed() -> None:
    body = req([user("a"), assistant(text("The answer is"))])
    assert rejected(body) == (
        "This model does not support assistant message prefill. The conversation must end "
        "with a user message."
    )
    validate_request(body, allow_prefill=True)


def test_prefill_cannot_end_with_whitespace() -> None:
    body = req([user("a"), assistant(text("The answer is "))])
    message = rejected(body, allow_prefill=True)
    assert message == "messages: final assistant content cannot end with trailing whitespace"


def test_final_assistant_thinking_needs_thinking_enabled() -> None:
    body = req([user("a"), assistant(thinking(), text("x"))])
    assert rejected(body, allow_prefill=True) == (
        "messages.1.content.0: When thinking is disabled, an `assistant` message in the final "
        "position cannot contain `thinking`. To use thinking blocks, enable `thinking` in your "
        "request."
    )


def test_empty_text_block() -> None:
    body = req([user(text("a"), text(""))])
    assert rejected(body) == "messages: text content blocks must be non-empty"


def test_empty_text_inside_tool_result() -> None:
    body = req([user("a"), assistant(use("toolu_A")), user(result("toolu_A", [text("")]))])
    assert rejected(body) == "messages: text content blocks must be non-empty"


@pytest.mark.parametrize("content", ["  \n", [text(" \t")]])
def test_whitespace_only_text(content: Any) -> None:
    body = req([{"role": "user", "content": content}])
    assert rejected(body) == "messages: text content blocks must contain non-whitespace text"


# ------------------------------------------------------------------ tool pairing


def test_tool_use_id_pattern() -> None:
    body = req([user("a"), assistant(use("toolu.1")), user(result("toolu_1"))])
    assert (
        rejected(body)
        == f"messages.1.content.0.tool_use.id: String should match pattern '{PATTERN}'"
    )


def test_tool_result_id_pattern() -> None:
    body = req([user("a"), assistant(use("toolu_1")), user(result("toolu 1"))])
    assert rejected(body) == (
        f"messages.2.content.0.tool_result.tool_use_id: String should match pattern '{PATTERN}'"
    )


def test_duplicate_tool_use_ids_across_the_request() -> None:
    body = req(
        [
            user("a"),
            assistant(use("toolu_A")),
            user(result("toolu_A")),
            assistant(text("again"), use("toolu_A")),
            user(result("toolu_A")),
        ]
    )
    assert rejected(body) == "messages.3.content.1: `tool_use` ids must be unique"


def test_orphan_tool_use_names_every_missing_id() -> None:
    body = req([user("a"), assistant(use("toolu_A"), use("toolu_B")), user("no results")])
    assert rejected(body) == MISSING.format(n=1, ids="toolu_A, toolu_B")


def test_orphan_tool_use_at_the_end_of_a_prefill() -> None:
    body = req([user("a"), assistant(use("toolu_A"))])
    assert rejected(body, allow_prefill=True) == MISSING.format(n=1, ids="toolu_A")


def test_text_before_results_breaks_the_leading_run() -> None:
    body = req(
        [
            user("a"),
            assistant(use("toolu_A"), use("toolu_B")),
            user(text("here you go"), result("toolu_A"), result("toolu_B")),
        ]
    )
    assert rejected(body) == MISSING.format(n=1, ids="toolu_A, toolu_B")


def test_text_between_results_leaves_the_later_ones_unanswered() -> None:
    body = req(
        [
            user("a"),
            assistant(use("toolu_A"), use("toolu_B")),
            user(result("toolu_A"), text("note"), result("toolu_B")),
        ]
    )
    assert rejected(body) == MISSING.format(n=1, ids="toolu_B")


def test_results_split_over_two_user_messages() -> None:
    body = req(
        [
            user("a"),
            assistant(use("toolu_A"), use("toolu_B")),
            user(result("toolu_A")),
            user(result("toolu_B")),
        ]
    )
    assert rejected(body) == MISSING.format(n=1, ids="toolu_B")
    # Merging joins them when the fake is told the API does so.
    validate_request(body, allow_split_results=True)


def test_merging_does_not_rescue_text_between_split_results() -> None:
    body = req(
        [
            user("a"),
            assistant(use("toolu_A"), use("toolu_B")),
            user(result("toolu_A"), text("note")),
            user(result("toolu_B")),
        ]
    )
    assert rejected(body, allow_split_results=True) == MISSING.format(n=1, ids="toolu_B")


def test_consecutive_assistant_messages_are_merged_before_pairing() -> None:
    body = req(
        [
            user("a"),
            assistant(text("first")),
            assistant(use("toolu_A")),
            user(result("toolu_A")),
        ]
    )
    validate_request(body)


def test_unexpected_tool_result() -> None:
    body = req([user("a"), assistant(use("toolu_A")), user(result("toolu_A"), result("toolu_X"))])
    assert rejected(body) == UNEXPECTED.format(n=2, m=1, id="toolu_X")


def test_tool_result_in_the_first_message_is_unexpected() -> None:
    assert rejected(req([user(result("toolu_X"))])) == UNEXPECTED.format(n=0, m=0, id="toolu_X")


def test_tool_result_for_an_older_turn_is_unexpected() -> None:
    body = req(
        [
            user("a"),
            assistant(use("toolu_A")),
            user(result("toolu_A")),
            assistant(text("done")),
            user(result("toolu_A")),
        ]
    )
    assert rejected(body) == UNEXPECTED.format(n=4, m=0, id="toolu_A")


def test_duplicate_tool_result_in_one_message() -> None:
    body = req([user("a"), assistant(use("toolu_A")), user(result("toolu_A"), result("toolu_A"))])
    assert rejected(body) == (
        "messages.2.content.1: each tool_use must have a single result. Found multiple "
        "`tool_result` blocks with id: toolu_A"
    )


# ------------------------------------------------------------------ cache_control


def _cached_body(breakpoints: int) -> dict[str, Any]:
    cc = {"type": "ephemeral"}
    tool = {"name": "read", "input_schema": {"type": "object"}, "cache_control": cc}
    system = [text("sys", cache_control=cc)]
    nested = result("toolu_A", [text("r", cache_control=cc)])
    blocks = [text("q1", cache_control=cc), text("q2", cache_control=cc)]
    body = req(
        [user("a"), assistant(use("toolu_A")), user(nested, *blocks[: breakpoints - 3])],
        tools=[tool],
        system=system,
    )
    return body


def test_four_cache_breakpoints_are_fine() -> None:
    validate_request(_cached_body(4))


def test_more_than_four_cache_breakpoints() -> None:
    assert rejected(_cached_body(5)) == (
        "A maximum of 4 blocks with cache_control may be provided. Found 5."
    )


def test_top_level_cache_control_counts_as_a_breakpoint() -> None:
    body = _cached_body(4)
    body["cache_control"] = {"type": "ephemeral"}
    assert rejected(body) == "A maximum of 4 blocks with cache_control may be provided. Found 5."


# ------------------------------------------------------------------ thinking


def test_thinking_budget_minimum() -> None:
    body = req([user("a")], thinking={"type": "enabled", "budget_tokens": 1023})
    assert rejected(body) == (
        "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024"
    )


def test_thinking_budget_below_max_tokens() -> None:
    body = req([user("a")], max_tokens=2048, thinking={"type": "enabled", "budget_tokens": 2048})
    assert rejected(body) == (
        "`max_tokens` must be greater than `thinking.budget_tokens`. Please consult our "
        "documentation at https://docs.claude.com/en/docs/build-with-claude/extended-thinking"
        "#max-tokens-and-context-window-size"
    )


def test_thinking_loop_must_open_with_a_thinking_block() -> None:
    body = req([user("a"), assistant(use("toolu_A")), user(result("toolu_A"))], thinking=THINK)
    assert rejected(body) == THINKING_FIRST.format(n=1, found="tool_use")
    body["thinking"] = {"type": "disabled"}
    validate_request(body)


def test_thinking_rule_applies_to_the_opener_of_a_multi_step_loop() -> None:
    later = req(
        [
            user("a"),
            assistant(thinking(), use("toolu_A")),
            user(result("toolu_A")),
            assistant(use("toolu_B")),
            user(result("toolu_B")),
        ],
        thinking=THINK,
    )
    validate_request(later)
    opener_without = req(
        [
            user("a"),
            assistant(text("let me look"), use("toolu_A")),
            user(result("toolu_A")),
            assistant(thinking(), use("toolu_B")),
            user(result("toolu_B")),
        ],
        thinking=THINK,
    )
    assert rejected(opener_without) == THINKING_FIRST.format(n=1, found="text")


def test_thinking_rule_ignores_finished_turns() -> None:
    body = req(
        [
            user("a"),
            assistant(use("toolu_A")),
            user(result("toolu_A")),
            assistant(text("done")),
            user("next question"),
        ],
        thinking=THINK,
    )
    validate_request(body)


def test_redacted_thinking_opens_a_loop_too() -> None:
    body = req(
        [
            user("a"),
            assistant({"type": "redacted_thinking", "data": "opaque"}, use("toolu_A")),
            user(result("toolu_A")),
        ],
        thinking=THINK,
    )
    validate_request(body)


def test_thinking_block_needs_a_signature() -> None:
    block = {"type": "thinking", "thinking": "hmm"}
    body = req([user("a"), assistant(block, use("toolu_A")), user(result("toolu_A"))])
    assert rejected(body) == "messages.1.content.0.thinking.signature: Field required"


def _checker(thinking_text: str, signature: str) -> bool:
    return signature == f"sig:{thinking_text}"


def test_modified_thinking_in_the_latest_assistant_message() -> None:
    body = req(
        [
            user("a"),
            assistant(thinking("I will read", "sig:I will read"), use("toolu_A")),
            user(result("toolu_A")),
        ],
        thinking=THINK,
    )
    validate_request(body, signature_checker=_checker)
    body["messages"][1]["content"][0]["thinking"] = "I will read "
    assert rejected(body, signature_checker=_checker) == MODIFIED.format(n=1, m=0)


def test_empty_thinking_is_still_signed() -> None:
    body = req(
        [user("a"), assistant(thinking("", "sig:"), use("toolu_A")), user(result("toolu_A"))],
        thinking=THINK,
    )
    validate_request(body, signature_checker=_checker)
    body["messages"][1]["content"][0]["signature"] = "sig:x"
    assert rejected(body, signature_checker=_checker) == MODIFIED.format(n=1, m=0)


def test_bad_signature_in_an_older_assistant_message() -> None:
    body = req(
        [
            user("a"),
            assistant(thinking("old", "forged"), text("answer")),
            user("b"),
            assistant(thinking("new", "sig:new"), use("toolu_A")),
            user(result("toolu_A")),
        ],
        thinking=THINK,
    )
    assert rejected(body, signature_checker=_checker) == (
        "messages.1.content.0: Invalid `signature` in `thinking` block"
    )


def test_temperature_with_thinking() -> None:
    body = req([user("a")], thinking=THINK, temperature=0.2)
    assert rejected(body).startswith("`temperature` may only be set to 1 when thinking is enabled.")


def test_forced_tool_choice_with_thinking() -> None:
    tools = [{"name": "read", "input_schema": {"type": "object"}}]
    body = req([user("a")], thinking=THINK, tools=tools, tool_choice={"type": "any"})
    assert rejected(body).startswith(
        "Thinking may not be enabled when tool_choice forces tool use."
    )


# ------------------------------------------------------------------ shape


def test_messages_must_not_be_empty() -> None:
    assert rejected(req([])) == "messages: at least one message is required"


def test_model_and_max_tokens_are_required() -> None:
    body = req([user("a")])
    del body["model"]
    assert rejected(body) == "model: Field required"
    body = req([user("a")])
    del body["max_tokens"]
    assert rejected(body) == "max_tokens: Field required"
    assert rejected(req([user("a")], max_tokens=0)) == (
        "max_tokens: Input should be greater than or equal to 1"
    )


def test_unknown_role() -> None:
    body = req([{"role": "system", "content": "x"}])
    assert rejected(body) == "messages.0.role: Input should be 'user' or 'assistant'"


def test_unknown_top_level_key() -> None:
    assert rejected(req([user("a")], extra_body={})) == (
        "extra_body: Extra inputs are not permitted"
    )


def test_unknown_block_type() -> None:
    message = rejected(req([user({"type": "video", "data": "x"})]))
    assert message.startswith(
        "messages.0.content.0: Input tag 'video' found using 'type' does not match any of the "
        "expected tags: 'text', 'image'"
    )


def test_extra_block_key_uses_the_tagged_path() -> None:
    body = req([user("a"), assistant(text("x", parsed_output=None)), user("b")])
    assert (
        rejected(body) == "messages.1.content.0.text.parsed_output: Extra inputs are not permitted"
    )


def test_thinking_blocks_take_no_cache_control() -> None:
    block = {**thinking(), "cache_control": {"type": "ephemeral"}}
    body = req([user("a"), assistant(block, use("toolu_A")), user(result("toolu_A"))])
    assert rejected(body) == (
        "messages.1.content.0.thinking.cache_control: Extra inputs are not permitted"
    )


def test_tool_result_content_blocks_are_text_or_image() -> None:
    body = req([user("a"), assistant(use("toolu_A")), user(result("toolu_A", [use("toolu_B")]))])
    assert rejected(body).startswith(
        "messages.2.content.0.tool_result.content.0: Input tag 'tool_use' found using 'type'"
    )


def test_blocks_in_the_wrong_role() -> None:
    body = req([user(use("toolu_A"))])
    assert (
        rejected(body)
        == "messages.0.content.0: `tool_use` blocks can only be in `assistant` messages"
    )


def test_tool_names_are_checked() -> None:
    bad = [{"name": "read file", "input_schema": {"type": "object"}}]
    assert rejected(req([user("a")], tools=bad)) == (
        "tools.0.custom.name: String should match pattern '^[a-zA-Z0-9_-]{1,128}$'"
    )
    twice = [{"name": "read", "input_schema": {"type": "object"}}] * 2
    assert rejected(req([user("a")], tools=twice)) == "tools: Tool names must be unique."


def test_count_tokens_body_shape() -> None:
    body: dict[str, Any] = {"model": "claude-test", "messages": [user("a")]}
    validate_request(body, count_tokens=True)
    body["max_tokens"] = 10
    assert rejected(body, count_tokens=True) == "max_tokens: Extra inputs are not permitted"


# ------------------------------------------------------------------ Bedrock


def bedrock_rejected(body: Any) -> str:
    with pytest.raises(WireError) as info:
        validate_bedrock_body(body)
    assert info.value.status == 400
    assert info.value.error_type == "ValidationException"
    return info.value.message


@pytest.mark.parametrize("version", ["bedrock-2023-05-31", "2026-10-21"])
def test_bedrock_accepts_both_anthropic_versions(version: str) -> None:
    validate_bedrock_body({"anthropic_version": version, "max_tokens": 10, "messages": [user("a")]})


@pytest.mark.parametrize("key", ["model", "stream"])
def test_bedrock_body_has_no_model_or_stream(key: str) -> None:
    body = {"anthropic_version": "bedrock-2023-05-31", "max_tokens": 10, "messages": [user("a")]}
    body[key] = "x" if key == "model" else True
    assert bedrock_rejected(body) == (
        f"Malformed input request: #: extraneous key [{key}] is not permitted, please reformat "
        "your input and try again."
    )


def test_bedrock_body_needs_anthropic_version() -> None:
    assert bedrock_rejected({"max_tokens": 10, "messages": [user("a")]}) == (
        "Malformed input request: #: required key [anthropic_version] not found, please "
        "reformat your input and try again."
    )


def test_bedrock_applies_the_messages_rules() -> None:
    body = {
        "anthropic_version": "bedrock-2023-05-31",
        "max_tokens": 10,
        "messages": [user("a"), assistant(use("toolu_A")), user("b")],
    }
    assert bedrock_rejected(body) == MISSING.format(n=1, ids="toolu_A")


# ------------------------------------------------------------------ property


@st.composite
def tool_conversations(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Conversations a correct agent sends: every tool turn answered in the next message."""
    messages: list[dict[str, Any]] = [user("start")]
    counter = 0
    for _ in range(draw(st.integers(1, 4))):
        calls = draw(st.integers(0, 3))
        ids = [f"toolu_{counter + i}" for i in range(calls)]
        counter += calls
        prefix = [text("thinking aloud")] if draw(st.booleans()) or not ids else []
        messages.append(assistant(*prefix, *(use(i) for i in ids)))
        if ids:
            order = draw(st.permutations(ids))
            trailing = [text("and a note")] if draw(st.booleans()) else []
            messages.append(user(*(result(i) for i in order), *trailing))
        else:
            messages.append(user("next"))
    return messages


@settings(max_examples=60, deadline=None)
@given(tool_conversations(), st.data())
def test_dropping_any_result_names_exactly_that_id(
    messages: list[dict[str, Any]], data: st.DataObject
) -> None:
    validate_request(req(messages))
    answered = [
        (n, m)
        for n, message in enumerate(messages)
        if isinstance(message["content"], list)
        for m, block in enumerate(message["content"])
        if block["type"] == "tool_result"
    ]
    if not answered:
        return
    n, m = data.draw(st.sampled_from(answered))
    dropped = messages[n]["content"][m]["tool_use_id"]
    content = [b for k, b in enumerate(messages[n]["content"]) if k != m]
    mutated = [*messages[:n], {"role": "user", "content": content}, *messages[n + 1 :]]
    if not content:
        mutated[n] = user("no results")
    assert rejected(req(mutated)) == MISSING.format(n=n - 1, ids=dropped)
