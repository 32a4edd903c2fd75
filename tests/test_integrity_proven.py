"""The clean check's memo (`defect_core/integrity/proven.py`): a prefix proven clean on one
request is not walked again on the next, and nothing the memo holds ever changes an answer.

Every test starts with an empty memo. The scenarios are the ways a session's history changes
between two requests: it grows at its tail (clean or damaged), a rewind or a compaction replaces
it, the caller's list is changed in place; and, as a property, whatever damage follows a proven
conversation, the repair (its messages and the rule of every fix) is the one a fresh repair
makes.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from defect_core.history import VecHistory
from defect_core.integrity import (
    INTERRUPTED_RESULT_TEXT,
    is_wire_legal,
    repair,
    repair_outbound,
    violations,
)
from defect_core.integrity import proven as proven_module
from defect_core.integrity.proven import clean_prefix, forget_clean_prefixes
from defect_core.integrity.repair import _rebuild
from defect_core.integrity.rules import TOOL_CALL_ANSWERED, TOOL_CALL_ID_UNIQUE
from defect_core.model import (
    Message,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    message_to_dict,
    replaced,
)
from defect_core.provenance import _copies, own_thinking_only
from defect_core.selection import ModelSelection
from tests.test_integrity_property import conversations, damaged


@pytest.fixture(autouse=True)
def _no_proofs() -> Iterator[None]:
    forget_clean_prefixes()
    yield
    forget_clean_prefixes()


def user(*blocks: Any) -> Message:
    return Message(role="user", content=tuple(_block(b) for b in blocks))


def assistant(*blocks: Any) -> Message:
    return Message(role="assistant", content=tuple(_block(b) for b in blocks))


def _block(b: Any) -> Any:
    return TextBlock(text=b) if isinstance(b, str) else b


def use(call_id: str) -> ToolUseBlock:
    return ToolUseBlock(id=call_id, name="read_file", input={"path": "a.py"})


def res(call_id: str) -> ToolResultBlock:
    return ToolResultBlock(tool_use_id=call_id, content="ok")


def rounds(count: int, first_call: int = 0) -> list[Message]:
    """`count` tool rounds after a prompt: clean, ending with a user message."""
    out = [user("fix the test")]
    for n in range(first_call, first_call + count):
        out += [assistant("reading", use(f"toolu_{n}")), user(res(f"toolu_{n}"))]
    return out


@pytest.fixture
def walks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Where each walk of the clean check started (a spy on the real `scan`)."""
    starts: list[int] = []
    real = proven_module.scan

    def spy(messages: Any, start: int, *args: Any, **kwargs: Any) -> Any:
        starts.append(start)
        return real(messages, start, *args, **kwargs)

    monkeypatch.setattr(proven_module, "scan", spy)
    return starts


def fresh_repair(history: list[Message]) -> Any:
    forget_clean_prefixes()
    return repair(history)


# --------------------------------------------------------------------------------------------
# The history grows at its tail


def test_the_next_request_walks_only_the_new_messages(walks: list[int]) -> None:
    history = rounds(50)
    assert repair_outbound(list(history)) == history
    grown = [*history, assistant("and the other", use("toolu_x")), user(res("toolu_x"))]
    sent = list(grown)
    assert repair_outbound(sent) is sent
    assert walks == [0, len(history)]
    assert clean_prefix(grown).length == len(grown)


def test_the_same_history_again_is_not_walked_at_all(walks: list[int]) -> None:
    history = rounds(5)
    repair_outbound(list(history))
    assert repair_outbound(list(history)) == history
    assert walks == [0]


def test_a_damaged_message_appended_to_a_proven_history_is_repaired(walks: list[int]) -> None:
    history = rounds(20)
    assert repair_outbound(list(history)) == history
    # The turn was killed between the call and its result, and the user typed again.
    grown = [*history, assistant("let me run it", use("toolu_cut")), user("are you there?")]
    out = repair(grown)
    assert walks == [0, len(history)]  # the rebuild picked up where the proof ended
    assert out.fixes == (TOOL_CALL_ANSWERED,)
    last = out.messages[-1]
    assert isinstance(last.content[0], ToolResultBlock)
    assert last.content[0].content == INTERRUPTED_RESULT_TEXT
    assert out == fresh_repair(grown)
    assert violations(out.messages) == []


def test_a_call_repeating_an_id_from_the_proven_prefix_is_caught() -> None:
    history = rounds(10)
    repair_outbound(list(history))
    # A replay wrote an old round again: its id was used in the proven prefix.
    grown = [*history, assistant("again", use("toolu_3")), user(res("toolu_3"), "go on")]
    assert not is_wire_legal(grown)
    out = repair(grown)
    assert TOOL_CALL_ID_UNIQUE in out.fixes
    assert out == fresh_repair(grown)
    assert violations(out.messages) == []


def test_ids_proven_requests_ago_still_count(walks: list[int]) -> None:
    history = rounds(10)
    repair_outbound(list(history))
    for n in range(3):  # three more requests, each proving a new round on top of the last proof
        history = [*history, assistant(use(f"toolu_new_{n}")), user(res(f"toolu_new_{n}"))]
        assert repair_outbound(list(history)) == history
    assert walks == [0, 21, 23, 25]
    again = [*history, assistant(use("toolu_1")), user(res("toolu_1"))]  # an id of the first proof
    assert not is_wire_legal(again)
    out = repair(again)
    assert TOOL_CALL_ID_UNIQUE in out.fixes
    assert out == fresh_repair(again)


