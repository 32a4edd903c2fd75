"""MCP servers as session tools: `McpHub` against real servers written on the official SDK.

The servers live in `tests/mcp_servers/` (stdio: `echo_server.py`, `broken_server.py`; HTTP
and SSE: `http_server.py`, one process for the whole module). What is pinned down here:
tools listed with names, schemas and safety; results (text, images, embedded resources,
`isError`, truncation); servers that fail to start, hang at start, crash or hang mid-call;
servers starting in the background (tools joining in the order the servers became ready, a
failure told once, a wait that says so); no process left after `aclose`, started or not;
HTTP and SSE with headers; `.mcp.json` and merging; and whole turns through the real runner
and the Anthropic provider against the strict fake.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from structlog.testing import capture_logs

from defect_core.config import Settings
from defect_core.events import (
    AgentEvent,
    Notice,
    PermissionRequested,
    ToolCallStarted,
    ToolCallUpdated,
    TurnEnded,
    TurnFailed,
)
from defect_core.mcp import (
    McpHub,
    McpServerSpec,
    McpTool,
    load_mcp_json,
    merge_servers,
    object_schema,
    supported_transports,
    tool_name,
)
from defect_core.model import ImageBlock, TextBlock
from defect_core.session import Backends, DefaultAgentCore, DefaultSession
from defect_core.session.toolset import default_tools
from defect_core.tools.backends import LocalFsBackend, LocalShellBackend
from defect_core.tools.base import Safety, ToolContext, ToolOutput, ToolRegistry
from defect_core.turn import MAX_RESULT_CHARS
from defect_fakeapi import DEFAULT_API_KEY, FakeProvider, Reply, ToolUseBlock

SERVERS = Path(__file__).resolve().parent / "mcp_servers"
ECHO = SERVERS / "echo_server.py"
BROKEN = SERVERS / "broken_server.py"
HTTP = SERVERS / "http_server.py"
TOKEN = "test-token-123"
REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.anyio


def stdio(name: str, script: Path, *args: str, env: dict[str, str] | None = None) -> McpServerSpec:
    return McpServerSpec(
        name=name,
        transport="stdio",
        command=sys.executable,
        args=(str(script), *args),
        env=tuple((env or {}).items()),
    )


def alive(pid: int) -> bool:
    """Running, as opposed to gone or a zombie nobody reaped yet."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def gone(pid: int, within: float = 2.0) -> bool:
    """Whether `pid` is gone within `within` seconds (an exiting process takes a moment)."""
    deadline = time.monotonic() + within
    while alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def ctx(cwd: Path) -> ToolContext:
    return ToolContext(session_id="s1", cwd=cwd, fs=LocalFsBackend(), shell=LocalShellBackend())


def by_name(hub: McpHub) -> dict[str, McpTool]:
    return {t.name: t for t in hub.tools}


def text_of(output: ToolOutput) -> str:
    if isinstance(output.content, str):
        return output.content
    return "\n".join(p.text for p in output.content if isinstance(p, TextBlock))


@pytest.fixture(scope="module")
def http_server() -> Iterator[dict[str, str]]:
    """One process serving the echo tools over streamable HTTP and SSE (bearer token)."""
    proc = subprocess.Popen(
        [sys.executable, str(HTTP), "--token", TOKEN],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout.readline() for _ in "ab"))
    reader.start()
    reader.join(30)
    if len(lines) < 2 or not all(lines):
        proc.kill()
        pytest.fail(f"the MCP HTTP test server did not start within 30 s (said {lines})")
    urls = dict(line.split() for line in lines)
    yield urls
    proc.terminate()
    proc.wait(10)
    proc.stdout.close()


def http_spec(urls: dict[str, str], name: str = "web", token: str = TOKEN) -> McpServerSpec:
    return McpServerSpec(
        name=name,
        transport="http",
        url=urls["streamable-http"],
        headers=(("Authorization", f"Bearer {token}"),),
    )


# --- a stdio server's tools and results -----------------------------------------------------


