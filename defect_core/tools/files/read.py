"""The `read_file` tool: a window of a text file as numbered lines, or an image.

Owns how the model reads: the window (`offset`, `limit`), the cut of over-long lines and of
an over-long result, the refusal of binary and non-UTF-8 files, and images returned as image
blocks (sniffed by content, not trusted by suffix).

Invariants:
- The path passes `workspace.resolve_path` first; reads outside the workspace only when the
  session allows them.
- What was read is recorded in the session's `ReadLedger` (with the text when the whole file
  was seen), so a later write or edit can tell whether the file changed since.
- Images are read only through a local backend (the editor's `fs/read_text_file` cannot carry
  bytes), and only up to `MAX_IMAGE_BYTES`.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

from pydantic import Field

from defect_core.events import ImageDisplay, Location, ToolDisplay, ToolKind
from defect_core.model import ImageBlock, ResultPart, TextBlock
from defect_core.tools.backends import BinaryReader, FileStat
from defect_core.tools.base import Safety, ToolCallView, ToolContext, ToolError, ToolOutput
from defect_core.tools.files.access import (
    MAX_LINE_CHARS,
    FileTool,
    binary_refusal,
    call_target,
    io_error,
    number_lines,
    stat_of,
)
from defect_core.tools.files.ledger import ReadLedger
from defect_core.tools.workspace import ToolArgs, display_path, parse_args, resolve_path

DEFAULT_READ_LIMIT = 2000
"""Lines a read returns when the model gives no `limit`."""
MAX_READ_CHARS = 100_000
"""A read result stops at a line boundary past this many characters."""
MAX_IMAGE_BYTES = 5 * 1024 * 1024
_SNIFF_BYTES = 8192

IMAGE_SUFFIXES = frozenset({".png", ".jpg", ".jpeg", ".gif", ".webp"})


def _sniff_image(data: bytes) -> str | None:
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


class ReadArgs(ToolArgs):
    path: str = Field(description="File path, relative to the project root.")
    offset: int | None = Field(
        default=None, ge=1, description="1-based line number to start reading from."
    )
    limit: int | None = Field(default=None, ge=1, description="Number of lines to read.")


class ReadFileTool(FileTool):
    _name = "read_file"
    _description = (
        "Read a text file of the project, returned as numbered lines (`cat -n` style). "
        f"Reads {DEFAULT_READ_LIMIT} lines from `offset` (1-based, default 1) unless `limit` "
        f"says otherwise; lines longer than {MAX_LINE_CHARS} characters are cut. For a large "
        "file, read the part you need. Images (png, jpg, gif, webp) are returned as images. "
        "Binary and non-UTF-8 files are refused."
    )
    args_model = ReadArgs
    _safety = Safety.READ_ONLY
    _kind: ToolKind = "read"

    def describe(self, args: dict[str, Any], ctx: ToolContext) -> ToolCallView:
        rel, locations = call_target(args, ctx)
        if not rel:
            return ToolCallView(title="Read file", kind=self.kind)
        offset, limit = args.get("offset"), args.get("limit")
        span = ""
        if isinstance(offset, int) and isinstance(limit, int):
            span = f" (lines {offset}–{offset + limit - 1})"
        elif isinstance(offset, int):
            span = f" (from line {offset})"
        elif isinstance(limit, int):
            span = f" (lines 1–{limit})"
        if locations and isinstance(offset, int):
            locations = (Location(locations[0].path, offset),)
        return ToolCallView(title=f"Read {rel}{span}", kind=self.kind, locations=locations)

    async def preview(self, args: dict[str, Any], ctx: ToolContext) -> tuple[ToolDisplay, ...]:
        return ()

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        a = parse_args(ReadArgs, args, self.name)
        path = resolve_path(a.path, ctx.cwd, write=False, allow_read_outside=ctx.allow_read_outside)
        rel = display_path(path, ctx.cwd)
        st = await stat_of(ctx.fs, path, rel)
        if st is None:
            raise ToolError(f"file not found: {rel}")
        if st.is_dir:
            raise ToolError(f"{rel} is a directory; use search with a glob to list its files")
        if not st.is_regular:
            raise ToolError(f"{rel} is {st.kind}, not a regular file; it cannot be read")
        reader = ctx.fs if isinstance(ctx.fs, BinaryReader) and not ctx.fs.delegated else None
        if path.suffix.lower() in IMAGE_SUFFIXES:
            return await self._image(path, rel, st, reader)
        if reader is not None:
            try:
                head = await reader.read_bytes(path, _SNIFF_BYTES)
            except OSError as exc:
                raise io_error(exc, rel, "read") from None
            if b"\x00" in head:
                raise binary_refusal(rel)

        offset = a.offset or 1
        limit = a.limit or DEFAULT_READ_LIMIT
        try:
            text = await ctx.fs.read_text(path, line=offset, limit=limit + 1)
        except (OSError, UnicodeDecodeError) as exc:
            raise io_error(exc, rel, "read") from None
        if "\x00" in text:
            raise binary_refusal(rel)

        lines = text.split("\n")
        if lines[-1] == "":
            lines.pop()
        more = len(lines) > limit
        del lines[limit:]
        if not lines:
            if offset > 1:
                raise ToolError(f"{rel} has fewer than {offset} lines")
            ReadLedger.of(ctx).record(path, st, text)
            return ToolOutput(content=f"(empty file: {rel})", locations=(Location(str(path), 1),))

        shown: list[str] = []
        size = 0
        cut = False
        for line in lines:
            line = line.removesuffix("\r")
            if len(line) > MAX_LINE_CHARS:
                line = line[:MAX_LINE_CHARS] + f" […{len(line) - MAX_LINE_CHARS} chars cut]"
                cut = True
            shown.append(line)
            size += len(line) + 8
            if size > MAX_READ_CHARS:
                break
        more = more or len(shown) < len(lines)
        last = offset + len(shown) - 1
        body = number_lines(shown, offset)
        notes = []
        if more:
            notes.append(
                f"[showing lines {offset}–{last}; the file continues: "
                f"read with offset={last + 1} for more]"
            )
        if cut:
            notes.append(f"[lines longer than {MAX_LINE_CHARS} characters were cut]")
        whole = offset == 1 and not more
        ReadLedger.of(ctx).record(path, st, text if whole else None)
        return ToolOutput(
            content="\n".join([body, *notes]),
            locations=(Location(str(path), offset),),
        )

    async def _image(
        self, path: Path, rel: str, st: FileStat, reader: BinaryReader | None
    ) -> ToolOutput:
        if reader is None:
            raise ToolError(
                f"{rel} is an image; images can be read only when the agent reads files "
                "locally, not through the editor"
            )
        if st.size > MAX_IMAGE_BYTES:
            raise ToolError(f"{rel} is too large to read as an image ({st.size} bytes)")
        try:
            data = await reader.read_bytes(path, MAX_IMAGE_BYTES + 1)
        except OSError as exc:
            raise io_error(exc, rel, "read") from None
        if len(data) > MAX_IMAGE_BYTES:
            raise ToolError(f"{rel} is too large to read as an image")
        media_type = _sniff_image(data)
        if media_type is None:
            raise ToolError(f"{rel} is not a PNG, JPEG, GIF or WebP image")
        encoded = base64.b64encode(data).decode("ascii")
        parts: tuple[ResultPart, ...] = (
            TextBlock(text=f"Image {rel} ({media_type}, {len(data)} bytes)"),
            ImageBlock(media_type=media_type, data=encoded),
        )
        return ToolOutput(
            content=parts,
            display=(ImageDisplay(media_type, encoded),),
            locations=(Location(str(path)),),
        )
