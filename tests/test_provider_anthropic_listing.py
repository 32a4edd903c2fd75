"""The live model listing never goes ahead of the first answer.

The listing (`GET /v1/models`) starts in the background as a session opens, just before the
first prompt usually arrives. `defect_core/providers/anthropic/provider.py` makes it wait
until the streams under way have handed out their first chunk, so the first request leaves
first and its first token is not slowed by the listing's request or its import. Driven
through the real SDK over HTTP against the strict fake API on 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anyio
import pytest

from defect_core.config import Settings
from defect_core.model import Message, TextBlock
from defect_core.providers.anthropic import anthropic_provider
from defect_core.providers.anthropic.provider import AnthropicProvider
from defect_core.providers.base import ModelRequest
from defect_fakeapi import DEFAULT_API_KEY, FakeProvider, Reply, RequestRecord

pytestmark = pytest.mark.anyio


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in list(os.environ):
        if name.startswith(("ANTHROPIC_", "AWS_", "DEFECT_")):
            monkeypatch.delenv(name, raising=False)
    yield


@pytest.fixture
async def opened() -> AsyncIterator[list[AnthropicProvider]]:
    providers: list[AnthropicProvider] = []
    yield providers
    for provider in providers:
        await provider.aclose()


def settings_for(fake: FakeProvider, **overrides: Any) -> Settings:
    fields: dict[str, Any] = {"provider": "anthropic", "base_url": fake.url, "read_timeout": 5.0}
    return Settings(**{**fields, **overrides})


async def test_the_listing_waits_until_the_first_answer_has_started(
    fake_provider: FakeProvider, opened: list[AnthropicProvider], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", DEFAULT_API_KEY)
    listings_at_post: list[int] = []
    listings_at_first_chunk: list[int] = []

    def answer(record: RequestRecord) -> Reply:
        listings_at_post.append(len(fake_provider.listings))
        # Give a listing that does not wait every chance to overtake the first answer.
        with contextlib.suppress(TimeoutError):
            fake_provider.wait_for_listings(1, timeout=0.5, answered=False)
        return Reply.text("first answer")

    fake_provider.enqueue(answer)
    provider = anthropic_provider(settings_for(fake_provider))
    opened.append(provider)
    listed: list[str] = []
    request = ModelRequest(
        model=provider.default_model(),
        system="You are a test.",
        messages=[Message(role="user", content=(TextBlock(text="hello"),))],
        max_tokens=256,
    )

    async def listing() -> None:
        listed.extend(model.id for model in await provider.list_models())

    async def prompt() -> None:
        async for _chunk in provider.stream(request):
            if not listings_at_first_chunk:
                listings_at_first_chunk.append(len(fake_provider.listings))

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(listing)  # first, as after session/new: it takes the client first
        tasks.start_soon(prompt)
    assert listings_at_post == [0]  # the model call went out before the listing
    assert listings_at_first_chunk == [0]  # and its first chunk came back before it
    assert len(fake_provider.listings) == 1 and listed  # the listing still happened, whole
