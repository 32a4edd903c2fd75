"""`HookEngine`: the hooks of one session, fired at the moments the session and the turn name.

Owns the dispatch of one event to every hook that applies (the configured ones in their
configuration order — user file first, then the project's — and then the built-in ones), and
how their answers combine into one `Verdict`. The callers decide what a verdict does at their
moment: `defect_core/turn/__init__.py` lists the turn's (`user_prompt`, `before_request`,
`before_tool`, `after_tool`, `before_turn_end`), the session fires `session_start` and hands
the compactor `before_compact` / `after_compact` (`defect_core/session/state.py`).

Combining:
- the first `deny` wins and stops the event's remaining hooks (its reason is the verdict's);
- otherwise any `allow` makes the verdict `allow`;
- every context is kept, in order, and joined;
- a built-in's `stop` and `announce` travel in the verdict as they are.

Invariants:
- Untrusted hooks (a project's own hooks the user's configuration does not trust) never run
  and are logged once when the session starts (the configuration leaves an untrusted
  project's hooks out altogether, and the session's notice lists them: `config/trust.py`).
- A hook that fails or times out is skipped (`runner.py`); an exception in a built-in hook is
  logged and skipped too. Firing an event never raises, except to let a cancel through.
- Firing an event no hook listens to costs nothing (no process, no JSON).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import anyio

from defect_core.child_env import DEFAULT_POLICY, EnvPolicy
from defect_core.hooks.runner import HookOutcome, run_command
from defect_core.hooks.spec import HookEvent, HookSpec
from defect_core.log import get_logger

__all__ = ["BuiltinHook", "HookEngine", "HookOutcome", "Verdict"]

log = get_logger("defect.hooks")

BuiltinHook = Callable[[dict[str, Any]], Awaitable[HookOutcome | None]]
"""An in-process hook: given the event's description, its outcome (None: nothing to say)."""


@dataclass(frozen=True, slots=True)
class Verdict:
    """What the hooks of one event said, together."""

    decision: Literal["allow", "deny"] | None = None
    reason: str = ""
    contexts: tuple[str, ...] = ()
    stop: Literal["max_turn_requests"] | None = None
    announce: str = ""

    @property
    def denied(self) -> bool:
        return self.decision == "deny"

    @property
    def context(self) -> str:
        return "\n\n".join(self.contexts)


class HookEngine:
    """The hooks of one session: its configured ones and the built-ins it has registered."""

    def __init__(
        self,
        specs: Sequence[HookSpec],
        *,
        session_id: str,
        cwd: Path,
        env: EnvPolicy = DEFAULT_POLICY,
    ) -> None:
        self.session_id = session_id
        self.cwd = cwd
        self.env = env
        """What a hook's process does not inherit of defect's environment (`child_env.py`)."""
        self._specs = tuple(s for s in specs if s.trusted)
        self._untrusted = tuple(s for s in specs if not s.trusted)
        self._builtins: dict[HookEvent, list[BuiltinHook]] = {}
        for spec in self._untrusted:
            log.warning(
                "hook_untrusted",
                hook=spec.label,
                origin=spec.origin,
                fix="trust the project: /trust, or trusted_projects in the user configuration",
            )

    # --- built-in hooks -----------------------------------------------------------------------

    def add_builtin(self, event: HookEvent, hook: BuiltinHook) -> None:
        self._builtins.setdefault(event, []).append(hook)

    def remove_builtin(self, event: HookEvent, hook: BuiltinHook) -> None:
        hooks = self._builtins.get(event, [])
        if hook in hooks:
            hooks.remove(hook)

    # --- firing -------------------------------------------------------------------------------

    def listens(self, event: HookEvent, tool: str | None = None) -> bool:
        return bool(self._builtins.get(event)) or any(
            s.event == event and s.matches(tool) for s in self._specs
        )

    async def fire(
        self, event: HookEvent, data: dict[str, Any] | None = None, *, tool: str | None = None
    ) -> Verdict:
        """Run every hook of `event` (for `tool`, on the tool events) and combine their
        answers (the module docstring says how)."""
        if not self.listens(event, tool):
            return Verdict()
        payload = {"event": event, "session_id": self.session_id, "cwd": str(self.cwd)}
        payload.update(data or {})
        outcomes: list[HookOutcome] = []
        for spec in self._specs:
            if spec.event != event or not spec.matches(tool):
                continue
            if spec.prompt is not None:
                outcome: HookOutcome | None = HookOutcome(context=spec.prompt)
            else:
                outcome = await run_command(spec, payload, self.cwd, self.session_id, self.env)
                log.info("hook_ran", hook=spec.label, answered=outcome is not None)
            if outcome is not None:
                outcomes.append(outcome)
                if outcome.decision == "deny":
                    return _combine(outcomes)
        for hook in list(self._builtins.get(event, ())):
            try:
                outcome = await hook(payload)
            except anyio.get_cancelled_exc_class():
                raise
            except Exception:
                log.exception("builtin_hook_failed", hook_event=event)
                continue
            if outcome is not None:
                outcomes.append(outcome)
                if outcome.decision == "deny":
                    break
        return _combine(outcomes)


def _combine(outcomes: list[HookOutcome]) -> Verdict:
    decision: Literal["allow", "deny"] | None = None
    reason = ""
    for outcome in outcomes:
        if outcome.decision == "deny":
            decision, reason = "deny", outcome.reason
            break
        if outcome.decision == "allow":
            decision = "allow"
    stop = next((o.stop for o in outcomes if o.stop is not None), None)
    return Verdict(
        decision=decision,
        reason=reason,
        contexts=tuple(o.context for o in outcomes if o.context),
        stop=stop,
        announce="\n".join(o.announce for o in outcomes if o.announce),
    )
