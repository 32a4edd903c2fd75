"""The shell door of a turn with checkpoints: what a command changes is captured around it.

Owns `CheckpointingShell`, a `ShellBackend` wrapping the session's own (a local process
group, or the editor's terminal): `create` snapshots the work tree first
(`Checkpointer.before_command`), and `release` — which the `bash` tool calls exactly once per
command, however it ended — captures the prior state of every path the command changed
(`after_command`). Wrapping the door, not the tool, covers every command a tool runs.

Invariants:
- The snapshot is taken before the command starts, and the changes are found after it can no
  longer write (the backend released it: killed first if it was still running).
- A snapshot that fails never stops the command: the checkpoint notes what is not covered.
- Both run on a worker thread (they call `git` and stat the tree), never on the event loop.
"""

from __future__ import annotations

from pathlib import Path

import anyio.to_thread

from defect_core.checkpoints.capture import Checkpointer
from defect_core.checkpoints.gitsnap import WorkTreeSnapshot
from defect_core.child_env import DEFAULT_POLICY, EnvPolicy
from defect_core.tools.backends import ShellBackend, ShellExit, ShellOutput


class CheckpointingShell:
    def __init__(self, inner: ShellBackend, checkpointer: Checkpointer) -> None:
        self.inner = inner
        self.checkpointer = checkpointer
        self._snapshots: dict[str, WorkTreeSnapshot | None] = {}

    @property
    def delegated(self) -> bool:
        return self.inner.delegated

    async def create(
        self,
        command: str,
        cwd: Path,
        env: dict[str, str] | None = None,
        output_limit: int | None = None,
        *,
        policy: EnvPolicy = DEFAULT_POLICY,
    ) -> str:
        snap = await anyio.to_thread.run_sync(self.checkpointer.before_command)
        handle = await self.inner.create(command, cwd, env, output_limit, policy=policy)
        self._snapshots[handle] = snap
        return handle

    async def output(self, handle: str) -> ShellOutput:
        return await self.inner.output(handle)

    async def wait_for_exit(self, handle: str) -> ShellExit:
        return await self.inner.wait_for_exit(handle)

    async def kill(self, handle: str) -> None:
        await self.inner.kill(handle)

    async def release(self, handle: str) -> None:
        try:
            await self.inner.release(handle)
        finally:
            if handle in self._snapshots:
                snap = self._snapshots.pop(handle)
                with anyio.CancelScope(shield=True):
                    await anyio.to_thread.run_sync(self.checkpointer.after_command, snap)
