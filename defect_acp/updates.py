"""What the client is told about a session: live `session/update`s, permission questions, replay.

Owns `SessionPump` (one per open session: forwards the session's `AgentEvent`s to the client
in order, as `session/update` notifications, turns each `PermissionRequested` into a
`session/request_permission` request whose answer resolves the permission, and puts each
`QuestionAsked` to the client as `defect_acp/questions.py` shows it), `replay` (a
stored session's history as the updates a client needs to show it again, then its plan, for
`session/load` and `--resume`) and `after_open_updates` (what follows the answer that opened
a session: the slash commands and the session's notices).

Invariants:
- Updates of one session leave in the order the session published its events; the end of a
  turn is counted (`wait_turn_ended`) only after every update before it was written, so
  `session/prompt` is answered after the last update of its turn (`defect_acp/server.py`).
- A permission question never hangs a turn: a client that cannot answer it counts as a
  rejection.
- Every chunk of a message of the conversation carries that message's id, live (the session's
  `NextMessageId`, until its turn ends) and replayed alike, except a steer's live chunk: which
  message it joins is settled later, and its replay carries that one's id. Text outside the
  conversation (a notice, a slash command's answer) carries none.
- A call shown by what it publishes (`update_plan`: its `plan` update) gets no tool-call card;
  only a refused one does, once it failed, with why (`cards.SHOWN_BY_THEIR_EVENT`).
- What an event or a stored message looks like on the wire is decided in
  `defect_acp/projection.py` and, for a tool call's card, live or replayed, in
  `defect_acp/cards.py`; this module only decides when, and to which session, it is sent.

- A fast stream never backs up one write per delta: the pump takes the event it waited for
  plus whatever the session has already queued behind it (never waiting for more, so the first
  delta leaves at once, as it came), merges adjacent queued text deltas of one kind into one
  (`coalesce`: only when the writer is behind, and never across any other event), and writes
  the batch as one write with one flush (`UpdateSink.send_lines`; a text delta's line and a
  card's are written straight from their JSON, as a replay's are, without a model each). A
  replay goes out the same way, `REPLAY_BATCH` updates per write as they are built, so the
  first leave before the last are made (as protocol lines straight: `replay_lines.py`). A
  `session/load` replay streams further (`StreamedReplay`): each part of the history is sent
  as soon as the store has read it, before the rest is read; every update still precedes the
  load's answer.

Why apart from the server: the server maps requests to the runtime; this is the other
direction, the stream the runtime produces, with its own ordering rules.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import anyio
from acp import schema as s
from anyio.streams.memory import MemoryObjectReceiveStream

from defect_acp import cards, projection, questions, replay_walk
from defect_acp.replay_lines import ReplayLines
from defect_core import events as ev
from defect_core.log import get_logger
from defect_core.model import ImageBlock, TextBlock
from defect_core.session.protocol import HistoryPart, Session

if TYPE_CHECKING:
    from acp.agent.connection import AgentSideConnection

log = get_logger("defect.acp")

BATCH_LIMIT = 512
"""Most events the pump takes off a session's queue at once (its buffer is 256)."""
REPLAY_BATCH = 256
"""Updates per write when a stored conversation is replayed."""


class UpdateSink(Protocol):
    """What the pump needs of the agent: a way to send updates and the client connection."""

    async def send_update(self, session_id: str, update: Any) -> None: ...

    async def send_updates(self, session_id: str, updates: Sequence[Any]) -> None:
        """Several updates of one session, in order, as one write."""
        ...

    async def send_lines(self, session_id: str, lines: Sequence[bytes]) -> None:
        """Updates of one session already written as their protocol lines, as one write."""
        ...

    @property
    def connection(self) -> AgentSideConnection: ...


