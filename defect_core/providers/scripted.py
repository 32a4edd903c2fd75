"""The offline model: deterministic, no network, no key.

Owns `ScriptedProvider`, which answers model requests either from a script file
(`DEFECT_SCRIPT`) or, with no script, with a small built-in demo behaviour good enough for
`make run`: it looks around the workspace with the tools it is offered, writes a note when
asked to, runs a command when asked to, keeps a plan (`update_plan`) step by step when asked
to plan, streams slowly when asked to count, then answers. Given a goal (`/goal`, `defect exec
--goal`: the `goal_done` tool is offered), it does one step of work towards the objective (as
it would for that prompt), then calls `goal_done`: goal mode end to end, offline.

Script format (JSON): either a list of replies or `{"replies": [...], "loop": false}`; one
reply is used per model request, in order. With `"loop": true` the script starts over when it
runs out (a long-running test or demo; leave tool call ids out then, so every call gets a fresh
one). A reply is an object with any of:

    {"thinking": "…",                 # streamed as thinking, with a signature
     "text": "…",                     # streamed word by word
     "tool_calls": [{"name": "read_file", "input": {"path": "README.md"}, "id": "optional"}],
     "stop_reason": "end_turn",       # default: tool_use when tool_calls, else end_turn
     "usage": {"input_tokens": 10, "output_tokens": 5},
     "delay_ms": 0,                   # before the first chunk
     "chunk_delay_ms": 0,             # between chunks
     "error": {"message": "…", "kind": "overloaded", "retryable": true, "retry_after": 0.1,
               "after_chunks": 0}}    # fail (after that many chunks) instead of completing

When a script that does not loop runs out, every further request answers "(the script has no
more replies)".

Subagents (`spawn_agent`, `defect_core/agents/`) ask through the same provider. A script
addresses them by profile name: `{"replies": [...], "agents": {"general": [...]}}` — a request
of the subagent `general` (foreground or background) takes the next reply of its own list, so
the order of parent and child requests never matters; an agent without a list of its own takes
from `replies`. Lists of agents never loop.

Invariant: like every provider, a stream ends in exactly one `Completed` or raises
`ProviderError`; tool inputs are streamed as JSON fragments before the call completes.
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from collections.abc import AsyncGenerator, AsyncIterator
from pathlib import Path
from typing import Any

import anyio

from defect_core.history import estimate_message_tokens, overhead_tokens
from defect_core.model import (
    ContentBlock,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    part_to_dict,
)
from defect_core.providers.base import (
    Completed,
    ModelInfo,
    ModelRequest,
    ProviderError,
    StopReason,
    StreamChunk,
    TextDelta,
    ThinkingDelta,
    ToolInputDelta,
    ToolUseStarted,
    Usage,
)
from defect_core.summary_brief import SUMMARY_INSTRUCTIONS

OFFLINE_MODELS = (
    ModelInfo(
        "offline",
        "Offline demo",
        "Deterministic built-in model; no network, no key.",
        context_window=200_000,
    ),
)
EXHAUSTED_TEXT = "(the script has no more replies)"


class ScriptError(ValueError):
    """A script file that cannot be used; the message names the file and the problem."""


class ScriptedProvider:
    def __init__(
        self,
        script: list[dict[str, Any]] | None = None,
        *,
        loop: bool = False,
        name: str = "scripted",
        models: tuple[str, ...] = (),
        agents: dict[str, list[dict[str, Any]]] | None = None,
    ) -> None:
        self._script = list(script) if script is not None else None
        self._loop = loop
        self._position = 0
        self._agents = {name: list(replies) for name, replies in (agents or {}).items()}
        """Each subagent profile's own replies, by name (consumed from the front)."""
        self.name = name
        """The provider's configured name (`[providers.NAME]`), or `scripted`."""
        known = {m.id: m for m in OFFLINE_MODELS}
        self._models = [
            known.get(m) or ModelInfo(m, m, "Offline model (configured).", 200_000) for m in models
        ] or list(OFFLINE_MODELS)

    @classmethod
    def from_file(
        cls, path: str | Path, *, name: str = "scripted", models: tuple[str, ...] = ()
    ) -> ScriptedProvider:
        replies, loop = load_script(path)
        return cls(replies, loop=loop, name=name, models=models, agents=load_agents(path))

    def models(self) -> list[ModelInfo]:
        """The configured ids (`models`), else the one built-in `offline`."""
        return list(self._models)

    def default_model(self) -> str:
        return self._models[0].id

    async def list_models(self) -> list[ModelInfo]:
        """Offline: the live list is the configured one."""
        return self.models()

    async def stream(self, request: ModelRequest) -> AsyncGenerator[StreamChunk, None]:
        own = self._agents.get(request.agent) if request.agent else None
        if own is not None:
            reply = own.pop(0) if own else {"text": EXHAUSTED_TEXT}
        elif self._script is None:
            reply = demo_reply(request)
        elif self._position < len(self._script) or (self._loop and self._script):
            reply = self._script[self._position % len(self._script)]
            self._position += 1
        else:
            reply = {"text": EXHAUSTED_TEXT}
        async for chunk in _play(reply, request):
            yield chunk


