"""A repository's links out, FIFOs and system files reach no model request: the real process.

A cloned repository whose instruction files, agent profiles, custom commands and skills are
links to files outside it — `/proc/self/environ`, and a file holding a marker secret — opens a
session and runs prompts against the strict fake API; no request body the fake received holds
the marker nor a value planted in the agent's environment, while the project's own files
(one of them a link that stays inside) still arrive. A repository whose `AGENTS.md`,
`.defect/config.toml` and `.mcp.json` are FIFOs opens and answers its prompt: nothing waits on
a writer that never comes. Refusals are logged on stderr, naming the file.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import anyio
import pytest

from defect_fakeapi import DEFAULT_API_KEY, FakeProvider, Reply
from tests.support.acp_harness import agent_env, spawn_defect

pytestmark = pytest.mark.anyio

MARKER = "outside-marker-5c1e9b"
PLANTED = "planted-env-value-8d24"
HANG_GUARD = 60.0
"""Not a measure: the FIFO test must fail, not hang, if a read waits for a writer."""


def environment(fake: FakeProvider, tmp_path: Path) -> dict[str, str]:
    config = tmp_path / "xdg"
    (config / "defect").mkdir(parents=True)
    (config / "defect" / "AGENTS.md").symlink_to(tmp_path / "outside" / "secret.md")
    return agent_env(
        DEFECT_PROVIDER="anthropic",
        ANTHROPIC_BASE_URL=fake.url,
        ANTHROPIC_API_KEY=DEFAULT_API_KEY,
        DEFECT_REASONING_EFFORT="off",
        DEFECT_STATE_DIR=str(tmp_path / "state"),
        XDG_CONFIG_HOME=str(config),
        PLANTED_SECRET=PLANTED,
    )


def hostile_repository(tmp_path: Path) -> Path:
    """A repository (`repo/`, worked in at `repo/pkg`) linking out to `outside/` and `/proc`."""
    outside = tmp_path / "outside"
    (outside / "skill").mkdir(parents=True)
    (outside / "secret.md").write_text(f"---\ndescription: {MARKER}\n---\n{MARKER}\n")
    (outside / "skill" / "SKILL.md").write_text(
        f"---\nname: skill\ndescription: {MARKER}\n---\n{MARKER}\n"
    )
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "docs").mkdir()
    (repo / "docs" / "rules.md").write_text("Linked rules: name tests after behaviour.")
    (repo / "AGENTS.md").symlink_to("../outside/secret.md")
    (repo / "CLAUDE.md").symlink_to("/proc/self/environ")
    pkg = repo / "pkg"
    pkg.mkdir()
    (pkg / "AGENTS.md").write_text("Package rules: keep functions small.")
    (pkg / "CLAUDE.md").symlink_to("../docs/rules.md")  # a link that stays inside
    catalog = repo / ".defect"
    for kind in ("agents", "commands", "skills"):
        (catalog / kind).mkdir(parents=True)
    (catalog / "agents" / "spy.md").symlink_to(outside / "secret.md")
    (catalog / "agents" / "environ.md").symlink_to("/proc/self/environ")
    (catalog / "agents" / "helper.md").write_text("---\ndescription: Helper profile\n---\nHelp.")
    (catalog / "commands" / "leak.md").symlink_to(outside / "secret.md")
    (catalog / "commands" / "environ.md").symlink_to("/proc/self/environ")
    (catalog / "commands" / "fine.md").write_text("Fine command body.")
    (catalog / "skills" / "skill").symlink_to(outside / "skill")
    (catalog / "skills" / "notes").mkdir()
    (catalog / "skills" / "notes" / "SKILL.md").write_text(
        "---\nname: notes\ndescription: Notes skill\n---\nWrite notes."
    )
    return pkg


async def test_links_out_of_the_repository_send_nothing_to_the_model(
    fake_provider: FakeProvider, tmp_path: Path
) -> None:
    cwd = hostile_repository(tmp_path)
    fake_provider.enqueue(Reply.text("One."), Reply.text("Two."), Reply.text("Three."))
    async with spawn_defect(env=environment(fake_provider, tmp_path)) as agent:
        await agent.initialize()
        sid = await agent.new_session(cwd)
        assert (await agent.prompt(sid, "hello")).stop_reason == "end_turn"
        assert (await agent.prompt(sid, "/leak now")).stop_reason == "end_turn"
        assert (await agent.prompt(sid, "/fine")).stop_reason == "end_turn"
        stderr = agent.stderr()
    bodies = [json.dumps(record.body) for record in fake_provider.requests]
    assert len(bodies) == 3
    for body in bodies:
        assert MARKER not in body and PLANTED not in body
        assert DEFAULT_API_KEY not in body  # also in /proc/self/environ
    first = fake_provider.requests[0].body
    system = json.dumps(first["system"])
    assert "Package rules: keep functions small." in system
    assert "Linked rules: name tests after behaviour." in system
    assert "notes: Notes skill" in system
    spawn = next(t for t in first["tools"] if t["name"] == "spawn_agent")
    assert "helper: Helper profile" in spawn["description"]
    messages = fake_provider.requests[1].body["messages"]
    assert json.dumps(messages[-1]).count("/leak now") == 1  # not a command: sent as typed
    assert "Fine command body." in json.dumps(fake_provider.requests[2].body["messages"][-1])
    for name in ("AGENTS.md", "CLAUDE.md", "spy.md", "leak.md", "skill/SKILL.md"):
        assert name in stderr
    assert "file_refused" in stderr and MARKER not in stderr and PLANTED not in stderr


async def test_fifos_named_by_the_repository_do_not_hang_the_session(
    fake_provider: FakeProvider, tmp_path: Path
) -> None:
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.md").write_text(MARKER)
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / ".defect" / "agents").mkdir(parents=True)
    os.mkfifo(repo / "AGENTS.md")
    os.mkfifo(repo / ".defect" / "config.toml")
    os.mkfifo(repo / ".defect" / "agents" / "pipe.md")
    os.mkfifo(repo / ".mcp.json")
    (repo / "CLAUDE.md").write_text("Plain rules still arrive.")
    fake_provider.enqueue(Reply.text("Done."))
    with anyio.fail_after(HANG_GUARD):
        async with spawn_defect(env=environment(fake_provider, tmp_path)) as agent:
            await agent.initialize()
            sid = await agent.new_session(repo)
            assert (await agent.prompt(sid, "hello")).stop_reason == "end_turn"
            stderr = agent.stderr()
    assert "Plain rules still arrive." in json.dumps(fake_provider.requests[-1].body["system"])
    for name in ("AGENTS.md", "config.toml", "pipe.md", ".mcp.json"):
        assert name in stderr
    assert "FIFO" in stderr