async def test_stdio_tools_join_with_names_schemas_safety_and_their_results(
    tmp_path: Path,
) -> None:
    hub = await McpHub.connect([stdio("echo", ECHO)], tmp_path, timeout=20)
    try:
        assert hub.failures == []
        tools = by_name(hub)
        assert sorted(tools) == sorted(
            f"mcp__echo__{n}"
            for n in (
                "echo",
                "write_note",
                "wipe",
                "image",
                "resource",
                "big",
                "fail",
                "crash",
                "hang",
                "pid",
                "spawn_child",
            )
        )
        echo = tools["mcp__echo__echo"]
        assert echo.input_schema["type"] == "object"
        assert echo.input_schema["properties"]["text"]["type"] == "string"
        assert echo.input_schema["required"] == ["text"]
        assert echo.description == "Echo the text back."
        assert (echo.safety, echo.kind) == (Safety.READ_ONLY, "read")
        assert tools["mcp__echo__write_note"].safety is Safety.MUTATING
        assert tools["mcp__echo__wipe"].safety is Safety.DESTRUCTIVE
        assert tools["mcp__echo__wipe"].kind == "other"
        assert echo.permission_key({"text": "x"}) == "mcp__echo__echo"
        view = echo.describe({"text": "hello"}, ctx(tmp_path))
        assert (view.title, view.kind) == ("echo: echo (text=hello)", "read")

        out = await echo.run({"text": "hello"}, ctx(tmp_path))
        assert (out.content, out.is_error) == ("echo: hello", False)

        image = await tools["mcp__echo__image"].run({}, ctx(tmp_path))
        assert not image.is_error
        assert isinstance(image.content, tuple)
        caption, picture = image.content
        assert caption == TextBlock(text="a red pixel")
        assert isinstance(picture, ImageBlock)
        assert (
            picture.media_type == "image/png" and picture.data and picture.data.startswith("iVBOR")
        )
        assert [type(d).__name__ for d in image.display] == ["TextDisplay", "ImageDisplay"]

        resource = await tools["mcp__echo__resource"].run({}, ctx(tmp_path))
        assert resource.content == (
            "[resource file:///notes/todo.md]\n- buy milk\n"
            "[binary resource file:///data/blob.bin (application/octet-stream, 300 bytes)]"
        )

        failed = await tools["mcp__echo__fail"].run({"reason": "disk full"}, ctx(tmp_path))
        assert failed.is_error and "disk full" in text_of(failed)

        # Concurrent calls from several tasks share the one connection.
        results: list[str] = []

        async def call(i: int) -> None:
            results.append(text_of(await echo.run({"text": str(i)}, ctx(tmp_path))))

        async with anyio.create_task_group() as tg:
            for i in range(8):
                tg.start_soon(call, i)
        assert sorted(results) == sorted(f"echo: {i}" for i in range(8))
    finally:
        await hub.aclose()


async def test_aclose_stops_the_server_and_the_children_it_left(tmp_path: Path) -> None:
    hub = await McpHub.connect([stdio("echo", ECHO)], tmp_path, timeout=20)
    tools = by_name(hub)
    try:
        server_pid = int(text_of(await tools["mcp__echo__pid"].run({}, ctx(tmp_path))))
        child_pid = int(text_of(await tools["mcp__echo__spawn_child"].run({}, ctx(tmp_path))))
        assert hub.pids() == {"echo": server_pid}
        assert alive(server_pid) and alive(child_pid)
    finally:
        await hub.aclose()
    assert gone(server_pid)
    assert gone(child_pid), "a child of the server outlived the session"
    after = await tools["mcp__echo__echo"].run({"text": "late"}, ctx(tmp_path))
    assert after.is_error and "not running" in text_of(after)


# --- failures -------------------------------------------------------------------------------


