"""The tool calls of one assistant message: announce, decide, run, and settle each one.

Owns `ToolCall` (one `tool_use` on its way to a result) and the steps the runner takes it
through: `prepare` (find the tool, describe the call) → `announce` (`ToolCallStarted`) →
`decide` (the permission policy, or the user) → `execute` (the tool, its output capped) — or
`fail` / `settle_cancelled` when it must not or cannot run. `runner.py` orders these steps and
commits the results; this module knows nothing of the model request.

Invariants:
- Each call is given exactly one result and reports exactly one final status, together
  (`finish`): the result and the update the client sees go as one step a cancel cannot split.
- A tool that raises, a `describe` or `preview` that fails, or an unknown tool name becomes an
  error result the model reads; none of them stops the turn.
- A turn that is not interactive (a subagent's, `TurnDeps.interactive`) never asks: a call
  the policy would ask about is refused (`NOT_INTERACTIVE_TEXT`), so it never waits on a
  question and never has more authority than the session that started it — unless the
  session's mode changed since it started and the session can ask
  (`TurnDeps.asks_after_mode_change`): then it asks, as the foreground would. A front end
  with nobody at hand answers a question `policy.NOBODY_TO_ASK`: the call is refused with
  `UNATTENDED_TEXT`, never as if a person had rejected it.
- The policy judges each call under the session's mode at that moment (`TurnDeps.mode`), not
  the one the turn started under: a switch to `read-only` stops a running subagent's next
  command. A call refused or asked about because the mode changed says so, in its result
  and in its title (`mode_changed`), so the task's progress shows why.
- `before_tool` hooks are asked before the policy: a denial fails the call with the hook's
  reason (the model reads it), an `allow` approves it without a question (a policy refusal —
  read-only mode, a remembered "always reject" — still wins, and a call touching a protected
  path is still asked).
- A call that is not read-only is checked for protected paths (`Tool.protected`,
  `tools/protected.py`) before the policy decides; its question says why it is asked, offers
  only the once options, and an answer that was not offered approves nothing and is never
  remembered. `after_tool` hooks see the
  result; what either adds is appended to the result the model reads.
- A result never exceeds `MAX_RESULT_CHARS`, nor carries a lone surrogate (it could then be
  neither stored nor sent), and one too large for the context window is replaced by an error
  asking for less.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass
from typing import Any

import anyio

from defect_core import policy
from defect_core.events import PermissionRequested, TextDisplay, ToolCallStarted, ToolCallUpdated
from defect_core.log import get_logger
from defect_core.model import JsonPart, ResultPart, TextBlock, ToolResultBlock, ToolUseBlock
from defect_core.tools.base import Safety, Tool, ToolCallView, ToolContext, ToolError, ToolOutput
from defect_core.tools.protected import protected_in_values
from defect_core.turn.deps import TurnConfig, TurnDeps

log = get_logger("defect.turn")

MAX_RESULT_CHARS = 100_000
"""A tool result larger than this is cut with a marker before it reaches the model."""

CANCELLED_RESULT_TEXT = "tool call cancelled by the user before it finished"
STEERED_RESULT_TEXT = (
    "tool call cancelled before it finished: the user sent a message meanwhile "
    "(it follows these results)"
)
NOT_INTERACTIVE_TEXT = (
    "refused: this call needs the user's permission, and a subagent cannot ask for it "
    "(the session's permission mode would have asked). Do without it, or say in your answer "
    "what needs to be done so the agent that started you can do it."
)

UNATTENDED_TEXT = (
    "refused: this call needs permission, and no one is there to approve it (the agent runs "
    "unattended, in a permission mode that would have asked). Do without it, or say in your "
    "answer what needs to be done and why."
)


@dataclass
class ToolCall:
    use: ToolUseBlock
    tool: Tool | None
    view: ToolCallView
    args: dict[str, Any]
    result: ToolResultBlock | None = None
    """Set, with the final status reported, exactly once (`finish`)."""
    approved: bool = False
    hook_context: str = ""
    """What `before_tool` hooks added, for the result the model reads."""
    partial: str = ""
    """What the tool had produced when it was cancelled (`ToolContext.keep_partial`)."""


def prepare(deps: TurnDeps, use: ToolUseBlock) -> ToolCall:
    """The call of `use`: its tool (None if unknown) and how it is shown."""
    tool = deps.tools.get(use.name)
    if tool is None:
        view = ToolCallView(title=use.name, kind="other")
        return ToolCall(use, None, view, use.input)
    try:
        view = tool.describe(use.input, deps.tool_context(use.id))
    except Exception as exc:  # a describe bug must not break the turn
        log.warning("tool_describe_failed", tool=use.name, error=str(exc))
        view = ToolCallView(title=use.name, kind=tool.kind)
    return ToolCall(use, tool, view, use.input)


async def announce(deps: TurnDeps, call: ToolCall) -> None:
    await deps.publish(
        ToolCallStarted(
            tool_call_id=call.use.id,
            name=call.use.name,
            title=call.view.title,
            kind=call.view.kind,
            raw_input=call.use.input,
            locations=call.view.locations,
            content=call.view.content,
        )
    )


async def decide(deps: TurnDeps, call: ToolCall, config: TurnConfig) -> None:
    """Approve `call` (`call.approved`), or fail it with the reason. The user is asked when
    the policy says so; a cancelled question cancels the turn."""
    tool = call.tool
    if tool is None:
        available = ", ".join(sorted(t.name for t in deps.tools)) or "none"
        await fail(deps, call, f"unknown tool: {call.use.name} (available tools: {available})")
        return
    key = _permission_key(tool, call.args)
    mode = deps.mode() if deps.mode is not None else config.mode
    changed = mode != config.mode
    protected = None
    if tool.safety is not Safety.READ_ONLY:
        protected = _protected(tool, call.args, deps.tool_context(call.use.id))
    decision = policy.decide(mode, tool.safety, tool.kind, key, deps.rules, protected)
    if isinstance(decision, policy.Deny):
        if changed:
            await fail_mode_changed(deps, call, config.mode, mode, decision.reason)
        else:
            await fail(deps, call, decision.reason)
        return
    if deps.hooks is not None:
        verdict = await deps.hooks.fire("before_tool", _tool_data(call), tool=tool.name)
        call.hook_context = verdict.context
        if verdict.denied:
            await fail(deps, call, f"refused by a hook: {verdict.reason or 'no reason given'}")
            return
        if verdict.decision == "allow" and not (
            isinstance(decision, policy.Ask) and decision.protected
        ):
            decision = policy.Allow()
    if isinstance(decision, policy.Ask) and not deps.interactive:
        if not changed:
            await fail(deps, call, NOT_INTERACTIVE_TEXT)
            return
        if not deps.asks_after_mode_change:
            await fail_mode_changed(deps, call, config.mode, mode, NOT_INTERACTIVE_TEXT)
            return
    if isinstance(decision, policy.Ask):
        try:
            preview = await tool.preview(call.args, deps.tool_context(call.use.id))
        except ToolError as exc:
            await fail(deps, call, str(exc))
            return
        except Exception as exc:
            log.warning("tool_preview_failed", tool=tool.name, error=str(exc))
            preview = ()
        content = preview or call.view.content
        if decision.protected:
            content = (TextDisplay(f"Protected: {decision.protected}."), *content)
        answer = await deps.ask_permission(
            PermissionRequested(
                tool_call_id=call.use.id,
                title=call.view.title,
                kind=call.view.kind,
                raw_input=call.args,
                options=decision.options,
                content=content,
                locations=call.view.locations,
            )
        )
        if answer is None:
            # The client cancelled the question: the turn ends as `cancelled`.
            deps.cancel_turn()
            await anyio.sleep_forever()
        if answer == policy.NOBODY_TO_ASK:
            await fail(deps, call, UNATTENDED_TEXT)
            return
        offered = {o.option_id for o in decision.options}
        if answer not in offered:
            # Never offered (an "always" answer to a protected call): it approves nothing.
            log.warning("permission_answer_not_offered", tool=tool.name, answer=answer)
            answer = policy.REJECT_ONCE
        if answer in (policy.ALLOW_ALWAYS, policy.REJECT_ALWAYS):
            deps.rules.remember(key, allow=answer == policy.ALLOW_ALWAYS)
            await deps.rules_changed()
        if answer not in (policy.ALLOW_ONCE, policy.ALLOW_ALWAYS):
            await fail(deps, call, "the user rejected this tool call")
            return
    call.approved = True


async def execute(deps: TurnDeps, call: ToolCall, window: int) -> None:
    """Run an approved call and finish it with its (capped) output."""
    assert call.tool is not None
    await deps.publish(ToolCallUpdated(call.use.id, status="in_progress"))

    def keep_partial(text: str) -> None:
        call.partial = text

    ctx = dataclasses.replace(deps.tool_context(call.use.id), keep_partial=keep_partial)
    try:
        output = await call.tool.run(call.args, ctx)
    except ToolError as exc:
        output = ToolOutput(str(exc), is_error=True, display=(TextDisplay(str(exc)),))
    except anyio.get_cancelled_exc_class():
        raise
    except Exception as exc:
        log.exception("tool_crashed", tool=call.tool.name)
        text = f"{call.tool.name} failed: {type(exc).__name__}: {exc}"
        output = ToolOutput(text, is_error=True, display=(TextDisplay(text),))
    content = _cap(output.content)
    if deps.hooks is not None:
        data = {**_tool_data(call), "result": {"text": _display_text(content)[:20_000]}}
        data["result"]["is_error"] = output.is_error
        verdict = await deps.hooks.fire("after_tool", data, tool=call.tool.name)
        extra = "\n\n".join(c for c in (call.hook_context, verdict.context) if c)
        if extra:
            content = _with_note(content, extra)
    chars = len(_display_text(content))
    if deps.compactor is not None and deps.compactor.result_too_large(chars, window):
        text = (
            f"{call.tool.name} produced about {chars // 4:,} tokens of output, more than the "
            f"context window ({window:,} tokens) can hold alongside the conversation. "
            "Ask for less: read a range of lines, filter or page the command's output, or "
            "search more specifically."
        )
        content, output = text, ToolOutput(text, is_error=True, display=(TextDisplay(text),))
    # The tool has done its work: from here on a cancel changes nothing of its outcome.
    await finish(
        deps,
        call,
        ToolResultBlock(tool_use_id=call.use.id, content=content, is_error=output.is_error),
        ToolCallUpdated(
            call.use.id,
            status="failed" if output.is_error else "completed",
            content=output.display or (TextDisplay(_display_text(content)),),
            locations=output.locations,
            raw_output=output.raw_output,
        ),
    )


async def finish(
    deps: TurnDeps, call: ToolCall, result: ToolResultBlock, final: ToolCallUpdated
) -> None:
    """Give `call` its result and report its final status, as one step a cancel cannot
    split: the result and the update the client sees go together, so the runner's settling
    of unfinished calls never leaves a call unreported nor reports one twice."""
    call.result = result
    with anyio.CancelScope(shield=True):
        await deps.publish(final)


async def fail(deps: TurnDeps, call: ToolCall, message: str) -> None:
    await finish(
        deps,
        call,
        _error_result(call.use.id, message),
        ToolCallUpdated(call.use.id, status="failed", content=(TextDisplay(message),)),
    )


def mode_changed(was: str, now: str) -> str:
    """Why a call is refused or asked about: the session's mode is not the one its turn
    started under."""
    return f"the session's permission mode changed from {was} to {now} while this task ran"


async def fail_mode_changed(
    deps: TurnDeps, call: ToolCall, was: str, now: str, reason: str
) -> None:
    """Fail `call` for the mode it now meets, saying so in its result and in its title (a
    subagent's progress shows each call by its title)."""
    message = f"{mode_changed(was, now)}: {reason}"
    title = f"{call.view.title} (refused: the mode is now {now})"
    await finish(
        deps,
        call,
        _error_result(call.use.id, message),
        ToolCallUpdated(call.use.id, status="failed", title=title, content=(TextDisplay(message),)),
    )


async def settle_cancelled(deps: TurnDeps, call: ToolCall, reason: str = "") -> None:
    """A call the turn stopped before it finished: an error result, and `failed`; what the
    tool had produced stays, in both (`reason`: why it was stopped, if not the user's
    cancel)."""
    text, shown = reason or CANCELLED_RESULT_TEXT, "Cancelled."
    display: tuple[TextDisplay, ...] = (TextDisplay(shown),)
    if call.partial:
        text = f"{text}; its output until then:\n{call.partial}"
        display = (TextDisplay(f"```\n{call.partial}\n```"), TextDisplay(shown))
    await finish(
        deps,
        call,
        _error_result(call.use.id, text),
        ToolCallUpdated(call.use.id, status="failed", content=display),
    )


def _tool_data(call: ToolCall) -> dict[str, Any]:
    """A tool call as hooks are told of it."""
    return {"tool": {"name": call.use.name, "input": call.args, "id": call.use.id}}


def _with_note(content: str | tuple[ResultPart, ...], note: str) -> str | tuple[ResultPart, ...]:
    """`content` with what hooks added after it, marked as theirs."""
    text = f'<hook-context event="tool">\n{note}\n</hook-context>'
    if isinstance(content, str):
        return f"{content}\n\n{text}"
    return (*content, TextBlock(text=text))


def _protected(tool: Tool, args: dict[str, Any], ctx: ToolContext) -> str | None:
    """Why the call is asked every time (`Tool.protected`). A tool without the method is
    judged by its string arguments; a check that fails asks every time rather than let an
    "always" answer cover what it could not read."""
    try:
        check = tool.protected
    except AttributeError:
        return protected_in_values(args, ctx.cwd, ctx.cwd)
    try:
        return check(args, ctx)
    except Exception as exc:
        log.warning("tool_protected_check_failed", tool=tool.name, error=str(exc))
        return "its arguments could not be checked for protected paths: asked every time"


def _permission_key(tool: Tool, args: dict[str, Any]) -> policy.RuleKey:
    """The key an "always" answer is remembered under: the tool's name, `tool:detail`
    (e.g. `fetch:example.com`) so details of different tools never collide, or the
    structured rule of a `bash` command (`tools/command_key.py`), which only `bash` gives."""
    try:
        key = tool.permission_key(args)
    except Exception:
        return tool.name
    if not isinstance(key, str):
        return key
    return key if key == tool.name else f"{tool.name}:{key}"


def _error_result(tool_use_id: str, text: str) -> ToolResultBlock:
    return ToolResultBlock(tool_use_id=tool_use_id, content=_as_text(text), is_error=True)


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _as_text(text: str) -> str:
    """`text` without lone surrogates (U+FFFD in their place): a file name that is not UTF-8
    reaches Python as one (`surrogateescape`), and such a result could be neither stored nor
    sent, which would fail the turn over a name in a listing."""
    return _LONE_SURROGATE.sub("\ufffd", text)


def _cap(content: str | tuple[ResultPart, ...]) -> str | tuple[ResultPart, ...]:
    if isinstance(content, str):
        return _cap_text(content)
    return tuple(
        TextBlock(text=_cap_text(p.text)) if isinstance(p, TextBlock) else p for p in content
    )


def _cap_text(text: str) -> str:
    text = _as_text(text)
    if len(text) <= MAX_RESULT_CHARS:
        return text
    half = MAX_RESULT_CHARS // 2
    cut = len(text) - 2 * half
    return f"{text[:half]}\n[... {cut} characters truncated ...]\n{text[-half:]}"


def _display_text(content: str | tuple[ResultPart, ...]) -> str:
    if isinstance(content, str):
        return content
    parts = []
    for p in content:
        if isinstance(p, TextBlock):
            parts.append(p.text)
        elif isinstance(p, JsonPart):
            parts.append(json.dumps(p.value, indent=2))
    return "\n".join(parts)
