"""Forks: a new session that starts from another one's history, then goes its own way.

Owns what a fork is made of and the `/fork` command:
- `fork_stored` writes the fork into the store: its own id, the title "<origin's title>
  (fork)", a copy of the origin's mode, `(provider, model)`, reasoning effort and "always"
  answers, and the origin's branch — whole, or up to before a prompt — shared with the origin,
  not copied (`defect_core/store/tree.py`, which also gives the fork its own copy of the
  replay state, the plan and the file checkpoints of the prompts it shares; a fork up to
  before a prompt gets the plan its branch ended with);
- `answer_fork` answers `/fork` and `/fork N` (the history up to before prompt N, as
  `/rewind N conversation` would leave it) with the new session's id and how to open it:
  for clients without `session/fork`, a fork is one `session/load` away (and listed by
  `session/list`). ACP's `session/fork` is `DefaultAgentCore.fork_session`, which opens it.

Invariants:
- A fork is one store transaction (`SqliteStore.fork`): after a kill it exists whole or not
  at all, and the origin is never written by it.
- From then on the two are independent: each appends below its own head, loads, lists,
  resumes, rewinds and deletes on its own; deleting the origin keeps the fork whole (the store
  keeps the shared messages while a fork needs them).
- Without a store there is nothing to fork into: the answer says so, nothing changes.

Why a module of its own: a fork makes a session where a rewind moves one; they share only
the numbering of prompts (`rewind.prompts`), and `state.py` has no room to spare.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Sequence
from pathlib import Path

from defect_core.model import Message
from defect_core.session.checkpointing import MessageId
from defect_core.session.plan import plan_of, plan_to_json
from defect_core.session.rewind import prompts
from defect_core.session.steering import STEERS_KEY
from defect_core.store import AsyncStore, SessionRecord, now_iso

USAGE = (
    "Usage: /fork — a new session with this conversation so far; /fork N — with the "
    "conversation up to before prompt N (/rewind lists the prompts)."
)


def new_fork_id() -> str:
    """A fresh session id, shaped like the ones `session/new` gives."""
    return f"sess_{uuid.uuid4().hex}"


def fork_title(title: str | None) -> str | None:
    """The fork's title: the origin's, marked; an untitled origin's fork names itself later
    (from its first prompt, as any session does)."""
    return f"{title} (fork)" if title else None


async def fork_stored(
    store: AsyncStore,
    origin_id: str,
    fork_id: str,
    *,
    cwd: Path | None = None,
    keep: int | None = None,
) -> SessionRecord:
    """Store `fork_id` as a fork of `origin_id` (its whole branch, or its first `keep`
    messages) working in `cwd` (default: the origin's); the fork's record.
    `SessionNotFound` for an unknown origin, `ValueError` for a `keep` past the branch."""
    origin = (await store.load(origin_id, calls=False)).record
    now = now_iso()
    record = dataclasses.replace(
        origin,
        id=fork_id,
        cwd=str(cwd) if cwd is not None else origin.cwd,
        title=fork_title(origin.title),
        created_at=now,
        updated_at=now,
        # Steers still waiting belong to the origin's running turn, not to the fork.
        config={k: v for k, v in origin.config.items() if k != STEERS_KEY},
        permissions=dict(origin.permissions),
        mcp_servers=list(origin.mcp_servers),
    )
    await store.fork(origin_id, record, keep)
    return record


async def answer_fork(
    args: str,
    session_id: str,
    store: AsyncStore | None,
    transcript: Sequence[Message],
    ids: Sequence[MessageId],
) -> str:
    """What `/fork [N]` of the session `session_id` answers (after making the fork)."""
    words = args.split()
    if len(words) > 1 or (words and (not words[0].isdigit() or int(words[0]) < 1)):
        return USAGE
    if store is None:
        return "This session is not saved, so it cannot be forked: a fork lives in the store."
    keep: int | None = None
    what = f"this conversation so far ({len(transcript)} messages)"
    if words:
        found, number = prompts(transcript, ids), int(words[0])
        if number > len(found):
            return f"There is no prompt {number}: this session has {len(found)}."
        keep = found[number - 1].index
        what = f'the conversation up to before prompt {number} ("{found[number - 1].text[:60]}")'
    fork_id = new_fork_id()
    record = await fork_stored(store, session_id, fork_id, keep=keep)
    if keep is not None and (plan := plan_of(transcript[:keep], fork_id)):
        await store.save_plan(fork_id, plan_to_json(plan))  # that branch's plan
    title = f' "{record.title}"' if record.title else ""
    return (
        f"Forked {what} into a new session{title}: {fork_id}\n"
        "This session is unchanged. Open the fork from your editor's session list, or with "
        f'session/load {{"sessionId": "{fork_id}", "cwd": "{record.cwd}"}}; each goes on, '
        "is resumed and deleted on its own."
    )
