"""Hostile input against the real `defect acp` process, over real stdio, in raw lines.

Each test writes what a broken or malicious client could send - ids of the wrong type, nesting
100,000 deep, 20 MB lines, bytes that are not UTF-8 - and checks the exact answer, then that
the agent still serves: a new session takes a prompt to its end. Every line the agent writes
is read as strict JSON in strict UTF-8 and checked against the ACP schema (`RawAgent`), so an
answer that is not JSON, or a second line where one was due, fails the test.

The last tests cover the writer's fallback for an answer that is not JSON.
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

import pytest

from defect_acp.transport import LINE_LIMIT, MAX_DEPTH, encode_message
from tests.support.acp_harness import REPO, script_env
from tests.support.acp_schema import acp_schema

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
            "defect_acp",
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
# 3. Invalid UTF-8


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
