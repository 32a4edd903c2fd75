"""`defect exec --input-format stream-json`: the user's messages, one JSON line each, on stdin.

Owns the input side of `defect exec` in that mode: reading stdin line by line off the event
loop (`StdinLines`) and what a line means (`parse_line`). The line format is Claude Code's
(`claude -p --input-format stream-json`):

    {"type": "user", "message": {"role": "user", "content": "Also run the linter."}}
    {"type": "user", "message": {"role": "user", "content": [{"type": "text", "text": "…"}]}}

`content` is a string or a list of `text` blocks and `image` blocks (`{"type": "image",
"source": {"type": "base64", "media_type": "image/png", "data": "…"}}`, checked as a prompt's
image is: `defect_core/media.py`). The first message is the prompt (unless the command line
gives one, or `--goal`); each later one is a steer, delivered to the model at the running
turn's next safe point (`Session.steering`); one that comes as a turn ends runs as a turn of
its own, so none is lost. End of input means no more messages: the run ends when its turn does.

Invariants:
- A line that is not such a message is one line on stderr naming its number and what is wrong,
  and is skipped; the lines before and after it are delivered. Blank lines are skipped.
- stdin is read on a daemon thread, one line at a time and only while the run goes on: the
  event loop never blocks on it, and the process never waits for a writer that stays open.
"""

from __future__ import annotations

import contextlib
import json
import sys
import threading
from collections.abc import Awaitable, Callable
from typing import IO, Any

import anyio
import anyio.from_thread
import anyio.lowlevel
from anyio.streams.memory import MemoryObjectReceiveStream

from defect_core.events import TurnStopReason
from defect_core.media import image_problem
from defect_core.model import ContentBlock, ImageBlock, TextBlock
from defect_core.session import Session


class BadLine(ValueError):
    """A line that is no user message: why, in a few words."""


def parse_line(line: str) -> list[ContentBlock] | None:
    """The message a line carries; None for a blank line; `BadLine` when it is none."""
    if not line.strip():
        return None
    try:
        data = json.loads(line)
    except json.JSONDecodeError as exc:
        raise BadLine(f"not JSON ({exc.msg})") from None
    if not isinstance(data, dict) or data.get("type") != "user":
        raise BadLine('expected {"type": "user", "message": {...}}')
    message = data.get("message")
    if not isinstance(message, dict) or message.get("role", "user") != "user":
        raise BadLine('"message" must be an object with "role": "user"')
    content = message.get("content")
    if isinstance(content, str):
        content = [{"type": "text", "text": content}]
    if not isinstance(content, list):
        raise BadLine('"message.content" must be a string or a list of blocks')
    blocks: list[ContentBlock] = [_block(item, i) for i, item in enumerate(content)]
    if not any(
        isinstance(b, ImageBlock) or (isinstance(b, TextBlock) and b.text.strip()) for b in blocks
    ):
        raise BadLine("the message is empty")
    return blocks


def _block(item: Any, index: int) -> TextBlock | ImageBlock:
    where = f"content[{index}]"
    if not isinstance(item, dict):
        raise BadLine(f"{where} is not an object")
    if item.get("type") == "text" and isinstance(item.get("text"), str):
        return TextBlock(text=item["text"])
    source = item.get("source")
    if item.get("type") == "image" and isinstance(source, dict):
        media_type, data = source.get("media_type"), source.get("data")
        if source.get("type") != "base64" or not isinstance(data, str):
            raise BadLine(f"{where}: only base64 image sources are read")
        problem = image_problem(media_type if isinstance(media_type, str) else "", data)
        if problem is not None:
            raise BadLine(f"{where}: {problem}")
        return ImageBlock(media_type=media_type, data=data)
    raise BadLine(f"{where} must be a text block or an image block")


class StdinLines:
    """stdin's messages as they come, read on a daemon thread (`messages` ends at EOF)."""

    messages: MemoryObjectReceiveStream[list[ContentBlock]]

    def __init__(
        self, stdin: IO[bytes] | None = None, report: Callable[[str], None] | None = None
    ) -> None:
        self._stdin = stdin if stdin is not None else sys.stdin.buffer
        self._report = report or (lambda text: sys.stderr.write(text + "\n"))
        self._send, self.messages = anyio.create_memory_object_stream[list[ContentBlock]](1)

    async def first(self) -> list[ContentBlock] | None:
        """The first message (the prompt); None when the input ends before one."""
        try:
            return await self.messages.receive()
        except anyio.EndOfStream:
            return None

    def start(self) -> None:
        token = anyio.lowlevel.current_token()
        thread = threading.Thread(target=self._read, args=(token,), name="exec-stdin")
        thread.daemon = True
        thread.start()

    def _read(self, token: anyio.lowlevel.EventLoopToken) -> None:
        number = 0
        try:
            for raw in iter(self._stdin.readline, b""):
                number += 1
                text = raw.decode("utf-8", errors="replace")
                try:
                    blocks = parse_line(text)
                except BadLine as exc:
                    problem = f"defect exec: stdin line {number}: {exc}"
                    anyio.from_thread.run_sync(self._report, problem, token=token)
                    continue
                if blocks is not None:
                    anyio.from_thread.run(self._send.send, blocks, token=token)
        except (OSError, RuntimeError, anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass  # stdin failed, or the run is over: nobody reads any more
        finally:
            with contextlib.suppress(RuntimeError):  # the event loop is gone
                anyio.from_thread.run_sync(self._send.close, token=token)


async def converse(
    session: Session, first: Callable[[], Awaitable[TurnStopReason]], lines: StdinLines
) -> TurnStopReason:
    """Run `first`, and steer it with stdin's messages as they come; a message no turn takes
    (it came as one ended) runs as a turn of its own. The run ends at the end of input, once
    the last turn has ended; or when a turn does not end `end_turn` (the rest is not run).
    The stop reason of the last turn."""
    waiting: list[list[ContentBlock]] = []
    wake = anyio.Event()
    done = False

    async def feed() -> None:
        nonlocal wake, done
        async for blocks in lines.messages:
            if not await session.steering.offer(blocks):
                waiting.append(blocks)
                wake.set()
        done = True
        wake.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(feed)
        stop = await first()
        while stop == "end_turn":
            if waiting:
                stop = await session.run_turn(waiting.pop(0))
                continue
            if done:
                break
            await wake.wait()
            wake = anyio.Event()
        tg.cancel_scope.cancel()
    return stop
