"""pytest fixtures for the strict fake provider.

Owns: `fake_provider` (a started `FakeProvider`, stopped after the test) and the client
settings that go with it (`fake_api_key`, `fake_aws_credentials`).

Invariant: every test gets its own server, on its own ephemeral port, with an empty script;
nothing leaks between tests, and the server is stopped (stalls included) at teardown.

Why: one fixture keeps every test's network edge identical; load it from `tests/conftest.py`
with `pytest_plugins = ("tests.support.fixtures",)`.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from defect_fakeapi import (
    DEFAULT_API_KEY,
    DEFAULT_AWS_ACCESS_KEY_ID,
    DEFAULT_AWS_SECRET_KEY,
    FakeProvider,
)


@pytest.fixture
def fake_provider() -> Iterator[FakeProvider]:
    """A started fake Anthropic/Bedrock endpoint; point clients at `fake_provider.url`."""
    with FakeProvider() as provider:
        yield provider


@pytest.fixture
def fake_api_key() -> str:
    """The API key `fake_provider` accepts."""
    return DEFAULT_API_KEY


@pytest.fixture
def fake_aws_credentials() -> dict[str, str]:
    """Keyword arguments for `AsyncAnthropicBedrock` that `fake_provider` accepts."""
    return {
        "aws_access_key": DEFAULT_AWS_ACCESS_KEY_ID,
        "aws_secret_key": DEFAULT_AWS_SECRET_KEY,
        "aws_region": "us-east-1",
    }
