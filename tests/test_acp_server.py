"""The real `defect acp` process over real stdio, on the offline model.

Every message the agent writes is validated against the ACP schema by the harness; each test
ends with `assert_schema_clean()`.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest
from acp import RequestError

from tests.support.acp_harness import (
    RecordingClient,
    agent_env,
    raw_session,
    script_env,
    spawn_defect,
)

pytestmark = pytest.mark.anyio


async def test_initialize_negotiates_version_and_advertises_only_what_works() -> None:
    async with spawn_defect() as agent:
        response = await agent.initialize()
        assert response.protocol_version == 1
        assert response.agent_info is not None and response.agent_info.name == "defect"
        caps = response.agent_capabilities
        assert caps is not None
        assert caps.prompt_capabilities is not None and caps.prompt_capabilities.image is True
        assert caps.prompt_capabilities.audio is False
        newer = await agent.conn.initialize(protocol_version=7)
        assert newer.protocol_version == 1
        agent.assert_schema_clean()


async def test_hello_prompt_streams_chunks_and_ends_the_turn(tmp_path: Path) -> None:
    async with spawn_defect() as agent:
        await agent.initialize()
        sid = await agent.new_session(tmp_path)
        response = await agent.prompt(sid, "hello there")
        assert response.stop_reason == "end_turn"
        chunks = [u for _, u in agent.client.updates if u.session_update == "agent_message_chunk"]
        assert len(chunks) > 1, "the reply should arrive as several streamed chunks"
        assert agent.client.text(sid) == "Hello! I'm defect's offline model. You said: hello there"
        assert "session_info_update" in agent.client.kinds(sid)
        agent.assert_schema_clean()


async def test_new_session_answers_modes_and_config_options(tmp_path: Path) -> None:
    async with spawn_defect() as agent:
        await agent.initialize()
        response = await agent.conn.new_session(cwd=str(tmp_path), mcp_servers=[])
        other = await agent.new_session(tmp_path)
        assert response.session_id != other
        assert response.modes is not None and response.modes.current_mode_id == "ask"
        assert {m.id for m in response.modes.available_modes} == {
            "ask",
            "accept-edits",
            "read-only",
            "yolo",
        }
        categories = {
            o.root.category if hasattr(o, "root") else o.category
            for o in response.config_options or []
        }
        assert {"mode", "model", "thought_level"} <= categories
        agent.assert_schema_clean()


async def test_bad_cwd_is_invalid_params(tmp_path: Path) -> None:
    async with spawn_defect() as agent:
        await agent.initialize()
        with pytest.raises(RequestError) as relative:
            await agent.conn.new_session(cwd="relative/path", mcp_servers=[])
        assert relative.value.code == -32602
        assert "absolute" in str(relative.value)
        with pytest.raises(RequestError) as missing:
            await agent.conn.new_session(cwd=str(tmp_path / "nope"), mcp_servers=[])
        assert missing.value.code == -32602
        agent.assert_schema_clean()


async def test_tool_loop_runs_tools_and_reports_their_status(tmp_path: Path) -> None:
    (tmp_path / "README.md").write_text("# Demo\nhello from the readme\n")
    replies = [
        {"text": "Reading.", "tool_calls": [{"name": "read_file", "input": {"path": "README.md"}}]},
        {"text": "The readme says hello."},
    ]
    async with spawn_defect(env=script_env(tmp_path, replies)) as agent:
        await agent.initialize()
        sid = await agent.new_session(tmp_path)
        response = await agent.prompt(sid, "what does the readme say?")
        assert response.stop_reason == "end_turn"
        updates = [u for _, u in agent.client.updates]
        starts = [u for u in updates if u.session_update == "tool_call"]
        assert len(starts) == 1 and starts[0].kind == "read"
        finals = [
            u
            for u in updates
            if u.session_update == "tool_call_update" and u.status in ("completed", "failed")
        ]
        assert [f.status for f in finals] == ["completed"]
        assert agent.client.text(sid).endswith("The readme says hello.")
        assert not agent.client.permission_requests, "reading must not ask"
        agent.assert_schema_clean()


async def test_write_asks_permission_and_reject_reaches_the_model(tmp_path: Path) -> None:
    replies = [
        {"tool_calls": [{"name": "write_file", "input": {"path": "a.txt", "content": "x\n"}}]},
        {"text": "ok"},
    ]
    client = RecordingClient(permission=lambda _req: "reject_once")
    async with spawn_defect(env=script_env(tmp_path, replies), client=client) as agent:
        await agent.initialize()
        sid = await agent.new_session(tmp_path)
        response = await agent.prompt(sid, "write a file")
        assert response.stop_reason == "end_turn"
        assert len(client.permission_requests) == 1
        request = client.permission_requests[0]
        assert {o.kind for o in request.options} == {
            "allow_once",
            "allow_always",
            "reject_once",
            "reject_always",
        }
        assert not (tmp_path / "a.txt").exists()
        finals = [
            u
            for _, u in client.updates
            if u.session_update == "tool_call_update" and u.status == "failed"
        ]
        assert finals, "a rejected call ends as failed"
        agent.assert_schema_clean()


async def test_cancel_during_stream_answers_cancelled_and_nothing_follows(tmp_path: Path) -> None:
    replies = [
        {"text": " ".join(f"word{i}" for i in range(200)), "chunk_delay_ms": 20},
        {"text": "second turn works"},
    ]
    async with spawn_defect(env=script_env(tmp_path, replies)) as agent:
        await agent.initialize()
        sid = await agent.new_session(tmp_path)
        task = asyncio.create_task(agent.prompt(sid, "talk"))
        await agent.client.wait_for(lambda: "agent_message_chunk" in agent.client.kinds(sid))
        await agent.conn.cancel(session_id=sid)
        response = await asyncio.wait_for(task, 10)
        assert response.stop_reason == "cancelled"
        count = len(agent.client.updates)
        await asyncio.sleep(0.3)
        assert len(agent.client.updates) == count, "no update may follow the cancelled answer"
        second = await agent.prompt(sid, "again")
        assert second.stop_reason == "end_turn"
        assert agent.client.text(sid).endswith("second turn works")
        agent.assert_schema_clean()


async def test_cancel_during_a_running_tool_ends_every_tool_call(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    replies = [
        {"tool_calls": [{"name": "bash", "input": {"command": f"echo $$ > {pid_file}; sleep 60"}}]},
        {"text": "after"},
    ]
    async with spawn_defect(env=script_env(tmp_path, replies)) as agent:
        await agent.initialize()
        sid = await agent.new_session(tmp_path)
        await agent.conn.set_session_mode(session_id=sid, mode_id="yolo")
        task = asyncio.create_task(agent.prompt(sid, "run it"))

        def running() -> bool:
            return pid_file.exists() and pid_file.read_text().strip() != ""

        async with asyncio.timeout(10):
            while not running():
                await asyncio.sleep(0.05)
        await agent.conn.cancel(session_id=sid)
        response = await asyncio.wait_for(task, 10)
        assert response.stop_reason == "cancelled"
        statuses = [
            u.status
            for _, u in agent.client.updates
            if u.session_update == "tool_call_update" and u.status
        ]
        assert statuses[-1] == "failed"
        pid = int(pid_file.read_text())
        await asyncio.sleep(0.2)
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
        second = await agent.prompt(sid, "next")
        assert second.stop_reason == "end_turn"
        agent.assert_schema_clean()


async def test_set_mode_and_config_option_notify_and_answer_the_full_list(tmp_path: Path) -> None:
    async with spawn_defect() as agent:
        await agent.initialize()
        sid = await agent.new_session(tmp_path)
        await agent.conn.set_session_mode(session_id=sid, mode_id="read-only")
        await agent.client.wait_for(lambda: "current_mode_update" in agent.client.kinds(sid))
        response = await agent.conn.set_config_option(
            session_id=sid, config_id="reasoning_effort", value="high"
        )
        ids = {o.root.id if hasattr(o, "root") else o.id for o in response.config_options}
        assert ids == {"mode", "model", "reasoning_effort"}
        await agent.client.wait_for(lambda: "config_option_update" in agent.client.kinds(sid))
        with pytest.raises(RequestError) as bad:
            await agent.conn.set_session_mode(session_id=sid, mode_id="nonsense")
        assert bad.value.code == -32602 and "nonsense" in str(bad.value)
        agent.assert_schema_clean()


async def test_unknown_session_is_not_found(tmp_path: Path) -> None:
    async with spawn_defect() as agent:
        await agent.initialize()
        with pytest.raises(RequestError) as err:
            await agent.prompt("sess_does_not_exist", "hi")
        assert err.value.code == -32002
        assert "sess_does_not_exist" in str(err.value)
        agent.assert_schema_clean()


async def test_prompt_while_a_turn_runs_is_a_clear_error(tmp_path: Path) -> None:
    replies = [{"text": "slow " * 50, "chunk_delay_ms": 20}]
    async with spawn_defect(env=script_env(tmp_path, replies)) as agent:
        await agent.initialize()
        sid = await agent.new_session(tmp_path)
        first = asyncio.create_task(agent.prompt(sid, "one"))
        await agent.client.wait_for(lambda: "agent_message_chunk" in agent.client.kinds(sid))
        with pytest.raises(RequestError) as err:
            await agent.prompt(sid, "two")
        assert "already running" in str(err.value)
        await agent.conn.cancel(session_id=sid)
        assert (await first).stop_reason == "cancelled"
        agent.assert_schema_clean()


async def test_meta_on_a_request_is_accepted(tmp_path: Path) -> None:
    async with spawn_defect() as agent:
        await agent.initialize()
        response = await agent.conn.new_session(
            cwd=str(tmp_path), mcp_servers=[], field_meta={"trace": "abc"}
        )
        assert response.session_id
        agent.assert_schema_clean()


async def test_malformed_lines_get_errors_and_the_agent_keeps_serving() -> None:
    init = (
        json.dumps(
            {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}}
        ).encode()
        + b"\n"
    )
    lines = [b"this is not json\n", b'{"jsonrpc": "2.0"}\n', b"[1, 2]\n", init]
    out, proc = await raw_session(lines, read_count=4)
    try:
        assert out[0]["error"]["code"] == -32700 and out[0]["id"] is None
        assert out[1]["error"]["code"] == -32600
        assert out[2]["error"]["code"] == -32600
        assert out[3]["id"] == 1 and out[3]["result"]["protocolVersion"] == 1
    finally:
        proc.kill()
        await proc.wait()


async def test_unknown_method_and_invalid_params() -> None:
    lines = [
        json.dumps({"jsonrpc": "2.0", "id": 1, "method": "session/fly", "params": {}}).encode()
        + b"\n",
        json.dumps({"jsonrpc": "2.0", "id": 2, "method": "session/new", "params": {}}).encode()
        + b"\n",
    ]
    out, proc = await raw_session(lines, read_count=2)
    try:
        by_id = {m["id"]: m for m in out}
        assert by_id[1]["error"]["code"] == -32601
        assert by_id[2]["error"]["code"] == -32602
    finally:
        proc.kill()
        await proc.wait()


async def test_stdin_eof_exits_cleanly() -> None:
    init = (
        json.dumps(
            {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}}
        ).encode()
        + b"\n"
    )
    out, proc = await raw_session([init], read_count=1)
    assert proc.stdin is not None
    proc.stdin.close()
    code = await asyncio.wait_for(proc.wait(), 10)
    assert code == 0
    assert out[0]["result"]["agentInfo"]["name"] == "defect"


async def test_sigterm_exits_cleanly() -> None:
    init = (
        json.dumps(
            {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}}
        ).encode()
        + b"\n"
    )
    _out, proc = await raw_session([init], read_count=1)
    proc.terminate()
    code = await asyncio.wait_for(proc.wait(), 10)
    assert code == 0


async def test_stdout_carries_only_json_rpc(tmp_path: Path) -> None:
    lines = [
        json.dumps(
            {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}}
        ).encode()
        + b"\n",
        json.dumps(
            {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "session/new",
                "params": {"cwd": str(tmp_path), "mcpServers": []},
            }
        ).encode()
        + b"\n",
    ]
    out, proc = await raw_session(lines, read_count=2, env=agent_env(DEFECT_LOG_LEVEL="debug"))
    try:
        assert [m["id"] for m in out] == [1, 2]
        assert all(m["jsonrpc"] == "2.0" for m in out)
    finally:
        proc.kill()
        await proc.wait()


async def test_cancel_request_for_a_running_prompt_answers_cancelled(tmp_path: Path) -> None:
    replies = [{"text": "slow " * 100, "chunk_delay_ms": 20}]
    async with spawn_defect(env=script_env(tmp_path, replies)) as agent:
        await agent.initialize()
        sid = await agent.new_session(tmp_path)
        task = asyncio.create_task(agent.prompt(sid, "talk"))
        await agent.client.wait_for(lambda: "agent_message_chunk" in agent.client.kinds(sid))
        prompt_id = next(
            m["id"]
            for d, m in agent.wire.messages
            if d == "client" and m.get("method") == "session/prompt"
        )
        await agent.conn._conn.send_notification("$/cancel_request", {"requestId": prompt_id})
        response = await asyncio.wait_for(task, 10)
        assert response.stop_reason == "cancelled"
        agent.assert_schema_clean()


async def test_slash_commands_are_announced_and_answered(tmp_path: Path) -> None:
    async with spawn_defect() as agent:
        await agent.initialize()
        sid = await agent.new_session(tmp_path)
        await agent.client.wait_for(lambda: "available_commands_update" in agent.client.kinds(sid))
        update = next(
            u for _, u in agent.client.updates if u.session_update == "available_commands_update"
        )
        names = {c.name for c in update.available_commands}
        assert names == {"compact", "context", "goal", "rewind", "trust", "fork", "help"}
        response = await agent.prompt(sid, "/context")
        assert response.stop_reason == "end_turn"
        assert agent.client.text(sid).startswith("Context: ~")
        agent.assert_schema_clean()


async def test_prompt_answer_carries_the_turns_usage_in_meta(tmp_path: Path) -> None:
    async with spawn_defect() as agent:
        await agent.initialize()
        sid = await agent.new_session(tmp_path)
        await agent.prompt(sid, "hello")
        answer = next(
            m
            for m in agent.wire.from_agent()
            if "result" in m and isinstance(m["result"], dict) and "stopReason" in m["result"]
        )
        usage = answer["result"]["_meta"]["usage"]
        assert usage["requests"] == 1 and usage["inputTokens"] > 0
        # The core's snake_case usage, projected onto ACP's names by the bridge, all of it.
        assert set(usage) == {
            "inputTokens",
            "outputTokens",
            "cacheReadInputTokens",
            "cacheCreationInputTokens",
            "requests",
        }
        assert "usage_update" in agent.client.kinds(sid)
        agent.assert_schema_clean()


def test_cli_version_and_help() -> None:
    import subprocess
    import sys

    env = agent_env()
    version = subprocess.run(
        [sys.executable, "-m", "defect_cli", "--version"], capture_output=True, text=True, env=env
    )
    assert version.returncode == 0 and version.stdout.startswith("defect ")
    helped = subprocess.run(
        [sys.executable, "-m", "defect_cli", "acp", "--help"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert helped.returncode == 0 and "--provider" in helped.stdout and "--resume" in helped.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "defect_cli", "acp", "--provider", "nope"],
        capture_output=True,
        text=True,
        env=env,
        stdin=subprocess.DEVNULL,
    )
    assert bad.returncode == 2 and bad.stdout == ""
    assert "provider" in bad.stderr and "'nope'" in bad.stderr and "anthropic" in bad.stderr


async def test_cancel_while_a_permission_question_is_pending(tmp_path: Path) -> None:
    replies = [
        {"tool_calls": [{"name": "write_file", "input": {"path": "x.txt", "content": "x\n"}}]},
        {"text": "after"},
    ]
    gate = asyncio.Event()
    # As ACP asks of a client: after session/cancel, pending questions answer "cancelled".
    client = RecordingClient(permission=lambda _req: None, permission_gate=gate)
    async with spawn_defect(env=script_env(tmp_path, replies), client=client) as agent:
        await agent.initialize()
        sid = await agent.new_session(tmp_path)
        task = asyncio.create_task(agent.prompt(sid, "write it"))
        await client.wait_for(lambda: bool(client.permission_requests))
        await agent.conn.cancel(session_id=sid)
        gate.set()
        response = await asyncio.wait_for(task, 10)
        assert response.stop_reason == "cancelled"
        assert not (tmp_path / "x.txt").exists()
        statuses = [
            u.status
            for _, u in client.updates
            if u.session_update == "tool_call_update" and u.status
        ]
        assert statuses and statuses[-1] == "failed", "the call ends with a final status"
        count = len(client.updates)
        await asyncio.sleep(0.3)
        assert len(client.updates) == count, "nothing follows the cancelled answer"
        assert (await agent.prompt(sid, "hello")).stop_reason == "end_turn"
        agent.assert_schema_clean()


async def test_a_projects_config_applies_to_its_sessions_wherever_the_agent_started(
    tmp_path: Path,
) -> None:
    project, broken = tmp_path / "project", tmp_path / "broken"
    for root, text in ((project, 'reasoning_effort = "high"\n'), (broken, "max_tokns = 5\n")):
        (root / ".git").mkdir(parents=True)
        (root / ".defect").mkdir()
        (root / ".defect" / "config.toml").write_text(text)
    async with spawn_defect() as agent:  # started in the repository root, not in `project`
        await agent.initialize()
        response = await agent.conn.new_session(cwd=str(project), mcp_servers=[])
        options = {
            (o.root if hasattr(o, "root") else o).id: (o.root if hasattr(o, "root") else o)
            for o in response.config_options or []
        }
        assert options["reasoning_effort"].current_value == "high"
        with pytest.raises(RequestError) as err:
            await agent.conn.new_session(cwd=str(broken), mcp_servers=[])
        assert err.value.code == -32602
        assert ".defect/config.toml" in str(err.value) and "max_tokns" in str(err.value)
        elsewhere = await agent.conn.new_session(cwd=str(tmp_path), mcp_servers=[])
        assert elsewhere.session_id, "a broken project does not stop the agent serving others"
        agent.assert_schema_clean()
