"""Recording: a proxy between a real client and the agent that writes what passed as a transcript.

Owns `record` (the proxy: the client on our stdin/stdout or spawned from `--client`, the agent
in its own process group), `Recorded` (one thing the proxy saw) and `to_transcript` (the
events as transcript lines, through `_Normaliser` and `_TranscriptWriter`).

Invariant: nothing that varies between runs is written literally. Session and tool-call ids
become captures, workspace paths `${workspace}`, versions, times, error messages and token
counts type patterns, and streamed chunks are joined into one `expect_text` (or relaxed to
"some chunk" when the client interrupted the stream). The transcript is written even when the
recording is interrupted. Only the standard library is imported.

Why: the quickest way to a regression test is to use an editor once and replay what passed;
a recording that replays green only on the machine that made it would be worse than none.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import os
import re
import shlex
import signal
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol, TextIO

from defect_acp.client import LINE_LIMIT, kill_group, spawn_agent
from defect_transcript.agent import id_key
from defect_transcript.format import (
    ABSENT,
    ANY,
    CHUNK_KINDS,
    DEFAULT_TIMEOUT,
    FORMAT_VERSION,
    is_operator,
)


class _LineSource(Protocol):
    async def readline(self) -> bytes: ...


class _LineSink(Protocol):
    async def write(self, data: bytes) -> None: ...

    async def close(self) -> None: ...


class _ThreadLines:
    """Lines from a blocking file (stdin when it is a regular file or a terminal)."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    async def readline(self) -> bytes:
        line: bytes = await asyncio.to_thread(self._stream.readline)
        return line


class _FdSink:
    def __init__(self, fd: int) -> None:
        self._fd = fd

    async def write(self, data: bytes) -> None:
        await asyncio.to_thread(_write_all, self._fd, data)

    async def close(self) -> None:
        return None


class _StreamSink:
    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self._writer = writer

    async def write(self, data: bytes) -> None:
        self._writer.write(data)
        await self._writer.drain()

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            self._writer.close()


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


async def _stdin_source() -> _LineSource:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=LINE_LIMIT)
    try:
        await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(0, "rb", closefd=False)
        )
    except (ValueError, OSError):
        return _ThreadLines(sys.stdin.buffer)
    return reader


@dataclass(frozen=True)
class Recorded:
    """One thing the proxy saw: a line from `client` or `agent`, or `client_eof`/`exit`."""

    source: Literal["client", "agent", "client_eof", "exit"]
    raw: bytes = b""
    code: int | None = None


async def record(
    agent_command: Sequence[str],
    out: Path,
    *,
    client_command: Sequence[str] | None = None,
    log: TextIO | None = None,
) -> int:
    """Sit between a client (our stdin/stdout, or `client_command`) and the agent; write what
    passed to `out` as a transcript. Returns 0 once the transcript is written."""
    log = log or sys.stderr
    events: list[Recorded] = []
    agent = await spawn_agent(agent_command)
    client: asyncio.subprocess.Process | None = None
    source: _LineSource
    sink: _LineSink
    if client_command:
        client = await asyncio.create_subprocess_exec(
            *client_command,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=None,
            limit=LINE_LIMIT,
        )
        assert client.stdout is not None and client.stdin is not None
        source, sink = client.stdout, _StreamSink(client.stdin)
    else:
        source, sink = await _stdin_source(), _FdSink(1)
    assert agent.stdin is not None and agent.stdout is not None
    agent_in, agent_out = agent.stdin, agent.stdout

    async def from_client() -> None:
        while line := await source.readline():
            events.append(Recorded("client", line))
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                agent_in.write(line if line.endswith(b"\n") else line + b"\n")
                await agent_in.drain()
        events.append(Recorded("client_eof"))
        with contextlib.suppress(Exception):
            agent_in.close()

    async def from_agent() -> None:
        while line := await agent_out.readline():
            events.append(Recorded("agent", line))
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                await sink.write(line)
        events.append(Recorded("exit", code=await agent.wait()))
        await sink.close()

    client_task = asyncio.create_task(from_client())
    agent_task = asyncio.create_task(from_agent())
    loop = asyncio.get_running_loop()
    main = asyncio.current_task()
    for signum in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            if main is not None:
                loop.add_signal_handler(signum, main.cancel)
    try:
        await agent_task
        if client is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(client.wait(), 5)
    except asyncio.CancelledError:
        log.write("defect transcript record: interrupted; writing what was recorded\n")
    finally:
        client_task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await client_task
        kill_group(agent)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(agent.wait(), 5)
        if client is not None and client.returncode is None:
            client.kill()
            await client.wait()
        for signum in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.remove_signal_handler(signum)
        lines = to_transcript(events, agent_command, env=dict(os.environ))
        await asyncio.to_thread(out.write_text, "\n".join(lines) + "\n", encoding="utf-8")
        log.write(f"defect transcript record: wrote {out} ({len(lines)} lines)\n")
    return 0