async def test_servers_that_fail_to_start_are_reported_and_the_others_connect(
    tmp_path: Path, http_server: dict[str, str]
) -> None:
    specs = [
        http_spec(http_server),
        stdio("exits", BROKEN, "exit"),
        stdio("garbage", BROKEN, "garbage"),
        McpServerSpec(name="missing", transport="stdio", command="no-such-mcp-server-cmd"),
        McpServerSpec(name="refused", transport="http", url="http://127.0.0.1:9/mcp"),
        McpServerSpec(name="refused-sse", transport="sse", url="http://127.0.0.1:9/sse"),
        http_spec(http_server, name="bad-token", token="wrong"),
    ]
    started = time.monotonic()
    hub = await McpHub.connect(specs, tmp_path, timeout=15)
    elapsed = time.monotonic() - started
    try:
        failures = dict(hub.failures)
        assert sorted(failures) == [
            "bad-token",
            "exits",
            "garbage",
            "missing",
            "refused",
            "refused-sse",
        ]
        assert failures["exits"] == (
            "exited during start-up: broken_server: cannot load config: no such file: settings.toml"
        )
        assert "not JSON-RPC" in failures["garbage"] and "Welcome" in failures["garbage"]
        assert failures["missing"] == "command not found: no-such-mcp-server-cmd"
        assert "ConnectError" in failures["refused"]
        assert "ConnectError" in failures["refused-sse"]
        assert all("\n" not in reason for reason in failures.values())
        assert hub.servers == ["web"]
        assert "mcp__web__echo" in by_name(hub)
        notice = hub.failure_notice()
        assert notice is not None and "MCP server 'exits' failed to start" in notice
        assert elapsed < 10, f"failing servers held connect up for {elapsed:.1f} s"
        pids = hub.pids()
    finally:
        await hub.aclose()
    assert set(pids) == {"exits", "garbage"}
    assert all(gone(pid) for pid in pids.values())


async def test_a_server_that_hangs_at_start_times_out_without_holding_up_the_others(
    tmp_path: Path, http_server: dict[str, str]
) -> None:
    specs = [stdio("silent", BROKEN, "silent"), http_spec(http_server)]
    started = time.monotonic()
    hub = await McpHub.connect(specs, tmp_path, timeout=1.5)
    elapsed = time.monotonic() - started
    try:
        assert 1.4 <= elapsed < 4, elapsed  # the 1.5 s timeout, never the others' pace
        assert hub.failures == [("silent", "did not start within 1.5 s")]
        assert "mcp__web__echo" in by_name(hub)
        silent_pid = hub.pids()["silent"]
    finally:
        await hub.aclose()
    assert gone(silent_pid)


async def test_cancelling_connect_stops_the_servers_it_started(tmp_path: Path) -> None:
    pid_file = tmp_path / "silent.pid"
    spec = stdio("silent", BROKEN, "silent", env={"BROKEN_PID_FILE": str(pid_file)})
    started = time.monotonic()
    with anyio.move_on_after(1.0) as scope:
        await McpHub.connect([spec], tmp_path, timeout=30)
    assert scope.cancelled_caught
    assert time.monotonic() - started < 4  # not the 30 s connect timeout
    assert gone(int(pid_file.read_text()), within=2.0)


# --- starting in the background -------------------------------------------------------------


def recorder() -> tuple[list[AgentEvent], Callable[[AgentEvent], Awaitable[None]]]:
    told: list[AgentEvent] = []

    async def publish(event: AgentEvent) -> None:
        told.append(event)

    return told, publish


async def until(condition: Callable[[], bool]) -> None:
    with anyio.fail_after(30):
        while not condition():
            await anyio.sleep(0.02)


async def test_start_returns_at_once_and_tools_join_in_the_order_servers_became_ready(
    tmp_path: Path,
) -> None:
    gate = tmp_path / "alpha.go"
    specs = [stdio("alpha", ECHO, env={"ECHO_WAIT_FOR": str(gate)}), stdio("zulu", ECHO)]
    hub = McpHub.start(specs, tmp_path, timeout=30)
    try:
        assert (hub.starting, hub.tools, hub.failures) == (["alpha", "zulu"], [], [])
        assert hub.names_for_prompt() == ["mcp__"], "their guidance before they are ready"
        told, publish = recorder()
        await until(lambda: hub.servers == ["zulu"])
        assert hub.starting == ["alpha"] and not gate.exists()
        tools = ToolRegistry(default_tools())
        async with anyio.create_task_group() as tg:
            tg.start_soon(hub.offer, tools, publish)
            await until(lambda: bool(told))
            assert told == [Notice("Waiting for MCP server 'alpha' to start…")]
            assert not any(t.name.startswith("mcp__") for t in tools), "not before the wait"
            gate.touch()
        names = [t.name for t in tools]
        built_in = [t.name for t in default_tools()]
        assert names[: len(built_in)] == built_in
        # In the order the servers became ready: neither the order given nor the names' order.
        assert [n.split("__")[1] for n in names[len(built_in) :]] == ["zulu"] * 11 + ["alpha"] * 11
        assert (hub.servers, hub.starting) == (["zulu", "alpha"], [])
        await hub.offer(tools, publish)  # nothing new: no notice, no change
        assert [t.name for t in tools] == names and len(told) == 1
    finally:
        await hub.aclose()


