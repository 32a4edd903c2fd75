"""A loaded history held as its stored bodies (`defect_core/stored_messages.py`): the store
hands them over unparsed, each message is parsed when first read (once, for every view of
the load), and the session's history and transcript read the same messages a list would.

Real SQLite files for the store; the views are the real ones."""

from __future__ import annotations

from pathlib import Path

import pytest

from defect_core.history import VecHistory
from defect_core.model import (
    Message,
    MessageFormatError,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    message_to_json,
)
from defect_core.store import SessionRecord, SqliteStore
from defect_core.stored_messages import StoredMessages

SID = "sess_stored_messages"


def _messages(count: int) -> list[Message]:
    out: list[Message] = []
    for n in range(count):
        if n % 3 == 0:
            out.append(Message(role="user", content=(TextBlock(text=f"ask {n}"),)))
        elif n % 3 == 1:
            call = ToolUseBlock(id=f"toolu_{n}", name="read_file", input={"path": f"{n}.py"})
            out.append(Message(role="assistant", content=(TextBlock(text=f"do {n}"), call)))
        else:
            result = ToolResultBlock(tool_use_id=f"toolu_{n - 1}", content=f"line {n}")
            out.append(Message(role="user", content=(result,)))
    return out


def _bodies(messages: list[Message]) -> list[bytes | Message]:
    return [message_to_json(m).encode() for m in messages]


def test_a_view_reads_its_head_its_stored_range_then_what_was_appended() -> None:
    messages = _messages(10)
    head = [Message(role="user", content=(TextBlock(text="summary"),))]
    view = StoredMessages(_bodies(messages), 4, head=head)
    extra = Message(role="assistant", content=(TextBlock(text="later"),))
    view.append(extra)
    expected = [*head, *messages[4:], extra]
    assert len(view) == len(expected) == 8
    assert list(view) == expected and view == expected and expected == view
    assert view[0] == head[0] and view[1] == messages[4] and view[-1] == extra
    assert view[2:5] == expected[2:5] and view[::-1] == expected[::-1]
    with pytest.raises(IndexError):
        view[8]
    assert view != expected[:-1] and view != [*expected[:-1], head[0]]


def test_a_message_is_parsed_when_first_read_and_once_for_every_view() -> None:
    messages = _messages(6)
    cells = _bodies(messages)
    cells[4] = b'{"role": "user", "content": [{"type": "text"}]}'  # no text: not a message
    transcript = StoredMessages(cells)
    history = transcript.copy()
    # Nothing was parsed to make the views, nor to count or to read the others.
    assert len(transcript) == 6 and transcript[3] == messages[3]
    assert history[3] is transcript[3]  # parsed once, shared by both
    with pytest.raises(MessageFormatError):
        history[4]


def test_appending_to_a_copy_leaves_the_original_as_it_was() -> None:
    messages = _messages(4)
    transcript = StoredMessages(_bodies(messages))
    twin = StoredMessages.of(transcript)
    extra = Message(role="user", content=(TextBlock(text="new"),))
    twin.append(extra)
    assert list(twin) == [*messages, extra] and list(transcript) == messages
    assert StoredMessages.of(messages) == messages and StoredMessages.of(None) == []


def test_a_loaded_history_counts_and_grows_unparsed_and_reads_as_the_list_it_holds() -> None:
    messages = _messages(9)
    extra = Message(role="assistant", content=(TextBlock(text="answer"),))
    loaded = VecHistory(StoredMessages(_bodies(messages)))
    plain = VecHistory(messages)
    assert len(loaded) == len(plain) == 9
    loaded.append(extra)
    plain.append(extra)
    assert len(loaded) == 10
    assert loaded.token_estimate() == plain.token_estimate()
    assert loaded.snapshot() == plain.snapshot() == [*messages, extra]
    assert loaded.snapshot()[0] is loaded.snapshot()[0]  # parsed once, then kept
    assert loaded.splice_prefix(3, extra) == 3 and plain.splice_prefix(3, extra) == 3
    assert loaded.snapshot() == plain.snapshot()


def test_an_unread_loaded_history_can_be_replaced() -> None:
    messages = _messages(5)
    history = VecHistory(StoredMessages(_bodies(messages)))
    history.replace(StoredMessages(_bodies(messages[:2])))
    assert len(history) == 2 and history.snapshot() == messages[:2]
    history.replace(messages[2:])
    assert history.snapshot() == messages[2:]


def test_the_store_hands_its_messages_over_as_stored_bodies(tmp_path: Path) -> None:
    messages = _messages(30)
    with SqliteStore(tmp_path / "sessions.sqlite3") as store:
        store.create(
            SessionRecord(
                id=SID, cwd=str(tmp_path), provider="scripted", model="offline", mode="ask"
            )
        )
        for m in messages:
            store.append_message(SID, m)
        stored = store.load(SID)
        assert isinstance(stored.transcript, StoredMessages)
        assert isinstance(stored.history, StoredMessages)
        assert stored.transcript == messages and stored.history == messages
        assert stored.history[7] is stored.transcript[7]  # one parse for both
        summary = Message(role="user", content=(TextBlock(text="summary of 12"),))
        store.write_back(SID, [summary], 12)
        stored = store.load(SID)
        assert stored.transcript == messages
        assert stored.history == [summary, *messages[12:]]
        assert stored.history[1] is stored.transcript[12]
