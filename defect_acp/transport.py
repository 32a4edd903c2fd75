"""The stdio transport under the ACP SDK's connection: newline-delimited JSON-RPC, strictly.

Owns the protocol channel: reading stdin line by line, writing one JSON object per line to
the protocol descriptor, and what the SDK's own stdio transport does not do:
- a line that is not JSON is answered with -32700 (id null); an object that is not a
  JSON-RPC 2.0 request, notification or response is answered with -32600; the connection
  keeps serving either way (the SDK drops such lines silently);
- when stdin closes, `on_eof` runs first (the agent cancels its running turns), then
  requests already received are answered (within a grace period) before the connection
  ends; `wait_answered` offers the same wait to a shutdown that is not an end of input;
- `$/cancel_request` is handed to the agent (the SDK ignores it);
- a request of ours the client can no longer answer (its input to us closed) fails at once
  instead of waiting for ever: pending ones get an error response, new ones `ConnectionError`;
- once a response has been written, `on_response(method, params, response)` runs, so the
  agent can send what must follow an answer (e.g. `available_commands_update` after
  `session/new` — a client ignores updates for a session it has not been told about yet).

Invariant: this is the only writer of the protocol channel; writes are whole lines, one at a
time (a lock), so concurrent senders never interleave bytes.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Awaitable, Callable
from typing import Any

from defect_core.log import get_logger

log = get_logger("defect.acp.transport")

ResponseHook = Callable[[str, Any, dict[str, Any]], Awaitable[None] | None]
CancelHook = Callable[[Any, str | None, Any], None]
EofHook = Callable[[], None]

LINE_LIMIT = 50 * 1024 * 1024
EOF_GRACE_SECONDS = 1.5
"""When stdin closes, requests already received get this long to be answered. Running turns
are cancelled first (`on_eof`), so a prompt answers `cancelled` in a fraction of it; the bound
is for a handler that hangs, so the process still ends soon after its input."""


_NO_ANSWER: dict[str, Any] = {
    "code": -32603,
    "message": "the client closed the connection: no answer can come",
}


class StdioTransport:
    """A message transport (the SDK's `Transport` protocol) over a reader and a write fd."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: LineWriter,
        *,
        on_response: ResponseHook | None = None,
        on_cancel_request: CancelHook | None = None,
        on_eof: EofHook | None = None,
    ) -> None:
        self._reader = reader
        self._writer = writer
        self._lock = asyncio.Lock()
        self._inflight: dict[Any, tuple[str, Any]] = {}
        self._on_response = on_response
        self._on_cancel_request = on_cancel_request
        self._on_eof = on_eof
        self._closed = False
        self._answered = asyncio.Event()
        self._awaiting: set[Any] = set()
        """Ids of our requests to the client that it has not answered yet."""
        self._input_ended = False
        self._unanswerable: list[dict[str, Any]] = []

    # --- receiving --------------------------------------------------------------------------

    async def receive(self) -> dict[str, Any] | None:
        while True:
            if self._unanswerable:
                return self._unanswerable.pop()
            if self._input_ended:
                await self.wait_answered(EOF_GRACE_SECONDS)
                return None
            line = await self._read_line()
            if line is None:
                self._end_input()
                continue
            text = line.strip()
            if not text:
                continue
            try:
                message = json.loads(text)
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                log.warning(
                    "malformed_line", error=str(exc), preview=text[:120].decode(errors="replace")
                )
                await self._send_error(None, -32700, f"Parse error: {exc}")
                continue
            problem = _invalid_reason(message)
            if problem is not None:
                request_id = message.get("id") if isinstance(message, dict) else None
                log.warning("invalid_request", reason=problem)
                await self._send_error(request_id, -32600, f"Invalid request: {problem}")
                continue
            method = message.get("method")
            if method == "$/cancel_request":
                self._cancel_request(message.get("params"))
                continue
            if method is not None and "id" in message:
                self._inflight[message["id"]] = (method, message.get("params"))
            elif method is None:
                self._awaiting.discard(message.get("id"))
            return dict(message)

    def _end_input(self) -> None:
        """The client closed our input: cancel running turns (`on_eof`), and fail our requests
        it can no longer answer (an editor's terminal/kill must not hold a cancel for ever)."""
        self._input_ended = True
        if self._on_eof is not None:
            try:
                self._on_eof()
            except Exception:
                log.exception("eof_hook_failed")
        self._unanswerable = [
            {"jsonrpc": "2.0", "id": request_id, "error": _NO_ANSWER}
            for request_id in self._awaiting
        ]
        self._awaiting.clear()

    async def _read_line(self) -> bytes | None:
        chunks: list[bytes] = []
        try:
            while True:
                try:
                    chunk = await self._reader.readuntil(b"\n")
                except asyncio.LimitOverrunError as exc:
                    chunks.append(await self._reader.readexactly(exc.consumed))
                    continue
                chunks.append(chunk)
                return b"".join(chunks)
        except asyncio.IncompleteReadError as exc:
            chunks.append(exc.partial)
            data = b"".join(chunks)
            return data if data else None

    async def wait_answered(self, grace: float) -> bool:
        """Wait until every request received so far is answered, at most `grace` seconds.
        False (and a warning naming the methods) if some are still unanswered."""
        try:
            async with asyncio.timeout(grace):
                while self._inflight:
                    self._answered.clear()
                    await self._answered.wait()
        except TimeoutError:
            log.warning(
                "shutdown_with_unanswered_requests",
                methods=sorted({m for m, _ in self._inflight.values()}),
            )
            return False
        return True

    def _cancel_request(self, params: Any) -> None:
        request_id = params.get("requestId") if isinstance(params, dict) else None
        method, request_params = self._inflight.get(request_id, (None, None))
        if self._on_cancel_request is not None:
            self._on_cancel_request(request_id, method, request_params)

    # --- sending ----------------------------------------------------------------------------

    async def send(self, message: dict[str, Any]) -> None:
        if "method" in message and "id" in message:
            if self._input_ended:
                raise ConnectionError(_NO_ANSWER["message"])
            self._awaiting.add(message["id"])
        await self._write(message)
        if "method" not in message and "id" in message:
            entry = self._inflight.pop(message["id"], None)
            self._answered.set()
            if entry is not None and self._on_response is not None:
                try:
                    result = self._on_response(entry[0], entry[1], message)
                    if result is not None:
                        await result
                except Exception:
                    log.exception("response_hook_failed", method=entry[0])

    async def _send_error(self, request_id: Any, code: int, message: str) -> None:
        await self._write(
            {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}
        )

    async def _write(self, message: dict[str, Any]) -> None:
        if self._closed:
            raise ConnectionError("the protocol channel is closed")
        data = (json.dumps(message, separators=(",", ":"), ensure_ascii=False) + "\n").encode()
        async with self._lock:
            await self._writer.write(data)

    async def close(self) -> None:
        self._closed = True


