"""The table of built-in slash commands, and `CommandBook`: what a session offers and runs.

Owns `SLASH_COMMANDS`, one `SlashCommand` row per built-in command — its name, its description,
the hint of what to type after it, its handler and when it is available — and the book that
reads it: `CommandBook.offered` (what `available_commands_update` lists: the table's available
rows, then the custom commands of `commands.py`), `CommandBook.builtin` (the dispatch) and
`/help` (the table and the custom commands, as text). The handlers are thin: each calls the
part of the session that owns the command (`commands.py` for `/compact` and `/context`,
`rewind.py`, `trusting.py`, `fork.py`, `defect_core/goal.py` through the session's
`start_goal`), reached through the `CommandScope` the session builds for one command.

Invariants:
- A name is dispatched by the table alone: the row of that name runs its own handler, and no
  command runs another by falling through. Adding a command is adding a row.
- Only a prompt that is a single text block `/name ...` naming an available row is a
  built-in command. Any other `/name` — unknown, or a custom command's — is not dispatched
  here: a custom command is expanded into the prompt of an ordinary turn, and an unknown one
  is sent to the model as text, as typed (a client may offer commands of its own).
- What is offered is what is dispatched: the same rows, under the same availability.
- A custom command never shadows a row (its name is reserved: the catalog refuses the file).
- A handler answers with text (shown to the user, never put in the history: the session runs
  it as a cancellable turn of its own) or with the prompt the turn goes on with (`/goal
  <objective>`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from defect_core.compaction import Compactor
from defect_core.events import CommandOffer
from defect_core.history import History
from defect_core.model import ContentBlock, Message, TextBlock, ToolSpec
from defect_core.session.checkpointing import MessageId
from defect_core.session.commands import (
    GOAL_USAGE,
    CustomCommands,
    CustomPrompt,
    answer_compact,
    answer_context,
    parse_slash_command,
)
from defect_core.session.fork import answer_fork
from defect_core.session.rewind import Rewinder
from defect_core.session.trusting import ProjectTrusting
from defect_core.store import AsyncStore
from defect_core.turn import TurnConfig

Reply = str | list[ContentBlock]
"""A handler's answer: text shown to the user, or the prompt of the turn that follows."""


@dataclass(frozen=True, slots=True)
class CommandFacts:
    """What a row's availability reads of its session."""

    saved: bool
    """A store keeps the session (`/rewind` and `/fork` need one, and say so without it)."""


@dataclass(frozen=True, slots=True)
class CommandScope:
    """What a built-in command reaches of its session, built by the session for one command."""

    session_id: str
    store: AsyncStore | None
    compactor: Compactor
    history: History
    transcript: Sequence[Message]
    ids: Sequence[MessageId]
    config: Callable[[], TurnConfig]
    tools: Callable[[], tuple[ToolSpec, ...]]
    rewinder: Callable[[], Rewinder]
    trusting: ProjectTrusting
    start_goal: Callable[[str], list[ContentBlock]]
    book: CommandBook


Handler = Callable[[CommandScope, str], Awaitable[Reply]]


def always(_facts: CommandFacts) -> bool:
    return True


@dataclass(frozen=True, slots=True)
class SlashCommand:
    """One built-in command: a row of the table."""

    name: str
    description: str
    hint: str | None
    """What to type after the name (None: nothing)."""
    handler: Handler
    available: Callable[[CommandFacts], bool] = always
    """Whether a session with these facts offers (and so runs) it."""

    def offer(self) -> CommandOffer:
        return CommandOffer(self.name, self.description, self.hint)


# --- the handlers ------------------------------------------------------------------------


async def _compact(scope: CommandScope, args: str) -> Reply:
    return await answer_compact(args, scope.compactor, scope.config(), scope.tools())


async def _context(scope: CommandScope, _args: str) -> Reply:
    return answer_context(scope.compactor, scope.history, scope.config(), scope.tools())


async def _goal(scope: CommandScope, args: str) -> Reply:
    objective = args.strip()
    return scope.start_goal(objective) if objective else GOAL_USAGE


