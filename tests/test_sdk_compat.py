"""The SDK shims of `defect_acp/sdk_compat.py` still fit the SDK (and pydantic) installed.

Each test fails when the ground moves under one shim: the installed release leaves the range
the shims were checked for, the pin and that range part, a private name a shim uses is gone
or changed shape, or the SDK starts doing itself what a shim adds (then the shim goes). The
connection shims are driven over a real `AgentSideConnection` through the SDK's in-memory
transport pair, as JSON-RPC messages; pydantic's in a fresh interpreter, since they change
process-wide defaults.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.metadata
import inspect
import json
import re
import subprocess
import sys
import tomllib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from acp._transport import Transport, memory_transport_pair

from defect_acp import sdk_compat
from defect_acp.sdk_compat import (
    SdkChanged,
    add_request_route,
    agent_connection,
    wrap_router,
)

REPO = Path(__file__).resolve().parents[1]


def _version(text: str) -> tuple[int, ...]:
    """The leading numeric release of a version string: "0.12.1" → (0, 12, 1)."""
    found = re.match(r"\d+(?:\.\d+)*", text)
    assert found, text
    return tuple(int(part) for part in found.group().split("."))


def _dotted(version: tuple[int, ...]) -> str:
    return ".".join(str(part) for part in version)


def _pin(name: str) -> str:
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    pins = [d for d in project["dependencies"] if re.match(rf"{re.escape(name)}\b", d)]
    assert len(pins) == 1, pins
    return str(pins[0])


# --- the versions -----------------------------------------------------------------------------


def test_installed_sdk_is_in_the_range_the_shims_were_checked_for() -> None:
    installed = _version(importlib.metadata.version(sdk_compat.ACP_SDK_DISTRIBUTION))
    low, high = sdk_compat.ACP_SDK_CHECKED
    assert low <= installed < high, (
        f"agent-client-protocol {_dotted(installed)} is outside {_dotted(low)}..<{_dotted(high)}:"
        " re-check every shim of defect_acp/sdk_compat.py, then widen ACP_SDK_CHECKED"
    )


def test_the_pin_is_the_checked_range() -> None:
    """Moving the pin in pyproject.toml without re-checking the shims fails here."""
    low, high = sdk_compat.ACP_SDK_CHECKED
    assert _pin("agent-client-protocol") == (
        f"agent-client-protocol>={_dotted(low)},<{_dotted(high)}"
    )
    low, high = sdk_compat.PYDANTIC_CHECKED
    assert _pin("pydantic") == f"pydantic>={_dotted(low)},<{_dotted(high)}"


def test_installed_pydantic_is_in_the_checked_range() -> None:
    installed = _version(importlib.metadata.version("pydantic"))
    low, high = sdk_compat.PYDANTIC_CHECKED
    assert low <= installed < high


# --- the connection -----------------------------------------------------------------------------


class NoMethods:
    """An agent that implements nothing: every SDK-routed method is -32601."""


class DeleteOnly:
    """Has a method named like the SDK would name a `session/delete` handler."""

    def __init__(self) -> None:
        self.called = False

    async def delete_session(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        self.called = True
        return {}


@contextlib.asynccontextmanager
async def listening(agent: Any, setup: Callable[[Any], None]) -> AsyncIterator[Transport]:
    """An agent-side connection listening on one end of an in-memory pair; yields the other."""
    agent_end, client_end = memory_transport_pair()
    conn = agent_connection(agent, agent_end)
    setup(conn)
    task = asyncio.ensure_future(conn.listen())
    try:
        yield client_end
    finally:
        await client_end.close()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
        with contextlib.suppress(Exception):
            await conn.close()


async def call(client_end: Transport, method: str, params: Any, request_id: int = 1) -> Any:
    await client_end.send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
    answer = await asyncio.wait_for(client_end.receive(), 10)
    assert answer is not None and answer.get("id") == request_id, answer
    return answer


@pytest.mark.anyio
async def test_an_added_route_is_answered_over_the_wire() -> None:
    seen: list[Any] = []

    async def ping(params: Any) -> dict[str, Any]:
        seen.append(params)
        return {"pong": params["n"]}

    def setup(conn: Any) -> None:
        add_request_route(conn, "x/ping", ping)

    async with listening(NoMethods(), setup) as client:
        answer = await call(client, "x/ping", {"n": 7})
    assert answer.get("result") == {"pong": 7}, answer
    assert seen == [{"n": 7}], "the handler gets the params as received"


@pytest.mark.anyio
async def test_a_wrapped_router_sees_every_request_first_and_keeps_its_routes() -> None:
    """The server's order: the route is added, then the router wrapped; a route added after
    the wrapping still reaches the router through the wrapper."""
    calls: list[tuple[str, Any, bool]] = []

    class Recorder:
        def __init__(self, router: Any) -> None:
            self.router = router

        def __getattr__(self, name: str) -> Any:
            return getattr(self.router, name)

        def __call__(self, method: str, params: Any, is_notification: bool) -> Awaitable[Any]:
            calls.append((method, params, is_notification))
            return self.router(method, params, is_notification)  # type: ignore[no-any-return]

    async def first(params: Any) -> dict[str, Any]:
        return {"route": "first"}

    async def second(params: Any) -> dict[str, Any]:
        return {"route": "second"}

    def setup(conn: Any) -> None:
        add_request_route(conn, "x/first", first)
        wrap_router(conn, Recorder)
        add_request_route(conn, "x/second", second)

    async with listening(NoMethods(), setup) as client:
        one = await call(client, "x/first", {"a": 1}, 1)
        two = await call(client, "x/second", {"b": 2}, 2)
        missing = await call(client, "session/new", {"cwd": "/", "mcpServers": []}, 3)
    assert one.get("result") == {"route": "first"}
    assert two.get("result") == {"route": "second"}
    assert missing.get("error", {}).get("code") == -32601, missing
    assert [c[0] for c in calls] == ["x/first", "x/second", "session/new"]


@pytest.mark.anyio
async def test_the_sdk_still_does_not_route_session_delete() -> None:
    """When the SDK routes `session/delete` itself, `add_request_route` for it must go."""
    agent = DeleteOnly()
    async with listening(agent, lambda conn: None) as client:
        answer = await call(client, "session/delete", {"sessionId": "sess_x"})
    assert answer.get("error", {}).get("code") == -32601, (
        f"the SDK now routes session/delete ({answer}): drop the shim in defect_acp/server.py"
    )
    assert not agent.called


def test_the_sdk_transport_protocol_is_what_defect_transport_implements() -> None:
    """`agent_connection` hands the SDK defect's transport as an `acp._transport.Transport`."""
    from defect_acp.transport import StdioTransport

    members = {
        name
        for name in vars(Transport)
        if not name.startswith("_") and callable(getattr(Transport, name))
    }
    assert members == {"send", "receive", "close"}, members
    for name in members:
        ours = getattr(StdioTransport, name)
        assert inspect.iscoroutinefunction(ours), name
        theirs = inspect.signature(getattr(Transport, name)).parameters
        assert list(inspect.signature(ours).parameters) == list(theirs), name


