"""The system prompt: who defect is, where it runs, and the project's own instructions.

Owns `build_system_prompt`: a base prompt for a coding agent, an environment section
(platform, working directory, date, whether files and commands go through the editor) and
the project's `AGENTS.md` files from the repository root down to the working directory; and
`Frontend`, the description of the front end that section reads (defined here, below the
session door that re-exports it, so the prompt never imports the session package above it).

Invariant: the prompt is built from the session's cwd and front end only, once per session
(and again when the session is loaded), so requests stay cache-friendly: the prefix does not
change from one request to the next.
"""

from __future__ import annotations

import datetime as _dt
import platform
from dataclasses import dataclass
from pathlib import Path

BASE_PROMPT = """\
You are defect, a coding agent working inside the user's editor. You help with software
engineering tasks in the user's workspace: reading and searching code, editing files, running
commands, and explaining what you find.

How to work:
- Look before you change: read the relevant files and search the code first.
- Prefer small, precise edits (edit_file) over rewriting whole files.
- Paths are relative to the workspace root unless absolute; stay inside the workspace.
- Run the project's own tests or checks after a change when you can, and report the result.
- Tool calls may be refused by the user or by the session's mode; when that happens, do not
  retry the same call: explain what you needed and continue with what you can do.
- Be concise. Say what you did and what you found; quote file paths so the user can open them.
"""


@dataclass(frozen=True, slots=True)
class Frontend:
    """How the session is reached; feeds the system prompt's environment section."""

    name: str = "acp"
    client_name: str | None = None
    fs_delegated: bool = False
    terminal_delegated: bool = False


AGENTS_FILE = "AGENTS.md"
MAX_AGENTS_CHARS = 20_000


def build_system_prompt(cwd: Path, frontend: Frontend, today: _dt.date | None = None) -> str:
    today = today or _dt.date.today()
    fs = "through the editor (its open buffers)" if frontend.fs_delegated else "directly on disk"
    shell = "in the editor's terminal" if frontend.terminal_delegated else "as local processes"
    env = (
        "# Environment\n"
        f"- Platform: {platform.system()} {platform.release()}\n"
        f"- Working directory (workspace root): {cwd}\n"
        f"- Today's date: {today.isoformat()}\n"
        f"- Files are read and written {fs}; commands run {shell}.\n"
    )
    if frontend.client_name:
        env += f"- Editor: {frontend.client_name}\n"
    sections = [BASE_PROMPT, env]
    instructions = project_instructions(cwd)
    if instructions:
        sections.append("# Project instructions (AGENTS.md)\n\n" + instructions)
    return "\n".join(sections)


def project_instructions(cwd: Path) -> str:
    """The AGENTS.md files from the repository root down to `cwd`, outermost first."""
    root = _repo_root(cwd)
    chain = [cwd, *cwd.parents]
    chain = chain[: chain.index(root) + 1] if root in chain else [cwd]
    texts = []
    budget = MAX_AGENTS_CHARS
    for directory in reversed(chain):
        path = directory / AGENTS_FILE
        try:
            text = path.read_text(encoding="utf-8", errors="replace").strip()
        except OSError:
            continue
        if not text:
            continue
        text = text[:budget]
        budget -= len(text)
        texts.append(f"## {path.relative_to(root) if root in path.parents else path}\n\n{text}")
        if budget <= 0:
            break
    return "\n\n".join(texts)


def _repo_root(cwd: Path) -> Path:
    for directory in [cwd, *cwd.parents]:
        if (directory / ".git").exists():
            return directory
    return cwd
