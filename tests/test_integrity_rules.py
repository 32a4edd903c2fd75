"""The table of rules (`defect_core/integrity/rules.py`): each rule is detected and fixed.

For every rule of `RULES` a minimal history breaks exactly that rule: the validator reports it
under that rule's name (and nothing else), the repair records that rule among its fixes, and
the repaired copy breaks no rule and passes the strict wire validator of the fake API
(`defect_fakeapi/validation.py`). The cases are keyed by rule name, so a rule added to the
table without a case here fails. The docs list exactly the rules of the table
(`scripts/integrity_rules_doc.py` writes them).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from defect_core.integrity import (
    RULES,
    Rule,
    Violation,
    is_wire_legal,
    repair,
    repair_outbound,
    violations,
)
from defect_core.integrity.rules import CHAT_RULES, rules_markdown
from defect_core.integrity.validate import scan
from defect_core.model import (
    ContentBlock,
    ImageBlock,
    Message,
    ServerToolUseBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    WebSearchHit,
    WebSearchResultBlock,
    trusted_message,
)
from defect_core.providers.anthropic_wire import encode_messages
from defect_core.providers.openai_wire import chat_violations, encode_chat
from defect_fakeapi import ChatWireError, validate_chat_request, validate_request

REPO = Path(__file__).resolve().parents[1]
DOCS = (REPO / "docs" / "architecture.md", REPO / "docs" / "provider-wire.md")


def u(*blocks: ContentBlock | str) -> Message:
    return Message(role="user", content=tuple(_block(b) for b in blocks))


def a(*blocks: ContentBlock | str) -> Message:
    return Message(role="assistant", content=tuple(_block(b) for b in blocks))


def _block(block: ContentBlock | str) -> ContentBlock:
    return TextBlock(text=block) if isinstance(block, str) else block


def call(call_id: str, name: str = "read_file") -> ToolUseBlock:
    return ToolUseBlock(id=call_id, name=name, input={"path": "x.py"})


def result(call_id: str, text: str = "ok") -> ToolResultBlock:
    return ToolResultBlock(tool_use_id=call_id, content=text)


def search(n: int) -> ServerToolUseBlock:
    return ServerToolUseBlock(id=f"srvtoolu_0{n}", name="web_search", input={"query": f"q{n}"})


def found(n: int) -> WebSearchResultBlock:
    hit = WebSearchHit(url=f"https://x{n}.test/", title=f"X{n}", encrypted_content=f"E{n}")
    return WebSearchResultBlock(tool_use_id=f"srvtoolu_0{n}", content=(hit,))


SIGNED = ThinkingBlock(thinking="let me see", signature="sig-1")

CASES: dict[str, list[Message]] = {
    "first-message-from-user": [a("hello"), u("hi")],
    "last-message-from-user": [u("hi"), a("hello")],
    "roles-alternate": [u("hi"), u("are you there?")],
    "message-not-empty": [u("hi"), a(), u("anyone?")],
    "text-not-blank": [u("hi"), a("hello", " \n"), u("thanks")],
    "block-fits-role": [u("hi", SIGNED)],
    "tool-call-well-formed": [u("read it"), a(call("bad id")), u(result("bad id"))],
    "tool-call-id-unique": [
        u("read it"),
        a(call("t1")),
        u(result("t1")),
        a("again", call("t1")),
        u(result("t1", "second")),
    ],
    "tool-call-answered": [u("read it"), a(call("t1")), u("never mind")],
    "result-answers-a-call": [u(result("ghost"), "hi")],
    "thinking-signed": [u("hi"), a(ThinkingBlock(thinking="hmm"), "hello"), u("thanks")],
    "image-accepted": [u("look", ImageBlock(media_type="image/png", data="!!not base64"))],
    "server-tool-answered": [u("search it"), a("Searching.", search(1)), u("go on")],
    "server-result-answers-a-use": [u("search it"), a(found(1), "Found."), u("thanks")],
}
"""Per rule name, a minimal history that breaks that rule and no other."""


def test_every_rule_has_a_case_and_every_case_a_rule() -> None:
    assert set(CASES) == {rule.name for rule in RULES}
    assert len({rule.name for rule in RULES}) == len(RULES)


def assert_wire_legal(messages: list[Message]) -> None:
    validate_request({"model": "m", "max_tokens": 1024, "messages": encode_messages(messages)})


@pytest.mark.parametrize("rule", RULES, ids=lambda rule: rule.name)
def test_each_rule_is_detected_by_name_and_fixed(rule: Rule) -> None:
    history = CASES[rule.name]  # a rule without a case fails here

    assert [v.rule.name for v in violations(history)] == [rule.name]
    assert not is_wire_legal(history)

    repaired = repair(history)
    assert rule in repaired.fixes, repaired.fixes
    assert violations(repaired.messages) == []
    assert repaired.messages == repair_outbound(history)
    assert repair_outbound(repaired.messages) is repaired.messages
    assert_wire_legal(repaired.messages)


def test_a_clean_history_breaks_no_rule_and_needs_no_fix() -> None:
    history = [u("read it"), a(SIGNED, call("t1"), call("t2")), u(result("t1"), result("t2"))]
    assert violations(history) == []
    assert is_wire_legal(history)
    assert repair(history).messages is history
    assert repair(history).fixes == ()


def test_violations_name_each_broken_message_and_the_end() -> None:
    history = [
        a("hello"),  # 0: opens with the assistant
        u("hi"),
        a(call("t1"), call("t1")),  # 2: one id twice
        u(result("t1"), "  "),  # 3: t1 answered once, then blank text
        a("ok", call("t2")),  # 4: ends with a call nobody answers
    ]
    assert violations(history) == [
        Violation(RULES[0], 0),
        Violation(next(r for r in RULES if r.name == "tool-call-id-unique"), 2),
        Violation(next(r for r in RULES if r.name == "text-not-blank"), 3),
        Violation(next(r for r in RULES if r.name == "tool-call-answered"), 4),
        Violation(next(r for r in RULES if r.name == "last-message-from-user"), 4),
    ]
    assert [str(rule) for rule in repair(history).fixes].count("tool-call-id-unique") == 1
    assert violations([]) == [Violation(RULES[0], None)]


def _long_round_history(rounds: int = 30) -> list[Message]:
    history = [u("start")]
    for n in range(rounds):
        history += [a(call(f"t{n}")), u(result(f"t{n}"))]
    return history


def test_a_bulk_walk_hands_over_the_set_of_the_calls_it_took() -> None:
    # The clean check's memo keeps this set as the proof's ids (`proven.clean_prefix`), so it
    # is exactly the calls taken: none of a message the walk stopped at, none when the bulk
    # check failed (the caller works them out then), none without `bulk_ids`.
    history = _long_round_history()
    stretch = scan(history, 0, None, (), set(), bulk_ids=True)
    assert stretch.rule is None
    assert stretch.ids == {f"t{n}" for n in range(30)}
    assert scan(history, 0, None, (), set()).ids is None
    cut = scan(
        [*history[:21], a(call("t20"), "  "), *history[22:]], 0, None, (), set(), bulk_ids=True
    )
    assert (cut.stop, cut.ids) == (21, {f"t{n}" for n in range(10)})
    history[21] = a(call("t3"))
    assert scan(history, 0, None, (), set(), bulk_ids=True).ids is None


@pytest.mark.parametrize(
    ("bad_call", "rule_name"),
    [(call("t10\n"), "tool-call-well-formed"), (call("t3"), "tool-call-id-unique")],
)
def test_a_bad_call_id_found_in_bulk_cuts_the_clean_walk_where_it_stands(
    bad_call: ToolUseBlock, rule_name: str
) -> None:
    # The clean check matches call ids in bulk when its walk ends; the bad one, deep in a long
    # clean history, stops the walk at its own message, and the repair drops only that call.
    history = _long_round_history()
    history[21] = a("checking", bad_call)
    history[22] = u(result(bad_call.id), "done")
    stretch = scan(history, 0, None, (), set(), bulk_ids=True)
    assert (stretch.stop, stretch.rule and stretch.rule.name) == (21, rule_name)
    assert (stretch.role, list(stretch.calls)) == ("user", [])
    assert not is_wire_legal(history)
    assert [(v.rule.name, v.message) for v in violations(history)] == [(rule_name, 21)]
    out = repair_outbound(history)
    assert sum(isinstance(b, ToolUseBlock) for m in out for b in m.content) == 29
    assert out[:21] == history[:21]
    assert out[-20:] == history[-20:]
    assert_wire_legal(out)


@pytest.mark.parametrize(
    "between",
    [u(), u("  "), u(result("ghost"))],
    ids=["empty", "blank-text", "orphan-result"],
)
def test_a_search_repeated_across_assistant_messages_the_repair_merges_is_sent_once(
    between: Message,
) -> None:
    # Each assistant message is paired on its own; the user message between them has nothing
    # to say, so the repair merges them, and the repeated search would use one id twice.
    history = [
        u("search it"),
        a(search(1), found(1), "one"),
        between,
        a(search(1), found(1), "two"),
    ]
    history.append(u("thanks"))
    fixed = repair(history)
    assert fixed.messages[1] == a(search(1), found(1), "one", "two")
    names = [rule.name for rule in fixed.fixes]
    assert names.count("server-tool-answered") == names.count("server-result-answers-a-use") == 1
    assert violations(fixed.messages) == []
    assert repair_outbound(fixed.messages) is fixed.messages
    assert_wire_legal(fixed.messages)


class _SearchUse(ServerToolUseBlock):
    """A server tool use of a subclass, as a caller's own block type could be."""


