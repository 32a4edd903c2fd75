"""Shared pytest set-up: async tests run on asyncio through anyio's plugin."""

from __future__ import annotations

import pytest


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


pytest_plugins = ("tests.support.fixtures", "tests.support.config_files")
