"""What `defect exec` prints: the answer, the tool activity and the result, in one of its
three output formats (`defect_cli/headless.py` runs the turn and hands each event here).

Owns `Printer` and how a tool call's result is rendered as text (`result_text`).

Invariants:
- A finished tool call's result reaches every format: `stream-json` carries it whole in its
  `tool_call_update` (`text`, and `content` item by item), `json` lists every call with its
  result in the `result` line, and text mode shows it under the call's line on stderr, cut
  after `TEXT_RESULT_LINES` lines with a marker saying how much was left out. Nothing is
  reduced to its first line: a command's result starts with its output's code fence.
- The answer's text of one model request is never glued to the next one's: text mode and the
  `result` line put a blank line between them (the `text` events of `stream-json` stay the
  model's own deltas).
- stdout (`out`) carries only the chosen format; the activity goes to stderr, one line per
  thing that happened (a refused call is said once, with why). When stdout's reader goes
  away (`| head`), nothing more is written there and `broken` tells the run to stop.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import sys
from typing import IO, Any

from defect_core import events as ev
from defect_core.model import TextBlock

OUTPUTS = ("text", "json", "stream-json")
TEXT_RESULT_LINES = 20
"""Text mode shows this many lines of a tool's result on stderr, then how many more there are."""
TEXT_RESULT_CHARS = 4000
"""... and at most this many characters of them (a single huge line is cut too)."""

_FENCED = re.compile(r"\A(`{3,})[^\n`]*\n(.*?)\n?\1[ \t]*(?:\n|\Z)", re.DOTALL)


def display_items(content: tuple[ev.ToolDisplay, ...] | None) -> list[dict[str, Any]]:
    """A tool call's display as JSON values, item by item."""
    items: list[dict[str, Any]] = []
    for item in content or ():
        if isinstance(item, ev.TextDisplay):
            items.append({"type": "text", "text": item.text})
        elif isinstance(item, ev.DiffDisplay):
            items.append(
                {
                    "type": "diff",
                    "path": item.path,
                    "old_text": item.old_text,
                    "new_text": item.new_text,
                }
            )
        elif isinstance(item, ev.TerminalDisplay):
            items.append({"type": "terminal", "output": item.output})
        else:
            items.append({"type": "image", "media_type": item.media_type, "data": item.data})
    return items


def result_text(content: tuple[ev.ToolDisplay, ...] | None) -> str:
    """A tool call's display as plain text, whole: a fenced block unwrapped (the fence is for
    an editor's Markdown), a diff as a unified diff, an image as a line naming it."""
    parts: list[str] = []
    for item in content or ():
        if isinstance(item, ev.TextDisplay):
            parts.append(_unfenced(item.text))
        elif isinstance(item, ev.TerminalDisplay):
            parts.append(_unfenced(item.output or ""))
        elif isinstance(item, ev.DiffDisplay):
            old = (item.old_text or "").splitlines()
            new = item.new_text.splitlines()
            before = item.path if item.old_text is not None else "/dev/null"
            diff = difflib.unified_diff(old, new, before, item.path, lineterm="", n=2)
            parts.append("\n".join(diff))
        else:
            parts.append(f"[image: {item.media_type}, {len(item.data) * 3 // 4:,} bytes]")
    return "\n".join(p.strip("\n") for p in parts if p.strip())


def _unfenced(text: str) -> str:
    """`text` with a leading fenced block's fences dropped (what follows it is kept)."""
    match = _FENCED.match(text)
    if match is None:
        return text
    return match.group(2) + ("\n" + text[match.end() :] if text[match.end() :] else "")


def cut_for_text(text: str) -> str:
    """`text` as text mode shows it: indented, at most `TEXT_RESULT_LINES` lines and
    `TEXT_RESULT_CHARS` characters, then a line saying how much was left out."""
    lines = text.splitlines()
    shown: list[str] = []
    used = 0
    for line in lines[:TEXT_RESULT_LINES]:
        if used + len(line) > TEXT_RESULT_CHARS:
            shown.append(line[: max(0, TEXT_RESULT_CHARS - used)])
            break
        shown.append(line)
        used += len(line) + 1
    left_lines = len(lines) - len(shown)
    left_chars = len(text) - sum(len(line) + 1 for line in shown)
    out = [f"    {line}" for line in shown]
    if left_lines > 0 or left_chars > 0:
        out.append(
            f"    [… {max(left_lines, 1):,} more line(s), {max(left_chars, 0):,} characters "
            "not shown; --output stream-json carries the whole result]"
        )
    return "\n".join(out)


