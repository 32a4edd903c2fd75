"""A session's questions to the user (`events.QuestionAsked`) as the client can show them.

Owns `put`: one `Question` asked of the client, and what came of it as an `events.Answer`;
and `completed`, which tells a client that opens pages that one is done with
(`elicitation/complete`, when an MCP server says so).
How it is shown depends on what the client advertised in `initialize` (`elicitation`):

- a choice (`ask_user`): an ACP form (`elicitation/create`, form mode, tied to the tool
  call: a single-choice `choice` property, plus a free `text` one when the model allows it)
  where the client has forms; else — or when the client answers the form "method not
  found" — a `session/request_permission` whose options are the choices (every client shows
  those; no free text then, which the answer says: `via`);
- an MCP server's form: passed on as an ACP form where the client has forms (named by its
  server); else, if it is a single choice (one enum or boolean property), as a permission
  question's options; else not asked, saying why;
- an MCP server's page (URL mode, e.g. an OAuth sign-in): an ACP URL elicitation where the
  client has it; else not asked, saying why.

Invariants:
- Always an answer: a client's error (or one that does not know the method) is `failed` with
  its message, never an exception out of here; what cannot be shown is `unavailable` with a
  sentence saying why. The caller (`updates.SessionPump`) hands it to
  `Session.answer_question`, and cancels the task when the question is withdrawn.
- Only what the schema allows goes out: a server's form that is not a valid ACP elicitation
  schema is not forwarded (`unavailable`), so the client never receives a malformed request.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from acp import RequestError
from acp import schema as s

from defect_core import events as ev
from defect_core.log import get_logger

if TYPE_CHECKING:
    from acp.agent.connection import AgentSideConnection

log = get_logger("defect.acp")

DECLINE = "decline"
"""The permission fallback's option for not answering."""
METHOD_NOT_FOUND = -32601
"""A client that advertised forms but does not serve `elicitation/create`: a choice is asked
again as a permission question."""


async def put(
    conn: AgentSideConnection,
    session_id: str,
    question: ev.Question,
    caps: s.ElicitationCapabilities | None,
) -> ev.Answer:
    """Ask `question` of the client; what came of it (see the module)."""
    forms = caps is not None and caps.form is not None
    try:
        if question.kind == "url":
            if caps is None or caps.url is None:
                return ev.Answer("unavailable", detail="the editor cannot open a page for it")
            return await _url(conn, session_id, question)
        if question.kind == "choice":
            if forms:
                try:
                    return await _form(conn, session_id, question, _choice_schema(question))
                except RequestError as exc:
                    if exc.code != METHOD_NOT_FOUND:
                        raise
                    log.info("elicitation_not_served", session_id=session_id)
            return await _options(conn, session_id, question, _choice_options(question))
        schema = _form_schema(question.schema or {})
        if forms and schema is not None:
            return await _form(conn, session_id, question, schema)
        if (options := _single_choice(question.schema or {})) is not None:
            return await _options(conn, session_id, question, options)
        why = "its form is not one the editor can show" if forms else "the editor has no forms"
        return ev.Answer("unavailable", detail=f"{why}, and it is not a single choice")
    except RequestError as exc:
        log.warning("question_failed", session_id=session_id, error=str(exc))
        return ev.Answer("failed", detail=f"error {exc.code}: {exc}")
    except (ConnectionError, ValueError) as exc:
        log.warning("question_failed", session_id=session_id, error=str(exc))
        return ev.Answer("failed", detail=f"{type(exc).__name__}: {exc}")


async def completed(
    conn: AgentSideConnection,
    event: ev.ElicitationCompleted,
    caps: s.ElicitationCapabilities | None,
) -> None:
    """Tell a client that opens pages that one an MCP server asked for is done with."""
    if caps is None or caps.url is None:
        return
    try:
        await conn.complete_elicitation(elicitation_id=event.elicitation_id)
    except ConnectionError as exc:
        log.debug("elicitation_complete_dropped", error=str(exc))


def message_of(question: ev.Question) -> str:
    """What the user reads: an MCP server's question is named by its server."""
    if question.source is None:
        return question.message
    return f"MCP server '{question.source}' asks: {question.message}"


# --- forms ------------------------------------------------------------------------------


def _choice_schema(question: ev.Question) -> s.ElicitationSchema:
    choice: dict[str, Any] = {
        "type": "string",
        "title": "Answer",
        "oneOf": [
            {"const": c.label, "title": c.label}
            | ({"description": c.description} if c.description else {})
            for c in question.choices
        ],
    }
    properties: dict[str, Any] = {"choice": choice}
    if question.free_text:
        text = {"type": "string", "title": "Or answer in your own words"}
        properties["text"] = text
    return s.ElicitationSchema.model_validate(
        {
            "type": "object",
            "properties": properties,
            "required": [] if question.free_text else ["choice"],
        }
    )


