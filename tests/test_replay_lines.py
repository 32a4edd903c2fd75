"""A replay's protocol lines, written straight (`defect_acp/replay_lines.py`, each card by
`defect_acp/cards.py`), are the lines the schema's models give (`tests/support/replay_models.py`
+ `projection.update_line`), byte for byte, for every kind of piece a stored conversation shows
— and the same when the writer refuses a piece."""

from __future__ import annotations

import json
from typing import Any

from defect_acp import replay_walk
from defect_acp.replay_lines import ReplayLines
from defect_core import events as ev
from defect_core.integrity.rules import INTERRUPTED_RESULT_TEXT
from defect_core.model import (
    ImageBlock,
    JsonPart,
    Message,
    RedactedThinkingBlock,
    ServerToolUseBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    WebSearchError,
    WebSearchHit,
    WebSearchResultBlock,
    is_plain_message,
    message_from_dict,
    message_to_dict,
)
from defect_core.session import ToolCallSnapshot
from defect_core.session.persistence import ToolCallSnapshots
from tests.support.replay_models import model_lines, stored_calls

SID = "sess_é_1"


def _snap(call_id: str, **fields: Any) -> ToolCallSnapshot:
    base: dict[str, Any] = {"title": f"Call {call_id}", "kind": "read", "status": "completed"}
    return ToolCallSnapshot(tool_call_id=call_id, **{**base, **fields})


def conversation() -> tuple[list[Message], ToolCallSnapshots, dict[str, str]]:
    """One of every piece a replay shows or hides."""
    calls = [
        ToolUseBlock(id="t_text", name="read_file", input={"path": "a.py"}),
        ToolUseBlock(id="t_diff", name="edit_file", input={"path": "b.py"}),
        ToolUseBlock(id="t_term", name="bash", input={"command": "ls"}),
        ToolUseBlock(id="t_term_out", name="bash", input={"command": "pwd"}),
        ToolUseBlock(id="t_term_cut", name="bash", input={"command": "sleep 9"}),
        ToolUseBlock(id="t_image", name="view_image", input={"path": "c.png"}),
        ToolUseBlock(id="t_unknown_ok", name="mystery", input={}),
        ToolUseBlock(id="t_unknown_err", name="mystery", input={"x": None}),
        ToolUseBlock(id="t_unknown_open", name="mystery", input={"n": 1.5}),
        ToolUseBlock(id="t_plan", name="update_plan", input={"plan": []}),
        ToolUseBlock(id="t_plan_refused", name="update_plan", input={"plan": "nope"}),
        ToolUseBlock(id="t_agent", name="spawn_agent", input={"task": "look"}),
        ToolUseBlock(id="t_odd", name="read_file", input={"path": "d.py"}),
        ToolUseBlock(id="t_nan", name="read_file", input={"path": "e.py"}),
        ToolUseBlock(id="t_lone", name="read_file", input={"path": "f.py"}),
        ToolUseBlock(id="t_empty", name="read_file", input={}),
    ]
    open_calls = {"t_term_cut", "t_unknown_open"}
    results = [
        ToolResultBlock(
            tool_use_id=c.id,
            content="failed" if c.id in {"t_unknown_err", "t_plan_refused"} else "out\n",
            is_error=c.id in {"t_unknown_err", "t_plan_refused"},
        )
        for c in calls
        if c.id not in open_calls
    ]
    results[0] = ToolResultBlock(
        tool_use_id="t_text", content=(TextBlock(text="one"), JsonPart(value={"k": 1}))
    )
    hit = WebSearchHit(url="https://example.com", title="Ex", encrypted_content="enc")
    transcript = [
        Message(
            role="user",
            content=(
                TextBlock(text='quote " newline \n tab \t é 😀 \x01 \x7f \u2028'),
                ImageBlock(media_type="image/png", data="iVBORw0KGgo="),
                ImageBlock(url="https://example.com/i.png"),
            ),
        ),
        Message(
            role="assistant",
            content=(
                ThinkingBlock(thinking="let me think", signature="sig"),
                RedactedThinkingBlock(data="xx"),
                TextBlock(text="I will look."),
                *calls,
                ServerToolUseBlock(id="s_ok", name="web_search", input={"query": "acp"}),
                WebSearchResultBlock(tool_use_id="s_ok", content=(hit,)),
                ServerToolUseBlock(id="s_err", name="web_search", input={"query": "x"}),
                WebSearchResultBlock(
                    tool_use_id="s_err", content=WebSearchError(error_code="max_uses_exceeded")
                ),
                ServerToolUseBlock(id="s_open", name="web_search", input={}),
            ),
        ),
        Message(role="user", content=tuple(results)),
        Message(role="assistant", content=(TextBlock(text="Half \ud800 a pair."),)),
    ]
    snapshots = {
        "t_text": _snap(
            "t_text",
            content=(ev.TextDisplay("file text"),),
            locations=(ev.Location("/w/a.py", 3), ev.Location("/w/a.py"), ev.Location("/w/z", -1)),
            raw_output={"lines": 3, "none": None, "nested": [None, {"x": None}]},
        ),
        "t_diff": _snap(
            "t_diff",
            kind="edit",
            content=(
                ev.DiffDisplay("/w/b.py", "old", "new"),
                ev.DiffDisplay("/w/new.py", None, "created"),
            ),
            raw_output="",
        ),
        "t_term": _snap("t_term", kind="execute", content=(ev.TerminalDisplay("term-1"),)),
        "t_term_out": _snap(
            "t_term_out", kind="execute", content=(ev.TerminalDisplay("term-2", "/w\n"),)
        ),
        "t_term_cut": _snap(
            "t_term_cut", kind="execute", content=(ev.TerminalDisplay("term-3"),), raw_output=0
        ),
        "t_image": _snap("t_image", content=(ev.ImageDisplay("image/png", "iVBORw0KGgo="),)),
        "t_agent": _snap("t_agent", kind="think", content=(ev.TextDisplay("working"),)),
        "t_odd": _snap("t_odd", status="failed", raw_input={}),
        "t_nan": _snap("t_nan", raw_output={"ratio": float("nan")}),
        "t_lone": _snap("t_lone", title="lone \udc00 surrogate"),
        "t_plan_refused": _snap("t_plan_refused", kind="think", status="failed"),
    }
    return transcript, stored_calls(snapshots), {"t_agent": "the subagent read 3 files"}


