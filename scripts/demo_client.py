"""`make run`: a full ACP session with defect on the offline model, shown as an editor would.

Spawns `defect acp` (no API key needed) as every client of defect's own does
(`defect_acp.client`: its own process group, ended with it), drives it through the official
ACP SDK's client side (`acp.connect_to_agent`) over real stdio, and prints what an editor
would show: streamed text, thoughts, tool calls with their status, a diff, a permission
question (answered by this script), a plan kept step by step, a subagent's work streamed on its
call, a goal (`/goal`) reached with `goal_done`, a cancel, `/rewind` taking an edit back, and
each turn's stop reason. Exits 0 when
every step behaved; 1 otherwise.

Run it with `make run`, or `python scripts/demo_client.py [--workspace DIR]`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import difflib
import os
import shutil
import sys
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from acp import connect_to_agent
from acp import schema as s
from acp.client.connection import ClientSideConnection

# A script is a client: it may import `defect_acp.client`, the package's public client API,
# and nothing else of defect_acp (docs/layers.md).
from defect_acp.client import agent_command, end_agent, spawn_agent, with_checkout_on_path

BOLD, DIM, GREEN, RED, YELLOW, CYAN, RESET = (
    ("\033[1m", "\033[2m", "\033[32m", "\033[31m", "\033[33m", "\033[36m", "\033[0m")
    if sys.stdout.isatty()
    else ("",) * 7
)


class Editor:
    """What the user sees, printed; answers permission questions like a user would."""

    def __init__(self) -> None:
        self.mode = ""
        self.chunks = 0
        self.first_chunk = asyncio.Event()
        self.titles: dict[str, str] = {}
        self.statuses: dict[str, str] = {}
        self.permission_asked = 0
        self.diffs_shown = 0
        self.usage: tuple[int, int] | None = None
        self.plans: list[list[tuple[str, str]]] = []
        """Each plan shown: (content, status) per entry."""
        self.shown: dict[str, list[str]] = {}
        """The text lines of each call's content, as last received: an update replaces a
        call's content (a subagent's progress is resent whole), and only its new lines are
        printed."""

    def _switch(self, mode: str) -> None:
        if mode != self.mode:
            if self.mode in ("text", "thought"):
                sys.stdout.write(RESET + "\n")
            self.mode = mode

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        kind = update.session_update
        if kind == "agent_message_chunk":
            self._switch("text")
            sys.stdout.write(update.content.text)
            self.chunks += 1
            self.first_chunk.set()
        elif kind == "agent_thought_chunk":
            if self.mode != "thought":
                self._switch("thought")
                sys.stdout.write(f"{DIM}💭 ")
            sys.stdout.write(update.content.text)
        elif kind == "tool_call":
            self._switch("tool")
            self.titles[update.tool_call_id] = update.title
            self.statuses[update.tool_call_id] = update.status or "pending"
            print(f"{CYAN}⏺ [{update.kind}] {update.title}{RESET} {DIM}({update.status}){RESET}")
        elif kind == "tool_call_update":
            self._switch("tool")
            title = self.titles.get(update.tool_call_id, update.tool_call_id)
            if update.status:
                self.statuses[update.tool_call_id] = update.status
                color = {"completed": GREEN, "failed": RED}.get(update.status, DIM)
                print(f"  {color}↳ {title}: {update.status}{RESET}")
            for item in update.content or []:
                self._show_content(item, update.tool_call_id)
        elif kind == "plan":
            self._switch("plan")
            self.plans.append([(e.content, e.status) for e in update.entries])
            marks = {"completed": f"{GREEN}✔", "in_progress": f"{YELLOW}▶", "pending": f"{DIM}○"}
            print(f"{BOLD}Plan{RESET}")
            for e in update.entries:
                print(f"  {marks.get(e.status, '?')} {e.content}{RESET} {DIM}({e.priority}){RESET}")
        elif kind == "session_info_update" and update.title:
            self._switch("info")
            print(f"{DIM}(session title: {update.title}){RESET}")
        elif kind == "current_mode_update":
            self._switch("info")
            print(f"{DIM}(mode: {update.current_mode_id}){RESET}")
        elif kind == "usage_update":
            self.usage = (update.used, update.size)
        elif kind == "available_commands_update":
            self._switch("info")
            names = ", ".join(f"/{c.name}" for c in update.available_commands)
            print(f"{DIM}(commands: {names}){RESET}")

    def _show_content(self, item: Any, call_id: str | None = None) -> None:
        if getattr(item, "type", "") == "diff":
            self.diffs_shown += 1
            old = (item.old_text or "").splitlines()
            new = item.new_text.splitlines()
            print(f"  {BOLD}diff {item.path}{RESET}")
            for line in difflib.unified_diff(old, new, lineterm="", n=1):
                if line.startswith(("---", "+++")):
                    continue
                color = GREEN if line.startswith("+") else RED if line.startswith("-") else DIM
                print(f"    {color}{line}{RESET}")
        elif getattr(item, "type", "") == "content" and hasattr(item.content, "text"):
            lines = item.content.text.strip().splitlines()
            if call_id is not None:
                before, self.shown[call_id] = self.shown.get(call_id, []), lines
                matcher = difflib.SequenceMatcher(a=before, b=lines, autojunk=False)
                lines = [
                    line
                    for tag, _, _, start, end in matcher.get_opcodes()
                    if tag in ("insert", "replace")
                    for line in lines[start:end]
                ]
            for line in lines[:6]:
                print(f"    {DIM}{line}{RESET}")
            if len(lines) > 6:
                print(f"    {DIM}… ({len(lines) - 6} more lines){RESET}")

    async def request_permission(
        self, options: list[Any], session_id: str, tool_call: Any, **kwargs: Any
    ) -> s.RequestPermissionResponse:
        self._switch("tool")
        self.permission_asked += 1
        choices = " / ".join(o.name for o in options)
        print(f"{YELLOW}? Allow “{tool_call.title}”?  [{choices}]{RESET}")
        for item in tool_call.content or []:
            self._show_content(item)
        chosen = next(o for o in options if o.kind == "allow_once")
        print(f"{YELLOW}  → {chosen.name} (answered by the demo){RESET}")
        return s.RequestPermissionResponse(
            outcome=s.AllowedOutcome(outcome="selected", option_id=chosen.option_id)
        )

    def end(self) -> None:
        self._switch("")


@contextlib.asynccontextmanager
async def connected(
    editor: Editor, workspace: Path, env: dict[str, str]
) -> AsyncIterator[ClientSideConnection]:
    """`defect acp` in `workspace`, spoken to as `editor`; ended (with its group) on exit."""
    process = await spawn_agent(agent_command(), env=env, cwd=workspace)
    assert process.stdin is not None and process.stdout is not None
    conn = connect_to_agent(editor, process.stdin, process.stdout)  # type: ignore[arg-type]
    try:
        yield conn
    finally:
        with contextlib.suppress(Exception):
            await conn.close()
        await end_agent(process, graceful=True)


DEMO_CONFIG = """\
# The demo's own configuration (never the user's): three providers in the model picker.
provider = "scripted"                 # the default: the offline model

