"""What a turn runs with: its session's collaborators (`TurnDeps`) and its limits (`TurnConfig`).

Owns the two values a `TurnRunner` is given and the one it returns (`TurnResult`). A turn
reaches its session only through `TurnDeps`: the history and how a message becomes durable,
the model, the tools and the per-call context they run in, the permission rules and how to
ask the user, how events reach the front end, how to cancel itself, and the context-window
policy. `TurnConfig` is the part that may change between turns (mode, model, effort, limits),
snapshotted when the turn starts.

Two things are called "context" around a turn, and their names keep them apart:
- the *context window* is the model's input budget; `TurnDeps.compactor`
  (`compaction.Compactor`) keeps the history inside it, and `TurnConfig.context_window` is
  its size in tokens;
- a *tool context* (`tools.base.ToolContext`) is what one tool call may use (cwd, backends,
  progress reports); `TurnDeps.tool_context` builds one per call id.

Invariant: both values are frozen. A turn cannot rebind its session's collaborators nor see a
model or effort change made while it runs (such changes apply from the next turn). The one
exception is the permission mode: a user who switches to `read-only` must stop every task of
the session, not only the next turn, so each tool call's decision reads the session's mode
as it is then (`TurnDeps.mode`), and `TurnConfig.mode` is the mode the turn started under.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol

import anyio

from defect_core import policy
from defect_core.compaction import Compactor
from defect_core.events import AgentEvent, PermissionRequested, TurnStopReason, TurnUsage
from defect_core.history import History
from defect_core.hooks.engine import HookEngine
from defect_core.model import ContentBlock, Message
from defect_core.providers.base import HostedWebSearch, LlmProvider, Usage
from defect_core.selection import ModelSelection
from defect_core.tools.base import ToolContext, ToolRegistry

Publish = Callable[[AgentEvent], Awaitable[None]]
"""Send an event to the session's subscribers (and keep what a replay needs)."""
Commit = Callable[[Message], Awaitable[None]]
"""Append a message to the history and make it durable; raises `StorageError` if it cannot."""
PermissionWaiter = Callable[[PermissionRequested], Awaitable[str | None]]
"""Ask the user; the chosen option id, or None if the question was cancelled."""
ToolContextFactory = Callable[[str], ToolContext]
"""The tool context of one call, by its tool-call id."""


class SteerInbox(Protocol):
    """What the user wrote while the turn runs (`defect_core/session/steering.py`), as the
    runner sees it: taken at each safe point, and closed when the turn ends."""

    def waiting(self) -> bool:
        """A steer waits for the next request."""
        ...

    def take(self) -> list[ContentBlock]:
        """The waiting steers' content, oldest first; they are the runner's from now on (it
        commits them, then calls `delivered`)."""
        ...

    async def delivered(self) -> None:
        """What `take` handed over is history now: its stored copy is no longer needed."""
        ...

    def close(self) -> bool:
        """End the turn's steering if no steer waits (True: the turn may end, a later steer
        is not this turn's); False when one waits (the turn goes on with it)."""
        ...

    def tools_running(self, scope: anyio.CancelScope | None) -> None:
        """The scope of the tool calls now running (None: none run); a steer may cancel it
        (`steering.interrupt_tools`)."""
        ...


@dataclass(frozen=True, slots=True)
class TurnDeps:
    """What a turn needs from its session, and nothing else."""

    # the conversation
    history: History
    """Read for every request (`snapshot`) and told the real input size after each."""
    commit: Commit
    # the model and what it may call
    provider: LlmProvider
    tools: ToolRegistry
    tool_context: ToolContextFactory
    # permissions
    rules: policy.PermissionRules
    """The session's remembered "always" answers; an answer given during the turn adds one."""
    ask_permission: PermissionWaiter
    rules_changed: Callable[[], Awaitable[None]]
    """The rules gained an "always" answer: the session saves them."""
    # the front end
    publish: Publish
    cancel_turn: Callable[[], None]
    """Cancel the running turn (the user cancelled a permission question)."""
    # the context window
    compactor: Compactor | None = None
    """None: no compaction (the turn still reports an estimate of what it uses)."""
    # the user's hooks (and the built-in ones, such as goal mode's)
    hooks: HookEngine | None = None
    """None: no hooks."""
    # who is asking
    interactive: bool = True
    """False (a subagent): nobody can be asked, so a call the policy would ask about is
    refused with a result that says so (`calls.decide`)."""
    mode: Callable[[], str] | None = None
    """The session's permission mode now, read at each tool call's decision, so a change
    made while the turn runs applies from its next call; None: `TurnConfig.mode`, fixed."""
    asks_after_mode_change: bool = False
    """A turn that is not interactive still asks (`ask_permission`) about a call the policy
    would ask about once the mode has changed since it started: the user switched a running
    subagent's session to a mode that asks, and is there to answer."""
    notes: Callable[[], list[ContentBlock]] | None = None
    """User-side notes waiting for the model (finished background tasks): taken at the start
    of each request and committed as a user message before it (`runner._before_request`)."""
    steers: SteerInbox | None = None
    """The user's messages sent while the turn runs: committed at the next safe point, after
    the last results and before the next request; a turn never ends while one waits. None:
    nobody can steer (a subagent)."""


@dataclass(frozen=True, slots=True)
class TurnConfig:
    """Everything a turn runs with, snapshotted when it starts."""

    session_id: str
    model: str
    system_prompt: str
    mode: str
    """The permission mode the turn started under (`TurnDeps.mode` reads the current one)."""
    max_tokens: int
    max_turn_requests: int
    thinking_budget: int | None
    context_window: int
    retries: int = 4
    retry_base_delay: float = 1.0
    retry_max_delay: float = 30.0
    provider: str = ""
    """The provider `model` is asked at (its configured name): replies' thinking is stamped
    with the pair, and only thinking it signed is sent (`provenance.py`). Empty: no stamp,
    no filter (a runner driven without a session)."""
    unstamped_provider: str | None = None
    """The provider thinking without a stamp is taken to come from (see `provenance.py`)."""

    @property
    def selection(self) -> ModelSelection | None:
        return ModelSelection(self.provider, self.model) if self.provider else None

    web_search: HostedWebSearch | None = None
    """The provider's own web search, offered to the model (`delegate` mode), or None."""
    agent: str = ""
    """Who makes the requests: "" for the session's own agent, else the subagent profile's
    name (the offline model answers each from its own script, `providers/scripted.py`)."""
    max_rounds: int = 20
    """Rounds one turn may take: a `before_turn_end` hook that sends the turn round again
    starts a round (with `max_turn_requests` requests of its own); past this, the turn ends
    with `max_turn_requests`."""


@dataclass
class TurnResult:
    stop_reason: TurnStopReason
    usage: Usage = field(default_factory=Usage)
    requests: int = 0

    def turn_usage(self) -> TurnUsage:
        """What the turn consumed, as its `TurnEnded` event reports it."""
        u = self.usage
        return TurnUsage(
            input_tokens=u.input_tokens,
            output_tokens=u.output_tokens,
            cache_read_input_tokens=u.cache_read_input_tokens,
            cache_creation_input_tokens=u.cache_creation_input_tokens,
            requests=self.requests,
        )
