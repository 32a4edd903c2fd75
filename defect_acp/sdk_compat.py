"""Every place defect reaches past the public API of the ACP SDK or of pydantic: the shims.

Written against agent-client-protocol 0.12.1 and pydantic 2.14.4 (the releases installed when
each shim was last checked). Owns, each with why it exists:
- `agent_connection` — the SDK's `AgentSideConnection` over defect's own transport
  (`defect_acp/transport.py`), which satisfies the SDK's private `acp._transport.Transport`
  protocol (`send`/`receive`/`close`);
- `add_request_route` — a method the SDK does not route (`session/delete`), added to the
  connection's private router (`conn._conn._handler`, a `MessageRouter`, with `acp.router.Route`);
- `wrap_router` — a callable put in front of that router (`defect_acp/params.py` checks the
  params there, before the SDK's models read them);
- `prepare_pydantic` — two of pydantic's private defaults changed, before the first
  `import acp`, so that the SDK's ~270 models import in about half the time.

Invariants:
- No other module of defect touches a private name of `acp` or `pydantic`
  (`tests/test_sdk_compat.py` checks the sources), so an SDK upgrade is reviewed here.
- Each shim was checked against the SDK range in `ACP_SDK_CHECKED` (the pin of
  `pyproject.toml`) and pydantic `PYDANTIC_CHECKED`; `tests/test_sdk_compat.py` fails when the
  installed SDK leaves that range, when the pin and this range differ, when a private name a
  shim uses is gone or changed shape, and when the SDK starts doing what a shim adds (then the
  shim goes).
- A shim that finds the SDK changed under it raises `SdkChanged` naming itself, never a bare
  `AttributeError` deep in a request; `prepare_pydantic` only optimises, so it applies what
  it can and returns what applied.
- Module level imports only the standard library: `prepare_pydantic` must run before the
  first `import acp`.

Why one module: each reach is a bet that a private detail stays put. Kept together, with the
version each bet was made on, an upgrade is one file to read and one test file to run.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from acp.agent.connection import AgentSideConnection

ACP_SDK_DISTRIBUTION = "agent-client-protocol"
ACP_SDK_CHECKED = ((0, 12, 1), (0, 13))
"""The SDK releases the shims were checked against: from the first (inclusive) up to the
second (exclusive) — the same range as the pin in `pyproject.toml`."""
PYDANTIC_CHECKED = ((2, 7), (3,))
"""The pydantic pin `prepare_pydantic` must cope with: written against 2.14.4, and it fails
soft (applies nothing) on a release whose private names moved."""

Router = Callable[[str, Any, bool], Awaitable[Any]]
"""What the SDK's connection calls for every incoming request or notification:
`router(method, params, is_notification)`."""


class SdkChanged(RuntimeError):
    """The SDK no longer has what a shim relies on: the shim must be revisited."""

    def __init__(self, shim: str, what: str) -> None:
        super().__init__(
            f"defect_acp.sdk_compat.{shim}: {what} (checked with {ACP_SDK_DISTRIBUTION} "
            f"{_dotted(ACP_SDK_CHECKED[0])} up to {_dotted(ACP_SDK_CHECKED[1])})"
        )


def _dotted(version: tuple[int, ...]) -> str:
    return ".".join(str(part) for part in version)


# --- the connection -------------------------------------------------------------------------


def agent_connection(agent: Any, transport: Any) -> AgentSideConnection:
    """The SDK's agent-side connection, speaking over `transport` (not listening yet).

    SDK 0.12.1: `AgentSideConnection(to_agent, input_stream)` accepts, instead of a pair of
    asyncio streams, any object that passes `isinstance(x, acp._transport.Transport)` — a
    private, runtime-checkable protocol (`send`, `receive`, `close`). defect needs its own
    transport: the SDK's stdio framing drops malformed lines silently or dies on them, where
    ACP requires -32700/-32600 answers (`defect_acp/transport.py`). The agent is not an SDK
    `Agent` subclass (`defect_acp/server.py` says why), hence `Any`; unstable methods
    (`session/list`, `session/resume`, `session/close`, `session/fork`) are routed only with
    `use_unstable_protocol`."""
    from acp.agent.connection import AgentSideConnection

    try:
        return AgentSideConnection(agent, transport, listening=False, use_unstable_protocol=True)
    except TypeError as exc:
        raise SdkChanged(
            "agent_connection", f"AgentSideConnection no longer takes a transport: {exc}"
        ) from None


def _router_holder(conn: AgentSideConnection, shim: str) -> Any:
    """The SDK's inner `Connection`, which keeps the router as `_handler`.

    SDK 0.12.1 (`acp/agent/connection.py`, `acp/connection.py`): `AgentSideConnection._conn`
    is a `Connection` whose `_handler` is the `MessageRouter` built from the agent. There is
    no public way to reach it."""
    inner = getattr(conn, "_conn", None)
    if inner is None or not callable(getattr(inner, "_handler", None)):
        raise SdkChanged(shim, "AgentSideConnection._conn._handler (the router) is gone")
    return inner


def add_request_route(
    conn: AgentSideConnection, method: str, handler: Callable[[Any], Awaitable[Any]]
) -> None:
    """Route the request `method` to `handler(params)`, which gets the raw params.

    SDK 0.12.1 routes only the methods of its `Agent` protocol; `session/delete` (unstable in
    ACP, agentclientprotocol/agent-client-protocol#1216, stabilised by #1370) is not among
    them, and an unrouted method is -32601. The router's `add_route(Route(...))` is how the
    SDK registers its own methods (`acp/router.py`); a handler whose only parameter is
    `params` is called with the params as received."""
    from acp.router import Route

    router = _router_holder(conn, "add_request_route")._handler
    add_route = getattr(router, "add_route", None)
    if add_route is None:  # (a router wrapped by `wrap_router` passes attributes through)
        raise SdkChanged("add_request_route", "the router has no add_route")
    add_route(Route(method=method, func=handler, kind="request"))


def wrap_router(conn: AgentSideConnection, wrap: Callable[[Any], Router]) -> None:
    """Put `wrap(router)` where the connection calls its router.

    SDK 0.12.1 validates params with its pydantic models inside the router, and those models
    replace a malformed field by its default (`x-deserialize-default-on-error`) or drop a bad
    list item (`skip-invalid-items`) without telling anyone; it also merges `_meta` entries
    into a handler's keyword arguments after the params. There is no public hook in front of
    the router, so the connection's `_handler` is replaced by the wrapper (which must still
    expose the router's attributes: routes are added to it afterwards)."""
    inner = _router_holder(conn, "wrap_router")
    inner._handler = wrap(inner._handler)


# --- pydantic -------------------------------------------------------------------------------


def prepare_pydantic() -> list[str]:
    """Import the ACP SDK in about half the time; returns the names of what applied.

    Call before the first `import acp`. An editor waits on `initialize` and `session/new`, and
    `import acp` is most of that wait (scripts/bench_startup.py prints it as the floor):
    `acp.schema` defines some hundreds of pydantic models whose
    base config asks pydantic to read every field's docstring from the source file
    (`use_attribute_docstrings`; below Python 3.13 that re-parses each class with `ast`), and
    pydantic builds every validator eagerly. Field docstrings only feed JSON-schema
    descriptions, which defect never generates, and validators can be built on first use
    (`defer_build`; `defect_acp/fastimport.py` builds a turn's ahead of the first prompt).

    Pydantic 2.7–2.14 (private, `pydantic/_internal`): `_fields.extract_docstrings_from_cls(
    cls, use_inspect=False)` reads the docstrings; `_config.config_defaults` is the dict of
    config defaults. If either moved, that optimisation is skipped (and not listed)."""
    applied: list[str] = []
    try:
        from pydantic._internal import _config, _fields
    except ImportError:
        return applied
    if callable(getattr(_fields, "extract_docstrings_from_cls", None)):

        def _no_docstrings(cls: type, use_inspect: bool = False) -> dict[str, str]:
            return {}

        _fields.extract_docstrings_from_cls = _no_docstrings
        applied.append("skip_attribute_docstrings")
    defaults = getattr(_config, "config_defaults", None)
    if isinstance(defaults, dict) and "defer_build" in defaults:
        defaults["defer_build"] = True
        applied.append("defer_build")
    return applied
