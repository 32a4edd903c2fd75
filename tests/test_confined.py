"""Files a project names are read only from inside it: `defect_core/confined.py` and its readers.

On real files: a link that leads out of the boundary (directly, through `..`, through a linked
`.defect/` directory) is refused while one that stays inside is followed; a FIFO, a socket, a
device and `/proc` are refused without blocking; a file over the limit is refused whole; a
directory swapped for a link between the check and the open is caught by the walk. Then each
reader keeps the rule: instruction files, the catalog, the configuration files, `.mcp.json`.
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from defect_core import confined
from defect_core.catalog.agents import load_profiles
from defect_core.catalog.commands import load_commands
from defect_core.catalog.skills import SkillFileError, load_skills, read_skill_file
from defect_core.config import load_settings
from defect_core.confined import Refused, open_within, read_confined, read_within
from defect_core.mcp import load_mcp_json
from defect_core.prompt.instructions import (
    MAX_FILE_BYTES,
    project_instructions,
    user_instructions,
)

SECRET = "outside-secret-7f3a"


@pytest.fixture
def tree(tmp_path: Path) -> tuple[Path, Path]:
    """A project (with `.git`) and, beside it, a directory holding a secret."""
    project = tmp_path / "project"
    (project / ".git").mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.md").write_text(SECRET)
    return project, outside


def refusal(path: Path, root: Path, limit: int = 1024) -> str:
    with pytest.raises(Refused) as caught:
        read_within(path, root, limit)
    return caught.value.reason


# --- the helper --------------------------------------------------------------------------------


def test_a_link_out_is_refused_and_a_link_inside_is_followed(tree: tuple[Path, Path]) -> None:
    project, outside = tree
    (project / "rules.md").write_text("inside")
    (project / "AGENTS.md").symlink_to(outside / "secret.md")
    (project / "CLAUDE.md").symlink_to("rules.md")
    (project / "relative.md").symlink_to("../outside/secret.md")
    assert "outside" in refusal(project / "AGENTS.md", project)
    assert "outside" in refusal(project / "relative.md", project)
    assert "outside" in refusal(project / ".." / "outside" / "secret.md", project)
    assert read_within(project / "CLAUDE.md", project, 1024) == b"inside"
    assert read_within(project / "rules.md", project, 1024) == b"inside"


def test_a_linked_directory_out_lends_its_files_no_standing(tree: tuple[Path, Path]) -> None:
    project, outside = tree
    (project / ".defect").symlink_to(outside)
    assert "outside" in refusal(project / ".defect" / "secret.md", project)
    (project / "docs").mkdir()
    (project / "docs" / "a.md").write_text("a")
    (project / "linked").symlink_to(project / "docs")  # a directory link that stays inside
    assert read_within(project / "linked" / "a.md", project, 1024) == b"a"


def test_what_is_not_there_is_no_file_not_a_refusal(tree: tuple[Path, Path]) -> None:
    project, outside = tree
    assert read_within(project / "AGENTS.md", project, 1024) is None
    assert read_within(project / "no" / "such" / "AGENTS.md", project, 1024) is None
    (project / "dangling.md").symlink_to("missing.md")  # a dangling link that stays inside
    assert read_within(project / "dangling.md", project, 1024) is None
    (project / "out.md").symlink_to(outside / "missing.md")  # one that would leave
    assert "outside" in refusal(project / "out.md", project)
    (project / "loop.md").symlink_to("loop.md")
    assert "does not resolve" in refusal(project / "loop.md", project)


def test_fifos_sockets_devices_and_proc_are_refused_without_blocking(
    tree: tuple[Path, Path],
) -> None:
    project, _ = tree
    os.mkfifo(project / "AGENTS.md")  # a read would wait forever for a writer
    assert "FIFO" in refusal(project / "AGENTS.md", project)
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(project / "sock.md"))
        assert "socket" in refusal(project / "sock.md", project)
    (project / "dir.md").mkdir()
    assert "directory" in refusal(project / "dir.md", project)
    assert "directory" in refusal(project, project)
    (project / "null.md").symlink_to("/dev/null")
    assert "outside" in refusal(project / "null.md", project)
    # Even where the boundary holds them, system files are never a project's.
    root = Path("/")
    assert "system file" in refusal(Path("/dev/null"), root)
    assert "system file" in refusal(Path("/proc/self/environ"), root)
    assert "system file" in refusal(Path("/sys/kernel/mm"), root)


def test_a_file_over_the_limit_is_refused_whole(tree: tuple[Path, Path]) -> None:
    project, _ = tree
    (project / "big.md").write_bytes(b"x" * 2048)
    assert "over the limit of 1,024" in refusal(project / "big.md", project, 1024)
    assert read_within(project / "big.md", project, 2048) == b"x" * 2048
    fd = open_within(project / "big.md", project)  # the bounded read is the caller's
    assert fd is not None
    try:
        assert os.read(fd, 10) == b"x" * 10
    finally:
        os.close(fd)


def test_a_directory_swapped_for_a_link_after_the_check_is_not_followed(
    tree: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check resolved `sub` as a directory inside; by the open it is a link out."""
    project, outside = tree
    (outside / "sub").mkdir()
    (outside / "sub" / "AGENTS.md").write_text(SECRET)
    (project / "sub").symlink_to(outside / "sub")
    # The path as the check saw it, before the swap: `sub` not yet a link.
    monkeypatch.setattr(confined.os.path, "realpath", os.path.normpath)
    assert "does not resolve" in refusal(project / "sub" / "AGENTS.md", project)
    (project / "last.md").symlink_to(outside / "secret.md")
    assert "link" in refusal(project / "last.md", project)


