"""The fake API's prompt cache: hits, writes and misses the way the real API's would.

Driven with request bodies of the shape defect sends (tools → system → messages, breakpoints
as `cache_control` blocks), a clock the test moves, and once through the real `anthropic` SDK
over HTTP, so the usage the SDK parses is the usage the cost benchmark sums.
"""

from __future__ import annotations

from typing import Any

import anthropic

from defect_fakeapi import DEFAULT_API_KEY, FakeProvider, PromptCache, Reply
from defect_fakeapi.cache import LOOKBACK_BLOCKS, least_usages, minimum_cacheable_tokens

CC = {"type": "ephemeral"}
MODEL = "claude-sonnet-5-5"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def text(t: str, mark: bool = False) -> dict[str, Any]:
    return {"type": "text", "text": t, **({"cache_control": CC} if mark else {})}


def body(turns: int, *, system: str = "S" * 8000, mark_last: bool = True) -> dict[str, Any]:
    """A conversation of `turns` exchanges, with breakpoints on the system and the last block."""
    messages: list[dict[str, Any]] = []
    for n in range(turns):
        messages.append({"role": "user", "content": [text(f"question {n} " + "q" * 400)]})
        messages.append({"role": "assistant", "content": [text(f"answer {n} " + "a" * 400)]})
    messages.append({"role": "user", "content": [text("now " + "n" * 400, mark=mark_last)]})
    return {
        "model": MODEL,
        "max_tokens": 100,
        "tools": [{"name": "read", "description": "d" * 400, "input_schema": {"type": "object"}}],
        "system": [text(system, mark=True)],
        "messages": messages,
    }


def test_a_repeated_prefix_is_written_once_then_read() -> None:
    cache = PromptCache(clock=Clock())
    first = cache.account(body(3), MODEL)
    assert first.cache_read_input_tokens == 0
    assert first.cache_creation_input_tokens == first.total - first.input_tokens > 0
    second = cache.account(body(3), MODEL)
    assert second.cache_read_input_tokens == first.cache_creation_input_tokens
    assert second.cache_creation_input_tokens == 0
    assert second.cost_ratio() < 0.2


def test_an_edited_earlier_message_reads_only_the_prefix_before_it() -> None:
    cache = PromptCache(clock=Clock())
    system_only = cache.account(body(0, mark_last=False), MODEL).cache_creation_input_tokens
    cache.account(body(3), MODEL)
    edited = body(3)
    edited["messages"][1]["content"][0]["text"] = "a different first answer"
    usage = cache.account(edited, MODEL)
    assert usage.cache_read_input_tokens == system_only
    assert usage.cache_creation_input_tokens > 0


def test_appending_after_the_breakpoint_reads_everything_before_it() -> None:
    cache = PromptCache(clock=Clock())
    base = body(2)
    written = cache.account(base, MODEL).cache_creation_input_tokens
    longer = body(2)
    longer["messages"][-1]["content"][0].pop("cache_control")
    longer["messages"] += [
        {"role": "assistant", "content": [text("more " + "m" * 400)]},
        {"role": "user", "content": [text("again " + "g" * 400, mark=True)]},
    ]
    usage = cache.account(longer, MODEL)
    assert usage.cache_read_input_tokens == written
    assert usage.cache_creation_input_tokens > 0


def test_the_lookback_reaches_only_twenty_blocks_back() -> None:
    cache = PromptCache(clock=Clock())
    base = body(1)
    after_system = cache.account(base, MODEL)
    far = body(1)
    far["messages"][-1]["content"][0].pop("cache_control")
    for n in range(LOOKBACK_BLOCKS):  # 2 blocks per round: the old breakpoint is 40 back
        far["messages"] += [
            {"role": "assistant", "content": [text(f"a{n}")]},
            {"role": "user", "content": [text(f"u{n}", mark=n == LOOKBACK_BLOCKS - 1)]},
        ]
    usage = cache.account(far, MODEL)
    system_prefix = cache.account(body(0, mark_last=False), MODEL).cache_read_input_tokens
    assert 0 < usage.cache_read_input_tokens == system_prefix
    assert usage.cache_read_input_tokens < after_system.cache_creation_input_tokens


def test_entries_expire_and_hits_refresh_them() -> None:
    clock = Clock()
    cache = PromptCache(clock=clock, ttl=300)
    cache.account(body(1), MODEL)
    clock.now += 299
    assert cache.account(body(1), MODEL).cache_read_input_tokens > 0  # refreshed here
    clock.now += 299
    assert cache.account(body(1), MODEL).cache_read_input_tokens > 0
    clock.now += 301
    assert cache.account(body(1), MODEL).cache_read_input_tokens == 0


def test_model_system_and_thinking_changes_miss_where_the_api_would() -> None:
    cache = PromptCache(clock=Clock())
    full = cache.account(body(2), MODEL).cache_creation_input_tokens
    assert cache.account(body(2), "claude-haiku-5-5").cache_read_input_tokens == 0
    changed_system = cache.account(body(2, system="T" + "S" * 7999), MODEL)
    assert changed_system.cache_read_input_tokens == 0  # the system block is the only earlier bp
    thinking = body(2)
    thinking["thinking"] = {"type": "enabled", "budget_tokens": 2048}
    usage = cache.account(thinking, MODEL)
    assert 0 < usage.cache_read_input_tokens < full  # tools and system still cached


def test_a_short_prefix_is_never_cached() -> None:
    cache = PromptCache(clock=Clock(), min_tokens=1024)
    small = body(0, system="tiny")
    small["tools"] = []
    small["messages"] = [{"role": "user", "content": [text("hi", mark=True)]}]
    assert cache.account(small, MODEL).cache_creation_input_tokens == 0
    assert cache.account(small, MODEL).cache_read_input_tokens == 0


