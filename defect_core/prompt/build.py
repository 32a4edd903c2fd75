"""The system prompt: who defect is, where it runs, how to use its tools, what to follow.

Owns `build_system_prompt`, which assembles, in this order: the base prompt; the environment
(platform, shell, working directory, date, how files and commands reach the workspace, the
editor, and the git repository with its branch, a bounded `git status` and the last commits);
guidance for each tool the session offers; the user's global instructions; and the project's
`AGENTS.md` / `CLAUDE.md` files, nearest first.

Invariants:
- Pure: every fact comes in as an argument (`Environment`, the instruction files, the tool
  names), so the same inputs give the same bytes, a snapshot test pins the result
  (`tests/snapshots/system_prompt.md`), and nothing per-request (a clock, a counter) can
  slip in and break the prompt cache's prefix.
- Built once per session (and again when a session is loaded), off the `session/new` path:
  see `start_prompt_facts`.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from defect_core.catalog.skills import Skill, load_skills
from defect_core.log import get_logger
from defect_core.prompt.environment import Environment, gather_environment
from defect_core.prompt.frontend import Frontend
from defect_core.prompt.guidance import tool_guidance
from defect_core.prompt.instructions import (
    InstructionFile,
    project_instructions,
    user_instructions,
)

log = get_logger("defect.prompt")

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


def build_system_prompt(
    env: Environment,
    frontend: Frontend,
    *,
    tool_names: Sequence[str] = (),
    project: Sequence[InstructionFile] = (),
    user: InstructionFile | None = None,
    skills: Sequence[Skill] = (),
) -> str:
    sections = [BASE_PROMPT, _environment(env, frontend)]
    guidance = tool_guidance(tool_names)
    if guidance:
        sections.append("# Tools\n\n" + "\n".join(guidance) + "\n")
    if skills and "skill" in tool_names:
        listed = "\n".join(f"- {skill.name}: {skill.description}" for skill in skills)
        sections.append(
            "# Skills\n\nA skill holds instructions for one kind of task. When a task matches a "
            "skill's description, read the skill first with the `skill` tool and follow it.\n\n"
            + listed
            + "\n"
        )
    if user is not None:
        sections.append("# The user's instructions\n\n" + _file_text(user) + "\n")
    if project:
        body = "\n\n".join(f"## {f.label}\n\n{_file_text(f)}" for f in project)
        sections.append(
            "# Project instructions (nearest first: a nearer file wins over a farther one)\n\n"
            + body
            + "\n"
        )
    return "\n".join(sections)


def _environment(env: Environment, frontend: Frontend) -> str:
    fs = "through the editor (its open buffers)" if frontend.fs_delegated else "directly on disk"
    shell = "in the editor's terminal" if frontend.terminal_delegated else "as local processes"
    lines = [
        "# Environment",
        f"- Platform: {env.platform}",
        f"- Shell: {env.shell}",
        f"- Working directory (workspace root): {env.cwd}",
        f"- Today's date: {env.today.isoformat()}",
        f"- Files are read and written {fs}; commands run {shell}.",
    ]
    if frontend.client_name:
        lines.append(f"- Editor: {frontend.client_name}")
    git = env.git
    if git is None:
        lines.append("- Git: not a git repository")
        return "\n".join(lines) + "\n"
    branch = git.branch or "(no branch: detached HEAD or no commit yet)"
    lines.append(f"- Git repository: {git.root} (branch {branch})")
    lines.append("")
    lines.append("Git status when the session started (it may have changed since):")
    if git.status:
        lines += [f"    {line}" for line in git.status]
        if git.status_omitted:
            lines.append(f"    … and {git.status_omitted} more")
    else:
        lines.append("    (clean)")
    if git.recent_commits:
        lines.append("")
        lines.append("Recent commits:")
        lines += [f"    {line}" for line in git.recent_commits]
    return "\n".join(lines) + "\n"


def _file_text(file: InstructionFile) -> str:
    if not file.truncated:
        return file.text
    note = "[cut: the instruction files exceed the prompt's budget; read the file for the rest]"
    return f"{file.text}\n{note}" if file.text else note


@dataclass(frozen=True, slots=True)
class PromptFacts:
    """Everything the prompt states about the world, gathered once per session."""

    env: Environment
    project: tuple[InstructionFile, ...] = ()
    user: InstructionFile | None = None
    skills: tuple[Skill, ...] = ()


def gather_prompt_facts(
    cwd: Path, *, shell: str | None = None, today: _dt.date | None = None
) -> PromptFacts:
    """Read the environment and the instruction files (blocking: run it on a thread)."""
    env = gather_environment(cwd, shell=shell, today=today)
    root = env.git.root if env.git is not None else None
    skills, problems = load_skills(cwd)
    for problem in problems:
        log.warning("skill_skipped", problem=str(problem))
    return PromptFacts(
        env, tuple(project_instructions(cwd, root)), user_instructions(), tuple(skills)
    )


def system_prompt_from(facts: PromptFacts, frontend: Frontend, tool_names: Sequence[str]) -> str:
    return build_system_prompt(
        facts.env,
        frontend,
        tool_names=tool_names,
        project=facts.project,
        user=facts.user,
        skills=facts.skills,
    )


_GATHERERS = ThreadPoolExecutor(max_workers=2, thread_name_prefix="defect-prompt")


def start_prompt_facts(cwd: Path, *, shell: str | None = None) -> Future[PromptFacts]:
    """Start gathering on a worker thread; the session awaits the result before a request.

    `session/new` returns while `git` runs; a session that never gets a prompt never waits.
    """
    return _GATHERERS.submit(gather_prompt_facts, cwd, shell=shell)
