"""A fast stream through the real `defect acp` process: every delta arrives, whole and in order.

When the model streams faster than the agent writes, the pump merges the text deltas queued
behind the one it waited for and writes the batch at once (`defect_acp/updates.py`). What
that may never change is held here: the client sees the model's text exactly, in order, the
thought and the answer never mixed, no delta split; with four sessions streaming at once each
gets its own text only. `coalesce` itself is checked on event lists. A long stored session is
replayed in batches as it is projected: the client gets the very updates the whole-list
projection makes, in order. No timing is asserted: how much merges depends on the machine,
what arrives does not.
"""

from __future__ import annotations

import dataclasses
import json
from itertools import accumulate
from pathlib import Path

import anyio
import pytest

from defect_acp import projection
from defect_acp.transport import encode_message
from defect_acp.updates import REPLAY_BATCH, coalesce
from defect_core import events as ev
from defect_core.model import Message, TextBlock, ThinkingBlock, ToolResultBlock, ToolUseBlock
from defect_core.session.persistence import ToolCallSnapshots
from defect_core.store import (
    DB_FILENAME,
    SessionRecord,
    SqliteStore,
    ToolCallRecord,
    tool_display_to_json,
)
from defect_fakeapi import DEFAULT_API_KEY, FakeProvider, Reply
from tests.support.acp_harness import agent_env, script_env, spawn_defect
from tests.support.replay_models import iter_models

pytestmark = pytest.mark.anyio

PIECE = 8
"""Characters per text delta the fake streams (thinking deltas are twice as long)."""


def anthropic_env(fake: FakeProvider) -> dict[str, str]:
    return agent_env(
        DEFECT_PROVIDER="anthropic",
        ANTHROPIC_BASE_URL=fake.url,
        ANTHROPIC_API_KEY=DEFAULT_API_KEY,
        DEFECT_REASONING_EFFORT="off",
    )


def numbered(tag: str, count: int) -> str:
    """`count` pieces of exactly `PIECE` characters, each different, so order shows."""
    return "".join(f"{tag}{n:0{PIECE - len(tag)}d}" for n in range(count))


def boundaries(text: str, size: int) -> set[int]:
    """Where the fake's deltas of `text` end (it cuts every `size` characters)."""
    return {min(end, len(text)) for end in range(size, len(text) + size, size)}


def burst(text: str, thinking: str | None = None) -> Reply:
    """An answer streamed all at once: every delta written as fast as the fake can."""
    reply = Reply.text(text) if thinking is None else Reply.thinking(thinking, Reply.text(text))
    return dataclasses.replace(reply, chunk_size=PIECE)


async def test_a_burst_of_deltas_arrives_whole_in_order_and_unsplit(
    fake_provider: FakeProvider, tmp_path: Path
) -> None:
    thinking, text = numbered("t", 150), numbered("a", 300)
    fake_provider.enqueue(burst(text, thinking))
    async with spawn_defect(env=anthropic_env(fake_provider)) as agent:
        await agent.initialize()
        sid = await agent.new_session(tmp_path)
        assert (await agent.prompt(sid, "go")).stop_reason == "end_turn"
        updates = [u for s, u in agent.client.updates if s == sid]
        kinds = [u.session_update for u in updates]
        thoughts = [u.content.text for u in updates if u.session_update == "agent_thought_chunk"]
        answer = [u.content.text for u in updates if u.session_update == "agent_message_chunk"]
        # Every character, in order; the thought entirely before the answer, never mixed.
        assert "".join(thoughts) == thinking
        assert "".join(answer) == text
        first_answer = kinds.index("agent_message_chunk")
        assert "agent_thought_chunk" not in kinds[first_answer:]
        # Merging joins whole deltas: every update ends where one of the fake's deltas ended.
        assert set(accumulate(len(t) for t in thoughts)) <= boundaries(thinking, PIECE * 2)
        assert set(accumulate(len(t) for t in answer)) <= boundaries(text, PIECE)
        agent.assert_schema_clean()


async def test_four_sessions_streaming_at_once_each_get_their_own_text(
    fake_provider: FakeProvider, tmp_path: Path
) -> None:
    texts = {numbered(tag, 200) for tag in ("w", "x", "y", "z")}
    fake_provider.enqueue(*(burst(text) for text in sorted(texts)))
    async with spawn_defect(env=anthropic_env(fake_provider)) as agent:
        await agent.initialize()
        sids = [await agent.new_session(tmp_path) for _ in texts]
        stops: list[str] = []

        async def prompt(sid: str) -> None:
            stops.append((await agent.prompt(sid, "go")).stop_reason)

        async with anyio.create_task_group() as group:
            for sid in sids:
                group.start_soon(prompt, sid)
        assert stops == ["end_turn"] * len(sids)
        # Which session got which reply is the fake's choice; each got one whole, unmixed.
        assert {agent.client.text(sid) for sid in sids} == texts
        for sid in sids:
            answer = [
                u.content.text
                for s, u in agent.client.updates
                if s == sid and u.session_update == "agent_message_chunk"
            ]
            assert set(accumulate(len(t) for t in answer)) <= boundaries("".join(answer), PIECE)
        agent.assert_schema_clean()


