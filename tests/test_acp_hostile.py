"""Hostile input against the real `defect acp` process, over real stdio, in raw lines.

Each test writes what a broken or malicious client could send - ids of the wrong type, nesting
100,000 deep, 20 MB lines, bytes that are not UTF-8, lone surrogates, empty prompts, images
and documents the model's API would refuse, params of the wrong type - and checks the exact
answer, then that the agent still serves: a new session takes a prompt to its end. Every line
the agent writes is read as strict JSON in strict UTF-8 and checked against the ACP schema
(`RawAgent`), so an answer that is not JSON, or a second line where one was due, fails the
test. What was refused must leave nothing in the store.

The last tests cover the repair side: a session stored with an image the API refuses (as an
older defect stored it) takes the next prompt against the strict fake API, which refuses that
image the real API's way; and the writer's fallback for an answer that is not JSON.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import sys
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest

from defect_acp.transport import LINE_LIMIT, MAX_DEPTH, encode_message
from defect_core.model import ImageBlock, TextBlock, assistant, user
from defect_core.providers.anthropic_wire import encode_messages
from defect_core.store import SqliteStore
from defect_fakeapi import DEFAULT_API_KEY, FakeProvider, Reply, WireError, validate_request
from tests.support.acp_harness import REPO, agent_env, script_env, spawn_defect
from tests.support.acp_schema import acp_schema
from tests.support.images import PNG_1X1, b64, gif, jpeg, png, webp_vp8l

pytestmark = pytest.mark.anyio

BAD_ID = 'Invalid request: "id" must be a string, an integer (int64) or null'


# --------------------------------------------------------------------------------------------
# A raw client


def _strict_constant(name: str) -> Any:
    raise AssertionError(f"the agent wrote {name}, which is not JSON")


@dataclass
class RawAgent:
    """`defect acp` with its stdin and stdout in the test's hands, one raw line at a time."""

    process: asyncio.subprocess.Process
    stderr_path: Path
    received: list[dict[str, Any]] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    methods: dict[Any, str] = field(default_factory=dict)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    next_id: int = 1000

    async def send_line(self, line: bytes) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line if line.endswith(b"\n") else line + b"\n")
        await self.process.stdin.drain()

    async def send(self, message: dict[str, Any]) -> None:
        """Send a message as JSON; a lone surrogate in it goes out as its `\\ud800` escape."""
        if "method" in message and "id" in message:
            with contextlib.suppress(TypeError):
                self.methods[message["id"]] = message["method"]
        await self.send_line(json.dumps(message).encode("ascii"))

    async def call(self, method: str, params: Any, request_id: Any = None) -> dict[str, Any]:
        if request_id is None:
            request_id, self.next_id = self.next_id, self.next_id + 1
        await self.send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        return await self.answer(request_id)

    async def answer(self, request_id: Any, timeout: float = 30) -> dict[str, Any]:
        """The response with this id (for null: the oldest one not taken yet)."""
        async with asyncio.timeout(timeout):
            while True:
                for index, message in enumerate(self.received):
                    if "method" not in message and message.get("id") == request_id:
                        return self.received.pop(index)
                self.arrived.clear()
                if self.process.returncode is not None:
                    raise AssertionError(f"the agent exited:\n{self.stderr()[-3000:]}")
                await self.arrived.wait()

    async def read(self) -> None:
        assert self.process.stdout is not None
        while raw := await self.process.stdout.readline():
            try:
                message = json.loads(raw.decode("utf-8"), parse_constant=_strict_constant)
            except (UnicodeDecodeError, ValueError, AssertionError) as exc:
                self.violations.append(f"not strict JSON in UTF-8: {exc}: {raw[:200]!r}")
                continue
            answered = self.methods.get(message.get("id")) if "method" not in message else None
            try:
                acp_schema().check_agent_message(message, answered)
            except AssertionError as exc:
                self.violations.append(str(exc))
            self.received.append(message)
            self.arrived.set()
        self.arrived.set()

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    async def initialize(self) -> None:
        answer = await self.call("initialize", {"protocolVersion": 1})
        assert answer["result"]["protocolVersion"] == 1

    async def new_session(self, cwd: Path) -> str:
        answer = await self.call("session/new", {"cwd": str(cwd), "mcpServers": []})
        return str(answer["result"]["sessionId"])

    async def prompt(self, session_id: str, text: str) -> dict[str, Any]:
        block = {"type": "text", "text": text}
        return await self.call("session/prompt", {"sessionId": session_id, "prompt": [block]})

    async def assert_serving(self, cwd: Path) -> None:
        """The agent is alive and serves a new session to the end of a turn."""
        session_id = await self.new_session(cwd)
        answer = await self.prompt(session_id, "still there?")
        assert answer["result"]["stopReason"] == "end_turn", answer
        assert self.process.returncode is None
        assert not self.violations, "\n".join(self.violations)


