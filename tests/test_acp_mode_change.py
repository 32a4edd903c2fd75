"""A permission mode change reaches every task of a session, through the real `defect acp`.

The offline model (`DEFECT_SCRIPT`, `defect_core/providers/scripted.py`) plays a parent that
starts a background subagent in `yolo` mode, and the subagent's commands. The subagent's
first command holds until the test releases it (it waits for a file), so the mode switch
lands between two of its commands without any timing: the test waits until the command has
started, switches the session's mode (`session/set_mode`, or the `mode` config option), then
releases it. The commands after the switch are judged under the new mode: `read-only`
refuses them (their marker files never appear) and the task's progress says the mode
changed; `ask` puts them to the user (`session/request_permission`), whose answer decides.
The foreground turn is held the same way.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from acp import schema as s

from tests.support.acp_harness import Agent, RecordingClient, script_env, spawn_defect

pytestmark = pytest.mark.anyio

TIMEOUT = 20.0
REFUSED = "(refused: the mode is now read-only)"


def bash(command: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": "bash", "input": {"command": command}}]}


def hold(work: Path) -> str:
    """A command that says it started, then waits until the test releases it."""
    return f"touch {work / 'started'}; while [ ! -e {work / 'go'} ]; do sleep 0.02; done"


def background_script(work: Path, *later: str) -> dict[str, Any]:
    spawn = {
        "name": "spawn_agent",
        "input": {"agent": "general", "task": "Work on.", "run_in_background": True},
    }
    child = [bash(hold(work)), *(bash(c) for c in later), {"text": "The child is done."}]
    return {
        "replies": [{"tool_calls": [spawn]}, {"text": "It runs in the background."}],
        "agents": {"general": child},
    }


async def started_then(agent: Agent, work: Path, switch: Any) -> None:
    """Wait until the held command runs, switch the mode, release it."""
    with anyio.fail_after(TIMEOUT):
        while not (work / "started").exists():
            await anyio.sleep(0.02)
    await switch()
    (work / "go").touch()


def spawn_updates(agent: Agent, sid: str) -> list[Any]:
    return [
        u
        for s_id, u in agent.client.updates
        if s_id == sid
        and u.session_update in ("tool_call", "tool_call_update")
        and getattr(u, "kind", None) in ("think", None)
    ]


def shown(update: Any) -> str:
    return "\n".join(c.content.text for c in update.content or [] if hasattr(c.content, "text"))


async def task_end(agent: Agent, sid: str) -> Any:
    """The update that tells the editor the background task ended."""

    def ended() -> Any:
        for u in spawn_updates(agent, sid):
            raw = u.raw_output if isinstance(u.raw_output, dict) else {}
            if "task_id" in raw and raw.get("status") not in (None, "running"):
                return u
        return None

    await agent.client.wait_for(lambda: ended() is not None, timeout=TIMEOUT)
    return ended()


async def run_background(
    tmp_path: Path, later: list[str], switch_to: str, client: RecordingClient, via_option: bool
) -> Any:
    work = tmp_path / "work"
    work.mkdir()
    script = tmp_path / "script.json"
    script.write_text(json.dumps(background_script(work, *later)))
    env = script_env(tmp_path, DEFECT_SCRIPT=str(script))
    async with spawn_defect(env=env, client=client) as agent:
        await agent.initialize()
        sid = await agent.new_session(work)
        await agent.conn.set_session_mode(session_id=sid, mode_id="yolo")
        with anyio.fail_after(TIMEOUT):
            response = await agent.prompt(sid, "Start the work in the background.")
        assert response.stop_reason == "end_turn"

        async def switch() -> None:
            if via_option:
                await agent.conn.set_config_option(
                    session_id=sid, config_id="mode", value=switch_to
                )
            else:
                await agent.conn.set_session_mode(session_id=sid, mode_id=switch_to)

        await started_then(agent, work, switch)
        end = await task_end(agent, sid)
        agent.assert_schema_clean()
    return work, end


async def test_a_switch_to_read_only_refuses_a_running_background_childs_next_commands(
    tmp_path: Path,
) -> None:
    client = RecordingClient()
    work, end = await run_background(
        tmp_path,
        ["touch second", "touch third"],
        "read-only",
        client,
        via_option=False,
    )
    assert (work / "started").exists()  # the command before the switch ran
    assert not (work / "second").exists() and not (work / "third").exists()
    assert client.permission_requests == []  # read-only refuses, it never asks
    text = shown(end)
    assert "Background task t1 completed: The child is done." in text
    assert f"✗ touch second {REFUSED}" in text, text
    assert f"✗ touch third {REFUSED}" in text, text


async def test_the_mode_config_option_reaches_a_background_child_too(tmp_path: Path) -> None:
    client = RecordingClient()
    work, end = await run_background(
        tmp_path, ["touch second"], "read-only", client, via_option=True
    )
    assert not (work / "second").exists()
    assert REFUSED in shown(end)


async def test_a_switch_to_ask_puts_a_background_childs_next_commands_to_the_user(
    tmp_path: Path,
) -> None:
    def answer(request: s.RequestPermissionRequest) -> str | None:
        allowed = "second" in (request.tool_call.title or "")
        return "allow_once" if allowed else "reject_once"

    client = RecordingClient(permission=answer)
    work, end = await run_background(
        tmp_path, ["touch second", "touch third"], "ask", client, via_option=False
    )
    titles = [r.tool_call.title for r in client.permission_requests]
    assert titles == ["general: touch second", "general: touch third"]
    assert (work / "second").exists()  # asked, allowed: it ran
    assert not (work / "third").exists()  # asked, rejected
    text = shown(end)
    assert "✓ touch second" in text and "✗ touch third" in text, text


async def test_a_switch_during_a_foreground_turn_applies_from_its_next_call(
    tmp_path: Path,
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    replies = [bash(hold(work)), bash("touch second"), {"text": "done"}]
    client = RecordingClient()
    async with spawn_defect(env=script_env(tmp_path, replies), client=client) as agent:
        await agent.initialize()
        sid = await agent.new_session(work)
        await agent.conn.set_session_mode(session_id=sid, mode_id="yolo")
        async with anyio.create_task_group() as tg:
            result: list[Any] = []

            async def prompt() -> None:
                with anyio.fail_after(TIMEOUT):
                    result.append(await agent.prompt(sid, "Run both."))

            tg.start_soon(prompt)

            async def switch() -> None:
                await agent.conn.set_session_mode(session_id=sid, mode_id="read-only")

            await started_then(agent, work, switch)
        assert result[0].stop_reason == "end_turn"
        agent.assert_schema_clean()
    assert not (work / "second").exists()
    assert client.permission_requests == []
    failed = [
        u
        for s_id, u in client.updates
        if u.session_update == "tool_call_update" and u.status == "failed"
    ]
    assert len(failed) == 1 and failed[0].title == f"touch second {REFUSED}"
    assert "changed from yolo to read-only" in shown(failed[0])
