"""The `bash` tool: run one shell command in the workspace and report what it printed.

Owns the command's lifetime (create → wait with a timeout → output → release), the output cap
the model sees, the permission key an "always" answer is remembered under, and what a
permission question shows: the whole command, every character visible (`whole_command`,
`tools/shown.py`), and why it is asked every time when it names a protected path
(`protected`, `tools/command_paths.py`).

Invariants:
- The working directory is inside the workspace (even when reads outside are allowed).
- Whatever happens — normal exit, timeout, cancellation of `run`, a failing backend — the
  command's handle is released exactly once, and a command still running is killed first
  (the whole process group for the local shell), under a shielded scope so a cancel cannot
  skip the cleanup. Cancellation is then re-raised, never swallowed.
- When the shell is the editor's terminal, its id is reported (`ctx.report`) right after
  creation, so the user watches the command live.
- The model sees at most `MAX_OUTPUT_CHARS` of output (head and tail, a marker in between)
  and always the exit code, signal or timeout.

Permission keys (`permission_key`): what an "always" answer remembers covers only commands
that do what the user saw (the rules and the table: `tools/command_key.py`,
`tools/command_table.py`; for users: docs/permissions.md):
- a command of a program in the table, every word plain and every argument admitted by the
  program's rule, is remembered as a `CommandRule`: the program as written (`git`,
  `/usr/bin/git`), its subcommand and the operands its rule keys (`git status`,
  `make test`, `npm run build`), with any admitted arguments — `git status --porcelain`
  matches an "always" given to `git status`, `git log --output=x` never matches `git log`;
- anything else is remembered as an `ExactCommand`, the command line itself: unknown
  programs, interpreters, wrappers and editors (`python`, `sudo`, `env`, `xargs`, `vim`,
  `find`, `zip`, ...), options known to run code or write files (`git -c`, `--git-dir`,
  `sed -i` or a script with `e`/`w`, `tar` other than listing, `make VAR=x` or `-f`),
  quoting that hides spaces or metacharacters, variable assignments in front, and compound
  commands (`;`, `&&`, `|`, redirections, `$(...)`, backticks, newlines, braces): allowing
  `cd x && make` always allows exactly that line, and no other spacing of it.

Safety is `MUTATING` for every command (kind `execute`): the `Tool` protocol gives safety per
tool, not per call, and the policy asks for every command outside yolo mode anyway.
"""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path
from typing import Any

import anyio
from pydantic import Field

from defect_core.events import TerminalDisplay, TextDisplay, ToolDisplay, ToolKind
from defect_core.tools.backends import ShellExit, ShellOutput, truncation_marker
from defect_core.tools.base import (
    ModelTool,
    Safety,
    ToolCallView,
    ToolContext,
    ToolError,
    ToolOutput,
    clip_title,
)
from defect_core.tools.command_key import CommandKey, command_key
from defect_core.tools.command_paths import protected_in_command
from defect_core.tools.shown import fenced, visible
from defect_core.tools.workspace import ToolArgs, display_path, parse_args, resolve_path

DEFAULT_TIMEOUT = 120.0
MAX_TIMEOUT = 600.0
MAX_OUTPUT_CHARS = 30_000
OUTPUT_LIMIT_BYTES = MAX_OUTPUT_CHARS - 200
"""What the backend keeps (local: head and tail; the editor's terminal: the tail). Below the
cap by room for the backend's marker, so the model sees one marker, with the byte count."""

CLEANUP_TIMEOUT = 10.0
"""Bound on killing and releasing a command (an editor may never answer)."""

COMMAND_ENV = {"PAGER": "cat", "GIT_PAGER": "cat", "GIT_TERMINAL_PROMPT": "0"}
"""No pager, no password prompt: nobody is at the keyboard of this command."""


class BashArgs(ToolArgs):
    command: str = Field(min_length=1, description="The command line to run.")
    workdir: str | None = Field(
        default=None, description="Directory to run in, relative to the project root."
    )
    timeout: float | None = Field(
        default=None,
        gt=0,
        le=MAX_TIMEOUT,
        description=f"Seconds before the command is killed (default {DEFAULT_TIMEOUT:g}).",
    )


