"""`/rewind` through the real `defect acp` process, against the strict fake Anthropic API.

Each test drives real tools on real files (a git work tree for `bash` side effects), reads
the session database and the state directory as an auditor would, and restarts the process
where the promise is "after a restart": files come back byte-exact, a user's edit is a
conflict that is kept, the conversation rewinds without losing the abandoned branch, a
kill -9 mid-turn leaves a checkpoint that loads and restores, a kill -9 while a checkpoint is
being stored leaves the previous one whole, and a kill -9 in the middle of a restore leaves
every file whole (old or restored) and a session that loads and finishes it.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest

from defect_fakeapi import Reply, ToolUseBlock
from tests.support.workspace_rig import (
    TIMEOUT,
    Place,
    accepted,
    git,
    load,
    new_session,
    running,
    say,
    snapshot,
)

pytestmark = pytest.mark.anyio

BINARY = bytes(range(256)) * 4 + b"\x00\xff\xfe"


@pytest.fixture
def place(tmp_path: Path) -> Place:
    return Place(tmp_path)


def edits() -> Reply:
    """One batch of tool calls touching every kind of change."""
    return Reply.of(
        [
            ToolUseBlock("toolu_w", "write_file", {"path": "keep.txt", "content": "rewritten\n"}),
            ToolUseBlock("toolu_c", "write_file", {"path": "made/new.txt", "content": "fresh\n"}),
            ToolUseBlock(
                "toolu_b",
                "bash",
                {"command": "rm gone.txt && mv old.txt moved.txt && printf 'x' > bin.dat"},
            ),
        ]
    )


async def test_rewind_restores_files_byte_exact_and_the_conversation_keeps_its_branch(
    place: Place,
) -> None:
    work = place.work
    (work / "keep.txt").write_text("original\n")
    (work / "gone.txt").write_text("to be deleted\n")
    (work / "old.txt").write_text("to be renamed\n")
    (work / "bin.dat").write_bytes(BINARY)
    git(work, "init", "-q")
    git(work, "add", ".")
    git(work, "commit", "-qm", "start")
    before = snapshot(work)

    async with running(
        place, Reply.text("Hello."), edits(), Reply.text("Done."), Reply.text("Hi again.")
    ) as (agent, fake):
        sid = await new_session(agent, place)
        await say(agent, sid, "Say hello.")
        await say(agent, sid, "Change the files.")
        after = snapshot(work)
        assert after != before and "moved.txt" in after and "made/new.txt" in after
        listing = await say(agent, sid, "/rewind")
        assert listing.index('2. "Change the files."') < listing.index('1. "Say hello."')
        line = next(x for x in listing.splitlines() if x.startswith("2."))
        for path in ("bin.dat", "gone.txt", "keep.txt", "made/new.txt", "moved.txt", "old.txt"):
            assert path in line
        assert '1. "Say hello." — no files changed' in listing

        answer = await say(agent, sid, "/rewind 2")
        assert "Files restored to before prompt 2" in answer
        assert "Conversation rewound to before prompt 2" in answer
        assert snapshot(work) == before  # byte-exact, the binary file and the rename too

        await say(agent, sid, "Something else.")
        requests = accepted(fake)
        fake.assert_script_consumed()
    # The request after the rewind: the history up to before prompt 2, then the new prompt,
    # sent exactly as the first turn's history was (the cache's prefix is unchanged).
    last, first_of_2 = requests[-1].body["messages"], requests[1].body["messages"]
    assert [m["role"] for m in last] == ["user", "assistant", "user"]
    assert last[:2] == first_of_2[:2]
    assert last[2]["content"][-1]["text"] == "Something else."
    assert requests[-1].body["system"] == requests[1].body["system"]

    # The abandoned branch is still stored; undo brings it back, and a restart loads it.
    assert len(place.rows("SELECT 1 FROM messages WHERE session_id = ?", sid)) == 8
    async with running(place) as (agent, _fake):
        await agent.conn.load_session(cwd=str(work), session_id=sid, mcp_servers=[])
        assert agent.client.text(sid) == "Hello.Hi again."
        answer = await say(agent, sid, "/rewind undo")
        assert "as before the rewind" in answer and "Conversation back" in answer
        assert snapshot(work) == after
    async with running(place) as (agent, _fake):
        await agent.conn.load_session(cwd=str(work), session_id=sid, mcp_servers=[])
        assert agent.client.text(sid) == "Hello.Done."


async def test_a_user_edit_after_the_turn_is_a_conflict_and_is_kept(place: Place) -> None:
    (place.work / "a.txt").write_text("one\n")
    write = Reply.tool_use("toolu_a", "write_file", {"path": "a.txt", "content": "two\n"})
    async with running(place, write, Reply.text("Changed.")) as (agent, fake):
        sid = await new_session(agent, place)
        await say(agent, sid, "Change a.txt.")
        (place.work / "a.txt").write_text("the user's own edit\n")
        answer = await say(agent, sid, "/rewind 1")
        assert "conflict: a.txt: changed since defect changed it" in answer
        assert "Nothing was overwritten" in answer and "not rewound either" in answer
        assert (place.work / "a.txt").read_text() == "the user's own edit\n"
        assert agent.client.text(sid).startswith("Changed.")
        answer = await say(agent, sid, "/rewind 1 files force")
        assert "Files restored to before prompt 1: a.txt." in answer
        assert (place.work / "a.txt").read_text() == "one\n"
        accepted(fake)


async def test_a_kill_mid_turn_leaves_a_checkpoint_that_loads_and_restores(
    place: Place,
) -> None:
    """SIGKILL while the turn's second batch runs: the first batch's checkpoint was saved
    (partial, its contents stored), a new process lists it as unfinished and restores it
    with `force`; session/delete then removes it and its blobs."""
    (place.work / "a.txt").write_text("one\n")
    replies = (
        Reply.tool_use("toolu_a", "write_file", {"path": "a.txt", "content": "two\n"}),
        Reply.tool_use("toolu_s", "bash", {"command": "exec sleep 30"}),
    )
    async with running(place, *replies) as (agent, _fake):
        sid = await new_session(agent, place)
        turn = asyncio.create_task(agent.prompt(sid, "Change a.txt, then wait."))
        await agent.client.wait_for(lambda: "toolu_s" in json.dumps(agent.wire.messages), TIMEOUT)
        await agent.client.wait_for(
            lambda: (
                bool(place.rows("SELECT 1 FROM file_checkpoints WHERE session_id = ?", sid))
                and "digest" in place.rows("SELECT body FROM file_checkpoints")[0][0]
            ),
            TIMEOUT,
        )
        agent.process.kill()
        await asyncio.wait_for(agent.process.wait(), TIMEOUT)
        with pytest.raises(ConnectionError):
            await asyncio.wait_for(turn, TIMEOUT)
    assert (place.work / "a.txt").read_text() == "two\n"
    ((finished,),) = place.rows("SELECT finished FROM file_checkpoints WHERE session_id = ?", sid)
    assert finished == 0
    async with running(place) as (agent, _fake):
        await agent.conn.load_session(cwd=str(place.work), session_id=sid, mcp_servers=[])
        listing = await say(agent, sid, "/rewind")
        assert '1. "Change a.txt, then wait." — a.txt' in listing
        assert "did not finish" in listing
        answer = await say(agent, sid, "/rewind 1 files")
        assert "the turn did not finish" in answer
        assert (place.work / "a.txt").read_text() == "two\n"
        answer = await say(agent, sid, "/rewind 1 files force")
        assert (place.work / "a.txt").read_text() == "one\n"
        assert place.blobs()
        for blob in place.blobs():  # older than the delete's grace for fresh captures
            os.utime(blob, (1_000_000_000, 1_000_000_000))
        await agent.conn._conn.send_request("session/delete", {"sessionId": sid})
    assert place.rows("SELECT 1 FROM file_checkpoints") == []
    assert place.blobs() == []


async def test_a_kill_during_the_restore_leaves_each_file_old_or_restored_and_loads(
    place: Place,
) -> None:
    """SIGKILL a `/rewind` midway through its files (`DEFECT_TEST_RESTORE_PAUSE` waits after
    each restored file): every file holds what defect left or its restored content, byte-exact,
    with no temporary left beside it; the conversation was not rewound (files go first). A new
    process loads the session, its next request is valid, and the same `/rewind` finishes."""
    originals = {f"f{i}.txt": f"original {i}\n".encode() * 2000 for i in range(6)}
    for name, data in originals.items():
        (place.work / name).write_bytes(data)
    edit = Reply.of(
        [
            ToolUseBlock(f"toolu_{i}", "write_file", {"path": name, "content": f"edited {i}\n"})
            for i, name in enumerate(originals)
        ]
    )

    def restored() -> list[str]:
        return [n for n, data in originals.items() if (place.work / n).read_bytes() == data]

    pause = {"DEFECT_TEST_RESTORE_PAUSE": "0.5"}
    async with running(place, edit, Reply.text("Edited."), env=pause) as (agent, fake):
        sid = await new_session(agent, place)
        await say(agent, sid, "Edit them.")
        accepted(fake)
        edited = snapshot(place.work)
        assert all(edited[name] != data for name, data in originals.items())
        rewind = asyncio.create_task(agent.prompt(sid, "/rewind 1"))
        async with asyncio.timeout(TIMEOUT):
            while not restored():
                await asyncio.sleep(0.01)
        agent.process.kill()
        await asyncio.wait_for(agent.process.wait(), TIMEOUT)
        with pytest.raises(ConnectionError):
            await asyncio.wait_for(rewind, TIMEOUT)
    now = snapshot(place.work)
    assert set(now) == set(originals)  # nothing half-written, no temporary left behind
    assert all(now[n] in (originals[n], edited[n]) for n in originals)
    assert 1 <= len(restored()) < len(originals), "the kill was meant to land midway"
    assert place.rows("SELECT undo_head FROM sessions WHERE id = ?", sid) == [(None,)]

    async with running(place, Reply.text("Still here.")) as (agent, fake):
        await load(agent, place, sid)
        assert agent.client.text(sid) == "Edited."
        assert await say(agent, sid, "Still here?") == "Still here."
        answer = await say(agent, sid, "/rewind 1")
        assert "Files restored to before prompt 1" in answer and "conflict" not in answer
        assert snapshot(place.work) == originals
        (request,) = accepted(fake)
    roles = [m["role"] for m in request.body["messages"]]
    assert roles == ["user", "assistant", "user", "assistant", "user"]


async def test_a_kill_during_the_checkpoint_leaves_the_previous_one_whole(place: Place) -> None:
    """SIGKILL while a batch's prior contents are being stored (`DEFECT_TEST_CHECKPOINT_PAUSE`
    waits after each): the saved checkpoint is the one before the flush, whole — each file
    named, its content said not stored yet — and the blobs already written are whole but
    unreferenced. A new process lists it, restores nothing it does not have (and says so),
    and the session's next request is valid."""
    originals = {f"f{i}.txt": f"original {i}\n".encode() * 5000 for i in range(4)}
    for name, data in originals.items():
        (place.work / name).write_bytes(data)
    edit = Reply.of(
        [
            ToolUseBlock(f"toolu_{i}", "write_file", {"path": name, "content": f"edited {i}\n"})
            for i, name in enumerate(originals)
        ]
    )
    pause = {"DEFECT_TEST_CHECKPOINT_PAUSE": "0.5"}
    async with running(place, edit, Reply.text("Done."), env=pause) as (agent, _fake):
        sid = await new_session(agent, place)
        turn = asyncio.create_task(agent.prompt(sid, "Edit them."))
        async with asyncio.timeout(TIMEOUT):
            while not (place.state / "checkpoints" / "blobs").exists() or not place.blobs():
                await asyncio.sleep(0.01)
        agent.process.kill()
        await asyncio.wait_for(agent.process.wait(), TIMEOUT)
        with pytest.raises(ConnectionError):
            await asyncio.wait_for(turn, TIMEOUT)
    assert 1 <= len(place.blobs()) < len(originals), "the kill was meant to land midway"
    ((finished, body),) = place.rows(
        "SELECT finished, body FROM file_checkpoints WHERE session_id = ?", sid
    )
    entries = json.loads(body)["entries"]
    assert finished == 0 and sorted(e["path"] for e in entries) == sorted(originals)
    assert all(e["before"]["kind"] == "uncovered" for e in entries)  # the previous save
    edited = snapshot(place.work)

    async with running(place, Reply.text("Still here.")) as (agent, fake):
        await load(agent, place, sid)
        listing = await say(agent, sid, "/rewind")
        assert '1. "Edit them." — f0.txt, f1.txt, f2.txt, f3.txt' in listing
        assert "did not finish" in listing
        answer = await say(agent, sid, "/rewind 1 files force")
        for name in originals:
            assert f"not covered: {name}: its prior content was not stored yet" in answer
        assert snapshot(place.work) == edited  # nothing it does not have, nothing half
        assert await say(agent, sid, "Still here?") == "Still here."
        (request,) = accepted(fake)
    assert request.body["messages"][-1]["content"][-1]["text"] == "Still here?"


