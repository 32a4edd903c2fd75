"""The fake Chat Completions server's automatic prefix cache (`defect_fakeapi/chat_cache.py`).

What a server's cache reads: the longest prefix of whole messages an earlier request to the
same model sent, from 1,024 tokens on and in steps of 128, never past its lifetime; and what
the client sees of it (`prompt_tokens_details.cached_tokens`) through the real `openai` SDK.
"""

from __future__ import annotations

from typing import Any

import openai

from defect_fakeapi import ChatPrefixCache, FakeProvider, Reply
from defect_fakeapi.chat_cache import least_chat_reads, prompt_prefixes

WORDS = "lorem ipsum dolor sit amet " * 60  # about 400 tokens a message


def body(turns: int, model: str = "tiny-coder") -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "be brief " + WORDS}]
    for n in range(turns):
        messages.append({"role": "user", "content": f"question {n} {WORDS}"})
        messages.append({"role": "assistant", "content": f"answer {n} {WORDS}"})
    messages.append({"role": "user", "content": "and now?"})
    return {"model": model, "messages": messages}


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_longer_request_reads_the_earlier_prompt_in_steps() -> None:
    cache = ChatPrefixCache()
    first = cache.account(body(2))
    assert first.cache_read_input_tokens == 0 and first.input_tokens > 1024
    second = cache.account(body(3))
    seen = prompt_prefixes(body(2))[-2][1]  # the earlier prompt but its last message
    assert second.cache_read_input_tokens == cache.rounded(seen)
    assert 0 < seen - second.cache_read_input_tokens < 128
    assert (second.cache_read_input_tokens - 1024) % 128 == 0
    assert second.cache_creation_input_tokens == 0  # a write costs nothing extra


def test_no_hit_under_the_minimum_for_another_model_or_after_the_lifetime() -> None:
    clock = Clock()
    cache = ChatPrefixCache(ttl=300, clock=clock)
    short = {"model": "tiny-coder", "messages": [{"role": "user", "content": "hi"}]}
    cache.account(short)
    assert cache.account(short).cache_read_input_tokens == 0  # under 1,024 tokens
    cache.account(body(2))
    assert cache.account(body(3, model="tiny-reasoner")).cache_read_input_tokens == 0
    clock.now = 299
    assert cache.account(body(3)).cache_read_input_tokens > 0  # a hit renews the entry
    clock.now = 299 + 301
    assert cache.account(body(4)).cache_read_input_tokens == 0


def test_the_floor_reads_the_longest_earlier_prefix_of_its_model() -> None:
    bodies = [body(1), body(2), body(2, model="tiny-reasoner"), body(3)]
    reads = least_chat_reads(bodies)
    assert reads[0] == 0 and reads[2] == 0
    assert reads[1] == prompt_prefixes(body(1))[-2][1]
    assert reads[3] == prompt_prefixes(body(2))[-2][1]


def test_the_client_sees_the_cached_tokens_of_the_prefix() -> None:
    with FakeProvider() as fake:
        fake.chat_prompt_cache = ChatPrefixCache()
        fake.enqueue(Reply.text("one"), Reply.text("two"))
        client = openai.OpenAI(base_url=f"{fake.url}/v1", api_key=fake.api_key, max_retries=0)
        usages = [client.chat.completions.create(**body(turns)).usage for turns in (2, 3)]
    first, second = usages
    assert first is not None and second is not None
    assert first.prompt_tokens_details is not None and second.prompt_tokens_details is not None
    assert first.prompt_tokens_details.cached_tokens == 0
    cached = second.prompt_tokens_details.cached_tokens
    assert cached == fake.requests[1].cache_usage.cache_read_input_tokens  # type: ignore[union-attr]
    assert 1024 <= (cached or 0) < second.prompt_tokens
