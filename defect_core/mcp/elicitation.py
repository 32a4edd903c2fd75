"""An MCP server's elicitation (`elicitation/create`) asked of the session's user.

Owns `elicit`, what a connection's `ClientSession` calls when its server asks the user for
input (the SDK's `elicitation_callback`): the request becomes a core `Question` (form: the
server's schema; URL: the page to open), named by its server and tied to the server's running
tool call if there is one, asked through the session (`events.Ask`, `session/questions.py`),
and its `Answer` goes back as the MCP result.

Invariants:
- The server always gets an answer: the user's (`accept` with the form's content, `decline`,
  `cancel`), or, when the user could not be asked (no session to ask through, `defect exec`,
  a front end that cannot show a form or open a page, a time-out, the front end's error),
  an error whose message says why in one line; never a hang.
- Only a session's own servers ask, and only while the session lives: the hub that owns the
  connection is the session's, and closing the session answers its open questions. A
  question tied to a tool call ends with it (`McpHub._elicit`): a cancelled turn withdraws it
  and the server gets `cancel`.
- Like every module of the package, it imports the `mcp` SDK only inside the function that
  needs it (docs/architecture.md, rule 6).
"""

from __future__ import annotations

from typing import Any

from defect_core.events import Answer, Ask, Question
from defect_core.log import get_logger

log = get_logger("defect.mcp")


def question_of(server: str, params: Any, tool_call_id: str | None) -> Question:
    """The core question for an MCP `ElicitRequestParams` (form or URL mode)."""
    if getattr(params, "mode", "form") == "url":
        return Question(
            message=str(params.message),
            kind="url",
            tool_call_id=tool_call_id,
            source=server,
            url=str(params.url),
            elicitation_id=getattr(params, "elicitation_id", None),
        )
    schema = getattr(params, "requested_schema", None)
    return Question(
        message=str(params.message),
        kind="form",
        tool_call_id=tool_call_id,
        source=server,
        schema=dict(schema) if isinstance(schema, dict) else {"type": "object", "properties": {}},
    )


def why_not(answer: Answer) -> str:
    """The one line an MCP server reads when the user could not be asked."""
    reason = {
        "unavailable": "no one can answer",
        "timeout": "no answer came in time",
        "failed": "the editor could not ask",
    }.get(answer.action, "not asked")
    return f"the user was not asked: {answer.detail or reason}"


def elicit_cancelled(server: str) -> Any:
    """The answer to an elicitation whose tool call ended before the user answered."""
    import mcp_types

    log.info("mcp_elicitation", server=server, action="cancel", why="its tool call ended")
    return mcp_types.ElicitResult(action="cancel")


async def elicit(server: str, params: Any, tool_call_id: str | None, ask: Ask | None) -> Any:
    """The answer to one `elicitation/create` of `server` (an `ElicitResult`, or `ErrorData`
    when the user was not asked)."""
    import mcp_types

    if ask is None:
        answer = Answer("unavailable", detail="the server's session is not open")
    else:
        try:
            answer = await ask(question_of(server, params, tool_call_id))
        except Exception as exc:  # the server must get an answer, whatever broke here
            log.exception("mcp_elicitation_failed", server=server)
            answer = Answer("failed", detail=f"{type(exc).__name__}: {exc}")
    log.info("mcp_elicitation", server=server, action=answer.action)
    if answer.action in ("accept", "decline", "cancel"):
        content = answer.content if answer.action == "accept" else None
        return mcp_types.ElicitResult(action=answer.action, content=content)
    return mcp_types.ErrorData(code=mcp_types.INVALID_REQUEST, message=why_not(answer))
