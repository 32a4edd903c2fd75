"""The `[hooks]` table and `trusted_projects` across the configuration layers.

Hook arrays of the layers are appended, not replaced; a bad entry or an unknown event is a
`ConfigError` with the file and the line; a project's own hooks are untrusted until the user's
file lists the project (or a directory above it), and only the user's file may list one.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from defect_core.config import ConfigError, load_settings
from tests.support.config_files import user_file, write


def test_hook_arrays_of_every_layer_are_appended_in_layer_order(home: Path, repo: Path) -> None:
    user = user_file(
        home,
        'goal_max_rounds = 3\n[[hooks.before_tool]]\nmatcher = { tool = "bash" }\n'
        'command = "./user.sh"\ntimeout = 2\n',
    )
    shared = write(
        repo / ".defect" / "config.toml", '[[hooks.before_tool]]\ncommand = "./team.sh"\n'
    )
    local = write(
        repo / ".defect" / "config.local.toml",
        '[hooks]\nuser_prompt = [{ prompt = "Be brief." }]\n',
    )
    settings = load_settings(repo / "src", env={"HOME": str(home)}, trust_project=True)
    assert [(h.event, h.command or h.prompt, h.origin) for h in settings.hooks] == [
        ("before_tool", "./user.sh", str(user)),
        ("before_tool", "./team.sh", str(shared)),
        ("user_prompt", "Be brief.", str(local)),
    ]
    first = settings.hooks[0]
    assert first.tool == "bash" and first.timeout == 2.0 and first.trusted and first.project is None
    assert first.matches("bash") and not first.matches("read_file")
    assert [h.trusted for h in settings.hooks[1:]] == [True, True]
    assert {h.project for h in settings.hooks[1:]} == {str(repo)}
    assert settings.goal_max_rounds == 3

    untrusted = load_settings(repo / "src", env={"HOME": str(home)})
    assert [h.origin for h in untrusted.hooks] == [str(user)], "a project's hooks wait for trust"
    assert untrusted.project is not None
    assert [line.split(" (")[0] for line in untrusted.project.withheld] == [
        "hooks.before_tool: ./team.sh",
        "hooks.user_prompt: Be brief.",
    ]


def test_a_trusted_project_or_one_below_a_trusted_directory_runs_its_hooks(
    home: Path, repo: Path
) -> None:
    write(repo / ".defect" / "config.toml", '[[hooks.session_start]]\ncommand = "make hooks"\n')
    user_file(home, f'trusted_projects = ["{repo.parent}"]\n')
    assert [h.trusted for h in load_settings(repo, env={"HOME": str(home)}).hooks] == [True]
    user_file(home, f'trusted_projects = ["{repo.parent / "elsewhere"}"]\n')
    assert load_settings(repo, env={"HOME": str(home)}).hooks == ()


@pytest.mark.parametrize(
    ("text", "line", "problem"),
    [
        ('retries = 1\n[[hooks.befor_tool]]\ncommand = "a"\n', 2, "unknown event"),
        ('[[hooks.user_prompt]]\ncommand = "a"\nprompt = "b"\n', 1, "exactly one of command"),
        (
            '[[hooks.user_prompt]]\nmatcher = { tool = "bash" }\ncommand = "a"\n',
            1,
            "a matcher applies to",
        ),
        ('[[hooks.before_turn_end]]\nprompt = "go on"\n', 1, "would never let a turn end"),
        ('[[hooks.after_tool]]\ncommand = "a"\ntimeout = 0\n', 1, "timeout must be"),
        ('[[hooks.after_tool]]\ncommand = "a"\nwhen = "always"\n', 1, "unknown key 'when'"),
        ('\n[hooks]\nbefore_tool = "a"\n', 3, "must be an array of hook tables"),
        ('trusted_projects = ["relative/path"]\n', 1, "not an absolute path"),
    ],
)
def test_bad_hook_entries_name_the_file_and_the_line(
    home: Path, text: str, line: int, problem: str
) -> None:
    path = user_file(home, text)
    with pytest.raises(ConfigError) as info:
        load_settings(None, env={"HOME": str(home)})
    assert info.value.source == str(path) and info.value.line == line
    assert problem in str(info.value)


def test_only_the_user_file_may_trust_a_project(home: Path, repo: Path) -> None:
    path = write(repo / ".defect" / "config.local.toml", f'\ntrusted_projects = ["{repo}"]\n')
    with pytest.raises(ConfigError) as info:
        load_settings(repo, env={"HOME": str(home)})
    assert info.value.source == str(path) and info.value.line == 2
    assert "a project cannot trust itself" in str(info.value)
