"""defect's own `git` runs no program a repository (or an inherited `GIT_*` variable) names.

Each case arms a real repository with one way git can be made to run a command — an
fsmonitor hook, a hooks directory, a pager, an external diff, a textconv driver, a clean,
smudge or process filter (through `.gitattributes`), `core.sshCommand` and a remote helper
behind a lazy fetch, aliases, a signature check, and the same through the environment
(`GIT_EXTERNAL_DIFF`, `GIT_SSH_COMMAND`, `GIT_CONFIG_*`, `GIT_DIR`...) — each pointing to a
script that creates a marker file. The case first proves itself live: plain `git` with the
same repository and environment creates the marker (a case that could not fire would prove
nothing). Then defect's real fact gathering (`git_facts`) and its real checkpoint capture
(`Checkpointer` around a command, a blob read back, `restore`) run on it: no marker appears,
and the facts and the checkpoint still work. The last tests do the same through the real
`defect acp` process.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from defect_core.checkpoints import BlobStore, Checkpointer, restore
from defect_core.prompt.environment import git_facts
from defect_core.safe_git import GitRefused, driver_overrides, git_env, run_git
from defect_fakeapi import DEFAULT_API_KEY, FakeProvider, Reply, ToolUseBlock
from tests.support.acp_harness import RecordingClient, agent_env, script_env, spawn_defect

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")

BRANCH = "feature/safe"
MISSING = "1234567890123456789012345678901234567890"
"""A blob no repository here holds: reading it is what would start a lazy fetch."""


@dataclass
class Rig:
    root: Path
    repo: Path
    marker: Path
    mark: str
    """A script that creates the marker and fails."""
    mark_cat: str
    """A script that creates the marker and copies its input (a filter, a textconv)."""

    def git(self, *args: str) -> None:
        setup(self.repo, *args)

    def config(self, key: str, value: str) -> None:
        self.git("config", key, value)


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}


def setup(cwd: Path, *args: str) -> None:
    """The test's own git: never under the case's environment."""
    subprocess.run(["git", *args], cwd=cwd, env=_clean_env(), check=True, capture_output=True)


@pytest.fixture
def rig(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Rig:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))  # the global configuration is empty
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    marker = tmp_path / "MARKER"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    mark, mark_cat = bin_dir / "mark", bin_dir / "mark-cat"
    mark.write_text(f"#!/bin/sh\ntouch '{marker}'\nexit 1\n")
    mark_cat.write_text(f"#!/bin/sh\ntouch '{marker}'\nexec cat \"$@\"\n")
    for script in (mark, mark_cat):
        script.chmod(0o755)
    repo = tmp_path / "repo"
    repo.mkdir()
    setup(repo, "init", "-q", "-b", "main")
    setup(repo, "config", "user.name", "T")
    setup(repo, "config", "user.email", "t@example.invalid")
    (repo / "tracked.txt").write_text("tracked, committed\n")
    (repo / "dirty.txt").write_text("committed version\n")
    (repo / "kept.txt").write_text("kept, committed\n")
    setup(repo, "add", "-A")
    setup(repo, "commit", "-qm", "First commit")
    setup(repo, "checkout", "-q", "-b", BRANCH)
    return Rig(tmp_path, repo, marker, str(mark), str(mark_cat))


# --- the cases: each arms the repository, returns the environment defect runs in and the
# --- plain git command that proves the case live (None: git runs it only on a terminal)

Arm = Callable[[Rig], tuple[dict[str, str], list[str] | None]]


def fsmonitor(rig: Rig) -> tuple[dict[str, str], list[str] | None]:
    rig.config("core.fsmonitor", rig.mark)
    return {}, ["status"]


def hooks_path(rig: Rig) -> tuple[dict[str, str], list[str] | None]:
    hooks = rig.root / "hooks"
    hooks.mkdir()
    for name in (
        "pre-commit",
        "post-checkout",
        "post-index-change",
        "reference-transaction",
        "fsmonitor-watchman",
        "pre-auto-gc",
    ):
        shutil.copy(rig.mark, hooks / name)
    rig.config("core.hooksPath", str(hooks))
    return {}, ["commit", "-q", "--allow-empty", "-m", "x"]


def pager(rig: Rig) -> tuple[dict[str, str], list[str] | None]:
    rig.config("core.pager", rig.mark)
    for command in ("status", "log", "diff", "ls-files", "config"):
        rig.config(f"pager.{command}", rig.mark)
    return {"GIT_PAGER": rig.mark, "PAGER": rig.mark}, None


def external_diff(rig: Rig) -> tuple[dict[str, str], list[str] | None]:
    rig.config("diff.external", rig.mark)
    return {}, ["diff"]


def textconv(rig: Rig) -> tuple[dict[str, str], list[str] | None]:
    (rig.repo / ".gitattributes").write_text("* diff=evil\n")
    rig.config("diff.evil.textconv", rig.mark_cat)
    rig.config("diff.evil.command", rig.mark)
    return {}, ["diff", "--no-ext-diff"]


def clean_filter(rig: Rig) -> tuple[dict[str, str], list[str] | None]:
    (rig.repo / ".gitattributes").write_text("* filter=evil\n")
    rig.config("filter.evil.clean", rig.mark_cat)
    rig.config("filter.evil.required", "true")
    return {}, ["status"]


def smudge_filter(rig: Rig) -> tuple[dict[str, str], list[str] | None]:
    (rig.repo / ".git" / "info" / "attributes").write_text("* filter=Odd.Name\n")
    rig.config("filter.Odd.Name.smudge", rig.mark_cat)
    (rig.repo / "tracked.txt").unlink()  # plain git checks it out again, through the filter
    return {}, ["checkout", "--", "tracked.txt"]


def process_filter(rig: Rig) -> tuple[dict[str, str], list[str] | None]:
    (rig.repo / ".gitattributes").write_text("* filter=evil\n")
    rig.config("filter.evil.process", rig.mark)
    return {}, ["status"]


def _promisor(rig: Rig, url: str) -> None:
    rig.config("core.repositoryformatversion", "1")
    rig.config("extensions.partialClone", "origin")
    rig.config("remote.origin.url", url)
    rig.config("remote.origin.promisor", "true")


def ssh_command(rig: Rig) -> tuple[dict[str, str], list[str] | None]:
    _promisor(rig, "ssh://example.invalid/repo.git")
    rig.config("core.sshCommand", rig.mark)
    return {}, ["cat-file", "blob", MISSING]


def remote_helper(rig: Rig) -> tuple[dict[str, str], list[str] | None]:
    _promisor(rig, f"ext::{rig.mark}")
    rig.config("protocol.allow", "always")
    rig.config("protocol.ext.allow", "always")
    return {}, ["cat-file", "blob", MISSING]


def aliases(rig: Rig) -> tuple[dict[str, str], list[str] | None]:
    for name in ("status", "log", "ls-files", "diff-files", "rev-parse", "cat-file", "config"):
        rig.config(f"alias.{name}", f"!{rig.mark}")
    rig.config("alias.symbolic-ref", f"!{rig.mark}")
    rig.config("alias.st", f"!{rig.mark}")
    return {}, ["st"]


def signature(rig: Rig) -> tuple[dict[str, str], list[str] | None]:
    """A commit that carries a signature: `git log` checks it with `gpg.program`."""
    raw = subprocess.run(
        ["git", "cat-file", "commit", "HEAD"],
        cwd=rig.repo,
        env=_clean_env(),
        check=True,
        capture_output=True,
    ).stdout
    head, _, message = raw.partition(b"\n\n")
    sig = b"gpgsig -----BEGIN PGP SIGNATURE-----\n \n iQEzBAABCAAd\n -----END PGP SIGNATURE-----"
    signed = (
        subprocess.run(
            ["git", "hash-object", "-t", "commit", "-w", "--stdin"],
            cwd=rig.repo,
            env=_clean_env(),
            input=head + b"\n" + sig + b"\n\n" + message,
            check=True,
            capture_output=True,
        )
        .stdout.decode()
        .strip()
    )
    rig.git("update-ref", "HEAD", signed)
    rig.config("gpg.program", rig.mark)
    rig.config("log.showSignature", "true")
    return {}, ["log", "--oneline", "-1"]


def env_external_diff(rig: Rig) -> tuple[dict[str, str], list[str] | None]:
    return {"GIT_EXTERNAL_DIFF": rig.mark}, ["diff"]


def env_ssh_command(rig: Rig) -> tuple[dict[str, str], list[str] | None]:
    _promisor(rig, "ssh://example.invalid/repo.git")
    return {"GIT_SSH_COMMAND": rig.mark, "GIT_SSH": rig.mark}, ["cat-file", "blob", MISSING]


def env_config(rig: Rig) -> tuple[dict[str, str], list[str] | None]:
    env = {
        "GIT_CONFIG_COUNT": "1",
        "GIT_CONFIG_KEY_0": "core.fsmonitor",
        "GIT_CONFIG_VALUE_0": rig.mark,
    }
    return env, ["status"]


def env_config_parameters(rig: Rig) -> tuple[dict[str, str], list[str] | None]:
    return {"GIT_CONFIG_PARAMETERS": f"'core.fsmonitor'='{rig.mark}'"}, ["status"]


def env_global_config(rig: Rig) -> tuple[dict[str, str], list[str] | None]:
    """The user's choice of global configuration file is kept; what it sets is overridden."""
    config = rig.root / "global.gitconfig"
    config.write_text(f'[core]\n\tfsmonitor = {rig.mark}\n[filter "g"]\n\tclean = {rig.mark_cat}\n')
    (rig.repo / ".gitattributes").write_text("* filter=g\n")
    return {"GIT_CONFIG_GLOBAL": str(config)}, ["status"]


