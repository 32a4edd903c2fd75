"""The system prompt: what it says about the environment, the tools and the instructions.

The assembled prompt is pinned by a snapshot (`tests/snapshots/system_prompt.md`; rewrite it
with `DEFECT_UPDATE_SNAPSHOTS=1` after a deliberate change and review the diff). The facts
behind it are gathered from real git repositories with the real `git`, and through the real
`defect acp` process: the prompt reaches the provider, stays byte-identical from one request
to the next, and `session/new` never waits for `git`.
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
import subprocess
from pathlib import Path

import anyio
import pytest

from defect_core.catalog.skills import Skill
from defect_core.prompt import Frontend, build_system_prompt, gather_prompt_facts
from defect_core.prompt.environment import (
    MAX_STATUS_LINES,
    Environment,
    GitFacts,
    gather_environment,
    git_facts,
)
from defect_core.prompt.instructions import (
    MAX_INSTRUCTION_CHARS,
    InstructionFile,
    project_instructions,
    user_instructions,
)
from defect_core.session.toolset import default_tools
from defect_fakeapi import DEFAULT_API_KEY, FakeProvider, Reply
from tests.support.acp_harness import agent_env, spawn_defect

SNAPSHOT = Path(__file__).parent / "snapshots" / "system_prompt.md"
GIT = shutil.which("git")
needs_git = pytest.mark.skipif(GIT is None, reason="git is not installed")


def _git(cwd: Path, *args: str) -> None:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "A",
        "GIT_AUTHOR_EMAIL": "a@example.com",
        "GIT_COMMITTER_NAME": "A",
        "GIT_COMMITTER_EMAIL": "a@example.com",
        "GIT_CONFIG_GLOBAL": os.devnull,
    }
    subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True)


def _repo(path: Path, branch: str = "feature/prompt") -> Path:
    path.mkdir(parents=True, exist_ok=True)
    _git(path, "init", "-q", "-b", "main")
    (path / "README.md").write_text("hello\n")
    _git(path, "add", "README.md")
    _git(path, "commit", "-q", "-m", "First commit")
    (path / "app.py").write_text("print(1)\n")
    _git(path, "add", "app.py")
    _git(path, "commit", "-q", "-m", "Add the app")
    _git(path, "checkout", "-q", "-b", branch)
    return path


def test_the_assembled_prompt_matches_its_snapshot() -> None:
    env = Environment(
        cwd=Path("/home/user/project/src"),
        platform="Linux 6.1",
        shell="/bin/sh",
        today=dt.date(2026, 11, 25),
        git=GitFacts(
            root=Path("/home/user/project"),
            branch="feature/prompt",
            status=(" M app.py", "?? notes.txt"),
            status_omitted=3,
            recent_commits=("1a2b3c4 Add the app", "5d6e7f8 First commit"),
        ),
    )
    names = [tool.name for tool in default_tools()] + ["update_plan", "skill", "mcp__docs__lookup"]
    prompt = build_system_prompt(
        env,
        Frontend(client_name="Zed", fs_delegated=True, terminal_delegated=True),
        tool_names=names,
        project=[
            InstructionFile("src/AGENTS.md", "Use tabs in src/."),
            InstructionFile("AGENTS.md", "Run `make test` before you finish."),
        ],
        user=InstructionFile("/home/me/.config/defect/AGENTS.md", "Answer in British English."),
        skills=[Skill("release-notes", "Write release notes from git.", Path("/s"), "user")],
    )
    if os.environ.get("DEFECT_UPDATE_SNAPSHOTS") == "1":
        SNAPSHOT.write_text(prompt, encoding="utf-8")
    assert prompt == SNAPSHOT.read_text(encoding="utf-8"), (
        "the system prompt changed: review it and rerun with DEFECT_UPDATE_SNAPSHOTS=1"
    )


def test_a_prompt_names_only_the_tools_the_session_offers() -> None:
    env = Environment(Path("/w"), "Linux", "/bin/sh", dt.date(2026, 1, 1))
    prompt = build_system_prompt(env, Frontend(), tool_names=["read_file", "search"])
    assert "- read_file:" in prompt and "- search:" in prompt
    assert "- bash:" not in prompt and "mcp__" not in prompt
    assert "- Git: not a git repository" in prompt


@needs_git
def test_git_facts_give_branch_bounded_status_and_recent_commits(tmp_path: Path) -> None:
    repo = _repo(tmp_path / "repo")
    (repo / "app.py").write_text("print(2)\n")
    for n in range(MAX_STATUS_LINES + 5):
        (repo / f"new{n:02}.txt").write_text("x")
    facts = git_facts(repo / ".")
    assert facts is not None
    assert facts.root == repo.resolve()
    assert facts.branch == "feature/prompt"
    assert facts.status[0] == " M app.py"
    assert len(facts.status) == MAX_STATUS_LINES and facts.status_omitted == 6
    assert [c.split(" ", 1)[1] for c in facts.recent_commits] == ["Add the app", "First commit"]


@needs_git
def test_a_repository_without_commits_or_on_a_detached_head_has_no_branch(
    tmp_path: Path,
) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    _git(empty, "init", "-q", "-b", "main")
    facts = git_facts(empty)
    assert facts is not None and facts.branch is None and facts.recent_commits == ()
    repo = _repo(tmp_path / "repo")
    _git(repo, "checkout", "-q", "--detach")
    detached = git_facts(repo)
    assert detached is not None and detached.branch is None
    assert len(detached.recent_commits) == 2


def test_outside_a_repository_or_without_git_the_facts_are_left_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    if GIT is not None:
        assert git_facts(plain) is None
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    env = gather_environment(plain, today=dt.date(2026, 1, 1))
    assert env.git is None and env.cwd == plain


@needs_git
def test_a_repository_is_found_through_a_link_and_an_inherited_git_dir_is_ignored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Git is skipped only where it would find nothing: a directory of a repository reached
    through a link from outside it still has its facts. An inherited `GIT_DIR` names no
    repository for defect's own git (`safe_git` drops every `GIT_*` variable)."""
    repo = _repo(tmp_path / "repo")
    (repo / "pkg").mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "pkg").symlink_to(repo / "pkg")
    via_link = git_facts(outside / "pkg")
    assert via_link is not None and via_link.root == repo.resolve()
    assert via_link.branch == "feature/prompt"
    other = _repo(tmp_path / "other", branch="other-branch")
    monkeypatch.setenv("GIT_DIR", str(repo / ".git"))
    monkeypatch.setenv("GIT_WORK_TREE", str(repo))
    plain = tmp_path / "plain"
    plain.mkdir()
    assert git_facts(plain) is None
    named = git_facts(other)
    assert named is not None and named.root == other.resolve()
    assert named.branch == "other-branch"


