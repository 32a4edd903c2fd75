"""The `search` tool: a regex over file contents and/or a glob over file names.

Owns the tool's arguments, its title, the run (in a worker thread, abandoned on cancel, with
`SEARCH_DEADLINE`), the progress it streams and the report the model reads.

Invariants:
- The search root passes `workspace.resolve_path`; reads outside the workspace only when the
  session allows them. An explicit file is searched even when ignored.
- Results are capped (`max_results`) and a marker says so, or that the search stopped at the
  deadline, and how many files were skipped and why; paths are relative to the project root,
  ready for `read_file`.
- A cancelled search stops its worker thread between files (`stop`), so it never keeps
  scanning for a caller that is gone.
- While it runs, the first hits are streamed as the call's progress (`ctx.report`): the
  first as soon as it is found (the scan's thread wakes the loop; nothing polls), then at
  most every `PROGRESS_INTERVAL`, and none once the answer is known — in a big tree the
  user sees results long before the search ends. The answer itself does not depend on the
  order rg finds files in (`ordering`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
from pydantic import Field

from defect_core.events import TextDisplay, ToolKind
from defect_core.log import get_logger
from defect_core.tools.base import (
    ModelTool,
    Safety,
    ToolCallView,
    ToolContext,
    ToolError,
    ToolOutput,
)
from defect_core.tools.search import rg_engine
from defect_core.tools.search.ignore import ignore_top, walk_files
from defect_core.tools.search.matching import (
    MAX_FILE_BYTES,
    GlobFilter,
    Regex,
    ScanResult,
    compile_pattern,
    scan,
)
from defect_core.tools.search.ordering import scan_in_any_order
from defect_core.tools.search.preview import Preview
from defect_core.tools.workspace import ToolArgs, display_path, parse_args, resolve_path

log = get_logger("defect.tools")

DEFAULT_MAX_RESULTS = 200
MAX_RESULTS = 2000
SEARCH_DEADLINE = 30.0
"""Seconds after which a search stops and reports what it found so far."""
PROGRESS_INTERVAL = 0.1
"""Seconds at least between two progress reports of a running search."""


class SearchArgs(ToolArgs):
    pattern: str | None = Field(default=None, description="Regex to find in file contents.")
    glob: str | None = Field(default=None, description="File name or path glob.")
    path: str | None = Field(
        default=None, description="Directory or file to search, relative to the project root."
    )
    case_insensitive: bool = False
    max_results: int = Field(default=DEFAULT_MAX_RESULTS, ge=1, le=MAX_RESULTS)


class SearchTool(ModelTool):
    args_model = SearchArgs

    @property
    def name(self) -> str:
        return "search"

    @property
    def description(self) -> str:
        return (
            "Search the project: `pattern` is a regular expression (RE2 syntax: like Python's, "
            "without lookaround or backreferences; `\\w` is ASCII, `\\pL` any letter) "
            "matched against file contents, giving "
            "`path:line: text` for each matching line; `glob` "
            "(e.g. `*.py`, `src/**/*.ts`, `*.{js,jsx}`) selects files by name — alone, it lists "
            "the matching files. `path` limits the search to a directory or file. Files that "
            f".gitignore excludes, binary files and files over {MAX_FILE_BYTES >> 20} MB are "
            "skipped. At most "
            f"`max_results` (default {DEFAULT_MAX_RESULTS}) lines are returned."
        )

    @property
    def safety(self) -> Safety:
        return Safety.READ_ONLY

    @property
    def kind(self) -> ToolKind:
        return "search"

    def describe(self, args: dict[str, Any], ctx: ToolContext) -> ToolCallView:
        args = args if isinstance(args, dict) else {}
        pattern, glob, path = args.get("pattern"), args.get("glob"), args.get("path")
        where = ""
        if isinstance(path, str) and path and display_path(path, ctx.cwd) != ".":
            where = f" in {display_path(path, ctx.cwd).rstrip('/')}/"
        if isinstance(pattern, str) and pattern:
            title = f"Search '{pattern}'{where}"
            if isinstance(glob, str) and glob:
                title += f" ({glob})"
        elif isinstance(glob, str) and glob:
            title = f"Find files '{glob}'{where}"
        else:
            title = "Search"
        return ToolCallView(title=title, kind=self.kind)

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        a = parse_args(self.args_model, args, self.name)
        if not a.pattern and not a.glob:
            raise ToolError("invalid arguments for search: give a `pattern`, a `glob`, or both")
        regex = compile_pattern(a.pattern, a.case_insensitive) if a.pattern else None
        prefilter = (
            _Prefilter(rg, translated, a.case_insensitive)
            if a.pattern
            and (rg := rg_engine.ripgrep_binary()) is not None
            and (translated := rg_engine.translate_pattern(a.pattern)) is not None
            else None
        )
        glob = GlobFilter.parse(a.glob) if a.glob else None
        root = resolve_path(
            a.path or ".", ctx.cwd, write=False, allow_read_outside=ctx.allow_read_outside
        )
        rel_root = display_path(root, ctx.cwd)

        stop = threading.Event()
        preview = Preview()
        done = anyio.Event()
        failure: Exception | None = None
        async with anyio.create_task_group() as tg:
            tg.start_soon(_stream_preview, preview, regex is None, done, ctx)
            try:
                result = await anyio.to_thread.run_sync(
                    self._search, root, ctx.cwd, rel_root, regex, glob, a.max_results, stop,
                    prefilter, preview, abandon_on_cancel=True,
                )  # fmt: skip
            except Exception as exc:  # raised below, not wrapped in the group's ExceptionGroup
                failure = exc
            finally:
                stop.set()
                done.set()
        if failure is not None:
            raise failure
        return ToolOutput(content=_report(result, a, rel_root, regex is None))

    @staticmethod
    def _search(
        root: Path,
        cwd: Path,
        rel_root: str,
        regex: Regex | None,
        glob: GlobFilter | None,
        max_results: int,
        stop: threading.Event,
        prefilter: _Prefilter | None = None,
        preview: Preview | None = None,
    ) -> ScanResult:
        deadline = time.monotonic() + SEARCH_DEADLINE
        if not root.exists():
            raise ToolError(f"path not found: {rel_root}")
        if root.is_file():
            # An explicit file is searched even when ignored; the glob still filters it.
            files: Iterator[tuple[str, str]] = iter([(str(root), root.name)])
            prefix = rel_root[: -len(root.name)] if rel_root.endswith(root.name) else ""
            return scan(files, prefix, regex, glob, max_results, stop, deadline, preview)
        prefix = "" if rel_root == "." else rel_root.rstrip("/") + "/"
        if regex is not None and (
            run := _prefiltered(str(root), os.path.abspath(cwd), regex, prefilter)
        ):
            with run:
                result = scan_in_any_order(
                    str(root), _and_large_files(run, stop, deadline), prefix, regex, glob,
                    max_results, stop, deadline, preview,
                )  # fmt: skip
                large = None if result.stopped else run.large()
            if result.stopped or run.interrupted:
                result.stopped = True
                return result
            if large is not None:  # the large files were scanned (skipped and counted)
                return result
            # rg failed: the walk answers, and the preview starts again.
            if preview is not None:
                preview.clear()
        files = walk_files(str(root), os.path.abspath(cwd), stop)
        return scan(files, prefix, regex, glob, max_results, stop, deadline, preview)


@dataclass(frozen=True)
class _Prefilter:
    """ripgrep, to list the files the scan must read (`rg_engine`), with the pattern in its
    syntax."""

    rg: str
    pattern: str
    case_insensitive: bool


def _prefiltered(
    root: str, workspace: str, regex: Regex, prefilter: _Prefilter | None
) -> rg_engine.RgSearch | None:
    """rg, started, where its candidates give the walk's results (see `rg_engine`): its
    scope is the walk's, and the pattern cannot match an empty file (every file would be
    one); None where the walk must answer."""
    if prefilter is None or regex.search(b"") is not None:
        return None
    if ignore_top(root, workspace) != root:
        return None
    try:
        return rg_engine.RgSearch(
            prefilter.rg, root, prefilter.pattern, prefilter.case_insensitive, MAX_FILE_BYTES
        )
    except OSError:
        return None


def _and_large_files(
    run: rg_engine.RgSearch, stop: threading.Event, deadline: float
) -> Iterator[str]:
    """rg's candidates, then the files it left out for their size: the scan counts those
    before its cap point only, as the walk does (nothing when rg failed: the walk answers)."""
    yield from run.files(stop, deadline)
    yield from run.large_files() or ()


async def _stream_preview(
    preview: Preview, files_only: bool, done: anyio.Event, ctx: ToolContext
) -> None:
    """Report what the search found so far, as soon as it finds something and then at most
    every `PROGRESS_INTERVAL`, until `done` (the final answer then replaces it)."""
    loop = asyncio.get_running_loop()
    shown = 0
    while not done.is_set():
        with anyio.CancelScope() as waiting:
            # Asked before the version is read: an add in between still ends the wait.
            preview.on_next_add(functools.partial(_wake, loop, waiting))
            try:
                if preview.version == shown:
                    await done.wait()
            finally:
                preview.on_next_add(None)
        if done.is_set() or preview.version == shown:
            continue
        shown = preview.version
        text = preview.snapshot(files_only)
        if text is None:
            continue
        try:
            await ctx.report((TextDisplay(text),))
        except Exception as exc:  # progress is a view: it never fails the search itself
            log.warning("search_progress_not_shown", error=repr(exc))
            return
        with anyio.move_on_after(PROGRESS_INTERVAL):
            await done.wait()


def _wake(loop: asyncio.AbstractEventLoop, waiting: anyio.CancelScope) -> None:
    """End the preview's wait, from the scan's thread (a scope already left ignores it)."""
    with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
        loop.call_soon_threadsafe(waiting.cancel)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _report(result: ScanResult, a: SearchArgs, rel_root: str, files_only: bool) -> str:
    where = "" if rel_root == "." else f" in {rel_root}"
    if files_only:
        head = (
            f"{_count(result.files_matched, 'file')} matching '{a.glob}'{where}"
            if result.lines
            else f"No files match '{a.glob}'{where}"
        )
    elif result.lines:
        head = (
            f"{_count(result.matches, 'matching line')} in "
            f"{_count(result.files_matched, 'file')}{where}"
        )
    else:
        head = f"No matches for '{a.pattern}'{where}"
        if a.glob:
            head += f" in files matching '{a.glob}'"
    notes = []
    if result.capped:
        notes.append(
            f"[results capped at {a.max_results}; narrow the search with `path` or `glob`]"
        )
    if result.stopped:
        notes.append(f"[the search stopped after {SEARCH_DEADLINE:g} s; results are partial]")
    skipped = []
    if result.binary:
        skipped.append(f"{result.binary} binary")
    if result.undecodable:
        skipped.append(f"{result.undecodable} not UTF-8 with a match")
    if result.large:
        skipped.append(f"{result.large} larger than {MAX_FILE_BYTES >> 20} MB")
    if skipped:
        notes.append(f"[skipped files: {', '.join(skipped)}]")
    return "\n".join([head + (":" if result.lines else ""), *result.lines, *notes])