def write(call_id: str, path: str, content: str) -> Reply:
    return Reply.tool_use(call_id, "write_file", {"path": path, "content": content})


async def test_a_files_only_rewind_is_what_defect_left_for_the_next_rewind(place: Place) -> None:
    """`/rewind 2 files` puts a.txt back to A1; that restore is defect's own doing, so
    `/rewind 1` (and `/rewind undo`) find the file as defect left it: no conflict. A change
    made outside defect after the restore is still a conflict, and is kept."""
    (place.work / "a.txt").write_text("A0\n")
    replies = (
        write("toolu_1", "a.txt", "A1\n"),
        Reply.text("One."),
        write("toolu_2", "a.txt", "A2\n"),
        Reply.text("Two."),
    )
    async with running(place, *replies) as (agent, fake):
        sid = await new_session(agent, place)
        await say(agent, sid, "Write A1.")
        await say(agent, sid, "Write A2.")
        answer = await say(agent, sid, "/rewind 2 files")
        assert "Files restored to before prompt 2: a.txt." in answer
        assert (place.work / "a.txt").read_text() == "A1\n"
        answer = await say(agent, sid, "/rewind 1")
        assert "conflict" not in answer, answer
        assert "Files restored to before prompt 1: a.txt." in answer
        assert (place.work / "a.txt").read_text() == "A0\n"
        answer = await say(agent, sid, "/rewind undo")
        assert "conflict" not in answer and "as before the rewind: a.txt." in answer, answer
        assert (place.work / "a.txt").read_text() == "A1\n"
        accepted(fake)

    # After a restart, a files-only rewind, then a change outside defect: a conflict.
    async with running(place) as (agent, _fake):
        await load(agent, place, sid)
        answer = await say(agent, sid, "/rewind 2 files")
        assert "conflict" not in answer, answer
        (place.work / "a.txt").write_text("the user's own edit\n")
        answer = await say(agent, sid, "/rewind 1 files")
        assert "conflict: a.txt: changed since defect changed it" in answer
        assert (place.work / "a.txt").read_text() == "the user's own edit\n"