async def test_a_failure_is_told_once_before_or_after_the_front_end_follows(
    tmp_path: Path,
) -> None:
    gate = tmp_path / "late.go"
    specs = [
        stdio("early", BROKEN, "exit"),
        stdio("late", BROKEN, "exit", env={"BROKEN_WAIT_FOR": str(gate)}),
    ]
    hub = McpHub.start(specs, tmp_path, timeout=30)
    told, publish = recorder()
    reason = (
        "exited during start-up: broken_server: cannot load config: no such file: settings.toml"
    )
    try:
        await until(lambda: bool(hub.failures))
        assert hub.follow_failures(publish) == f"MCP server 'early' failed to start: {reason}"
        assert told == [] and hub.starting == ["late"]
        gate.touch()
        await hub.wait_started()
        assert told == [Notice(f"MCP server 'late' failed to start: {reason}", "warning")]
        assert hub.names_for_prompt() == [], "no server offers tools, nor may"
    finally:
        await hub.aclose()


async def test_aclose_while_servers_start_leaves_no_process(tmp_path: Path) -> None:
    never, pid_file = tmp_path / "never.go", tmp_path / "slow.pid"
    env = {"ECHO_WAIT_FOR": str(never), "ECHO_PID_FILE": str(pid_file)}
    hub = McpHub.start([stdio("slow", ECHO, env=env)], tmp_path, timeout=30)
    await until(lambda: pid_file.exists() and bool(pid_file.read_text()))
    pid = int(pid_file.read_text())
    assert alive(pid) and hub.starting == ["slow"]
    await hub.aclose()
    assert gone(pid), "a server still starting is stopped with its hub"
    assert hub.starting == [] and hub.tools == []
    # Closed before its start-up task even ran: nothing is ever spawned.
    early_pid = tmp_path / "early.pid"
    env = {"ECHO_WAIT_FOR": str(never), "ECHO_PID_FILE": str(early_pid)}
    early = McpHub.start([stdio("early", ECHO, env=env)], tmp_path, timeout=30)
    await early.aclose()
    await early.wait_started()
    assert early.pids() == {} and not early_pid.exists()


async def test_a_crash_mid_call_fails_that_call_and_every_later_one_clearly(
    tmp_path: Path,
) -> None:
    hub = await McpHub.connect([stdio("echo", ECHO)], tmp_path, timeout=20)
    tools = by_name(hub)
    try:
        server_pid = hub.pids()["echo"]
        child_pid = int(text_of(await tools["mcp__echo__spawn_child"].run({}, ctx(tmp_path))))
        crashed = await tools["mcp__echo__crash"].run({}, ctx(tmp_path))
        assert crashed.is_error
        assert "MCP server 'echo' stopped working" in text_of(crashed)
        assert "crashing on purpose" in text_of(crashed)  # its last words on stderr
        later = await tools["mcp__echo__echo"].run({"text": "anyone?"}, ctx(tmp_path))
        assert later.is_error
        assert "MCP server 'echo' is not running" in text_of(later)
        assert gone(server_pid)
    finally:
        await hub.aclose()
    assert gone(child_pid)


