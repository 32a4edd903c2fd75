"""The `ask_user` tool: the model asks the person a question with a few options, and waits.

Owns `AskUserTool`, its argument model (`AskUserArgs`: `question`, `options` of `label` and
`description`, `allow_free_text`) and `answer_text`, the wording the model reads back for
every way a question can end. The tool asks through the session (`events.Ask`, given by
`session/questions.py`); the front end picks how the question is shown (an ACP form where
the editor has elicitation, else a permission question's buttons: `defect_acp/questions.py`).

Invariants:
- It touches no file and runs nothing (`Safety.READ_ONLY`): asking needs no permission in any
  mode, plan and read-only modes included.
- It never hangs: made without an asker (a subagent: `agents/child.py`), or in a session no
  one can answer (`defect exec`), it answers at once that no one is there; an open question
  times out (`ask_timeout`); a cancel of the turn cancels it.
- Every ending (an answer, a refusal, a dismissal, a time-out, the editor's error, no one
  there, buttons where free text was wanted) reaches the model as a sentence saying what
  happened and what to do next: the result is never an error the model might retry blindly.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, StringConstraints

from defect_core.events import Answer, Ask, Choice, Question, TextDisplay, ToolKind
from defect_core.tools.base import (
    ModelTool,
    Safety,
    ToolCallView,
    ToolContext,
    ToolOutput,
    clip_title,
)
from defect_core.tools.workspace import ToolArgs, parse_args

ASK_USER = "ask_user"

NO_ONE_THERE = (
    "No one is there to answer questions here ({why}). Proceed with your best judgement, "
    "and say in your final answer what you assumed."
)

Text = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]


class OptionArgs(ToolArgs):
    label: Text = Field(max_length=120, description="The answer, as the user would pick it.")
    description: str | None = Field(
        default=None, max_length=500, description="What choosing it means (optional)."
    )


class AskUserArgs(ToolArgs):
    question: Text = Field(max_length=2000, description="The question, complete on its own.")
    options: list[OptionArgs] = Field(
        min_length=2, max_length=8, description="The answers to choose from."
    )
    allow_free_text: bool = Field(
        default=False,
        description="Let the user type their own answer instead of choosing.",
    )


class AskUserTool(ModelTool):
    args_model = AskUserArgs

    def __init__(self, ask: Ask | None) -> None:
        self._ask = ask

    def alone(self) -> AskUserTool:
        """The same tool with no one to ask (a subagent's)."""
        return AskUserTool(None)

    @property
    def name(self) -> str:
        return ASK_USER

    @property
    def description(self) -> str:
        return (
            "Ask the user a question and wait for the answer: when a decision is theirs to "
            "make (a preference, a trade-off, missing information you cannot find), offer "
            "2 to 8 options. Do not ask what you can find out yourself."
        )

    @property
    def safety(self) -> Safety:
        return Safety.READ_ONLY

    @property
    def kind(self) -> ToolKind:
        return "think"

    def describe(self, args: dict[str, Any], ctx: ToolContext) -> ToolCallView:
        question = args.get("question") if isinstance(args, dict) else None
        text = question.strip() if isinstance(question, str) and question.strip() else "…"
        return ToolCallView(title=clip_title(f"Question: {text}"), kind="think")

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        a = parse_args(self.args_model, args, self.name)
        if self._ask is None:
            text = NO_ONE_THERE.format(why="this is a subagent")
            return ToolOutput(text, display=(TextDisplay(text),))
        question = Question(
            message=a.question,
            kind="choice",
            tool_call_id=ctx.tool_call_id or None,
            choices=tuple(Choice(o.label, o.description) for o in a.options),
            free_text=a.allow_free_text,
        )
        answer = await self._ask(question)
        text = answer_text(answer, a.allow_free_text)
        return ToolOutput(text, display=(TextDisplay(text),), raw_output=_raw(answer))


def answer_text(answer: Answer, free_text: bool) -> str:
    """What the model reads of `answer` (see the module's invariants)."""
    if answer.action == "accept":
        content = answer.content or {}
        choice, typed = content.get("choice"), content.get("text")
        parts = []
        if isinstance(typed, str) and typed.strip():
            parts.append(f"The user answered in their own words: {typed.strip()}")
        if isinstance(choice, str) and choice:
            parts.insert(0, f"The user chose: {choice}")
        if not parts:
            parts.append("The user submitted the question without choosing an answer")
        text = ". ".join(parts) + "."
        if free_text and answer.via == "options":
            text += (
                " (The editor showed the options as buttons, so the user could not type an "
                "answer of their own.)"
            )
        return text
    if answer.action == "decline":
        return (
            "The user declined to answer. Do not ask again; proceed with your best judgement "
            "and say what you assumed, or stop if you cannot go on without it."
        )
    if answer.action == "cancel":
        return (
            "The user dismissed the question without answering. Proceed with your best "
            "judgement and say what you assumed."
        )
    if answer.action == "timeout":
        why = answer.detail or "no answer came in time"
        return (
            f"The question went unanswered ({why}). Proceed with your best judgement, and say "
            "in your final answer what you assumed."
        )
    if answer.action == "failed":
        return (
            f"The editor could not ask the question ({answer.detail or 'an error'}). Proceed "
            "with your best judgement, and say in your final answer what you assumed."
        )
    return NO_ONE_THERE.format(why=answer.detail or "nothing can show a question")


def _raw(answer: Answer) -> dict[str, Any]:
    raw: dict[str, Any] = {"action": answer.action}
    if answer.content:
        raw["content"] = answer.content
    if answer.via:
        raw["via"] = answer.via
    return raw