def test_every_piece_is_the_line_the_models_give() -> None:
    transcript, snapshots, subagents = conversation()
    expected = model_lines(SID, transcript, snapshots, subagents)
    lines = list(replay_walk.iter_replay(transcript, snapshots, ReplayLines(SID), subagents))
    assert len(lines) == len(expected)
    for line, want in zip(lines, expected, strict=True):
        assert line == want
    # The projection shows what it should: hidden pieces hidden, every shown one there.
    shown = [json.loads(line)["params"]["update"] for line in lines if line is not None]
    ids = [u.get("toolCallId") for u in shown if u["sessionUpdate"] == "tool_call"]
    assert "t_plan" not in ids and "t_plan_refused" in ids
    assert {"s_ok", "s_err", "s_open", "t_agent", "t_nan", "t_lone"} <= set(ids)
    kinds = [u["sessionUpdate"] for u in shown]
    assert kinds[:4] == ["user_message_chunk"] * 3 + ["agent_thought_chunk"]


def test_pieces_the_writer_refuses_go_through_the_models() -> None:
    transcript, snapshots, subagents = conversation()
    lines = list(replay_walk.iter_replay(transcript, snapshots, ReplayLines(SID), subagents))
    by_id = {
        u.get("toolCallId"): u
        for u in (json.loads(line)["params"]["update"] for line in lines if line is not None)
    }
    assert by_id["t_nan"]["rawOutput"] == {"ratio": None}  # strict JSON: no NaN on the wire
    assert by_id["t_lone"]["title"] == "lone \ufffd surrogate"  # mended, as the transport does
    last = json.loads(lines[-1] or b"{}")["params"]["update"]
    assert last["content"]["text"] == "Half \ufffd a pair."
    assert by_id["t_term"]["content"][0]["content"]["text"] == "out\n"  # what it printed
    cut = by_id["t_term_cut"]  # no result: final, failed, saying it was interrupted
    assert cut["status"] == "failed"
    assert [c["content"]["text"] for c in cut["content"]] == [
        "(the command did not finish: its output was not recorded)",
        INTERRUPTED_RESULT_TEXT,
    ]
    assert "line" not in by_id["t_text"]["locations"][2]  # a negative line is dropped


def _walk(messages: list[Any], snapshots: Any, subagents: Any, cuts: list[int]) -> list[Any]:
    walk = replay_walk.ReplayWalk(snapshots, ReplayLines(SID), subagents)
    out: list[Any] = []
    for start, end in zip([0, *cuts], [*cuts, len(messages)], strict=True):
        out.extend(walk.feed(messages[start:end]))
    out.extend(walk.finish())
    return out


def test_a_plain_message_walks_as_its_model() -> None:
    """A load hands most messages over as their JSON values (`is_plain_message`): the walk
    shows each exactly as it shows the model, with results met in either form — a terminal's
    card reading a plain result's text, a refused plan call, a call whose result is a model."""
    transcript, snapshots, subagents = conversation()
    term_text = ToolResultBlock(tool_use_id="t_plain_term", content="printed\n")
    extra = [
        Message(role="assistant", content=(ToolUseBlock(id="t_plain_term", name="bash"),)),
        Message(role="user", content=(term_text,)),
    ]
    snapshots = stored_calls(
        {
            **snapshots,
            "t_plain_term": _snap("t_plain_term", content=(ev.TerminalDisplay("term_9"),)),
        }
    )
    # One block a message, so that every block a plain message can hold comes as a dict.
    models = [
        Message(role=m.role, content=(block,)) for m in [*transcript, *extra] for block in m.content
    ]
    mixed: list[Any] = []
    for m in models:
        data = message_to_dict(m)
        mixed.append(data if is_plain_message(data) else m)
    assert sum(isinstance(m, dict) for m in mixed) >= 25
    for cuts in ([], [3], [7, 20], list(range(1, len(models)))):
        assert _walk(mixed, snapshots, subagents, cuts) == _walk(models, snapshots, subagents, [])