def test_server_blocks_of_a_subclass_are_paired_too() -> None:
    # The only server block of the history is of a subclass: it is judged all the same.
    unanswered = _SearchUse(id="srvtoolu_01", name="web_search")
    message = trusted_message("assistant", (unanswered, TextBlock(text="Searching.")))
    fixed = repair([u("search it"), message, u("thanks")])
    assert fixed.messages[1] == a("Searching.")
    assert "server-tool-answered" in [rule.name for rule in fixed.fixes]
    assert violations(fixed.messages) == []
    assert_wire_legal(fixed.messages)


def _listed_names(text: str) -> list[str]:
    start = text.index("<!-- integrity-rules:begin -->")
    end = text.index("<!-- integrity-rules:end -->")
    return re.findall(r"^(?:\| |- )`([a-z-]+)`", text[start:end], flags=re.MULTILINE)


@pytest.mark.parametrize("doc", DOCS, ids=lambda path: path.name)
def test_the_docs_list_exactly_the_rules_of_the_table(doc: Path) -> None:
    every = [rule.name for rule in (*RULES, *CHAT_RULES)]
    assert _listed_names(doc.read_text(encoding="utf-8")) == every


def test_the_docs_sections_are_written_from_the_table() -> None:
    check = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "integrity_rules_doc.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert check.returncode == 0, check.stdout + check.stderr
    assert rules_markdown().count("\n") == len(RULES) + len(CHAT_RULES) + 2