class SessionPump:
    """Forwards one session's events to the client, in order."""

    def __init__(
        self,
        agent: UpdateSink,
        session: Session,
        elicitation: s.ElicitationCapabilities | None = None,
    ) -> None:
        self._agent = agent
        self._session = session
        self._elicitation = elicitation
        """What the client said it can show of a question (`initialize`): `questions.put`."""
        self._asking: dict[str, asyncio.Task[None]] = {}
        """The questions put to the client, by id, until answered or withdrawn."""
        self._stream = session.subscribe()
        self._turns_ended = 0
        self._ended = asyncio.Condition()
        self._task: asyncio.Task[None] | None = None
        self._questions: set[asyncio.Task[None]] = set()
        self._refresh: asyncio.Task[None] | None = None
        self._lines = projection.UpdateLines(session.id)
        """Text deltas' and cards' lines, written straight from their JSON (the line
        `update_line` writes for the model, without building one per update)."""
        self._user = ReplayLines(session.id)
        """A steer's lines (`SteerReceived`): the user's message, as a replay writes it."""
        self._held: dict[str, ev.ToolCallStarted] = {}
        """Calls shown by their own event (`cards.SHOWN_BY_THEIR_EVENT`), until they end:
        a refused one is shown then, as a failed card."""
        self._message_id: str | None = None
        """The id of the message the model is writing (`ev.NextMessageId`), from a commit
        until the turn ends; None: text that is not the conversation's (a slash command's)."""
        self.last_usage: ev.TurnUsage | None = None
        """The token usage of the last turn, for the prompt answer's `_meta`."""

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"pump-{self._session.id}")

    def refresh_models(self) -> None:
        """Ask the providers for their live model lists in the background; a list that
        changed reaches the client as a `config_option_update` (the session's
        `ConfigChanged`). Called once the answer that opened the session has left: the
        editor never waits on a listing."""
        if self._refresh is None or self._refresh.done():
            self._refresh = asyncio.create_task(
                self._refresh_models(), name=f"models-{self._session.id}"
            )

    async def _refresh_models(self) -> None:
        try:
            await self._session.refresh_models()
        except Exception:
            log.exception("model_refresh_failed", session_id=self._session.id)

    @property
    def turns_ended(self) -> int:
        return self._turns_ended

    async def wait_turn_ended(self, count: int) -> None:
        """Wait until the pump has forwarded the end of turn number `count` (1-based)."""
        async with self._ended:
            await self._ended.wait_for(lambda: self._turns_ended >= count or self._task_done())

    async def drained(self) -> None:
        """Return once every event the session has published so far was forwarded: the pump
        waits for the next one with nothing queued (or has stopped)."""
        stream = self._stream
        while isinstance(stream, MemoryObjectReceiveStream) and not self._task_done():
            stats = stream.statistics()
            if stats.current_buffer_used == 0 and stats.tasks_waiting_receive > 0:
                return
            await asyncio.sleep(0.005)

    def _task_done(self) -> bool:
        return self._task is not None and self._task.done()

    async def _run(self) -> None:
        try:
            async with self._stream:
                async for event in self._stream:
                    # The event waited for leaves as it came; what queued behind it merges.
                    queued = self._queued_after(event)
                    await self._forward([event, *coalesce(queued)])
        except Exception:
            log.exception("pump_failed", session_id=self._session.id)
        finally:
            async with self._ended:
                self._ended.notify_all()

    def _queued_after(self, first: ev.AgentEvent) -> list[ev.AgentEvent]:
        """The events already queued behind `first` (none is waited for)."""
        batch: list[ev.AgentEvent] = []
        if not isinstance(self._stream, MemoryObjectReceiveStream):
            return batch  # a stream that cannot say what is queued: one event at a time
        while len(batch) < BATCH_LIMIT:
            try:
                batch.append(self._stream.receive_nowait())
            except (anyio.WouldBlock, anyio.EndOfStream, anyio.ClosedResourceError):
                break
        return batch

    async def _forward(self, events: list[ev.AgentEvent]) -> None:
        """Send a batch's updates in order, as few writes as its events allow: the updates
        before a turn's end or a permission question leave before it is acted on."""
        pending: list[Any] = []
        for event in events:
            if isinstance(event, ev.AgentTextDelta):
                pending.append(
                    self._lines.chunk("agent_message_chunk", event.text, self._message_id)
                )
            elif isinstance(event, ev.AgentThoughtDelta):
                pending.append(
                    self._lines.chunk("agent_thought_chunk", event.text, self._message_id)
                )
            elif isinstance(event, ev.NextMessageId):
                self._message_id = event.message_id
            elif isinstance(event, ev.PermissionRequested):
                await self._flush(pending)
                task = asyncio.create_task(self._ask(event))
                self._questions.add(task)
                task.add_done_callback(self._questions.discard)
            elif isinstance(event, ev.QuestionAsked):
                await self._flush(pending)
                key = event.question.question_id
                self._asking[key] = asyncio.create_task(self._put(event.question))
            elif isinstance(event, ev.ElicitationCompleted):
                await self._flush(pending)
                await questions.completed(self._agent.connection, event, self._elicitation)
            elif isinstance(event, ev.QuestionWithdrawn):
                if (asking := self._asking.pop(event.question_id, None)) is not None:
                    asking.cancel()
            elif isinstance(event, ev.TurnEnded | ev.TurnFailed):
                self._message_id = None
                await self._flush(pending)
                async with self._ended:
                    self.last_usage = event.usage if isinstance(event, ev.TurnEnded) else None
                    self._turns_ended += 1
                    self._ended.notify_all()
            elif isinstance(event, ev.SteerReceived):
                pending.extend(self._steer_lines(event.content))
            elif isinstance(event, ev.ConfigChanged):
                pending.append(projection.config_update(self._session.config_options()))
            elif isinstance(event, ev.ModeChanged):
                pending.append(projection.event_to_update(event))
                pending.append(projection.config_update(self._session.config_options()))
            elif isinstance(event, ev.ToolCallStarted):
                if event.name in cards.SHOWN_BY_THEIR_EVENT:
                    self._held[event.tool_call_id] = event  # shown only if it fails
                else:
                    pending.append(self._lines.line(cards.started(event)))
            elif isinstance(event, ev.ToolCallUpdated):
                if event.tool_call_id in self._held:
                    started = self._held[event.tool_call_id]
                    if event.status in ("completed", "failed"):
                        del self._held[event.tool_call_id]
                    if event.status != "failed":
                        continue
                    pending.append(self._lines.line(cards.started(started)))
                pending.append(self._lines.line(cards.progress(event)))
            else:
                update = projection.event_to_update(event)
                if update is not None:
                    pending.append(update)
        await self._flush(pending)

    def _steer_lines(self, content: Sequence[Any]) -> list[bytes | None]:
        """A steer, shown as the user's message as it arrives (a replay shows it where it
        joined the history: the same text, with that message's id)."""
        return [
            self._user.user_text(b.text) if isinstance(b, TextBlock) else self._user.user_image(b)
            for b in content
            if isinstance(b, TextBlock | ImageBlock)
        ]

    async def _flush(self, pending: list[Any]) -> None:
        """Send `pending` (update models, and the lines of those made as JSON) as one write."""
        if pending:
            session_id = self._session.id
            lines = [
                item if isinstance(item, bytes) else projection.update_line(session_id, item)
                for item in pending
                if item is not None
            ]
            await self._agent.send_lines(session_id, [line for line in lines if line])
            pending.clear()

    async def _ask(self, event: ev.PermissionRequested) -> None:
        option: str | None
        try:
            response = await self._agent.connection.request_permission(
                session_id=self._session.id,
                tool_call=cards.for_permission(event),
                options=projection.permission_options(event),
            )
            outcome = response.outcome
            option = outcome.option_id if isinstance(outcome, s.AllowedOutcome) else None
        except Exception as exc:
            # A client that cannot answer must not hang the turn: treat it as a rejection.
            log.warning("permission_request_failed", error=str(exc), session_id=self._session.id)
            option = "reject_once"
        self._session.resolve_permission(event.tool_call_id, option)

    async def _put(self, question: ev.Question) -> None:
        key = question.question_id
        try:
            answer = await questions.put(
                self._agent.connection, self._session.id, question, self._elicitation
            )
        except Exception as exc:  # an answer, whatever broke: the asker must not wait on it
            log.exception("question_not_put", session_id=self._session.id)
            answer = ev.Answer("failed", detail=f"{type(exc).__name__}: {exc}")
        finally:
            self._asking.pop(key, None)
        self._session.answer_question(key, answer)

    async def stop(self) -> None:
        for asking in list(self._asking.values()):
            asking.cancel()
        if self._refresh is not None:
            self._refresh.cancel()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