async def _rewind(scope: CommandScope, args: str) -> Reply:
    return await scope.rewinder().answer(args)


async def _trust(scope: CommandScope, args: str) -> Reply:
    return await scope.trusting.answer(args)


async def _fork(scope: CommandScope, args: str) -> Reply:
    return await answer_fork(args, scope.session_id, scope.store, scope.transcript, scope.ids)


async def _help(scope: CommandScope, _args: str) -> Reply:
    return scope.book.help()


SLASH_COMMANDS: tuple[SlashCommand, ...] = (
    SlashCommand(
        "compact",
        "Summarise the conversation so far to free context (optionally: what to keep)",
        "what to keep (optional)",
        _compact,
    ),
    SlashCommand(
        "context", "Show how much of the context window is used, and by what", None, _context
    ),
    SlashCommand(
        "goal",
        "Work on your own towards an objective until it is reached: /goal <objective>",
        "objective",
        _goal,
    ),
    SlashCommand(
        "rewind",
        "List the prompts with the files each changed; /rewind N [files|conversation] [force] "
        "goes back to before prompt N; /rewind undo",
        "N [files|conversation] [force], or undo (optional)",
        _rewind,
    ),
    SlashCommand(
        "trust",
        "Review what this project's own settings would do and trust it (asks first); "
        "/trust revoke takes it back",
        "revoke (optional)",
        _trust,
    ),
    SlashCommand(
        "fork",
        "A new session with this conversation so far (/fork N: up to before prompt N); "
        "answers its id, to open with session/load",
        "N (optional)",
        _fork,
    ),
    SlashCommand("help", "List the slash commands: built-in, then custom", None, _help),
)
"""Every built-in command, in the order they are offered."""

RESERVED = frozenset(c.name for c in SLASH_COMMANDS)
"""Names no custom command may take."""


class CommandBook:
    """The commands one session offers: the table's available rows, then the custom ones of
    its cwd (`commands.py`, reloaded before each turn)."""

    def __init__(
        self,
        cwd: Path,
        facts: CommandFacts,
        table: tuple[SlashCommand, ...] = SLASH_COMMANDS,
    ) -> None:
        self._rows = {c.name: c for c in table if c.available(facts)}
        self._custom = CustomCommands(cwd, frozenset(c.name for c in table))

    def offered(self) -> tuple[CommandOffer, ...]:
        return tuple(c.offer() for c in self._rows.values()) + self._custom.offers()

    async def refresh(self) -> bool:
        """Reload the custom commands; True when the offer changed."""
        return await self._custom.refresh()

    def builtin(self, prompt: list[ContentBlock]) -> tuple[SlashCommand, str] | None:
        """The row and its arguments when the prompt is one of the table's commands."""
        parsed = _parsed(prompt)
        if parsed is None or parsed[0] not in self._rows:
            return None  # not a built-in: a custom command, or text for the model
        return self._rows[parsed[0]], parsed[1]

    def custom_prompt(self, prompt: list[ContentBlock]) -> CustomPrompt | None:
        """The expanded prompt when `prompt` is `/name args` for one of the custom commands."""
        parsed = _parsed(prompt)
        return None if parsed is None else self._custom.custom_prompt(*parsed)

    def help(self) -> str:
        """What `/help` shows: every command offered, with what to type after it."""
        lines = ["Commands:"]
        lines += [_help_line(c.offer()) for c in self._rows.values()]
        custom = self._custom.offers()
        if custom:
            lines += ["", "Custom commands (Markdown files, yours and this project's):"]
            lines += [_help_line(c) for c in custom]
        lines += ["", "Any other /word is sent to the model as text."]
        return "\n".join(lines)


def _help_line(offer: CommandOffer) -> str:
    hint = f" [{offer.hint}]" if offer.hint else ""
    return f"- /{offer.name}{hint} — {offer.description}"


def _parsed(prompt: list[ContentBlock]) -> tuple[str, str] | None:
    if len(prompt) != 1 or not isinstance(prompt[0], TextBlock):
        return None
    return parse_slash_command(prompt[0].text)
