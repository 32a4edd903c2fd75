"""The session's slash commands: `/compact` and `/context`, answered without the model.

Owns the list offered to clients (`SLASH_COMMANDS`), the recognition of a prompt that is one
of them (`slash_command`) and the answer to each (`answer_command`). The session (`state.py`)
runs the answer as a turn of its own: cancellable, ended by `TurnEnded`.

Invariants:
- Only a prompt that is a single text block naming one of ours is a command; any other
  `/word` is text for the model (a client may offer commands of its own).
- A command never reaches the history: `/context` only reads it, and `/compact` rewrites it
  through the context manager exactly as an automatic compaction would (checkpointed, the
  transcript untouched).
"""

from __future__ import annotations

from defect_core.compaction import Compactor, context_report, parse_slash_command
from defect_core.history import History, overhead_tokens
from defect_core.model import ContentBlock, TextBlock, ToolSpec
from defect_core.turn import TurnConfig

SLASH_COMMANDS: tuple[tuple[str, str], ...] = (
    ("compact", "Summarise the conversation so far to free context (optionally: what to keep)"),
    ("context", "Show how much of the context window is used, and by what"),
)


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
    )
    if report is None:
        return "Nothing to compact yet: the conversation is too short."
    return (
        f"Compacted {report.messages_summarised} messages: "
        f"~{report.tokens_before:,} → ~{report.tokens_after:,} tokens."
    )
