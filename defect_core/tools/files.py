"""The file tools: `read_file`, `write_file`, `edit_file`, and the session's `ReadLedger`.

Owns how the model reads a window of a file (numbered lines, images, binary refusal), how it
replaces a file, and how it edits one by exact — or, failing that, tolerant — string match.

Invariants:
- Every path passes `workspace.resolve_path` before a backend hears of it; writes and edits
  never leave the workspace.
- Files change only through `ctx.fs.write_text` (atomic when local; the editor's buffer when
  delegated) and only with the whole new text, line endings kept: a CRLF file stays CRLF.
- An edit or overwrite of a file the session has read is refused when the file changed since
  (content digest when the whole file was seen, size and mtime otherwise), and edits of one
  file are serialised, so two tool calls of one batch never clobber each other.
- Failures are `ToolError`s worded for the model: no match, ambiguous match, binary or
  non-UTF-8 content, a vanished file, an editor that refused the request.

Why a ledger: the model edits from what it last read. If the user (or a formatter, or the
editor's unsaved buffer) changed the file since, an exact-match edit may still apply and
silently merge two intents; refusing and asking for a fresh read is the safe answer.
"""

from __future__ import annotations

import base64
import difflib
import hashlib
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from pydantic import Field

from defect_core.events import DiffDisplay, ImageDisplay, Location, ToolDisplay, ToolKind
from defect_core.model import ImageBlock, ResultPart, TextBlock
from defect_core.tools.backends import BinaryReader, FileStat, FsBackend
from defect_core.tools.base import (
    Safety,
    ToolCallView,
    ToolContext,
    ToolError,
    ToolOutput,
    input_schema,
)
from defect_core.tools.workspace import ToolArgs, display_path, parse_args, resolve_path

DEFAULT_READ_LIMIT = 2000
"""Lines a read returns when the model gives no `limit`."""
MAX_LINE_CHARS = 2000
"""Longer lines are cut (minified code, data) so one line cannot fill the context."""
MAX_READ_CHARS = 100_000
"""A read result stops at a line boundary past this many characters."""
MAX_IMAGE_BYTES = 5 * 1024 * 1024
MAX_EDIT_BYTES = 16 * 1024 * 1024
_SNIFF_BYTES = 8192

IMAGE_SUFFIXES = frozenset({".png", ".jpg", ".jpeg", ".gif", ".webp"})

LEDGER_KEY = "defect.read_ledger"
"""Where the ledger lives in `ToolContext.settings` (the runner shares one dict per session)."""


# --- the read ledger --------------------------------------------------------------------------


def _digest(text: str) -> bytes:
    # Trailing line breaks are left out: an editor's windowed read (`fs/read_text_file` with
    # `limit`) may drop the final newline that its whole-file read keeps.
    data = text.rstrip("\r\n").encode("utf-8", "surrogatepass")
    return hashlib.blake2b(data, digest_size=16).digest()


@dataclass(frozen=True, slots=True)
class _Seen:
    size: int
    mtime_ns: int
    digest: bytes | None


@dataclass
class ReadLedger:
    """What this session last saw of each file, and one lock per file for changes."""

    _seen: dict[Path, _Seen] = field(default_factory=dict)
    _locks: dict[Path, anyio.Lock] = field(default_factory=dict)

    @staticmethod
    def of(ctx: ToolContext) -> ReadLedger:
        ledger = ctx.settings.get(LEDGER_KEY)
        if not isinstance(ledger, ReadLedger):
            ledger = ctx.settings[LEDGER_KEY] = ReadLedger()
        return ledger

    def lock(self, path: Path) -> anyio.Lock:
        return self._locks.setdefault(path, anyio.Lock())

    def record(self, path: Path, stat: FileStat | None, text: str | None) -> None:
        """The session saw `path` as `stat`; `text` when it saw the whole file."""
        if stat is None:
            self._seen.pop(path, None)
            return
        digest = _digest(text) if text is not None else None
        self._seen[path] = _Seen(stat.size, stat.mtime_ns, digest)

    def changed(self, path: Path, stat: FileStat | None, text: str | None) -> bool:
        """Whether `path` differs from what the session last saw (False if it never saw it).

        Content decides when both sides have it (a `touch` is no change; an unsaved edit in
        the editor's buffer is one); size and mtime otherwise.
        """
        seen = self._seen.get(path)
        if seen is None:
            return False
        if stat is None:
            return True
        if seen.digest is not None and text is not None:
            return _digest(text) != seen.digest
        return (seen.size, seen.mtime_ns) != (stat.size, stat.mtime_ns)


