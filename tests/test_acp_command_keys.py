"""What "always allow" for a command covers, through the real `defect acp` process.

The editor answers `allow_always` to the first, harmless command of each session and
`reject_once` to every other question; the offline model (DEFECT_SCRIPT) then runs a second
command built to run code or write outside the workspace (each creates the marker file `M`,
or writes `$HOME/.bashrc`), and the harmless one again. The second must ask (and, rejected,
never run); the harmless one must run unasked the second time. A control runs every second
command straight through bash in a copy of the workspace and sees it create its marker, so a
command that no longer does harm on this machine fails the test instead of passing it.

Stored rules: a session saved with "always" answers in the form of an earlier version is
loaded; what the new rules would not grant is dropped, with a notice the user reads when the
session opens, and the rest keeps working.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from acp import schema as s

from tests.support.acp_harness import RecordingClient, script_env, spawn_defect

pytestmark = pytest.mark.anyio

ROWS: list[tuple[str, list[str]]] = [
    ("sed -n 1p README.md", ["sed -n '1e touch M' README.md"]),
    (
        "tar -tf /dev/null",
        ["tar -cf /dev/null --checkpoint=1 --checkpoint-action=exec='touch M' README.md"],
    ),
    ("git grep hello", ["git grep --open-files-in-pager='touch M' hello"]),
    ("make test", ["make test '.SHELLFLAGS=-c \"touch M\"'"]),
    ("zip -T /dev/null", ["zip x.zip README.md -T -TT 'touch M'"]),
    ("vim --version", ["vim -es -c '!touch M' -c 'q!'"]),
    (
        "/usr/bin/git status",
        ["/usr/bin/git -c core.fsmonitor='touch M' status", "/usr/bin/git -c alias.x='!touch M' x"],
    ),
    ("git status", ["git --git-dir=docs/gd --work-tree=. status"]),
    ("git log -1", ["git log -1 --format='format:echo pwned' --output=$HOME/.bashrc"]),
    # The compound forms, keyed whole before and after.
    (
        "git status",
        [
            "git status; touch M",
            "git status && touch M",
            "git status | touch M",
            "git status $(touch M)",
            "git status `touch M`",
            "git status\ntouch M",
            "git status & touch M",
            "{ git status; touch M; }",
            "GIT_DIR=docs/gd GIT_WORK_TREE=. git status",
            "GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=core.fsmonitor GIT_CONFIG_VALUE_0='touch M' "
            "git status",
            "git -c core.fsmonitor='touch M' status",
        ],
    ),
]
PROGRAMS = ("git", "sed", "tar", "make", "zip", "vim")
REJECTED = "the user rejected this tool call"


def git(cwd: Path, *args: str, env: dict[str, str]) -> None:
    subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True)


@pytest.fixture
def place(tmp_path: Path) -> Iterator[tuple[Path, Path, dict[str, str]]]:
    """A git workspace with a README, a Makefile and a shipped git dir whose config runs
    `touch M` (docs/gd); a home of its own, so `$HOME/.bashrc` is the test's."""
    missing = [p for p in PROGRAMS if shutil.which(p) is None]
    assert not missing, f"these tests need {missing} installed"
    assert Path("/usr/bin/git").exists(), "these tests need git at /usr/bin/git"
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    home.mkdir()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("GIT_")},
        "HOME": str(home),
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.com",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.com",
    }
    (work / "README.md").write_text("# Demo\nhello from the readme\n")
    (work / "Makefile").write_text("test:\n\t@echo testing\n")
    git(work, "init", "-q", env=env)
    git(work, "add", "-A", env=env)
    git(work, "commit", "-qm", "init", env=env)
    gd = work / "docs" / "gd"
    git(work, "init", "-q", "--bare", str(gd), env=env)
    git(work, "--git-dir", str(gd), "config", "core.bare", "false", env=env)
    git(work, "--git-dir", str(gd), "config", "core.fsmonitor", "touch M", env=env)
    yield work, home, env


def marker(work: Path, home: Path) -> bool:
    return (work / "M").exists() or (home / ".bashrc").exists()


def test_every_second_command_really_runs_code_or_writes(
    place: tuple[Path, Path, dict[str, str]], tmp_path: Path
) -> None:
    """The control: run straight through bash, each second command leaves its marker."""
    work, _, env = place
    for n, command in enumerate(c for _, harmful in ROWS for c in harmful):
        copy, home = tmp_path / f"copy{n}", tmp_path / f"home{n}"
        shutil.copytree(work, copy, symlinks=True)
        home.mkdir()
        subprocess.run(
            ["bash", "-c", command],
            cwd=copy,
            env={**env, "HOME": str(home)},
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=60,
        )
        assert marker(copy, home), f"{command!r} left no marker: the test would prove nothing"