def test_the_minimum_cacheable_length_is_the_models() -> None:
    assert minimum_cacheable_tokens("claude-sonnet-4-5-20250929") == 1024
    assert minimum_cacheable_tokens("claude-opus-4-5-20251101") == 4096
    assert minimum_cacheable_tokens("claude-haiku-4-5-20251001") == 4096
    assert minimum_cacheable_tokens("claude-3-5-haiku-20241022") == 2048
    short = body(3)  # about 2.8k tokens: the system breakpoint alone is about 2.1k
    for model in ("claude-sonnet-4-5-20250929", "claude-opus-4-1"):
        assert PromptCache(clock=Clock()).account(short, model).cache_creation_input_tokens > 0
    haiku = PromptCache(clock=Clock())
    assert haiku.account(short, "claude-haiku-4-5").cache_creation_input_tokens == 0
    assert haiku.account(short, "claude-haiku-4-5").cache_read_input_tokens == 0
    long = haiku.account(body(16), "claude-haiku-4-5")
    assert long.total >= 4096 and long.cache_creation_input_tokens == long.total - long.input_tokens
    again = haiku.account(body(16), "claude-haiku-4-5")
    assert again.cache_read_input_tokens == long.cache_creation_input_tokens
    ruled = PromptCache(clock=Clock(), min_tokens=lambda model: 10**6)
    assert ruled.account(body(16), MODEL).cache_creation_input_tokens == 0


def test_the_lookback_counts_content_blocks_only() -> None:
    """The thinking / tool-choice parameters sit between system and messages but are no block:
    an entry 20 blocks back (the breakpoint's own counted), across that boundary, is found;
    one block further it is not."""

    def request(rounds: int) -> dict[str, Any]:
        far = body(0, mark_last=False)
        far["system"] = [text("S" * 4000), text("T" * 4000)]
        far["messages"] = []
        for n in range(rounds):
            far["messages"] += [
                {"role": "user", "content": [text(f"u{n}", mark=n == rounds - 1)]},
                {"role": "assistant", "content": [text(f"a{n}")]},
            ]
        far["messages"].pop()
        return far

    cache = PromptCache(clock=Clock(), min_tokens=1)
    tools_only = body(0)
    tools_only["tools"][0]["cache_control"] = CC
    del tools_only["system"]
    tools_only["messages"] = [{"role": "user", "content": "hi"}]
    written = cache.account(tools_only, MODEL).cache_creation_input_tokens  # at the last tool
    rounds = LOOKBACK_BLOCKS // 2 - 1  # 2 system blocks + 17 message blocks, then the tool
    assert cache.account(request(rounds), MODEL).cache_read_input_tokens == written > 0
    cache = PromptCache(clock=Clock(), min_tokens=1)
    cache.account(tools_only, MODEL)
    assert cache.account(request(rounds + 1), MODEL).cache_read_input_tokens == 0


def test_automatic_caching_marks_the_last_block() -> None:
    cache = PromptCache(clock=Clock())
    auto = body(2, mark_last=False)
    auto["system"][0].pop("cache_control")
    auto["cache_control"] = CC
    assert cache.account(auto, MODEL).cache_creation_input_tokens > 0
    assert cache.account(auto, MODEL).cache_read_input_tokens > 0


def test_the_least_usages_read_every_shared_prefix_and_write_only_what_is_read_again() -> None:
    """The floor the cost benchmark states: no breakpoints needed, each request reads what any
    earlier one of its model sent, writes what a later one reads, the rest goes uncached."""
    grown, edited = body(4, mark_last=False), body(4, mark_last=False)
    edited["messages"][2]["content"] = [text("an edited question " + "e" * 400)]
    requests = [(body(3, mark_last=False), MODEL), (grown, MODEL), (edited, MODEL)]
    requests.append((body(4), "claude-opus-5-5"))
    first, second, third, other = least_usages(requests)
    assert first.cache_read_input_tokens == 0
    assert 0 < first.input_tokens < first.total, "its last message is never sent again"
    assert second.cache_read_input_tokens == first.cache_creation_input_tokens
    assert second.cache_creation_input_tokens == 0, "the edit shares less than it read"
    assert second.input_tokens == second.total - second.cache_read_input_tokens > 0
    assert third.cache_read_input_tokens < second.cache_read_input_tokens, "up to the edit"
    assert third.cache_creation_input_tokens == 0, "nothing after it reads it"
    assert other.cache_read_input_tokens == 0, "another model shares nothing"
    actual = PromptCache(clock=Clock())
    paid = [actual.account(b, m) for b, m in requests]
    assert sum(u.cost_ratio() * u.total for u in paid) >= sum(
        u.cost_ratio() * u.total for u in (first, second, third, other)
    )


def test_the_sdk_sees_the_simulated_usage_over_http() -> None:
    with FakeProvider(prompt_cache=PromptCache(), default_reply=Reply.text("ok")) as fake:
        client = anthropic.Anthropic(api_key=DEFAULT_API_KEY, base_url=fake.url, max_retries=0)
        request = body(2)
        with client.messages.stream(**request) as stream:
            first = stream.get_final_message()
        with client.messages.stream(**request) as stream:
            second = stream.get_final_message()
    assert first.usage.cache_creation_input_tokens and not first.usage.cache_read_input_tokens
    assert second.usage.cache_read_input_tokens == first.usage.cache_creation_input_tokens
    assert second.usage.input_tokens == first.usage.input_tokens
    assert fake.requests[-1].cache_usage is not None
    assert fake.requests[-1].cache_usage.cache_read_input_tokens == (
        second.usage.cache_read_input_tokens
    )
