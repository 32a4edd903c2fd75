"""Message ids (ACP's `messageId`) and the session's info update, through real `defect acp`
processes sharing one store: every chunk of a message of the conversation carries the id it
is stored under, live and replayed alike; a new message never reuses one; text that is not
the conversation's carries none (docs/acp-additions.md, "Message ids")."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest

from tests.support.acp_harness import RecordingClient, script_env, spawn_defect

pytestmark = pytest.mark.anyio

CHUNKS = ("user_message_chunk", "agent_message_chunk", "agent_thought_chunk")


def chunks(
    client: RecordingClient, sid: str, start: int = 0, end: int | None = None
) -> list[tuple[str, str | None, str]]:
    """`(kind, messageId, text)` of every text chunk of `sid` among updates `start:end`."""
    return [
        (u.session_update, u.message_id, getattr(u.content, "text", ""))
        for session, u in client.updates[start:end]
        if session == sid and u.session_update in CHUNKS
    ]


def messages(seen: list[tuple[str, str | None, str]]) -> list[tuple[str, str, str]]:
    """The chunks joined into messages: `(kind, id, text)` per run of one kind and one id."""
    joined: list[list[Any]] = []
    for kind, mid, text in seen:
        assert mid is not None, f"a {kind} without a message id: {text!r}"
        if joined and joined[-1][0] == kind and joined[-1][1] == mid:
            joined[-1][2] += text
        else:
            joined.append([kind, mid, text])
    return [(kind, mid, text) for kind, mid, text in joined]


async def test_live_ids_are_the_ids_a_load_replays(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "README.md").write_text("# Demo\n")
    replies = [
        {
            "thinking": "look first",
            "text": "Reading.",
            "tool_calls": [{"name": "read_file", "input": {"path": "README.md"}}],
        },
        {"text": "It is a demo."},
        {"text": "Second answer."},
        {"text": "Third answer."},
    ]
    live = RecordingClient()
    async with spawn_defect(env=script_env(tmp_path, replies), client=live) as first:
        await first.initialize()
        sid = await first.new_session(work)
        assert (await first.prompt(sid, "what is this?")).stop_reason == "end_turn"
        assert (await first.prompt(sid, "and then?")).stop_reason == "end_turn"
        before_help = len(live.updates)
        assert (await first.prompt(sid, "/help")).stop_reason == "end_turn"
        # A load of the live session replays what it holds, with the same ids.
        before_load = len(live.updates)
        await first.conn.load_session(cwd=str(work), session_id=sid, mcp_servers=[])
        reloaded = messages(chunks(live, sid, before_load))
        first.assert_schema_clean()
    streamed = messages(chunks(live, sid, 0, before_help))
    assert [(kind, text) for kind, _, text in streamed] == [
        ("agent_thought_chunk", "look first"),
        ("agent_message_chunk", "Reading."),
        ("agent_message_chunk", "It is a demo."),
        ("agent_message_chunk", "Second answer."),
    ]
    assert [m for m in reloaded if m[0] != "user_message_chunk"] == streamed
    ids = [mid for _, mid, _ in streamed]
    assert ids[0] == ids[1], "a message's thinking and text are one message"
    assert len({ids[1], ids[2], ids[3]}) == 3, "each answer is a message of its own"
    # /help answers outside the conversation: its text carries no id.
    help_chunks = chunks(live, sid, before_help, before_load)
    assert help_chunks and all(mid is None for _, mid, _ in help_chunks)
    # The session was named once, with the time it was named.
    infos = [u for s, u in live.updates if s == sid and u.session_update == "session_info_update"]
    assert [u.title for u in infos] == ["what is this?"]
    assert infos[0].updated_at is not None
    assert dt.datetime.fromisoformat(infos[0].updated_at).utcoffset() == dt.timedelta(0)

    replayed = RecordingClient()
    async with spawn_defect(env=script_env(tmp_path, replies[3:]), client=replayed) as second:
        await second.initialize()
        await second.conn.load_session(cwd=str(work), session_id=sid, mcp_servers=[])
        loaded = messages(chunks(replayed, sid))
        assert [m for m in loaded if m[0] != "user_message_chunk"] == streamed
        prompts = [m for m in loaded if m[0] == "user_message_chunk"]
        assert [text for _, _, text in prompts] == ["what is this?", "and then?"]
        assert not {mid for _, mid, _ in prompts} & set(ids), "a prompt has an id of its own"
        start = len(replayed.updates)
        assert (await second.prompt(sid, "more?")).stop_reason == "end_turn"
        after = messages(chunks(replayed, sid, start))
        assert [text for _, _, text in after] == ["Third answer."]
        every = {mid for _, mid, _ in loaded}
        assert after[0][1] not in every, "a new message never reuses an id"
        second.assert_schema_clean()