def test_a_history_ending_with_calls_is_proven_up_to_its_last_user_message(
    walks: list[int],
) -> None:
    # A loaded session ends with the model's last message, here one that asked for a tool.
    history = [*rounds(10), assistant("one more", use("toolu_last"))]
    assert clean_prefix(history).length == len(history) - 1
    # Its call is not among the ids proven: the answer that follows is no duplicate ...
    answered = [*history, user(res("toolu_last"))]
    assert repair_outbound(answered) is answered
    assert walks == [0, len(history) - 1]
    # ... while every call of the proven prefix still is one when used again.
    again = [*answered, assistant(use("toolu_9")), user(res("toolu_9"))]
    assert not is_wire_legal(again)
    out = repair(again)
    assert TOOL_CALL_ID_UNIQUE in out.fixes
    assert out == fresh_repair(again)


# --------------------------------------------------------------------------------------------
# The history is replaced, or the caller's list changes


def test_a_rewound_history_is_walked_afresh(walks: list[int]) -> None:
    history = rounds(10)
    repair_outbound(list(history))
    # Rewound to the fifth message, then a new round whose results were lost: the same first
    # message, a different sixth one, and a history shorter than the proof.
    rewound = [*history[:5], assistant("instead", use("toolu_new")), user("hello?")]
    out = repair(rewound)
    assert walks == [0, 0]  # the proof is longer than the history: no use
    assert out.fixes == (TOOL_CALL_ANSWERED,)
    assert out == fresh_repair(rewound)


def test_equal_messages_count_as_proven_and_a_damage_among_them_does_not(
    walks: list[int],
) -> None:
    history = rounds(10)
    repair_outbound(list(history))
    # The same first message, then equal copies (as a filter that copies messages makes):
    # equal messages break the same rules, so the proof holds.
    copies = [history[0], *(replaced(m) for m in history[1:])]
    assert repair_outbound(copies) is copies
    assert walks == [0]
    # A call slipped in among the copies (a replayed round) is found: the walk starts afresh.
    damaged_copy = [*copies[:5], assistant("x", use("toolu_2")), *copies[5:]]
    out = repair(damaged_copy)
    assert walks == [0, 0]
    assert out == fresh_repair(damaged_copy)
    assert out.fixes


def test_a_compacted_history_is_walked_afresh() -> None:
    history = rounds(10)
    repair_outbound(list(history))
    summary = user("<summary>the test was fixed</summary>")
    compacted = [summary, *history[5:]]  # history[5] is an assistant message: roles still alternate
    assert repair_outbound(compacted) is compacted
    # ... and a compaction that kept a result whose call it summarised away is repaired.
    orphaned = [summary, *history[6:]]
    out = repair(orphaned)
    assert out.fixes
    assert violations(out.messages) == []
    assert out == fresh_repair(orphaned)


def test_the_proof_is_not_the_callers_list() -> None:
    history = rounds(10)
    sent = list(history)
    assert repair_outbound(sent) is sent
    # The caller's list changes in place (same first message, same length): the proof is of
    # the objects it held, so the damage is seen.
    sent[4] = assistant("cut short", use("toolu_lost"))
    assert not is_wire_legal(sent)
    out = repair_outbound(sent)
    assert out is not sent
    assert violations(out) == []
    assert history[4] is not sent[4]  # the stored history was never touched


def test_the_stored_history_is_never_mutated() -> None:
    history = rounds(30)
    before = [message_to_dict(m) for m in history]
    identities = [id(m) for m in history]
    repair_outbound(list(history))
    grown = [*history, assistant("x", use("toolu_0")), user("y")]
    repair_outbound(grown)
    assert [message_to_dict(m) for m in history] == before
    assert [id(m) for m in history] == identities


def test_more_histories_than_the_memo_holds_are_all_answered_right() -> None:
    histories = [rounds(3, first_call=10 * n) for n in range(20)]
    for history in histories + histories:
        assert repair_outbound(history) is history
        broken = [*history, assistant(use("bad id!")), user("z")]
        assert repair(broken) == fresh_repair(broken)


# --------------------------------------------------------------------------------------------
# The property: a proof changes nothing the repair decides


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(conversations(), damaged(), st.integers(0, 999), st.booleans())
def test_whatever_follows_a_proven_conversation_is_repaired_as_if_fresh(
    proven: list[Message],
    case: tuple[list[Message], list[tuple[str, int, int, int]]],
    cut: int,
    rewind: bool,
) -> None:
    tail, _ = case
    # With `rewind` the proven conversation is cut short, then something else follows.
    kept = 1 + cut % max(len(proven), 1) if rewind else len(proven)
    history = [*proven[:kept], *tail]
    expected = fresh_repair(history)
    forget_clean_prefixes()
    assert repair_outbound(list(proven)) == proven
    got = repair(history)
    assert got == expected
    assert repair(history) == expected  # and again, now that its own clean prefix is known
    assert _rebuild(history, resync=False) == got.messages
    assert (clean_prefix(history).length == len(history) > 0) == is_wire_legal(history)
    assert (got.messages is history) == is_wire_legal(history)


def test_a_compacted_or_rewound_vec_history_takes_its_old_proofs_with_it() -> None:
    def held(first: Message) -> bool:  # the memos' own tables (white box: what is kept alive)
        return any(
            proof.messages[0] is first
            for memo in (proven_module._proofs, _copies)
            for proof in memo._proofs.values()
        )

    history = VecHistory(rounds(10))
    first = history.snapshot()[0]
    repair_outbound(own_thinking_only(history.snapshot(), ModelSelection("p", "m"), None))
    assert held(first)
    history.splice_prefix(5, user("<summary>read five files</summary>"))
    assert not held(first)
    new_first = history.snapshot()[0]
    repair_outbound(history.snapshot())
    assert held(new_first)
    history.replace(rounds(2))  # a rewind to another conversation
    assert not held(new_first)
    sent = history.snapshot()
    assert repair_outbound(sent) is sent
