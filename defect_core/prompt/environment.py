"""Where the session runs: platform, shell, date, and the state of its git repository.

Owns `Environment`, `GitFacts` and `gather_environment`, the facts the system prompt's
environment section states.

Invariants:
- Gathering never fails and never hangs: each `git` command runs with a timeout, without a
  shell, through `safe_git.run_git` (which never takes the user's index lock and lets the
  repository run no program: no fsmonitor, filter, pager, hook...) and with its output
  bounded; a missing `git`, a directory outside any repository, a configuration that cannot
  be overridden, or a command that times out simply leaves the fact out. Where no `.git`
  lies in or above the directory, git is not even started (an inherited `GIT_DIR` is
  ignored, as `safe_git` drops it).
- It runs off the `session/new` path (the session starts it on a worker thread and awaits it
  before its first request), because editors wait on `session/new` and `git status` in a big
  repository takes time.
- The facts are gathered once per session: the system prompt they feed stays byte-identical
  from one request to the next, which is what prompt caching needs.
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import time
from dataclasses import dataclass
from pathlib import Path

from defect_core.safe_git import run_git

GIT_BUDGET_SECONDS = 3.0
"""All git commands of one gathering share this budget; past it the facts are left out."""
MAX_STATUS_LINES = 20
RECENT_COMMITS = 5
MAX_LINE_CHARS = 200
LOCAL_SHELL = "/bin/bash" if os.path.exists("/bin/bash") else "/bin/sh"
"""The shell local commands run through (the same choice as `tools/backends.py`)."""


@dataclass(frozen=True, slots=True)
class GitFacts:
    """A repository's state when the session started, each part already bounded."""

    root: Path
    branch: str | None
    """The current branch; None when HEAD is detached or the repository has no commit."""
    status: tuple[str, ...]
    """`git status --short` lines, at most MAX_STATUS_LINES."""
    status_omitted: int
    """How many status lines were left out."""
    recent_commits: tuple[str, ...]
    """`git log --oneline` of the last RECENT_COMMITS commits."""


@dataclass(frozen=True, slots=True)
class Environment:
    cwd: Path
    platform: str
    shell: str
    today: _dt.date
    git: GitFacts | None = None


def gather_environment(
    cwd: Path, *, shell: str | None = None, today: _dt.date | None = None
) -> Environment:
    """The facts about `cwd` (blocking: call it from a worker thread)."""
    return Environment(
        cwd=cwd,
        platform=f"{platform.system()} {platform.release()}".strip(),
        shell=shell or LOCAL_SHELL,
        today=today or _dt.date.today(),
        git=git_facts(cwd),
    )


def git_facts(cwd: Path) -> GitFacts | None:
    """The repository `cwd` is in, or None (not a repository, no git, or git too slow)."""
    if not _may_be_in_repository(cwd):
        return None
    deadline = time.monotonic() + GIT_BUDGET_SECONDS
    top = _git(cwd, deadline, "rev-parse", "--show-toplevel")
    if not top:
        return None
    branch = _git(cwd, deadline, "symbolic-ref", "--quiet", "--short", "HEAD")
    has_commit = _git(cwd, deadline, "rev-parse", "--verify", "--quiet", "HEAD") is not None
    status_out = _git(cwd, deadline, "status", "--short", "--untracked-files=normal")
    status_lines = [line for line in (status_out or "").splitlines() if line.strip()]
    log_out = (
        _git(cwd, deadline, "log", f"-{RECENT_COMMITS}", "--oneline", "--no-decorate")
        if has_commit
        else ""
    )
    return GitFacts(
        root=Path(top.strip()),
        branch=(branch.strip() or None) if branch and has_commit else None,
        status=tuple(_clip(line) for line in status_lines[:MAX_STATUS_LINES]),
        status_omitted=max(0, len(status_lines) - MAX_STATUS_LINES),
        recent_commits=tuple(_clip(line) for line in (log_out or "").splitlines() if line),
    )


def _may_be_in_repository(cwd: Path) -> bool:
    """False only where git would surely find no repository: no `.git` in `cwd` or above
    it, by its path as given or resolved (git walks the resolved one). Saves spawning git (a
    few milliseconds a first prompt may wait on) outside repositories."""
    for start in {os.path.abspath(cwd), os.path.realpath(cwd)}:
        current = start
        while True:
            if os.path.lexists(os.path.join(current, ".git")):
                return True
            parent = os.path.dirname(current)
            if parent == current:
                break
            current = parent
    return False


def _git(cwd: Path, deadline: float, *args: str) -> str | None:
    """One git command's stdout, or None when it failed, timed out or git is missing."""
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        return None
    try:
        done = run_git(cwd, *args, timeout=remaining)
    except OSError:
        return None
    if done.returncode != 0:
        return None
    return done.stdout[:65_536].decode("utf-8", errors="replace")


def _clip(line: str) -> str:
    return line if len(line) <= MAX_LINE_CHARS else line[: MAX_LINE_CHARS - 1] + "…"