@contextlib.asynccontextmanager
async def raw_agent(tmp_path: Path, env: dict[str, str] | None = None) -> AsyncIterator[RawAgent]:
    with tempfile.NamedTemporaryFile(prefix="defect-stderr-", suffix=".log") as stderr:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "defect_cli",
            "acp",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=stderr.fileno(),
            env=env or script_env(tmp_path),
            cwd=str(REPO),
            limit=LINE_LIMIT,
        )
        agent = RawAgent(process, Path(stderr.name))
        reader = asyncio.create_task(agent.read())
        try:
            yield agent
        finally:
            if process.returncode is None:
                process.kill()
            await process.wait()
            await reader


def error(request_id: Any, code: int, message: str) -> dict[str, Any]:
    """An error the transport writes itself (it carries no `data`)."""
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}


def invalid_params(request_id: Any, problem: str) -> dict[str, Any]:
    """A -32602 answered through the SDK (which always writes `data`)."""
    message = f"Invalid params: {problem}"
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "error": {"code": -32602, "message": message, "data": None},
    }


def request_line(
    request_id: str, method: str = "initialize", params: str = '{"protocolVersion":1}'
) -> bytes:
    return f'{{"jsonrpc":"2.0","id":{request_id},"method":"{method}","params":{params}}}'.encode()


# --------------------------------------------------------------------------------------------
# 1. Request ids


async def test_ids_of_the_wrong_type_are_invalid_requests_with_a_null_id(tmp_path: Path) -> None:
    async with raw_agent(tmp_path) as agent:
        await agent.initialize()
        for bad in (
            '{"a":1}',
            "[1]",
            "true",
            "false",
            "1.5",
            "1e400",
            "-0.0",
            "9223372036854775808",
            "-9223372036854775809",
            '"\\ud800"',
        ):
            await agent.send_line(request_line(bad))
            assert await agent.answer(None) == error(None, -32600, BAD_ID), bad
        # A response with an id of the wrong type is refused too (the SDK would crash on it).
        await agent.send_line(b'{"jsonrpc":"2.0","id":{"x":1},"result":{}}')
        assert await agent.answer(None) == error(None, -32600, BAD_ID)
        # A cancel naming an id of the wrong type is a notification: ignored, never answered.
        await agent.send_line(
            b'{"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":{"x":[1]}}}'
        )
        # The edges of int64 and strings are ids like any other.
        for good in (9223372036854775807, -9223372036854775808, "req-é-1", ""):
            answer = await agent.call("initialize", {"protocolVersion": 1}, request_id=good)
            assert answer["id"] == good and answer["result"]["protocolVersion"] == 1
        await agent.assert_serving(tmp_path)
        extra = [m for m in agent.received if "method" not in m]
        assert not extra, f"one answer per line, and none to the cancel: {extra}"


# --------------------------------------------------------------------------------------------
# 2. Nesting, width and length


def nested(levels: int) -> Any:
    value: Any = 0
    for _ in range(levels):
        value = [value]
    return value


