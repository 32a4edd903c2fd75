"""Sessions that outlive the process: load with full replay, list, resume, close, delete,
`--resume`, across real `defect acp` processes sharing one SQLite store."""

from __future__ import annotations

from pathlib import Path

import pytest
from acp import RequestError

from tests.support.acp_harness import RecordingClient, script_env, spawn_defect

pytestmark = pytest.mark.anyio


async def test_load_after_restart_replays_the_whole_conversation(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "README.md").write_text("# Demo\n")
    replies = [
        {
            "thinking": "look first",
            "text": "Reading.",
            "tool_calls": [{"name": "read_file", "input": {"path": "README.md"}}],
        },
        {"tool_calls": [{"name": "write_file", "input": {"path": "a.txt", "content": "one\n"}}]},
        {"text": "Done writing."},
    ]
    async with spawn_defect(env=script_env(tmp_path, replies)) as first:
        await first.initialize()
        sid = await first.new_session(work)
        assert (await first.prompt(sid, "read then write\nsecond line")).stop_reason == "end_turn"
        first.assert_schema_clean()
    assert (work / "a.txt").read_text() == "one\n"

    client = RecordingClient()
    async with spawn_defect(env=script_env(tmp_path), client=client) as second:
        init = await second.initialize()
        assert init.agent_capabilities is not None and init.agent_capabilities.load_session
        response = await second.conn.load_session(cwd=str(work), session_id=sid, mcp_servers=[])
        assert response.modes is not None
        kinds = client.kinds(sid)
        assert kinds[0] == "user_message_chunk"
        assert "agent_thought_chunk" in kinds and "agent_message_chunk" in kinds
        calls = [u for _, u in client.updates if u.session_update == "tool_call"]
        assert [(c.kind, c.status) for c in calls] == [("read", "completed"), ("edit", "completed")]
        diffs = [c for c in calls[1].content or [] if getattr(c, "type", "") == "diff"]
        assert diffs and diffs[0].new_text == "one\n"
        assert client.text(sid).endswith("Done writing.")
        user_text = "".join(
            u.content.text for _, u in client.updates if u.session_update == "user_message_chunk"
        )
        assert user_text == "read then write\nsecond line"
        # The loaded session goes on where it was.
        assert (await second.prompt(sid, "hello")).stop_reason == "end_turn"
        second.assert_schema_clean()


async def test_list_resume_close_delete(tmp_path: Path) -> None:
    work_a, work_b = tmp_path / "a", tmp_path / "b"
    work_a.mkdir()
    work_b.mkdir()
    async with spawn_defect(env=script_env(tmp_path)) as agent:
        await agent.initialize()
        first = await agent.new_session(work_a)
        await agent.prompt(first, "hello one")
        second = await agent.new_session(work_a)
        await agent.prompt(second, "hello two")
        other = await agent.new_session(work_b)

        page = await agent.conn.list_sessions(cwd=str(work_a))
        assert [s.session_id for s in page.sessions] == [second, first], "newest first"
        assert [s.title for s in page.sessions] == ["hello two", "hello one"]
        everything = await agent.conn.list_sessions()
        assert {s.session_id for s in everything.sessions} >= {first, second, other}

        await agent.conn.close_session(session_id=first)
        with pytest.raises(RequestError) as gone:
            await agent.prompt(first, "still there?")
        assert gone.value.code == -32002

        before = len(agent.client.updates)
        await agent.conn.resume_session(session_id=first, cwd=str(work_a), mcp_servers=[])
        assert len(agent.client.updates) == before, "resume must not replay"
        assert (await agent.prompt(first, "hello again")).stop_reason == "end_turn"

        # The pinned client SDK has no session/delete helper: send the request itself.
        assert await agent.conn._conn.send_request("session/delete", {"sessionId": other}) == {}
        unknown = {"sessionId": "sess_unknown"}
        assert await agent.conn._conn.send_request("session/delete", unknown) == {}
        remaining = await agent.conn.list_sessions()
        assert other not in {s.session_id for s in remaining.sessions}
        with pytest.raises(RequestError) as missing:
            await agent.conn.load_session(cwd=str(work_b), session_id=other, mcp_servers=[])
        assert missing.value.code == -32002
        agent.assert_schema_clean()


async def test_loading_a_live_session_does_not_duplicate_its_stream(tmp_path: Path) -> None:
    async with spawn_defect(env=script_env(tmp_path)) as agent:
        await agent.initialize()
        sid = await agent.new_session(tmp_path)
        await agent.prompt(sid, "hello")
        await agent.conn.load_session(cwd=str(tmp_path), session_id=sid, mcp_servers=[])
        before = len(agent.client.updates)
        await agent.prompt(sid, "hello once")
        chunks = [
            u.content.text
            for _, u in agent.client.updates[before:]
            if u.session_update == "agent_message_chunk"
        ]
        assert "".join(chunks) == "Hello! I'm defect's offline model. You said: hello once"
        agent.assert_schema_clean()


async def test_resume_flag_continues_the_newest_session_for_the_cwd(tmp_path: Path) -> None:
    async with spawn_defect(env=script_env(tmp_path)) as agent:
        await agent.initialize()
        sid = await agent.new_session(tmp_path)
        await agent.prompt(sid, "hello from before")

    client = RecordingClient()
    async with spawn_defect("--resume", env=script_env(tmp_path), client=client) as agent:
        await agent.initialize()
        resumed = await agent.new_session(tmp_path)
        assert resumed == sid
        await client.wait_for(lambda: "user_message_chunk" in client.kinds(sid))
        assert (await agent.prompt(sid, "hello after")).stop_reason == "end_turn"
        fresh = await agent.new_session(tmp_path)
        assert fresh != sid, "only the first session/new resumes"
        agent.assert_schema_clean()


async def test_capabilities_advertise_session_methods(tmp_path: Path) -> None:
    async with spawn_defect(env=script_env(tmp_path)) as agent:
        await agent.initialize()
        result = next(
            m["result"] for m in agent.wire.from_agent() if m.get("id") == 0 and "result" in m
        )
        caps = result["agentCapabilities"]
        assert caps["loadSession"] is True
        assert caps["sessionCapabilities"] == {
            "list": {},
            "resume": {},
            "close": {},
            "delete": {},
            "fork": {},
        }
        agent.assert_schema_clean()


async def test_close_cancels_the_running_turn(tmp_path: Path) -> None:
    import asyncio

    replies = [{"text": "slow " * 200, "chunk_delay_ms": 20}]
    async with spawn_defect(env=script_env(tmp_path, replies)) as agent:
        await agent.initialize()
        sid = await agent.new_session(tmp_path)
        task = asyncio.create_task(agent.prompt(sid, "talk for a while"))
        await agent.client.wait_for(lambda: "agent_message_chunk" in agent.client.kinds(sid))
        await agent.conn.close_session(session_id=sid)
        response = await asyncio.wait_for(task, 10)
        assert response.stop_reason == "cancelled"
        # Closed, not deleted: it can be loaded again, with what was committed.
        await agent.conn.load_session(cwd=str(tmp_path), session_id=sid, mcp_servers=[])
        assert (await agent.prompt(sid, "hello")).stop_reason == "end_turn"
        agent.assert_schema_clean()