PLAIN_BLOCKS: list[dict[str, Any]] = [
    {"type": "text", "text": "hi"},
    {"type": "thinking", "thinking": "hm", "signature": "sig", "origin": "a/b"},
    {"type": "thinking", "thinking": "hm"},
    {"type": "redacted_thinking", "data": "xx", "origin": None},
    {"type": "tool_use", "id": "t1", "name": "read_file", "input": {"path": "a"}},
    {"type": "tool_use", "id": "t1", "name": "read_file"},
    {"type": "tool_result", "tool_use_id": "t1", "content": "out", "is_error": True},
    {"type": "tool_result", "tool_use_id": "t1"},
    {"type": "text", "text": "extra fields are ignored", "cache": 1},
]


def test_a_plain_message_is_one_its_model_takes_as_it_is() -> None:
    for block in PLAIN_BLOCKS:
        data = {"role": "assistant", "content": [block]}
        assert is_plain_message(data), block
        assert (
            message_to_dict(message_from_dict(data))["content"][0].items()
            >= {k: v for k, v in block.items() if k != "cache"}.items()
        )
    not_plain: list[Any] = [
        None,
        [],
        {"role": "system", "content": []},
        {"role": "user"},
        {"role": "user", "content": "text"},
        {"role": "user", "content": [None]},
        {"role": "user", "content": [{"text": "no type"}]},
        {"role": "user", "content": [{"type": "image", "url": "https://x"}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": []}]},
        {"role": "assistant", "content": [{"type": "server_tool_use", "id": "s", "name": "w"}]},
    ]
    for data in not_plain:
        assert not is_plain_message(data), data


def test_whatever_is_plain_is_a_valid_message() -> None:
    """Every field of every plain block set to every kind of JSON value: whenever the check
    says plain, the model takes the dict (the check is never looser than the model)."""
    values: list[Any] = [None, True, 0, 1.5, "s", [], {}, ["s"], {"k": "v"}]
    checked = 0
    for block in PLAIN_BLOCKS:
        for field in [*block, "role"]:
            for value in values:
                changed = dict(block) if field == "role" else {**block, field: value}
                data = {"role": value if field == "role" else "user", "content": [changed]}
                if is_plain_message(data):
                    message_from_dict(data)
                    checked += 1
    assert checked > 20


def test_each_message_id_is_on_its_pieces_and_the_lines_match_the_models() -> None:
    """A text, image or thought carries its own message's id, also when it waited behind a
    call (the last message's text waits for nothing, the call before it waits for its
    result); the lines stay the models' byte for byte, and cutting the conversation into
    parts changes nothing."""
    transcript, snapshots, subagents = conversation()
    ids = [f"{SID}:{n}" for n in range(1, len(transcript) + 1)]
    expected = model_lines(SID, transcript, snapshots, subagents, ids)
    lines = list(replay_walk.iter_replay(transcript, snapshots, ReplayLines(SID), subagents, ids))
    assert lines == expected
    shown = [json.loads(line)["params"]["update"] for line in lines if line is not None]
    chunks = [u for u in shown if u["sessionUpdate"].endswith("_chunk")]
    assert [u["messageId"] for u in chunks[:3]] == [f"{SID}:1"] * 3  # text and two images
    assert chunks[3]["sessionUpdate"] == "agent_thought_chunk"
    assert chunks[3]["messageId"] == chunks[4]["messageId"] == f"{SID}:2"
    assert chunks[-1]["content"]["text"] == "Half \ufffd a pair."
    assert chunks[-1]["messageId"] == f"{SID}:{len(transcript)}"
    assert all("messageId" not in u for u in shown if u["sessionUpdate"] == "tool_call")
    walk = replay_walk.ReplayWalk(snapshots, ReplayLines(SID), subagents)
    parts = list(walk.feed(transcript[:1], ids[:1]))
    parts += walk.feed(transcript[1:], ids[1:])
    parts += walk.finish()
    assert parts == lines


def test_without_ids_no_piece_carries_one() -> None:
    transcript, snapshots, subagents = conversation()
    lines = list(replay_walk.iter_replay(transcript, snapshots, ReplayLines(SID), subagents))
    assert all(b'"messageId"' not in line for line in lines if line is not None)