[providers.lab]                       # a second offline model, under its own name
kind = "scripted"
models = ["offline-lab"]

[providers.claude]                    # the Anthropic API, configured but offline here: its
kind = "anthropic"                    # key's variable is never set, so its configured
api_key_env = "DEFECT_DEMO_NO_KEY"    # models stay listed and nothing is asked of the network
models = ["claude-sonnet-5-5", "claude-opus-5-5"]
"""


def write_demo_config(config_home: Path) -> None:
    (config_home / "defect").mkdir(parents=True, exist_ok=True)
    (config_home / "defect" / "config.toml").write_text(DEMO_CONFIG)


def show_models(options: Any) -> int:
    """Print the model picker as an editor would (grouped by provider); the number of groups."""
    for option in options or []:
        option = getattr(option, "root", option)
        if option.id != "model":
            continue
        print(f"{DIM}model picker (current: {option.current_value}):{RESET}")
        entries = [getattr(item, "root", item) for item in option.options]
        grouped = [e for e in entries if hasattr(e, "group")]
        for group in grouped:
            print(f"{DIM}  {group.name}: {', '.join(o.value for o in group.options)}{RESET}")
        return len(grouped)
    return 0


def make_workspace(root: Path) -> None:
    (root / "src").mkdir(parents=True, exist_ok=True)
    (root / "README.md").write_text("# Tiny project\n\nA calculator used by the defect demo.\n")
    (root / "src" / "calc.py").write_text("def add(a: int, b: int) -> int:\n    return a + b\n")


async def run(workspace: Path, state_dir: Path) -> int:
    editor = Editor()
    env = dict(os.environ)
    env.pop("DEFECT_SCRIPT", None)
    env.pop("DEFECT_DEMO_NO_KEY", None)
    env["DEFECT_PROVIDER"] = "scripted"
    env["XDG_CONFIG_HOME"] = str(state_dir / "config")
    write_demo_config(state_dir / "config")
    # The demo's sessions live beside the workspace, never in it: the listing the model
    # shows must be the project's files only.
    env.setdefault("DEFECT_STATE_DIR", str(state_dir))
    env = with_checkout_on_path(env)
    failures: list[str] = []

    def check(ok: bool, what: str) -> None:
        if not ok:
            failures.append(what)
            print(f"{RED}✗ {what}{RESET}")

    async with connected(editor, workspace, env) as conn:
        init = await conn.initialize(
            protocol_version=1,
            client_capabilities=s.ClientCapabilities(),
            client_info=s.Implementation(name="defect-demo", version="1"),
        )
        info = init.agent_info
        print(
            f"{BOLD}Connected to {info.name if info else '?'} {info.version if info else ''}"
            f" (ACP v{init.protocol_version}){RESET}"
        )
        session = await conn.new_session(cwd=str(workspace), mcp_servers=[])
        sid = session.session_id
        print(
            f"{DIM}session {sid} in {workspace}; mode: "
            f"{session.modes.current_mode_id if session.modes else '?'}{RESET}"
        )
        check(show_models(session.config_options) >= 2, "the model picker lists providers")

        async def prompt(text: str) -> str:
            print(f"\n{BOLD}> {text}{RESET}")
            response = await conn.prompt(
                session_id=sid, prompt=[s.TextContentBlock(type="text", text=text)]
            )
            editor.end()
            meter = ""
            if editor.usage:
                used, size = editor.usage
                meter = f", context {used:,}/{size:,} tokens"
            print(f"{DIM}[stop reason: {response.stop_reason}{meter}]{RESET}")
            return str(response.stop_reason)

        check(await prompt("What is in this project?") == "end_turn", "look-around turn")
        asked_before = editor.permission_asked
        stop = await prompt("Write a note: remember to add tests for calc.add")
        check(stop == "end_turn", "edit turn")
        check(editor.permission_asked > asked_before, "a permission question was asked")
        check(editor.diffs_shown > 0, "the edit showed a diff")
        check((workspace / "NOTES.md").exists(), "NOTES.md was written")

        check(await prompt("Make a plan, then review this project") == "end_turn", "plan turn")
        check(len(editor.plans) >= 2, "the plan was shown and updated as the work went on")
        check(
            bool(editor.plans) and all(st == "completed" for _, st in editor.plans[-1]),
            "every step of the plan ended completed",
        )

        check(await prompt("Ask a subagent to survey this workspace") == "end_turn", "subagent")
        check(
            any(
                title.startswith("general:") and editor.statuses.get(call) == "completed"
                for call, title in editor.titles.items()
            ),
            "the subagent's call streamed its progress and completed",
        )

        check(await prompt("/goal survey this workspace") == "end_turn", "goal turn")
        check(
            any(
                title == "Goal reached" and editor.statuses.get(call) == "completed"
                for call, title in editor.titles.items()
            ),
            "the goal ended with the model's goal_done call",
        )

        print(f"\n{BOLD}> Count slowly to thirty{RESET}  {DIM}(the demo cancels it){RESET}")
        editor.first_chunk.clear()
        task = asyncio.create_task(
            conn.prompt(
                session_id=sid,
                prompt=[s.TextContentBlock(type="text", text="Count slowly to thirty")],
            )
        )
        await editor.first_chunk.wait()
        await asyncio.sleep(0.6)
        await conn.cancel(session_id=sid)
        response = await task
        editor.end()
        print(f"{DIM}[stop reason: {response.stop_reason}]{RESET}")
        check(response.stop_reason == "cancelled", "the cancel stopped the turn")

        check(await prompt("hello again") == "end_turn", "the session works after a cancel")

        print(f"\n{BOLD}(the editor picks lab/offline-lab: another provider){RESET}")
        switched = await conn.set_config_option(
            session_id=sid, config_id="model", value="lab/offline-lab"
        )
        show_models(switched.config_options)
        check(await prompt("hello from the lab") == "end_turn", "a turn on the other provider")
        check(await prompt("/context") == "end_turn", "/context answers without the model")

        check(await prompt("/rewind") == "end_turn", "/rewind lists the prompts and their files")
        check(await prompt("/rewind 2 files") == "end_turn", "/rewind restores prompt 2's files")
        check(not (workspace / "NOTES.md").exists(), "the rewind took NOTES.md back out")

    if failures:
        print(f"\n{RED}Demo finished with problems: {', '.join(failures)}{RESET}")
        return 1
    print(f"\n{GREEN}Demo finished: a full offline ACP session.{RESET}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workspace", type=Path, help="use this directory (default: a temp dir)")
    args = parser.parse_args()
    state = Path(tempfile.mkdtemp(prefix="defect-demo-state-"))
    try:
        if args.workspace:
            args.workspace.mkdir(parents=True, exist_ok=True)
            make_workspace(args.workspace)
            return asyncio.run(run(args.workspace.resolve(), state))
        root = Path(tempfile.mkdtemp(prefix="defect-demo-"))
        try:
            make_workspace(root)
            return asyncio.run(run(root, state))
        finally:
            with contextlib.suppress(OSError):
                shutil.rmtree(root)
    finally:
        with contextlib.suppress(OSError):
            shutil.rmtree(state)


if __name__ == "__main__":
    raise SystemExit(main())