async def test_deep_nesting_is_refused_and_the_agent_keeps_serving(tmp_path: Path) -> None:
    async with raw_agent(tmp_path) as agent:
        await agent.initialize()
        await agent.send_line(b"[" * 100_000 + b"]" * 100_000)
        assert await agent.answer(None) == error(
            None, -32700, "Parse error: nested deeper than 128 levels"
        )
        await agent.send_line(b'{"a":' * 100_000 + b"1" + b"}" * 100_000)
        assert await agent.answer(None) == error(
            None, -32700, "Parse error: nested deeper than 128 levels"
        )
        # Parsed, but deeper than the limit: answered with its own id. The message is level 1,
        # params 2, _meta 3, so `nested(125)` under _meta reaches exactly MAX_DEPTH.
        assert MAX_DEPTH == 128
        deep = {"protocolVersion": 1, "_meta": {"deep": nested(126)}}
        answer = await agent.call("initialize", deep, request_id=7)
        assert answer == error(7, -32600, "Invalid request: nested deeper than 128 levels")
        at_limit = {"protocolVersion": 1, "_meta": {"deep": nested(125)}}
        answer = await agent.call("initialize", at_limit, request_id=8)
        assert answer["result"]["protocolVersion"] == 1
        await agent.assert_serving(tmp_path)


async def test_huge_lines_and_many_keys_are_answered(tmp_path: Path) -> None:
    async with raw_agent(tmp_path) as agent:
        await agent.initialize()
        keys = {f"k{n}": n for n in range(200_000)}
        answer = await agent.call("initialize", {"protocolVersion": 1, "_meta": keys})
        assert answer["result"]["protocolVersion"] == 1
        blob = "x" * (20 * 1024 * 1024)
        answer = await agent.call("initialize", {"protocolVersion": 1, "_meta": {"blob": blob}})
        assert answer["result"]["protocolVersion"] == 1
        await agent.send_line(b"\x01" + b"z" * (20 * 1024 * 1024))
        assert await agent.answer(None) == error(
            None, -32700, "Parse error: Expecting value: line 1 column 1 (char 0)"
        )
        await agent.assert_serving(tmp_path)


# --------------------------------------------------------------------------------------------
# 3. Invalid UTF-8 and lone surrogates


NOT_UTF8 = [
    (b"\xff", "0xff"),  # never in UTF-8
    (b"\xed\xa0\x80", "0xed"),  # the UTF-8 form of the surrogate U+D800
    (b"\xc0\xaf", "0xc0"),  # an overlong "/"
    (b"\xe2\x82", "0xe2"),  # a character cut short
]


async def test_bytes_that_are_not_utf8_are_a_parse_error(tmp_path: Path) -> None:
    async with raw_agent(tmp_path) as agent:
        await agent.initialize()
        for bad, shown in NOT_UTF8:
            line = b'{"jsonrpc":"2.0","id":3,"method":"session/new","params":{"cwd":"/tmp/'
            line += bad + b'","mcpServers":[]}}'
            await agent.send_line(line)
            at = line.index(bad)
            assert await agent.answer(None) == error(
                None, -32700, f"Parse error: the line is not UTF-8 (byte {shown} at {at})"
            )
        await agent.assert_serving(tmp_path)