def bash(command: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": "bash", "input": {"command": command}}]}


def first_always_then_reject() -> Any:
    answered: set[str] = set()

    def answer(request: s.RequestPermissionRequest) -> str:
        if request.session_id in answered:
            return "reject_once"
        answered.add(request.session_id)
        return "allow_always"

    return answer


def final_texts(client: RecordingClient, sid: str) -> list[str]:
    """The text of each tool call's final update in `sid`, in order."""
    texts = []
    for session_id, u in client.updates:
        if session_id != sid or u.session_update != "tool_call_update":
            continue
        if u.status not in ("completed", "failed"):
            continue
        texts.append(" ".join(getattr(getattr(c, "content", None), "text", "") for c in u.content))
    return texts


async def test_always_for_a_harmless_command_never_covers_one_that_runs_code(
    place: tuple[Path, Path, dict[str, str]], tmp_path: Path
) -> None:
    work, home, _ = place
    replies: list[dict[str, Any]] = []
    for harmless, harmful in ROWS:
        replies += [bash(harmless), *(bash(c) for c in harmful), bash(harmless), {"text": "ok"}]
    client = RecordingClient(permission=first_always_then_reject())
    env = script_env(tmp_path, replies, HOME=str(home))
    async with spawn_defect(env=env, client=client) as agent:
        await agent.initialize()
        for harmless, harmful in ROWS:
            sid = await agent.new_session(work)
            assert (await agent.prompt(sid, "run them")).stop_reason == "end_turn"
            asked = [
                r.tool_call.raw_input["command"]
                for r in client.permission_requests
                if r.session_id == sid and isinstance(r.tool_call.raw_input, dict)
            ]
            assert asked == [harmless, *harmful], "each second command asks; the repeat does not"
            finals = final_texts(client, sid)
            assert len(finals) == len(harmful) + 2
            ran = [finals[0], finals[-1]]
            assert all(REJECTED not in t and "[exit code:" in t for t in ran), ran
            assert all(REJECTED in t for t in finals[1:-1]), finals
            assert not marker(work, home), f"a command of {harmful} ran unasked"
        agent.assert_schema_clean()
    assert not marker(work, home)


def stored_permissions(state: Path, sid: str) -> dict[str, Any]:
    with sqlite3.connect(state / "sessions.sqlite3") as conn:
        (text,) = conn.execute("SELECT permissions FROM sessions WHERE id = ?", (sid,)).fetchone()
    return dict(json.loads(text))


async def test_stored_answers_the_new_rules_would_not_grant_are_dropped_with_a_notice(
    place: tuple[Path, Path, dict[str, str]], tmp_path: Path
) -> None:
    work, home, _ = place
    state = tmp_path / "state"
    async with spawn_defect(env=script_env(tmp_path, [{"text": "ok"}], HOME=str(home))) as agent:
        await agent.initialize()
        sid = await agent.new_session(work)
        await agent.prompt(sid, "hello")
    # As an earlier version stored them: prefixes, one of which covered every git subcommand.
    old = {"allowed": ["bash:/usr/bin/git", "bash:git status", "bash:tar"], "rejected": []}
    with sqlite3.connect(state / "sessions.sqlite3") as conn:
        conn.execute("UPDATE sessions SET permissions = ? WHERE id = ?", (json.dumps(old), sid))

    replies = [
        bash("git status --porcelain"),
        bash("/usr/bin/git -c alias.x='!touch M' x"),
        bash("tar -tf /dev/null"),
        {"text": "done"},
    ]
    client = RecordingClient(permission=lambda _: "reject_once")
    async with spawn_defect(env=script_env(tmp_path, replies, HOME=str(home)), client=client) as a:
        await a.initialize()
        await a.conn.load_session(cwd=str(work), session_id=sid, mcp_servers=[])
        await client.wait_for(lambda: "no longer apply" in client.text(sid))
        notice = client.text(sid)
        assert "`/usr/bin/git`" in notice and "`tar`" in notice and "`git status`" not in notice
        assert (await a.prompt(sid, "run them")).stop_reason == "end_turn"
        asked = [r.tool_call.raw_input["command"] for r in client.permission_requests]
        assert asked == ["/usr/bin/git -c alias.x='!touch M' x", "tar -tf /dev/null"]
        finals = final_texts(client, sid)[-3:]
        assert REJECTED not in finals[0] and "[exit code: 0]" in finals[0]
        a.assert_schema_clean()
    assert not (work / "M").exists()
    assert stored_permissions(state, sid) == {
        "version": 2,
        "allowed": [
            {"tool": "bash", "program": "git", "words": ["status"], "arguments": "admitted"}
        ],
        "rejected": [],
    }

    client = RecordingClient()
    async with spawn_defect(env=script_env(tmp_path, [], HOME=str(home)), client=client) as a:
        await a.initialize()
        await a.conn.load_session(cwd=str(work), session_id=sid, mcp_servers=[])
        assert "no longer apply" not in client.text(sid), "told once, then stored in the new form"
        a.assert_schema_clean()
