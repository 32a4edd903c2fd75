"""The session's slash commands: the built-in `/compact`, `/context`, `/rewind`
(`rewind.py`), `/trust` (`trusting.py`) and `/fork` (`fork.py`), answered without the model,
`/goal` (a goal-mode turn, `defect_core/goal.py`: the session starts it; only its usage is
answered here), and the user's and project's own Markdown commands, which become prompts.

Owns the built-in list (`SLASH_COMMANDS`), the recognition of a prompt that is one of them
(`slash_command`, `parse_slash_command`), the answer to each (`answer_command`, with the
`/context` report), and `CommandBook`: the commands a
session offers, built-in first, then the custom ones `defect_core/catalog/commands.py` loads
(reloaded before each turn, so an edited file shows up without a restart). The session
(`state.py`) runs a built-in's answer as a turn of its own: cancellable, ended by `TurnEnded`;
a custom command's expanded text is the prompt of an ordinary turn.

Invariants:
- Only a prompt that is a single text block naming one of ours is a command; any other
  `/word` is text for the model (a client may offer commands of its own).
- A custom command never shadows a built-in one (the catalog refuses the file and logs why).
- A command never reaches the history: `/context` only reads it, and `/compact` rewrites it
  through the context manager exactly as an automatic compaction would (checkpointed, the
  transcript untouched).
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
from defect_core.history import History, estimate_message_tokens, overhead_tokens
from defect_core.log import get_logger
from defect_core.model import (
    ContentBlock,
    ImageBlock,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolSpec,
    ToolUseBlock,
)
from defect_core.turn import TurnConfig

SLASH_COMMANDS: tuple[tuple[str, str], ...] = (
    ("compact", "Summarise the conversation so far to free context (optionally: what to keep)"),
    ("context", "Show how much of the context window is used, and by what"),
    ("goal", "Work on your own towards an objective until it is reached: /goal <objective>"),
    (
        "rewind",
        "List the prompts with the files each changed; /rewind N [files|conversation] [force] "
        "goes back to before prompt N; /rewind undo",
    ),
    (
        "trust",
        "Review what this project's own settings would do and trust it (asks first); "
        "/trust revoke takes it back",
    ),
    (
        "fork",
        "A new session with this conversation so far (/fork N: up to before prompt N); "
        "answers its id, to open with session/load",
    ),
)
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


class CommandBook:
    """The commands one session offers: the built-ins, then the custom ones of its cwd."""

    def __init__(self, cwd: Path) -> None:
        self._cwd = cwd
        self._places = [directory for _, directory in catalog_dirs("commands", cwd)]
        self._custom: dict[str, CustomCommand] = {}
        self._reported: set[str] = set()

    def offered(self) -> tuple[tuple[str, str], ...]:
        custom = tuple((c.name, c.description) for c in self._custom.values())
        return SLASH_COMMANDS + custom

    async def refresh(self) -> bool:
        """Reload the custom commands (off the event loop); True when the offer changed.

        Where no commands directory exists (most sessions) it costs two `stat`s and no thread:
        it runs before every prompt."""
        if not self._custom and not any(d.is_dir() for d in self._places):
            return False
        reserved = {name for name, _ in SLASH_COMMANDS}
        try:
            commands, problems = await anyio.to_thread.run_sync(
                lambda: load_commands(self._cwd, reserved)
            )
        except Exception:  # a broken directory must not cost the turn
            log.exception("custom_commands_unreadable", cwd=str(self._cwd))
            return False
        for problem in problems:
            if str(problem) not in self._reported:
                self._reported.add(str(problem))
                log.warning("custom_command_skipped", problem=str(problem))
        before = self.offered()
        self._custom = {c.name: c for c in commands}
        return self.offered() != before

    def custom_prompt(self, prompt: list[ContentBlock]) -> CustomPrompt | None:
        """The expanded prompt when `prompt` is `/name args` for one of the custom commands."""
        if len(prompt) != 1 or not isinstance(prompt[0], TextBlock):
            return None
        parsed = parse_slash_command(prompt[0].text)
        if parsed is None or parsed[0] not in self._custom:
            return None
        name, args = parsed
        return CustomPrompt(name, expand(self._custom[name], args))


def slash_command(prompt: list[ContentBlock]) -> tuple[str, str] | None:
    """`(name, arguments)` when the prompt is one of our commands; None otherwise."""
    if len(prompt) != 1 or not isinstance(prompt[0], TextBlock):
        return None
    command = parse_slash_command(prompt[0].text)
    if command is None or command[0] not in {name for name, _ in SLASH_COMMANDS}:
        return None  # not ours: the model reads it as text
    return command


async def answer_command(
    name: str,
    args: str,
    *,
    context: Compactor,
    history: History,
    config: TurnConfig,
    tools: tuple[ToolSpec, ...],
) -> str:
    """What the command shows the user (running `/compact` first)."""
    if name == "goal":  # without an objective: the session runs `/goal <objective>` itself
        return GOAL_USAGE
    if name == "context":
        used = context.estimate(config.system_prompt, tools)
        return context_report(
            history.snapshot(),
            used,
            config.context_window,
            overhead_tokens(config.system_prompt, tools),
        )
    report = await context.compact(
        model=config.model,
        system=config.system_prompt,
        tools=tools,
        max_tokens=config.max_tokens,
        window=config.context_window,
        reason="/compact",
        focus=args,
        thinking_budget=config.thinking_budget,
        web_search=config.web_search,
    )
    if report is None:
        if context.failure:
            return f"Compaction failed: the summary request failed: {context.failure}"
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