# --- the Chat Completions wire (`CHAT_RULES`, checked by `providers/openai_wire.py`) ----------


def chat_call(call_id: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": "bash", "arguments": "{}"}}


def calls_of(*ids: str) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": [chat_call(i) for i in ids]}


def answer(call_id: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": "ok"}


HI: dict[str, Any] = {"role": "user", "content": "hi"}
PNG = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6"
    "kgAAAABJRU5ErkJggg=="
)
LONG_ID = "toolu_" + "x" * 44
PICTURE = ImageBlock(media_type="image/png", data=PNG)
PICTURE_PART = {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}}

CHAT_CASES: dict[str, tuple[list[dict[str, Any]], list[Message]]] = {
    "chat-tool-call-answered": (
        [HI, calls_of("call_1", "call_2"), answer("call_1"), HI],
        [u("read it"), a(call("t1"), call("t2")), u(result("t1")), a("and?"), u("never mind")],
    ),
    "chat-result-answers-a-call": (
        [HI, answer("call_9")],
        [u(result("ghost"), "hi"), a(call("t1")), u(result("t1"), result("t1", "again"))],
    ),
    "chat-call-id-legal": (
        [HI, calls_of(LONG_ID), answer(LONG_ID)],
        [u("read it"), a(call(LONG_ID)), u(result(LONG_ID), "thanks")],
    ),
    "chat-results-before-text": (
        [HI, calls_of("call_1"), HI, answer("call_1")],
        [u("read it"), a(call("t1")), u("and also this", result("t1"))],
    ),
    "chat-image-taken": (
        [
            HI,
            calls_of("call_1"),
            {"role": "tool", "tool_call_id": "call_1", "content": [PICTURE_PART]},
        ],
        [
            u("look", PICTURE),
            a(call("t1")),
            u(ToolResultBlock(tool_use_id="t1", content=(PICTURE,))),
        ],
    ),
    "chat-nothing-foreign": (
        [HI, {"role": "assistant", "content": "x", "reasoning_content": "hmm"}, HI],
        [
            u("search it"),
            a(SIGNED, "Searching.", search(1), found(1)),
            a(ThinkingBlock(thinking="t")),
            u("go"),
        ],
    ),
}
"""Per Chat rule: an encoded array that breaks that rule and no other, and a history whose
converted copy would break it but for the repair and the conversion."""