def env_git_dir(rig: Rig) -> tuple[dict[str, str], list[str] | None]:
    """`GIT_DIR` naming another repository, one armed with an fsmonitor."""
    other = rig.root / "other"
    other.mkdir()
    setup(other, "init", "-q")
    setup(other, "-c", "user.name=T", "-c", "user.email=t@t", "commit", "-qm", "o", "--allow-empty")
    setup(other, "config", "core.fsmonitor", rig.mark)
    return {"GIT_DIR": str(other / ".git"), "GIT_WORK_TREE": str(rig.repo)}, ["status"]


CASES: dict[str, Arm] = {
    "core.fsmonitor": fsmonitor,
    "core.hooksPath": hooks_path,
    "core.pager": pager,
    "diff.external": external_diff,
    "diff.textconv": textconv,
    "filter.clean": clean_filter,
    "filter.smudge": smudge_filter,
    "filter.process": process_filter,
    "core.sshCommand": ssh_command,
    "remote helper": remote_helper,
    "alias": aliases,
    "gpg.program": signature,
    "GIT_EXTERNAL_DIFF": env_external_diff,
    "GIT_SSH_COMMAND": env_ssh_command,
    "GIT_CONFIG_COUNT": env_config,
    "GIT_CONFIG_PARAMETERS": env_config_parameters,
    "GIT_CONFIG_GLOBAL": env_global_config,
    "GIT_DIR": env_git_dir,
}


