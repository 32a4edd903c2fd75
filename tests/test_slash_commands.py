"""The table of built-in slash commands (`defect_core/session/slash_commands.py`), walked row by
row: every row is offered with its hint, runs its own handler and is listed by `/help`; an
unknown `/name` reaches the model as text; availability gates offer and dispatch alike.

Through the real `defect acp` process on the offline model, and on a `CommandBook` alone."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from defect_core.model import ContentBlock, ImageBlock, TextBlock
from defect_core.session.commands import GOAL_USAGE
from defect_core.session.slash_commands import (
    RESERVED,
    SLASH_COMMANDS,
    CommandBook,
    CommandFacts,
    CommandScope,
    Reply,
)
from defect_fakeapi import DEFAULT_API_KEY, FakeProvider
from defect_fakeapi import Reply as ApiReply
from tests.support.acp_harness import Agent, agent_env, spawn_defect

pytestmark = pytest.mark.anyio

ANSWERS = {
    "compact": "Nothing to compact yet: the conversation is too short.",
    "context": "Context: ~",
    "goal": GOAL_USAGE,
    "rewind": "Nothing to rewind yet: this session has no prompts.",
    "trust": "This project sets nothing that needs trust.",
    "fork": "Forked this conversation so far",
    "help": "Commands:\n- /compact [what to keep (optional)] — ",
}
"""How each row's own answer starts, on a fresh saved session of a plain directory."""


def last_offer(agent: Agent, sid: str) -> list[tuple[str, str, str | None]]:
    lists = [
        u.available_commands
        for s_id, u in agent.client.updates
        if s_id == sid and u.session_update == "available_commands_update"
    ]
    assert lists, "no available_commands_update was sent"
    return [
        (c.name, c.description, None if c.input is None else c.input.root.hint) for c in lists[-1]
    ]


async def answer(agent: Agent, sid: str, text: str) -> str:
    before = len(agent.client.text(sid))
    response = await agent.prompt(sid, text)
    assert response.stop_reason == "end_turn"
    return agent.client.text(sid)[before:]


def test_every_row_has_its_own_name_handler_and_expected_answer() -> None:
    names = [c.name for c in SLASH_COMMANDS]
    assert len(set(names)) == len(names) and set(names) == RESERVED
    assert len({c.handler for c in SLASH_COMMANDS}) == len(SLASH_COMMANDS)
    assert set(ANSWERS) == set(names), "a new row needs its expected answer here"


async def test_the_table_drives_the_offer_the_dispatch_and_help(tmp_path: Path) -> None:
    commands = tmp_path / ".defect" / "commands"
    commands.mkdir(parents=True)
    (commands / "review.md").write_text(
        "---\ndescription: Review a file\nargument-hint: <file>\n---\nReview $ARGUMENTS now.",
        encoding="utf-8",
    )
    async with spawn_defect() as agent:
        await agent.initialize()
        sid = await agent.new_session(tmp_path)
        await agent.client.wait_for(lambda: "available_commands_update" in agent.client.kinds(sid))
        table = [(c.name, c.description, c.hint) for c in SLASH_COMMANDS]
        assert last_offer(agent, sid) == [*table, ("review", "Review a file (project)", "<file>")]

        answers = {c.name: await answer(agent, sid, f"/{c.name}") for c in SLASH_COMMANDS}
        for name, text in answers.items():
            assert text.startswith(ANSWERS[name]), (name, text)
        assert len(set(answers.values())) == len(answers), "each row answers on its own"

        listed = answers["help"]
        for c in SLASH_COMMANDS:
            assert f"- /{c.name}" in listed and c.description in listed
        assert "- /review [<file>] — Review a file (project)" in listed
        agent.assert_schema_clean()


async def test_an_unknown_command_is_text_for_the_model(
    fake_provider: FakeProvider, tmp_path: Path
) -> None:
    fake_provider.enqueue(ApiReply.text("Read as text."))
    env = agent_env(
        DEFECT_PROVIDER="anthropic",
        ANTHROPIC_BASE_URL=fake_provider.url,
        ANTHROPIC_API_KEY=DEFAULT_API_KEY,
        DEFECT_REASONING_EFFORT="off",
    )
    async with spawn_defect(env=env) as agent:
        await agent.initialize()
        sid = await agent.new_session(tmp_path)
        assert await answer(agent, sid, "/nonexistent do this") == "Read as text."
        agent.assert_schema_clean()
    (request,) = fake_provider.requests
    content = request.body["messages"][-1]["content"]
    typed = content if isinstance(content, str) else content[0]["text"]
    assert typed == "/nonexistent do this"


def scope_for(book: CommandBook) -> CommandScope:
    """A scope for handlers that read only the book (`/help`)."""
    return CommandScope(
        session_id="s",
        store=None,
        compactor=None,  # type: ignore[arg-type]
        history=None,  # type: ignore[arg-type]
        transcript=(),
        ids=(),
        config=None,  # type: ignore[arg-type]
        tools=tuple,
        rewinder=None,  # type: ignore[arg-type]
        trusting=None,  # type: ignore[arg-type]
        start_goal=lambda _objective: [],
        book=book,
    )


async def test_availability_gates_offer_dispatch_and_help(tmp_path: Path) -> None:
    async def saved_only(_scope: CommandScope, _args: str) -> Reply:
        return "ran"

    row = dataclasses.replace(
        SLASH_COMMANDS[0], name="saved-only", handler=saved_only, available=lambda f: f.saved
    )
    table = (*SLASH_COMMANDS, row)
    prompt: list[ContentBlock] = [TextBlock(text="/saved-only now")]

    unsaved = CommandBook(tmp_path, CommandFacts(saved=False), table)
    assert "saved-only" not in [o.name for o in unsaved.offered()]
    assert unsaved.builtin(prompt) is None  # not dispatched: the model would read it
    assert "/saved-only" not in await SLASH_COMMANDS[-1].handler(scope_for(unsaved), "")

    saved = CommandBook(tmp_path, CommandFacts(saved=True), table)
    assert [o.name for o in saved.offered()][-1] == "saved-only"
    found = saved.builtin(prompt)
    assert found is not None and found[0] is row and found[1] == "now"
    assert await found[0].handler(scope_for(saved), found[1]) == "ran"


def test_only_a_lone_text_block_naming_a_row_is_a_command(tmp_path: Path) -> None:
    book = CommandBook(tmp_path, CommandFacts(saved=True))
    for c in SLASH_COMMANDS:
        found = book.builtin([TextBlock(text=f"  /{c.name}  some words ")])
        assert found is not None and found[0] is c and found[1] == "some words"
    image = ImageBlock(media_type="image/png", data="")
    assert book.builtin([TextBlock(text="/context"), image]) is None
    assert book.builtin([TextBlock(text="please /context")]) is None
    assert book.builtin([TextBlock(text="/contextual")]) is None


async def test_a_custom_command_never_takes_a_rows_name(tmp_path: Path) -> None:
    commands = tmp_path / ".defect" / "commands"
    commands.mkdir(parents=True)
    (commands / "help.md").write_text("Say hello.", encoding="utf-8")
    (commands / "hello.md").write_text("Say hello.", encoding="utf-8")
    book = CommandBook(tmp_path, CommandFacts(saved=True))
    assert await book.refresh()
    names = [o.name for o in book.offered()]
    assert names.count("help") == 1 and names[-1] == "hello"
    found = book.builtin([TextBlock(text="/help")])
    assert found is not None and found[0].name == "help"
    assert book.custom_prompt([TextBlock(text="/help")]) is None
