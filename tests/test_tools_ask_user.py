"""`ask_user` and the session's questions, in process: what the model reads for every way a
question ends, a session no one can answer, a subagent's copy of the tool, and the waiting
rules of `SessionQuestions` (a time-out withdraws the question, a late answer is ignored,
closing answers `cancel`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from defect_core.agents.child import _child_tools
from defect_core.catalog.agents import AgentProfile
from defect_core.events import AgentEvent, Answer, Question, QuestionAsked, QuestionWithdrawn
from defect_core.session.questions import SessionQuestions
from defect_core.tools.ask_user import AskUserTool, answer_text
from defect_core.tools.backends import LocalFsBackend, LocalShellBackend
from defect_core.tools.base import ToolContext, ToolError, ToolRegistry
from tests.support.tool_facts import full_facts

pytestmark = pytest.mark.anyio

ARGS = {"question": "Tabs or spaces?", "options": [{"label": "Tabs"}, {"label": "Spaces"}]}


def context(tmp_path: Path) -> ToolContext:
    return ToolContext(
        session_id="s",
        cwd=tmp_path,
        fs=LocalFsBackend(root=tmp_path),
        shell=LocalShellBackend(),
        tool_call_id="toolu_1",
    )


@pytest.mark.parametrize(
    ("answer", "free_text", "expected"),
    [
        (Answer("accept", {"choice": "Tabs"}, via="form"), False, "The user chose: Tabs."),
        (
            Answer("accept", {"choice": "Tabs", "text": "but 2 wide"}, via="form"),
            True,
            "The user chose: Tabs. The user answered in their own words: but 2 wide.",
        ),
        (Answer("accept", {"choice": "Tabs"}, via="options"), True, "could not type"),
        (Answer("decline"), False, "declined to answer"),
        (Answer("cancel"), False, "dismissed the question"),
        (Answer("timeout", detail="no answer came within 5 seconds"), False, "within 5 seconds"),
        (Answer("failed", detail="error -32601: Method not found"), False, "Method not found"),
        (Answer("unavailable", detail="the session runs without an editor"), False, "No one"),
    ],
)
def test_the_model_reads_how_the_question_ended(
    answer: Answer, free_text: bool, expected: str
) -> None:
    assert expected in answer_text(answer, free_text)


async def test_the_question_goes_to_the_asker_with_the_call_it_belongs_to(tmp_path: Path) -> None:
    asked: list[Question] = []

    async def ask(question: Question) -> Answer:
        asked.append(question)
        return Answer("accept", {"choice": "Spaces"}, via="form")

    output = await AskUserTool(ask).run(ARGS, context(tmp_path))
    [question] = asked
    assert question.kind == "choice" and question.tool_call_id == "toolu_1"
    assert [c.label for c in question.choices] == ["Tabs", "Spaces"] and not question.free_text
    assert output.content == "The user chose: Spaces." and not output.is_error


async def test_bad_arguments_are_refused_before_anyone_is_asked(tmp_path: Path) -> None:
    async def ask(_question: Question) -> Answer:
        raise AssertionError("asked")

    with pytest.raises(ToolError, match="options"):
        await AskUserTool(ask).run({**ARGS, "options": [{"label": "Only"}]}, context(tmp_path))


async def test_a_subagents_ask_user_answers_that_no_one_is_there(tmp_path: Path) -> None:
    async def ask(_question: Question) -> Answer:
        raise AssertionError("a subagent asked the user")

    facts = full_facts()
    assert facts.lineage is not None
    facts.lineage.tools.add(AskUserTool(ask))
    profile = AgentProfile(name="general", description="d", prompt="p", tools=None)
    tools: ToolRegistry = _child_tools(facts.lineage, profile)
    tool = tools.get("ask_user")
    assert tool is not None
    output = await tool.run(ARGS, context(tmp_path))
    assert "No one is there to answer" in str(output.content) and "subagent" in str(output.content)


async def test_a_session_no_one_can_answer_answers_at_once() -> None:
    published: list[AgentEvent] = []

    async def publish(event: AgentEvent) -> None:
        published.append(event)

    questions = SessionQuestions("s", publish, interactive=False)
    answer = await questions.ask(Question("q?", "choice"))
    assert answer.action == "unavailable" and published == []


async def test_an_unanswered_question_times_out_and_is_withdrawn() -> None:
    published: list[Any] = []

    async def publish(event: AgentEvent) -> None:
        published.append(event)

    questions = SessionQuestions("s", publish, interactive=True, timeout=0.05)
    answer = await questions.ask(Question("q?", "choice"))
    assert answer.action == "timeout"
    [asked, withdrawn] = published
    assert isinstance(asked, QuestionAsked) and isinstance(withdrawn, QuestionWithdrawn)
    assert withdrawn.question_id == asked.question.question_id != ""
    questions.answer(asked.question.question_id, Answer("decline"))  # late: ignored


async def test_an_answer_reaches_its_question_and_closing_cancels_the_rest() -> None:
    published: list[Any] = []

    async def publish(event: AgentEvent) -> None:
        published.append(event)

    questions = SessionQuestions("s", publish, interactive=True)
    answers: list[Answer] = []

    async def one() -> None:
        answers.append(await questions.ask(Question("q?", "choice")))

    async with anyio.create_task_group() as tg:
        tg.start_soon(one)
        tg.start_soon(one)
        while len(published) < 2:
            await anyio.sleep(0.01)
        first, second = (event.question.question_id for event in published)
        assert first != second
        questions.answer(first, Answer("accept", {"choice": "Tabs"}))
        questions.answer("q-unknown", Answer("decline"))  # no such question: ignored
        while not answers:
            await anyio.sleep(0.01)
        questions.cancel_all()
    assert [a.action for a in answers] == ["accept", "cancel"]
