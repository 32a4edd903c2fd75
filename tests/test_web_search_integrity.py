"""`repair_outbound` and the hosted web search's blocks.

Owns the evidence that the provider's own tool calls stay legal in the outbound copy: a
search answered inside its assistant message goes out untouched (the clean path returns the
input itself), an interrupted one (a `server_tool_use` without its result) and a result
without its use are dropped from the copy, never treated as the client's tool calls, a search
split over merged assistant messages stays paired, and a turn the API paused is sent back as
it is. Every repaired copy is checked by the strict fake's own validator.

Invariant: the history given to the repair is never changed; only the copy is.

Why: one unpaired search block makes the API refuse every later request of the session.
"""

from __future__ import annotations

from defect_core.integrity import CONTINUE_TEXT, repair_outbound
from defect_core.integrity.repair import _rebuild
from defect_core.model import (
    Message,
    ServerToolUseBlock,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    WebSearchError,
    WebSearchHit,
    WebSearchResultBlock,
    assistant,
    trusted_message,
    user,
)
from defect_core.providers.anthropic_wire import encode_messages
from defect_fakeapi import validate_request

SEARCH_TOOL = {"type": "web_search_20250305", "name": "web_search", "max_uses": 5}


def use(n: int) -> ServerToolUseBlock:
    return ServerToolUseBlock(id=f"srvtoolu_0{n}", name="web_search", input={"query": f"q{n}"})


def result(n: int) -> WebSearchResultBlock:
    hit = WebSearchHit(url=f"https://x{n}.org", title=f"X{n}", encrypted_content=f"E{n}")
    return WebSearchResultBlock(tool_use_id=f"srvtoolu_0{n}", content=(hit,))


def accepted(messages: list[Message]) -> None:
    """The strict fake takes the copy (with the search tool offered)."""
    body = {
        "model": "m",
        "max_tokens": 64,
        "messages": encode_messages(messages),
        "tools": [SEARCH_TOOL, {"name": "read", "input_schema": {"type": "object"}}],
    }
    validate_request(body)


def repaired(history: list[Message], **options: bool) -> list[Message]:
    before = list(history)
    out = repair_outbound(history, **options)
    assert history == before  # the truth is untouched
    if not options:
        assert _rebuild(history, resync=False) == out  # fast and slow modes agree
        assert repair_outbound(out) is out  # idempotent
    accepted(out)
    return out


def test_a_paired_search_goes_out_as_it_is() -> None:
    history = [user("find"), assistant(use(1), result(1), "Found."), user("thanks")]
    assert repair_outbound(history) is history
    accepted(history)


def test_an_error_result_answers_its_search() -> None:
    error = WebSearchResultBlock(
        tool_use_id="srvtoolu_01", content=WebSearchError(error_code="max_uses_exceeded")
    )
    history = [user("find"), assistant(use(1), error, "No luck."), user("ok")]
    assert repair_outbound(history) is history


def test_an_interrupted_search_is_dropped_from_the_copy() -> None:
    history = [user("find"), assistant("Searching.", use(1)), user("still there?")]
    out = repaired(history)
    assert out[1] == assistant("Searching.")
    assert history[1].content[1] == use(1)


def test_an_interrupted_search_alone_leaves_no_empty_message() -> None:
    out = repaired([user("find"), assistant(use(1)), user("again")])
    assert [m.role for m in out] == ["user"]
    assert out[0] == user("find", "again")


def test_a_result_without_its_use_is_dropped() -> None:
    out = repaired([user("find"), assistant(result(1), "Found."), user("ok")])
    assert out[1] == assistant("Found.")


def test_a_result_before_its_use_pairs_nothing() -> None:
    out = repaired([user("find"), assistant(result(1), use(1), "Hm."), user("ok")])
    assert out[1] == assistant("Hm.")


def test_one_good_search_beside_an_interrupted_one() -> None:
    history = [user("find"), assistant(use(1), result(1), use(2), "Two."), user("ok")]
    out = repaired(history)
    assert out[1] == assistant(use(1), result(1), "Two.")


def test_a_search_over_merged_assistant_messages_stays_paired() -> None:
    history = [user("find"), assistant(use(1)), assistant(result(1), "Done."), user("ok")]
    out = repaired(history)
    assert out[1] == assistant(use(1), result(1), "Done.")


def test_searches_are_not_the_client_tool_loop() -> None:
    call = ToolUseBlock(id="toolu_01", name="read", input={})
    answer = ToolResultBlock(tool_use_id="toolu_01", content="text")
    history = [user("go"), assistant(use(1), result(1), call), user(answer), assistant("ok")]
    out = repaired(history)
    assert out[1] == history[1]
    assert out[2] == user(answer)
    assert out[-1] == user(CONTINUE_TEXT)


def test_a_paused_turn_is_sent_back_as_it_is() -> None:
    history = [user("find"), assistant("Looking. ", use(1), result(1), "Still looking.\n")]
    out = repaired(history, paused=True)
    assert out[-1] == assistant("Looking. ", use(1), result(1), "Still looking.")
    assert out[-1].role == "assistant"


def test_a_paused_turn_ending_in_an_interrupted_search() -> None:
    history = [user("find"), assistant(use(1), result(1), use(2))]
    out = repaired(history, paused=True)
    assert out == [user("find"), assistant(use(1), result(1))]


def test_without_pause_a_trailing_assistant_gets_continue() -> None:
    history = [user("find"), assistant(use(1), result(1), "Done.")]
    assert repaired(history)[-1] == user(CONTINUE_TEXT)


def test_search_blocks_in_a_user_message_are_dropped() -> None:
    broken = trusted_message("user", (result(1), TextBlock(text="hi")))
    assert repaired([broken]) == [user("hi")]