def test_a_refusal_is_logged_once_naming_the_file_in_the_project(
    tree: tuple[Path, Path],
) -> None:
    project, outside = tree
    (project / "once.md").symlink_to(outside / "secret.md")
    with capture_logs() as logs:
        assert read_confined(project / "once.md", project, 1024) is None
        assert read_confined(project / "once.md", project, 1024) is None
    refused = [e for e in logs if e["event"] == "file_refused"]
    assert len(refused) == 1
    assert refused[0]["file"] == "once.md" and "outside" in refused[0]["reason"]


# --- the readers -------------------------------------------------------------------------------


def test_instruction_files_keep_inside_the_project_and_the_users_directory(
    tree: tuple[Path, Path],
) -> None:
    project, outside = tree
    sub = project / "pkg"
    sub.mkdir()
    (sub / "AGENTS.md").write_text("package rules")
    (sub / "CLAUDE.md").symlink_to("/proc/self/environ")
    (project / "AGENTS.md").symlink_to(outside / "secret.md")
    (project / "CLAUDE.md").write_bytes(b"x" * (MAX_FILE_BYTES + 1))  # skipped, not cut
    files = project_instructions(sub, project)
    assert [(f.label, f.text) for f in files] == [("pkg/AGENTS.md", "package rules")]
    (project / "CLAUDE.md").unlink()
    (project / "CLAUDE.md").symlink_to("CLAUDE.md")  # a loop: skipped, never an exception
    assert [f.label for f in project_instructions(sub, project)] == ["pkg/AGENTS.md"]
    config = project.parent / "config"
    (config / "defect").mkdir(parents=True)
    (config / "defect" / "AGENTS.md").symlink_to(outside / "secret.md")
    assert user_instructions({"XDG_CONFIG_HOME": str(config)}) is None


def test_catalog_files_that_lead_out_are_skipped(tree: tuple[Path, Path]) -> None:
    project, outside = tree
    env = {"XDG_CONFIG_HOME": str(project.parent / "config")}
    (outside / "skill").mkdir()
    (outside / "skill" / "SKILL.md").write_text(f"---\nname: skill\ndescription: {SECRET}\n---\n")
    catalog = project / ".defect"
    for kind in ("agents", "commands", "skills"):
        (catalog / kind).mkdir(parents=True)
    (catalog / "agents" / "spy.md").symlink_to(outside / "secret.md")
    (catalog / "agents" / "env.md").symlink_to("/proc/self/environ")
    (catalog / "agents" / "fine.md").write_text("---\ndescription: Fine\n---\nWork.")
    (catalog / "commands" / "leak.md").symlink_to(outside / "secret.md")
    os.mkfifo(catalog / "commands" / "pipe.md")
    (catalog / "commands" / "fine.md").write_text("Do it.")
    (catalog / "skills" / "skill").symlink_to(outside / "skill")
    (catalog / "skills" / "ok").mkdir()
    (catalog / "skills" / "ok" / "SKILL.md").write_text("---\nname: ok\ndescription: Ok\n---\n")
    (catalog / "skills" / "ok" / "leak.md").symlink_to(outside / "secret.md")
    profiles, problems = load_profiles(project, env)
    assert [p.name for p in profiles] == ["fine", "general"] and problems == []
    commands, problems = load_commands(project, env=env)
    assert [c.name for c in commands] == ["fine"] and problems == []
    skills, problems = load_skills(project, env)
    assert [s.name for s in skills] == ["ok"] and problems == []
    with pytest.raises(SkillFileError, match="outside"):
        read_skill_file(skills[0], "leak.md")


def test_a_project_config_is_read_only_from_inside_the_project(
    tree: tuple[Path, Path],
) -> None:
    project, outside = tree
    home = project.parent / "home"
    (outside / "config.toml").write_text('model = "from-outside"\n')
    env = {"HOME": str(home)}
    (project / ".defect").symlink_to(outside)  # the whole directory is a link out
    assert load_settings(project, env=env).model is None
    (project / ".defect").unlink()
    (project / ".defect").mkdir()
    (project / ".defect" / "config.toml").symlink_to(outside / "config.toml")
    assert load_settings(project, env=env).model is None
    (project / ".defect" / "team.toml").write_text('model = "inside"\n')
    (project / ".defect" / "config.local.toml").symlink_to("team.toml")  # inside: followed
    assert load_settings(project, env=env).model == "inside"
    (project / ".defect" / "config.local.toml").unlink()
    os.mkfifo(project / ".defect" / "config.local.toml")  # read, it would hang the session
    assert load_settings(project, env=env).model is None
    user = home / ".config" / "defect"
    user.mkdir(parents=True)
    (user / "config.toml").symlink_to(outside / "config.toml")
    assert load_settings(None, env=env).model is None


def test_mcp_json_is_read_only_from_inside_the_project(tree: tuple[Path, Path]) -> None:
    project, outside = tree
    servers = {"mcpServers": {"spy": {"command": "spy"}}}
    (outside / "mcp.json").write_text(json.dumps(servers))
    (project / ".mcp.json").symlink_to(outside / "mcp.json")
    assert load_mcp_json(project) == []
    (project / ".mcp.json").unlink()
    os.mkfifo(project / ".mcp.json")
    assert load_mcp_json(project) == []
    (project / ".mcp.json").unlink()
    (project / "servers.json").write_text(json.dumps(servers))
    (project / "sub").mkdir()
    (project / "sub" / ".mcp.json").symlink_to("../servers.json")  # inside the project
    assert [s.name for s in load_mcp_json(project / "sub")] == ["spy"]