class BashTool(ModelTool):
    """Runs a command through `ctx.shell` (a local process group or the editor's terminal)."""

    args_model = BashArgs

    @property
    def name(self) -> str:
        return "bash"

    @property
    def description(self) -> str:
        return (
            "Run a shell command (bash) in the project and return its output (stdout and "
            "stderr together) and exit code. `workdir` is a directory of the project (default: "
            f"its root). The command is killed after `timeout` seconds (default "
            f"{DEFAULT_TIMEOUT:g}, at most {MAX_TIMEOUT:g}). Nothing can be typed into it: "
            "use non-interactive flags. Long output is cut in the middle. Prefer read_file, "
            "edit_file and search over cat, sed and grep."
        )

    @property
    def safety(self) -> Safety:
        return Safety.MUTATING

    @property
    def kind(self) -> ToolKind:
        return "execute"

    def describe(self, args: dict[str, Any], ctx: ToolContext) -> ToolCallView:
        command = args.get("command") if isinstance(args, dict) else None
        if not isinstance(command, str) or not command.strip():
            return ToolCallView(title="Run command", kind=self.kind)
        title = clip_title(command, more="full command below")
        workdir = args.get("workdir")
        if isinstance(workdir, str) and workdir and display_path(workdir, ctx.cwd) != ".":
            title += f" (in {clip_title(display_path(workdir, ctx.cwd), 100)})"
        whole = title.startswith(visible(command.strip()))
        return ToolCallView(
            title=title, kind=self.kind, content=() if whole else whole_command(args)
        )

    async def preview(self, args: dict[str, Any], ctx: ToolContext) -> tuple[ToolDisplay, ...]:
        """The whole command for the permission question, however long or oddly spaced."""
        return whole_command(args)

    def permission_key(self, args: dict[str, Any]) -> str | CommandKey:
        command = args.get("command") if isinstance(args, dict) else None
        return command_key(command) if isinstance(command, str) else self.name

    def protected(self, args: dict[str, Any], ctx: ToolContext) -> str | None:
        """The command names a protected path, cannot be read, or runs in a protected
        directory (`tools/command_paths.py`)."""
        command = args.get("command") if isinstance(args, dict) else None
        if not isinstance(command, str):
            return None
        workdir = args.get("workdir")
        base = ctx.cwd
        if isinstance(workdir, str) and workdir:
            base = Path(os.path.normpath(os.path.join(ctx.cwd, os.path.expanduser(workdir))))
        return protected_in_command(command, base, ctx.cwd)

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        a = parse_args(self.args_model, args, self.name)
        cwd = ctx.cwd
        if a.workdir:
            cwd = resolve_path(a.workdir, ctx.cwd, write=True)
            try:
                st = await ctx.fs.stat(cwd)
            except OSError as exc:
                raise ToolError(f"cannot use {a.workdir} as working directory: {exc}") from None
            if st is None or not st.is_dir:
                raise ToolError(f"working directory not found: {display_path(cwd, ctx.cwd)}")
        timeout = a.timeout or DEFAULT_TIMEOUT
        shell = ctx.shell
        try:
            handle = await shell.create(
                a.command,
                cwd,
                env=dict(COMMAND_ENV),
                output_limit=OUTPUT_LIMIT_BYTES,
                policy=ctx.env_policy,
            )
        except OSError as exc:
            raise ToolError(f"could not start the command: {exc}") from None

        status: ShellExit | None = None
        ended = False  # exited, or killed: either way nothing of it runs any more
        try:
            if shell.delegated:
                await ctx.report((TerminalDisplay(handle),))
            with anyio.move_on_after(timeout):
                status = await shell.wait_for_exit(handle)
            if status is None:
                await _kill(ctx, handle)
            ended = True
            out = await shell.output(handle)
        except OSError as exc:
            raise ToolError(f"the command could not be run to its end: {exc}") from None
        finally:
            # Also on cancellation: kill and release under a shield, then let the cancel go on
            # (with the output so far left to the runner, which keeps it in the result).
            with anyio.move_on_after(CLEANUP_TIMEOUT, shield=True):
                if not ended:
                    await _kill(ctx, handle)
                    if ctx.keep_partial is not None:
                        with contextlib.suppress(OSError):
                            partial = await shell.output(handle)
                            ctx.keep_partial(cap_middle(partial.output.rstrip("\n")))
                with contextlib.suppress(OSError):
                    await shell.release(handle)

        return _result(out, status, timeout, handle if shell.delegated else None)


def whole_command(args: dict[str, Any]) -> tuple[ToolDisplay, ...]:
    """The command as a code block, every character visible (`tools/shown.py`), and the
    directory it runs in when not the project root."""
    command = args.get("command") if isinstance(args, dict) else None
    if not isinstance(command, str):
        return ()
    text = fenced(visible(command, block=True), "sh")
    workdir = args.get("workdir")
    if isinstance(workdir, str) and workdir:
        text += f"\nin `{visible(workdir)}`"
    return (TextDisplay(text),)


async def _kill(ctx: ToolContext, handle: str) -> None:
    """Kill the command, shielded from cancellation but not waiting for ever on the editor."""
    with anyio.move_on_after(CLEANUP_TIMEOUT, shield=True), contextlib.suppress(OSError):
        # A failure means it is already gone, or the editor refused: release follows anyway.
        await ctx.shell.kill(handle)


def cap_middle(text: str, limit: int = MAX_OUTPUT_CHARS) -> str:
    """`text` if short enough, else its head and tail around a truncation marker."""
    if len(text) <= limit:
        return text
    head = limit // 2
    tail = limit - head
    dropped = len(text) - head - tail
    return text[:head] + truncation_marker(dropped, "characters") + text[-tail:]


def _status_line(status: ShellExit | None, out: ShellOutput, timeout: float) -> tuple[str, bool]:
    """(what the end of the command was, whether it counts as a failure)."""
    if status is None:
        return (
            f"[timed out after {timeout:g} s; the command and its processes were killed]",
            True,
        )
    signal = status.signal or out.signal
    if status.exit_code is None and signal:
        return f"[killed by signal {signal}]", True
    code = status.exit_code if status.exit_code is not None else out.exit_code
    if code is None:
        return "[exit status unknown]", True
    return f"[exit code: {code}]", code != 0


def _result(
    out: ShellOutput, status: ShellExit | None, timeout: float, terminal_id: str | None
) -> ToolOutput:
    text = out.output
    if out.truncated and "truncated ...]" not in text:
        text = "[... earlier output truncated ...]\n" + text
    text = cap_middle(text.rstrip("\n"))
    line, failed = _status_line(status, out, timeout)
    body = f"{text}\n{line}" if text else f"(no output)\n{line}"
    shown = f"{_fenced(text)}\n{line}" if text else line
    if terminal_id is not None:
        display: tuple[ToolDisplay, ...] = (TerminalDisplay(terminal_id, output=shown),)
    else:
        display = (TextDisplay(shown),)
    return ToolOutput(content=body, is_error=failed, display=display)


def _fenced(text: str) -> str:
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}\n{text}\n{fence}"
