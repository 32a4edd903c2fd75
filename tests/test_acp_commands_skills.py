"""Custom slash commands and skills through the real `defect acp` process.

A project's `.defect/commands/*.md` become ACP available commands (refreshed when a file is
added), and `/name args` sends the expanded prompt to the model. A project's
`.defect/skills/<name>/SKILL.md` is listed in the system prompt, and the model reads it with the
`skill` tool. The strict fake API checks every request.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from defect_core.tools.base import ToolError, input_schema
from defect_core.tools.skill import SkillArgs, SkillTool
from defect_fakeapi import DEFAULT_API_KEY, FakeProvider, Reply
from tests.support.acp_harness import Agent, agent_env, spawn_defect

pytestmark = pytest.mark.anyio


def anthropic_env(fake: FakeProvider) -> dict[str, str]:
    return agent_env(
        DEFECT_PROVIDER="anthropic",
        ANTHROPIC_BASE_URL=fake.url,
        ANTHROPIC_API_KEY=DEFAULT_API_KEY,
        DEFECT_REASONING_EFFORT="off",
    )


def offered(agent: Agent, sid: str) -> list[dict[str, str]]:
    """The last `available_commands_update` the client received, as name → description."""
    lists = [
        u.available_commands
        for s_id, u in agent.client.updates
        if s_id == sid and u.session_update == "available_commands_update"
    ]
    assert lists, "no available_commands_update was sent"
    return [{"name": c.name, "description": c.description} for c in lists[-1]]


def last_user_text(body: dict[str, Any]) -> str:
    content = body["messages"][-1]["content"]
    if isinstance(content, str):
        return content
    return "".join(block.get("text", "") for block in content if block["type"] == "text")


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


async def test_project_commands_are_offered_expanded_and_refreshed(
    fake_provider: FakeProvider, tmp_path: Path
) -> None:
    commands = tmp_path / ".defect" / "commands"
    write(commands / "review.md", "---\ndescription: Review a file\n---\nReview $ARGUMENTS now.")
    write(commands / "broken.md", "---\ndescription: [\n---\nBroken")
    fake_provider.enqueue(Reply.text("Reviewed."))
    fake_provider.enqueue(Reply.text("Explained."))
    async with spawn_defect(env=anthropic_env(fake_provider)) as agent:
        await agent.initialize()
        sid = await agent.new_session(tmp_path)
        await agent.client.wait_for(lambda: "available_commands_update" in agent.client.kinds(sid))
        names = {c["name"]: c["description"] for c in offered(agent, sid)}
        assert {"compact", "context", "review"} <= set(names)
        assert names["review"] == "Review a file (project)" and "broken" not in names
        response = await agent.prompt(sid, "/review src/app.py")
        assert response.stop_reason == "end_turn"
        assert last_user_text(fake_provider.requests[-1].body) == "Review src/app.py now."

        write(commands / "explain.md", "Explain the code.")  # added while the session runs
        before = len(agent.client.kinds(sid))
        await agent.prompt(sid, "/explain")
        assert "available_commands_update" in agent.client.kinds(sid)[before:]
        assert "explain" in {c["name"] for c in offered(agent, sid)}
        assert last_user_text(fake_provider.requests[-1].body) == "Explain the code."
        agent.assert_schema_clean()
        assert "broken.md" in agent.stderr()  # the broken file is logged, not fatal


async def test_a_skill_is_listed_in_the_prompt_and_read_with_the_skill_tool(
    fake_provider: FakeProvider, tmp_path: Path
) -> None:
    write(
        tmp_path / ".defect" / "skills" / "release-notes" / "SKILL.md",
        "---\nname: release-notes\ndescription: Write release notes from git history.\n---\n"
        "Group the commits by kind, newest first.",
    )
    fake_provider.enqueue(Reply.tool_use(None, "skill", {"name": "release-notes"}))
    fake_provider.enqueue(Reply.text("Following the skill."))
    async with spawn_defect(env=anthropic_env(fake_provider)) as agent:
        await agent.initialize()
        sid = await agent.new_session(tmp_path)
        response = await agent.prompt(sid, "Write the release notes.")
        assert response.stop_reason == "end_turn"
        agent.assert_schema_clean()
    first, second = fake_provider.requests[-2:]
    system = json.dumps(first.body["system"])
    assert "release-notes: Write release notes from git history." in system
    assert "skill" in [tool.get("name") for tool in first.body["tools"]]
    result = second.body["messages"][-1]["content"][0]
    assert result["type"] == "tool_result" and not result.get("is_error")
    assert "Group the commits by kind, newest first." in json.dumps(result["content"])


async def test_without_skills_there_is_no_skill_tool(
    fake_provider: FakeProvider, tmp_path: Path
) -> None:
    fake_provider.enqueue(Reply.text("ok"))
    async with spawn_defect(env=anthropic_env(fake_provider)) as agent:
        await agent.initialize()
        sid = await agent.new_session(tmp_path)
        await agent.prompt(sid, "hi")
    body = fake_provider.requests[-1].body
    assert "skill" not in [tool.get("name") for tool in body["tools"]]
    assert "# Skills" not in json.dumps(body["system"])


def test_the_skill_tools_schema_is_its_models() -> None:
    tool = SkillTool([])
    assert tool.input_schema == input_schema(SkillArgs)
    assert tool.input_schema["additionalProperties"] is False
    assert tool.input_schema["required"] == ["name"]


async def test_an_unknown_skill_is_an_error_the_model_reads() -> None:
    tool = SkillTool([])
    with pytest.raises(ToolError, match="no skill named `nope`"):
        await tool.run({"name": "nope"}, None)  # type: ignore[arg-type]  # ctx is not used
