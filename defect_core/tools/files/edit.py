"""The `edit_file` tool: replace text in a file, by exact or tolerant match.

Owns the edit's arguments check, the plan against the file's current text (via
`files.matching.plan_edit`), the permission preview (a diff), the write under the file's lock,
and the summary the model reads (where the change landed, a numbered snippet, and the
tolerant rule if one was needed).

Invariants:
- Edits never leave the workspace; an empty `old_string` creates a new file, and only then.
- An edit of a file the session has read is refused when the file changed since
  (`ReadLedger.changed`), or when it changed between the plan and the write.
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
    MAX_LINE_CHARS,
    FileTool,
    call_target,
    check_writable,
    number_lines,
    read_all,
    stat_of,
    write_all,
)
from defect_core.tools.files.ledger import ReadLedger
from defect_core.tools.files.matching import TOLERANT_RULES, EditError, EditPlan, plan_edit
from defect_core.tools.workspace import ToolArgs, display_path, parse_args, resolve_path


class EditArgs(ToolArgs):
    path: str = Field(description="File path, relative to the project root.")
    old_string: str = Field(description="The exact text to replace.")
    new_string: str = Field(description="The text to put in its place.")
    replace_all: bool = Field(
        default=False, description="Replace every occurrence instead of requiring a unique one."
    )


def _edit_args(args: dict[str, Any], tool: str) -> EditArgs:
    a = parse_args(EditArgs, args, tool)
    if a.old_string == a.new_string:
        raise ToolError("old_string and new_string are the same; there is nothing to change")
    return a


class EditFileTool(FileTool):
    _name = "edit_file"
    _description = (
        "Replace text in a file: `old_string` must match the file exactly (including "
        "indentation) and once only — add surrounding lines to make it unique, or set "
        "`replace_all` to change every occurrence. If no exact match exists, a match that "
        "differs only in whitespace or indentation is used, and the result says so. Read the "
        "file first; an edit of a file that changed since you read it is refused. An empty "
        "`old_string` creates a new file."
    )
    args_model = EditArgs
    _safety = Safety.MUTATING
    _kind: ToolKind = "edit"

    def describe(self, args: dict[str, Any], ctx: ToolContext) -> ToolCallView:
        rel, locations = call_target(args, ctx)
        title = f"Edit {rel}" if rel else "Edit file"
        return ToolCallView(title=title, kind=self.kind, locations=locations)

    async def _plan(
        self, a: EditArgs, path: Path, ctx: ToolContext
    ) -> tuple[str, FileStat | None, str | None, EditPlan]:
        """(rel, stat, old text or None when creating, plan) — reads, never writes."""
        rel = display_path(path, ctx.cwd)
        st = await stat_of(ctx.fs, path, rel)
        if st is None:
            if a.old_string:
                raise ToolError(f"file not found: {rel}")
            new = a.new_string
            return rel, None, None, EditPlan(new, 1, 1, new.count("\n") + 1, "exact")
        check_writable(st, rel, ctx)
        if st.size > MAX_EDIT_BYTES:
            raise ToolError(f"{rel} is too large to edit ({st.size} bytes)")
        text = await read_all(ctx.fs, path, rel)
        try:
            plan = plan_edit(text, a.old_string, a.new_string, a.replace_all)
        except EditError as exc:
            raise ToolError(f"{exc} (in {rel})") from None
        return rel, st, text, plan

    async def preview(self, args: dict[str, Any], ctx: ToolContext) -> tuple[ToolDisplay, ...]:
        try:
            a = _edit_args(args, self.name)
            path = resolve_path(a.path, ctx.cwd, write=True)
            _, _, old, plan = await self._plan(a, path, ctx)
        except ToolError:
            return ()
        return (DiffDisplay(str(path), old, plan.text),)

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        a = _edit_args(args, self.name)
        ledger = ReadLedger.of(ctx)
        path = resolve_path(a.path, ctx.cwd, write=True)
        async with ledger.lock(path):
            rel, st, old, plan = await self._plan(a, path, ctx)
            if st is not None and ledger.changed(path, st, old):
                raise ToolError(
                    f"{rel} has changed since you last read it; read it again, then edit"
                )
            if st is not None:
                now = await stat_of(ctx.fs, path, rel)
                if now is None:
                    raise ToolError(f"{rel} was deleted while being edited")
                if (now.size, now.mtime_ns) != (st.size, st.mtime_ns):
                    raise ToolError(f"{rel} changed while being edited; read it again, then edit")
            await write_all(ctx.fs, path, rel, plan.text)
            ledger.record(path, await stat_of(ctx.fs, path, rel), plan.text)

        if st is None:
            summary = f"Created {rel}"
        else:
            times = "1 replacement" if plan.count == 1 else f"{plan.count} replacements"
            summary = f"Edited {rel}: {times}, first at line {plan.first_line}"
        if plan.rule != "exact":
            rule = next(r for r in TOLERANT_RULES if r.name == plan.rule)
            summary += (
                f". No exact match: matched by tolerant rule '{rule.name}' ({rule.explains}); "
                "check the result"
            )
        return ToolOutput(
            content=summary + "\n" + _snippet(plan),
            display=(DiffDisplay(str(path), old, plan.text),),
            locations=(Location(str(path), plan.first_line),),
        )


_SNIPPET_CONTEXT = 2
_SNIPPET_MAX = 16


def _snippet(plan: EditPlan) -> str:
    """The first replaced region with a little context, numbered like `read_file`."""
    lines = plan.text.split("\n")
    start = max(plan.first_line - 1 - _SNIPPET_CONTEXT, 0)
    end = min(plan.first_line - 1 + plan.new_lines + _SNIPPET_CONTEXT, len(lines))
    end = min(end, start + _SNIPPET_MAX)
    shown = [line.removesuffix("\r")[:MAX_LINE_CHARS] for line in lines[start:end]]
    return number_lines(shown, start + 1)
