"""The `[hooks]` table and `trusted_projects`: which hooks a layer adds, and which may run.

Owns the parsing of a file's `[hooks]` table into `HookSpec`s (`parse_hooks`) and the check of
`trusted_projects` (`trusted_list`); whether a project's hooks apply is the project's trust
(`trust.py`). The table, in any layer:

    trusted_projects = ["~/src/myapp"]          # the user's file only: projects whose own
                                                # settings (hooks too) apply
    [[hooks.before_tool]]
    matcher = { tool = "bash" }                 # tool events only; "a|b", "*" patterns
    command = "./scripts/check-command.sh"      # /bin/sh -c, in the session's directory
    timeout = 5                                 # seconds (default 5)

    [[hooks.user_prompt]]
    prompt = "Answer in British English."       # a note added to the model's input

Invariants:
- An unknown event, an unknown entry key, neither or both of `command`/`prompt`, a matcher on
  an event that has no tool, or a `prompt` at `before_turn_end` (it would never let a turn
  end) is a `ConfigError` naming the file and the key (the line is found by `files.py`).
- Hooks of every layer are kept, in layer order (`resolve.py` appends them).
- Only the user's own file may trust a project: `trusted_projects` in a project's file is a
  `ConfigError`, so a repository can never vouch for itself. A project's hooks apply only
  when the project is trusted (`trust.py`), and are then marked `trusted`.
"""

from __future__ import annotations

from pathlib import Path

from defect_core.config.keys import Bad, type_name
from defect_core.config.settings import ConfigError
from defect_core.hooks.spec import HOOK_EVENTS, TOOL_EVENTS, HookSpec

__all__ = ["parse_hooks", "trusted_list"]

_ENTRY_KEYS = ("matcher", "command", "prompt", "timeout")


def parse_hooks(value: object, source: str, project: str | None) -> tuple[HookSpec, ...]:
    """The entries of one file's `[hooks]` table; `project` is the project root when the file
    is one of that project's own."""
    if not isinstance(value, dict):
        raise ConfigError(source, "hooks", f"must be a table ([hooks]), got {type_name(value)}")
    specs: list[HookSpec] = []
    for event, entries in value.items():
        key = f"hooks.{event}"
        if event not in HOOK_EVENTS:
            raise ConfigError(source, key, f"unknown event (events: {', '.join(HOOK_EVENTS)})")
        if not isinstance(entries, list):
            problem = f"must be an array of hook tables ([[{key}]]), got {type_name(entries)}"
            raise ConfigError(source, key, problem)
        for index, entry in enumerate(entries):
            try:
                specs.append(_entry(event, entry, source, project))
            except Bad as bad:
                raise ConfigError(source, key, f"entry {index + 1}: {bad}") from None
    return tuple(specs)


def _entry(event: str, entry: object, source: str, project: str | None) -> HookSpec:
    if not isinstance(entry, dict):
        raise Bad(f"must be a table, got {type_name(entry)}")
    for key in entry:
        if key not in _ENTRY_KEYS:
            raise Bad(f"unknown key {key!r} (known keys: {', '.join(_ENTRY_KEYS)})")
    command, prompt = entry.get("command"), entry.get("prompt")
    if (command is None) == (prompt is None):
        raise Bad("give exactly one of command (a command line) or prompt (a note)")
    for name, text in (("command", command), ("prompt", prompt)):
        if text is not None and (not isinstance(text, str) or not text.strip()):
            raise Bad(f"{name} must be a non-empty string")
    if prompt is not None and event == "before_turn_end":
        raise Bad("a prompt here would never let a turn end; use a command that decides")
    tool = None
    if "matcher" in entry:
        matcher = entry["matcher"]
        if event not in TOOL_EVENTS:
            raise Bad(f"a matcher applies to {' and '.join(TOOL_EVENTS)} only")
        if not isinstance(matcher, dict) or set(matcher) != {"tool"}:
            raise Bad('matcher must be a table { tool = "NAME" } (NAME: "a|b", "*" patterns)')
        tool = matcher["tool"]
        if not isinstance(tool, str) or not tool.strip():
            raise Bad("matcher.tool must be a non-empty string")
    timeout = entry.get("timeout", 5.0)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout <= 600:
        raise Bad("timeout must be a number of seconds, above 0 and at most 600")
    return HookSpec(
        event=event,  # type: ignore[arg-type]  # checked against HOOK_EVENTS above
        command=command,
        prompt=prompt,
        tool=tool,
        timeout=float(timeout),
        origin=source,
        project=project,
        trusted=project is None,
    )


def trusted_list(value: object) -> tuple[str, ...]:
    """`trusted_projects`: absolute paths (or `~/…`), normalised."""
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise Bad(f"must be a list of directory paths, got {type_name(value)}")
    paths: list[str] = []
    for item in value:
        path = Path(item).expanduser()
        if not path.is_absolute():
            raise Bad(f"{item!r} is not an absolute path (or ~/...)")
        paths.append(str(path.resolve()))
    return tuple(paths)
