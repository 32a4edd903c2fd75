"""What the user and the project tell the agent: instruction files, nearest first, bounded.

Owns `project_instructions` (the `AGENTS.md` / `CLAUDE.md` files from the working directory up
to the repository root) and `user_instructions` (the user's own file,
`$XDG_CONFIG_HOME/defect/AGENTS.md`, default `~/.config/defect/AGENTS.md`).

Invariants:
- Nearest first: a file in the working directory speaks before one at the repository root,
  and when the budget (`MAX_INSTRUCTION_CHARS` in all) runs out it is the farthest files that
  are cut, with a line saying so, never silently.
- The same file is included once, even when `CLAUDE.md` is a link to `AGENTS.md`.
- A project's file is read only from inside the project (the repository root, or the working
  directory outside a repository), the user's only from inside the user's configuration
  directory: a link that leads out, a FIFO, a device, anything under `/proc`, or a file over
  `MAX_FILE_BYTES` is skipped whole and logged once (`defect_core/confined.py`). These files
  reach the system prompt of the first request, before any tool call or question.
- Reading never fails the session: an unreadable or refused file is skipped.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from defect_core.confined import config_paths, read_confined

INSTRUCTION_FILES = ("AGENTS.md", "CLAUDE.md")
MAX_INSTRUCTION_CHARS = 20_000
MAX_FILE_BYTES = 256 * 1024
"""A larger instruction file is skipped, not cut: the prompt's budget is far smaller."""


@dataclass(frozen=True, slots=True)
class InstructionFile:
    label: str
    """How the prompt names the file: relative to the repository root, or absolute."""
    text: str
    truncated: bool = False


def project_instructions(
    cwd: Path, root: Path | None, budget: int = MAX_INSTRUCTION_CHARS
) -> list[InstructionFile]:
    """The instruction files from `cwd` up to `root` (the repository root), nearest first."""
    chain = [cwd, *cwd.parents]
    if root is not None and root in chain:
        chain = chain[: chain.index(root) + 1]
    else:
        chain = [cwd]
        root = None
    boundary = root if root is not None else cwd
    seen: set[str] = set()
    found: list[InstructionFile] = []
    for directory in chain:
        for name in INSTRUCTION_FILES:
            path = directory / name
            text = _read(path, boundary, seen)
            if text is None:
                continue
            label = str(path.relative_to(root)) if root is not None else str(path)
            found.append(InstructionFile(label, text))
    return _within(found, budget)


def user_instructions(env: Mapping[str, str] | None = None) -> InstructionFile | None:
    """The user's global instruction file, when there is one."""
    config_dir = config_paths(None, env)[0].parent  # beside the user's config.toml
    path = config_dir / "AGENTS.md"
    text = _read(path, config_dir, set())
    if text is None:
        return None
    [bounded] = _within([InstructionFile(str(path), text)], MAX_INSTRUCTION_CHARS // 2)
    return bounded


def _read(path: Path, boundary: Path, seen: set[str]) -> str | None:
    real = os.path.realpath(path)  # never raises, not even on a loop of links
    if real in seen:
        return None
    try:
        data = read_confined(path, boundary, MAX_FILE_BYTES)
    except OSError:
        return None
    if data is None:
        return None
    seen.add(real)
    text = data.decode("utf-8", errors="replace").strip()
    return text or None


def _within(files: list[InstructionFile], budget: int) -> list[InstructionFile]:
    kept: list[InstructionFile] = []
    for file in files:
        if budget <= 0:
            kept.append(InstructionFile(file.label, "", truncated=True))
            continue
        if len(file.text) > budget:
            kept.append(InstructionFile(file.label, file.text[:budget], truncated=True))
        else:
            kept.append(file)
        budget -= len(file.text)
    return kept
