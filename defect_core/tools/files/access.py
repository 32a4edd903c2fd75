"""What the file tools share: reaching a file through the backend, and the tools' identity.

Owns the wording of file failures for the model (`io_error`, `binary_refusal`), stat / whole
read / write through `ctx.fs`, the check that a file may be written (`check_writable`), the
text helpers for line endings and numbered lines, the lexical target `describe` shows, and
`FileTool`, the base giving each tool its name, schema (from its `args_model`), safety, kind,
permission key and protected path.

Invariants:
- Every backend failure leaves here as a `ToolError` worded for the model (not found, a
  directory, permission denied, not UTF-8, binary), never as a raw `OSError`. A path the
  local backend finds leading out of the workspace when it opens it (`tools.beneath.Escape`:
  a link on the way changed after `resolve_path` checked it) is worded as the outside
  refusal it is, not as "permission denied", which would send the model after file modes.
- Files change only through `ctx.fs.write_text` (atomic when local; the editor's buffer when
  delegated) and only with the whole new text.
- `call_target` is purely lexical: `describe` runs before any permission is asked.

Why one module: read, write and edit must word the same failure the same way, and refuse the
same unwritable files, whichever tool meets them.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from defect_core.events import Location, ToolKind
from defect_core.tools.backends import FileStat, FsBackend
from defect_core.tools.base import ModelTool, Safety, ToolContext, ToolError
from defect_core.tools.beneath import Escape
from defect_core.tools.protected import protected_path
from defect_core.tools.shown import visible
from defect_core.tools.workspace import display_path

MAX_LINE_CHARS = 2000
"""Longer lines are cut (minified code, data) so one line cannot fill the context."""
MAX_EDIT_BYTES = 16 * 1024 * 1024
"""Larger files are not read whole for an edit or an overwrite's diff."""


def io_error(exc: Exception, rel: str, verb: str) -> ToolError:
    """A backend failure as a message the model can act on."""
    if isinstance(exc, UnicodeDecodeError):
        return ToolError(f"{rel} is not UTF-8 text; it cannot be read or edited as text")
    if isinstance(exc, FileNotFoundError):
        return ToolError(f"file not found: {rel}")
    if isinstance(exc, IsADirectoryError):
        return ToolError(f"{rel} is a directory; use search with a glob to list its files")
    if isinstance(exc, Escape):
        return ToolError(
            f"path is outside the workspace: {rel} (a link on its way leads out of it)"
        )
    if isinstance(exc, PermissionError):
        return ToolError(f"permission denied: cannot {verb} {rel}")
    detail = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    return ToolError(f"cannot {verb} {rel}: {detail or type(exc).__name__}")


async def stat_of(fs: FsBackend, path: Path, rel: str) -> FileStat | None:
    try:
        return await fs.stat(path)
    except OSError as exc:
        raise io_error(exc, rel, "access") from None


async def read_all(fs: FsBackend, path: Path, rel: str) -> str:
    """The whole text; a file that vanished since its stat is reported as deleted."""
    try:
        text = await fs.read_text(path)
    except FileNotFoundError:
        raise ToolError(f"{rel} was deleted while being read") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise io_error(exc, rel, "read") from None
    if "\x00" in text:
        raise binary_refusal(rel)
    return text


async def write_all(fs: FsBackend, path: Path, rel: str, content: str) -> None:
    try:
        await fs.write_text(path, content)
    except OSError as exc:
        raise io_error(exc, rel, "write") from None


def check_writable(st: FileStat, rel: str, ctx: ToolContext) -> None:
    """Refuse to write what must not be written: not a regular file, read-only, or (through
    the editor, which writes in place) a file with other hard links.

    Locally a write replaces the file atomically (a new inode), so a hard link elsewhere
    keeps the old content; the editor writes through the name, which would change every
    linked name, possibly outside the workspace."""
    if st.is_dir:
        raise ToolError(f"{rel} is a directory")
    if not st.is_regular:
        raise ToolError(f"{rel} is {st.kind}, not a regular file; it cannot be written")
    if not st.mode & 0o222:
        raise ToolError(
            f"{rel} is read-only (mode {st.mode:o}); make it writable first if it should change"
        )
    if st.nlink > 1 and ctx.fs.delegated:
        raise ToolError(
            f"{rel} has {st.nlink} hard links; writing it through the editor would change "
            "the other names too, so it is refused"
        )


def binary_refusal(rel: str) -> ToolError:
    return ToolError(f"{rel} is a binary file; it cannot be read or edited as text")


def is_crlf(text: str) -> bool:
    """Every line break is CRLF (and there is at least one)."""
    crlf = text.count("\r\n")
    return crlf > 0 and crlf == text.count("\n")


def number_lines(lines: list[str], first: int) -> str:
    return "\n".join(f"{n:>6}\t{line}" for n, line in enumerate(lines, start=first))


def call_target(args: dict[str, Any], ctx: ToolContext) -> tuple[str, tuple[Location, ...]]:
    """(project-relative name, locations) for `describe`: lexical, no file-system access.
    The name is for a title: whole, with line breaks and invisible characters made visible
    (`tools/shown.py`), so a path cannot pass for another in a permission question."""
    raw = args.get("path") if isinstance(args, dict) else None
    if not isinstance(raw, str) or not raw:
        return "", ()
    absolute = os.path.normpath(os.path.join(ctx.cwd, os.path.expanduser(raw)))
    return visible(display_path(raw, ctx.cwd)), (Location(absolute),)


class FileTool(ModelTool):
    """What the three file tools share: identity and the permission key (the tool name)."""

    _name: str
    _description: str
    _safety: Safety
    _kind: ToolKind

    @property
    def name(self) -> str:
        return self._name

    @property
    def description(self) -> str:
        return self._description

    @property
    def safety(self) -> Safety:
        return self._safety

    @property
    def kind(self) -> ToolKind:
        return self._kind

    def protected(self, args: dict[str, Any], ctx: ToolContext) -> str | None:
        """The file written or edited is protected: judged by its path alone (its content
        may mention any path)."""
        raw = args.get("path") if isinstance(args, dict) else None
        if not isinstance(raw, str):
            return None
        return protected_path(raw, ctx.cwd, ctx.cwd)
