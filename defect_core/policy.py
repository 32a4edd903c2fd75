"""Permission policy: which tool calls run, which are refused, which ask the user.

Owns the permission modes (exposed as ACP modes and as the `mode` config option), the
decision for one call, and the "always" rules a user grants during a session.

Modes:
- `ask` (default): read-only tools run; anything else asks.
- `accept-edits`: read-only tools and file edits (tool kind `edit`) run; commands and
  destructive tools ask.
- `read-only`: only read-only tools run; anything else is refused with a message the model
  sees (no question is asked).
- `yolo`: everything runs, protected paths included.

A call that touches a protected path (`defect_core/tools/protected.py`: files that configure
code execution, such as `.git/`, `.defect/`, `.mcp.json`, editor tasks, CI definitions) is
asked every time in `ask` and `accept-edits`, whatever was answered "always" before, and its
question offers only the once options (`ONCE_OPTIONS`): no "always" answer can cover it.
docs/permissions.md describes the model as a whole.

Invariants:
- A remembered "reject always" wins over every mode except `read-only` (which refuses anyway);
  a remembered "allow always" never overrides `read-only`, and never covers a protected call.
- Rules are keyed by `Tool.permission_key(args)` (the tool name, `tool:detail`, or for `bash`
  a structured rule, `defect_core/tools/command_key.py`), so they can be persisted with the
  session and restored on load. The stored form is versioned (`RULES_VERSION`); keys stored
  by an earlier version are read only when the rule they become grants no more than they did,
  and the others are dropped and named (`RestoredRules.dropped`), never silently widened.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

from defect_core.events import PermissionOption
from defect_core.tools.base import Safety
from defect_core.tools.command_key import (
    CommandKey,
    command_key,
    legacy_rule,
    rule_from_json,
    rule_to_json,
)

ModeId = Literal["ask", "accept-edits", "read-only", "yolo"]


@dataclass(frozen=True, slots=True)
class ModeInfo:
    id: ModeId
    name: str
    description: str


MODES: tuple[ModeInfo, ...] = (
    ModeInfo("ask", "Ask", "Read freely; ask before editing files or running commands."),
    ModeInfo(
        "accept-edits", "Accept edits", "Edit files in the workspace freely; ask for commands."
    ),
    ModeInfo("read-only", "Read only", "Only read and search; refuse edits and commands."),
    ModeInfo(
        "yolo",
        "Yolo",
        "Run everything without asking, even changes to protected paths (.git/, .defect/, "
        "CI and editor configuration).",
    ),
)
DEFAULT_MODE: ModeId = "ask"
MODE_IDS: frozenset[str] = frozenset(m.id for m in MODES)

ALLOW_ONCE = "allow_once"
ALLOW_ALWAYS = "allow_always"
REJECT_ONCE = "reject_once"
REJECT_ALWAYS = "reject_always"
NOBODY_TO_ASK = "nobody_to_ask"
"""Not an option a user picks: the answer of a front end with no person at hand (`defect
exec`); the call is refused and the model told that no one was there to approve it."""

PERMISSION_OPTIONS: tuple[PermissionOption, ...] = (
    PermissionOption(ALLOW_ONCE, "Allow once", "allow_once"),
    PermissionOption(ALLOW_ALWAYS, "Always allow", "allow_always"),
    PermissionOption(REJECT_ONCE, "Reject", "reject_once"),
    PermissionOption(REJECT_ALWAYS, "Always reject", "reject_always"),
)
ONCE_OPTIONS: tuple[PermissionOption, ...] = (
    PermissionOption(ALLOW_ONCE, "Allow once", "allow_once"),
    PermissionOption(REJECT_ONCE, "Reject", "reject_once"),
)
"""What a question about a protected path offers: it is asked every time, so nothing is
remembered."""


@dataclass(frozen=True, slots=True)
class Allow:
    pass


@dataclass(frozen=True, slots=True)
class Deny:
    reason: str


@dataclass(frozen=True, slots=True)
class Ask:
    protected: str | None = None
    """Why this call is asked every time (a protected path it touches), or None."""

    @property
    def options(self) -> tuple[PermissionOption, ...]:
        """What the question offers: only the once options for a protected call."""
        return ONCE_OPTIONS if self.protected else PERMISSION_OPTIONS


Decision = Allow | Deny | Ask


RuleKey = str | CommandKey
"""What a rule is remembered under: a tool's name or `tool:detail`, or a `bash` rule."""

