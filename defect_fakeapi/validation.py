"""Anthropic Messages request rules, applied to a JSON request body as it is sent on the wire.

Owns: `validate_request` (first-party `/v1/messages` and `/v1/messages/count_tokens` bodies),
`validate_bedrock_body` (Bedrock `invoke-with-response-stream` bodies) and `WireError`, the
400 the real API would answer for the first rule a body breaks. Rule 1 (shape) and `WireError`
live in `defect_fakeapi.shape`; rules 2 to 6 are here.

Invariant: a body this module accepts is one the real API accepts as far as the rules below
go, and a body it rejects carries the API's own error message, word for word where the message
is known from public reports (see docs/provider-wire.md). Messages marked "judged"
are worded the way the API words its neighbours; tests may rely on their text, but should
prefer the known ones.

Why: the agent's conversation bookkeeping (tool pairing, thinking replay, cache breakpoints)
only fails against the real API, in production, mid-session. A fake that accepts what the API
rejects would let those bugs through every test; so the fake provider runs every request body
through here before it answers.

Indices: `messages.N.content.M` always name the message and block as the client sent them,
even when the API's merging of consecutive same-role messages is what made a rule fail.

Rules, in the order they are checked:
1. Shape (pydantic-style wording, as in the API's reports): required fields ("Field
   required"), types, unknown keys ("<path>: Extra inputs are not permitted", where a block's
   path carries its tag, e.g. `messages.1.content.0.text.parsed_output`, so replaying SDK
   response objects with extra attributes is refused), roles, known block types (text, image,
   document, thinking, redacted_thinking, tool_use, tool_result), `signature` required on
   thinking blocks, `cache_control` shape (none on thinking blocks), tool names, and the id
   pattern `^[a-zA-Z0-9_-]+$` on `tool_use.id` and `tool_result.tool_use_id`; the web search
   tool definition and its blocks (`server_tool_use`, `web_search_tool_result`, assistant only,
   ids `^srvtoolu_[a-zA-Z0-9_]+$`).
2. Parameters: `thinking.budget_tokens` >= 1024 and < `max_tokens`; `temperature` must be 1
   with thinking; forced `tool_choice` is refused with thinking; `tool_choice.name` must name
   a tool; tool names unique.
3. Messages: first message user; non-empty content except an optional final assistant
   message; non-empty, non-whitespace text blocks (tool_result content included); prefill
   refused unless `allow_prefill` or it holds a `server_tool_use` (a turn the API paused with
   `pause_turn`, sent back as is to continue - judged); then: no trailing whitespace, and no
   thinking in it while thinking is disabled.
4. Tool pairing, after merging consecutive same-role messages (merging is concatenation of
   content): `tool_use` ids unique over the whole request; every `tool_use` answered by the
   leading run of `tool_result` blocks in the next message (text before a result ends the
   run). By default the run may not span two of the client's messages: results split over
   two user messages are refused, as the notes report; `allow_split_results=True` lets
   merging join them (text between them still breaks the run). No `tool_result` without a
   `tool_use` in the previous message; one result per id ("each tool_use must have a single
   result. Found multiple `tool_result` blocks with id: …", the wording seen in reports).
   Server tools are answered inside the assistant turn itself: each `web_search_tool_result`
   needs a `server_tool_use` of its id earlier in the same (merged) assistant turn, not yet
   answered ("unexpected `tool_use_id` found in `web_search_tool_result` blocks: …"), and
   each `web_search` server tool use needs its result in that turn ("`web_search` tool use
   with id `…` was found without a corresponding `web_search_tool_result` block"), both
   worded as in public reports.
5. At most 4 `cache_control` breakpoints (tools, system blocks, message blocks, nested
   `tool_result` content blocks, and the top-level automatic `cache_control`).
6. Thinking. With `thinking.type == "enabled"`, the assistant message that opened the latest
   tool loop (walking back from a final user message that starts with tool results, through
   assistant/tool-result pairs) must start with `thinking`/`redacted_thinking`. With a
   `signature_checker` (whatever the thinking setting), every `thinking` block in an
   assistant message must carry the signature minted for its exact text: in the latest
   assistant message a mismatch is "... cannot be modified ...", in older ones
   "Invalid `signature` in `thinking` block".

Judged wordings (no public report seen): the role rule for blocks ("`tool_use` blocks can
only be in `assistant` messages"), `tool_choice.name` naming no tool, a non-object body, and
an unsupported Bedrock `anthropic_version`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from defect_fakeapi.shape import (
    _BEDROCK_EXTRA_KEYS,
    BEDROCK_ANTHROPIC_VERSIONS,
    BLOCK_TYPES,
    MAX_CACHE_BREAKPOINTS,
    MIN_THINKING_BUDGET,
    THINKING_DOCS_URL,
    WireError,
    _blocks_of,
    _check_shape,
    _expect_dict,
    _expect_int,
    _expect_str,
    _invalid,
    _require,
    _tag_error,
)

__all__ = [
    "BEDROCK_ANTHROPIC_VERSIONS",
    "SignatureChecker",
    "WireError",
    "validate_bedrock_body",
    "validate_request",
]

SignatureChecker = Callable[[str, str], bool]
"""`(thinking_text, signature) -> bool`: True when the signature was minted for that text."""

# --------------------------------------------------------------------------------------------
# Parameters


def _thinking_type(body: Mapping[str, Any]) -> str | None:
    thinking = body.get("thinking")
    if thinking is None:
        return None
    kind = _expect_dict(thinking, "thinking").get("type")
    if kind not in ("enabled", "disabled", "adaptive", "between_tools"):
        allowed = ("enabled", "disabled", "adaptive", "between_tools")
        raise _tag_error("thinking", kind, allowed)
    return str(kind)


def _check_parameters(body: Mapping[str, Any], *, count_tokens: bool) -> None:
    thinking_type = _thinking_type(body)
    if thinking_type == "enabled":
        thinking = body["thinking"]
        budget = _expect_int(
            _require(thinking, "budget_tokens", "thinking.enabled"),
            "thinking.enabled.budget_tokens",
        )
        if budget < MIN_THINKING_BUDGET:
            raise _invalid(
                "thinking.enabled.budget_tokens: Input should be greater than or equal to "
                f"{MIN_THINKING_BUDGET}"
            )
        if not count_tokens and body["max_tokens"] <= budget:
            raise _invalid(
                "`max_tokens` must be greater than `thinking.budget_tokens`. Please consult our "
                f"documentation at {THINKING_DOCS_URL}#max-tokens-and-context-window-size"
            )
    if thinking_type in ("enabled", "adaptive", "between_tools"):
        temperature = body.get("temperature")
        if temperature is not None and temperature != 1:
            raise _invalid(
                "`temperature` may only be set to 1 when thinking is enabled. Please consult our "
                f"documentation at {THINKING_DOCS_URL}#feature-compatibility"
            )
    tools = body.get("tools") or []
    names = [t["name"] for t in tools]
    if len(set(names)) != len(names):
        raise _invalid("tools: Tool names must be unique.")
    tool_choice = body.get("tool_choice")
    if tool_choice is not None:
        tool_choice = _expect_dict(tool_choice, "tool_choice")
        kind = tool_choice.get("type")
        if kind not in ("auto", "any", "tool", "none"):
            raise _tag_error("tool_choice", kind, ("auto", "any", "tool", "none"))
        if kind == "tool":
            name = _expect_str(
                _require(tool_choice, "name", "tool_choice.tool"), "tool_choice.tool.name"
            )
            if name not in names:  # judged
                raise _invalid(f"tool_choice.name: Tool '{name}' not found in provided tools")
        if thinking_type in ("enabled", "adaptive", "between_tools") and kind in ("any", "tool"):
            raise _invalid(
                "Thinking may not be enabled when tool_choice forces tool use. Please consult our "
                f"documentation at {THINKING_DOCS_URL}#extended-thinking-with-tool-use"
            )


# --------------------------------------------------------------------------------------------
# Messages


@dataclass(frozen=True)
class _Placed:
    """One content block with the position the client gave it."""

    message: int
    index: int
    block: Mapping[str, Any]

    @property
    def type(self) -> str:
        return str(self.block.get("type"))

    @property
    def path(self) -> str:
        return f"messages.{self.message}.content.{self.index}"


@dataclass
class _Turn:
    """Consecutive same-role messages, merged the way the API merges them."""

    role: str
    messages: list[int]
    blocks: list[_Placed]


def _merge(messages: Sequence[Mapping[str, Any]]) -> list[_Turn]:
    turns: list[_Turn] = []
    for n, message in enumerate(messages):
        placed = [_Placed(n, m, block) for m, block in enumerate(_blocks_of(message))]
        if turns and turns[-1].role == message["role"]:
            turns[-1].messages.append(n)
            turns[-1].blocks.extend(placed)
        else:
            turns.append(_Turn(message["role"], [n], placed))
    return turns


def _text_blocks(messages: Sequence[Mapping[str, Any]]) -> Iterator[Mapping[str, Any]]:
    for message in messages:
        for block in _blocks_of(message):
            if block.get("type") == "text":
                yield block
            elif block.get("type") == "tool_result" and isinstance(block.get("content"), list):
                for item in block["content"]:
                    if item.get("type") == "text":
                        yield item


def _check_message_basics(
    messages: Sequence[Mapping[str, Any]], *, allow_prefill: bool, thinking_type: str | None
) -> None:
    if messages[0]["role"] != "user":
        raise _invalid('messages: first message must use the "user" role')
    last = len(messages) - 1
    for n, message in enumerate(messages):
        content = message["content"]
        empty = content == "" or content == []
        if empty and not (n == last and message["role"] == "assistant"):
            raise _invalid(
                f"messages.{n}: all messages must have non-empty content except for the "
                "optional final assistant message"
            )
    for block in _text_blocks(messages):
        if block["text"] == "":
            raise _invalid("messages: text content blocks must be non-empty")
        if not block["text"].strip():
            raise _invalid("messages: text content blocks must contain non-whitespace text")
    final = messages[last]
    if final["role"] == "assistant":
        paused = any(b.get("type") == "server_tool_use" for b in _blocks_of(final))
        if not allow_prefill and not paused:
            raise _invalid(
                "This model does not support assistant message prefill. The conversation must "
                "end with a user message."
            )
        blocks = _blocks_of(final)
        if (
            blocks
            and blocks[-1].get("type") == "text"
            and blocks[-1]["text"].rstrip() != (blocks[-1]["text"])
        ):
            raise _invalid("messages: final assistant content cannot end with trailing whitespace")
        if thinking_type in (None, "disabled"):
            for m, block in enumerate(blocks):
                if block.get("type") in ("thinking", "redacted_thinking"):
                    raise _invalid(
                        f"messages.{last}.content.{m}: When thinking is disabled, an `assistant` "
                        "message in the final position cannot contain `thinking`. To use "
                        "thinking blocks, enable `thinking` in your request."
                    )


def _leading_results(turn: _Turn, *, allow_split_results: bool) -> list[_Placed]:
    """The run of `tool_result` blocks a user turn opens with (within one client message
    unless `allow_split_results`)."""
    run: list[_Placed] = []
    for placed in turn.blocks:
        if placed.type != "tool_result":
            break
        if not allow_split_results and run and placed.message != run[0].message:
            break
        run.append(placed)
    return run


def _check_server_tool_pairing(turn: _Turn) -> None:
    """Server tools are answered inside the assistant turn that used them."""
    pending: dict[str, _Placed] = {}
    for placed in turn.blocks:
        if placed.type == "server_tool_use":
            pending[placed.block["id"]] = placed
        elif placed.type == "web_search_tool_result":
            tool_use_id = placed.block["tool_use_id"]
            use = pending.pop(tool_use_id, None)
            if use is None or use.block.get("name") != "web_search":
                raise _invalid(
                    f"{placed.path}: unexpected `tool_use_id` found in `web_search_tool_result` "
                    f"blocks: {tool_use_id}. Each `web_search_tool_result` block must have a "
                    "corresponding `server_tool_use` block before it."
                )
    for tool_id, use in pending.items():
        if use.block.get("name") == "web_search":
            raise _invalid(
                f"messages.{use.message}: `web_search` tool use with id `{tool_id}` was found "
                "without a corresponding `web_search_tool_result` block"
            )


def _check_tool_pairing(turns: Sequence[_Turn], *, allow_split_results: bool) -> None:
    seen_ids: set[str] = set()
    for turn in turns:
        for placed in turn.blocks:
            if placed.type == "tool_use":
                tool_id = placed.block["id"]
                if tool_id in seen_ids:
                    raise _invalid(f"{placed.path}: `tool_use` ids must be unique")
                seen_ids.add(tool_id)

    for t, turn in enumerate(turns):
        if turn.role == "assistant":
            _check_server_tool_pairing(turn)
            uses = [p for p in turn.blocks if p.type == "tool_use"]
            if not uses:
                continue
            answered: set[str] = set()
            if t + 1 < len(turns):
                run = _leading_results(turns[t + 1], allow_split_results=allow_split_results)
                answered = {p.block["tool_use_id"] for p in run}
            missing = [p for p in uses if p.block["id"] not in answered]
            if missing:
                ids = ", ".join(p.block["id"] for p in missing)
                raise _invalid(
                    f"messages.{missing[0].message}: `tool_use` ids were found without "
                    f"`tool_result` blocks immediately after: {ids}. Each `tool_use` block must "
                    "have a corresponding `tool_result` block in the next message."
                )
        else:
            previous = turns[t - 1] if t > 0 else None
            use_ids = (
                {p.block["id"] for p in previous.blocks if p.type == "tool_use"}
                if previous is not None
                else set()
            )
            results_seen: set[str] = set()
            for placed in turn.blocks:
                if placed.type != "tool_result":
                    continue
                tool_use_id = placed.block["tool_use_id"]
                if tool_use_id not in use_ids:
                    raise _invalid(
                        f"messages.{placed.message}.content.{placed.index}: unexpected "
                        f"`tool_use_id` found in `tool_result` blocks: {tool_use_id}. Each "
                        "`tool_result` block must have a corresponding `tool_use` block in the "
                        "previous message."
                    )
                if tool_use_id in results_seen:
                    raise _invalid(
                        f"messages.{placed.message}.content.{placed.index}: each tool_use must "
                        "have a single result. Found multiple `tool_result` blocks with id: "
                        f"{tool_use_id}"
                    )
                results_seen.add(tool_use_id)


def count_cache_breakpoints(body: Mapping[str, Any]) -> int:
    """Blocks carrying `cache_control` (plus one for the top-level automatic breakpoint)."""

    def marked(block: object) -> bool:
        return isinstance(block, Mapping) and block.get("cache_control") is not None

    count = 1 if body.get("cache_control") is not None else 0
    count += sum(1 for tool in body.get("tools") or [] if marked(tool))
    system = body.get("system")
    if isinstance(system, list):
        count += sum(1 for block in system if marked(block))
    for message in body["messages"]:
        for block in _blocks_of(message):
            count += 1 if marked(block) else 0
            if block.get("type") == "tool_result" and isinstance(block.get("content"), list):
                count += sum(1 for item in block["content"] if marked(item))
    return count


def _loop_opener(turns: Sequence[_Turn]) -> int | None:
    """Index of the assistant turn that opened the latest tool loop, if one is in progress."""

    def is_results(turn: _Turn) -> bool:
        return turn.role == "user" and bool(turn.blocks) and turn.blocks[0].type == "tool_result"

    t = len(turns) - 1
    if t < 1 or not is_results(turns[t]):
        return None
    opener = t - 1
    while opener - 2 >= 0 and is_results(turns[opener - 1]):
        opener -= 2
    return opener


def _check_thinking(
    turns: Sequence[_Turn], *, thinking_type: str | None, signature_checker: SignatureChecker | None
) -> None:
    if thinking_type == "enabled":
        opener = _loop_opener(turns)
        if opener is not None and turns[opener].blocks:
            first = turns[opener].blocks[0]
            if first.type not in ("thinking", "redacted_thinking"):
                raise _invalid(
                    f"messages.{first.message}.content.{first.index}.type: Expected `thinking` or "
                    f"`redacted_thinking`, but found `{first.type}`. When `thinking` is enabled, "
                    "a final `assistant` message must start with a thinking block (preceeding the "
                    "lastmost set of `tool_use` and `tool_result` blocks). We recommend you "
                    "include thinking blocks from previous turns. To avoid this requirement, "
                    f"disable `thinking`. Please consult our documentation at {THINKING_DOCS_URL}"
                )
    if signature_checker is None:
        return
    assistant_turns = [t for t in turns if t.role == "assistant"]
    for turn in assistant_turns:
        latest = turn is assistant_turns[-1]
        for placed in turn.blocks:
            if placed.type != "thinking":
                continue
            if signature_checker(placed.block["thinking"], placed.block["signature"]):
                continue
            if latest:
                raise _invalid(
                    f"{placed.path}: `thinking` or `redacted_thinking` blocks in the latest "
                    "assistant message cannot be modified. These blocks must remain as they "
                    "were in the original response."
                )
            raise _invalid(f"{placed.path}: Invalid `signature` in `thinking` block")


# --------------------------------------------------------------------------------------------
# Entry points


def validate_request(
    body: object,
    *,
    allow_prefill: bool = False,
    allow_split_results: bool = False,
    signature_checker: SignatureChecker | None = None,
    count_tokens: bool = False,
    require_model: bool = True,
) -> None:
    """Raise `WireError` (400, invalid_request_error) for the first rule `body` breaks.

    `count_tokens=True` applies the `/v1/messages/count_tokens` body shape (no `max_tokens`,
    no `stream`); `require_model=False` is for Bedrock bodies, where the model is in the path.
    """
    if not isinstance(body, Mapping):
        raise _invalid("Input should be a valid dictionary")  # judged
    _check_shape(body, count_tokens=count_tokens, require_model=require_model)
    _check_parameters(body, count_tokens=count_tokens)
    thinking_type = _thinking_type(body)
    messages: list[Mapping[str, Any]] = body["messages"]
    _check_message_basics(messages, allow_prefill=allow_prefill, thinking_type=thinking_type)
    turns = _merge(messages)
    _check_tool_pairing(turns, allow_split_results=allow_split_results)
    found = count_cache_breakpoints(body)
    if found > MAX_CACHE_BREAKPOINTS:
        raise _invalid(
            f"A maximum of {MAX_CACHE_BREAKPOINTS} blocks with cache_control may be provided. "
            f"Found {found}."
        )
    _check_thinking(turns, thinking_type=thinking_type, signature_checker=signature_checker)


def _malformed(detail: str) -> WireError:
    return WireError(
        400,
        "ValidationException",
        f"Malformed input request: {detail}, please reformat your input and try again.",
    )


_BEDROCK_TOOL_TYPES = ("bash_20250124", "custom", "text_editor_20250124")
_BEDROCK_BLOCK_TYPES = tuple(
    t for t in BLOCK_TYPES if t not in ("server_tool_use", "web_search_tool_result")
)


def _check_bedrock_features(body: Mapping[str, Any]) -> None:
    """What Bedrock lacks: the API's server tools (the hosted web search). Its tool and its
    blocks are refused with the tag error Bedrock answers (the tool's wording as reported
    for `AnthropicBedrock`; the blocks' judged alike)."""
    tools = body.get("tools")
    if isinstance(tools, list):
        for i, tool in enumerate(tools):
            if isinstance(tool, Mapping) and tool.get("type") not in (None, *_BEDROCK_TOOL_TYPES):
                raise WireError(
                    400,
                    "ValidationException",
                    _tag_error(f"tools.{i}", tool.get("type"), _BEDROCK_TOOL_TYPES).message,
                )
    messages = body.get("messages")
    if isinstance(messages, list):
        for n, message in enumerate(messages):
            content = message.get("content") if isinstance(message, Mapping) else None
            if not isinstance(content, list):
                continue
            for m, block in enumerate(content):
                kind = block.get("type") if isinstance(block, Mapping) else None
                if kind in ("server_tool_use", "web_search_tool_result"):
                    path = f"messages.{n}.content.{m}"
                    raise WireError(
                        400,
                        "ValidationException",
                        _tag_error(path, kind, _BEDROCK_BLOCK_TYPES).message,
                    )


def validate_bedrock_body(
    body: object,
    *,
    allow_prefill: bool = False,
    allow_split_results: bool = False,
    signature_checker: SignatureChecker | None = None,
) -> None:
    """Bedrock `invoke-with-response-stream` body rules, then the Messages rules.

    Raises `WireError(400, "ValidationException", message)`: Bedrock reports every body error
    as a ValidationException (`x-amzn-errortype`), with the Messages rule's text unchanged.
    """
    if not isinstance(body, Mapping):
        raise _malformed("#: expected type: JSONObject")  # judged
    for key in ("model", "stream"):
        if key in body:
            raise _malformed(f"#: extraneous key [{key}] is not permitted")
    if "anthropic_version" not in body:
        raise _malformed("#: required key [anthropic_version] not found")
    version = body["anthropic_version"]
    if version not in BEDROCK_ANTHROPIC_VERSIONS:  # judged
        raise _malformed(f"#/anthropic_version: {version!r} is not a supported version")
    _check_bedrock_features(body)
    rest = {k: v for k, v in body.items() if k not in _BEDROCK_EXTRA_KEYS}
    try:
        validate_request(
            rest,
            allow_prefill=allow_prefill,
            allow_split_results=allow_split_results,
            signature_checker=signature_checker,
            require_model=False,
        )
    except WireError as err:
        raise WireError(400, "ValidationException", err.message) from None
