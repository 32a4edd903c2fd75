"""Skills in the Agent Skills layout: `<dir>/<skill>/SKILL.md` with `name` and `description`.

Owns `Skill`, `load_skills` and `read_skill_file`. Skills live in the user's and the project's
`skills/` directories (`places.py`). Only each skill's name and description go into the system
prompt; the model reads a skill's body, and any file beside it, when it needs it, through the
`skill` tool (`defect_core/tools/skill.py`) — so a hundred skills cost a hundred lines, not a
hundred documents.

Invariants:
- A skill's `name` is 1–64 lowercase letters, digits and hyphens and matches its directory; its
  `description` is present and at most 1,024 characters (the Agent Skills rules). A skill that
  breaks them is reported (`CatalogProblem`) and left out.
- `SKILL.md` is read only when it really lies in its place's boundary (the project, or the
  user's configuration directory), is a regular file and is small enough; any other is
  skipped and logged once (`defect_core/confined.py`): a skill folder that is a link out of
  the project is no skill.
- `read_skill_file` never reads outside the skill's directory nor its place's boundary (no
  `..`, no absolute path, no link out, checked again as the file is opened), only a regular
  file, and at most `MAX_SKILL_FILE_BYTES` (a longer file is cut, with a line saying so).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from defect_core.catalog.frontmatter import CatalogProblem, read_document
from defect_core.catalog.places import Scope, catalog_places
from defect_core.confined import Refused, open_within

SKILL_FILE = "SKILL.md"
MAX_SKILLS = 100
MAX_SKILL_FILE_BYTES = 256 * 1024
MAX_LISTED_FILES = 50
NAME_PATTERN = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")


@dataclass(frozen=True, slots=True)
class Skill:
    name: str
    description: str
    directory: Path
    scope: Scope
    boundary: Path | None = None
    """What the skill's files must really lie in (its place's); None: its own directory."""


def load_skills(
    cwd: Path | None, env: Mapping[str, str] | None = None
) -> tuple[list[Skill], list[CatalogProblem]]:
    """The skills of both places (a project skill replaces a user one), sorted by name."""
    found: dict[str, Skill] = {}
    problems: list[CatalogProblem] = []
    for place in catalog_places("skills", cwd, env):
        try:
            folders = sorted(p for p in place.directory.iterdir() if p.is_dir())
        except OSError:
            continue
        for folder in folders[:MAX_SKILLS]:
            path = folder / SKILL_FILE
            loaded = read_document(path, place.boundary)
            if loaded is None:
                continue
            if isinstance(loaded, CatalogProblem):
                problems.append(loaded)
                continue
            name = loaded.fields.get("name")
            description = loaded.fields.get("description")
            if not isinstance(name, str) or len(name) > 64 or not NAME_PATTERN.match(name):
                problems.append(
                    CatalogProblem(path, "`name` must be 1-64 lowercase letters, digits, hyphens")
                )
            elif name != folder.name:
                problems.append(
                    CatalogProblem(path, f"`name` ({name}) must match its folder ({folder.name})")
                )
            elif not isinstance(description, str) or not description.strip():
                problems.append(CatalogProblem(path, "`description` is missing"))
            elif len(description) > 1024:
                problems.append(CatalogProblem(path, "`description` is over 1,024 characters"))
            else:
                found[name] = Skill(
                    name, " ".join(description.split()), folder, place.scope, place.boundary
                )
    return sorted(found.values(), key=lambda s: s.name), problems


class SkillFileError(Exception):
    """A skill file that cannot be given to the model, with the reason it can act on."""


def read_skill_file(skill: Skill, relative: str | None = None) -> str:
    """`SKILL.md` (or a file beside it) as text; a listing of the skill's other files follows
    `SKILL.md` so the model knows what else it can ask for."""
    target = relative or SKILL_FILE
    parts = Path(target).parts
    if Path(target).is_absolute() or ".." in parts or not parts:
        raise SkillFileError(f"`{target}` is not a path inside the skill `{skill.name}`")
    root = Path(os.path.realpath(skill.directory))  # realpath: a loop never raises
    path = Path(os.path.realpath(root / target))
    if root not in path.parents:
        raise SkillFileError(f"`{target}` leads outside the skill `{skill.name}`")
    try:
        fd = open_within(path, skill.boundary or root)
    except Refused as refused:
        raise SkillFileError(f"`{target}` {refused.reason}") from None
    except OSError as err:
        raise SkillFileError(f"`{target}` cannot be read: {err.strerror or err}") from err
    if fd is None:
        raise SkillFileError(f"`{target}` cannot be read: there is no such file")
    with os.fdopen(fd, "rb") as handle:
        data = handle.read(MAX_SKILL_FILE_BYTES + 1)
    text = data[:MAX_SKILL_FILE_BYTES].decode("utf-8", errors="replace")
    if len(data) > MAX_SKILL_FILE_BYTES:
        text += f"\n[cut at {MAX_SKILL_FILE_BYTES // 1024} KiB]"
    if relative in (None, SKILL_FILE):
        others = _other_files(root)
        if others:
            text += "\n\n[files in this skill, readable with the `file` argument]\n" + "\n".join(
                others
            )
    return text


def _other_files(root: Path) -> list[str]:
    listed: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            rel = os.path.relpath(os.path.join(dirpath, name), root)
            if rel != SKILL_FILE and not name.startswith("."):
                listed.append(rel)
            if len(listed) >= MAX_LISTED_FILES:
                return [*listed, "…"]
    return listed