# --- shared pieces ----------------------------------------------------------------------------


def _io_error(exc: Exception, rel: str, verb: str) -> ToolError:
    """A backend failure as a message the model can act on."""
    if isinstance(exc, UnicodeDecodeError):
        return ToolError(f"{rel} is not UTF-8 text; it cannot be read or edited as text")
    if isinstance(exc, FileNotFoundError):
        return ToolError(f"file not found: {rel}")
    if isinstance(exc, IsADirectoryError):
        return ToolError(f"{rel} is a directory; use search with a glob to list its files")
    if isinstance(exc, PermissionError):
        return ToolError(f"permission denied: cannot {verb} {rel}")
    detail = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    return ToolError(f"cannot {verb} {rel}: {detail or type(exc).__name__}")


async def _stat(fs: FsBackend, path: Path, rel: str) -> FileStat | None:
    try:
        return await fs.stat(path)
    except OSError as exc:
        raise _io_error(exc, rel, "access") from None


async def _read_all(fs: FsBackend, path: Path, rel: str) -> str:
    """The whole text; a file that vanished since its stat is reported as deleted."""
    try:
        text = await fs.read_text(path)
    except FileNotFoundError:
        raise ToolError(f"{rel} was deleted while being read") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise _io_error(exc, rel, "read") from None
    if "\x00" in text:
        raise _binary(rel)
    return text


async def _write(fs: FsBackend, path: Path, rel: str, content: str) -> None:
    try:
        await fs.write_text(path, content)
    except OSError as exc:
        raise _io_error(exc, rel, "write") from None


def _check_writable(st: FileStat, rel: str, ctx: ToolContext) -> None:
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


def _binary(rel: str) -> ToolError:
    return ToolError(f"{rel} is a binary file; it cannot be read or edited as text")


def _is_crlf(text: str) -> bool:
    """Every line break is CRLF (and there is at least one)."""
    crlf = text.count("\r\n")
    return crlf > 0 and crlf == text.count("\n")


def _number(lines: list[str], first: int) -> str:
    return "\n".join(f"{n:>6}\t{line}" for n, line in enumerate(lines, start=first))


def _target(args: dict[str, Any], ctx: ToolContext) -> tuple[str, tuple[Location, ...]]:
    """(project-relative name, locations) for `describe`: lexical, no file-system access."""
    raw = args.get("path") if isinstance(args, dict) else None
    if not isinstance(raw, str) or not raw:
        return "", ()
    absolute = os.path.normpath(os.path.join(ctx.cwd, os.path.expanduser(raw)))
    return display_path(raw, ctx.cwd), (Location(absolute),)


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


class _FileTool:
    """What the three file tools share: identity and the permission key (the tool name)."""

    _name: str
    _description: str
    args_model: type[ToolArgs]
    """What `run` validates its arguments with; the input schema is derived from it."""
    _safety: Safety
    _kind: ToolKind

    @property
    def name(self) -> str:
        return self._name

    @property
    def description(self) -> str:
        return self._description

    @property
    def input_schema(self) -> dict[str, Any]:
        return input_schema(self.args_model)

    @property
    def safety(self) -> Safety:
        return self._safety

    @property
    def kind(self) -> ToolKind:
        return self._kind

    def permission_key(self, args: dict[str, Any]) -> str:
        return self._name


# --- read_file --------------------------------------------------------------------------------


class ReadArgs(ToolArgs):
    path: str = Field(description="File path, relative to the project root.")
    offset: int | None = Field(
        default=None, ge=1, description="1-based line number to start reading from."
    )
    limit: int | None = Field(default=None, ge=1, description="Number of lines to read.")


class ReadFileTool(_FileTool):
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
        rel, locations = _target(args, ctx)
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
        st = await _stat(ctx.fs, path, rel)
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
                raise _io_error(exc, rel, "read") from None
            if b"\x00" in head:
                raise _binary(rel)

        offset = a.offset or 1
        limit = a.limit or DEFAULT_READ_LIMIT
        try:
            text = await ctx.fs.read_text(path, line=offset, limit=limit + 1)
        except (OSError, UnicodeDecodeError) as exc:
            raise _io_error(exc, rel, "read") from None
        if "\x00" in text:
            raise _binary(rel)

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
        body = _number(shown, offset)
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
            raise _io_error(exc, rel, "read") from None
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


# --- write_file -------------------------------------------------------------------------------


