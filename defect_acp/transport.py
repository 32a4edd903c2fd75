"""The stdio transport under the ACP SDK's connection: newline-delimited JSON-RPC, strictly.

Owns the protocol channel: reading stdin line by line, writing one JSON object per line to
the protocol descriptor, and what the SDK's own stdio transport does not do:
- a line that is not JSON is answered with -32700 (id null): bytes that are not UTF-8 (read
  strictly: the UTF-8 form of a surrogate is refused too), the literals `NaN`/`Infinity`,
  an integer too long to convert, nesting too deep for the parser;
- an object that is not a JSON-RPC 2.0 request, notification or response is answered with
  -32600: among others an `id` that is not a string, an int64 or null (ACP's `RequestId`; an
  object id would crash the SDK's bookkeeping, `1e400` would come back as `Infinity`), and
  nesting deeper than `MAX_DEPTH` (the reference implementation's serde_json stops at 128;
  deeper values would only reach recursive code further on). The error names the request's
  id only when that id is a valid one, else it is null. The connection keeps serving either
  way (the SDK drops such lines silently, or dies on them);
- when stdin closes, `on_eof` runs first (the agent cancels its running turns), then
  requests already received are answered (within a grace period) before the connection
  ends; `wait_answered` offers the same wait to a shutdown that is not an end of input;
- `$/cancel_request` is handed to the agent (the SDK ignores it);
- a request of ours the client can no longer answer (its input to us closed) fails at once
  instead of waiting for ever: pending ones get an error response, new ones `ConnectionError`;
- once a response has been written, `on_response(method, params, response)` runs, so the
  agent can send what must follow an answer (e.g. `available_commands_update` after
  `session/new` — a client ignores updates for a session it has not been told about yet).

Invariants: this is the only writer of the protocol channel; writes are whole lines, one at a
time (a lock), so concurrent senders never interleave bytes. A batch of notifications
(`send_notifications`) is one write and one flush: a session that streams fast costs one
system call per batch, not per update. Every line written is strict JSON
in UTF-8 (`encode_message`): a lone surrogate is written as U+FFFD, and an answer that cannot
be written as JSON at all (a NaN, an object json cannot encode) is replaced by a -32603 error
for the same id; such a notification is dropped and logged, such a request fails its sender.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import re
from collections.abc import Awaitable, Callable
from typing import Any

from defect_core.log import get_logger

log = get_logger("defect.acp.transport")

ResponseHook = Callable[[str, Any, dict[str, Any]], Awaitable[None] | None]
CancelHook = Callable[[Any, str | None, Any], None]
EofHook = Callable[[], None]

LINE_LIMIT = 50 * 1024 * 1024
MAX_DEPTH = 128
"""Deepest nesting of arrays and objects a message may have."""
_INT64 = range(-(2**63), 2**63)
EOF_GRACE_SECONDS = 1.5
"""When stdin closes, requests already received get this long to be answered. Running turns
are cancelled first (`on_eof`), so a prompt answers `cancelled` in a fraction of it; the bound
is for a handler that hangs, so the process still ends soon after its input."""
PIPE_BUFFER = 1 << 20
"""Bytes the protocol pipe holds (Linux, `F_SETPIPE_SZ`; the default is 64 KiB): a long
replay is a hundred megabytes of lines, written and read in 16 times fewer wake-ups."""


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
            message, error = parse_line(text)
            if error is not None:
                log.warning(
                    "malformed_line", error=error, preview=text[:120].decode(errors="replace")
                )
                await self._send_error(None, -32700, f"Parse error: {error}")
                continue
            problem = _invalid_reason(message) or _depth_problem(text, message)
            if problem is not None:
                request_id = message.get("id") if isinstance(message, dict) else None
                if not _valid_id(request_id):
                    request_id = None
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
        if not _valid_id(request_id):
            log.warning("cancel_request_invalid_id")
            return
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

    async def send_notifications(self, messages: list[dict[str, Any]]) -> None:
        """Write several notifications as one batch: one write and one flush for all of them,
        in order, with no other line between them (`session/update`s of a busy session)."""
        await self.send_encoded([line for line in map(encode_message, messages) if line])

    async def send_encoded(self, lines: list[bytes]) -> None:
        """Write notification lines already encoded as `encode_message` would (strict JSON in
        UTF-8, one newline-terminated object each) as one batch: one write, one flush."""
        if self._closed:
            raise ConnectionError("the protocol channel is closed")
        if not lines:
            return
        async with self._lock:
            await self._writer.write(b"".join(lines))

    async def _send_error(self, request_id: Any, code: int, message: str) -> None:
        await self._write(
            {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}
        )

    async def _write(self, message: dict[str, Any]) -> None:
        if self._closed:
            raise ConnectionError("the protocol channel is closed")
        data = encode_message(message)
        if data is None:
            return
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
        with contextlib.suppress(OSError, AttributeError):  # Linux pipes only; else as it is
            fcntl.fcntl(self._fd, fcntl.F_SETPIPE_SZ, PIPE_BUFFER)
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


def parse_line(line: bytes) -> tuple[Any, str | None]:
    """(the JSON value of one line, None), or (None, why it is not JSON)."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        return None, f"the line is not UTF-8 (byte 0x{line[exc.start]:02x} at {exc.start})"
    try:
        value = json.loads(text, parse_constant=_refuse_constant)
    except (json.JSONDecodeError, _NotJson) as exc:
        return None, str(exc)
    except RecursionError:
        return None, f"nested deeper than {MAX_DEPTH} levels"
    except ValueError:  # Python's limit on the digits of an integer (sys.int_info)
        return None, "a number with too many digits"
    return value, None


