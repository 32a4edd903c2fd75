"""What the slash commands say without touching another part of the session: the `/compact`
and `/context` answers, the recognition of `/name args`, and a custom command's expansion.

Owns `parse_slash_command` (the shape of a command prompt), `answer_compact` (compaction on
demand, through the compactor, exactly as an automatic one), `answer_context` and its report,
`GOAL_USAGE`, and `CustomCommands`: the user's and project's Markdown commands
(`defect_core/catalog/commands.py`), reloaded before each turn, each expanded into the prompt
it stands for (`CustomPrompt`). Which commands exist, what each is
offered as and which answer runs for which name is the table's (`slash_commands.py`).

Invariants:
- A command never reaches the history: `/context` only reads it, and `/compact` rewrites it
  through the compactor exactly as an automatic compaction would (written back, the transcript
  untouched).
- Parsing is the same for built-in and custom commands: `/name` then free text.
- A custom command never shadows a built-in one (the catalog refuses the file and logs why).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import anyio

from defect_core.catalog.commands import CustomCommand, expand, load_commands
from defect_core.catalog.places import catalog_dirs
from defect_core.compaction import Compactor, is_summary
from defect_core.events import CommandOffer
from defect_core.history import History, estimate_message_tokens, overhead_tokens
from defect_core.log import get_logger
from defect_core.model import (
    ImageBlock,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolSpec,
    ToolUseBlock,
)
from defect_core.turn import TurnConfig

GOAL_USAGE = (
    "Usage: /goal <objective> — the agent works on its own towards the objective, round after "
    "round, until it calls goal_done (or runs out of rounds: goal_max_rounds)."
)


log = get_logger("defect.agent")


@dataclass(frozen=True, slots=True)
class CustomPrompt:
    """A custom command the user typed, expanded into the prompt it stands for."""

    name: str
    text: str


class CustomCommands:
    """The custom commands of one session's cwd, reloaded before each turn (so an edited file
    shows up without a restart); a name in `reserved` (a built-in's) is refused."""

    def __init__(self, cwd: Path, reserved: frozenset[str]) -> None:
        self._cwd = cwd
        self._reserved = reserved
        self._places = [directory for _, directory in catalog_dirs("commands", cwd)]
        self._custom: dict[str, CustomCommand] = {}
        self._reported: set[str] = set()

    def offers(self) -> tuple[CommandOffer, ...]:
        return tuple(
            CommandOffer(c.name, c.description, c.argument_hint) for c in self._custom.values()
        )

    async def refresh(self) -> bool:
        """Reload the custom commands (off the event loop); True when the offer changed.

        Where no commands directory exists (most sessions) it costs two `stat`s and no thread:
        it runs before every prompt."""
        if not self._custom and not any(d.is_dir() for d in self._places):
            return False
        try:
            commands, problems = await anyio.to_thread.run_sync(
                lambda: load_commands(self._cwd, self._reserved)
            )
        except Exception:  # a broken directory must not cost the turn
            log.exception("custom_commands_unreadable", cwd=str(self._cwd))
            return False
        for problem in problems:
            if str(problem) not in self._reported:
                self._reported.add(str(problem))
                log.warning("custom_command_skipped", problem=str(problem))
        before = self.offers()
        self._custom = {c.name: c for c in commands}
        return self.offers() != before

    def custom_prompt(self, name: str, args: str) -> CustomPrompt | None:
        """The expanded prompt when `name` is one of the custom commands."""
        if name not in self._custom:
            return None
        return CustomPrompt(name, expand(self._custom[name], args))


def answer_context(
    compactor: Compactor, history: History, config: TurnConfig, tools: tuple[ToolSpec, ...]
) -> str:
    """What `/context` shows: how much of the window is used, and by what."""
    used = compactor.estimate(config.system_prompt, tools)
    overhead = overhead_tokens(config.system_prompt, tools)
    return context_report(history.snapshot(), used, config.context_window, overhead)


async def answer_compact(
    focus: str, compactor: Compactor, config: TurnConfig, tools: tuple[ToolSpec, ...]
) -> str:
    """Compact now (`/compact [focus]`) and say what it did, or why nothing was done."""
    report = await compactor.compact(
        model=config.model,
        system=config.system_prompt,
        tools=tools,
        max_tokens=config.max_tokens,
        window=config.context_window,
        reason="/compact",
        focus=focus,
        thinking_budget=config.thinking_budget,
        web_search=config.web_search,
    )
    if report is None:
        if compactor.failure:
            return f"Compaction failed: the summary request failed: {compactor.failure}"
        return "Nothing to compact yet: the conversation is too short."
    return (
        f"Compacted {report.messages_summarised} messages: "
        f"~{report.tokens_before:,} → ~{report.tokens_after:,} tokens."
    )


_SLASH = re.compile(r"^/(?P<name>[A-Za-z0-9][A-Za-z0-9_.:-]*)(?:\s+(?P<args>.*))?$", re.S)


def parse_slash_command(text: str) -> tuple[str, str] | None:
    """`/name args` → (name, args), for a prompt that is a slash command."""
    match = _SLASH.match(text.strip())
    if match is None:
        return None
    return match.group("name"), (match.group("args") or "").strip()


# --- the /context report -----------------------------------------------------------------


def context_report(messages: list[Message], used: int, window: int, overhead: int) -> str:
    tally = {"tool results": 0, "tool calls": 0, "text": 0, "thinking": 0, "images": 0}
    for message in messages:
        for block in message.content:
            if isinstance(block, ToolResultBlock):
                tally["tool results"] += estimate_message_tokens(
                    Message(role="user", content=(block,))
                )
            elif isinstance(block, ToolUseBlock):
                tally["tool calls"] += (len(block.name) + len(json.dumps(block.input))) // 4
            elif isinstance(block, TextBlock):
                tally["text"] += len(block.text) // 4
            elif isinstance(block, ThinkingBlock):
                tally["thinking"] += len(block.thinking) // 4
            elif isinstance(block, ImageBlock):
                tally["images"] += 2_000
    share = 100 * used / window if window else 0.0
    lines = [
        f"Context: ~{used:,} of {window:,} tokens used ({share:.1f}%), {len(messages)} messages.",
        "",
        "What takes space (estimated):",
        f"- system prompt and tool definitions: ~{overhead:,}",
    ]
    for name, tokens in sorted(tally.items(), key=lambda kv: -kv[1]):
        if tokens:
            lines.append(f"- {name}: ~{tokens:,}")
    if messages and is_summary(messages[0]):
        lines.append("")
        lines.append("The conversation has been compacted: it starts with a summary.")
    return "\n".join(lines)