async def test_lone_surrogates_are_invalid_params_and_nothing_is_stored(tmp_path: Path) -> None:
    async with raw_agent(tmp_path) as agent:
        await agent.initialize()
        answer = await agent.call("session/new", {"cwd": "/tmp/\ud800", "mcpServers": []}, 2)
        assert answer == invalid_params(
            2, "cwd: holds a lone surrogate (\\ud800), which is not text"
        )
        server = {
            "name": "s",
            "command": "/bin/true",
            "args": [],
            "env": [{"name": "K", "value": "\ud83d"}],
        }
        answer = await agent.call("session/new", {"cwd": str(tmp_path), "mcpServers": [server]}, 3)
        assert answer == invalid_params(
            3, "mcpServers[0].env[0].value: holds a lone surrogate (\\ud83d), which is not text"
        )
        info = {"name": "editor", "\udfff": 1}
        answer = await agent.call("initialize", {"protocolVersion": 1, "clientInfo": info}, 4)
        assert answer == invalid_params(
            4, "a key in clientInfo: holds a lone surrogate (\\udfff), which is not text"
        )
        session_id = await agent.new_session(tmp_path)
        poisoned = {"sessionId": session_id, "prompt": [{"type": "text", "text": "a\udc00b"}]}
        answer = await agent.call("session/prompt", poisoned, 5)
        assert answer == invalid_params(
            5, "prompt[0].text: holds a lone surrogate (\\udc00), which is not text"
        )
        assert (await agent.prompt(session_id, "hello"))["result"]["stopReason"] == "end_turn"
        await agent.assert_serving(tmp_path)

    with SqliteStore(tmp_path / "state" / "sessions.sqlite3") as store:
        assert len(store.list().sessions) == 2, "no session for a refused session/new"
        stored = store.load(session_id).transcript
    prompts = [m.text() for m in stored if m.role == "user"]
    assert prompts == ["hello"], "the refused prompt left nothing in the store"


# --------------------------------------------------------------------------------------------
# 4. Empty prompts


async def test_empty_prompts_are_answered_invalid_params(tmp_path: Path) -> None:
    async with raw_agent(tmp_path) as agent:
        await agent.initialize()
        session_id = await agent.new_session(tmp_path)
        answer = await agent.call("session/prompt", {"sessionId": session_id, "prompt": []}, 2)
        assert answer == invalid_params(
            2, "prompt: empty; a prompt needs at least one content block"
        )
        blanks = [{"type": "text", "text": ""}, {"type": "text", "text": " \n\t"}]
        answer = await agent.call("session/prompt", {"sessionId": session_id, "prompt": blanks}, 3)
        assert answer == invalid_params(3, "prompt: nothing to send (every text block is empty)")
        assert (await agent.prompt(session_id, "hello"))["result"]["stopReason"] == "end_turn"
        await agent.assert_serving(tmp_path)


# --------------------------------------------------------------------------------------------
# 5. Images and documents the model's API would refuse


def image(mime: str, data: str, **extra: Any) -> dict[str, Any]:
    return {"type": "image", "mimeType": mime, "data": data, **extra}


def blob(uri: str, mime: str, data: str) -> dict[str, Any]:
    return {"type": "resource", "resource": {"uri": uri, "mimeType": mime, "blob": data}}


OVER_5_MB = b64(png(10, 10)) + "A" * (5 * 1024 * 1024)
REFUSED_BLOCKS = [
    (image("image/png", "!!not base64!!"), "prompt[1] (image): not valid base64"),
    (image("image/png", b64(b"\x00\x01 garbage bytes")), "prompt[1] (image): not a valid PNG"),
    (
        image("image/png", b64(jpeg(64, 64))),
        "prompt[1] (image): not a valid PNG (the bytes are a JPEG)",
    ),
    (
        image("image/webp", b64(gif(9, 9))),
        "prompt[1] (image): not a valid WebP (the bytes are a GIF)",
    ),
    (
        image("image/bmp", b64(b"BM" + bytes(60))),
        "prompt[1] (image): type 'image/bmp' is not supported (PNG, JPEG, GIF or WebP)",
    ),
    (
        image("image/png", b64(png(8001, 600))),
        "prompt[1] (image): 8001x600 pixels, over the 8000-pixel limit",
    ),
    (
        image("image/jpeg", b64(jpeg(300, 9000))),
        "prompt[1] (image): 300x9000 pixels, over the 8000-pixel limit",
    ),
    (
        image("image/webp", b64(webp_vp8l(16000, 10))),
        "prompt[1] (image): 16000x10 pixels, over the 8000-pixel limit",
    ),
    (
        image("image/png", OVER_5_MB),
        f"prompt[1] (image): larger than 5 MB ({len(OVER_5_MB)} bytes of base64)",
    ),
    (image("image/png", "", uri="file:///home/me/a.png"), "prompt[1] (image): not an http(s) URL"),
    (image("image/png", ""), "prompt[1] (image): no data and no uri"),
    (
        blob("file:///r.pdf", "application/pdf", "%%%"),
        "prompt[1] (resource file:///r.pdf): not valid base64",
    ),
    (
        blob("file:///r.pdf", "application/pdf", b64(b"<html>not a pdf")),
        "prompt[1] (resource file:///r.pdf): not a valid PDF",
    ),
]


