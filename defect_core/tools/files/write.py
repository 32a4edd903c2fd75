"""The `write_file` tool: create a file, or replace the whole content of one.

Owns the overwrite: the plan (old text for the diff, line endings kept — a CRLF file stays
CRLF when the model sends LF), the permission preview, and the write under the file's lock.

Invariants:
- Writes never leave the workspace (`resolve_path(..., write=True)`).
- An overwrite of a file the session has read is refused when the file changed since
  (`ReadLedger.changed`); the check and the write happen under the file's lock.
- `preview` reads, never writes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field

from defect_core.events import DiffDisplay, Location, ToolDisplay, ToolKind
from defect_core.tools.backends import FileStat
from defect_core.tools.base import Safety, ToolCallView, ToolContext, ToolError, ToolOutput
from defect_core.tools.files.access import (
    MAX_EDIT_BYTES,
    FileTool,
    call_target,
    check_writable,
    is_crlf,
    read_all,
    stat_of,
    write_all,
)
from defect_core.tools.files.ledger import ReadLedger
from defect_core.tools.workspace import ToolArgs, display_path, parse_args, resolve_path


class WriteArgs(ToolArgs):
    path: str = Field(description="File path, relative to the project root.")
    content: str = Field(description="The complete new content.")


class WriteFileTool(FileTool):
    _name = "write_file"
    _description = (
        "Create a file, or replace the whole content of an existing one. Parent directories "
        "are created. An existing file keeps its line endings (CRLF stays CRLF). Prefer "
        "edit_file to change part of a file. If the file changed since you last read it, the "
        "write is refused: read it again first."
    )
    args_model = WriteArgs
    _safety = Safety.MUTATING
    _kind: ToolKind = "edit"

    def describe(self, args: dict[str, Any], ctx: ToolContext) -> ToolCallView:
        rel, locations = call_target(args, ctx)
        title = f"Write {rel}" if rel else "Write file"
        return ToolCallView(title=title, kind=self.kind, locations=locations)

    async def _plan(
        self, a: WriteArgs, path: Path, ctx: ToolContext
    ) -> tuple[str, FileStat | None, str | None, str]:
        """(rel, stat, old text or None, new text) — reads, never writes."""
        rel = display_path(path, ctx.cwd)
        st = await stat_of(ctx.fs, path, rel)
        if st is not None:
            check_writable(st, rel, ctx)
        old: str | None = None
        if st is not None and st.size <= MAX_EDIT_BYTES:
            try:
                old = await read_all(ctx.fs, path, rel)
            except ToolError:
                old = None  # binary, undecodable or gone: it is being replaced whole anyway
        content = a.content
        if old is not None and is_crlf(old) and "\r\n" not in content:
            content = content.replace("\n", "\r\n")
        return rel, st, old, content

    async def preview(self, args: dict[str, Any], ctx: ToolContext) -> tuple[ToolDisplay, ...]:
        try:
            a = parse_args(WriteArgs, args, self.name)
            path = resolve_path(a.path, ctx.cwd, write=True)
            _, _, old, content = await self._plan(a, path, ctx)
        except ToolError:
            return ()
        return (DiffDisplay(str(path), old, content),)

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        a = parse_args(WriteArgs, args, self.name)
        ledger = ReadLedger.of(ctx)
        path = resolve_path(a.path, ctx.cwd, write=True)
        async with ledger.lock(path):
            rel, st, old, content = await self._plan(a, path, ctx)
            if st is not None and ledger.changed(path, st, old):
                raise ToolError(
                    f"{rel} has changed since you last read it; read it again before overwriting it"
                )
            await write_all(ctx.fs, path, rel, content)
            ledger.record(path, await stat_of(ctx.fs, path, rel), content)
        lines = content.count("\n") + (0 if content.endswith("\n") or not content else 1)
        verb = "Created" if st is None else "Wrote"
        return ToolOutput(
            content=f"{verb} {rel} ({lines} lines)",
            display=(DiffDisplay(str(path), old, content),),
            locations=(Location(str(path), 1),),
        )