def coalesce(events: Iterable[ev.AgentEvent]) -> list[ev.AgentEvent]:
    """`events` with every run of adjacent text deltas of one kind (answer text, thought)
    merged into one delta carrying their text in order. Nothing else is merged, dropped or
    moved: the first event stays first, and no text crosses any other event."""
    merged: list[ev.AgentEvent] = []
    run: list[ev.AgentTextDelta | ev.AgentThoughtDelta] = []  # adjacent deltas of one kind

    def close_run() -> None:
        if len(run) == 1:
            merged.append(run[0])
        elif run:
            merged.append(type(run[0])("".join(delta.text for delta in run)))
        run.clear()

    for event in events:
        if isinstance(event, ev.AgentTextDelta | ev.AgentThoughtDelta):
            if run and type(run[0]) is not type(event):
                close_run()
            run.append(event)
        else:
            close_run()
            merged.append(event)
    close_run()
    return merged


async def replay(sink: UpdateSink, session: Session) -> None:
    """Send a stored session's history as updates (`session/load`, `--resume`), in batches
    as they are built: the first leave before the rest of the conversation is projected.
    Each is written as its protocol line straight (`replay_lines.py`), not as a model."""
    views = session.subagent_views()
    view = ReplayLines(session.id)
    calls, ids = await session.tool_calls(), session.message_ids()
    lines = replay_walk.iter_replay(session.transcript(), calls, view, views, ids)
    await _send_replayed(sink, session.id, lines)
    await _send_plan(sink, session)


