"""The Messages request body: what one model call sends, on either route.

Owns `encode_request` (a `ModelRequest` as the body of `POST /v1/messages`, without `stream`):
the messages (their content translated by `providers/anthropic_wire.py`), the tools, the
system prompt, the cache breakpoints and the thinking budget; and `route_options`, what the
Bedrock route adds around that same body.

Invariants:
- The request is `ModelRequest.messages` (already `repair_outbound`-ed by the runner) encoded by
  `anthropic_wire`, and nothing else: no repair, no reordering here (docs/architecture.md, rule 3).
- Pure: the same request gives the same body; no SDK, no I/O (the strict fake API in the tests
  checks exactly what goes out).
- At most 4 `cache_control` breakpoints: the last tool, the system prompt, and the last
  cacheable block of the last two user messages (never a thinking block). When the second
  of those is within the API's 20-block look-back of the first (it then reads nothing the
  first would not), it goes instead on the last cacheable block before
  `ModelRequest.cache_anchor`, where the history will next be rewritten (a micro-compaction's
  first cleared result): that prefix stays cached, and the request after the rewrite reads it.
- When the messages extend the last prompt this provider sent in the conversation (`seen`:
  its length, from `last_sent.py`) and no message breakpoint's look-back reaches the
  breakpoint that prompt ended on (another provider answered the turns in between), the
  second message breakpoint goes there instead: the first request back reads what the
  provider cached before the switch. Within reach, nothing moves (a session that never
  switches sends the body it always did).
- The hosted web search (`ModelRequest.web_search`) is the last tool, after the client tools:
  its bytes depend on the configuration only, so it never moves nor changes within a session,
  the last-tool breakpoint sits on it, and the cached prefix (tools → system → messages)
  stays the same request after request.
- Thinking is sent only within the API's bounds, and never for a tool loop the API would
  refuse with it (one opened by an assistant message without a thinking block).

Why apart from the stream: the body is decided before the call and tested as data. Tools the
server runs itself (`web_search_20250305`) are request options and belong here, next to the
client-side tool list they are appended to.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from defect_core.log import get_logger
from defect_core.model import Message, RedactedThinkingBlock, ThinkingBlock
from defect_core.providers.anthropic.catalog import Route
from defect_core.providers.anthropic_wire import encode_messages
from defect_core.providers.base import HostedWebSearch, ModelRequest

__all__ = [
    "BEDROCK_ANTHROPIC_VERSION",
    "MAX_CACHE_BREAKPOINTS",
    "WEB_SEARCH_TOOL_TYPE",
    "cache_key",
    "encode_request",
    "route_options",
    "web_search_tool",
]

log = get_logger("defect.provider")

BEDROCK_ANTHROPIC_VERSION = "bedrock-2023-05-31"
"""SDK 2.10-2.12 put "2026-10-21" in Bedrock bodies; Bedrock documents this value."""
MAX_CACHE_BREAKPOINTS = 4
MESSAGE_BREAKPOINTS = 2
LOOKBACK_BLOCKS = 20
"""The API looks for a cached prefix at a breakpoint and at most 19 block boundaries before."""
MIN_THINKING_BUDGET = 1024
EPHEMERAL: dict[str, str] = {"type": "ephemeral"}
WEB_SEARCH_TOOL_TYPE = "web_search_20250305"
_CACHEABLE = frozenset({"text", "image", "document", "tool_use", "tool_result"})


def encode_request(request: ModelRequest, *, seen: int | None = None) -> dict[str, Any]:
    """The Messages body for `request` (without `stream`): wire messages, tools, system,
    cache breakpoints (≤ 4) and thinking. Pure: the same request gives the same body.
    `seen`: how many leading messages the last prompt sent in this conversation under the
    same `cache_key` was (`last_sent.LastSent.seen_until`), or None."""
    body: dict[str, Any] = {
        "model": request.model,
        "max_tokens": request.max_tokens,
        "messages": encode_messages(request.messages),
    }
    breakpoints = 0
    tools: list[dict[str, Any]] = [
        {"name": t.name, "description": t.description, "input_schema": t.input_schema}
        for t in request.tools
    ]
    if request.web_search is not None:
        tools.append(web_search_tool(request.web_search))
    if tools:
        tools[-1]["cache_control"] = dict(EPHEMERAL)
        breakpoints += 1
        body["tools"] = tools
    if request.system.strip():
        body["system"] = [
            {"type": "text", "text": request.system, "cache_control": dict(EPHEMERAL)}
        ]
        breakpoints += 1
    _mark_messages(
        body["messages"],
        min(MESSAGE_BREAKPOINTS, MAX_CACHE_BREAKPOINTS - breakpoints),
        request.cache_anchor,
        seen,
    )
    budget = _thinking_budget(request)
    if budget is not None:
        body["thinking"] = {"type": "enabled", "budget_tokens": budget}
    return body


def web_search_tool(search: HostedWebSearch) -> dict[str, Any]:
    """The API's web search tool definition (the API refuses both domain lists at once; the
    configuration refuses them before)."""
    tool: dict[str, Any] = {
        "type": WEB_SEARCH_TOOL_TYPE,
        "name": "web_search",
        "max_uses": search.max_uses,
    }
    if search.allowed_domains:
        tool["allowed_domains"] = list(search.allowed_domains)
    elif search.blocked_domains:
        tool["blocked_domains"] = list(search.blocked_domains)
    return tool


def cache_key(request: ModelRequest) -> tuple[str, int | None]:
    """What keys the cached messages of `request` besides their content: the model and the
    thinking budget sent (the API's cache is per model, and thinking keys the messages)."""
    return (request.model, _thinking_budget(request))


def route_options(route: Route) -> dict[str, Any]:
    """Keyword arguments for the SDK's `messages.create` beyond the body, per route."""
    if route == "bedrock":
        return {"extra_body": {"anthropic_version": BEDROCK_ANTHROPIC_VERSION}}
    return {}


Spot = tuple[int, int]
"""A content block: (message index, block index)."""


def _mark_messages(
    messages: list[dict[str, Any]], count: int, anchor: int | None, seen: int | None = None
) -> None:
    """Put a breakpoint on the last cacheable block of each of the last `count` user messages:
    the newest caches the whole prompt for the next request; the one before re-reads what the
    previous request cached, even when the new turn added more than the 20-block look-back.
    When the newest's look-back reaches that one anyway, the second breakpoint marks the last
    cacheable block before message `anchor` instead: each request keeps that prefix cached,
    and the one after a rewrite from `anchor` on reads it instead of writing it again.
    Last, the breakpoint the provider's last prompt in the conversation ended on (its first
    `seen` messages) takes the second place when no breakpoint's look-back reaches it."""
    spots = _latest_user_spots(messages, count)
    before = _spot_before(messages, anchor) if anchor is not None else None
    if before is not None and len(spots) == 2 and before < spots[0]:
        offsets = _block_offsets(messages)
        newest, previous = (offsets[m] + b for m, b in spots)
        if newest - previous < LOOKBACK_BLOCKS:
            spots[1] = before
    if seen is not None:
        _resume_at(messages, spots, count, seen)
    for message_index, block_index in spots:
        content = messages[message_index]["content"]
        content[block_index] = {**content[block_index], "cache_control": dict(EPHEMERAL)}


def _resume_at(messages: list[dict[str, Any]], spots: list[Spot], count: int, seen: int) -> None:
    """Make the second of `spots` the breakpoint the prompt of the first `seen` messages ended
    on (its last user message's last cacheable block), unless a spot's look-back reaches it."""
    ended = _latest_user_spots(messages[:seen], 1)
    if not ended or ended[0] in spots:
        return
    offsets = _block_offsets(messages)
    target = offsets[ended[0][0]] + ended[0][1]
    if any(0 <= offsets[m] + b - target < LOOKBACK_BLOCKS for m, b in spots):
        return
    if len(spots) < count:
        spots.append(ended[0])
    elif len(spots) >= 2:
        spots[1] = ended[0]


def _latest_user_spots(messages: list[dict[str, Any]], count: int) -> list[Spot]:
    """The last cacheable block of each of the last `count` user messages, newest first."""
    spots: list[Spot] = []
    for message_index in range(len(messages) - 1, -1, -1):
        if len(spots) >= count:
            break
        message = messages[message_index]
        if message.get("role") == "user":
            spot = _last_cacheable(messages, message_index)
            if spot is not None:
                spots.append(spot)
    return spots


def _spot_before(messages: list[dict[str, Any]], anchor: int) -> Spot | None:
    """The last cacheable block of the messages before `anchor`, of either role."""
    for message_index in range(min(anchor, len(messages)) - 1, -1, -1):
        spot = _last_cacheable(messages, message_index)
        if spot is not None:
            return spot
    return None


def _last_cacheable(messages: list[dict[str, Any]], message_index: int) -> Spot | None:
    content = messages[message_index].get("content")
    if not isinstance(content, list):
        return None
    for block_index in range(len(content) - 1, -1, -1):
        block = content[block_index]
        if block.get("type") in _CACHEABLE and _has_content(block):
            return (message_index, block_index)
    return None


def _block_offsets(messages: list[dict[str, Any]]) -> list[int]:
    """Each message's first block, counted in content blocks from the first message's."""
    offsets, total = [], 0
    for message in messages:
        offsets.append(total)
        content = message.get("content")
        total += len(content) if isinstance(content, list) else 1
    return offsets


def _has_content(block: Mapping[str, Any]) -> bool:
    return block.get("type") != "text" or bool(str(block.get("text", "")).strip())


def _thinking_budget(request: ModelRequest) -> int | None:
    """The budget to send: within the API's bounds, and off for a request the API would refuse
    with thinking (a tool loop whose opening assistant message has no thinking block - it was
    produced with thinking off, or its unsigned thinking was dropped by the repair)."""
    budget = request.thinking_budget
    if budget is None:
        return None
    budget = min(budget, request.max_tokens - 1)
    if budget < MIN_THINKING_BUDGET:
        return None
    opener = _loop_opener(request.messages)
    if opener is not None:
        first = opener.content[0] if opener.content else None
        if not isinstance(first, ThinkingBlock | RedactedThinkingBlock):
            log.info("thinking_off_for_request", reason="tool loop opened without thinking")
            return None
    return budget


def _loop_opener(messages: list[Message]) -> Message | None:
    """The assistant message that opened the tool loop in progress, if one is."""

    def is_results(message: Message) -> bool:
        return (
            message.role == "user"
            and bool(message.tool_results())
            and bool(message.content)
            and message.content[0].type == "tool_result"
        )

    last = len(messages) - 1
    if last < 1 or not is_results(messages[last]):
        return None
    opener = last - 1
    while opener - 2 >= 0 and is_results(messages[opener - 1]):
        opener -= 2
    candidate = messages[opener]
    return candidate if candidate.role == "assistant" else None
