"""Goal mode is one `Session` operation: `/goal` from an editor and `defect exec --goal` both
run `Session.run_goal` (defect_core/session/protocol.py), on a real core against the strict
fake API.

An editor's `/goal <objective>` reaches `run_turn`, which hands it to `run_goal`; `defect exec`
calls `run_goal` itself (defect_cli/headless.py). Either way the model sees the same first
request — the same system prompt, the same tools (`goal_done` among them), the objective's
prompt — and `last_goal` tells how the goal ended.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from defect_core.config import Settings
from defect_core.model import ContentBlock, TextBlock
from defect_core.session import (
    AgentCore,
    Backends,
    DefaultAgentCore,
    LocalFsBackend,
    LocalShellBackend,
    Session,
)
from defect_fakeapi import DEFAULT_API_KEY, FakeProvider, Reply

pytestmark = pytest.mark.anyio


def goal_core(fake: FakeProvider, monkeypatch: pytest.MonkeyPatch) -> AgentCore:
    monkeypatch.setenv("ANTHROPIC_API_KEY", DEFAULT_API_KEY)
    settings = Settings(
        provider="anthropic", base_url=fake.url, reasoning_effort="off", retry_base_delay=0.001
    )
    return DefaultAgentCore(settings)


async def open_session(core: AgentCore, session_id: str, cwd: Path) -> Session:
    backends = Backends(fs=LocalFsBackend(root=cwd), shell=LocalShellBackend())
    return await core.create_session(session_id, cwd, backends)


def tool_names(body: dict[str, Any]) -> list[str]:
    return [tool.get("name") for tool in body.get("tools", [])]


def first_texts(body: dict[str, Any]) -> list[str]:
    content = body["messages"][0]["content"]
    if isinstance(content, str):
        return [content]
    return [block["text"] for block in content if block["type"] == "text"]


async def test_slash_goal_from_an_editor_runs_the_same_method_as_exec(
    fake_provider: FakeProvider, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    core = goal_core(fake_provider, monkeypatch)
    calls: list[tuple[str, tuple[ContentBlock, ...]]] = []
    try:
        session = await open_session(core, "editor", tmp_path)
        run_goal = session.run_goal

        async def spy(objective: str, prompt: Any = ()) -> Any:
            calls.append((objective, tuple(prompt)))
            return await run_goal(objective, prompt)

        session.run_goal = spy  # type: ignore[method-assign]
        fake_provider.enqueue(Reply.tool_use("toolu_done", "goal_done", {"summary": "Done."}))
        fake_provider.enqueue(Reply.text("Reached."))
        stop = await session.run_turn([TextBlock(text="/goal tidy the README")])
    finally:
        await core.aclose()
    assert stop == "end_turn"
    assert calls == [("tidy the README", ())]
    assert session.last_goal is not None
    assert session.last_goal.outcome == "reached"
    assert session.last_goal.summary == "Done."


async def test_both_front_ends_send_the_model_the_same_goal(
    fake_provider: FakeProvider, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    core = goal_core(fake_provider, monkeypatch)
    try:
        editor = await open_session(core, "editor", tmp_path)
        fake_provider.enqueue(Reply.tool_use("toolu_a", "goal_done", {"summary": "A."}))
        fake_provider.enqueue(Reply.text("Reached."))
        assert await editor.run_turn([TextBlock(text="/goal count the TODOs")]) == "end_turn"
        headless = await open_session(core, "exec", tmp_path)
        fake_provider.enqueue(Reply.tool_use("toolu_b", "goal_done", {"summary": "B."}))
        fake_provider.enqueue(Reply.text("Reached."))
        assert await headless.run_goal("count the TODOs") == "end_turn"
        after = len(fake_provider.requests)
        fake_provider.enqueue(Reply.text("A plain answer."))
        assert await headless.run_turn([TextBlock(text="and now?")]) == "end_turn"
    finally:
        await core.aclose()
    requests = fake_provider.requests
    from_editor, from_exec = requests[0].body, requests[2].body
    assert "goal_done" in tool_names(from_editor)
    assert tool_names(from_editor) == tool_names(from_exec)
    assert from_editor["system"] == from_exec["system"]
    assert first_texts(from_editor) == first_texts(from_exec)
    assert "count the TODOs" in first_texts(from_exec)[0]
    # A goal lasts one turn: the next ordinary prompt is not offered `goal_done`.
    assert "goal_done" not in tool_names(requests[after].body)
    assert headless.last_goal is not None and headless.last_goal.summary == "B."


async def test_a_goal_takes_a_prompt_after_its_own(
    fake_provider: FakeProvider, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    core = goal_core(fake_provider, monkeypatch)
    try:
        session = await open_session(core, "exec", tmp_path)
        fake_provider.enqueue(Reply.tool_use("toolu_c", "goal_done", {"summary": "C."}))
        fake_provider.enqueue(Reply.text("Reached."))
        stop = await session.run_goal("fix the build", [TextBlock(text="start with make")])
    finally:
        await core.aclose()
    assert stop == "end_turn"
    texts = first_texts(fake_provider.requests[0].body)
    assert "fix the build" in texts[0]
    assert texts[1:] == ["start with make"]