async def test_images_and_documents_the_api_would_refuse_are_invalid_params(tmp_path: Path) -> None:
    async with raw_agent(tmp_path) as agent:
        await agent.initialize()
        session_id = await agent.new_session(tmp_path)
        for request_id, (block, problem) in enumerate(REFUSED_BLOCKS, start=10):
            prompt = [{"type": "text", "text": "look"}, block]
            params = {"sessionId": session_id, "prompt": prompt}
            assert await agent.call("session/prompt", params, request_id) == invalid_params(
                request_id, problem
            )
        accepted = [
            {"type": "text", "text": "look"},
            image("image/png", PNG_1X1),
            blob("file:///r.pdf", "application/pdf", b64(b"%PDF-1.7\n%\xe2\xe3\n")),
        ]
        answer = await agent.call("session/prompt", {"sessionId": session_id, "prompt": accepted})
        assert answer["result"]["stopReason"] == "end_turn"
        await agent.assert_serving(tmp_path)

    with SqliteStore(tmp_path / "state" / "sessions.sqlite3") as store:
        stored = store.load(session_id).transcript
    images = [b for m in stored for b in m.content if isinstance(b, ImageBlock)]
    assert [i.data for i in images] == [PNG_1X1], "only the accepted prompt was stored"


def anthropic_env(fake: FakeProvider, tmp_path: Path) -> dict[str, str]:
    return agent_env(
        DEFECT_PROVIDER="anthropic",
        ANTHROPIC_BASE_URL=fake.url,
        ANTHROPIC_API_KEY=DEFAULT_API_KEY,
        DEFECT_REASONING_EFFORT="off",
        DEFECT_STATE_DIR=str(tmp_path / "state"),
    )


async def test_a_stored_image_the_api_refuses_is_replaced_on_the_wire_only(
    fake_provider: FakeProvider, tmp_path: Path
) -> None:
    env = anthropic_env(fake_provider, tmp_path)
    async with spawn_defect(env=env) as agent:
        await agent.initialize()
        session_id = await agent.new_session(tmp_path)
    # What an older defect stored: a JPEG labelled PNG, which the API refuses on every request.
    poisoned = ImageBlock(media_type="image/png", data=b64(jpeg(32, 32)))
    with SqliteStore(tmp_path / "state" / "sessions.sqlite3") as store:
        store.append_message(session_id, user("what is in this picture?", poisoned))
        store.append_message(session_id, assistant("A small picture."))
    next_prompt = user("and now?")
    with pytest.raises(WireError) as refused:  # the fake API refuses it as the real one does
        history = [*store_transcript(tmp_path, session_id), next_prompt]
        validate_request({"model": "m", "max_tokens": 1024, "messages": encode_messages(history)})
    assert refused.value.message == (
        "messages.0.content.1.image.source.base64.data: Image does not match the provided "
        "media type image/png"
    )

    fake_provider.enqueue(Reply.text("Now it works."))
    async with spawn_defect(env=env) as agent:
        await agent.initialize()
        await agent.conn.load_session(cwd=str(tmp_path), session_id=session_id, mcp_servers=[])
        shown = [
            u.content for _, u in agent.client.updates if u.session_update == "user_message_chunk"
        ]
        assert any(getattr(c, "data", None) == poisoned.data for c in shown), "replay shows it"
        response = await agent.prompt(session_id, "and now?")
        assert response.stop_reason == "end_turn"
        agent.assert_schema_clean()
    await anyio.to_thread.run_sync(fake_provider.wait_for_requests, len(fake_provider.requests))
    record = fake_provider.requests[-1]
    assert record.rejected is False, record.error_message
    first = [
        {k: v for k, v in block.items() if k != "cache_control"}
        for block in record.body["messages"][0]["content"]
    ]
    assert first == [
        {"type": "text", "text": "what is in this picture?"},
        {"type": "text", "text": "[image removed: not a valid PNG (the bytes are a JPEG)]"},
    ]
    stored = store_transcript(tmp_path, session_id)
    assert stored[0].content[1] == poisoned, "the store keeps the image; only the copy changed"
    assert isinstance(stored[0].content[0], TextBlock)