class LineWriter:
    """Whole-line writes to a descriptor: an asyncio pipe with back-pressure when it is a
    pipe or socket, blocking writes in a worker thread otherwise (a regular file)."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._stream: asyncio.StreamWriter | None = None

    async def open(self) -> LineWriter:
        loop = asyncio.get_running_loop()
        file = os.fdopen(self._fd, "wb", buffering=0, closefd=False)
        try:
            transport, protocol = await loop.connect_write_pipe(_DrainProtocol, file)
        except (ValueError, OSError):
            return self
        self._stream = asyncio.StreamWriter(transport, protocol, None, loop)
        return self

    async def write(self, data: bytes) -> None:
        if self._stream is not None:
            self._stream.write(data)
            await self._stream.drain()
        else:
            await asyncio.to_thread(_write_all, self._fd, data)


class _DrainProtocol(asyncio.streams.FlowControlMixin):
    """The minimal protocol `StreamWriter.drain` needs for a write-only pipe."""


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _invalid_reason(message: Any) -> str | None:
    if not isinstance(message, dict):
        return "expected a JSON object"
    if message.get("jsonrpc") != "2.0":
        return 'missing "jsonrpc": "2.0"'
    if "method" in message:
        if not isinstance(message["method"], str) or not message["method"]:
            return '"method" must be a non-empty string'
        if "params" in message and not isinstance(message["params"], dict | list | type(None)):
            return '"params" must be an object or an array'
        return None
    if "id" in message and ("result" in message or "error" in message):
        return None
    return 'expected "method" (request or notification) or "result"/"error" (response)'


async def open_stdin_reader() -> asyncio.StreamReader:
    """An asyncio reader over stdin, whatever kind of file it is (`defect_acp.stdin`)."""
    from defect_acp.stdin import open_reader

    return await open_reader(0, LINE_LIMIT)
