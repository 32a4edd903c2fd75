"""Custom slash commands: Markdown prompts the user or the project keeps as files.

Owns `CustomCommand`, `load_commands` and `expand`. A file `review.md` in a commands
directory (`places.py`) becomes the ACP available command `/review`; one in a subdirectory,
`git/commit.md`, becomes `/git:commit`. Its header may give a `description` (shown by the
editor) and an `argument-hint`; its body is the prompt, with `$ARGUMENTS` replaced by what the
user typed after the name (or, without a placeholder, the arguments appended to it).

Invariants:
- A built-in command keeps its name: a file that would shadow it is reported and left out.
- A file that cannot be read or parsed is reported (`CatalogProblem`) and left out; the rest
  load. A file that does not really lie in its place's boundary (a link out of the project),
  or is not a regular file, or is too large, is skipped and logged once
  (`defect_core/confined.py`): a repository's command must not carry an outside file's
  content into a prompt.
- Loading is a bounded directory walk (`MAX_COMMANDS` files, `MAX_DEPTH` levels), cheap enough
  to repeat before each turn so an edited file shows up without a restart.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path

from defect_core.catalog.frontmatter import CatalogProblem, Document, read_document
from defect_core.catalog.places import Scope, catalog_places

MAX_COMMANDS = 200
MAX_DEPTH = 3
MAX_DESCRIPTION = 200
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*(:[A-Za-z0-9][A-Za-z0-9_.-]*)*$")
PLACEHOLDER = "$ARGUMENTS"


@dataclass(frozen=True, slots=True)
class CustomCommand:
    name: str
    description: str
    template: str
    path: Path
    scope: Scope
    argument_hint: str | None = None


def load_commands(
    cwd: Path | None,
    reserved: Collection[str] = (),
    env: Mapping[str, str] | None = None,
) -> tuple[list[CustomCommand], list[CatalogProblem]]:
    """The commands of both places (a project one replaces a user one), sorted by name."""
    found: dict[str, CustomCommand] = {}
    problems: list[CatalogProblem] = []
    for place in catalog_places("commands", cwd, env):
        scope, directory = place.scope, place.directory
        for path in _markdown_files(directory):
            name = ":".join(path.relative_to(directory).with_suffix("").parts)
            if not NAME_PATTERN.match(name):
                problems.append(CatalogProblem(path, f"`{name}` is not a usable command name"))
                continue
            if name in reserved:
                problems.append(CatalogProblem(path, f"`/{name}` is a built-in command"))
                continue
            loaded = read_document(path, place.boundary)
            if loaded is None:
                continue
            if isinstance(loaded, CatalogProblem):
                problems.append(loaded)
                continue
            command = _command(name, scope, loaded)
            if isinstance(command, CatalogProblem):
                problems.append(command)
            else:
                found[name] = command
    return sorted(found.values(), key=lambda c: c.name), problems


def expand(command: CustomCommand, arguments: str) -> str:
    """The prompt the command stands for, with the user's arguments in it."""
    arguments = arguments.strip()
    if PLACEHOLDER in command.template:
        return command.template.replace(PLACEHOLDER, arguments)
    if not arguments:
        return command.template
    return f"{command.template}\n\nArguments: {arguments}"


def _command(name: str, scope: Scope, document: Document) -> CustomCommand | CatalogProblem:
    fields = document.fields
    description = fields.get("description", "")
    hint = fields.get("argument-hint", fields.get("argument_hint"))
    if not isinstance(description, str):
        return CatalogProblem(document.path, "`description` must be text")
    if hint is not None and not isinstance(hint, str):
        return CatalogProblem(document.path, "`argument-hint` must be text")
    if not document.body:
        return CatalogProblem(document.path, "the command has no prompt (the file body is empty)")
    if not description:
        first = document.body.splitlines()[0].lstrip("# ").strip()
        description = first
    description = " ".join(description.split())
    if len(description) > MAX_DESCRIPTION:
        description = description[: MAX_DESCRIPTION - 1] + "…"
    label = f"{description} ({scope})" if description else f"({scope} command)"
    return CustomCommand(name, label, document.body, document.path, scope, hint)


def _markdown_files(directory: Path) -> list[Path]:
    files: list[Path] = []
    pending: list[tuple[Path, int]] = [(directory, 0)]
    while pending and len(files) < MAX_COMMANDS:
        folder, depth = pending.pop()
        try:
            entries = sorted(folder.iterdir())
        except OSError:
            continue
        for entry in entries:
            if entry.name.startswith("."):
                continue
            if entry.is_dir() and depth + 1 < MAX_DEPTH:
                pending.append((entry, depth + 1))
            elif entry.suffix == ".md" and not entry.is_dir():  # a FIFO too: refused, logged
                files.append(entry)
    return sorted(files)[:MAX_COMMANDS]
