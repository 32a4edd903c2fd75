"""Steering: what the user writes while a turn runs, kept until the turn's next safe point.

Owns `SessionSteers`, one per session: the steers waiting for the running turn (its
`turn.deps.SteerInbox`), their stored copy, and whether a turn takes steers at all. A steer
reaches it through `Session.steering.offer` (the ACP bridge's `_session/steering`, the lines
`defect exec --input-format stream-json` reads after the first); `docs/editors.md` says what
the user sees.

Invariants:
- A steer is accepted only while a turn takes steers (`offer` answers False otherwise: the
  caller runs it as a prompt of its own), and the running turn never ends while one waits
  (`close`): a steer racing the end of a turn lands in exactly one of the two, because the
  check and the closing are one step with no await between them.
- An accepted steer is stored before `offer` returns: the steers waiting are kept in the
  session's record (`config["steers"]`, the messages as JSON), so a process killed right
  after the acknowledgement loses nothing (`settle` commits them when the session is loaded
  again). Without a store they are kept in memory only, like the rest of such a session.
- A delivered steer is an ordinary user message of the history, committed at the next safe
  point (`turn/runner.py`): after the results of the calls the model asked for, before the
  next request. The stored history stays the truth; there is no second kind of message: a
  steer committed as a message of its own is only marked as such (`Message.inside_turn`), so
  `/rewind` counts it as part of the turn it came in, not as a prompt.
- A steer is never dropped: one left waiting when a turn ends otherwise (cancelled, failed,
  stopped by a limit) is committed as the user's message when the turn ends (`end`).
- With `steering.interrupt_tools`, a steer cancels the tool calls running then (or about to
  run, when it came while the model was asking for them), so the model reads the message at
  once (each such call gets its result and a final status as any cancelled call does, with
  what it had printed: `turn/call_steps.py`).

Why apart from `state.py`: the session's turn rule and its store writes are its own, and
this is the one part that is written to from outside a turn while the turn runs.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

import anyio

from defect_core.events import SteerReceived
from defect_core.log import get_logger
from defect_core.model import ContentBlock, Message, messages_from_json, messages_to_json
from defect_core.store import AsyncStore

log = get_logger("defect.agent")

STEERS_KEY = "steers"
"""The key of the session record's `config` that holds the steers not yet delivered."""

Commit = Callable[[Message], Awaitable[None]]
Publish = Callable[[SteerReceived], Awaitable[None]]


class SessionSteers:
    """The steers of one session (`turn.deps.SteerInbox` for its running turn)."""

    def __init__(
        self,
        session_id: str,
        store: AsyncStore | None,
        publish: Publish,
        commit: Commit,
        config: Callable[[], dict[str, str]],
        stored: dict[str, str] | None = None,
        *,
        interrupt_tools: bool = False,
    ) -> None:
        self._id = session_id
        self._store = store
        self._publish = publish
        self._commit = commit
        """How a message joins the session's history (and its store)."""
        self._config = config
        """The session's own config fields, which a write of the record must keep."""
        self._waiting: list[Message] = _stored_steers(session_id, stored or {})
        self._open = False
        self._idle = anyio.Event()
        self._idle.set()
        self._tools: anyio.CancelScope | None = None
        self._interrupt_tools = interrupt_tools

    # --- the session's side ----------------------------------------------------------------

    def config(self) -> dict[str, str]:
        """The record's `config` as it must be stored now: the session's own fields and the
        steers still waiting."""
        fields = dict(self._config())
        if self._waiting:
            fields[STEERS_KEY] = messages_to_json(self._waiting)
        return fields

    async def offer(self, prompt: Sequence[ContentBlock]) -> bool:
        """Take `prompt` for the running turn: True once it is stored (the turn will deliver
        it); False when no turn takes steers now (nothing is kept: the caller runs it as a
        prompt). Raises `StorageError` when it cannot be stored (then it is not taken)."""
        if not self._open:
            return False
        message = Message(role="user", content=tuple(prompt))
        self._waiting.append(message)
        try:
            await self._save()
        except BaseException:
            if message in self._waiting:  # not taken meanwhile: it was never acknowledged
                self._waiting.remove(message)
            raise
        await self._publish(SteerReceived(message.content))
        if self._interrupt_tools and self._tools is not None:
            log.info("steer_interrupts_tools", session_id=self._id)
            self._tools.cancel()
        return True

    def starting(self) -> None:
        """The session starts running a turn (its commands and hooks come first): from now
        `wait_idle` waits for it to end, even before the turn takes steers."""
        self._idle = anyio.Event()

    def begin(self) -> None:
        """The turn's model loop starts: it takes steers until it closes them."""
        self._open = True

    async def end(self) -> None:
        """The turn's work is over, however it ended: no more steers, and any still waiting
        is committed as the user's message (shielded: it is never dropped)."""
        self._open = False
        self._tools = None
        with anyio.CancelScope(shield=True):
            if self._waiting:
                await self._commit_waiting()

    def turn_over(self) -> None:
        """The session runs no turn any more (`wait_idle` returns)."""
        self._open = False
        self._idle.set()

    async def wait_idle(self) -> None:
        """Return once no turn runs (the turn that closed its steers has fully ended)."""
        await self._idle.wait()

    async def settle(self, transcript: Sequence[Message]) -> Message | None:
        """The steers a killed process left waiting, committed when the session is loaded
        again (the message committed, or None). A kill between a steer's commit and the
        update of its stored copy left the message in the history already: not twice."""
        if not self._waiting:
            return None
        message = Message(role="user", content=_joined(self._waiting), inside_turn="steer")
        if transcript and _ends_with(transcript[-1], message):
            self._waiting.clear()
            await self._save()
            return None
        return await self._commit_waiting()

    # --- the running turn's side (`turn.deps.SteerInbox`) ------------------------------------

    def waiting(self) -> bool:
        return bool(self._waiting)

    def take(self) -> list[ContentBlock]:
        taken, self._waiting = self._waiting, []
        return list(_joined(taken))

    async def delivered(self) -> None:
        await self._save()

    def close(self) -> bool:
        if self._waiting:
            return False
        self._open = False
        return True

    def tools_running(self, scope: anyio.CancelScope | None) -> None:
        self._tools = scope
        if scope is not None and self._interrupt_tools and self._waiting:
            scope.cancel()  # the user wrote while the model asked for them: heard first

    # --- helpers ----------------------------------------------------------------------------

    async def _commit_waiting(self) -> Message:
        """Commit the waiting steers as one user message; that message."""
        message = Message(role="user", content=tuple(self.take()), inside_turn="steer")
        await self._commit(message)
        await self._save()
        return message

    async def _save(self) -> None:
        if self._store is not None:
            await self._store.update(self._id, config=self.config())


def _joined(messages: Sequence[Message]) -> tuple[ContentBlock, ...]:
    return tuple(block for message in messages for block in message.content)


def _ends_with(last: Message, steers: Message) -> bool:
    """`last` is a user message ending with exactly the steers' content."""
    n = len(steers.content)
    return last.role == "user" and n > 0 and last.content[-n:] == steers.content


def _stored_steers(session_id: str, config: dict[str, str]) -> list[Message]:
    data = config.get(STEERS_KEY)
    if not data:
        return []
    try:
        return list(messages_from_json(data))
    except ValueError as exc:  # a record written by hand: say so, keep the session usable
        log.warning("stored_steers_unreadable", session_id=session_id, error=str(exc))
        return []