def _form_schema(schema: dict[str, Any]) -> s.ElicitationSchema | None:
    """A server's requested schema as an ACP elicitation schema (None: it is not one)."""
    try:
        parsed = s.ElicitationSchema.model_validate(schema)
    except ValueError:
        return None
    known = (
        s.ElicitationStringPropertySchema,
        s.ElicitationNumberPropertySchema,
        s.ElicitationIntegerPropertySchema,
        s.ElicitationBooleanPropertySchema,
        s.ElicitationMultiSelectPropertySchema,
    )
    if not all(isinstance(p, known) for p in (parsed.properties or {}).values()):
        return None
    return parsed


async def _form(
    conn: AgentSideConnection, session_id: str, question: ev.Question, schema: s.ElicitationSchema
) -> ev.Answer:
    mode = s.ElicitationFormSessionMode(
        session_id=session_id, tool_call_id=question.tool_call_id, requested_schema=schema
    )
    response = await conn.create_elicitation(message=message_of(question), mode=mode)
    if isinstance(response, s.AcceptElicitationResponse):
        return ev.Answer("accept", content=dict(response.content or {}), via="form")
    if isinstance(response, s.DeclineElicitationResponse):
        return ev.Answer("decline", via="form")
    return ev.Answer("cancel", via="form")


async def _url(conn: AgentSideConnection, session_id: str, question: ev.Question) -> ev.Answer:
    mode = s.ElicitationUrlSessionMode(
        session_id=session_id,
        tool_call_id=question.tool_call_id,
        elicitation_id=question.elicitation_id or uuid.uuid4().hex,
        url=question.url or "",
    )
    response = await conn.create_elicitation(message=message_of(question), mode=mode)
    if isinstance(response, s.AcceptElicitationResponse):
        return ev.Answer("accept", via="url")
    if isinstance(response, s.DeclineElicitationResponse):
        return ev.Answer("decline", via="url")
    return ev.Answer("cancel", via="url")


# --- the permission fallback ------------------------------------------------------------


Options = list[tuple[str, dict[str, Any]]]
"""Each option's name, and the content accepting it answers."""


def _choice_options(question: ev.Question) -> Options:
    return [(c.label, {"choice": c.label}) for c in question.choices]


def _single_choice(schema: dict[str, Any]) -> Options | None:
    """A server's form of one enum or boolean property, as options (None: it is not)."""
    properties = schema.get("properties")
    if not isinstance(properties, dict) or len(properties) != 1:
        return None
    ((name, prop),) = properties.items()
    if not isinstance(prop, dict):
        return None
    if prop.get("type") == "boolean":
        return [("Yes", {name: True}), ("No", {name: False})]
    if prop.get("type") != "string":
        return None
    if isinstance(prop.get("oneOf"), list):
        pairs = [(o.get("title") or o.get("const"), o.get("const")) for o in prop["oneOf"]]
    elif isinstance(prop.get("enum"), list):
        pairs = [(v, v) for v in prop["enum"]]
    else:
        return None
    if not pairs or not all(isinstance(t, str) and isinstance(v, str) for t, v in pairs):
        return None
    return [(title, {name: value}) for title, value in pairs]


async def _options(
    conn: AgentSideConnection, session_id: str, question: ev.Question, options: Options
) -> ev.Answer:
    if question.tool_call_id is None:
        return ev.Answer("unavailable", detail="the editor has no forms, and no tool call runs")
    offered = [
        s.PermissionOption(option_id=f"answer-{i}", name=name, kind="allow_once")
        for i, (name, _content) in enumerate(options)
    ]
    offered.append(s.PermissionOption(option_id=DECLINE, name="Don't answer", kind="reject_once"))
    response = await conn.request_permission(
        session_id=session_id,
        tool_call=s.ToolCallUpdate(
            tool_call_id=question.tool_call_id,
            title=message_of(question)[:500],
            kind="think" if question.source is None else "other",
        ),
        options=offered,
    )
    outcome = response.outcome
    if not isinstance(outcome, s.AllowedOutcome):
        return ev.Answer("cancel", via="options")
    if outcome.option_id.startswith("answer-"):
        index = outcome.option_id.removeprefix("answer-")
        if index.isdigit() and int(index) < len(options):
            return ev.Answer("accept", content=options[int(index)][1], via="options")
    return ev.Answer("decline", via="options")