async def test_a_hung_call_times_out_or_is_cancelled_and_the_server_keeps_working(
    tmp_path: Path,
) -> None:
    hub = await McpHub.connect([stdio("echo", ECHO)], tmp_path, timeout=20, call_timeout=0.5)
    tools = by_name(hub)
    try:
        started = time.monotonic()
        hung = await tools["mcp__echo__hang"].run({}, ctx(tmp_path))
        assert time.monotonic() - started < 2
        assert hung.is_error
        assert text_of(hung) == (
            "MCP server 'echo' did not answer hang within 0.5 s; the call was abandoned"
        )
        # A cancelled call (the user stopped the turn) leaves the connection usable.
        with anyio.move_on_after(0.2) as scope:
            await tools["mcp__echo__hang"].run({}, ctx(tmp_path))
        assert scope.cancelled_caught
        again = await tools["mcp__echo__echo"].run({"text": "still here"}, ctx(tmp_path))
        assert (again.content, again.is_error) == ("echo: still here", False)
    finally:
        await hub.aclose()


# --- HTTP and SSE ---------------------------------------------------------------------------


async def test_http_and_sse_servers_connect_with_their_headers(
    tmp_path: Path, http_server: dict[str, str]
) -> None:
    assert supported_transports() == {"stdio", "http", "sse"}
    sse = McpServerSpec(
        name="events",
        transport="sse",
        url=http_server["sse"],
        headers=(("Authorization", f"Bearer {TOKEN}"),),
    )
    sse_without_token = McpServerSpec(name="no-token", transport="sse", url=http_server["sse"])
    hub = await McpHub.connect([http_spec(http_server), sse, sse_without_token], tmp_path)
    try:
        assert [name for name, _ in hub.failures] == ["no-token"]
        assert "401" in dict(hub.failures)["no-token"]
        tools = by_name(hub)
        for server in ("web", "events"):
            out = await tools[f"mcp__{server}__echo"].run({"text": server}, ctx(tmp_path))
            assert (out.content, out.is_error) == (f"echo: {server}", False)
        image = await tools["mcp__events__image"].run({}, ctx(tmp_path))
        assert isinstance(image.content, tuple) and isinstance(image.content[1], ImageBlock)
        assert tools["mcp__web__wipe"].safety is Safety.DESTRUCTIVE
    finally:
        await hub.aclose()
    gone = await tools["mcp__web__echo"].run({"text": "late"}, ctx(tmp_path))
    assert gone.is_error


# --- names, schemas, specs ------------------------------------------------------------------


def test_tool_names_are_legal_for_the_api_and_unique() -> None:
    assert tool_name("echo", "echo") == "mcp__echo__echo"
    assert tool_name("my server", "read.file/v2") == "mcp__my_server__read_file_v2"
    long = tool_name("a" * 40, "b" * 40)
    assert len(long) == 64 and long.startswith("mcp__aaaa")
    assert long != tool_name("a" * 40, "b" * 39 + "c")


def test_input_schemas_are_object_schemas_the_api_accepts() -> None:
    assert object_schema(None) == {"type": "object", "properties": {}}
    assert object_schema({"properties": {"a": {"type": "string"}}}) == {
        "type": "object",
        "properties": {"a": {"type": "string"}},
    }
    assert object_schema({"type": "array"}) == {"type": "object", "properties": {}}
    union = {"type": "object", "properties": {"a": {}}, "anyOf": [{"required": ["a"]}]}
    assert object_schema(union) == {"type": "object", "properties": {"a": {}}}


def test_mcp_json_gives_stdio_http_and_sse_servers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MCP_TEST_TOKEN", "s3cret")
    monkeypatch.delenv("MCP_TEST_UNSET", raising=False)
    (tmp_path / ".mcp.json").write_text(
        json.dumps(
            {
                "mcpServers": {
                    "files": {"command": "npx", "args": ["-y", "server"], "env": {"A": "1"}},
                    "api": {
                        "type": "http",
                        "url": "https://example.com/mcp",
                        "headers": {"Authorization": "Bearer ${MCP_TEST_TOKEN}"},
                    },
                    "events": {"type": "sse", "url": "${MCP_TEST_UNSET:-http://localhost}/sse"},
                    "broken": {"type": "carrier-pigeon"},
                    "nocommand": {"args": []},
                }
            }
        )
    )
    with capture_logs() as logs:
        specs = load_mcp_json(tmp_path)
    assert specs == [
        McpServerSpec(
            name="files", transport="stdio", command="npx", args=("-y", "server"), env=(("A", "1"),)
        ),
        McpServerSpec(
            name="api",
            transport="http",
            url="https://example.com/mcp",
            headers=(("Authorization", "Bearer s3cret"),),
        ),
        McpServerSpec(name="events", transport="sse", url="http://localhost/sse"),
    ]
    ignored = {e["server"] for e in logs if e["event"] == "mcp_server_ignored"}
    assert ignored == {"broken", "nocommand"}