@needs_git
def test_gathering_never_takes_the_index_lock(tmp_path: Path) -> None:
    repo = _repo(tmp_path / "repo")
    (repo / "app.py").write_text("changed\n")
    os.utime(repo / "app.py", (1, 1))  # a stale stat: plain `git status` would rewrite the index
    before = (repo / ".git" / "index").stat().st_mtime_ns
    facts = git_facts(repo)
    assert facts is not None and " M app.py" in facts.status
    assert (repo / ".git" / "index").stat().st_mtime_ns == before
    assert not (repo / ".git" / "index.lock").exists()


def test_instructions_come_nearest_first_once_each_and_within_budget(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    sub = root / "pkg" / "mod"
    sub.mkdir(parents=True)
    (root / "AGENTS.md").write_text("root rules")
    (sub / "AGENTS.md").write_text("module rules")
    (sub / "CLAUDE.md").symlink_to(sub / "AGENTS.md")  # the same file: included once
    (root / "pkg" / "CLAUDE.md").write_text("package rules")
    files = project_instructions(sub, root)
    assert [(f.label, f.text) for f in files] == [
        ("pkg/mod/AGENTS.md", "module rules"),
        ("pkg/CLAUDE.md", "package rules"),
        ("AGENTS.md", "root rules"),
    ]
    (sub / "AGENTS.md").write_text("m" * (MAX_INSTRUCTION_CHARS - 10))
    cut = project_instructions(sub, root)
    assert cut[0].truncated is False
    assert cut[1].truncated and cut[1].text == "package rules"[:10]
    assert cut[2].truncated and cut[2].text == ""
    env = Environment(sub, "Linux", "/bin/sh", dt.date(2026, 1, 1))
    prompt = build_system_prompt(env, Frontend(), project=cut)
    assert prompt.count("[cut: the instruction files exceed the prompt's budget") == 2


def test_the_users_own_instructions_come_from_the_config_directory(tmp_path: Path) -> None:
    config = tmp_path / "config"
    assert user_instructions({"XDG_CONFIG_HOME": str(config)}) is None
    (config / "defect").mkdir(parents=True)
    (config / "defect" / "AGENTS.md").write_text("Always write tests.\n")
    found = user_instructions({"XDG_CONFIG_HOME": str(config)})
    assert found is not None and found.text == "Always write tests."


@needs_git
def test_gathered_facts_feed_the_prompt(tmp_path: Path) -> None:
    repo = _repo(tmp_path / "repo")
    (repo / "AGENTS.md").write_text("Use the project's own test runner.")
    facts = gather_prompt_facts(repo, shell="/bin/zsh", today=dt.date(2026, 2, 3))
    prompt = build_system_prompt(facts.env, Frontend(), project=facts.project)
    assert "- Shell: /bin/zsh" in prompt and "- Today's date: 2026-02-03" in prompt
    assert f"- Git repository: {repo.resolve()} (branch feature/prompt)" in prompt
    assert "    ?? AGENTS.md" in prompt and "Add the app" in prompt
    assert "Use the project's own test runner." in prompt


# --- through the real process -------------------------------------------------------------


def _anthropic_env(fake: FakeProvider, **extra: str) -> dict[str, str]:
    return agent_env(
        DEFECT_PROVIDER="anthropic",
        ANTHROPIC_BASE_URL=fake.url,
        ANTHROPIC_API_KEY=DEFAULT_API_KEY,
        DEFECT_REASONING_EFFORT="off",
        **extra,
    )


def _system_text(body: dict[str, object]) -> str:
    system = body["system"]
    if isinstance(system, str):
        return system
    assert isinstance(system, list)
    return "".join(block["text"] for block in system)


@needs_git
@pytest.mark.anyio
async def test_the_provider_gets_the_same_prompt_with_repository_facts_on_every_request(
    fake_provider: FakeProvider, tmp_path: Path
) -> None:
    repo = _repo(tmp_path / "repo")
    (repo / "AGENTS.md").write_text("Prefer small functions.")
    fake_provider.enqueue(Reply.text("one"))
    fake_provider.enqueue(Reply.text("two"))
    async with spawn_defect(env=_anthropic_env(fake_provider)) as agent:
        await agent.initialize()
        sid = await agent.new_session(repo)
        await agent.prompt(sid, "first")
        await agent.prompt(sid, "second")
        agent.assert_schema_clean()
    first, second = (_system_text(r.body) for r in fake_provider.requests[-2:])
    assert first == second
    assert "(branch feature/prompt)" in first and "Add the app" in first
    assert "Prefer small functions." in first and "- bash:" in first


@pytest.mark.anyio
async def test_session_new_does_not_wait_for_git(tmp_path: Path) -> None:
    """A `git` that blocks until released: `session/new` answers first, the turn after."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    release = tmp_path / "release"
    started = tmp_path / "started"
    fake_git = bin_dir / "git"
    fake_git.write_text(
        f"#!/bin/sh\ntouch {started}\nwhile [ ! -e {release} ]; do sleep 0.05; done\nexit 1\n"
    )
    fake_git.chmod(0o755)
    path = f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"
    workspace = tmp_path / "ws"
    (workspace / ".git").mkdir(parents=True)  # git is only started where it may find one
    async with spawn_defect(env=agent_env(PATH=path)) as agent:
        await agent.initialize()
        sid = await agent.new_session(workspace)
        with anyio.fail_after(10):
            while not started.exists():  # git is running, and has not been released
                await anyio.sleep(0.02)
        assert not release.exists()
        release.touch()
        response = await agent.prompt(sid, "hello")
        assert response.stop_reason == "end_turn"
        agent.assert_schema_clean()
