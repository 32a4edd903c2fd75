"""The runtime's errors: what a front end may catch from `AgentCore` and `Session`.

Owns `AgentError` and its kinds. Each carries a `code` the ACP bridge maps onto a JSON-RPC
error (`defect_acp/server.py`), and a one-line message a person can act on.

Invariant: this module imports nothing of defect. It sits at the bottom of the layers
(docs/layers.md) because every layer raises these errors — the store (`StorageError`,
`SessionNotFound`), the turn runner (`TurnError`), the runtime behind the door — while the
door (`session/protocol.py`) re-exports them for the front end. Defining them below all of those is
what lets each raise them without importing a layer above it.
"""

from __future__ import annotations

from typing import Any


class AgentError(Exception):
    """Base of the runtime's errors. `str(e)` is one line a person can act on."""

    code = "internal"


class InvalidCwd(AgentError):
    code = "invalid_params"


class DuplicateSessionId(AgentError):
    code = "invalid_params"


class SessionNotFound(AgentError):
    code = "not_found"


class TurnInProgress(AgentError):
    code = "invalid_request"


class InvalidOption(AgentError):
    """An unknown mode, config option or value."""

    code = "invalid_params"


class StorageError(AgentError):
    code = "internal"


class TurnError(AgentError):
    """The turn could not go on. `data` says whether retrying may help.

    Raised by the turn runner; the session then publishes the `TurnFailed` event
    (`events.py`), the last event of that turn.
    """

    code = "provider"

    def __init__(self, message: str, data: dict[str, Any] | None = None, *, auth: bool = False):
        super().__init__(message)
        self.data = data or {}
        self.auth = auth
        if auth:
            self.code = "auth_required"
