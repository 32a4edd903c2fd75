"""`/rewind`: the session's prompts with the files each changed, and going back before one.

Owns the command's grammar, its listing and its two halves:
- `/rewind` lists the prompts of the current branch, newest first, numbered from the oldest
  (1), each with the files its checkpoint holds and what it does not cover (command side
  effects outside a git work tree, files too large to capture). A prompt is a user message
  that started a turn: what the turn committed inside it (tool results, the user's steers,
  hooks' and background tasks' notes: `Message.inside_turn`) belongs to its turn;
- `/rewind N` puts the workspace files back as they were before prompt N and the
  conversation back to just before it; `/rewind N files` and `/rewind N conversation` do one
  half; `force` restores files over conflicts; `/rewind undo` undoes the last rewind.

Invariants:
- Files first: when the files cannot be restored without `force` (a file changed since defect
  changed it — the user's edit — or a stored content is missing), nothing changes, neither
  files nor conversation, and the answer lists the conflicts.
- What defect left in a file is the last state any of the session's checkpoints recorded
  there, a restore's own included: `/rewind 2 files` then `/rewind 1` (or `/rewind undo`)
  finds the file as the first restore left it, which is no conflict.
- A restore records what it overwrites (`restore(recorder=...)`, saved as a checkpoint of its
  own), and the conversation rewind only moves the session's head in the store's tree of
  turns: `/rewind undo` brings both back.
- Restores go through `defect_core/checkpoints/restore.py`: atomic per file, never outside
  the workspace root.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import anyio

from defect_core.checkpoints import Checkpoint, Checkpointer, RestoreReport, restore
from defect_core.model import Message, TextBlock, ToolResultBlock
from defect_core.session.checkpointing import MessageId, SessionCheckpoints
from defect_core.store import AsyncStore, StoredSession

USAGE = (
    "Usage: /rewind — list this session's prompts; /rewind N [files|conversation] [force] — "
    "go back to before prompt N; /rewind undo — undo the last rewind."
)
Half = Literal["both", "files", "conversation"]


@dataclass(frozen=True, slots=True)
class Prompt:
    number: int
    """1 for the oldest prompt of the branch."""
    index: int
    """Its position in the transcript: rewinding before it keeps that many messages."""
    id: MessageId
    text: str


@dataclass(frozen=True, slots=True)
class Request:
    number: int | None = None
    half: Half = "both"
    force: bool = False
    undo: bool = False


def parse(args: str) -> Request | None:
    """The request `args` stands for; None for the listing. `ValueError`: bad words."""
    words = args.lower().split()
    if not words:
        return None
    if words == ["undo"]:
        return Request(undo=True)
    if not words[0].isdigit() or int(words[0]) < 1:
        raise ValueError(USAGE)
    half: Half = "both"
    force = False
    for word in words[1:]:
        if word in ("files", "conversation"):
            half = "files" if word == "files" else "conversation"
        elif word == "force":
            force = True
        else:
            raise ValueError(USAGE)
    return Request(int(words[0]), half, force)


def prompts(transcript: Sequence[Message], ids: Sequence[MessageId]) -> list[Prompt]:
    """The user's prompts on the branch: the user messages that started a turn. Not tool
    results, nor a message marked as committed inside a running turn (`Message.inside_turn`:
    a steer, a hook's or a background task's note). A message stored before the mark existed
    has none, so such a steer or note of an older session still counts as a prompt."""
    out: list[Prompt] = []
    for index, (message, mid) in enumerate(zip(transcript, ids, strict=False)):
        if message.role != "user" or message.inside_turn is not None:
            continue
        if any(isinstance(b, ToolResultBlock) for b in message.content):
            continue
        text = " ".join(b.text for b in message.content if isinstance(b, TextBlock))
        out.append(Prompt(len(out) + 1, index, mid, " ".join(text.split())))
    return out


def of_prompt(checkpoints: Sequence[Checkpoint], prompt: Prompt) -> list[Checkpoint]:
    return [c for c in checkpoints if c.meta.get("prompt") == list(prompt.id)]


def listing(found: Sequence[Prompt], checkpoints: Sequence[Checkpoint]) -> str:
    if not found:
        return "Nothing to rewind yet: this session has no prompts."
    lines = ["Prompts of this session, newest first (/rewind N [files|conversation] [force]):"]
    for prompt in reversed(found):
        text = prompt.text if len(prompt.text) <= 60 else prompt.text[:59] + "…"
        mine = of_prompt(checkpoints, prompt)
        paths = sorted({p for c in mine for p in c.paths()})
        files = ", ".join(paths) if paths else "no files changed"
        lines.append(f'{prompt.number}. "{text}" — {files}')
        notes = sorted({n for c in mine for n in c.notes})
        if any(not c.finished for c in mine):
            notes.append("the prompt did not finish: its files count as conflicts")
        lines.extend(f"   ({note})" for note in notes)
    return "\n".join(lines)


def describe(report: RestoreReport, number: int) -> str:
    lines: list[str] = []
    if report.applied:
        restored = ", ".join(report.restored) or "none needed changing"
        lines.append(f"Files restored to before prompt {number}: {restored}.")
    else:
        lines.append(
            f"Files NOT restored: some changed since defect changed them. Nothing was "
            f"overwritten; /rewind {number} force restores them anyway."
        )
    for note in report.conflicts:
        lines.append(f"- conflict: {note.path}: {note.reason}")
    for note in report.failed:
        lines.append(f"- cannot restore {note.path}: {note.reason}")
    for note in report.uncovered:
        lines.append(f"- not covered: {note.path}: {note.reason}")
    lines.extend(f"- {note}" for note in report.notes)
    return "\n".join(lines)


class Rewinder:
    """One `/rewind` of one session."""

    def __init__(
        self,
        *,
        session_id: str,
        cwd: Path,
        store: AsyncStore | None,
        checkpoints: SessionCheckpoints,
        transcript: Sequence[Message],
        ids: Sequence[MessageId],
        adopt: Callable[[StoredSession], Awaitable[None]],
    ) -> None:
        self._session_id = session_id
        self._cwd = cwd
        self._store = store
        self._checkpoints = checkpoints
        self._prompts = prompts(transcript, ids)
        self._adopt = adopt

    async def answer(self, args: str) -> str:
        try:
            request = parse(args)
        except ValueError as exc:
            return str(exc)
        if self._store is None or self._checkpoints.blobs is None:
            return "This session is not saved, so it has no checkpoints to rewind to."
        found = await self._checkpoints.records()
        if request is None:
            return listing(self._prompts, found)
        if request.undo:
            return await self._undo(found)
        if request.number is None or request.number > len(self._prompts):
            return f"There is no prompt {request.number}: this session has {len(self._prompts)}."
        target = self._prompts[request.number - 1]
        out: list[str] = []
        if request.half in ("both", "files"):
            undone = self._prompts[request.number - 1 :]
            mine = [c for p in undone for c in of_prompt(found, p)]
            newest_first = sorted(mine, key=lambda c: c.created_at, reverse=True)
            report = await self._restore(newest_first, request.force, found)
            out.append(describe(report, request.number))
            if not report.applied:
                if request.half == "both":
                    out.append("The conversation was not rewound either.")
                return "\n".join(out)
        if request.half in ("both", "conversation"):
            await self._store.rewind(self._session_id, target.index)
            await self._adopt(await self._store.load(self._session_id, calls=False))
            out.append(
                f"Conversation rewound to before prompt {request.number} "
                f'("{target.text[:60]}"); the later messages stay stored: /rewind undo '
                "brings them back."
            )
        return "\n".join(out)

    async def _restore(
        self, newest_first: list[Checkpoint], force: bool, found: list[Checkpoint]
    ) -> RestoreReport:
        """Restore `newest_first`; `found` (every checkpoint of the session, the restores'
        own records included) says what defect left in each file last."""
        blobs = self._checkpoints.blobs
        assert blobs is not None
        recorder = Checkpointer(self._cwd, blobs, turn_id=f"rewind-{uuid.uuid4().hex}")

        def run() -> tuple[RestoreReport, Checkpoint]:
            try:
                report = restore(
                    self._cwd, newest_first, blobs, force=force, recorder=recorder, known=found
                )
            finally:
                undo = recorder.finish()
            return report, undo

        with anyio.CancelScope(shield=True):  # a restore, once started, runs to its end
            report, undo = await anyio.to_thread.run_sync(run)
            if report.applied and undo.entries:
                await self._checkpoints.save_rewind(undo)
        return report

    async def _undo(self, found: list[Checkpoint]) -> str:
        assert self._store is not None
        out: list[str] = []
        rewinds = [c for c in found if c.meta.get("rewind")]
        if rewinds:
            last = max(rewinds, key=lambda c: c.created_at)
            report = await self._restore([last], False, found)
            out.append(describe(report, 0).replace("before prompt 0", "as before the rewind"))
            if not report.applied:
                return "\n".join(out)
            await self._store.delete_file_checkpoints(self._session_id, [last.turn_id])
        try:
            await self._store.rewind(self._session_id, None)
        except ValueError:
            out.append("The conversation has no rewind to undo.")
        else:
            await self._adopt(await self._store.load(self._session_id, calls=False))
            out.append("Conversation back where it was before the last rewind.")
        return "\n".join(out)