RULES_VERSION = 2
"""The stored form: `{"version": 2, "allowed": [...], "rejected": [...]}`, each entry a
string key or a `bash` rule object (`command_key.rule_to_json`). Version 1 had no
`version` and only strings, `bash:<prefix or command>` for commands."""


@dataclass
class PermissionRules:
    """The "always" answers a user gave in this session."""

    allowed: set[RuleKey] = field(default_factory=set)
    rejected: set[RuleKey] = field(default_factory=set)

    def remember(self, key: RuleKey, allow: bool) -> None:
        (self.allowed if allow else self.rejected).add(key)
        (self.rejected if allow else self.allowed).discard(key)

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": RULES_VERSION,
            "allowed": _stored(self.allowed),
            "rejected": _stored(self.rejected),
        }


@dataclass(frozen=True, slots=True)
class RestoredRules:
    rules: PermissionRules
    dropped: tuple[str, ...]
    """Stored "always" answers not restored, as the user would recognise them."""


def restore_rules(data: dict[str, Any] | None) -> RestoredRules:
    """The rules of a stored `to_dict` of this or an earlier version."""
    data = data if isinstance(data, dict) else {}
    version = data.get("version", 1)
    rules, dropped = PermissionRules(), []
    for allow, entries in ((True, data.get("allowed")), (False, data.get("rejected"))):
        for entry in entries if isinstance(entries, list) else ():
            key = _restored(entry, version, allow)
            if key is not None:
                rules.remember(key, allow)
            else:
                dropped.append(_shown(entry) if allow else f"{_shown(entry)} (always reject)")
    return RestoredRules(rules, tuple(dropped))


def _restored(entry: Any, version: Any, allow: bool) -> RuleKey | None:
    if version == 1 and isinstance(entry, str):
        if not entry.startswith("bash:"):
            return entry
        # An allowance is kept only as a rule that grants no more than the old key did; a
        # refusal as the rule its words give (refusing fewer commands only makes defect ask).
        text = entry.removeprefix("bash:")
        return legacy_rule(text) if allow else command_key(text)
    if version != RULES_VERSION:
        return None
    if isinstance(entry, str):
        return None if entry.startswith("bash:") else entry
    return rule_from_json(entry)


def _shown(entry: Any) -> str:
    if isinstance(entry, str):
        return entry.removeprefix("bash:")
    if isinstance(entry, dict):
        for name in ("command", "program"):
            if isinstance(entry.get(name), str):
                return str(entry[name])
    return json.dumps(entry)[:80]


def _stored(keys: set[RuleKey]) -> list[Any]:
    entries = [k if isinstance(k, str) else rule_to_json(k) for k in keys]
    return sorted(entries, key=lambda e: json.dumps(e, sort_keys=True))


def decide(
    mode: str,
    safety: Safety,
    kind: str,
    key: RuleKey,
    rules: PermissionRules,
    protected: str | None = None,
) -> Decision:
    """The decision for one call, before anyone is asked. `protected` is why the call is
    asked every time (`Tool.protected`), or None: outside `yolo` such a call is asked even
    when a rule or the mode would allow it (a refusal still wins)."""
    if safety is Safety.READ_ONLY:
        return Allow()
    if mode == "read-only":
        return Deny(
            "refused: the session is in read-only mode, so tools that change files or run "
            "commands are not available. Ask the user to switch modes if this is needed."
        )
    if key in rules.rejected:
        return Deny("refused: the user has chosen to always reject this action in this session.")
    if mode == "yolo":
        return Allow()
    if protected:
        return Ask(protected)
    if key in rules.allowed:
        return Allow()
    if mode == "accept-edits" and kind == "edit" and safety is Safety.MUTATING:
        return Allow()
    return Ask()


def is_known_mode(mode_id: str) -> bool:
    return mode_id in MODE_IDS
