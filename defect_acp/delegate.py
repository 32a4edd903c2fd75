"""Backends that delegate files and commands to the editor: `fs/*` and `terminal/*`.

Owns `AcpFsBackend`, `AcpShellBackend`, the small `ClientConnection` protocol they call
(an `acp.AgentSideConnection` satisfies it; tests pass a fake), and `select_backends`, which
picks delegated or local backends from what the client advertised.

Invariants:
- A client method is called only if the client advertised it: delegated fs only when it
  offers *both* `fs.readTextFile` and `fs.writeTextFile` (a half-delegated file system
  would read the editor's buffer and write the disk, or the reverse); delegated commands only
  with `terminal`. Otherwise the local backends.
- An error the client answers with (`acp.RequestError`) becomes a `ClientRequestError`, an
  `OSError` carrying the client's one-line message, which the tools turn into a failed
  result the model can read. It never escapes as a protocol error.
- The paths sent are the absolute paths the tools resolved and bounded (`tools.workspace`):
  this module adds no access of its own.

Why delegate at all: `fs/read_text_file` returns the editor's buffer, unsaved changes
included, and `fs/write_text_file` lands edits in it (undo, formatting, no "file changed on
disk" prompt); a terminal shows the command live in the editor. The delegated fs has no
stat: the editor and the agent share the machine, so `stat` looks at the disk.

The command line goes to `terminal/create` as `command: SHELL, args: ["-c", LINE]` (SHELL:
the `terminal_shell` setting, `/bin/sh` by default). Zed, acpx and the Node SDK exec `command`
with `args` as its argv and no shell of their own, so a whole line in `command` would be one
program name (`spawn "echo hello world" ENOENT`); through `-c`, pipes, `&&` and quoting work
on every client.

The editor's terminal runs with the editor's environment, not defect's, and ACP's `env` field
can only add variables. The editor usually started defect with the environment it has, so the
secrets defect withholds from its own commands (`defect_core/child_env.py`: the provider
credentials, secret-looking names) are likely there too: when defect's environment holds any,
the line is run as `/usr/bin/env -u NAME … SHELL -c LINE` (GNU, BSD and busybox `env` all
take `-u`), which removes them whether the editor's environment has them or not. Only names
are sent, never values.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from acp import RequestError
from acp.schema import ClientCapabilities, EnvVariable

from defect_core.session.protocol import (
    DEFAULT_POLICY,
    EnvPolicy,
    FileStat,
    FsBackend,
    LocalFsBackend,
    LocalShellBackend,
    ShellBackend,
    ShellExit,
    ShellOutput,
    local_stat,
)

# --- what we need of the client connection ----------------------------------------------------


class _ReadTextFile(Protocol):
    @property
    def content(self) -> str: ...


class _CreatedTerminal(Protocol):
    @property
    def terminal_id(self) -> str: ...


class _ExitStatus(Protocol):
    @property
    def exit_code(self) -> int | None: ...

    @property
    def signal(self) -> str | None: ...


class _TerminalOutput(Protocol):
    @property
    def output(self) -> str: ...

    @property
    def truncated(self) -> bool: ...

    @property
    def exit_status(self) -> _ExitStatus | None: ...


class ClientConnection(Protocol):
    """The client-side methods the delegated backends call (`acp.AgentSideConnection`)."""

    async def read_text_file(
        self, session_id: str, path: str, line: int | None = None, limit: int | None = None
    ) -> _ReadTextFile: ...

    async def write_text_file(self, session_id: str, path: str, content: str) -> Any: ...

    async def create_terminal(
        self,
        session_id: str,
        command: str,
        args: list[str] | None = None,
        env: list[EnvVariable] | None = None,
        cwd: str | None = None,
        output_byte_limit: int | None = None,
    ) -> _CreatedTerminal: ...

    async def terminal_output(self, session_id: str, terminal_id: str) -> _TerminalOutput: ...

    async def wait_for_terminal_exit(self, session_id: str, terminal_id: str) -> _ExitStatus: ...

    async def kill_terminal(self, session_id: str, terminal_id: str) -> Any: ...

    async def release_terminal(self, session_id: str, terminal_id: str) -> Any: ...


class ClientRequestError(OSError):
    """The editor answered a delegated call with an error."""

    def __init__(self, method: str, error: RequestError) -> None:
        message = " ".join(str(error).split()) or "no message"
        super().__init__(f"the editor refused {method}: {message} (code {error.code})")
        self.method = method
        self.code = error.code


# --- files ------------------------------------------------------------------------------------


class AcpFsBackend:
    """Reads and writes through the editor (`fs/read_text_file`, `fs/write_text_file`)."""

    def __init__(self, conn: ClientConnection, session_id: str, shell: str = "/bin/sh") -> None:
        self._conn = conn
        self._session_id = session_id
        self._shell = shell

    @property
    def delegated(self) -> bool:
        return True

    async def read_text(self, path: Path, line: int | None = None, limit: int | None = None) -> str:
        try:
            response = await self._conn.read_text_file(
                session_id=self._session_id, path=str(path), line=line, limit=limit
            )
        except RequestError as exc:
            raise ClientRequestError("fs/read_text_file", exc) from None
        return response.content

    async def write_text(self, path: Path, content: str) -> None:
        try:
            await self._conn.write_text_file(
                session_id=self._session_id, path=str(path), content=content
            )
        except RequestError as exc:
            raise ClientRequestError("fs/write_text_file", exc) from None

    async def stat(self, path: Path) -> FileStat | None:
        return local_stat(path)


# --- commands ---------------------------------------------------------------------------------


class AcpShellBackend:
    """Commands in the editor's terminal (`terminal/*`); the handle is the terminal id."""

    def __init__(self, conn: ClientConnection, session_id: str, shell: str = "/bin/sh") -> None:
        self._conn = conn
        self._session_id = session_id
        self._shell = shell

    @property
    def delegated(self) -> bool:
        return True

    async def create(
        self,
        command: str,
        cwd: Path,
        env: dict[str, str] | None = None,
        output_limit: int | None = None,
        *,
        policy: EnvPolicy = DEFAULT_POLICY,
    ) -> str:
        program, args = terminal_command(self._shell, command, policy.withheld())
        try:
            created = await self._conn.create_terminal(
                session_id=self._session_id,
                command=program,
                args=args,
                env=[EnvVariable(name=k, value=v) for k, v in (env or {}).items()],
                cwd=str(cwd),
                output_byte_limit=output_limit,
            )
        except RequestError as exc:
            raise ClientRequestError("terminal/create", exc) from None
        return created.terminal_id

    async def output(self, handle: str) -> ShellOutput:
        try:
            out = await self._conn.terminal_output(session_id=self._session_id, terminal_id=handle)
        except RequestError as exc:
            raise ClientRequestError("terminal/output", exc) from None
        status = out.exit_status
        return ShellOutput(
            output=out.output,
            truncated=bool(out.truncated),
            exit_code=status.exit_code if status else None,
            signal=status.signal if status else None,
            exited=status is not None,
        )

    async def wait_for_exit(self, handle: str) -> ShellExit:
        try:
            status = await self._conn.wait_for_terminal_exit(
                session_id=self._session_id, terminal_id=handle
            )
        except RequestError as exc:
            raise ClientRequestError("terminal/wait_for_exit", exc) from None
        return ShellExit(exit_code=status.exit_code, signal=status.signal)

    async def kill(self, handle: str) -> None:
        try:
            await self._conn.kill_terminal(session_id=self._session_id, terminal_id=handle)
        except RequestError as exc:
            raise ClientRequestError("terminal/kill", exc) from None

    async def release(self, handle: str) -> None:
        try:
            await self._conn.release_terminal(session_id=self._session_id, terminal_id=handle)
        except RequestError as exc:
            raise ClientRequestError("terminal/release", exc) from None


