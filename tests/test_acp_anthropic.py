"""The real `defect acp` process on the Anthropic provider, against the strict fake provider.

What an editor sees when Claude answers, fails, or cannot be reached: streamed chunks and
`end_turn`; a JSON-RPC error carrying the provider's own message and whether retrying may
help; -32000 with what to set when there is no key; and, after a stream that broke mid-reply,
a session that takes the next prompt with a history the strict validator accepts.
Every message the agent writes is checked against the ACP schema (`assert_schema_clean`).
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from acp import RequestError

from defect_fakeapi import DEFAULT_API_KEY, FakeProvider, Reply
from tests.support.acp_harness import Agent, agent_env, spawn_defect

pytestmark = pytest.mark.anyio


def anthropic_env(fake: FakeProvider, **extra: str) -> dict[str, str]:
    env = agent_env(
        DEFECT_PROVIDER="anthropic",
        ANTHROPIC_BASE_URL=fake.url,
        ANTHROPIC_API_KEY=DEFAULT_API_KEY,
        DEFECT_REASONING_EFFORT="off",
        **extra,
    )
    return env


async def settled(fake: FakeProvider) -> None:
    """The fake marks a request's outcome after writing it: wait for every one."""
    await anyio.to_thread.run_sync(fake.wait_for_requests, len(fake.requests))


async def start(agent: Agent, cwd: Path) -> str:
    await agent.initialize()
    return await agent.new_session(cwd)


async def test_text_turn_streams_chunks_and_ends_the_turn(
    fake_provider: FakeProvider, tmp_path: Path
) -> None:
    fake_provider.enqueue(Reply.text("Hello from Claude, over ACP, in several chunks."))
    async with spawn_defect(env=anthropic_env(fake_provider)) as agent:
        sid = await start(agent, tmp_path)
        response = await agent.prompt(sid, "hello")
        assert response.stop_reason == "end_turn"
        assert agent.client.text(sid) == "Hello from Claude, over ACP, in several chunks."
        chunks = [u for _, u in agent.client.updates if u.session_update == "agent_message_chunk"]
        assert len(chunks) > 1
        record = fake_provider.requests[-1]
        assert record.rejected is False and record.body["stream"] is True
        agent.assert_schema_clean()


async def test_bad_request_is_a_json_rpc_error_with_the_providers_message(
    fake_provider: FakeProvider, tmp_path: Path
) -> None:
    message = "messages.0.content.0.text: Field required"
    fake_provider.enqueue(Reply.error(400, message))
    async with spawn_defect(env=anthropic_env(fake_provider)) as agent:
        sid = await start(agent, tmp_path)
        with pytest.raises(RequestError) as err:
            await agent.prompt(sid, "hello")
        assert str(err.value).find(f"400 invalid_request_error: {message}") >= 0
        assert err.value.data["retryable"] is False
        assert err.value.data["status"] == 400
        assert len(fake_provider.requests) == 1  # not retried
        agent.assert_schema_clean()


async def test_missing_key_answers_auth_required_with_what_to_set(
    fake_provider: FakeProvider, tmp_path: Path
) -> None:
    env = anthropic_env(fake_provider)
    del env["ANTHROPIC_API_KEY"]
    async with spawn_defect(env=env) as agent:
        sid = await start(agent, tmp_path)  # initialize and session/new need no key
        with pytest.raises(RequestError) as err:
            await agent.prompt(sid, "hello")
        assert err.value.code == -32000
        assert "ANTHROPIC_API_KEY" in str(err.value)
        assert fake_provider.requests == []
        agent.assert_schema_clean()


async def test_stream_error_after_output_fails_the_turn_and_the_next_prompt_works(
    fake_provider: FakeProvider, tmp_path: Path
) -> None:
    fake_provider.enqueue(
        Reply.text("The first part of an answer that never finishes").error_mid_stream(4),
        Reply.text("A whole answer."),
    )
    async with spawn_defect(env=anthropic_env(fake_provider)) as agent:
        sid = await start(agent, tmp_path)
        with pytest.raises(RequestError) as err:
            await agent.prompt(sid, "first")
        assert "overloaded_error" in str(err.value)
        assert err.value.data["retryable"] is True
        shown = agent.client.text(sid)
        assert shown and "The first part".startswith(shown[:14])  # what was shown stays shown

        response = await agent.prompt(sid, "second")
        assert response.stop_reason == "end_turn"
        assert agent.client.text(sid).endswith("A whole answer.")
        await settled(fake_provider)
        last = fake_provider.requests[-1]
        assert last.rejected is False, last.error_message
        assert all(m["role"] == "user" for m in last.messages)  # no partial reply in history
        agent.assert_schema_clean()


async def test_image_and_embedded_context_prompts_reach_the_model(
    fake_provider: FakeProvider, tmp_path: Path
) -> None:
    from acp import schema as s

    png = (  # a 1x1 PNG
        "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5E"
        "rkJggg=="
    )
    fake_provider.enqueue(Reply.text("I see a pixel and your file."))
    async with spawn_defect(env=anthropic_env(fake_provider)) as agent:
        init = await agent.initialize()
        caps = init.agent_capabilities
        assert caps is not None and caps.prompt_capabilities is not None
        assert caps.prompt_capabilities.image and caps.prompt_capabilities.embedded_context
        sid = await agent.new_session(tmp_path)
        response = await agent.conn.prompt(
            session_id=sid,
            prompt=[
                s.TextContentBlock(type="text", text="What is in these?"),
                s.ImageContentBlock(type="image", data=png, mime_type="image/png"),
                s.EmbeddedResourceContentBlock(
                    type="resource",
                    resource=s.TextResourceContents(
                        uri="file:///project/notes.txt", text="remember the milk"
                    ),
                ),
            ],
        )
        assert response.stop_reason == "end_turn"
        await settled(fake_provider)
        record = fake_provider.requests[-1]
        assert record.rejected is False, record.error_message
        content = record.body["messages"][0]["content"]
        images = [b for b in content if b["type"] == "image"]
        assert images == [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": png}}
        ]
        texts = " ".join(b.get("text", "") for b in content)
        assert "file:///project/notes.txt" in texts and "remember the milk" in texts
        agent.assert_schema_clean()

    # The replay of a loaded session shows the image the user sent.
    async with spawn_defect(env=anthropic_env(fake_provider)) as again:
        await again.initialize()
        await again.conn.load_session(cwd=str(tmp_path), session_id=sid, mcp_servers=[])
        shown = [
            u.content for _, u in again.client.updates if u.session_update == "user_message_chunk"
        ]
        assert any(getattr(c, "type", "") == "image" and c.data == png for c in shown)
        again.assert_schema_clean()