class _NotJson(ValueError):
    pass


def _refuse_constant(name: str) -> Any:
    raise _NotJson(f"{name} is not JSON")


def _depth_problem(line: bytes, message: Any) -> str | None:
    """Whether a parsed message nests deeper than `MAX_DEPTH` (the parser itself stops near
    Python's recursion limit). Walked only when the line has enough brackets to be that deep."""
    if line.count(b"[") + line.count(b"{") <= MAX_DEPTH:
        return None
    if _deeper_than(message, MAX_DEPTH):
        return f"nested deeper than {MAX_DEPTH} levels"
    return None


def _deeper_than(value: Any, limit: int) -> bool:
    """True when arrays/objects nest more than `limit` deep (iterative: no recursion)."""
    if not isinstance(value, dict | list):
        return False
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item
        for child in children:
            if isinstance(child, dict | list):
                if depth + 1 > limit:
                    return True
                stack.append((child, depth + 1))
    return False


def _valid_id(value: Any) -> bool:
    """ACP's `RequestId`: a string (one UTF-8 can carry back), an int64 or null."""
    if value is None:
        return True
    if isinstance(value, str):
        return value.isascii() or _LONE_SURROGATE.search(value) is None
    return type(value) is int and value in _INT64


def _invalid_reason(message: Any) -> str | None:
    if not isinstance(message, dict):
        return "expected a JSON object"
    if message.get("jsonrpc") != "2.0":
        return 'missing "jsonrpc": "2.0"'
    if "id" in message and not _valid_id(message["id"]):
        return '"id" must be a string, an integer (int64) or null'
    if "method" in message:
        if not isinstance(message["method"], str) or not message["method"]:
            return '"method" must be a non-empty string'
        if "params" in message and not isinstance(message["params"], dict | list | type(None)):
            return '"params" must be an object or an array'
        return None
    if "id" in message and ("result" in message or "error" in message):
        return None
    return 'expected "method" (request or notification) or "result"/"error" (response)'


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def encode_message(message: dict[str, Any]) -> bytes | None:
    """One protocol line: strict JSON (no NaN/Infinity) in UTF-8, newline-terminated.

    A lone surrogate (which UTF-8 cannot carry) becomes U+FFFD. A message json cannot write
    at all becomes, when it is an answer, a -32603 error for its id; a notification that
    cannot be written gives None (dropped, logged); a request raises `ValueError`.
    """
    try:
        text = json.dumps(message, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (ValueError, TypeError, RecursionError) as exc:
        method = message.get("method")
        log.error("unencodable_message", method=method, error=str(exc)[:200])
        if method is None and _valid_id(message.get("id")):
            return encode_message(
                {
                    "jsonrpc": "2.0",
                    "id": message.get("id"),
                    "error": {
                        "code": -32603,
                        "message": "Internal error: the answer could not be written as JSON",
                    },
                }
            )
        if method is not None and "id" in message:
            raise ValueError(f"{method}: the request cannot be written as JSON") from exc
        return None
    try:
        return text.encode("utf-8") + b"\n"
    except UnicodeEncodeError:
        return _LONE_SURROGATE.sub("\ufffd", text).encode("utf-8") + b"\n"


async def open_stdin_reader() -> asyncio.StreamReader:
    """An asyncio reader over stdin, whatever kind of file it is (`defect_acp.stdin`)."""
    from defect_acp.stdin import open_reader

    return await open_reader(0, LINE_LIMIT)