# --- coalesce, on event lists ---------------------------------------------------------------


def test_coalesce_merges_adjacent_deltas_of_one_kind_in_order() -> None:
    events: list[ev.AgentEvent] = [
        ev.AgentThoughtDelta("think "),
        ev.AgentThoughtDelta("more"),
        ev.AgentTextDelta("Hel"),
        ev.AgentTextDelta("lo, "),
        ev.AgentTextDelta("world"),
    ]
    assert coalesce(events) == [
        ev.AgentThoughtDelta("think more"),
        ev.AgentTextDelta("Hello, world"),
    ]


def test_coalesce_never_merges_across_another_event_nor_moves_one() -> None:
    started = ev.ToolCallStarted(
        tool_call_id="toolu_1",
        name="read_file",
        title="Read a.txt",
        kind="read",
        raw_input={"path": "a.txt"},
    )
    events: list[ev.AgentEvent] = [
        ev.AgentTextDelta("before "),
        ev.AgentTextDelta("the call"),
        started,
        ev.AgentTextDelta("after"),
        ev.AgentThoughtDelta("a thought"),
        ev.AgentTextDelta("last"),
    ]
    assert coalesce(events) == [
        ev.AgentTextDelta("before the call"),
        started,
        ev.AgentTextDelta("after"),
        ev.AgentThoughtDelta("a thought"),
        ev.AgentTextDelta("last"),
    ]


def test_coalesce_keeps_a_lone_event_and_an_empty_batch_as_they_are() -> None:
    single = ev.AgentTextDelta("only")
    assert coalesce([single]) == [single]
    assert coalesce([single])[0] is single
    assert coalesce([]) == []


# --- replay of a long session, in batches ------------------------------------------------------


def write_long_session(db: Path, cwd: Path, turns: int) -> str:
    """A stored session of `turns` tool-using turns, written straight into the store."""
    sid = "sess-long-replay"
    with SqliteStore(db, synchronous="OFF") as store:  # set-up: no fsync per message
        record = SessionRecord(
            id=sid, cwd=str(cwd), provider="scripted", model="scripted", mode="ask"
        )
        store.create(record)
        for n in range(turns):
            call = f"toolu_{n:06d}"
            store.append_message(sid, Message(role="user", content=(TextBlock(text=f"ask {n}"),)))
            reply = (
                ThinkingBlock(thinking=f"thought {n}", signature=f"sig{n}"),
                TextBlock(text=f"reading {n} \u00e9\U0001f600"),
                ToolUseBlock(id=call, name="read_file", input={"path": f"f{n}.txt"}),
            )
            store.append_message(sid, Message(role="assistant", content=reply))
            result = ToolResultBlock(tool_use_id=call, content=f"line {n}")
            store.append_message(sid, Message(role="user", content=(result,)))
            store.upsert_tool_call(
                ToolCallRecord(
                    session_id=sid,
                    tool_call_id=call,
                    title=f"Read f{n}.txt",
                    kind="read",
                    status="completed" if n % 3 else "failed",
                    content=[tool_display_to_json(ev.TextDisplay(f"line {n}"))],
                    raw_input={"path": f"f{n}.txt"},
                )
            )
    return sid


async def test_a_long_replay_sends_the_same_updates_in_order(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (tmp_path / "state").mkdir()
    db = tmp_path / "state" / DB_FILENAME
    turns = REPLAY_BATCH  # 4 updates a turn: several batches, the last one partial
    sid = write_long_session(db, work, turns)
    with SqliteStore(db) as store:
        stored = store.load(sid)
    # What the SDK itself would have written for each update of the whole-list projection,
    # each message's chunks carrying its id.
    ids = [ev.message_id(*name) for name in stored.ids]
    calls = ToolCallSnapshots(stored.tool_calls)
    expected = [
        projection.session_notification(sid, u)["params"]
        for u in iter_models(stored.transcript, calls, message_ids=ids)
    ]
    assert len(expected) == 4 * turns

    async with spawn_defect(env=script_env(tmp_path)) as agent:
        await agent.initialize()
        await agent.conn.load_session(cwd=str(work), session_id=sid, mcp_servers=[])
        replayed = [
            m["params"] for m in agent.wire.from_agent() if m.get("method") == "session/update"
        ]
        assert replayed[: len(expected)] == expected
        assert agent.client.text(sid).startswith("reading 0 \u00e9\U0001f600")
        agent.assert_schema_clean()


def test_update_line_is_the_line_encode_message_writes() -> None:
    update = projection.message_text('quote " newline \n tab \t \u00e9 \U0001f600 \x01')
    line = projection.update_line("sess-1", update)
    assert line == encode_message(projection.session_notification("sess-1", update))
    # A lone surrogate (UTF-8 cannot carry it) is mended as the transport mends it.
    broken = projection.message_text("half \ud800 pair")
    mended = projection.update_line("sess-1", broken)
    assert mended == encode_message(projection.session_notification("sess-1", broken))
    assert mended is not None
    assert json.loads(mended)["params"]["update"]["content"]["text"] == "half \ufffd pair"