class WriteArgs(ToolArgs):
    path: str = Field(description="File path, relative to the project root.")
    content: str = Field(description="The complete new content.")


class WriteFileTool(_FileTool):
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
        rel, locations = _target(args, ctx)
        title = f"Write {rel}" if rel else "Write file"
        return ToolCallView(title=title, kind=self.kind, locations=locations)

    async def _plan(
        self, a: WriteArgs, path: Path, ctx: ToolContext
    ) -> tuple[str, FileStat | None, str | None, str]:
        """(rel, stat, old text or None, new text) — reads, never writes."""
        rel = display_path(path, ctx.cwd)
        st = await _stat(ctx.fs, path, rel)
        if st is not None:
            _check_writable(st, rel, ctx)
        old: str | None = None
        if st is not None and st.size <= MAX_EDIT_BYTES:
            try:
                old = await _read_all(ctx.fs, path, rel)
            except ToolError:
                old = None  # binary, undecodable or gone: it is being replaced whole anyway
        content = a.content
        if old is not None and _is_crlf(old) and "\r\n" not in content:
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
            await _write(ctx.fs, path, rel, content)
            ledger.record(path, await _stat(ctx.fs, path, rel), content)
        lines = content.count("\n") + (0 if content.endswith("\n") or not content else 1)
        verb = "Created" if st is None else "Wrote"
        return ToolOutput(
            content=f"{verb} {rel} ({lines} lines)",
            display=(DiffDisplay(str(path), old, content),),
            locations=(Location(str(path), 1),),
        )


# --- edit_file: matching ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EditPlan:
    """The result of matching an edit against a file's text."""

    text: str
    count: int
    first_line: int
    """1-based line where the first replacement starts."""
    new_lines: int
    """How many lines the first replacement spans in the new text."""
    rule: str
    """"exact", or the tolerant rule that found the match."""


@dataclass(frozen=True, slots=True)
class _Rule:
    name: str
    explains: str
    norm: Callable[[str], str]
    reindent: bool


TOLERANT_RULES: tuple[_Rule, ...] = (
    _Rule("trailing-whitespace", "trailing whitespace differed", str.rstrip, False),
    _Rule("indentation", "indentation differed", str.strip, True),
    _Rule("whitespace", "whitespace inside lines differed", lambda s: " ".join(s.split()), True),
)
"""Fallbacks tried in order when `old_string` is not found verbatim. Each compares whole lines
after normalising them; the first rule that matches decides (and must match uniquely)."""


class EditError(ToolError):
    """No match or an ambiguous match (the message does not name the file; the tool adds it)."""


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]


def _line_of(text: str, index: int) -> int:
    return text.count("\n", 0, index) + 1


def plan_edit(text: str, old: str, new: str, replace_all: bool = False) -> EditPlan:
    """Apply `old` → `new` to `text`, or raise `EditError` saying why it cannot.

    Works in LF space when the file is CRLF throughout, and converts back, so line endings
    survive whatever the model sends.
    """
    crlf = _is_crlf(text)
    if crlf:
        text, old, new = (s.replace("\r\n", "\n") for s in (text, old, new))
    plan = _plan_lf(text, old, new, replace_all)
    if crlf:
        plan = EditPlan(
            plan.text.replace("\n", "\r\n"),
            plan.count,
            plan.first_line,
            plan.new_lines,
            plan.rule,
        )
    return plan


def _plan_lf(text: str, old: str, new: str, replace_all: bool) -> EditPlan:
    new_span = new.count("\n") + 1
    if old == "":
        if text == "":
            return EditPlan(new, 1, 1, new_span, "exact")
        raise EditError(
            "old_string is empty but the file is not; give the text to replace, or use "
            "write_file to replace the whole file"
        )
    count = text.count(old)
    if count:
        first = text.find(old)
        if count > 1 and not replace_all:
            raise _ambiguous(count, _exact_lines(text, old))
        result = text.replace(old, new) if replace_all else text.replace(old, new, 1)
        return EditPlan(
            result, count if replace_all else 1, _line_of(text, first), new_span, "exact"
        )

    lines = text.split("\n")
    old_lines = old.split("\n")
    new_lines = new.split("\n")
    if len(old_lines) > 1 and old_lines[-1] == "":
        old_lines.pop()
        if len(new_lines) > 1 and new_lines[-1] == "":
            new_lines.pop()
    if not any(line.strip() for line in old_lines):
        raise EditError("old_string was not found (it is only whitespace)")
    for rule in TOLERANT_RULES:
        starts = _line_matches(lines, old_lines, rule.norm)
        if not starts:
            continue
        if len(starts) > 1 and not replace_all:
            raise _ambiguous(len(starts), [s + 1 for s in starts], rule.name)
        out: list[str] = []
        pos = 0
        for start in starts:
            out.extend(lines[pos:start])
            out.extend(_reindent(old_lines, lines[start : start + len(old_lines)], new_lines, rule))
            pos = start + len(old_lines)
        out.extend(lines[pos:])
        return EditPlan("\n".join(out), len(starts), starts[0] + 1, len(new_lines), rule.name)
    raise EditError("old_string was not found" + _closest(lines, old_lines))