ENV_PROGRAM = "/usr/bin/env"
"""What unsets the withheld variables in front of the editor's shell (see the module)."""


def terminal_command(shell: str, line: str, withheld: Sequence[str]) -> tuple[str, list[str]]:
    """`terminal/create`'s `command` and `args` for `line`: `SHELL -c LINE`, behind
    `/usr/bin/env -u NAME …` when there are variables to withhold."""
    if not withheld:
        return shell, ["-c", line]
    unset = [part for name in withheld for part in ("-u", name)]
    return ENV_PROGRAM, [*unset, shell, "-c", line]


# --- choosing ---------------------------------------------------------------------------------


def select_backends(
    client_capabilities: ClientCapabilities | None,
    conn: ClientConnection,
    session_id: str,
    *,
    local_fs: FsBackend | None = None,
    local_shell: ShellBackend | None = None,
    terminal_shell: str = "/bin/sh",
) -> tuple[FsBackend, ShellBackend]:
    """The session's (fs, shell): delegated where the client advertised it, else local.

    `local_fs` / `local_shell` are the fallbacks (fresh local backends when None), so a
    caller can share one local shell across sessions.
    """
    caps = client_capabilities
    fs_caps = caps.fs if caps is not None else None
    fs: FsBackend
    if fs_caps is not None and fs_caps.read_text_file and fs_caps.write_text_file:
        fs = AcpFsBackend(conn, session_id)
    else:
        fs = local_fs or LocalFsBackend()
    shell: ShellBackend
    if caps is not None and caps.terminal:
        shell = AcpShellBackend(conn, session_id, terminal_shell)
    else:
        shell = local_shell or LocalShellBackend()
    return fs, shell