class StreamedReplay:
    """A `session/load` replay sent while the store reads the history: `part` is the core's
    `on_history` (each `HistoryPart`'s lines leave before the next part is read, through
    `replay_walk.ReplayWalk`), `finish` sends what is left, then the plan. A session that was
    not read (already live) is replayed whole by `finish`, as `replay` does: the client sees
    the same updates, in the same order, either way."""

    def __init__(self, sink: UpdateSink, session_id: str) -> None:
        self._sink = sink
        self._session_id = session_id
        self._walk: replay_walk.ReplayWalk[bytes | None] | None = None

    async def part(self, part: HistoryPart) -> None:
        if self._walk is None:
            view = ReplayLines(self._session_id)
            self._walk = replay_walk.ReplayWalk(part.tool_calls, view, part.subagents)
        lines = self._walk.feed(part.messages, part.message_ids)
        await _send_replayed(self._sink, self._session_id, lines)

    async def finish(self, session: Session) -> None:
        if self._walk is None:
            await replay(self._sink, session)
            return
        await _send_replayed(self._sink, session.id, self._walk.finish())
        await _send_plan(self._sink, session)


async def _send_replayed(sink: UpdateSink, session_id: str, lines: Iterator[bytes | None]) -> None:
    while batch := list(itertools.islice(lines, REPLAY_BATCH)):
        await sink.send_lines(session_id, [line for line in batch if line is not None])


async def _send_plan(sink: UpdateSink, session: Session) -> None:
    if plan := session.current_plan():
        await sink.send_update(session.id, projection.plan_update(plan))


async def after_open_updates(sink: UpdateSink, session: Session) -> None:
    """What follows the answer that opened a session: its slash commands, its notices.

    Sent only after that answer: a client ignores updates for a session it has not been told
    about yet."""
    await session.refresh_commands(announce=False)
    commands = session.slash_commands()
    if commands:
        await sink.send_update(session.id, projection.commands_update(commands))
    for notice in session.notices():
        update = projection.event_to_update(ev.Notice(notice, level="warning"))
        await sink.send_update(session.id, update)
