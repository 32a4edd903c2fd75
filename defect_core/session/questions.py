"""A session's open questions to its user: `ask_user`'s and its MCP servers' elicitations.

Owns `SessionQuestions` (made by `of`, which also gives the session's MCP hub its `ask`):
`ask` publishes a `QuestionAsked` and waits for the front end's
`Session.answer_question`; `answer` hands the answer over; `cancel_all` ends every open
question when the session closes. How a question is shown (an ACP form, a permission
question's buttons, a page to open) is the front end's business (`defect_acp/questions.py`);
this module only keeps who waits for what, and for how long.

Invariants:
- A question never hangs its asker: a session no one can answer (`defect exec`, a library
  without a front end) answers `unavailable` at once, without publishing; an open question
  ends after `timeout` seconds (`ask_timeout`) with `timeout`; closing the session answers
  `cancel`.
- A question that ends without an answer (timed out, or its turn cancelled) is withdrawn:
  `QuestionWithdrawn` tells the front end to stop asking it. A cancel still cancels the asker.
- Each question waits for exactly one answer, keyed by its id: an answer for a question that
  is not waiting (late, duplicated, unknown) is logged and ignored.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import anyio

from defect_core.config import Settings
from defect_core.events import AgentEvent, Answer, Question, QuestionAsked, QuestionWithdrawn
from defect_core.log import get_logger
from defect_core.session.protocol import Backends

if TYPE_CHECKING:
    from defect_core.mcp import McpHub

log = get_logger("defect.agent")

DEFAULT_ASK_TIMEOUT = 600.0
"""Seconds a question waits for its answer (`ask_timeout`)."""


class SessionQuestions:
    def __init__(
        self,
        session_id: str,
        publish: Callable[[AgentEvent], Awaitable[None]],
        *,
        interactive: bool,
        timeout: float = DEFAULT_ASK_TIMEOUT,
    ) -> None:
        self._session_id = session_id
        self._publish = publish
        self.interactive = interactive
        """Whether anyone can answer (the front end says so: `Frontend.interactive`)."""
        self.timeout = timeout
        self._pending: dict[str, tuple[anyio.Event, list[Answer]]] = {}
        self._ids = itertools.count(1)

    @classmethod
    def of(
        cls,
        session_id: str,
        publish: Callable[[AgentEvent], Awaitable[None]],
        backends: Backends,
        settings: Settings,
        mcp: McpHub | None,
    ) -> SessionQuestions:
        """A session's questions: answered if its front end is interactive, within
        `ask_timeout`; its MCP servers' elicitations are asked through them too."""
        questions = cls(
            session_id,
            publish,
            interactive=backends.frontend.interactive,
            timeout=settings.ask_timeout,
        )
        if mcp is not None:
            mcp.ask_with(questions.ask, publish)
        return questions

    async def ask(self, question: Question) -> Answer:
        """Ask `question` and wait for its answer (see the module's invariants)."""
        if not self.interactive:
            return Answer("unavailable", detail="the session runs without an editor to ask")
        key = f"q{next(self._ids)}"
        question = dataclasses.replace(question, question_id=key)
        event = anyio.Event()
        answer: list[Answer] = []
        self._pending[key] = (event, answer)
        answered = False
        try:
            await self._publish(QuestionAsked(question))
            with anyio.move_on_after(self.timeout):
                await event.wait()
            answered = bool(answer)
        finally:
            self._pending.pop(key, None)
            if not answered:
                with anyio.CancelScope(shield=True):
                    await self._publish(QuestionWithdrawn(key))
        if not answered:
            seconds = f"{self.timeout:g}"
            return Answer("timeout", detail=f"no answer came within {seconds} seconds")
        return answer[0]

    def answer(self, question_id: str, answer: Answer) -> None:
        pending = self._pending.get(question_id)
        if pending is None or pending[1]:
            log.warning(
                "question_answer_ignored", session_id=self._session_id, question_id=question_id
            )
            return
        event, slot = pending
        slot.append(answer)
        event.set()

    def cancel_all(self) -> None:
        """Answer every open question with `cancel` (the session is closing)."""
        for event, slot in list(self._pending.values()):
            if not slot:
                slot.append(Answer("cancel", detail="the session closed"))
            event.set()