def load_script(path: str | Path) -> tuple[list[dict[str, Any]], bool]:
    """The script's replies, and whether it loops."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ScriptError(f"cannot read the offline model's script {path}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise ScriptError(
            f"the offline model's script {path} is not JSON: line {exc.lineno}: {exc.msg}"
        ) from None
    replies = data.get("replies") if isinstance(data, dict) else data
    if not isinstance(replies, list) or not all(isinstance(r, dict) for r in replies):
        raise ScriptError(
            f"the offline model's script {path} must be a list of reply objects "
            'or {"replies": [...]}'
        )
    loop = data.get("loop", False) if isinstance(data, dict) else False
    if not isinstance(loop, bool):
        raise ScriptError(f'the offline model\'s script {path}: "loop" must be true or false')
    return replies, loop


def load_agents(path: str | Path) -> dict[str, list[dict[str, Any]]]:
    """The script's lists of replies per subagent (`"agents"`), checked; `load_script` has
    read the file already, so only the shape can be wrong here."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    agents = data.get("agents", {}) if isinstance(data, dict) else {}
    if not isinstance(agents, dict) or not all(
        isinstance(replies, list) and all(isinstance(r, dict) for r in replies)
        for replies in agents.values()
    ):
        raise ScriptError(
            f'the offline model\'s script {path}: "agents" must map profile names to lists of '
            "reply objects"
        )
    return {str(name): list(replies) for name, replies in agents.items()}


async def _play(reply: dict[str, Any], request: ModelRequest) -> AsyncIterator[StreamChunk]:
    chunk_delay = float(reply.get("chunk_delay_ms", 0)) / 1000
    spec = reply.get("error")
    error = _scripted_error(spec) if isinstance(spec, dict) else None
    fail_after = int(spec.get("after_chunks", 0)) if isinstance(spec, dict) else 0
    sent = 0

    async def pace() -> None:
        nonlocal sent
        if error is not None and sent >= fail_after:
            raise error
        sent += 1
        if chunk_delay:
            await anyio.sleep(chunk_delay)
        else:
            await anyio.lowlevel.checkpoint()

    if delay := float(reply.get("delay_ms", 0)) / 1000:
        await anyio.sleep(delay)

    blocks: list[ContentBlock] = []
    if thinking := reply.get("thinking"):
        for piece in _pieces(str(thinking)):
            await pace()
            yield ThinkingDelta(piece)
        signature = hashlib.sha256(str(thinking).encode()).hexdigest()
        blocks.append(ThinkingBlock(thinking=str(thinking), signature=signature))
    if text := reply.get("text"):
        for piece in _pieces(str(text)):
            await pace()
            yield TextDelta(piece)
        blocks.append(TextBlock(text=str(text)))
    for call in reply.get("tool_calls") or []:
        call_id = str(call.get("id") or f"toolu_{uuid.uuid4().hex[:24]}")
        name = str(call["name"])
        raw = json.dumps(call.get("input", {}))
        await pace()
        yield ToolUseStarted(call_id, name)
        for i in range(0, len(raw), 16):
            yield ToolInputDelta(call_id, raw[i : i + 16])
        blocks.append(ToolUseBlock(id=call_id, name=name, input=dict(call.get("input", {}))))
    if error is not None:
        raise error

    stop: StopReason = reply.get("stop_reason") or (
        "tool_use" if reply.get("tool_calls") else "end_turn"
    )
    usage = reply.get("usage") or {}
    message = Message(role="assistant", content=tuple(blocks))
    yield Completed(
        message=message,
        stop_reason=stop,
        usage=Usage(
            # Counted only when the script gives no figure: on a long history the count is
            # the costliest part of a reply.
            input_tokens=int(
                usage["input_tokens"] if "input_tokens" in usage else _prompt_tokens(request)
            ),
            output_tokens=int(
                usage["output_tokens"]
                if "output_tokens" in usage
                else estimate_message_tokens(message)
            ),
            cache_creation_input_tokens=int(usage.get("cache_creation_input_tokens", 0)),
            cache_read_input_tokens=int(usage.get("cache_read_input_tokens", 0)),
        ),
        request_id=f"offline_{uuid.uuid4().hex[:12]}",
    )


