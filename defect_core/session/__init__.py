"""The session package: the door a front end uses (`AgentCore`, `Session`) and the runtime
behind it (`DefaultAgentCore`, `DefaultSession`).

One room per job, lowest first (docs/layers.md):

- `protocol.py`     the door: the `AgentCore`/`Session` protocols, the values they exchange,
                    and the errors, listings, MCP specs, `Frontend`, backends and replay
                    facts a front end needs (the ACP bridge imports this module alone)
- `options.py`      mode, model, reasoning effort: the choices and what they mean for a turn
- `commands.py`     `/compact`, `/context` answered without the model; custom commands
- `slash_commands.py` the built-in slash commands, one row each: offer, dispatch, `/help`
- `rewind.py`       `/rewind`: the prompts, and going back before one (files, conversation)
- `fork.py`         forks: `session/fork` and `/fork`, a new session sharing the history
- `titles.py`       a session's title, from its first answered prompt
- `permissions.py`  remembered "always" answers and the open questions to the user
- `persistence.py`  writes of replay state, and what a failing store means for the user
- `toolset.py`      every built-in tool, and the condition a session offers it under
- `state.py`        `DefaultSession`: one conversation's state and turns
- `core.py`         `DefaultAgentCore`: the process's sessions, providers and store

Invariant: a front end imports only this package's names (or `protocol.py`'s) and drives the
runtime through the protocols (docs/architecture.md, rule 2); no module below `state.py`
imports one above it, so the door never depends on the implementation behind it.
"""

from defect_core.session.core import DefaultAgentCore
from defect_core.session.protocol import (
    DEFAULT_POLICY,
    INTERRUPTED_RESULT_TEXT,
    UPDATE_PLAN,
    AgentCore,
    AgentError,
    Backends,
    ConfigOption,
    DuplicateSessionId,
    EnvPolicy,
    FileStat,
    Frontend,
    FsBackend,
    GoalState,
    HistoryPart,
    InvalidCwd,
    InvalidOption,
    LocalFsBackend,
    LocalShellBackend,
    McpServerSpec,
    ModeInfo,
    OptionChoice,
    Session,
    SessionNotFound,
    SessionPage,
    SessionSummary,
    ShellBackend,
    ShellExit,
    ShellOutput,
    StorageError,
    StoredToolCalls,
    ToolCallRecord,
    ToolCallSnapshot,
    TurnError,
    TurnInProgress,
    local_stat,
    search_outcome,
    search_title,
)
from defect_core.session.state import DefaultSession
from defect_core.session.toolset import default_tools

__all__ = [
    "DEFAULT_POLICY",
    "INTERRUPTED_RESULT_TEXT",
    "UPDATE_PLAN",
    "AgentCore",
    "AgentError",
    "Backends",
    "ConfigOption",
    "DefaultAgentCore",
    "DefaultSession",
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
    "StorageError",
    "StoredToolCalls",
    "ToolCallRecord",
    "ToolCallSnapshot",
    "TurnError",
    "TurnInProgress",
    "default_tools",
    "local_stat",
    "search_outcome",
    "search_title",
]
