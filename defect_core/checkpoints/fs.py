"""The file door of a turn with checkpoints: every write through it is captured first.

Owns `CheckpointingFs`, an `FsBackend` wrapping the session's own (local, or the editor's):
`write_text` calls `Checkpointer.before_write` before the write and `after_write` after it;
everything else passes through unchanged. Wrapping the door, not the tools, means every tool
that writes through `ctx.fs` — today's and tomorrow's — is covered without knowing it.

Invariants:
- The prior state is captured before the write starts; a capture that fails (unreadable,
  too large) is recorded as uncovered and never stops the write.
- With the local backend, capture, write and post-write hint run in ONE worker-thread hop
  (`LocalFsBackend.write_now`): a second hop per file would cost more than the capture. That
  write replaces the file with a new inode, so the capture only opens the old one
  (`replacing=True`; a failed write makes it read at once), and the hint is the text itself
  (already held by the tool call), not a second encoded copy kept alive until `flush`.
  The write tells the checkpointer its temporary file (`Checkpointer.temporary`) before
  making it, so a command running meanwhile never has it recorded as its own change.
- Through the editor (`delegated`), the capture reads the file on disk (the editor's
  unsaved buffer is not what a restore would put back), and no post-write hint is taken:
  `finish` reads what actually reached the disk.
"""

from __future__ import annotations

from pathlib import Path

import anyio.to_thread

from defect_core.checkpoints.capture import Checkpointer
from defect_core.tools.backends import BinaryReader, FileStat, FsBackend, LocalFsBackend


class CheckpointingFs:
    def __init__(self, inner: FsBackend, checkpointer: Checkpointer) -> None:
        self.inner = inner
        self.checkpointer = checkpointer

    @property
    def delegated(self) -> bool:
        return self.inner.delegated

    async def read_text(self, path: Path, line: int | None = None, limit: int | None = None) -> str:
        return await self.inner.read_text(path, line, limit)

    async def read_bytes(self, path: Path, limit: int | None = None) -> bytes:
        if not isinstance(self.inner, BinaryReader):
            raise OSError(f"{path}: raw bytes cannot be read through this backend")
        return await self.inner.read_bytes(path, limit)

    async def stat(self, path: Path) -> FileStat | None:
        return await self.inner.stat(path)

    async def write_text(self, path: Path, content: str) -> None:
        checkpointer = self.checkpointer
        if isinstance(self.inner, LocalFsBackend):
            local = self.inner
            data = content.encode("utf-8")

            def capture_and_write() -> None:
                rel = checkpointer.before_write(path, replacing=True)
                try:
                    local.write_now(path, data, on_temporary=checkpointer.temporary)
                except BaseException:
                    checkpointer.write_failed(rel)
                    raise
                checkpointer.after_write(path, content, rel=rel)

            await anyio.to_thread.run_sync(capture_and_write)
            return
        await anyio.to_thread.run_sync(checkpointer.before_write, path)
        await self.inner.write_text(path, content)