def arm(rig: Rig, case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Arm the case, prove it live with plain git, then leave the marker absent."""
    env, live = CASES[case](rig)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    (rig.repo / "dirty.txt").write_text("uncommitted edit\n")
    # Stale stat data, the content unchanged: git must read it again (through any clean
    # filter) to know it is unchanged. Again after plain git, which may refresh the index.
    if case != "filter.smudge":  # there plain git checks the file out first
        os.utime(rig.repo / "tracked.txt", (1, 1))
    if live is not None:
        subprocess.run(
            ["git", *live], cwd=rig.repo, env=dict(os.environ), capture_output=True, check=False
        )
        assert rig.marker.exists(), f"the case {case} did not fire with plain git"
        rig.marker.unlink()
    os.utime(rig.repo / "tracked.txt", (2, 2))


@pytest.mark.parametrize("case", list(CASES))
def test_the_facts_are_gathered_and_nothing_runs(
    rig: Rig, case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    arm(rig, case, monkeypatch)
    facts = git_facts(rig.repo)
    assert not rig.marker.exists()
    assert facts is not None and facts.root == rig.repo.resolve()
    assert facts.branch == BRANCH
    assert " M dirty.txt" in facts.status
    assert any(c.endswith("First commit") for c in facts.recent_commits)


@pytest.mark.parametrize("case", list(CASES))
def test_a_command_is_checkpointed_and_restored_and_nothing_runs(
    rig: Rig, case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    arm(rig, case, monkeypatch)
    blobs = BlobStore.in_state_dir(rig.root / "state")
    cp = Checkpointer(rig.repo, blobs, turn_id="t1")
    watch = cp.before_command()
    assert watch is not None
    assert watch.prior("kept.txt").kind == "git"  # left to git: its blob is read back after
    subprocess.run(
        ["/bin/sh", "-c", "echo more >> kept.txt && echo again > dirty.txt && echo n > new"],
        cwd=rig.repo,
        env=_clean_env(),
        check=True,
    )
    assert cp.after_command(watch) == ["dirty.txt", "kept.txt", "new"]
    checkpoint = cp.finish()
    assert checkpoint.notes == ()
    with pytest.raises(OSError):
        watch.git_blob(MISSING)  # where a lazy fetch would start
    report = restore(rig.repo, [checkpoint], blobs)
    assert report.applied and not report.conflicts and not report.failed
    assert (rig.repo / "kept.txt").read_text() == "kept, committed\n"
    assert (rig.repo / "dirty.txt").read_text() == "uncommitted edit\n"
    assert not (rig.repo / "new").exists()
    assert not rig.marker.exists()


def test_every_git_call_carries_the_overrides_and_a_clean_environment(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What each command actually ran with, as git itself reports it."""
    monkeypatch.setenv("GIT_EXTERNAL_DIFF", rig.mark)
    monkeypatch.setenv("GIT_INDEX_FILE", str(rig.root / "elsewhere"))
    assert not any(k.startswith("GIT_") and k not in _OURS for k in git_env())
    rig.config("filter.Lfs-Like.clean", rig.mark_cat)
    rig.config("protocol.weird.allow", "always")
    done = run_git(rig.repo, "config", "--list", "-z", timeout=10)
    assert done.returncode == 0
    seen = dict(item.split("\n", 1) for item in done.stdout.decode().split("\0") if "\n" in item)
    assert seen["core.fsmonitor"] == "false" and seen["core.hookspath"] == "/dev/null"
    assert seen["protocol.weird.allow"] == "never" and seen["protocol.allow"] == "never"
    assert seen["filter.Lfs-Like.clean"] == ""
    assert seen["safe.barerepository"] == "explicit"


_OURS = {
    "GIT_CONFIG_GLOBAL",
    "GIT_CONFIG_SYSTEM",
    "GIT_CONFIG_NOSYSTEM",
    "GIT_TERMINAL_PROMPT",
    "GIT_OPTIONAL_LOCKS",
    "GIT_NO_LAZY_FETCH",
    "GIT_NO_REPLACE_OBJECTS",
    "GIT_PAGER",
}


def test_a_driver_name_that_cannot_be_overridden_refuses_the_call(rig: Rig) -> None:
    (rig.repo / ".gitattributes").write_text("* filter=a=b\n")
    rig.config("filter.a=b.clean", rig.mark_cat)
    with pytest.raises(GitRefused):
        run_git(rig.repo, "status", "--short", timeout=10)
    assert git_facts(rig.repo) is None  # the facts are left out, nothing runs
    assert not rig.marker.exists()
    with pytest.raises(GitRefused):
        driver_overrides(["filter.x\ny.process"])
    assert driver_overrides(["filter.a.b.smudge", "diff.x.textconv", "filter.a.b.required"]) == [
        ("filter.a.b.smudge", ""),
        ("filter.a.b.required", "false"),
    ]


@pytest.mark.parametrize("case", ["diff.external", "diff.textconv", "GIT_EXTERNAL_DIFF"])
def test_a_patch_through_the_helper_runs_no_diff_program(
    rig: Rig, case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """defect reads no patch today; were it to, the helper's flags already keep the external
    diff and the textconv driver from running."""
    arm(rig, case, monkeypatch)
    for args in (("diff-files", "-p"), ("log", "-p", "-1")):
        done = run_git(rig.repo, *args, timeout=10)
        assert done.returncode == 0 and b"dirty.txt" in done.stdout
    assert not rig.marker.exists()


# --- through the real `defect acp` process --------------------------------------------------

COMMAND = "echo more >> kept.txt && echo again > dirty.txt"


def arm_everything(rig: Rig) -> dict[str, str]:
    """Every repository case at once, and the environment's: the agent's environment."""
    env: dict[str, str] = {}
    for case in ("gpg.program", "core.fsmonitor", "core.hooksPath", "diff.external"):
        env.update(CASES[case](rig)[0])
    for case in ("core.sshCommand", "alias", "GIT_EXTERNAL_DIFF", "GIT_CONFIG_COUNT"):
        env.update(CASES[case](rig)[0])
    (rig.repo / ".gitattributes").write_text("*.txt diff=evil filter=evil\n*.md filter=proc\n")
    rig.config("diff.evil.textconv", rig.mark_cat)
    rig.config("filter.evil.clean", rig.mark_cat)
    rig.config("filter.proc.process", rig.mark)
    (rig.repo / "dirty.txt").write_text("uncommitted edit\n")
    os.utime(rig.repo / "tracked.txt", (1, 1))
    live = subprocess.run(
        ["git", "status"], cwd=rig.repo, env={**os.environ, **env}, capture_output=True
    )
    assert live.returncode == 0 and rig.marker.exists()  # armed: plain git runs it
    rig.marker.unlink()
    os.utime(rig.repo / "tracked.txt", (2, 2))
    return env


async def _prompt_bash_then_rewind(env: dict[str, str], rig: Rig) -> None:
    client = RecordingClient()
    async with spawn_defect(env=env, client=client) as agent:
        await agent.initialize()
        sid = await agent.new_session(rig.repo)
        await agent.conn.set_session_mode(session_id=sid, mode_id="yolo")
        response = await asyncio.wait_for(agent.prompt(sid, "go"), 30)
        assert response.stop_reason == "end_turn"
        assert (rig.repo / "kept.txt").read_text() == "kept, committed\nmore\n"
        assert not rig.marker.exists()
        response = await asyncio.wait_for(agent.prompt(sid, "/rewind 1 files"), 30)
        assert response.stop_reason == "end_turn"
        agent.assert_schema_clean()
    assert client.permission_requests == []
    assert (rig.repo / "kept.txt").read_text() == "kept, committed\n"
    assert (rig.repo / "dirty.txt").read_text() == "uncommitted edit\n"
    assert not rig.marker.exists()


@pytest.mark.anyio
async def test_through_the_process_a_prompt_and_a_bash_call_run_nothing(rig: Rig) -> None:
    """The offline model runs a command in yolo mode in a repository armed every way: the
    facts are gathered, the command checkpointed and `/rewind` restores it; nothing runs."""
    env = arm_everything(rig)
    replies = [
        {"tool_calls": [{"name": "bash", "input": {"command": COMMAND}}]},
        {"text": "done"},
    ]
    await _prompt_bash_then_rewind(script_env(rig.root, replies, **env), rig)


@pytest.mark.anyio
async def test_through_the_process_the_facts_still_reach_the_model(rig: Rig) -> None:
    """The same against the fake API, where the system prompt can be read: the branch and the
    status are there."""
    env = arm_everything(rig)
    async with FakeProvider() as fake:
        fake.enqueue(Reply.of([ToolUseBlock("toolu_b", "bash", {"command": COMMAND})]))
        fake.enqueue(Reply.text("done"))
        agent_environment = agent_env(
            DEFECT_PROVIDER="anthropic",
            ANTHROPIC_BASE_URL=fake.url,
            ANTHROPIC_API_KEY=DEFAULT_API_KEY,
            DEFECT_STATE_DIR=str(rig.root / "state"),
            DEFECT_RETRIES="0",
            **env,
        )
        await _prompt_bash_then_rewind(agent_environment, rig)
        system = fake.requests[0].body["system"]
    text = system if isinstance(system, str) else "".join(b["text"] for b in system)
    assert f"(branch {BRANCH})" in text
    assert "M dirty.txt" in text and "First commit" in text