def store_transcript(tmp_path: Path, session_id: str) -> list[Any]:
    with SqliteStore(tmp_path / "state" / "sessions.sqlite3") as store:
        return list(store.load(session_id).transcript)


# --------------------------------------------------------------------------------------------
# 6. Params of the wrong type


async def test_params_of_the_wrong_type_are_invalid_params_naming_the_field(tmp_path: Path) -> None:
    cwd = str(tmp_path)
    long_cwd = "/" + "a" * 100_000
    cases: list[tuple[str, dict[str, Any], str]] = [
        (
            "initialize",
            {"protocolVersion": 1, "clientCapabilities": {"fs": "yes"}},
            "clientCapabilities.fs: expected an object, got a string",
        ),
        (
            "initialize",
            {"protocolVersion": 1, "clientCapabilities": {"fs": {"readTextFile": "yes"}}},
            "clientCapabilities.fs.readTextFile: expected a boolean, got a string",
        ),
        (
            "initialize",
            {"protocolVersion": 1, "clientCapabilities": {"terminal": 1}},
            "clientCapabilities.terminal: expected a boolean, got a number",
        ),
        (
            "initialize",
            {"protocolVersion": "1"},
            "protocolVersion: expected an integer, got a string",
        ),
        (
            "initialize",
            {"protocolVersion": 70000},
            "protocolVersion: 70000 is not a protocol version (0-65535)",
        ),
        (
            "initialize",
            {"protocolVersion": 1, "clientInfo": {"name": 5}},
            "clientInfo.name: expected a string, got a number",
        ),
        ("session/new", {"cwd": cwd, "mcpServers": [{"bad": 1}]}, "mcpServers[0].name: required"),
        (
            "session/new",
            {"cwd": cwd, "mcpServers": [{"name": "x"}]},
            "mcpServers[0].command: required",
        ),
        (
            "session/new",
            {
                "cwd": cwd,
                "mcpServers": [{"name": "x", "command": "/bin/x", "args": "-v", "env": []}],
            },
            "mcpServers[0].args: expected an array, got a string",
        ),
        (
            "session/new",
            {
                "cwd": cwd,
                "mcpServers": [
                    {"type": "http", "name": "x", "url": "http://h", "headers": [{"name": "a"}]}
                ],
            },
            "mcpServers[0].headers[0].value: required",
        ),
        (
            "session/new",
            {"cwd": cwd, "mcpServers": [{"type": "acp", "name": "x"}]},
            "mcpServers[0].type: 'acp' is not one of stdio, http, sse",
        ),
        (
            "session/new",
            {"cwd": cwd, "mcpServers": "none"},
            "mcpServers: expected an array, got a string",
        ),
        ("session/new", {"cwd": cwd}, "mcpServers: required"),
        (
            "session/new",
            {"cwd": long_cwd, "mcpServers": []},
            "cwd: 100001 bytes long, over the 4096-byte limit of a path",
        ),
        (
            "session/new",
            {"cwd": "/tmp/" + "d" * 300, "mcpServers": []},
            "cwd: a directory name of 300 bytes, over the 255 limit",
        ),
        (
            "session/new",
            {"cwd": "/tmp/a\x00b", "mcpServers": []},
            "cwd: holds a NUL character, which no path can",
        ),
        (
            "session/load",
            {"cwd": cwd, "mcpServers": [], "sessionId": ["s"]},
            "sessionId: expected a string, got an array",
        ),
        (
            "session/set_mode",
            {"sessionId": "s" * 5000, "modeId": "ask"},
            "sessionId: 5000 characters, longer than any id (1024)",
        ),
        (
            "session/prompt",
            {"sessionId": "s", "prompt": [{"type": "video"}]},
            "prompt[0].type: 'video' is not one of text, image, audio, resource_link, resource",
        ),
        (
            "session/prompt",
            {"sessionId": "s", "prompt": [{"type": "text", "text": None}]},
            "prompt[0].text: required",
        ),
        # What the SDK's own models refuse comes back as one line too.
        (
            "session/prompt",
            {"sessionId": "s", "prompt": [{"type": "audio"}]},
            "prompt[0].audio.data: Field required (and 1 more)",
        ),
        ("session/list", [], "params: expected an object, got an array"),
    ]
    async with raw_agent(tmp_path) as agent:
        await agent.initialize()
        for request_id, (method, params, problem) in enumerate(cases, start=10):
            answer = await agent.call(method, params, request_id)
            assert answer == invalid_params(request_id, problem), method
        # Fields a newer client may add are accepted, wherever they are.
        newer = {
            "protocolVersion": 1,
            "clientCapabilities": {"fs": {"readTextFile": False, "x": 1}, "future": {"y": [1]}},
            "clientInfo": {"name": "next-editor", "version": "9", "vendor": "z"},
            "newTopLevel": True,
        }
        assert (await agent.call("initialize", newer))["result"]["protocolVersion"] == 1
        extra = {"cwd": cwd, "mcpServers": [], "additionalDirectories": [], "futureField": {"z": 1}}
        assert (await agent.call("session/new", extra))["result"]["sessionId"].startswith("sess_")
        # The SDK merges `_meta` into the handler's arguments: a key named like a parameter
        # must not replace the checked value (here: a 100 kB cwd, a broken MCP server).
        meta = {"cwd": long_cwd, "mcp_servers": [{"bad": 1}], "editor.example/trace": "t1"}
        shadowed = {"cwd": cwd, "mcpServers": [], "_meta": meta}
        created = (await agent.call("session/new", shadowed))["result"]["sessionId"]
        listed = (await agent.call("session/list", {"cwd": cwd}))["result"]["sessions"]
        assert created in {entry["sessionId"] for entry in listed}
        assert "meta_keys_dropped" in agent.stderr()
        await agent.assert_serving(tmp_path)
        assert "invalid_params" in agent.stderr(), "refusals are logged to stderr"

    with SqliteStore(tmp_path / "state" / "sessions.sqlite3") as store:
        assert len(store.list().sessions) == 3, "a refused session/new creates nothing"


