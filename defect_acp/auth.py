"""ACP authentication: the login method `initialize` offers, `authenticate` and `logout`.

Owns what the bridge says about credentials: the one method in `authMethods` — a *terminal*
method (`type: "terminal"`, `args: ["login"]`): the client runs `defect login` in a terminal
for the person, who chooses a provider and types the key there — whether a client is told
of it (`auth_methods`), the answer to `authenticate` (`authenticate`) and to `logout`
(`logout`). The credentials themselves are the composition root's business: it hands
`serve` an `AuthDoor` (`defect_cli/acp_auth.py`) over the stored credentials
(`defect_core/config/credentials.py`), so the bridge imports nothing of the runtime for it.

Invariants:
- Offered only to a client that says it can run it: `clientCapabilities.auth.terminal`
  (ACP), or the `_meta["terminal-auth"]` flag earlier clients and the ACP registry's check
  send; that entry also carries the legacy `_meta["terminal-auth"]` launch block (the
  interpreter, `-m defect_cli login`). No *agent* method: defect completes no login by
  itself without a terminal, and "use the environment" is not a method (docs/editors.md).
- `authenticate` re-reads the credentials at that moment (the person has just run `defect
  login` in another process): success once usable ones exist for the configured provider,
  else -32000 (ACP's auth-required) with what is missing and how to log in; an unknown
  method is -32602. A client that never calls it loses nothing: every prompt looks the
  credentials up itself, the environment's first.
- `logout` removes every stored credential (the request names no provider or session);
  the environment's keys stay, as a shell's variables are not the agent's to clear.
"""

from __future__ import annotations

import sys
from typing import Any, Protocol

from acp import RequestError
from acp import schema as s

__all__ = [
    "TERMINAL_METHOD_ID",
    "AuthDoor",
    "agent_auth_capabilities",
    "auth_methods",
    "authenticate",
    "logout",
]

TERMINAL_METHOD_ID = "defect-login"
AUTH_REQUIRED = -32000


class AuthDoor(Protocol):
    """What the bridge may ask of the credentials (built by the composition root)."""

    async def problem(self) -> str | None:
        """None when the configured provider has usable credentials now; else one line:
        what is missing and how to log in."""
        ...

    def logout(self) -> list[str]:
        """Remove every stored credential; the providers whose entries were removed."""
        ...


def _offered(capabilities: s.ClientCapabilities | None) -> bool:
    if capabilities is None:
        return False
    auth = capabilities.auth
    if auth is not None and auth.terminal:
        return True
    meta = capabilities.field_meta or {}
    return bool(meta.get("terminal-auth"))


def auth_methods(capabilities: s.ClientCapabilities | None) -> list[Any]:
    """`authMethods` of the `initialize` answer for a client with `capabilities`."""
    if not _offered(capabilities):
        return []
    return [
        s.TerminalAuthMethod(
            type="terminal",
            id=TERMINAL_METHOD_ID,
            name="Log in with defect login",
            description="Runs `defect login` in a terminal: choose a provider (Anthropic, "
            "AWS Bedrock, or one of your configuration), enter its key; it is checked with "
            "the provider, then stored privately for every session. Environment variables "
            "such as ANTHROPIC_API_KEY still work, and win.",
            args=["login"],
            env={},
            field_meta={
                "terminal-auth": {
                    "command": sys.executable,
                    "args": ["-m", "defect_cli", "login"],
                    "label": "defect login",
                }
            },
        )
    ]


def agent_auth_capabilities(door: AuthDoor | None) -> s.AgentAuthCapabilities:
    """`agentCapabilities.auth`: `logout` when there is a store to log out of."""
    return s.AgentAuthCapabilities(logout=s.LogoutCapabilities() if door is not None else None)


async def authenticate(door: AuthDoor | None, method_id: str) -> s.AuthenticateResponse:
    """The answer to `authenticate(method_id)` (see the module's invariants)."""
    if method_id != TERMINAL_METHOD_ID:
        raise RequestError(
            -32602,
            f"unknown authentication method {method_id!r}: defect offers "
            f"{TERMINAL_METHOD_ID!r} (`defect login` in a terminal), or reads ANTHROPIC_API_KEY "
            "and AWS credentials from its environment",
        )
    problem = await door.problem() if door is not None else None
    if problem:
        raise RequestError(AUTH_REQUIRED, problem)
    return s.AuthenticateResponse()


async def logout(door: AuthDoor | None, params: Any) -> dict[str, Any]:
    """The answer to `logout` (routed by hand: the pinned SDK does not route it)."""
    if params is not None and not isinstance(params, dict):
        raise RequestError(-32602, "logout takes an object of params (or none)")
    if door is not None:
        door.logout()
    return {}