def test_a_malformed_mcp_json_is_ignored_with_a_warning_naming_it(tmp_path: Path) -> None:
    assert load_mcp_json(tmp_path) == []  # no file: nothing, silently
    path = tmp_path / ".mcp.json"
    for text in ('{"mcpServers": {', '["not", "a", "table"]'):
        path.write_text(text)
        with capture_logs() as logs:
            assert load_mcp_json(tmp_path) == []
        assert [(e["event"], e["path"]) for e in logs] == [("mcp_json_ignored", str(path))]


def test_the_request_wins_a_name_clash_with_configured_servers() -> None:
    requested = McpServerSpec(name="db", transport="http", url="http://editor/mcp")
    configured = [
        McpServerSpec(name="db", transport="stdio", command="db-server"),
        McpServerSpec(name="git", transport="stdio", command="git-server"),
    ]
    assert merge_servers([requested], configured) == (requested, configured[1])
    assert merge_servers([], configured) == tuple(configured)


def test_importing_the_module_and_asking_for_transports_does_not_import_the_sdk() -> None:
    code = (
        "import sys, defect_core.mcp as m; assert m.supported_transports(); "
        "sys.exit('mcp' in sys.modules or 'mcp_types' in sys.modules)"
    )
    assert subprocess.run([sys.executable, "-c", code], cwd=REPO).returncode == 0


async def test_no_servers_means_no_work(tmp_path: Path) -> None:
    hub = await McpHub.connect([], tmp_path)
    assert (hub.tools, hub.failures, hub.failure_notice()) == ([], [], None)
    await hub.aclose()


# --- whole turns: the real runner, the Anthropic provider, the strict fake ------------------