def _scripted_error(spec: dict[str, Any]) -> ProviderError:
    return ProviderError(
        str(spec.get("message", "scripted failure")),
        kind=str(spec.get("kind", "scripted")),
        retryable=bool(spec.get("retryable", False)),
        retry_after=spec.get("retry_after"),
        status=spec.get("status"),
    )


def _pieces(text: str) -> list[str]:
    """Split into word-sized chunks that join back to the exact text."""
    return re.findall(r"\S+\s*|\s+", text) or [text]


def _prompt_tokens(request: ModelRequest) -> int:
    """What a real API would count as input: system prompt, tool definitions, messages."""
    messages = sum(estimate_message_tokens(m) for m in request.messages)
    return overhead_tokens(request.system, request.tools) + messages


# --- the built-in demo behaviour ----------------------------------------------------------


GOAL_TOOL = "goal_done"
"""Offered only while a goal runs (`defect_core/tools/goal_done.py`)."""
_GOAL_PROMPT = re.compile(r"Your goal: (.*?)\n\nWork towards it", re.DOTALL)
_KEEP_WORKING = re.compile(r"Keep working towards: (.*?)\n\(Call `", re.DOTALL)
"""How `defect_core/goal.py` (`goal_prompt`, `keep_working`) words a goal's rounds."""


def demo_reply(request: ModelRequest) -> dict[str, Any]:
    """What the offline model says next, from the conversation alone (deterministic)."""
    tools = {t.name for t in request.tools}
    last = request.messages[-1] if request.messages else None
    if last is not None and last.tool_results():
        return _after_tools(last.tool_results(), request)
    if last is not None and SUMMARY_INSTRUCTIONS in last.text():
        return {"text": _demo_summary(request.messages[:-1])}
    if GOAL_TOOL in tools and not request.agent:
        return _goal_step(request, tools)
    # Consecutive user messages (a prompt after a cancelled turn) reach the model merged:
    # answer the latest thing the user said.
    texts = [b.text for b in last.content if isinstance(b, TextBlock)] if last is not None else []
    return _answer(texts[-1].strip() if texts else "", tools)


def _answer(prompt: str, tools: set[str]) -> dict[str, Any]:
    """The demo's reply to `prompt`, with `tools` offered."""
    lowered = prompt.lower()

    if "update_plan" in tools and re.search(r"\bplan\b", lowered):
        return {
            "text": "Here is my plan; I'll start by looking at the workspace.",
            "tool_calls": [
                {"name": "update_plan", "input": {"entries": _demo_plan(1)}},
                *([{"name": "search", "input": {"glob": "*"}}] if "search" in tools else []),
            ],
        }
    if re.search(r"\b(count|slow)", lowered):
        return {
            "text": " ".join(str(i) for i in range(1, 31)) + " — done counting.",
            "chunk_delay_ms": 150,
        }
    if "write_file" in tools and re.search(r"\b(note|write|edit|create)", lowered):
        return {
            "thinking": "The user wants something written down; NOTES.md is the natural place.",
            "text": "I'll write that into NOTES.md.",
            "tool_calls": [
                {
                    "name": "write_file",
                    "input": {"path": "NOTES.md", "content": _note_for(prompt)},
                }
            ],
        }
    command = re.search(r"`([^`]+)`", prompt)
    if "bash" in tools and (command or re.search(r"\b(run|test|command)", lowered)):
        cmd = command.group(1) if command else "ls -la"
        return {
            "text": f"Running `{cmd}`.",
            "tool_calls": [{"name": "bash", "input": {"command": cmd}}],
        }
    if "spawn_agent" in tools and re.search(r"\b(subagent|delegate)", lowered):
        return {
            "text": "I'll hand that to a subagent, so its exploring stays out of our context.",
            "tool_calls": [{"name": "spawn_agent", "input": {"agent": "general", "task": prompt}}],
        }
    if re.fullmatch(r"(hi|hello|hey)\b.*", lowered) or not tools:
        return {"text": f"Hello! I'm defect's offline model. You said: {prompt or '(nothing)'}"}
    if "search" in tools:
        return {
            "thinking": "Before answering, I should see what is in this workspace.",
            "text": "Let me look around the workspace first.",
            "tool_calls": [{"name": "search", "input": {"glob": "*"}}],
        }
    return {"text": f"You said: {prompt}"}


def _goal_step(request: ModelRequest, tools: set[str]) -> dict[str, Any]:
    """A goal's round: the first one works on the objective as on a prompt (then `goal_done`,
    once its tools have answered: `_after_tools`); a further one ("keep working") ends it."""
    objective = _goal_objective(request.messages)
    latest = request.messages[-1].text() if request.messages else ""
    if _KEEP_WORKING.search(latest):
        return {
            "text": "Nothing is left to do for this goal.",
            "tool_calls": [_goal_done(f"{objective}: done offline.")],
        }
    step = _answer(objective, tools - {GOAL_TOOL})
    step["text"] = f"Working towards the goal: {objective}\n\n{step.get('text', '')}"
    if not step.get("tool_calls"):  # nothing to wait for: the goal is reached now
        step["tool_calls"] = [_goal_done(f"{objective}: answered offline.")]
    return step


