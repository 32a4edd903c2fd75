"""A session's title: named after its first prompt, once the model has answered it.

Owns `SessionTitle` (the title and the prompt waiting to name the session) and
`title_from_prompt` (the prompt's first line, at most `TITLE_LIMIT` characters).

Invariants:
- A session is named once and never renamed: a title restored from the store, or chosen by an
  earlier turn, stays.
- The title comes from a prompt the model answered: a first prompt that failed before any
  output (no credentials, a 400) must not name the session in `session/list`.
- A prompt without text (an image alone) names nothing; the next one may.
"""

from __future__ import annotations

from defect_core.model import ContentBlock, Message, TextBlock

TITLE_LIMIT = 80


def title_from_prompt(prompt: list[ContentBlock]) -> str | None:
    """The prompt's first non-empty line, cut to `TITLE_LIMIT` with an ellipsis; None if the
    prompt has no text."""
    text = "".join(b.text for b in prompt if isinstance(b, TextBlock)).strip()
    if not text:
        return None
    line = text.splitlines()[0].strip()
    return line if len(line) <= TITLE_LIMIT else line[: TITLE_LIMIT - 1] + "…"


class SessionTitle:
    """The title, and the running turn's prompt until the model's first answer to it."""

    def __init__(self, title: str | None) -> None:
        self.title = title
        self._prompt: list[ContentBlock] | None = None

    def turn_started(self, prompt: list[ContentBlock]) -> None:
        self._prompt = prompt

    def turn_ended(self) -> None:
        self._prompt = None

    def committed(self, message: Message) -> str | None:
        """The new title when `message` is the model's first answer in an untitled session
        (the caller saves and announces it); None otherwise."""
        if message.role != "assistant" or self._prompt is None:
            return None
        prompt, self._prompt = self._prompt, None
        if self.title is not None:
            return None
        title = title_from_prompt(prompt)
        if title is not None:
            self.title = title
        return title
