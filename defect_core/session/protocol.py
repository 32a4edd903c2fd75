"""`AgentCore` and `Session`: the only door from a front end (the ACP bridge) into the runtime.

Owns the two protocols and the values only the door exchanges (config options, tool-call
snapshots and the stored calls a replay looks up, the backends). Four kinds of value cross the
door but are defined lower, because lower layers produce or read them: the errors
(`errors.py`: the store and the turn runner raise them), session listings (`listing.py`: the
store builds them), MCP server specs (`mcp/spec.py`: the configuration parses them) and the
front end's description (`prompt.py`: the system prompt reads it). So do the facts and
protocols a front end needs to show a session and to serve it: the permission modes
(`policy.ModeInfo`), a goal's outcome (`goal.GoalState`), the plan tool's name, a stored tool
call (`store.ToolCallRecord`: a replay writes its card straight from it) and the wording of an
interrupted one, how a hosted web search shows (`hosted.py`), and the `FsBackend`/`ShellBackend`
protocols with their local implementations and the environment policy a front end that runs
commands itself applies (`tools/backends.py`, `child_env.py`). This module re-exports them
(`__all__`), and the package (`defect_core/session/__init__.py`) re-exports this module, so a
front end finds everything it needs to drive the runtime in `defect_core.session`; the ACP
bridge imports this module itself, the door alone (an import-linter contract, docs/layers.md).

- `AgentCore` is the process-level root: it creates, loads, finds and lists sessions.
- `Session` is one conversation: it runs turns (and goals: `run_goal`, the one way every
  front end runs goal mode), cancels them, streams `AgentEvent`s to any number of
  subscribers, and exposes its modes and config options.

Invariants:
- The bridge reaches the runtime only through these protocols (docs/architecture.md, rule 2):
  a test can hand the bridge a fake core, and another front end could drive the same runtime.
- One turn per session at a time: a second `run_turn` while one runs raises `TurnInProgress`
  at once (ACP clients serialise prompts per session; an immediate, clear error is what they
  can show, where a silent wait would look like a hang).
- `run_turn` answers a stop reason for every normal end, `cancelled` included; it raises
  `TurnError` only when the turn could not go on (provider failure after retries, missing
  credentials). Either way the session stays usable.
- No ACP types here (docs/architecture.md, rule 1).
- The lowest module of the session package (docs/layers.md): the default implementation
  (`core.py`, `state.py` and their helpers) sits above it, so the door names no part of the
  runtime behind it.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from anyio.abc import ObjectReceiveStream

from defect_core.child_env import DEFAULT_POLICY, EnvPolicy
from defect_core.errors import (
    AgentError,
    DuplicateSessionId,
    InvalidCwd,
    InvalidOption,
    SessionNotFound,
    StorageError,
    TurnError,
    TurnInProgress,
)
from defect_core.events import (
    AgentEvent,
    Answer,
    CommandOffer,
    Location,
    PlanEntry,
    ToolDisplay,
    ToolKind,
    ToolStatus,
    TurnStopReason,
)
from defect_core.goal import GoalState
from defect_core.hosted import search_outcome, search_title
from defect_core.integrity.rules import INTERRUPTED_RESULT_TEXT
from defect_core.listing import SessionPage, SessionSummary
from defect_core.mcp.spec import McpServerSpec
from defect_core.model import ContentBlock, Message, PlainMessage
from defect_core.policy import ModeInfo
from defect_core.prompt import Frontend
from defect_core.store.records import ToolCallRecord
from defect_core.tools.backends import (
    FileStat,
    FsBackend,
    LocalFsBackend,
    LocalShellBackend,
    ShellBackend,
    ShellExit,
    ShellOutput,
    local_stat,
)
from defect_core.tools.plan import UPDATE_PLAN

__all__ = [
    "DEFAULT_POLICY",
    "INTERRUPTED_RESULT_TEXT",
    "UPDATE_PLAN",
    "AgentCore",
    "AgentError",
    "Backends",
    "CommandOffer",
    "ConfigOption",
    "DuplicateSessionId",
    "EnvPolicy",
    "FileStat",
    "Frontend",
    "FsBackend",
    "GoalState",
    "HistoryPart",
    "InvalidCwd",
    "InvalidOption",
    "LocalFsBackend",
    "LocalShellBackend",
    "McpServerSpec",
    "ModeInfo",
    "OptionChoice",
    "Session",
    "SessionNotFound",
    "SessionPage",
    "SessionSummary",
    "ShellBackend",
    "ShellExit",
    "ShellOutput",
    "Steering",
    "StorageError",
    "StoredToolCalls",
    "ToolCallRecord",
    "ToolCallSnapshot",
    "TurnError",
    "TurnInProgress",
    "local_stat",
    "search_outcome",
    "search_title",
]

# --- values -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OptionChoice:
    value: str
    name: str
    description: str | None = None
    group: str | None = None
    """The heading it is listed under (the model picker: its provider); None: no heading."""


@dataclass(frozen=True, slots=True)
class ConfigOption:
    id: str
    name: str
    category: Literal["mode", "model", "thought_level", "other"]
    current: str
    choices: tuple[OptionChoice, ...]
    description: str | None = None


@dataclass(frozen=True, slots=True)
class ToolCallSnapshot:
    """The last known state of one tool call, kept so a replay can show it as it was."""

    tool_call_id: str
    title: str
    kind: ToolKind
    status: ToolStatus
    content: tuple[ToolDisplay, ...] = ()
    locations: tuple[Location, ...] = ()
    raw_input: dict[str, Any] = field(default_factory=dict)
    raw_output: Any = None


class StoredToolCalls(Mapping[str, ToolCallSnapshot]):
    """A session's stored tool calls as a replay looks them up: each call's snapshot by id,
    or its stored record as it is (`record`), from which a front end writes the call's card
    straight, without the snapshot (`defect_acp/cards.py`). The implementation:
    `persistence.ToolCallSnapshots`."""

    @abstractmethod
    def record(self, call_id: str) -> ToolCallRecord | None:
        """The stored record of `call_id` as it is (None: no such call)."""


@dataclass(frozen=True, slots=True)
class HistoryPart:
    """Some messages of a session being loaded, oldest first, handed to `load_session`'s
    `on_history` as soon as the store has read them, with what a replay of them needs: the
    stored tool calls and subagent views (the same for every part of one load). The tool
    calls change as the load goes on: each part's own calls are there when it is handed
    over, and a call looked up while a part is handed on is dropped once `on_history` has
    returned (a replay shows each call once: a load never holds every record); look calls
    up, do not list them. A plain message comes as its JSON value (`model.PlainMessage`),
    any other as the model."""

    messages: Sequence[Message | PlainMessage]
    tool_calls: StoredToolCalls
    subagents: Mapping[str, str]
    message_ids: Sequence[str] = ()
    """Each message's id (`events.message_id`), in the same order (empty: not known)."""


