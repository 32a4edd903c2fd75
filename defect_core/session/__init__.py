"""The session package: the door a front end uses (`AgentCore`, `Session`) and the runtime
behind it (`DefaultAgentCore`, `DefaultSession`).

One room per job, lowest first (docs/layers.md):

- `protocol.py`     the door: the `AgentCore`/`Session` protocols, the values they exchange,
                    and the errors, listings, MCP specs and `Frontend` a front end needs
- `options.py`      mode, model, reasoning effort: the choices and what they mean for a turn
- `commands.py`     `/compact`, `/context`: answered without the model
- `rewind.py`       `/rewind`: the prompts, and going back before one (files, conversation)
- `fork.py`         forks: `session/fork` and `/fork`, a new session sharing the history
- `titles.py`       a session's title, from its first answered prompt
- `permissions.py`  remembered "always" answers and the open questions to the user
- `persistence.py`  writes of replay state, and what a failing store means for the user
- `toolset.py`      the built-in tools every session gets
- `state.py`        `DefaultSession`: one conversation's state and turns
- `core.py`         `DefaultAgentCore`: the process's sessions, providers and store

Invariant: a front end imports only this package's names (or `protocol.py`'s) and drives the
runtime through the protocols (docs/architecture.md, rule 2); no module below `state.py`
imports one above it, so the door never depends on the implementation behind it.
"""

from defect_core.session.core import DefaultAgentCore
from defect_core.session.protocol import (
    AgentCore,
    AgentError,
    Backends,
    ConfigOption,
    DuplicateSessionId,
    Frontend,
    HistoryPart,
    InvalidCwd,
    InvalidOption,
    McpServerSpec,
    OptionChoice,
    Session,
    SessionNotFound,
    SessionPage,
    SessionSummary,
    StorageError,
    StoredToolCalls,
    ToolCallRecord,
    ToolCallSnapshot,
    TurnError,
    TurnInProgress,
)
from defect_core.session.state import DefaultSession
from defect_core.session.toolset import default_tools

__all__ = [
    "AgentCore",
    "AgentError",
    "Backends",
    "ConfigOption",
    "DefaultAgentCore",
    "DefaultSession",
    "DuplicateSessionId",
    "Frontend",
    "HistoryPart",
    "InvalidCwd",
    "InvalidOption",
    "McpServerSpec",
    "OptionChoice",
    "Session",
    "SessionNotFound",
    "SessionPage",
    "SessionSummary",
    "StorageError",
    "StoredToolCalls",
    "ToolCallRecord",
    "ToolCallSnapshot",
    "TurnError",
    "TurnInProgress",
    "default_tools",
]