def _goal_objective(messages: list[Message]) -> str:
    """The objective of the goal the conversation pursues (its latest round's wording)."""
    for message in reversed(messages):
        if message.role == "user":
            for pattern in (_KEEP_WORKING, _GOAL_PROMPT):
                if found := pattern.search(message.text()):
                    return found.group(1).strip()
    return "(the goal)"


def _goal_done(summary: str) -> dict[str, Any]:
    return {"name": GOAL_TOOL, "input": {"summary": summary}}


def _after_tools(results: list[ToolResultBlock], request: ModelRequest) -> dict[str, Any]:
    goal = GOAL_TOOL in {t.name for t in request.tools} and not request.agent
    called = _last_calls(request.messages)
    if goal and GOAL_TOOL in called.values():
        return {"text": "The goal is reached."}
    plan = _last_plan(request.messages)
    if plan is not None and not any(r.is_error for r in results):
        done = sum(e.get("status") == "completed" for e in plan)
        if done < len(_DEMO_PLAN):
            return {
                "text": f"{_DEMO_PLAN[done][0]}: done.",
                "tool_calls": [{"name": "update_plan", "input": {"entries": _demo_plan(done + 2)}}],
            }
        if goal:
            summary = f"{_goal_objective(request.messages)}: every step of the plan is done."
            return {"text": "Every step of the plan is done.", "tool_calls": [_goal_done(summary)]}
        return {"text": "Every step of the plan is done."}
    lines = []
    outcomes = []
    for result in results:
        text = (
            result.content
            if isinstance(result.content, str)
            else json.dumps([part_to_dict(p) for p in result.content])
        )
        head = text.strip().splitlines()[:8]
        name = called.get(result.tool_use_id, "the tool")
        status = "failed" if result.is_error else "returned"
        outcomes.append(f"{name} {status}")
        said = (
            "The subagent reported back"
            if name == "spawn_agent" and not result.is_error
            else f"`{name}` {status}"
        )
        lines.append(f"{said}:\n" + "\n".join(f"    {h}" for h in head))
    rejected = any(r.is_error for r in results)
    if goal:
        summary = f"{_goal_objective(request.messages)}: done offline ({', '.join(outcomes)})."
        return {"text": "\n\n".join(lines), "tool_calls": [_goal_done(summary)]}
    closing = (
        "Something did not go through, so I stopped there."
        if rejected
        else "That is what I found."
        if request.agent  # a subagent reports to the agent that started it
        else "Done — tell me what to do next."
    )
    return {"text": "\n\n".join([*lines, closing])}


def _last_calls(messages: list[Message]) -> dict[str, str]:
    """The tool calls of the model's last message: id → tool name."""
    if len(messages) < 2 or messages[-2].role != "assistant":
        return {}
    return {b.id: b.name for b in messages[-2].content if isinstance(b, ToolUseBlock)}


_DEMO_PLAN = (
    ("Look at the workspace", "high"),
    ("Decide what to change", "medium"),
    ("Report back", "low"),
)


def _demo_plan(step: int) -> list[dict[str, str]]:
    """The demo's plan while working on `step` (1-based): the steps before it completed, the
    rest pending; past the last step every step is completed."""
    return [
        {
            "content": content,
            "priority": priority,
            "status": "completed" if n < step else "in_progress" if n == step else "pending",
        }
        for n, (content, priority) in enumerate(_DEMO_PLAN, start=1)
    ]


def _last_plan(messages: list[Message]) -> list[dict[str, Any]] | None:
    """The entries of the `update_plan` call in the model's last message, if it made one."""
    if len(messages) < 2 or messages[-2].role != "assistant":
        return None
    for block in messages[-2].content:
        if isinstance(block, ToolUseBlock) and block.name == "update_plan":
            entries = block.input.get("entries")
            return entries if isinstance(entries, list) else None
    return None


def _demo_summary(messages: list[Message]) -> str:
    prompts = [m.text().strip() for m in messages if m.role == "user" and m.text().strip()]
    goal = prompts[0].splitlines()[0] if prompts else "(unknown)"
    return (
        f"## Goal\n{goal}\n\n## Progress\n{len(messages)} messages so far; the user's "
        f"latest request: {prompts[-1].splitlines()[0] if prompts else '(none)'}\n\n"
        "## Next steps\nContinue from the latest request."
    )


def _note_for(prompt: str) -> str:
    return f"# Notes\n\n- {prompt.strip()}\n"