def test_a_shim_names_itself_when_the_sdk_moved() -> None:
    class Bare:
        pass

    async def handler(params: Any) -> None:
        return None

    with pytest.raises(SdkChanged, match=r"sdk_compat\.add_request_route: .*_conn\._handler"):
        add_request_route(Bare(), "x/y", handler)  # type: ignore[arg-type]
    with pytest.raises(SdkChanged, match=r"sdk_compat\.wrap_router"):
        wrap_router(Bare(), lambda router: router)  # type: ignore[arg-type]


# --- pydantic -----------------------------------------------------------------------------------


def test_pydantic_private_names_have_the_shape_the_shim_patches() -> None:
    from pydantic._internal import _config, _fields

    signature = inspect.signature(_fields.extract_docstrings_from_cls)
    assert list(signature.parameters) == ["cls", "use_inspect"]
    assert isinstance(_config.config_defaults, dict)
    assert "defer_build" in _config.config_defaults


PREPARED = """
import json
from defect_acp.sdk_compat import prepare_pydantic
applied = prepare_pydantic()
from acp import schema as s
field = s.AgentCapabilities.model_fields["load_session"]
deferred = type(s.InitializeRequest.__pydantic_validator__).__name__
s.InitializeRequest.model_validate({"protocolVersion": 1})
built = type(s.InitializeRequest.__pydantic_validator__).__name__
print(json.dumps({"applied": applied, "description": field.description,
                  "deferred": deferred, "built": built}))
"""


def test_prepare_pydantic_applies_both_before_the_sdk_import() -> None:
    """In a fresh interpreter, as `defect acp` runs it: docstrings are not read, validators
    are built on first use (and then validate)."""
    done = subprocess.run(
        [sys.executable, "-c", PREPARED],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
        check=True,
    )
    result = json.loads(done.stdout)
    assert result["applied"] == ["skip_attribute_docstrings", "defer_build"]
    assert result["description"] is None
    assert result["deferred"] == "MockValSer"
    assert result["built"] == "SchemaValidator"


# --- one place ----------------------------------------------------------------------------------

PRIVATE_REACH = re.compile(
    r"pydantic\._internal|\bacp\._\w|from acp\.router\b|(?<!self)\._conn\b|(?<!self)\._handler\b"
)


def test_no_other_module_reaches_into_the_sdk() -> None:
    offenders = []
    for package in ("defect_acp", "defect_cli", "defect_core"):
        for path in sorted((REPO / package).rglob("*.py")):
            if path.name == "sdk_compat.py" and path.parent.name == "defect_acp":
                continue
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if PRIVATE_REACH.search(line):
                    offenders.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    assert not offenders, "move these into defect_acp/sdk_compat.py:\n" + "\n".join(offenders)
