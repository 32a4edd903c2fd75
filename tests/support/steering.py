"""What the steering tests share: a gated fake model, the steer request, the waits on the
agent's wire, and the environments of the two wires (tests/test_acp_steering*.py)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

from defect_fakeapi import DEFAULT_API_KEY, FakeProvider, Reply, RequestRecord
from tests.support.acp_harness import Agent, agent_env

Json = dict[str, Any]

TIMEOUT = 15.0
CHAT_KEY = "sk-local-test-key"


def gated(reply: Reply, gate: threading.Event) -> Callable[[RequestRecord], Reply]:
    """`reply`, once the test sets `gate` (the request is recorded, its answer held)."""

    def respond(_: RequestRecord) -> Reply:
        assert gate.wait(TIMEOUT), "the test never released the reply"
        return reply

    return respond


def model_calls(fake: FakeProvider) -> list[RequestRecord]:
    return [r for r in fake.requests if r.route in ("anthropic", "chat")]


async def wait_calls(fake: FakeProvider, count: int) -> list[RequestRecord]:
    def enough(records: list[RequestRecord]) -> bool:
        return len([r for r in records if r.route in ("anthropic", "chat")]) >= count

    await anyio.to_thread.run_sync(lambda: fake.wait_until(enough, TIMEOUT))
    return model_calls(fake)


def assert_all_accepted(fake: FakeProvider) -> None:
    for r in model_calls(fake):
        assert r.done.wait(TIMEOUT), f"request #{r.index} still in flight"
        assert not r.rejected, f"request #{r.index} rejected: {r.error_message}"


async def steer(agent: Agent, session_id: str, text: str, **meta: Any) -> dict[str, Any]:
    params: dict[str, Any] = {
        "sessionId": session_id,
        "prompt": [{"type": "text", "text": text}],
    }
    if meta:
        params["_meta"] = meta
    result: dict[str, Any] = await agent.conn.ext_method("session/steering", params)
    return result


def waiting_command(flag: Path) -> Reply:
    """A reply calling `bash` with a command that runs until the test writes `flag`."""
    command = f"echo started; while [ ! -f {flag} ]; do sleep 0.02; done; echo partial-and-done"
    return Reply.tool_use(None, "bash", {"command": command})


async def wait_in_progress(agent: Agent) -> None:
    def running() -> bool:
        return any(
            getattr(u, "session_update", "") == "tool_call_update"
            and getattr(u, "status", None) == "in_progress"
            for _, u in agent.client.updates
        )

    await agent.client.wait_for(running, TIMEOUT)


async def wait_turn_ended(agent: Agent, count: int) -> None:
    """Wait for the `count`th end of a turn a steer started (`_meta.steering.turnEnded`)."""

    def ended() -> bool:
        return (
            sum(
                1
                for _, u in agent.client.updates
                if u.session_update == "session_info_update"
                and (u.field_meta or {}).get("steering", {}).get("turnEnded")
            )
            >= count
        )

    await agent.client.wait_for(ended, TIMEOUT)


def user_chunks(agent: Agent) -> list[str]:
    return [
        u.content.text
        for _, u in agent.client.updates
        if u.session_update == "user_message_chunk" and hasattr(u.content, "text")
    ]


def anthropic_env(tmp_path: Path, fake: FakeProvider, **extra: str) -> dict[str, str]:
    return agent_env(
        DEFECT_PROVIDER="anthropic",
        ANTHROPIC_BASE_URL=fake.url,
        ANTHROPIC_API_KEY=DEFAULT_API_KEY,
        DEFECT_STATE_DIR=str(tmp_path / "state"),
        DEFECT_RETRIES="0",
        **extra,
    )


def chat_env(tmp_path: Path, fake: FakeProvider) -> dict[str, str]:
    config = tmp_path / "xdg" / "defect" / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(
        'provider = "local"\n\n'
        f'[providers.local]\nkind = "openai"\nbase_url = "{fake.url}/v1"\n'
        'api_key_env = "LOCAL_KEY"\nmodels = ["tiny-coder"]\n'
    )
    return agent_env(
        LOCAL_KEY=CHAT_KEY,
        DEFECT_STATE_DIR=str(tmp_path / "state"),
        XDG_CONFIG_HOME=str(tmp_path / "xdg"),
        DEFECT_RETRIES="0",
    )


def texts_of(content: Any) -> list[str]:
    if isinstance(content, str):
        return [content]
    return [b["text"] for b in content if b.get("type") == "text"]


def replayed(agent: Agent, method: str = "session/load") -> list[Json]:
    """The updates written between the last `method` request and its answer."""
    messages = agent.wire.messages
    request = [m for d, m in messages if d == "client" and m.get("method") == method][-1]
    start = next(i for i, (d, m) in enumerate(messages) if m is request)
    out: list[Json] = []
    for direction, message in messages[start + 1 :]:
        if direction != "agent":
            continue
        if message.get("id") == request["id"] and "method" not in message:
            return out
        if message.get("method") == "session/update":
            out.append(message["params"]["update"])
    raise AssertionError(f"{method} was not answered")