# --------------------------------------------------------------------------------------------
# The writer: whatever a handler answers, what goes out is strict JSON in UTF-8


def test_an_answer_that_is_not_json_becomes_an_internal_error_for_its_id() -> None:
    line = encode_message({"jsonrpc": "2.0", "id": 4, "result": {"cost": math.nan}})
    assert line is not None and line.endswith(b"\n")
    assert json.loads(line) == error(
        4, -32603, "Internal error: the answer could not be written as JSON"
    )
    unencodable = encode_message({"jsonrpc": "2.0", "id": "x", "result": {"set": {1}}})
    assert unencodable is not None and json.loads(unencodable)["error"]["code"] == -32603
    assert json.loads(unencodable)["id"] == "x"


def test_a_notification_that_is_not_json_is_dropped_and_a_request_fails() -> None:
    notification = {"jsonrpc": "2.0", "method": "session/update", "params": {"x": math.inf}}
    assert encode_message(notification) is None
    with pytest.raises(ValueError, match="session/request_permission"):
        encode_message(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "session/request_permission",
                "params": {"x": -math.inf},
            }
        )


def test_a_lone_surrogate_goes_out_as_the_replacement_character() -> None:
    line = encode_message({"jsonrpc": "2.0", "id": 1, "result": {"title": "a\ud800b\U0001f600"}})
    assert line is not None
    assert (
        line.decode("utf-8") == '{"jsonrpc":"2.0","id":1,"result":{"title":"a\ufffdb\U0001f600"}}\n'
    )
