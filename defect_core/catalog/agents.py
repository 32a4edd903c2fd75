"""Agent profiles: who `spawn_agent` may start, as Markdown files the user or the project keeps.

Owns `AgentProfile`, the built-in `general` profile (`GENERAL`) and `load_profiles`. A file
`reviewer.md` in an `agents/` directory (`places.py`: `~/.config/defect/agents/`, then
`<repo>/.defect/agents/`) is the profile `reviewer`: its body is the subagent's system prompt,
its header may give

    description = "Reviews a diff for bugs"   # shown to the model, which picks by it
    model = "claude-haiku-4-5"                # default: the parent's model
    tools = ["read_file", "search"]           # an allow-list of the parent's tools
    max_requests = 10                         # model requests the subagent may make

Invariants:
- A profile's name is 1-64 lowercase letters, digits, hyphens or underscores (the file's name);
  `general` is built in and a file of that name replaces it (a project file replaces a user
  file of any name, as for commands and skills).
- A file with a field of the wrong type, an unknown field or an empty body is reported
  (`CatalogProblem`) and left out; the rest load. A bad profile must not hide the others.
- A profile file is read only when it really lies in its place's boundary (the project, or
  the user's configuration directory), is a regular file and is small enough; any other is
  skipped and logged once (`defect_core/confined.py`). Profiles reach the model in
  `spawn_agent`'s description, and `spawn_agent` is offered even in read-only mode.
- `tools` only ever narrows: the subagent is offered the parent's tools that are on the list
  (`defect_core/agents/child.py`), never one the parent does not have.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from defect_core.catalog.frontmatter import CatalogProblem, Document, read_document
from defect_core.catalog.places import catalog_places

MAX_PROFILES = 50
MAX_DESCRIPTION = 300
NAME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
FIELDS = frozenset({"description", "model", "tools", "max_requests", "name"})


@dataclass(frozen=True, slots=True)
class AgentProfile:
    name: str
    description: str
    prompt: str
    """The subagent's system prompt."""
    model: str | None = None
    """None: the parent's model."""
    tools: tuple[str, ...] | None = None
    """None: every tool of the parent (less what depth takes away)."""
    max_requests: int | None = None
    """None: the session's `max_turn_requests`."""
    origin: str = "built-in"
    """Where it was defined: `built-in`, or the file's path."""


GENERAL = AgentProfile(
    name="general",
    description=(
        "A general-purpose agent for a self-contained task: researching a question across "
        "the workspace, or a multi-step change; it answers with a report."
    ),
    prompt=(
        "You are a subagent: another agent gave you one task. You cannot ask anyone "
        "questions, and tools that would need the user's permission are refused: work with "
        "what you are allowed to do. Do the task as well as you can with the tools you "
        "have, then answer with a concise, complete report of what you found or did — "
        "that report is all the other agent will see."
    ),
)


def load_profiles(
    cwd: Path | None, env: Mapping[str, str] | None = None
) -> tuple[list[AgentProfile], list[CatalogProblem]]:
    """The built-in profile and those of both places, sorted by name."""
    found: dict[str, AgentProfile] = {GENERAL.name: GENERAL}
    problems: list[CatalogProblem] = []
    for place in catalog_places("agents", cwd, env):
        try:
            files = sorted(
                p for p in place.directory.iterdir() if p.suffix == ".md" and not p.is_dir()
            )
        except OSError:
            continue
        for path in files[:MAX_PROFILES]:
            name = path.stem
            if not NAME_PATTERN.match(name):
                problems.append(CatalogProblem(path, f"`{name}` is not a usable profile name"))
                continue
            loaded = read_document(path, place.boundary)
            if loaded is None:
                continue
            if isinstance(loaded, CatalogProblem):
                problems.append(loaded)
                continue
            profile = _profile(name, loaded)
            if isinstance(profile, CatalogProblem):
                problems.append(profile)
            else:
                found[name] = profile
    return sorted(found.values(), key=lambda p: p.name), problems


def _profile(name: str, document: Document) -> AgentProfile | CatalogProblem:
    fields, path = document.fields, document.path
    unknown = sorted(set(fields) - FIELDS)
    if unknown:
        known = ", ".join(sorted(FIELDS - {"name"}))
        return CatalogProblem(path, f"unknown field(s) {', '.join(unknown)} (known: {known})")
    if fields.get("name", name) != name:
        return CatalogProblem(path, f"`name` ({fields['name']}) must match the file ({name})")
    description = fields.get("description", "")
    model = fields.get("model")
    tools = fields.get("tools")
    max_requests = fields.get("max_requests")
    if not isinstance(description, str):
        return CatalogProblem(path, "`description` must be text")
    if model is not None and (not isinstance(model, str) or not model.strip()):
        return CatalogProblem(path, "`model` must be a model id")
    if tools is not None and (
        not isinstance(tools, list) or not all(isinstance(t, str) and t for t in tools)
    ):
        return CatalogProblem(path, "`tools` must be a list of tool names")
    if max_requests is not None and (
        isinstance(max_requests, bool) or not isinstance(max_requests, int) or max_requests < 1
    ):
        return CatalogProblem(path, "`max_requests` must be a whole number of at least 1")
    if not document.body:
        return CatalogProblem(path, "the profile has no system prompt (the file body is empty)")
    description = " ".join(description.split()) or document.body.splitlines()[0].lstrip("# ")
    if len(description) > MAX_DESCRIPTION:
        description = description[: MAX_DESCRIPTION - 1] + "…"
    return AgentProfile(
        name=name,
        description=description,
        prompt=document.body,
        model=model.strip() if isinstance(model, str) else None,
        tools=tuple(tools) if tools is not None else None,
        max_requests=max_requests,
        origin=str(path),
    )
