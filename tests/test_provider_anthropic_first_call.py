"""What the first call of a process waits for: the SDK client built ahead of need, in the
preload thread, and who may use it; and the live model listing, which must not go first.

`defect_core/providers/anthropic/client.py` builds the Anthropic API client for the start-up
settings as soon as the SDK is loaded (`prebuild_client`), so the first prompt does not wait
for its HTTP client and SSL context. These tests drive the real SDK over HTTP against the
strict fake API on 127.0.0.1 and pin who gets that client: the first provider whose settings
and key would build the very same one, once; a provider whose configuration or key changed
builds a fresh one, and its requests carry what is configured now. The listing
(`GET /v1/models`, started in the background when a session opens) waits until the streams
under way have handed out their first chunk, so the first request leaves first.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from defect_core.config import Settings
from defect_core.model import Message, TextBlock
from defect_core.providers.anthropic import anthropic_provider, client
from defect_core.providers.anthropic.provider import AnthropicProvider
from defect_core.providers.base import Completed, ModelRequest
from defect_fakeapi import DEFAULT_API_KEY, FakeProvider, Reply, RequestRecord

pytestmark = pytest.mark.anyio

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in list(os.environ):
        if name.startswith(("ANTHROPIC_", "AWS_", "DEFECT_")):
            monkeypatch.delenv(name, raising=False)
    client.take_prebuilt_client(Settings(), "")  # nothing left over from another test
    yield
    client.take_prebuilt_client(Settings(), "")


@pytest.fixture
async def opened() -> AsyncIterator[list[AnthropicProvider]]:
    providers: list[AnthropicProvider] = []
    yield providers
    for provider in providers:
        await provider.aclose()


def settings_for(fake: FakeProvider, **overrides: Any) -> Settings:
    fields: dict[str, Any] = {"provider": "anthropic", "base_url": fake.url, "read_timeout": 5.0}
    return Settings(**{**fields, **overrides})


async def one_call(provider: AnthropicProvider) -> str:
    request = ModelRequest(
        model=provider.default_model(),
        system="You are a test.",
        messages=[Message(role="user", content=(TextBlock(text="hello"),))],
        tools=(),
        max_tokens=256,
    )
    chunks = [chunk async for chunk in provider.stream(request)]
    last = chunks[-1]
    assert isinstance(last, Completed)
    return last.message.text()


def prebuilt_now() -> Any:
    """The client `prebuild_client` just built (looked at, not taken)."""
    assert client._prebuilt is not None, "nothing was built ahead"
    return client._prebuilt[1]


async def test_the_client_built_ahead_is_the_one_the_first_request_uses(
    fake_provider: FakeProvider, opened: list[AnthropicProvider], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", DEFAULT_API_KEY)
    fake_provider.enqueue(Reply.text("first"), Reply.text("second"))
    settings = settings_for(fake_provider)
    client.import_sdk()
    client.prebuild_client(settings)
    built = prebuilt_now()

    provider = anthropic_provider(settings)
    opened.append(provider)
    assert await one_call(provider) == "first"
    assert provider._client is built
    assert client._prebuilt is None  # taken: nobody else gets it

    other = anthropic_provider(settings)  # same settings, built later: a client of its own
    opened.append(other)
    assert await one_call(other) == "second"
    assert other._client is not None and other._client is not built
    sent = [r.headers["authorization"] for r in fake_provider.requests]
    assert sent == [f"Bearer {DEFAULT_API_KEY}"] * 2


async def test_a_changed_configuration_gets_a_fresh_client(
    fake_provider: FakeProvider, opened: list[AnthropicProvider], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", DEFAULT_API_KEY)
    fake_provider.enqueue(Reply.text("changed"))
    client.import_sdk()
    client.prebuild_client(settings_for(fake_provider))
    built = prebuilt_now()

    provider = anthropic_provider(settings_for(fake_provider, read_timeout=7.0))
    opened.append(provider)
    assert await one_call(provider) == "changed"
    assert provider._client is not built
    assert provider._client.timeout.read == 7.0
    assert client._prebuilt is None  # a client that does not fit is dropped, not kept


async def test_a_key_changed_since_start_up_gets_a_fresh_client(
    fake_provider: FakeProvider, opened: list[AnthropicProvider], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-the-key-at-start-up")
    settings = settings_for(fake_provider)
    client.import_sdk()
    client.prebuild_client(settings)
    built = prebuilt_now()

    monkeypatch.setenv("ANTHROPIC_API_KEY", DEFAULT_API_KEY)  # the only key the fake accepts
    fake_provider.enqueue(Reply.text("accepted"))
    provider = anthropic_provider(settings)
    opened.append(provider)
    assert await one_call(provider) == "accepted"
    assert provider._client is not built
    assert fake_provider.requests[-1].headers["authorization"] == f"Bearer {DEFAULT_API_KEY}"


async def test_without_a_key_nothing_is_built_ahead(fake_provider: FakeProvider) -> None:
    client.import_sdk()
    client.prebuild_client(settings_for(fake_provider))  # does not raise
    assert client._prebuilt is None


# What `defect acp` does at start-up (`cli._preload_provider_sdk`), in a fresh interpreter:
# warm the provider, let the preload finish, then make the first call.
WARM_THEN_CALL = textwrap.dedent(
    """
    import asyncio, json, sys
    from defect_core.config import Settings
    from defect_core.model import Message, TextBlock
    from defect_core.providers.anthropic import client
    from defect_core.providers.anthropic.provider import AnthropicProvider
    from defect_core.providers.base import Completed, ModelRequest

    route, url = sys.argv[1], sys.argv[2]
    settings = Settings(provider=route, base_url=url, bedrock_base_url=url)
    provider = AnthropicProvider(settings, route=route)
    provider.warm()
    assert client._preload is not None and client._preload.wait(60)
    assert client._preload.error is None, client._preload.error
    built = client._prebuilt[1] if client._prebuilt is not None else None

    async def main():
        request = ModelRequest(
            model=provider.default_model(), system="s",
            messages=[Message(role="user", content=(TextBlock(text="hi"),))], max_tokens=64,
        )
        chunks = [c async for c in provider.stream(request)]
        assert isinstance(chunks[-1], Completed)
        used = provider._client
        await provider.aclose()
        return chunks[-1].message.text(), used

    text, used = asyncio.run(main())
    print(json.dumps({"text": text, "built": built is not None, "used": used is built}))
    """
)


def warm_then_call(fake: FakeProvider, route: str, env: dict[str, str]) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", WARM_THEN_CALL, route, fake.url],
        env={**os.environ, "PYTHONPATH": str(REPO), **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_warming_builds_the_client_the_first_call_then_uses(fake_provider: FakeProvider) -> None:
    fake_provider.enqueue(Reply.text("warm"))
    result = warm_then_call(fake_provider, "anthropic", {"ANTHROPIC_API_KEY": DEFAULT_API_KEY})
    assert result == {"text": "warm", "built": True, "used": True}
    assert len(fake_provider.requests) == 1


def test_warming_for_bedrock_builds_no_client_ahead(fake_provider: FakeProvider) -> None:
    from defect_fakeapi import DEFAULT_AWS_ACCESS_KEY_ID, DEFAULT_AWS_SECRET_KEY

    fake_provider.enqueue(Reply.text("signed"))
    env = {
        "AWS_ACCESS_KEY_ID": DEFAULT_AWS_ACCESS_KEY_ID,
        "AWS_SECRET_ACCESS_KEY": DEFAULT_AWS_SECRET_KEY,
        "AWS_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",
        "ANTHROPIC_API_KEY": DEFAULT_API_KEY,  # present, yet not the Bedrock route's business
    }
    result = warm_then_call(fake_provider, "bedrock", env)
    assert result == {"text": "signed", "built": False, "used": False}


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