_ISO_TIME = r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}"
TIME_KEYS = frozenset({"updatedAt", "createdAt", "timestamp", "time", "startedAt", "endedAt"})
CAPTURE_KEYS = {"sessionId": "sid", "toolCallId": "tool"}
RECORDED_ENV_SKIP = frozenset({"DEFECT_SCRIPT", "DEFECT_STATE_DIR", "DEFECT_LOG_FILE"})


class _Normaliser:
    """Turns recorded values into patterns: what varies between runs is never literal."""

    def __init__(self, workspace: str | None) -> None:
        self.workspace = workspace.rstrip("/") if workspace else None
        self.names: dict[str, str] = {}
        self.counts: dict[str, int] = {}

    def _name_for(self, prefix: str) -> str:
        n = self.counts.get(prefix, 0) + 1
        self.counts[prefix] = n
        if prefix == "sid":
            return "sid" if n == 1 else f"sid{n}"
        return f"{prefix}{n}"

    def text(self, value: str) -> Any:
        if value in (ANY, ABSENT):
            return {"$eq": value}
        if value in self.names:
            return f"${{{self.names[value]}}}"
        text = value.replace("${", "$${")
        for known, name in self.names.items():
            if len(known) >= 8 and known in text:
                text = text.replace(known, f"${{{name}}}")
        if self.workspace and self.workspace in text:
            text = text.replace(self.workspace, "${workspace}")
        return text

    def client(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {k: self.client(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.client(v) for v in value]
        return value

    def agent(self, value: Any, path: tuple[str, ...] = ()) -> Any:
        key = path[-1] if path else ""
        if isinstance(value, dict):
            if is_operator(value):
                return {"$eq": value}
            value = {k: v for k, v in value.items() if k != "_meta"}
            if value.get("sessionUpdate") == "usage_update":
                relaxed = {"used": {"$type": "number"}, "size": {"$type": "number"}, "cost": ANY}
                return {
                    k: relaxed[k] if k in relaxed else self.agent(v, (*path, k))
                    for k, v in value.items()
                }
            return {k: self.agent(v, (*path, k)) for k, v in value.items()}
        if isinstance(value, list):
            return [self.agent(v, path) for v in value]
        if path[-2:] == ("agentInfo", "version"):
            return {"$type": "string"}
        if key in TIME_KEYS:
            return ANY
        if isinstance(value, str):
            if key in CAPTURE_KEYS and value not in self.names:
                name = self._name_for(CAPTURE_KEYS[key])
                self.names[value] = name
                return {"$capture": name}
            if re.match(_ISO_TIME, value) and value not in self.names:
                return {"$regex": _ISO_TIME}
            return self.text(value)
        return value


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _parse_line(raw: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    return value if isinstance(value, dict) else None


def _recorded_header(
    agent_command: Sequence[str], env: dict[str, str], norm: _Normaliser
) -> dict[str, Any]:
    header: dict[str, Any] = {"transcript": FORMAT_VERSION, "timeout": int(DEFAULT_TIMEOUT)}
    command = list(agent_command)
    agent: dict[str, Any] = {}
    acp_at = None
    for i, part in enumerate(command):
        if part == "acp" and (
            (i >= 2 and command[i - 2 : i] == ["-m", "defect_cli"])
            or (i >= 1 and Path(command[i - 1]).name == "defect")
        ):
            acp_at = i
            break
    if acp_at is None:
        agent["command"] = command
    elif command[acp_at + 1 :]:
        agent["args"] = command[acp_at + 1 :]
    recorded_env = {
        k: v
        for k, v in sorted(env.items())
        if k.startswith("DEFECT_") and k not in RECORDED_ENV_SKIP
    }
    if recorded_env.get("DEFECT_LOG_LEVEL"):
        recorded_env.pop("DEFECT_LOG_LEVEL")
    if recorded_env:
        agent["env"] = recorded_env
    if agent:
        header["agent"] = agent
    script = env.get("DEFECT_SCRIPT")
    if script:
        try:
            data = json.loads(Path(script).read_text(encoding="utf-8"))
            replies = data.get("replies") if isinstance(data, dict) else data
            if isinstance(replies, list):
                header["offline_script"] = norm.client(replies)
        except (OSError, json.JSONDecodeError):
            pass
    return header


def to_transcript(
    events: Sequence[Recorded], agent_command: Sequence[str], *, env: dict[str, str]
) -> list[str]:
    """The lines of a transcript that replays `events` (see `record`)."""
    workspace = None
    for event in events:
        message = _parse_line(event.raw) if event.source == "client" else None
        if message and message.get("method") in ("session/new", "session/load"):
            cwd = (message.get("params") or {}).get("cwd")
            if isinstance(cwd, str) and cwd.startswith("/"):
                workspace = cwd
                break
    norm = _Normaliser(workspace)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        f"// recorded by `defect transcript record` on {stamp}; agent: {shlex.join(agent_command)}",
        '// the workspace starts empty on replay: seed files with the header\'s "files"',
        json.dumps(_recorded_header(agent_command, env, norm), ensure_ascii=False),
    ]
    if env.get("DEFECT_PROVIDER") not in (None, "", "scripted", "offline"):
        lines.insert(
            1,
            f"// recorded against the {env['DEFECT_PROVIDER']} provider: a replay without keys "
            'needs an "offline_script" or a "provider_fake" in the header',
        )

    writer = _TranscriptWriter(norm, lines)
    for event in events:
        writer.add(event)
    writer.flush()
    return lines


class _TranscriptWriter:
    """Turns the proxy's events into steps, in order (see `to_transcript`)."""

    def __init__(self, norm: _Normaliser, lines: list[str]) -> None:
        self.norm = norm
        self.lines = lines
        self.client_requests: dict[str, str] = {}
        self.agent_requests: dict[str, str] = {}
        self.open_prompts: dict[str, str] = {}
        """Unanswered session/prompt: request id key → session id."""
        self.interrupted: set[str] = set()
        """Sessions whose turn the client interrupted: their updates vary with timing."""
        self.run: dict[str, Any] | None = None
        """Chunks being joined: {"session", "kind", "text"}."""

    def emit(self, step: dict[str, Any]) -> None:
        self.lines.append(json.dumps(step, ensure_ascii=False))

    def flush(self) -> None:
        if self.run is None:
            return
        step: dict[str, Any] = {"expect_text": self.norm.text(self.run["text"])}
        if self.run["kind"] != "agent_message_chunk":
            step["kind"] = self.run["kind"]
        self.emit(step)
        self.run = None

    def interrupt(self) -> None:
        """The client acted while turns were streaming: how much had streamed is timing."""
        for session in self.open_prompts.values():
            if session in self.interrupted:
                continue
            self.interrupted.add(session)
            if self.run is not None and self.run["session"] == session:
                self.emit(
                    {
                        "expect": {
                            "method": "session/update",
                            "params": {
                                "sessionId": self.norm.client(session),
                                "update": {"sessionUpdate": self.run["kind"]},
                            },
                        },
                        "note": "the turn was streaming (how much had streamed varies)",
                    }
                )
                self.run = None
            self.lines.append(
                "// the client acted mid-turn: this turn's further updates vary with timing "
                "and are not recorded"
            )
        self.flush()

    def add(self, event: Recorded) -> None:
        if event.source == "client_eof":
            self.flush()
            self.emit({"close_stdin": True})
            return
        if event.source == "exit":
            self.flush()
            self.emit({"expect_exit": event.code})
            return
        message = _parse_line(event.raw)
        text = event.raw.decode("utf-8", errors="replace").rstrip("\r\n")
        if event.source == "client":
            self.from_client(message, text)
        elif message is None:
            self.flush()
            self.lines.append(f"// the agent wrote a line that is not JSON: {text[:200]!r}")
        else:
            self.from_agent(message)

    def from_client(self, message: dict[str, Any] | None, text: str) -> None:
        norm = self.norm
        if message is None:
            self.flush()
            self.emit({"send_raw": norm.text(text)})
            return
        method = message.get("method")
        body = {k: v for k, v in message.items() if k != "jsonrpc"}
        if method is None and "id" in message:
            # an answer to the agent's request: the agent was waiting, its stream is complete
            self.flush()
            answered = self.agent_requests.pop(id_key(message.get("id")), None)
            step: dict[str, Any] = {
                "reply": {k: norm.client(v) for k, v in body.items() if k in ("result", "error")}
            }
            if answered:
                step["to"] = answered
            self.emit(step)
            return
        self.interrupt()
        if "id" in message:
            key = id_key(message["id"])
            self.client_requests[key] = str(method)
            if method == "session/prompt":
                self.open_prompts[key] = str(_object(message.get("params")).get("sessionId"))
            self.emit({"send": norm.client(body)})
        else:
            self.emit({"notify": norm.client(body)})

    def from_agent(self, message: dict[str, Any]) -> None:
        norm = self.norm
        params = _object(message.get("params"))
        update = _object(params.get("update"))
        session = str(params.get("sessionId"))
        if message.get("method") == "session/update" and "id" not in message:
            if session in self.interrupted:
                return
            kind = update.get("sessionUpdate")
            if kind in CHUNK_KINDS:
                content = _object(update.get("content"))
                piece = str(content.get("text", "")) if content.get("type") == "text" else ""
                if self.run is not None and (self.run["session"], self.run["kind"]) != (
                    session,
                    kind,
                ):
                    self.flush()
                if self.run is None:
                    self.run = {"session": session, "kind": kind, "text": ""}
                self.run["text"] += piece
                return
        self.flush()
        if "method" not in message:
            key = id_key(message.get("id"))
            if self.client_requests.pop(key, None) == "session/prompt":
                self.interrupted.discard(self.open_prompts.pop(key, ""))
            expect: dict[str, Any] = {"id": message.get("id")}
            if "error" in message:
                code = _object(message["error"]).get("code")
                expect["error"] = {"code": code, "message": {"$type": "string"}}
            else:
                expect["result"] = norm.agent(message.get("result"), ("result",))
            self.emit({"expect": expect})
            return
        expect = {"method": message["method"]}
        if "params" in message:
            expect["params"] = norm.agent(message["params"], ("params",))
        if "id" in message:
            self.agent_requests[id_key(message["id"])] = str(message["method"])
        self.emit({"expect": expect})
