"""The parts of delegation below the process: agent profiles from real files, the offline
model answering each agent from its own script, and the bounded progress view.

What they add up to — `spawn_agent` and background tasks through the real `defect acp` — is
tested in tests/test_acp_subagents.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from defect_core.agents.progress import MAX_CALLS, TAIL_CHARS, ChildProgress, transcript_view
from defect_core.catalog.agents import GENERAL, load_profiles
from defect_core.events import MessageCommitted, ToolCallStarted, ToolCallUpdated
from defect_core.model import TextBlock, ToolResultBlock, ToolUseBlock, assistant, user
from defect_core.providers.base import Completed, ModelRequest
from defect_core.providers.scripted import EXHAUSTED_TEXT, ScriptedProvider, ScriptError
from tests.test_catalog import places, write  # noqa: F401  (the fixture)

pytestmark = pytest.mark.anyio


def test_profiles_load_from_both_places_with_their_fields(
    places: tuple[dict[str, str], Path, Path],  # noqa: F811
) -> None:
    env, user_dir, project = places
    write(
        user_dir / "agents" / "reviewer.md",
        '+++\ndescription = "Reviews diffs"\nmodel = "claude-haiku-4-5"\n+++\nReview it.\n',
    )
    write(
        project / "agents" / "reviewer.md",
        "---\ndescription: The project's reviewer\ntools: [read_file, search]\n"
        "max_requests: 5\n---\nReview it our way.\n",
    )
    write(project / "agents" / "general.md", "---\ndescription: Ours\n---\nOur general.\n")
    profiles, problems = load_profiles(project.parent, env=env)
    assert problems == []
    by_name = {p.name: p for p in profiles}
    assert sorted(by_name) == ["general", "reviewer"]
    reviewer = by_name["reviewer"]
    assert (reviewer.description, reviewer.prompt) == (
        "The project's reviewer",
        "Review it our way.",
    )
    assert (reviewer.tools, reviewer.max_requests, reviewer.model) == (
        ("read_file", "search"),
        5,
        None,
    )
    assert by_name["general"].prompt == "Our general." and by_name["general"] != GENERAL


def test_a_bad_profile_is_reported_and_the_rest_load(
    places: tuple[dict[str, str], Path, Path],  # noqa: F811
) -> None:
    env, _, project = places
    write(project / "agents" / "typo.md", "---\ntool: [bash]\n---\nDo it.\n")
    write(project / "agents" / "wrong.md", "---\nmax_requests: 0\n---\nDo it.\n")
    write(project / "agents" / "empty.md", "---\ndescription: nothing\n---\n")
    write(project / "agents" / "Bad Name.md", "Do it.\n")
    write(project / "agents" / "plain.md", "# Plain\nNo header at all.\n")
    profiles, problems = load_profiles(project.parent, env=env)
    assert [p.name for p in profiles] == ["general", "plain"]
    assert profiles[1].description == "Plain"
    text = "\n".join(str(p) for p in problems)
    assert "unknown field(s) tool" in text
    assert "`max_requests` must be a whole number of at least 1" in text
    assert "no system prompt" in text
    assert "`Bad Name` is not a usable profile name" in text


def request(agent: str = "") -> ModelRequest:
    return ModelRequest(model="offline", system="", messages=[user("go")], agent=agent)


async def answer(provider: ScriptedProvider, agent: str = "") -> str:
    async for chunk in provider.stream(request(agent)):
        if isinstance(chunk, Completed):
            return chunk.message.text()
    raise AssertionError("no Completed")


async def test_the_offline_model_answers_each_agent_from_its_own_script(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(
        json.dumps(
            {
                "replies": [{"text": "parent 1"}, {"text": "parent 2"}],
                "agents": {"scout": [{"text": "scout 1"}]},
            }
        )
    )
    provider = ScriptedProvider.from_file(script)
    assert await answer(provider, "scout") == "scout 1"
    assert await answer(provider) == "parent 1"
    assert await answer(provider, "scout") == EXHAUSTED_TEXT
    assert await answer(provider, "general") == "parent 2", "no list of its own: the main one"
    script.write_text(json.dumps({"replies": [], "agents": {"scout": {"text": "not a list"}}}))
    with pytest.raises(ScriptError, match='"agents" must map profile names'):
        ScriptedProvider.from_file(script)


def test_the_progress_view_is_bounded_and_shows_each_calls_last_status() -> None:
    progress = ChildProgress()
    for i in range(MAX_CALLS + 3):
        assert progress.see(ToolCallStarted(f"c{i}", "read_file", f"Read f{i}", "read", {}))
    assert progress.see(ToolCallUpdated("c14", status="completed"))
    assert not progress.see(ToolCallUpdated("c14", status="completed")), "no change, no update"
    assert not progress.see(ToolCallUpdated("elsewhere", status="failed"))
    assert progress.see(MessageCommitted(assistant("x" * (TAIL_CHARS + 50))))
    lines = progress.text().splitlines()
    assert lines[0] == "(3 earlier tool calls)"
    assert lines[1] == "○ Read f3" and lines[MAX_CALLS] == "✓ Read f14"
    assert lines[-1] == "…" + "x" * TAIL_CHARS
    assert progress.text("Done.").splitlines()[-1] == "Done."


def test_a_stored_transcript_shows_an_unanswered_call_as_interrupted() -> None:
    messages = [
        user("task"),
        assistant(
            TextBlock(text="Reading."), ToolUseBlock(id="a", name="read_file", input={"path": "x"})
        ),
        user(ToolResultBlock(tool_use_id="a", content="x")),
        assistant(ToolUseBlock(id="b", name="bash", input={"command": "make test"})),
    ]
    assert transcript_view(messages, finished=False) == (
        "✓ read_file x\n✗ bash make test\n\nReading."
    )