@dataclass(frozen=True, slots=True)
class Backends:
    fs: FsBackend
    shell: ShellBackend
    frontend: Frontend = field(default_factory=Frontend)


# --- protocols ----------------------------------------------------------------------------


class Steering(Protocol):
    """What the user writes while a turn runs (`session/steering.py`): delivered to the model
    at the turn's next safe point, after the results of the calls it asked for."""

    async def offer(self, prompt: Sequence[ContentBlock]) -> bool:
        """Give `prompt` to the running turn: True once it is stored (the turn delivers it
        before it ends, shown at once as a `SteerReceived` event); False when no turn takes
        it — none runs, or the running one has ended its last request — and nothing was
        kept: run it as a prompt (after `wait_idle`). Raises `StorageError` when it cannot
        be stored."""
        ...

    async def wait_idle(self) -> None:
        """Return once the session runs no turn (a prompt would not be refused as
        `TurnInProgress` by the turn that refused a steer)."""
        ...


class Session(Protocol):
    @property
    def id(self) -> str: ...

    @property
    def cwd(self) -> Path: ...

    @property
    def title(self) -> str | None: ...

    async def run_turn(self, prompt: list[ContentBlock]) -> TurnStopReason:
        """Run one prompt to its stop reason; `/goal <objective>` alone runs `run_goal`."""
        ...

    async def run_goal(self, objective: str, prompt: Sequence[ContentBlock] = ()) -> TurnStopReason:
        """Run one turn pursuing `objective` on its own, round after round, until the model
        calls `goal_done` or the rounds run out (`goal_max_rounds`: `max_turn_requests`);
        `prompt`, if any, follows the goal's own. `/goal` from an editor and `defect exec
        --goal` both come here (`defect_core/goal.py`)."""
        ...

    @property
    def last_goal(self) -> GoalState | None:
        """The objective, rounds and outcome of the last goal once its turn has ended (None:
        no goal has run in this session)."""
        ...

    def cancel_turn(self) -> None:
        """Cancel the running turn, if any. Idempotent."""
        ...

    @property
    def steering(self) -> Steering:
        """The user's messages to the running turn (`Steering`)."""
        ...

    def subscribe(self) -> ObjectReceiveStream[AgentEvent]: ...

    def history_snapshot(self) -> list[Message]: ...

    def transcript(self) -> list[Message]:
        """The whole original conversation (not what compaction rewrote), for replay."""
        ...

    def message_ids(self) -> list[str]:
        """The id of each message of `transcript`, in order (`events.message_id`): the id its
        chunks carried live (`NextMessageId`), for a replay to carry again."""
        ...

    async def tool_calls(self) -> StoredToolCalls:
        """Every tool call as a replay shows it (read from the store: a loaded session does
        not hold its past calls)."""
        ...

    def subagent_views(self) -> dict[str, str]:
        """What each stored subagent did (its calls and answer), by the `spawn_agent` call
        that started it: a replay shows it as that call's content."""
        ...

    def current_plan(self) -> tuple[PlanEntry, ...]:
        """The plan `update_plan` last set (empty: none): a replay shows it after the history."""
        ...

    def current_mode(self) -> str: ...

    def available_modes(self) -> tuple[ModeInfo, ...]: ...

    async def set_mode(self, mode_id: str) -> None: ...

    def config_options(self) -> list[ConfigOption]: ...

    async def set_config_option(self, option_id: str, value: str) -> list[ConfigOption]: ...

    async def refresh_models(self) -> None:
        """Ask the providers for their live model lists (network: never before the answer
        that opened the session); when the offered models changed, publish `ConfigChanged`
        for the model option."""
        ...

    def slash_commands(self) -> tuple[CommandOffer, ...]:
        """The slash commands offered now: the built-in table's, then the custom ones."""
        ...

    async def refresh_commands(self, *, announce: bool = True) -> None:
        """Reload the commands the user and the project defined (`CommandsChanged` if new and
        `announce`)."""
        ...

    def notices(self) -> tuple[str, ...]:
        """Messages for the user once the session is open (e.g. MCP servers that failed);
        from then on, an MCP server that fails is told as it fails (a `Notice` event)."""
        ...

    def resolve_permission(self, tool_call_id: str, option_id: str | None) -> None:
        """The user's answer to a `PermissionRequested`; `None` means the request was cancelled."""
        ...

    def answer_question(self, question_id: str, answer: Answer) -> None:
        """What came of a `QuestionAsked` (`events.Answer`); one answer per question, a late
        or unknown one is ignored."""
        ...

    async def close(self) -> None:
        """Cancel running work, stop background tasks and end every subscription."""
        ...


