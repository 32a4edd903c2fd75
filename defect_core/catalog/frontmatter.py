"""A Markdown file with a header: YAML between `---` lines, or TOML between `+++` lines.

Owns `Document` and `read_document`, shared by every kind in the catalog (commands, skills,
agent profiles), so each kind validates fields, never syntax.

Invariants:
- A file without a header is a document with no fields and its whole text as the body.
- A header that does not parse, or is not a table of fields, is a `CatalogProblem` naming the
  file and the line, never an exception that escapes: one broken file must not hide the others
  nor fail a session.
- A file is read only when it really lies inside its place's boundary (the project, or the
  user's configuration directory), is a regular file and is at most `MAX_DOCUMENT_BYTES`
  (`defect_core/confined.py`); one that is not is skipped and logged once, not a problem
  of its own (`read_document` answers None, as for a file that is gone).
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from defect_core.confined import read_confined

MAX_DOCUMENT_BYTES = 256 * 1024


@dataclass(frozen=True, slots=True)
class CatalogProblem:
    """Why one file was left out, for the log and for the user."""

    path: Path
    problem: str
    line: int | None = None

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}" if self.line else str(self.path)
        return f"{where}: {self.problem}"


@dataclass(frozen=True, slots=True)
class Document:
    path: Path
    fields: dict[str, Any]
    body: str


def read_document(path: Path, boundary: Path) -> Document | CatalogProblem | None:
    """The document at `path`, which must really lie inside `boundary`; None when there is no
    file there, or one that must not be read (logged by `read_confined`)."""
    try:
        data = read_confined(path, boundary, MAX_DOCUMENT_BYTES)
    except OSError as err:
        return CatalogProblem(path, f"cannot be read: {err.strerror or err}")
    if data is None:
        return None
    text = data.decode("utf-8", errors="replace").lstrip("\ufeff")
    return parse_document(path, text)


def parse_document(path: Path, text: str) -> Document | CatalogProblem:
    lines = text.splitlines(keepends=True)
    if not lines or lines[0].strip() not in ("---", "+++"):
        return Document(path, {}, text.strip())
    fence = lines[0].strip()
    end = next((i for i in range(1, len(lines)) if lines[i].strip() == fence), None)
    if end is None:
        return CatalogProblem(path, f"the header opened with `{fence}` is never closed", 1)
    header = "".join(lines[1:end])
    body = "".join(lines[end + 1 :]).strip()
    fields = _toml(path, header) if fence == "+++" else _yaml(path, header)
    if isinstance(fields, CatalogProblem):
        return fields
    return Document(path, fields, body)


def _toml(path: Path, header: str) -> dict[str, Any] | CatalogProblem:
    try:
        return tomllib.loads(header)
    except tomllib.TOMLDecodeError as err:
        line = getattr(err, "lineno", None)
        at = line + 1 if line else None  # +1 for the `+++` line
        return CatalogProblem(path, f"the TOML header is invalid: {err}", at)


def _yaml(path: Path, header: str) -> dict[str, Any] | CatalogProblem:
    import yaml  # only when a catalog file is read: off the startup path

    try:
        loaded = yaml.safe_load(header)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        line = mark.line + 2 if mark is not None else None  # +1 for 1-based, +1 for `---`
        problem = getattr(err, "problem", None) or str(err)
        return CatalogProblem(path, f"the YAML header is invalid: {problem}", line)
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        return CatalogProblem(path, "the header must be a set of `key: value` fields", 2)
    return {str(key): value for key, value in loaded.items()}
