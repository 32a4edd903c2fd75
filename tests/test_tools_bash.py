"""The bash tool and the local shell backend: exit codes, caps, timeouts, cancellation."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from defect_core.events import TextDisplay
from defect_core.tools.backends import LocalFsBackend, LocalShellBackend
from defect_core.tools.base import ToolContext, ToolError
from defect_core.tools.bash import MAX_OUTPUT_CHARS, BashTool, cap_middle
from defect_core.tools.workspace import OutsideWorkspace

BASH = BashTool()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def make_ctx(root: Path, shell: Any = None) -> ToolContext:
    return ToolContext(
        session_id="s1",
        cwd=root,
        fs=LocalFsBackend(),
        shell=shell if shell is not None else LocalShellBackend(kill_grace=0.5),
    )


def alive(pid: int) -> bool:
    """Running, as opposed to gone or a zombie nobody reaped yet."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")


async def wait_gone(pids: list[int], within: float = 3.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not any(alive(p) for p in pids):
            return True
        await anyio.sleep(0.02)
    return False


async def read_pids(path: Path, count: int) -> list[int]:
    for _ in range(200):
        if path.exists():
            pids = [int(x) for x in path.read_text().split()]
            if len(pids) >= count:
                return pids
        await anyio.sleep(0.01)
    raise AssertionError("the command did not report its children")


SPAWN = "sleep 1000 & echo $! >> pids; sleep 1000 & echo $! >> pids; echo $$ >> pids; wait"


@pytest.mark.anyio
async def test_output_and_exit_code(tmp_path: Path) -> None:
    out = await BASH.run({"command": "echo hello; echo oops >&2"}, make_ctx(tmp_path))
    assert out.content == "hello\noops\n[exit code: 0]"
    assert not out.is_error
    assert out.display == (TextDisplay("```\nhello\noops\n```\n[exit code: 0]"),)


@pytest.mark.anyio
async def test_non_zero_exit_is_a_failed_result(tmp_path: Path) -> None:
    out = await BASH.run({"command": "echo no; exit 3"}, make_ctx(tmp_path))
    assert out.content == "no\n[exit code: 3]"
    assert out.is_error
    out = await BASH.run({"command": "true"}, make_ctx(tmp_path))
    assert out.content == "(no output)\n[exit code: 0]"


@pytest.mark.anyio
async def test_runs_in_the_workspace_or_a_workdir_inside_it(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    out = await BASH.run({"command": "pwd"}, make_ctx(tmp_path))
    assert out.content == f"{tmp_path}\n[exit code: 0]"
    out = await BASH.run({"command": "pwd", "workdir": "sub"}, make_ctx(tmp_path))
    assert out.content == f"{tmp_path / 'sub'}\n[exit code: 0]"
    with pytest.raises(ToolError, match="working directory not found: nope"):
        await BASH.run({"command": "pwd", "workdir": "nope"}, make_ctx(tmp_path))


class RecordingShell(LocalShellBackend):
    def __init__(self) -> None:
        super().__init__(kill_grace=0.5)
        self.created: list[str] = []

    async def create(self, command: str, cwd: Path, *args: Any, **kw: Any) -> str:
        self.created.append(command)
        return await super().create(command, cwd, *args, **kw)


@pytest.mark.anyio
@pytest.mark.parametrize("workdir", ["..", "/", "link"])
async def test_workdir_outside_is_refused_before_the_shell_is_called(
    tmp_path: Path, workdir: str
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "link").symlink_to(tmp_path)
    shell = RecordingShell()
    with pytest.raises(OutsideWorkspace):
        await BASH.run({"command": "touch escaped", "workdir": workdir}, make_ctx(ws, shell))
    assert shell.created == []


@pytest.mark.anyio
async def test_long_output_is_capped_with_a_marker_keeping_head_and_tail(tmp_path: Path) -> None:
    command = "echo START; head -c 200000 /dev/zero | tr '\\0' 'a'; echo; echo END"
    out = await BASH.run({"command": command}, make_ctx(tmp_path))
    assert isinstance(out.content, str)
    assert out.content.startswith("START\n")
    assert out.content.endswith("END\n[exit code: 0]")
    assert out.content.count("truncated ...]") == 1
    assert "bytes truncated ...]" in out.content
    assert len(out.content) <= MAX_OUTPUT_CHARS + 200


def test_cap_middle_keeps_head_and_tail() -> None:
    text = "h" * 50 + "m" * 100 + "t" * 50
    capped = cap_middle(text, 100)
    assert capped.startswith("h" * 50) and capped.endswith("t" * 50)
    assert "[... 100 characters truncated ...]" in capped
    assert cap_middle("short", 100) == "short"


@pytest.mark.anyio
async def test_timeout_kills_the_whole_process_group(tmp_path: Path) -> None:
    started = time.monotonic()
    out = await BASH.run({"command": SPAWN, "timeout": 0.5}, make_ctx(tmp_path))
    assert time.monotonic() - started < 5
    assert out.is_error
    assert isinstance(out.content, str) and "timed out after 0.5 s" in out.content
    pids = await read_pids(tmp_path / "pids", 3)
    assert await wait_gone(pids), [p for p in pids if alive(p)]


@pytest.mark.anyio
async def test_cancelling_the_tool_kills_the_whole_process_group(tmp_path: Path) -> None:
    ctx = make_ctx(tmp_path)
    with anyio.move_on_after(0.5) as scope:
        await BASH.run({"command": SPAWN}, ctx)
    assert scope.cancelled_caught
    pids = await read_pids(tmp_path / "pids", 3)
    assert await wait_gone(pids), [p for p in pids if alive(p)]


@pytest.mark.anyio
async def test_a_child_ignoring_sigterm_gets_sigkill(tmp_path: Path) -> None:
    command = "sh -c 'trap \"\" TERM; echo $$ > pid; while :; do sleep 0.05; done' & wait"
    out = await BASH.run({"command": command, "timeout": 0.5}, make_ctx(tmp_path))
    assert out.is_error
    pids = await read_pids(tmp_path / "pid", 1)
    assert await wait_gone(pids)


@pytest.mark.anyio
async def test_background_children_do_not_outlive_the_command(tmp_path: Path) -> None:
    command = "sleep 1000 & echo $! > pid; echo done"
    out = await BASH.run({"command": command, "timeout": 5}, make_ctx(tmp_path))
    assert out.content == "done\n[exit code: 0]"
    pids = await read_pids(tmp_path / "pid", 1)
    assert await wait_gone(pids)


@pytest.mark.anyio
async def test_local_shell_release_is_idempotent_and_handles_are_checked(tmp_path: Path) -> None:
    shell = LocalShellBackend()
    handle = await shell.create("echo hi", tmp_path)
    assert (await shell.wait_for_exit(handle)).exit_code == 0
    output = await shell.output(handle)
    assert (output.output, output.exit_code, output.exited) == ("hi\n", 0, True)
    await shell.release(handle)
    await shell.release(handle)
    with pytest.raises(OSError, match="no such command handle"):
        await shell.output(handle)


@pytest.mark.anyio
async def test_killed_by_signal_is_reported(tmp_path: Path) -> None:
    out = await BASH.run({"command": "kill -9 $$"}, make_ctx(tmp_path))
    assert out.content == "(no output)\n[killed by signal SIGKILL]"
    assert out.is_error


@pytest.mark.anyio
async def test_argument_errors(tmp_path: Path) -> None:
    ctx = make_ctx(tmp_path)
    with pytest.raises(ToolError, match="invalid arguments for bash: command: Field required"):
        await BASH.run({}, ctx)
    with pytest.raises(ToolError, match="timeout: Input should be less than or equal to 600"):
        await BASH.run({"command": "true", "timeout": 601}, ctx)
    with pytest.raises(ToolError, match="command: String should have at least 1 character"):
        await BASH.run({"command": ""}, ctx)


def test_describe_shows_the_command(tmp_path: Path) -> None:
    ctx = make_ctx(tmp_path)
    view = BASH.describe({"command": "pytest -q tests/"}, ctx)
    assert (view.title, view.kind) == ("pytest -q tests/", "execute")
    assert BASH.describe({"command": "ls", "workdir": "src"}, ctx).title == "ls (in src)"
    assert BASH.safety.value == "mutating"
