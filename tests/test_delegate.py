"""Delegated backends (`fs/*`, `terminal/*`) against a fake client connection."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import anyio
import pytest
from acp import RequestError
from acp.schema import ClientCapabilities, EnvVariable, FileSystemCapabilities

from defect_acp.delegate import (
    AcpFsBackend,
    AcpShellBackend,
    ClientRequestError,
    select_backends,
)
from defect_core.child_env import DEFAULT_POLICY
from defect_core.config.settings import Settings
from defect_core.events import DiffDisplay, TerminalDisplay, ToolDisplay
from defect_core.tools.backends import LocalFsBackend, LocalShellBackend
from defect_core.tools.base import ToolContext, ToolError
from defect_core.tools.bash import BashTool
from defect_core.tools.files import EditFileTool, ReadFileTool, WriteFileTool
from defect_core.tools.workspace import OutsideWorkspace


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class FakeClient:
    """Records every call; serves files from `buffers` (the editor's, unsaved included)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.buffers: dict[str, str] = {}
        self.fail: dict[str, RequestError] = {}
        self.exit_code: int | None = 0
        self.never_exits = False
        self.output = "hello from the terminal\n"

    def _record(self, method: str, kw: dict[str, Any]) -> None:
        self.calls.append((method, kw))
        if method in self.fail:
            raise self.fail[method]

    def methods(self) -> list[str]:
        return [m for m, _ in self.calls]

    async def read_text_file(
        self, session_id: str, path: str, line: int | None = None, limit: int | None = None
    ) -> Any:
        self._record("read_text_file", {"session_id": session_id, "path": path, "line": line,
                                        "limit": limit})  # fmt: skip
        lines = self.buffers[path].splitlines(keepends=True)
        start = (line or 1) - 1
        end = None if limit is None else start + limit
        return SimpleNamespace(content="".join(lines[start:end]))

    async def write_text_file(self, session_id: str, path: str, content: str) -> Any:
        self._record("write_text_file", {"session_id": session_id, "path": path,
                                         "content": content})  # fmt: skip
        self.buffers[path] = content
        return None

    async def create_terminal(
        self,
        session_id: str,
        command: str,
        args: list[str] | None = None,
        env: list[EnvVariable] | None = None,
        cwd: str | None = None,
        output_byte_limit: int | None = None,
    ) -> Any:
        self._record("create_terminal", {"session_id": session_id, "command": command,
                                         "args": args, "env": env, "cwd": cwd,
                                         "output_byte_limit": output_byte_limit})  # fmt: skip
        return SimpleNamespace(terminal_id="term-1")

    async def terminal_output(self, session_id: str, terminal_id: str) -> Any:
        self._record("terminal_output", {"terminal_id": terminal_id})
        status = None if self.never_exits else SimpleNamespace(exit_code=self.exit_code,
                                                               signal=None)  # fmt: skip
        return SimpleNamespace(output=self.output, truncated=False, exit_status=status)

    async def wait_for_terminal_exit(self, session_id: str, terminal_id: str) -> Any:
        self._record("wait_for_terminal_exit", {"terminal_id": terminal_id})
        if self.never_exits:
            await anyio.sleep_forever()
        return SimpleNamespace(exit_code=self.exit_code, signal=None)

    async def kill_terminal(self, session_id: str, terminal_id: str) -> Any:
        self._record("kill_terminal", {"terminal_id": terminal_id})

    async def release_terminal(self, session_id: str, terminal_id: str) -> Any:
        self._record("release_terminal", {"terminal_id": terminal_id})


def make_ctx(root: Path, client: FakeClient, reports: list[Any] | None = None) -> ToolContext:
    async def report(content: tuple[ToolDisplay, ...]) -> None:
        if reports is not None:
            reports.append((content, client.methods()))

    return ToolContext(
        session_id="sess-1",
        cwd=root,
        fs=AcpFsBackend(client, "sess-1"),
        shell=AcpShellBackend(client, "sess-1"),
        report=report,
    )


# --- choosing backends ------------------------------------------------------------------------


def caps(read: bool, write: bool, terminal: bool) -> ClientCapabilities:
    return ClientCapabilities(
        fs=FileSystemCapabilities(read_text_file=read, write_text_file=write), terminal=terminal
    )


@pytest.mark.parametrize(
    ("capabilities", "fs_delegated", "shell_delegated"),
    [
        (caps(True, True, True), True, True),
        (caps(True, False, True), False, True),
        (caps(False, True, False), False, False),
        (caps(True, True, False), True, False),
        (ClientCapabilities(), False, False),
        (None, False, False),
    ],
)
def test_select_backends_delegates_only_what_was_advertised(
    capabilities: ClientCapabilities | None, fs_delegated: bool, shell_delegated: bool
) -> None:
    fs, shell = select_backends(capabilities, FakeClient(), "s")
    assert fs.delegated is fs_delegated
    assert shell.delegated is shell_delegated
    assert isinstance(fs, AcpFsBackend if fs_delegated else LocalFsBackend)
    assert isinstance(shell, AcpShellBackend if shell_delegated else LocalShellBackend)


def test_select_backends_uses_the_given_local_fallbacks() -> None:
    local_shell = LocalShellBackend()
    _, shell = select_backends(caps(True, True, False), FakeClient(), "s", local_shell=local_shell)
    assert shell is local_shell


# --- files through the editor -----------------------------------------------------------------


@pytest.mark.anyio
async def test_read_file_reads_the_editor_buffer_with_a_window(tmp_path: Path) -> None:
    path = tmp_path / "app.py"
    path.write_text("on disk\n")
    client = FakeClient()
    client.buffers[str(path)] = "unsaved 1\nunsaved 2\nunsaved 3\n"
    out = await ReadFileTool().run({"path": "app.py", "offset": 2, "limit": 1}, make_ctx(tmp_path,
                                   client))  # fmt: skip
    assert isinstance(out.content, str)
    assert out.content.splitlines()[0] == "     2\tunsaved 2"
    assert client.calls == [
        ("read_text_file", {"session_id": "sess-1", "path": str(path), "line": 2, "limit": 2})
    ]


@pytest.mark.anyio
async def test_edit_goes_through_the_editor_buffer_not_the_disk(tmp_path: Path) -> None:
    path = tmp_path / "app.py"
    path.write_text("x = 1\n")
    client = FakeClient()
    client.buffers[str(path)] = "x = 1\ny = 2  # unsaved\n"
    out = await EditFileTool().run(
        {"path": "app.py", "old_string": "y = 2", "new_string": "y = 3"}, make_ctx(tmp_path, client)
    )
    assert client.buffers[str(path)] == "x = 1\ny = 3  # unsaved\n"
    assert path.read_text() == "x = 1\n"
    assert client.methods() == ["read_text_file", "write_text_file"]
    assert out.display == (
        DiffDisplay(str(path), "x = 1\ny = 2  # unsaved\n", "x = 1\ny = 3  # unsaved\n"),
    )


@pytest.mark.anyio
async def test_an_unsaved_buffer_change_after_a_read_blocks_the_edit(tmp_path: Path) -> None:
    path = tmp_path / "app.py"
    path.write_text("x = 1\n")
    client = FakeClient()
    client.buffers[str(path)] = "x = 1\n"
    ctx = make_ctx(tmp_path, client)
    await ReadFileTool().run({"path": "app.py"}, ctx)
    client.buffers[str(path)] = "x = 1\n# typed by the user\n"  # the disk did not change
    with pytest.raises(ToolError, match="changed since you last read it"):
        await EditFileTool().run({"path": "app.py", "old_string": "x", "new_string": "z"}, ctx)
    assert "write_text_file" not in client.methods()


@pytest.mark.anyio
async def test_a_client_error_becomes_a_failed_tool_call_with_its_message(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("a\n")
    client = FakeClient()
    client.fail["read_text_file"] = RequestError(-32603, "Internal error", None)
    client.fail["write_text_file"] = RequestError(-32000, "buffer is read-only")
    ctx = make_ctx(tmp_path, client)
    with pytest.raises(ToolError, match=r"cannot read a.txt: the editor refused fs/read_text_file"):
        await ReadFileTool().run({"path": "a.txt"}, ctx)
    with pytest.raises(ToolError, match="buffer is read-only"):
        await WriteFileTool().run({"path": "new.txt", "content": "x"}, ctx)


@pytest.mark.anyio
async def test_acp_fs_backend_maps_request_errors_to_os_errors(tmp_path: Path) -> None:
    client = FakeClient()
    client.fail["read_text_file"] = RequestError(-32002, "Resource not found", {"uri": "x"})
    fs = AcpFsBackend(client, "s")
    with pytest.raises(ClientRequestError) as err:
        await fs.read_text(tmp_path / "x")
    assert isinstance(err.value, OSError)
    assert err.value.code == -32002
    assert "Resource not found" in str(err.value)
    # stat looks at the shared disk.
    (tmp_path / "y").write_text("12345")
    st = await fs.stat(tmp_path / "y")
    assert st is not None and st.size == 5
    assert await fs.stat(tmp_path / "missing") is None


@pytest.mark.anyio
async def test_paths_outside_are_refused_before_the_editor_hears_of_them(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (tmp_path / "secret").write_text("s\n")
    (ws / "link").symlink_to(tmp_path / "secret")
    client = FakeClient()
    ctx = make_ctx(ws, client)
    for args in ({"path": "../secret"}, {"path": str(tmp_path / "secret")}, {"path": "link"}):
        with pytest.raises(OutsideWorkspace):
            await ReadFileTool().run(args, ctx)
        with pytest.raises(OutsideWorkspace):
            await WriteFileTool().run({**args, "content": "x"}, ctx)
    with pytest.raises(OutsideWorkspace):
        await BashTool().run({"command": "ls", "workdir": ".."}, ctx)
    assert client.calls == []


# --- commands in the editor's terminal --------------------------------------------------------


@pytest.mark.anyio
async def test_bash_runs_in_the_editor_terminal_and_reports_it_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in DEFAULT_POLICY.withheld():  # nothing to unset: the line goes as it is
        monkeypatch.delenv(name)
    client = FakeClient()
    reports: list[Any] = []
    out = await BashTool().run({"command": "make test"}, make_ctx(tmp_path, client, reports))
    # The terminal is shown before the command is waited for.
    assert reports == [((TerminalDisplay("term-1"),), ["create_terminal"])]
    method, create = client.calls[0]
    assert method == "create_terminal"
    assert create["command"] == "/bin/sh" and create["args"] == ["-c", "make test"]
    assert create["cwd"] == str(tmp_path)
    assert EnvVariable(name="GIT_PAGER", value="cat") in create["env"]
    assert create["output_byte_limit"] > 0
    assert client.methods() == [
        "create_terminal",
        "wait_for_terminal_exit",
        "terminal_output",
        "release_terminal",
    ]
    assert out.content == "hello from the terminal\n[exit code: 0]"
    # Once it ended, the display also keeps what it printed, for a replay after release.
    shown = "```\nhello from the terminal\n```\n[exit code: 0]"
    assert out.display == (TerminalDisplay("term-1", output=shown),)
    assert not out.is_error


@pytest.mark.anyio
async def test_the_editors_terminal_unsets_the_secrets_defect_withholds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in DEFAULT_POLICY.withheld():
        monkeypatch.delenv(name)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-value")
    monkeypatch.setenv("FOO_TOKEN", "foo-value")
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_passed")
    client = FakeClient()
    policy = Settings(command_env_pass=("GITHUB_TOKEN",)).env_policy()
    ctx = dataclasses.replace(make_ctx(tmp_path, client), env_policy=policy)
    await BashTool().run({"command": "make test"}, ctx)
    _, create = client.calls[0]
    assert create["command"] == "/usr/bin/env"
    assert create["args"] == [
        *("-u", "ANTHROPIC_API_KEY", "-u", "FOO_TOKEN"),
        *("/bin/sh", "-c", "make test"),
    ]
    sent = repr(client.calls)
    assert "sk-ant-test-value" not in sent and "foo-value" not in sent, "names only"


@pytest.mark.anyio
async def test_bash_timeout_in_the_editor_kills_then_releases(tmp_path: Path) -> None:
    client = FakeClient()
    client.never_exits = True
    out = await BashTool().run({"command": "serve", "timeout": 0.2}, make_ctx(tmp_path, client))
    assert out.is_error
    assert isinstance(out.content, str) and "timed out after 0.2 s" in out.content
    assert client.methods() == [
        "create_terminal",
        "wait_for_terminal_exit",
        "kill_terminal",
        "terminal_output",
        "release_terminal",
    ]


@pytest.mark.anyio
async def test_cancelling_bash_kills_and_releases_the_editor_terminal(tmp_path: Path) -> None:
    client = FakeClient()
    client.never_exits = True
    with anyio.move_on_after(0.2) as scope:
        await BashTool().run({"command": "serve"}, make_ctx(tmp_path, client))
    assert scope.cancelled_caught
    assert client.methods()[-2:] == ["kill_terminal", "release_terminal"]


@pytest.mark.anyio
async def test_terminal_errors_become_failed_results(tmp_path: Path) -> None:
    client = FakeClient()
    client.fail["create_terminal"] = RequestError(-32603, "no shell available")
    with pytest.raises(ToolError, match=r"could not start the command: .*no shell available"):
        await BashTool().run({"command": "ls"}, make_ctx(tmp_path, client))

    client = FakeClient()
    client.fail["wait_for_terminal_exit"] = RequestError(-32603, "terminal vanished")
    with pytest.raises(ToolError, match="terminal vanished"):
        await BashTool().run({"command": "ls"}, make_ctx(tmp_path, client))
    # Even then the terminal is released (it had not exited, so it is killed first).
    assert client.methods()[-2:] == ["kill_terminal", "release_terminal"]