def _line_matches(lines: list[str], old_lines: list[str], norm: Callable[[str], str]) -> list[int]:
    """Start indexes of non-overlapping runs of `lines` equal to `old_lines` after `norm`."""
    want = [norm(line) for line in old_lines]
    n = len(want)
    first = want[0]
    starts: list[int] = []
    i = 0
    last = len(lines) - n
    while i <= last:
        if norm(lines[i]) == first and all(norm(lines[i + j]) == want[j] for j in range(1, n)):
            starts.append(i)
            i += n
        else:
            i += 1
    return starts


def _reindent(
    old_lines: list[str], found: list[str], new_lines: list[str], rule: _Rule
) -> list[str]:
    """`new_lines` shifted by the indentation the file has where the model's text had less/more."""
    if not rule.reindent:
        return new_lines
    anchor = next((j for j, line in enumerate(old_lines) if line.strip()), 0)
    had, has = _indent(old_lines[anchor]), _indent(found[anchor])
    if had == has:
        return new_lines
    return [
        has + line[len(had) :] if line.strip() and line.startswith(had) else line
        for line in new_lines
    ]


def _exact_lines(text: str, old: str) -> list[int]:
    return [_line_of(text, m.start()) for m in re.finditer(re.escape(old), text)]


def _ambiguous(count: int, lines: list[int], rule: str | None = None) -> EditError:
    where = ", ".join(str(n) for n in lines[:10]) + (", …" if len(lines) > 10 else "")
    how = f" (after ignoring differences by rule '{rule}')" if rule else ""
    return EditError(
        f"old_string matches {count} places{how}, at lines {where}; include more surrounding "
        "lines to make it unique, or set replace_all to change every occurrence"
    )


def _closest(lines: list[str], old_lines: list[str]) -> str:
    probe = next((line.strip() for line in old_lines if line.strip()), "")
    if not probe or len(lines) > 20_000:
        return ""
    stripped = [line.strip() for line in lines]
    best = difflib.get_close_matches(probe, stripped, n=1, cutoff=0.6)
    if not best:
        return "; read the file again to see its current content"
    n = stripped.index(best[0]) + 1
    return f"; the closest line is {n}: {lines[n - 1].strip()[:200]!r}"


# --- edit_file: the tool ----------------------------------------------------------------------


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


class EditFileTool(_FileTool):
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
        rel, locations = _target(args, ctx)
        title = f"Edit {rel}" if rel else "Edit file"
        return ToolCallView(title=title, kind=self.kind, locations=locations)

    async def _plan(
        self, a: EditArgs, path: Path, ctx: ToolContext
    ) -> tuple[str, FileStat | None, str | None, EditPlan]:
        """(rel, stat, old text or None when creating, plan) — reads, never writes."""
        rel = display_path(path, ctx.cwd)
        st = await _stat(ctx.fs, path, rel)
        if st is None:
            if a.old_string:
                raise ToolError(f"file not found: {rel}")
            new = a.new_string
            return rel, None, None, EditPlan(new, 1, 1, new.count("\n") + 1, "exact")
        _check_writable(st, rel, ctx)
        if st.size > MAX_EDIT_BYTES:
            raise ToolError(f"{rel} is too large to edit ({st.size} bytes)")
        text = await _read_all(ctx.fs, path, rel)
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
                now = await _stat(ctx.fs, path, rel)
                if now is None:
                    raise ToolError(f"{rel} was deleted while being edited")
                if (now.size, now.mtime_ns) != (st.size, st.mtime_ns):
                    raise ToolError(f"{rel} changed while being edited; read it again, then edit")
            await _write(ctx.fs, path, rel, plan.text)
            ledger.record(path, await _stat(ctx.fs, path, rel), plan.text)

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
    return _number(shown, start + 1)
