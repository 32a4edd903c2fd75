"""The file tools: `read_file`, `write_file`, `edit_file`, and the session's `ReadLedger`.

The package owns how the model reads a window of a file, replaces a file, and edits one by
exact — or, failing that, tolerant — string match. One module per job:

- `access`: reaching a file through `ctx.fs`, failures worded for the model, `FileTool`;
- `ledger`: what the session last saw of each file, and one lock per file;
- `read`, `write`, `edit`: the three tools;
- `matching`: where an edit applies (pure text, no I/O).

Invariants (kept across the modules):
- Every path passes `workspace.resolve_path` before a backend hears of it; writes and edits
  never leave the workspace.
- Files change only through `ctx.fs.write_text` (atomic when local; the editor's buffer when
  delegated) and only with the whole new text, line endings kept: a CRLF file stays CRLF.
- An edit or overwrite of a file the session has read is refused when the file changed since,
  and edits of one file are serialised, so two tool calls of one batch never clobber each
  other.
- Failures are `ToolError`s worded for the model: no match, ambiguous match, binary or
  non-UTF-8 content, a vanished file, an editor that refused the request.

This module only re-exports, so `from defect_core.tools.files import ...` names every public
piece wherever it lives.
"""

from defect_core.tools.files.access import MAX_EDIT_BYTES, MAX_LINE_CHARS, FileTool
from defect_core.tools.files.edit import EditArgs, EditFileTool
from defect_core.tools.files.ledger import LEDGER_KEY, ReadLedger
from defect_core.tools.files.matching import TOLERANT_RULES, EditError, EditPlan, plan_edit
from defect_core.tools.files.read import (
    DEFAULT_READ_LIMIT,
    IMAGE_SUFFIXES,
    MAX_IMAGE_BYTES,
    MAX_READ_CHARS,
    ReadArgs,
    ReadFileTool,
)
from defect_core.tools.files.write import WriteArgs, WriteFileTool

__all__ = [
    "DEFAULT_READ_LIMIT",
    "IMAGE_SUFFIXES",
    "LEDGER_KEY",
    "MAX_EDIT_BYTES",
    "MAX_IMAGE_BYTES",
    "MAX_LINE_CHARS",
    "MAX_READ_CHARS",
    "TOLERANT_RULES",
    "EditArgs",
    "EditError",
    "EditFileTool",
    "EditPlan",
    "FileTool",
    "ReadArgs",
    "ReadFileTool",
    "ReadLedger",
    "WriteArgs",
    "WriteFileTool",
    "plan_edit",
]