async def test_a_rewound_file_takes_only_the_directories_defect_made_for_it(
    place: Place,
) -> None:
    """Files written into new directories: the rewind removes each directory defect made for
    them once it is empty again, and nothing else: not a directory that existed before
    (empty or not), not a new one that now holds the user's file. Undo makes them again."""
    (place.work / "existed").mkdir()
    (place.work / "keep").mkdir()
    (place.work / "keep" / "note.txt").write_text("the user's\n")
    replies = (
        Reply.of(
            [
                ToolUseBlock("toolu_1", "write_file", {"path": "made/deep/a.txt", "content": "a"}),
                ToolUseBlock("toolu_2", "write_file", {"path": "made/b.txt", "content": "b"}),
                ToolUseBlock("toolu_3", "write_file", {"path": "existed/c.txt", "content": "c"}),
                ToolUseBlock("toolu_4", "write_file", {"path": "keep/new/d.txt", "content": "d"}),
                ToolUseBlock("toolu_5", "write_file", {"path": "shared/e.txt", "content": "e"}),
            ]
        ),
        Reply.text("Written."),
    )
    async with running(place, *replies) as (agent, fake):
        sid = await new_session(agent, place)
        await say(agent, sid, "Write them.")
        made = snapshot(place.work)
        (place.work / "shared" / "mine.txt").write_text("the user's own file\n")
        answer = await say(agent, sid, "/rewind 1 files")
        assert "conflict" not in answer, answer
        dirs = sorted(str(p.relative_to(place.work)) for p in place.work.rglob("*") if p.is_dir())
        assert dirs == ["existed", "keep", "shared"]
        assert snapshot(place.work) == {
            "keep/note.txt": b"the user's\n",
            "shared/mine.txt": b"the user's own file\n",
        }
        answer = await say(agent, sid, "/rewind undo")
        assert "conflict" not in answer, answer
        assert snapshot(place.work) == {**made, "shared/mine.txt": b"the user's own file\n"}
        accepted(fake)


