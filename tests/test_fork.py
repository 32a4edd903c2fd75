"""Forks through the real `defect acp` process, against the strict fake Anthropic API.

`session/fork` (ACP, unstable) and the `/fork` command make a new session that shares the
history so far (or up to before a prompt): each test prompts in both, checks that each next
request the model gets carries only its own branch (and is one the real API would take),
restarts the process to load and list both, and deletes one to see the other stay whole. The
database is read as an auditor would: the shared prefix is stored once.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from acp import RequestError
from acp import schema as s

from defect_fakeapi import Reply
from tests.support.acp_harness import Agent, RecordingClient
from tests.support.workspace_rig import Place, accepted, load, new_session, running, say

pytestmark = pytest.mark.anyio

FORK_ID = re.compile(r"sess_[0-9a-f]{32}")


@pytest.fixture
def place(tmp_path: Path) -> Place:
    return Place(tmp_path)


def always(_: s.RequestPermissionRequest) -> str:
    return "allow_always"


def texts(messages: list[dict[str, Any]]) -> list[str]:
    """Each message of a request, as the text (or tool call/result) it carries."""
    out = []
    for message in messages:
        content = message["content"]
        if isinstance(content, str):
            out.append(content)
            continue
        parts = []
        for block in content:
            if block["type"] == "text":
                parts.append(block["text"])
            elif block["type"] in ("tool_use", "tool_result"):
                parts.append(f"{block['type']}:{block.get('id') or block.get('tool_use_id')}")
        out.append(" ".join(parts))
    return out


async def session_list(agent: Agent, place: Place) -> dict[str, str | None]:
    page = await agent.conn.list_sessions(cwd=str(place.work))
    return {item.session_id: item.title for item in page.sessions}


def effort(options: list[Any] | None) -> str | None:
    for option in options or []:
        if option.id == "reasoning_effort":
            return str(option.current_value)
    return None


async def test_session_fork_diverges_survives_a_restart_and_outlives_its_origin(
    place: Place,
) -> None:
    write = Reply.tool_use("toolu_w", "bash", {"command": "touch a.txt"})
    write_b = Reply.tool_use("toolu_b", "bash", {"command": "touch a.txt"})  # the same again
    replies = (
        write,
        Reply.text("Written."),
        Reply.text("Origin on."),
        write_b,
        Reply.text("Fork on."),
    )
    async with running(place, *replies, client=RecordingClient(permission=always)) as (
        agent,
        fake,
    ):
        origin = await agent.new_session(place.work)
        await agent.conn.set_session_mode(session_id=origin, mode_id="accept-edits")
        await agent.conn.set_config_option(
            session_id=origin, config_id="reasoning_effort", value="off"
        )
        await say(agent, origin, "Make a.txt.")
        assert len(agent.client.permission_requests) == 1  # a command: asked, "always"

        with pytest.raises(RequestError) as unknown:
            await agent.conn.fork_session(session_id="sess_none", cwd=str(place.work))
        assert unknown.value.code == -32002
        forked = await agent.conn.fork_session(
            session_id=origin, cwd=str(place.work), mcp_servers=[]
        )
        fork = forked.session_id
        assert fork != origin and FORK_ID.fullmatch(fork)
        assert forked.modes is not None and forked.modes.current_mode_id == "accept-edits"
        assert effort(forked.config_options) == "off"  # the origin's, not the default
        await agent.client.wait_for(lambda: "available_commands_update" in agent.client.kinds(fork))
        assert agent.client.text(fork) == ""  # not replayed: the client has the history

        assert await say(agent, origin, "Go on here.") == "Origin on."
        (place.work / "a.txt").unlink()
        assert await say(agent, fork, "Go on there.") == "Fork on."
        requests = accepted(fake)
        fake.assert_script_consumed()
    # The fork ran `touch a.txt` without asking: it has the origin's "always" answer for it.
    assert len(agent.client.permission_requests) == 1
    assert (place.work / "a.txt").exists()
    origin_next, fork_next = (texts(r.body["messages"]) for r in requests[2:4])
    shared = ["Make a.txt.", "tool_use:toolu_w", "tool_result:toolu_w", "Written."]
    assert origin_next == [*shared, "Go on here."]
    assert fork_next == [*shared, "Go on there."]
    assert "thinking" not in requests[3].body  # effort "off", copied with the config
    assert requests[3].body["system"] == requests[2].body["system"]

    # Stored once: the fork's rows are only its own two messages; its record copies the
    # origin's config and "always" answers, under its own title.
    assert place.rows("SELECT COUNT(*) FROM messages WHERE session_id = ?", fork) == [(4,)]
    assert place.rows("SELECT COUNT(*) FROM messages WHERE session_id = ?", origin) == [(6,)]
    ((o_title, o_config, o_rules),) = place.rows(
        "SELECT title, config, permissions FROM sessions WHERE id = ?", origin
    )
    ((f_title, f_config, f_rules, fork_of),) = place.rows(
        "SELECT title, config, permissions, fork_of FROM sessions WHERE id = ?", fork
    )
    assert o_title == "Make a.txt." and f_title == "Make a.txt. (fork)"
    assert (f_config, f_rules, fork_of) == (o_config, o_rules, origin)
    assert "touch" in f_rules

    async with running(place) as (agent, fake):
        assert await session_list(agent, place) == {origin: o_title, fork: f_title}
        await load(agent, place, origin)
        await load(agent, place, fork)
        assert agent.client.text(origin) == "Written.Origin on."
        assert agent.client.text(fork) == "Written.Fork on."
        cards = [
            u
            for sid, u in agent.client.updates
            if sid == fork and u.session_update == "tool_call" and u.tool_call_id == "toolu_w"
        ]
        # The fork replays the shared call as it was shown live (its own copy of the state).
        assert [(c.kind, c.status) for c in cards] == [("execute", "completed")]
        # Deleting the origin leaves the fork whole: closed and loaded again from the store.
        await agent.conn._conn.send_request("session/delete", {"sessionId": origin})
        await agent.conn.close_session(session_id=fork)
        assert await session_list(agent, place) == {fork: f_title}
        before = len(agent.client.text(fork))
        await load(agent, place, fork)
        assert agent.client.text(fork)[before:] == "Written.Fork on."
        fake.enqueue(Reply.text("Still here."))
        assert await say(agent, fork, "And now?") == "Still here."
        request = accepted(fake)[-1]
    assert texts(request.body["messages"]) == [
        *shared,
        "Go on there.",
        "tool_use:toolu_b",
        "tool_result:toolu_b",
        "Fork on.",
        "And now?",
    ]


async def test_fork_command_forks_whole_or_before_a_prompt_and_each_goes_its_own_way(
    place: Place,
) -> None:
    replies = (Reply.text("One."), Reply.text("Two."), Reply.text("F1."), Reply.text("F2."))
    async with running(place, *replies) as (agent, fake):
        origin = await new_session(agent, place)
        await say(agent, origin, "First.")
        await say(agent, origin, "Second.")
        commands = [
            [c.name for c in u.available_commands]
            for sid, u in agent.client.updates
            if sid == origin and u.session_update == "available_commands_update"
        ]
        assert "fork" in commands[-1]

        assert "There is no prompt 9" in await say(agent, origin, "/fork 9")
        assert "Usage: /fork" in await say(agent, origin, "/fork now")
        answer = await say(agent, origin, "/fork")
        (whole,) = set(FORK_ID.findall(answer))
        assert "this conversation so far (4 messages)" in answer
        assert '"First. (fork)"' in answer and "session/load" in answer
        answer = await say(agent, origin, "/fork 2")
        (before_2,) = set(FORK_ID.findall(answer))
        assert 'up to before prompt 2 ("Second.")' in answer
        assert len(fake.requests) == 2  # commands never reach the model

        await load(agent, place, whole)
        await load(agent, place, before_2)
        assert agent.client.text(whole) == "One.Two."
        assert agent.client.text(before_2) == "One."
        assert await say(agent, whole, "Third, in the whole fork.") == "F1."
        assert await say(agent, before_2, "Second, differently.") == "F2."
        requests = accepted(fake)
        fake.assert_script_consumed()
    assert texts(requests[2].body["messages"]) == [
        "First.",
        "One.",
        "Second.",
        "Two.",
        "Third, in the whole fork.",
    ]
    assert texts(requests[3].body["messages"]) == ["First.", "One.", "Second, differently."]

    async with running(place) as (agent, _fake):
        titles = await session_list(agent, place)
        assert set(titles) == {origin, whole, before_2}
        assert titles[whole] == titles[before_2] == "First. (fork)"
        await agent.conn._conn.send_request("session/delete", {"sessionId": whole})
        assert set(await session_list(agent, place)) == {origin, before_2}
        await load(agent, place, origin)
        await load(agent, place, before_2)
        assert agent.client.text(origin) == "One.Two."  # a command's answer is not history
        assert agent.client.text(before_2) == "One.F2."