def test_every_chat_rule_has_a_case() -> None:
    assert set(CHAT_CASES) == {rule.name for rule in CHAT_RULES}
    assert not {rule.name for rule in CHAT_RULES} & {rule.name for rule in RULES}


@pytest.mark.parametrize("rule", CHAT_RULES, ids=lambda rule: rule.name)
def test_each_chat_rule_is_detected_by_name_and_kept_by_the_conversion(rule: Rule) -> None:
    broken, history = CHAT_CASES[rule.name]
    assert {found.name for found, _ in chat_violations(broken, images=False)} == {rule.name}
    with pytest.raises(ChatWireError):  # the strict fake refuses it too
        validate_chat_request({"model": "m", "messages": broken})

    for images in (False, True):
        sent = encode_chat("be brief", repair_outbound(history), images=images)
        assert chat_violations(sent, images=images) == []
        validate_chat_request({"model": "m", "messages": sent})
        for message in sent:
            assert all(len(c["id"]) <= 40 for c in message.get("tool_calls") or ())


def test_an_id_the_messages_wire_forbids_breaks_the_chat_rule_too() -> None:
    broken = [HI, calls_of("functions.bash:0"), answer("functions.bash:0")]
    assert {rule.name for rule, _ in chat_violations(broken, images=False)} == {
        "chat-call-id-legal"
    }


def test_a_result_with_text_is_sent_as_tool_messages_then_the_text() -> None:
    _, history = CHAT_CASES["chat-results-before-text"]
    sent = encode_chat("", repair_outbound(history), images=False)
    assert [m["role"] for m in sent] == ["user", "assistant", "tool", "user"]
    assert sent[-1]["content"] == "and also this"


def test_thinking_and_server_blocks_never_cross_and_images_follow_the_model() -> None:
    _, history = CHAT_CASES["chat-nothing-foreign"]
    sent = encode_chat("", repair_outbound(history), images=False)
    assert sent[1] == {"role": "assistant", "content": "Searching."}
    assert "let me see" not in str(sent) and "srvtoolu" not in str(sent)
    _, pictures = CHAT_CASES["chat-image-taken"]
    without = encode_chat("", repair_outbound(pictures), images=False)
    assert without[0]["content"].endswith(
        "[image removed: this model is configured without images]"
    )
    assert (
        without[2]["content"] == "[image removed: a tool result cannot carry an image on this wire]"
    )
    with_images = encode_chat("", repair_outbound(pictures), images=True)
    assert with_images[0]["content"][1] == PICTURE_PART
