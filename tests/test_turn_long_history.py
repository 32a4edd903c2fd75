"""A turn on a long history: what it reads of the history is paid per request, never per
streamed delta.

The turn runner reaches the history only through `TurnDeps.history`, so a real `VecHistory`
that counts the calls made on it shows every read: the same turn streaming one delta or
hundreds of deltas must make exactly the same calls (one `snapshot` per request, for the
outbound copy). The model is the offline one (`providers/scripted.py`), which streams its text
word by word; the session's provider and model are set, so the outbound copy also goes through
the thinking filter (`provenance.py`) and the repair (`integrity/`), as a session's does.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from defect_core.events import AgentEvent, AgentTextDelta
from defect_core.history import VecHistory
from defect_core.integrity import is_wire_legal
from defect_core.model import (
    Message,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from defect_core.policy import PermissionRules
from defect_core.providers.scripted import ScriptedProvider
from defect_core.tools.base import ToolContext, ToolRegistry
from defect_core.turn import TurnConfig, TurnDeps, TurnRunner

pytestmark = pytest.mark.anyio

LONG = 20_001
"""Messages in the stored history: long enough that a walk of it per delta would be plain."""


class CountingHistory(VecHistory):
    """A `VecHistory` that counts every call the turn makes on it."""

    def __init__(self, messages: list[Message]) -> None:
        super().__init__(messages)
        self.calls: Counter[str] = Counter()

    def snapshot(self) -> list[Message]:
        self.calls["snapshot"] += 1
        return super().snapshot()

    def __len__(self) -> int:
        self.calls["len"] += 1
        return super().__len__()

    def token_estimate(self) -> int | None:
        self.calls["token_estimate"] += 1
        return super().token_estimate()

    def append(self, message: Message) -> None:
        self.calls["append"] += 1
        super().append(message)

    def record_input_tokens(self, tokens: int) -> None:
        self.calls["record_input_tokens"] += 1
        super().record_input_tokens(tokens)


def long_history(size: int) -> list[Message]:
    """Tool rounds with signed thinking, ending with an answered round (a user message)."""
    out = [Message(role="user", content=(TextBlock(text="fix the tests"),))]
    n = 0
    while len(out) < size:
        call = f"toolu_{n:08d}"
        n += 1
        out.append(
            Message(
                role="assistant",
                content=(
                    ThinkingBlock(thinking="read it", signature="sig", origin="offline/offline"),
                    TextBlock(text="reading"),
                    ToolUseBlock(id=call, name="read_file", input={"path": "x.py"}),
                ),
            )
        )
        out.append(Message(role="user", content=(ToolResultBlock(tool_use_id=call, content="x"),)))
    return out[:size]


async def run_turn(history: CountingHistory, answer: str, tmp_path: Path) -> list[AgentEvent]:
    events: list[AgentEvent] = []

    async def publish(event: AgentEvent) -> None:
        events.append(event)

    async def commit(message: Message) -> None:
        history.append(message)

    async def never_asked(_: Any) -> str | None:
        raise AssertionError("nothing to ask")

    async def nothing() -> None:
        return None

    deps = TurnDeps(
        history=history,
        commit=commit,
        provider=ScriptedProvider([{"text": answer}]),
        tools=ToolRegistry([]),
        tool_context=lambda call_id: ToolContext(
            session_id="s",
            cwd=tmp_path,
            fs=None,  # type: ignore[arg-type]
            shell=None,  # type: ignore[arg-type]
            tool_call_id=call_id,
        ),
        rules=PermissionRules(),
        ask_permission=never_asked,
        rules_changed=nothing,
        publish=publish,
        cancel_turn=lambda: None,
    )
    config = TurnConfig(
        session_id="s",
        model="offline",
        system_prompt="You are a test.",
        mode="ask",
        max_tokens=4096,
        max_turn_requests=4,
        thinking_budget=None,
        context_window=10_000_000,
        provider="offline",
    )
    await TurnRunner(deps).run([TextBlock(text="and now the docs")], config)
    return events


async def test_the_history_is_read_per_request_not_per_streamed_delta(tmp_path: Path) -> None:
    stored = long_history(LONG)
    assert is_wire_legal(stored)
    short_answer, long_answer = "done.", " ".join(f"word{n}" for n in range(600))

    one = CountingHistory(stored)
    one_events = await run_turn(one, short_answer, tmp_path)
    many = CountingHistory(stored)
    many_events = await run_turn(many, long_answer, tmp_path)

    # The streams really differ: one delta against hundreds, each forwarded as it came.
    assert len([e for e in one_events if isinstance(e, AgentTextDelta)]) == 1
    assert len([e for e in many_events if isinstance(e, AgentTextDelta)]) == 600
    # ... and the history saw exactly the same calls: one snapshot for the one request.
    assert many.calls == one.calls
    assert many.calls["snapshot"] == 1
    # Both turns committed their prompt and their answer; the stored history stays legal.
    for history, answer in ((one, short_answer), (many, long_answer)):
        messages = history.snapshot()
        assert len(messages) == LONG + 2
        assert messages[:LONG] == stored
        assert messages[-1].content == (TextBlock(text=answer),)
