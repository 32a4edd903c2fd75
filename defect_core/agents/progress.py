"""What the editor and the model see of a subagent while it works, and after.

Owns `ChildProgress`, which folds a subagent's events into one short text — its tool calls, each
with its status, then the tail of what it last said — shown as the content of the parent's
`spawn_agent` tool call and returned by `inspect_background_task`; and `transcript_view`, the
same text built from a stored transcript (`session/load` after the session ended or was
killed).

Invariants:
- Bounded: at most `MAX_CALLS` calls (the latest; a line says how many came before) and
  `TAIL_CHARS` characters of text, whatever the subagent does.
- Deterministic: the view depends only on the events, in order (no clock), so tests and
  transcripts see the same text every run.
- A call shows the last status reported; in a stored transcript, a call without a result
  shows as interrupted (`✗`), which is what the outbound repair tells the model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from defect_core.events import (
    AgentEvent,
    MessageCommitted,
    TextDisplay,
    ToolCallStarted,
    ToolCallUpdated,
    ToolDisplay,
    ToolStatus,
)
from defect_core.model import Message, TextBlock, ToolResultBlock, ToolUseBlock

MAX_CALLS = 12
TAIL_CHARS = 400
MARKS: dict[str, str] = {"pending": "○", "in_progress": "…", "completed": "✓", "failed": "✗"}


@dataclass
class ChildProgress:
    """One subagent's activity, as it goes."""

    calls: dict[str, list[str]] = field(default_factory=dict)
    """tool call id → [title, status], in the order they started."""
    said: str = ""
    """The text of its latest assistant message."""

    def see(self, event: AgentEvent) -> bool:
        """Take in one of the subagent's events; True when the view changed."""
        if isinstance(event, ToolCallStarted):
            self.calls[event.tool_call_id] = [event.title, event.status]
            return True
        if isinstance(event, ToolCallUpdated) and event.tool_call_id in self.calls:
            call = self.calls[event.tool_call_id]
            before = list(call)
            if event.title:
                call[0] = event.title
            if event.status:
                call[1] = event.status
            return call != before
        if isinstance(event, MessageCommitted) and event.message.role == "assistant":
            text = _text_of(event.message)
            if text and text != self.said:
                self.said = text
                return True
        return False

    @property
    def tool_calls(self) -> int:
        return len(self.calls)

    def text(self, answer: str | None = None) -> str:
        """The view: the calls, then `answer` when given (the subagent finished), else the
        tail of what it said last."""
        return render([(t, s) for t, s in self.calls.values()], self.said, answer)

    def display(self, answer: str | None = None) -> tuple[ToolDisplay, ...]:
        text = self.text(answer)
        return (TextDisplay(text),) if text else ()


def render(calls: Sequence[tuple[str, str]], said: str, answer: str | None = None) -> str:
    lines: list[str] = []
    if len(calls) > MAX_CALLS:
        lines.append(f"({len(calls) - MAX_CALLS} earlier tool calls)")
    for title, status in calls[-MAX_CALLS:]:
        lines.append(f"{MARKS.get(status, '·')} {title}")
    if answer is not None:
        if answer:
            lines.extend(["", answer] if lines else [answer])
    elif said:
        tail = said if len(said) <= TAIL_CHARS else "…" + said[-TAIL_CHARS:]
        lines.extend(["", tail] if lines else [tail])
    return "\n".join(lines)


def transcript_view(messages: Sequence[Message], finished: bool) -> str:
    """A stored subagent transcript as the view it had: every call with its outcome (from
    its result; interrupted when it has none), then its last words."""
    results = {
        b.tool_use_id: b for m in messages for b in m.content if isinstance(b, ToolResultBlock)
    }
    calls: list[tuple[str, ToolStatus]] = []
    said = ""
    for message in messages:
        if message.role != "assistant":
            continue
        said = _text_of(message) or said
        for block in message.content:
            if isinstance(block, ToolUseBlock):
                result = results.get(block.id)
                ok = result is not None and not result.is_error
                calls.append((_call_title(block), "completed" if ok else "failed"))
    return render(calls, said, said if finished else None)


def final_text(messages: Sequence[Message]) -> str:
    """The text of the last assistant message that has any: a subagent's answer."""
    for message in reversed(messages):
        if message.role == "assistant" and (text := _text_of(message)):
            return text
    return ""


def _call_title(block: ToolUseBlock) -> str:
    detail = next((str(v) for v in block.input.values() if isinstance(v, str | int)), "")
    detail = detail.splitlines()[0][:80] if detail else ""
    return f"{block.name} {detail}".strip()


def _text_of(message: Message) -> str:
    return "".join(b.text for b in message.content if isinstance(b, TextBlock)).strip()
