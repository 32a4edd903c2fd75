"""Hooks through the real `defect acp` process, with the strict fake API checking every request.

A `before_tool` hook denies a call with a reason the model reads; a `user_prompt` hook (a
command or a prompt note) adds context to the prompt; a hook that fails or times out is skipped
and the turn goes on; a project's own hook does not run until the user's configuration trusts
the project, and a project cannot trust itself.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from defect_fakeapi import DEFAULT_API_KEY, FakeProvider, Reply
from tests.support.acp_harness import Agent, agent_env, spawn_defect

pytestmark = pytest.mark.anyio


def hooks_env(fake: FakeProvider, config_home: Path, user_config: str) -> dict[str, str]:
    """The agent on the fake API, with `user_config` as the user's own config.toml."""
    (config_home / "defect").mkdir(parents=True, exist_ok=True)
    (config_home / "defect" / "config.toml").write_text(user_config, encoding="utf-8")
    return agent_env(
        DEFECT_PROVIDER="anthropic",
        ANTHROPIC_BASE_URL=fake.url,
        ANTHROPIC_API_KEY=DEFAULT_API_KEY,
        DEFECT_REASONING_EFFORT="off",
        XDG_CONFIG_HOME=str(config_home),
    )


def user_text(message: dict[str, Any]) -> str:
    content = message["content"]
    if isinstance(content, str):
        return content
    return "\n".join(block.get("text", "") for block in content if block["type"] == "text")


def tool_updates(agent: Agent, sid: str) -> list[Any]:
    return [
        u
        for s_id, u in agent.client.updates
        if s_id == sid and u.session_update == "tool_call_update"
    ]


async def test_a_before_tool_hook_denies_a_call_with_a_reason_the_model_reads(
    fake_provider: FakeProvider, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    payload = tmp_path / "payload.json"
    config = f"""
[[hooks.before_tool]]
matcher = {{ tool = "bash" }}
command = "cat > '{payload}'; echo 'no network from here' >&2; exit 2"

[[hooks.before_tool]]
matcher = {{ tool = "read_file" }}
command = "touch '{tmp_path / "read-hook-ran"}'"
"""
    fake_provider.enqueue(Reply.tool_use("toolu_bash", "bash", {"command": "curl example.com"}))
    fake_provider.enqueue(Reply.text("Understood, no network."))
    async with spawn_defect(env=hooks_env(fake_provider, tmp_path / "xdg", config)) as agent:
        await agent.initialize()
        sid = await agent.new_session(work)
        response = await agent.prompt(sid, "Fetch example.com")
        assert response.stop_reason == "end_turn"
        agent.assert_schema_clean()
        assert agent.client.permission_requests == [], "a denied call asks nobody"
        final = [u for u in tool_updates(agent, sid) if u.tool_call_id == "toolu_bash"][-1]
        assert final.status == "failed"
    result = fake_provider.requests[1].body["messages"][-1]["content"][0]
    assert result["type"] == "tool_result" and result["is_error"] is True
    assert "refused by a hook: no network from here" in json.dumps(result["content"])
    told = json.loads(payload.read_text())
    assert told["event"] == "before_tool" and told["cwd"] == str(work)
    assert told["session_id"] == sid
    assert told["tool"] == {
        "name": "bash",
        "input": {"command": "curl example.com"},
        "id": "toolu_bash",
    }
    assert not (tmp_path / "read-hook-ran").exists(), "the matcher keeps other tools' hooks out"


async def test_user_prompt_hooks_add_context_and_a_failing_or_slow_hook_is_skipped(
    fake_provider: FakeProvider, tmp_path: Path
) -> None:
    echo = tmp_path / "echo_prompt.py"
    echo.write_text(
        "import json, sys\n"
        "event = json.load(sys.stdin)\n"
        "print(json.dumps({'context': 'Prompt seen: ' + event['prompt']}))\n"
    )
    config = f"""
[[hooks.user_prompt]]
command = "echo 'this one breaks' >&2; exit 7"

[[hooks.user_prompt]]
command = "sleep 30"
timeout = 0.5

[[hooks.user_prompt]]
command = "echo 'The build runs with: make check'"

[[hooks.user_prompt]]
prompt = "Answer in one sentence."

[[hooks.user_prompt]]
command = "'{sys.executable}' '{echo}'"
"""
    fake_provider.enqueue(Reply.text("Run make check."))
    async with spawn_defect(env=hooks_env(fake_provider, tmp_path / "xdg", config)) as agent:
        await agent.initialize()
        sid = await agent.new_session(tmp_path)
        response = await agent.prompt(sid, "How do I test?")
        assert response.stop_reason == "end_turn"
        agent.assert_schema_clean()
        stderr = agent.stderr()
    sent = user_text(fake_provider.requests[0].body["messages"][-1])
    assert sent.startswith("How do I test?")
    assert "The build runs with: make check" in sent
    assert "Answer in one sentence." in sent
    assert "Prompt seen: How do I test?" in sent
    assert "this one breaks" not in sent
    assert "exit status 7" in stderr and "timed out after 0.5 s" in stderr


async def test_a_project_hook_runs_only_once_the_user_trusts_the_project(
    fake_provider: FakeProvider, tmp_path: Path
) -> None:
    project = tmp_path / "cloned"
    (project / ".git").mkdir(parents=True)
    (project / ".defect").mkdir()
    (project / ".defect" / "config.toml").write_text(
        '[[hooks.session_start]]\ncommand = "touch started-marker"\n'
        '[[hooks.user_prompt]]\ncommand = "touch prompt-marker"\n',
        encoding="utf-8",
    )
    marker = project / "started-marker"
    fake_provider.enqueue(Reply.text("Hello."))
    async with spawn_defect(env=hooks_env(fake_provider, tmp_path / "xdg", "")) as agent:
        await agent.initialize()
        sid = await agent.new_session(project)
        await agent.prompt(sid, "hi")
        agent.assert_schema_clean()
        notices = agent.client.text(sid)
        stderr = agent.stderr()
    assert not marker.exists() and not (project / "prompt-marker").exists()
    assert "hooks.session_start: touch started-marker (.defect/config.toml)" in notices
    assert "hooks.user_prompt: touch prompt-marker (.defect/config.toml)" in notices
    assert "trusted_projects" in notices and "project_setting_not_applied" in stderr

    trusted = f'trusted_projects = ["{project}"]\n'
    fake_provider.enqueue(Reply.text("Hello again."))
    async with spawn_defect(env=hooks_env(fake_provider, tmp_path / "xdg", trusted)) as agent:
        await agent.initialize()
        sid = await agent.new_session(project)
        assert not marker.exists(), "session_start runs with the first prompt, not session/new"
        await agent.prompt(sid, "hi")
        assert "were not applied" not in agent.client.text(sid)
    assert marker.exists() and (project / "prompt-marker").exists()


async def test_a_project_cannot_trust_itself(fake_provider: FakeProvider, tmp_path: Path) -> None:
    project = tmp_path / "cloned"
    (project / ".defect").mkdir(parents=True)
    (project / ".defect" / "config.toml").write_text(
        f'trusted_projects = ["{project}"]\n[[hooks.session_start]]\ncommand = "touch marker"\n',
        encoding="utf-8",
    )
    async with spawn_defect(env=hooks_env(fake_provider, tmp_path / "xdg", "")) as agent:
        await agent.initialize()
        with pytest.raises(Exception) as refused:
            await agent.new_session(project)
        assert "line 1: trusted_projects: only your user configuration may trust a project" in str(
            refused.value
        )
    assert not (project / "marker").exists()
