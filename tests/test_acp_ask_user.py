"""`ask_user` through the real `defect acp` process: a form where the client has ACP
elicitation, a permission question's options where it has not, no permission asked in any
mode, and every way a question ends without an answer (declined, the client's error, a cancel
of the turn, a time-out); in `defect exec` and in a subagent it answers at once that no one
is there; a loaded session shows the question's card again."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from acp import RequestError
from acp import schema as s

from tests.support.acp_harness import Agent, RecordingClient, script_env, spawn_defect
from tests.test_exec import defect_exec, json_lines

pytestmark = pytest.mark.anyio

ASK = {
    "name": "ask_user",
    "id": "toolu_ask",
    "input": {
        "question": "Which colour should the button be?",
        "options": [
            {"label": "Blue", "description": "the brand colour"},
            {"label": "Green"},
        ],
        "allow_free_text": True,
    },
}
REPLIES: list[dict[str, Any]] = [{"tool_calls": [ASK]}, {"text": "Done."}]


def final_text(agent: Agent) -> str:
    """What the `ask_user` card shows at its end: the text the model read."""
    finals = [
        u
        for _, u in agent.client.updates
        if u.session_update == "tool_call_update"
        and u.tool_call_id == "toolu_ask"
        and u.status in ("completed", "failed")
    ]
    assert len(finals) == 1, finals
    return json.dumps(finals[0].model_dump(mode="json"))


async def ask(
    tmp_path: Path, client: RecordingClient, *caps: str, mode: str | None = None, **env: str
) -> tuple[Agent, str]:
    async with spawn_defect(env=script_env(tmp_path, REPLIES, **env), client=client) as agent:
        await agent.initialize(elicitation=caps)
        sid = await agent.new_session(tmp_path)
        if mode is not None:
            await agent.conn.set_session_mode(session_id=sid, mode_id=mode)
        stop = (await agent.prompt(sid, "style the button")).stop_reason
        return agent, stop


def accept(content: dict[str, Any]) -> Any:
    return lambda _message, _mode: s.AcceptElicitationResponse(action="accept", content=content)


async def test_a_form_where_the_client_has_elicitation_and_no_permission_in_read_only(
    tmp_path: Path,
) -> None:
    client = RecordingClient(elicitation=accept({"choice": "Blue", "text": "navy, really"}))
    agent, stop = await ask(tmp_path, client, "form", mode="read-only")
    assert stop == "end_turn"
    assert client.permission_requests == [], "asking needs no permission, read-only included"
    [(message, mode)] = client.elicitations
    assert message == "Which colour should the button be?"
    assert isinstance(mode, s.ElicitationFormSessionMode) and mode.tool_call_id == "toolu_ask"
    choice = mode.requested_schema.properties["choice"]
    assert [o.const for o in choice.one_of] == ["Blue", "Green"]
    assert choice.one_of[0].description == "the brand colour"
    assert "text" in mode.requested_schema.properties, "free text where the model allows it"
    [card] = [u for _, u in client.updates if u.session_update == "tool_call"]
    assert card.kind == "think" and card.title == "Question: Which colour should the button be?"
    text = final_text(agent)
    assert "The user chose: Blue" in text and "navy, really" in text


async def test_the_permission_fallback_offers_the_options_and_says_free_text_was_not_possible(
    tmp_path: Path,
) -> None:
    client = RecordingClient(permission=lambda _request: "answer-1")
    agent, stop = await ask(tmp_path, client)
    assert stop == "end_turn" and client.elicitations == []
    [request] = client.permission_requests
    assert [o.name for o in request.options] == ["Blue", "Green", "Don't answer"]
    assert request.tool_call.tool_call_id == "toolu_ask"
    text = final_text(agent)
    assert "The user chose: Green" in text and "could not type an answer" in text


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        (lambda _m, _d: s.DeclineElicitationResponse(action="decline"), "declined to answer"),
        (lambda _m, _d: s.CancelElicitationResponse(action="cancel"), "dismissed the question"),
        (lambda _m, _d: RequestError(-32603, "the form broke"), "could not ask the question"),
    ],
)
async def test_a_question_not_answered_says_why(tmp_path: Path, answer: Any, expected: str) -> None:
    agent, stop = await ask(tmp_path, RecordingClient(elicitation=answer), "form")
    assert stop == "end_turn"
    text = final_text(agent)
    assert expected in text and "best judgement" in text
    if "broke" in expected:
        assert "the form broke" in text


async def test_a_question_times_out_and_is_withdrawn(tmp_path: Path) -> None:
    client = RecordingClient(permission_gate=asyncio.Event())  # never answers
    agent, stop = await ask(tmp_path, client, "form", DEFECT_ASK_TIMEOUT="0.5")
    assert stop == "end_turn" and len(client.elicitations) == 1
    assert "no answer came within 0.5 seconds" in final_text(agent)


async def test_a_cancel_while_the_question_waits_cancels_the_call_and_the_turn(
    tmp_path: Path,
) -> None:
    gate = asyncio.Event()
    client = RecordingClient(permission_gate=gate)
    async with spawn_defect(env=script_env(tmp_path, REPLIES), client=client) as agent:
        await agent.initialize(elicitation=("form",))
        sid = await agent.new_session(tmp_path)
        prompt = asyncio.create_task(agent.prompt(sid, "style the button"))
        await client.wait_for(lambda: bool(client.elicitations))
        await agent.conn.cancel(session_id=sid)
        assert (await prompt).stop_reason == "cancelled"
        text = final_text(agent)
        assert '"status": "failed"' in text and "Cancelled" in text
        gate.set()  # the client answers late: nothing waits for it any more
        assert "Done." not in client.text(sid)


def test_exec_answers_at_once_that_no_one_is_there(tmp_path: Path) -> None:
    done = defect_exec(tmp_path, REPLIES, "--output", "stream-json", "style the button")
    assert done.returncode == 0, done.stderr
    events = json_lines(done.stdout)
    updates = [e for e in events if e["type"] == "tool_call_update" and e["id"] == "toolu_ask"]
    assert updates and "No one is there to answer" in json.dumps(updates[-1])
    assert events[-1]["text"] == "Done."


async def test_a_loaded_session_replays_the_question_and_its_answer(tmp_path: Path) -> None:
    client = RecordingClient(elicitation=accept({"choice": "Green"}))
    async with spawn_defect(env=script_env(tmp_path, REPLIES), client=client) as first:
        await first.initialize(elicitation=("form",))
        sid = await first.new_session(tmp_path)
        assert (await first.prompt(sid, "style the button")).stop_reason == "end_turn"
    replayed = RecordingClient()
    async with spawn_defect(env=script_env(tmp_path), client=replayed) as second:
        await second.initialize()
        await second.conn.load_session(cwd=str(tmp_path), session_id=sid, mcp_servers=[])
        [card] = [
            u
            for _, u in replayed.updates
            if u.session_update == "tool_call" and u.tool_call_id == "toolu_ask"
        ]
        assert card.kind == "think" and card.title == "Question: Which colour should the button be?"
        shown = json.dumps([u.model_dump(mode="json") for _, u in replayed.updates])
        assert "The user chose: Green" in shown


async def test_a_client_that_advertised_forms_but_lacks_them_gets_the_options(
    tmp_path: Path,
) -> None:
    client = RecordingClient(
        elicitation=lambda _m, _d: RequestError.method_not_found("elicitation/create"),
        permission=lambda _request: "answer-0",
    )
    agent, stop = await ask(tmp_path, client, "form")
    assert stop == "end_turn" and len(client.elicitations) == 1
    assert len(client.permission_requests) == 1
    assert "The user chose: Blue" in final_text(agent)


async def test_a_subagent_asks_no_one(tmp_path: Path) -> None:
    spawn = {
        "name": "spawn_agent",
        "id": "toolu_spawn",
        "input": {"agent": "general", "task": "Pick the button colour."},
    }
    script = tmp_path / "agents.json"
    script.write_text(
        json.dumps(
            {
                "replies": [{"tool_calls": [spawn]}, {"text": "Parent done."}],
                "agents": {"general": [{"tool_calls": [ASK]}, {"text": "I assumed Blue."}]},
            }
        )
    )
    client = RecordingClient(elicitation=accept({"choice": "Green"}))
    env = script_env(tmp_path, DEFECT_SCRIPT=str(script))
    async with spawn_defect(env=env, client=client) as agent:
        await agent.initialize(elicitation=("form",))
        sid = await agent.new_session(tmp_path)
        await agent.conn.set_session_mode(session_id=sid, mode_id="yolo")
        assert (await agent.prompt(sid, "style the button")).stop_reason == "end_turn"
        assert client.elicitations == [] and client.permission_requests == []
        shown = json.dumps([u.model_dump(mode="json") for _, u in client.updates])
        assert "I assumed Blue." in shown and "Parent done." in client.text(sid)