async def test_temporaries_a_killed_restore_left_are_swept_on_load_and_rewind(
    place: Place,
) -> None:
    """SIGKILL a `/rewind` midway: the temporary its atomic write may leave (a whole copy of
    old content, named as the killed process names them, planted here because the kill
    cannot be made to land between its write and its rename) is gone once the session is
    loaded again, and one planted after the load is gone once the next rewind has run. The
    user's files that merely look like one, and a temporary of a process still alive, stay."""
    many = place.work / "many"
    many.mkdir()
    originals = {f"many/f{i:03}.txt": f"original {i}\n".encode() * 2000 for i in range(6)}
    for name, data in originals.items():
        (place.work / name).write_bytes(data)
    edit = Reply.of(
        [
            ToolUseBlock(f"toolu_{i}", "write_file", {"path": name, "content": f"edited {i}\n"})
            for i, name in enumerate(originals)
        ]
    )
    pause = {"DEFECT_TEST_RESTORE_PAUSE": "0.5"}
    async with running(place, edit, Reply.text("Edited."), env=pause) as (agent, fake):
        sid = await new_session(agent, place)
        await say(agent, sid, "Edit them.")
        accepted(fake)
        rewind = asyncio.create_task(agent.prompt(sid, "/rewind 1 files"))
        async with asyncio.timeout(TIMEOUT):
            while (many / "f000.txt").read_bytes() != originals["many/f000.txt"]:
                await asyncio.sleep(0.01)
        agent.process.kill()
        await asyncio.wait_for(agent.process.wait(), TIMEOUT)
        with pytest.raises(ConnectionError):
            await asyncio.wait_for(rewind, TIMEOUT)
        killed = agent.process.pid
    left = many / f".defect.{killed}.59d02ef859d02ef8.tmp"
    left.write_bytes(originals["many/f004.txt"])
    alive = many / f".defect.{os.getpid()}.0123456789abcdef.tmp"  # this test's own: alive
    alive.write_text("in flight\n")
    lookalikes = {
        "many/.f041.txt.59d02ef8.tmp": b"the user's\n",
        f"many/.defect.{killed}.59d02ef859d02ef8.tmp.bak": b"the user's backup\n",
        "many/.defect.notes.tmp": b"the user's notes\n",
        f".defect.{killed}.abc.tmp": b"the user's, at the root\n",
    }
    for name, data in lookalikes.items():
        (place.work / name).write_bytes(data)

    async with running(place) as (agent, _fake):
        await load(agent, place, sid)
        assert not left.exists(), "the killed restore's temporary outlived the load"
        assert alive.read_text() == "in flight\n"
        assert all((place.work / n).read_bytes() == d for n, d in lookalikes.items())
        left.write_bytes(b"left by another kill\n")
        answer = await say(agent, sid, "/rewind 1 files")
        assert "Files restored to before prompt 1" in answer and "conflict" not in answer
        assert not left.exists(), "a temporary outlived the rewind"
    alive.unlink()
    assert snapshot(place.work) == {**originals, **lookalikes}