class AgentCore(Protocol):
    @property
    def storage_problem(self) -> str | None:
        """Why sessions are not saved, so nothing can be loaded after a restart (None when
        they are saved): a front end must not offer loading then, and tells the user."""
        ...

    async def create_session(
        self,
        session_id: str,
        cwd: Path,
        backends: Backends,
        mcp_servers: tuple[McpServerSpec, ...] = (),
    ) -> Session: ...

    async def load_session(
        self,
        session_id: str,
        backends: Backends,
        mcp_servers: tuple[McpServerSpec, ...] = (),
        cwd: Path | None = None,
        on_history: Callable[[HistoryPart], Awaitable[None]] | None = None,
    ) -> Session:
        """Restore a stored session (or return it if it is already live). When it is read
        from the store, its history is handed to `on_history` part by part as it is read,
        before the session is returned (a live session's is not: it was not read)."""
        ...

    async def fork_session(
        self,
        origin_id: str,
        fork_id: str,
        cwd: Path,
        backends: Backends,
        mcp_servers: tuple[McpServerSpec, ...] = (),
    ) -> Session:
        """A new stored session `fork_id` sharing `origin_id`'s history so far, with a copy of
        its config, permissions and plan (`fork.py`), opened live."""
        ...

    async def latest_session(self, cwd: Path) -> str | None:
        """The most recently updated stored session for `cwd`."""
        ...

    def session(self, session_id: str) -> Session | None: ...

    async def list_sessions(
        self, cwd: Path | None = None, cursor: str | None = None
    ) -> SessionPage: ...

    async def close_session(self, session_id: str) -> None: ...

    async def delete_session(self, session_id: str) -> None: ...

    def warm(self) -> None:
        """Start loading what the first prompt will need (in the background; never raises)."""
        ...

    def mcp_transports(self) -> frozenset[str]:
        """The MCP transports the runtime can connect (cheap: no SDK is imported), which a
        front end advertises."""
        ...

    async def aclose(self) -> None: ...