@pytest.fixture
def api_key(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("ANTHROPIC_API_KEY", DEFAULT_API_KEY)
    return DEFAULT_API_KEY


def settings_for(fake: FakeProvider) -> Settings:
    return Settings(provider="anthropic", base_url=fake.url, retries=0, reasoning_effort="off")


async def run_turn(
    session: DefaultSession,
    prompt: str,
    answer: Callable[[PermissionRequested], Awaitable[str]] | None = None,
) -> tuple[str, list[AgentEvent]]:
    events: list[AgentEvent] = []
    receive = session.subscribe()

    async def drain() -> None:
        async for event in receive:
            events.append(event)
            if isinstance(event, PermissionRequested):
                assert answer is not None, f"unexpected permission question: {event.title}"
                session.resolve_permission(event.tool_call_id, await answer(event))
            if isinstance(event, TurnEnded | TurnFailed):
                return

    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            tg.start_soon(drain)
            stop = await session.run_turn([TextBlock(text=prompt)])
    receive.close()
    return stop, events


def tool_result(fake: FakeProvider, request: int) -> dict[str, Any]:
    """The first tool_result of the last message of the fake's request number `request`."""
    record = fake.requests[request]
    assert not record.rejected, record.error_message
    last = record.messages[-1]
    results = [b for b in last["content"] if b["type"] == "tool_result"]
    return results[0]


async def test_mcp_tools_run_through_a_full_turn(
    tmp_path: Path, fake_provider: FakeProvider, api_key: str
) -> None:
    from defect_core.providers.anthropic import anthropic_provider

    fake = fake_provider
    fake.enqueue(
        Reply.tool_use("toolu_echo", "mcp__echo__echo", {"text": "hello"}),
        Reply.tool_use("toolu_image", "mcp__echo__image", {}),
        Reply.tool_use("toolu_big", "mcp__echo__big", {"size": MAX_RESULT_CHARS + 50_000}),
        Reply.text("All three tools answered."),
    )
    hub = await McpHub.connect([stdio("echo", ECHO)], tmp_path, timeout=20)
    provider = anthropic_provider(settings_for(fake))
    core = DefaultAgentCore(
        settings_for(fake), provider=provider, tools=lambda: [*default_tools(), *hub.tools]
    )
    try:
        session = await core.create_session(
            "s-mcp", tmp_path, Backends(fs=LocalFsBackend(), shell=LocalShellBackend())
        )
        stop, events = await run_turn(session, "use the echo server")
        assert stop == "end_turn"
        assert len(fake.requests) == 4

        offered = {t["name"]: t for t in fake.requests[0].body["tools"]}
        assert {"read_file", "bash", "mcp__echo__echo", "mcp__echo__wipe"} <= set(offered)
        assert offered["mcp__echo__echo"]["input_schema"]["properties"]["text"]["type"] == "string"

        echoed = tool_result(fake, 1)
        assert echoed["tool_use_id"] == "toolu_echo" and not echoed.get("is_error")
        assert echoed["content"] == "echo: hello"

        pictured = tool_result(fake, 2)["content"]
        assert [b["type"] for b in pictured] == ["text", "image"]
        assert pictured[1]["source"]["media_type"] == "image/png"

        big = tool_result(fake, 3)["content"]
        assert "characters truncated" in big and len(big) < MAX_RESULT_CHARS + 100

        started = [e for e in events if isinstance(e, ToolCallStarted)]
        assert [(e.title, e.kind) for e in started] == [
            ("echo: echo (text=hello)", "read"),
            ("echo: image", "read"),
            (f"echo: big (size={MAX_RESULT_CHARS + 50_000})", "read"),
        ]
        finished = [e.status for e in events if isinstance(e, ToolCallUpdated) and e.status]
        assert finished.count("completed") == 3 and "failed" not in finished
        assert not any(isinstance(e, PermissionRequested) for e in events)
    finally:
        await core.aclose()
        await hub.aclose()
        await provider.aclose()


async def test_a_destructive_mcp_tool_asks_even_when_edits_are_accepted(
    tmp_path: Path, fake_provider: FakeProvider, api_key: str, http_server: dict[str, str]
) -> None:
    from defect_core.providers.anthropic import anthropic_provider

    fake = fake_provider
    fake.enqueue(
        Reply.of(
            [
                ToolUseBlock("toolu_read", "mcp__web__echo", {"text": "look"}),
                ToolUseBlock("toolu_note", "mcp__web__write_note", {"text": "remember"}),
                ToolUseBlock("toolu_wipe", "mcp__web__wipe", {"target": "everything"}),
            ]
        ),
        Reply.text("Done."),
    )
    hub = await McpHub.connect([http_spec(http_server)], tmp_path)
    provider = anthropic_provider(settings_for(fake))
    core = DefaultAgentCore(settings_for(fake), provider=provider, tools=lambda: hub.tools)
    asked: list[str] = []

    async def answer(request: PermissionRequested) -> str:
        asked.append(request.title)
        return "allow_once" if "wipe" in request.title else "reject_once"

    try:
        session = await core.create_session(
            "s-perm", tmp_path, Backends(fs=LocalFsBackend(), shell=LocalShellBackend())
        )
        await session.set_mode("accept-edits")
        stop, _ = await run_turn(session, "clean up", answer)
        assert stop == "end_turn"
        assert asked == ["web: write_note (text=remember)", "web: wipe (target=everything)"]
        record = fake.requests[1]
        assert not record.rejected, record.error_message
        results = {b["tool_use_id"]: b for b in record.messages[-1]["content"]}
        assert results["toolu_read"]["content"] == "echo: look"
        assert results["toolu_note"]["is_error"] is True
        assert results["toolu_wipe"]["content"] == "wiped everything"
    finally:
        await core.aclose()
        await hub.aclose()
        await provider.aclose()