class Printer:
    """Writes what happens: the answer to `out`, the activity to stderr (or JSON lines)."""

    def __init__(self, output: str, out: IO[str]) -> None:
        self._output = output
        self._out = out
        self._calls: dict[str, dict[str, Any]] = {}
        """Every tool call of the turn, by id: name, title, status, result (for `json`)."""
        self._denied: dict[str, str] = {}
        """Calls refused because nobody could be asked: id → the mode that would have asked."""
        self._messages: list[str] = [""]
        """The answer's text, one entry per model request."""
        self._written = ""
        """The last two characters text mode wrote of the answer ("": nothing yet)."""
        self._held = ""
        """Blanks text mode holds back: written before the message's next text, or dropped
        at its end (a new message starts with its own separator instead)."""
        self._new_message = False
        """The model's last message was committed: the next text belongs to a new request."""
        self._usage: dict[str, int] | None = None
        self.broken = False
        """stdout's reader has gone: nothing more is written, and the run should stop."""

    @property
    def denied(self) -> int:
        """How many calls were refused because nobody could be asked."""
        return len(self._denied)

    @property
    def ran(self) -> int:
        """How many calls ran (or failed for a reason other than a refused question)."""
        finished = [c for c in self._calls.values() if c["status"] in ("completed", "failed")]
        return len(finished) - len(self._denied)

    def _write(self, text: str) -> None:
        if self.broken:
            return
        try:
            self._out.write(text)
            self._out.flush()
        except BrokenPipeError:
            # The reader is gone (`| head`): later writes, and the close's flush, go nowhere.
            self.broken = True
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._out.fileno())
            os.close(devnull)

    def _line(self, data: dict[str, Any]) -> None:
        self._write(json.dumps(data, ensure_ascii=False, default=str) + "\n")

    def _activity(self, line: str) -> None:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()

    def event(self, event: ev.AgentEvent) -> None:
        stream = self._output == "stream-json"
        if isinstance(event, ev.AgentTextDelta):
            self._text(event.text)
            if stream:
                self._line({"type": "text", "text": event.text})
        elif isinstance(event, ev.MessageCommitted):
            if event.message.role == "assistant":
                self._new_message = True
        elif isinstance(event, ev.SteerReceived):  # a stdin message for the running turn
            said = " ".join(b.text for b in event.content if isinstance(b, TextBlock))
            self._activity(f"> {said}")
            if stream:
                self._line({"type": "steer", "text": said})
        elif isinstance(event, ev.AgentThoughtDelta):
            if stream:
                self._line({"type": "thought", "text": event.text})
        elif isinstance(event, ev.ToolCallStarted):
            self._calls[event.tool_call_id] = {
                "id": event.tool_call_id,
                "name": event.name,
                "title": event.title,
                "status": event.status,
                "text": "",
            }
            if stream:
                self._line(
                    {
                        "type": "tool_call",
                        "id": event.tool_call_id,
                        "name": event.name,
                        "title": event.title,
                        "kind": event.kind,
                        "input": event.raw_input,
                    }
                )
            self._activity(f"→ {event.title}")
        elif isinstance(event, ev.ToolCallUpdated) and event.status in ("completed", "failed"):
            self._finished(event)
        elif isinstance(event, ev.PlanUpdated):
            entries = [
                {"content": e.content, "priority": e.priority, "status": e.status}
                for e in event.entries
            ]
            if stream:
                self._line({"type": "plan", "entries": entries})
            marks = {"completed": "✓", "in_progress": "▶", "pending": "○"}
            steps = " · ".join(f"{marks[e.status]} {e.content}" for e in event.entries)
            self._activity(f"plan: {steps or '(cleared)'}")
        elif isinstance(event, ev.Notice):
            if stream:
                self._line({"type": "notice", "level": event.level, "text": event.text})
            self._activity(f"> {event.text}")
        elif isinstance(event, ev.TurnEnded) and event.usage is not None:
            u = event.usage
            self._usage = {
                "input_tokens": u.input_tokens,
                "output_tokens": u.output_tokens,
                "requests": u.requests,
            }

    def _text(self, text: str) -> None:
        """Add a delta of the answer; a new model request's text starts a new paragraph."""
        if self._new_message and self._messages[-1]:
            self._messages.append("")
            ended = len(self._written) - len(self._written.rstrip("\n"))
            self._held = "\n" * (2 - ended)  # a blank line, counting the newlines written
        self._new_message = False
        self._messages[-1] += text
        if self._output != "text":
            return
        # Trailing blanks are held back: the end of a message drops them, a next delta of the
        # same message writes them first.
        body = self._held + text
        kept = body.rstrip(" \t")
        self._held = body[len(kept) :]
        if kept:
            self._write(kept)
            self._written = (self._written + kept)[-2:]

    def _finished(self, event: ev.ToolCallUpdated) -> None:
        call = self._calls.setdefault(
            event.tool_call_id,
            {"id": event.tool_call_id, "name": "", "title": event.tool_call_id, "text": ""},
        )
        text = result_text(event.content)
        call["status"] = event.status
        call["text"] = text
        if self._output == "stream-json":
            data: dict[str, Any] = {
                "type": "tool_call_update",
                "id": event.tool_call_id,
                "status": event.status,
                "text": text,
                "content": display_items(event.content),
            }
            if event.raw_output is not None:
                data["raw_output"] = event.raw_output
            self._line(data)
        mode = self._denied.get(event.tool_call_id)
        if mode is not None:
            why = f"mode {mode!r} would ask, and no one is there to approve it (--mode yolo)"
            self._activity(f"✗ denied: {call['title']} — {why}")
            return
        mark = "✓" if event.status == "completed" else "✗"
        self._activity(f"{mark} {call['title']}")
        if text.strip():
            self._activity(cut_for_text(text))

    def refused(self, event: ev.PermissionRequested, mode: str) -> None:
        """A call the mode would ask about, refused because nobody can be asked: said once,
        when its failure comes (`_finished`)."""
        self._denied[event.tool_call_id] = mode
        if self._output == "stream-json":
            self._line(
                {
                    "type": "permission_denied",
                    "id": event.tool_call_id,
                    "title": event.title,
                    "mode": mode,
                }
            )

    def answer(self) -> str:
        """The answer's text: each model request's text, a blank line between them."""
        return "\n\n".join(m.strip() for m in self._messages if m.strip())

    def result(
        self,
        session_id: str,
        stop: str,
        code: int,
        error: str | None,
        goal: dict[str, Any] | None,
    ) -> None:
        if self._output == "text":
            if self._written and not self._written.endswith("\n"):
                self._write("\n")
            return
        self._line(
            {
                "type": "result",
                "session_id": session_id,
                "stop_reason": stop,
                "exit_code": code,
                "text": self.answer(),
                "error": error,
                "usage": self._usage,
                "goal": goal,
                "tool_calls": [
                    {**c, "denied": c["id"] in self._denied} for c in self._calls.values()
                ],
            }
        )
