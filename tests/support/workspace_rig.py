"""The rig of the checkpoint, rewind and fork tests: a workspace and a state directory on disk,
the real `defect acp` process against the strict fake Anthropic API, and the auditor's reads
(the session database read-only, the blob store, the workspace byte by byte).

Used by `tests/test_rewind.py` and `tests/test_fork.py`.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from defect_fakeapi import DEFAULT_API_KEY, FakeProvider, Reply
from tests.support.acp_harness import Agent, RecordingClient, agent_env, spawn_defect

TIMEOUT = 20.0


class Place:
    def __init__(self, root: Path) -> None:
        self.work = root / "work"
        self.state = root / "state"
        self.work.mkdir()

    def env(self, fake: FakeProvider, **extra: str) -> dict[str, str]:
        return agent_env(
            DEFECT_PROVIDER="anthropic",
            ANTHROPIC_BASE_URL=fake.url,
            ANTHROPIC_API_KEY=DEFAULT_API_KEY,
            DEFECT_STATE_DIR=str(self.state),
            DEFECT_RETRIES="0",
            **extra,
        )

    def rows(self, sql: str, *args: Any) -> list[tuple[Any, ...]]:
        db = self.state / "sessions.sqlite3"
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
            return conn.execute(sql, args).fetchall()

    def blobs(self) -> list[Path]:
        return sorted(p for p in (self.state / "checkpoints" / "blobs").rglob("*") if p.is_file())


def git(work: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=work,
        check=True,
        capture_output=True,
    )


def snapshot(work: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(work)): p.read_bytes()
        for p in sorted(work.rglob("*"))
        if p.is_file() and ".git" not in p.parts
    }


@contextlib.asynccontextmanager
async def running(
    place: Place,
    *replies: Reply,
    client: RecordingClient | None = None,
    env: dict[str, str] | None = None,
) -> AsyncIterator[tuple[Agent, FakeProvider]]:
    """A fresh `defect acp` process on the place's state directory, initialized, its fake API
    scripted with `replies` (extra environment: `env`)."""
    async with FakeProvider() as fake:
        fake.enqueue(*replies)
        async with spawn_defect(
            env=place.env(fake, **(env or {})), client=client or RecordingClient()
        ) as agent:
            await agent.initialize()
            yield agent, fake


async def new_session(agent: Agent, place: Place) -> str:
    session_id = await agent.new_session(place.work)
    await agent.conn.set_session_mode(session_id=session_id, mode_id="yolo")
    return session_id


async def say(agent: Agent, session_id: str, text: str) -> str:
    """Prompt once; the text the agent answered with in that turn."""
    before = len(agent.client.text(session_id))
    response = await asyncio.wait_for(agent.prompt(session_id, text), TIMEOUT)
    assert response.stop_reason == "end_turn"
    return agent.client.text(session_id)[before:]


def accepted(fake: FakeProvider) -> list[Any]:
    """Every request the fake API got, each checked valid (the strict fake rejects a request
    the real API would refuse); the model requests."""
    for r in fake.requests:
        assert r.done.is_set() and not r.rejected, f"request #{r.index}: {r.error_message}"
    return [r for r in fake.requests if r.route == "anthropic"]


async def load(agent: Agent, place: Place, session_id: str) -> None:
    await asyncio.wait_for(
        agent.conn.load_session(cwd=str(place.work), session_id=session_id, mcp_servers=[]),
        TIMEOUT,
    )
