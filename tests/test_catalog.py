"""Custom slash commands and skills, loaded from real files in the user's and the project's
directories: what loads, what replaces what, and what is reported instead of loaded."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from defect_core.catalog.commands import expand, load_commands
from defect_core.catalog.frontmatter import CatalogProblem, Document, parse_document
from defect_core.catalog.skills import (
    MAX_SKILL_FILE_BYTES,
    SkillFileError,
    load_skills,
    read_skill_file,
)


@pytest.fixture
def places(tmp_path: Path) -> tuple[dict[str, str], Path, Path]:
    """An environment whose user config is under tmp_path, and a repository to work in."""
    config = tmp_path / "config"
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    return {"XDG_CONFIG_HOME": str(config)}, config / "defect", repo / ".defect"


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_headers_parse_as_yaml_or_toml_and_errors_name_the_line(tmp_path: Path) -> None:
    yaml_doc = parse_document(tmp_path / "a.md", "---\ndescription: Hi\n---\nBody\n")
    assert isinstance(yaml_doc, Document)
    assert yaml_doc.fields == {"description": "Hi"} and yaml_doc.body == "Body"
    toml_doc = parse_document(tmp_path / "b.md", '+++\ndescription = "Hi"\n+++\nBody')
    assert isinstance(toml_doc, Document) and toml_doc.fields == {"description": "Hi"}
    plain = parse_document(tmp_path / "c.md", "Just a prompt")
    assert isinstance(plain, Document) and plain.fields == {} and plain.body == "Just a prompt"
    broken = parse_document(tmp_path / "d.md", "---\nok: 1\nbad: [unclosed\n---\nBody")
    assert isinstance(broken, CatalogProblem) and broken.line == 4
    assert "YAML header is invalid" in str(broken) and str(broken).startswith(str(tmp_path))
    unclosed = parse_document(tmp_path / "e.md", "---\ndescription: x\nBody")
    assert isinstance(unclosed, CatalogProblem) and "never closed" in unclosed.problem
    listed = parse_document(tmp_path / "f.md", "---\n- a\n- b\n---\nBody")
    assert isinstance(listed, CatalogProblem) and "key: value" in listed.problem


def test_commands_load_from_both_places_and_the_project_wins(
    places: tuple[dict[str, str], Path, Path],
) -> None:
    env, user, project = places
    write(user / "commands" / "review.md", "---\ndescription: Review (user)\n---\nUser review")
    write(user / "commands" / "explain.md", "# Explain the code\n\nExplain $ARGUMENTS simply.")
    write(project / "commands" / "review.md", "---\ndescription: Review\n---\nReview $ARGUMENTS")
    write(project / "commands" / "git" / "commit.md", "Write a commit message.")
    write(project / "commands" / "notes.txt", "not a command")
    commands, problems = load_commands(project.parent, env=env)
    assert problems == []
    by_name = {c.name: c for c in commands}
    assert list(by_name) == ["explain", "git:commit", "review"]
    assert by_name["review"].template == "Review $ARGUMENTS"
    assert by_name["review"].description == "Review (project)"
    assert by_name["explain"].description == "Explain the code (user)"
    assert by_name["git:commit"].scope == "project"
    assert expand(by_name["review"], "  src/app.py ") == "Review src/app.py"
    assert expand(by_name["git:commit"], "") == "Write a commit message."
    assert expand(by_name["git:commit"], "short") == "Write a commit message.\n\nArguments: short"


def test_a_broken_or_shadowing_command_is_reported_and_the_rest_load(
    places: tuple[dict[str, str], Path, Path],
) -> None:
    env, _, project = places
    write(project / "commands" / "compact.md", "Shadow the built-in")
    write(project / "commands" / "broken.md", "---\ndescription: [\n---\nx")
    write(project / "commands" / "empty.md", "---\ndescription: nothing\n---\n")
    write(project / "commands" / "bad name!.md", "x")
    write(project / "commands" / "fine.md", "Fine")
    commands, problems = load_commands(project.parent, reserved={"compact"}, env=env)
    assert [c.name for c in commands] == ["fine"]
    reasons = sorted(p.problem for p in problems)
    assert len(reasons) == 4
    assert any("built-in" in r for r in reasons) and any("YAML" in r for r in reasons)
    assert any("no prompt" in r for r in reasons)
    assert any("usable command name" in r for r in reasons)


def skill(root: Path, name: str, header: str, body: str = "Do the thing.") -> Path:
    write(root / "skills" / name / "SKILL.md", f"---\n{header}\n---\n{body}\n")
    return root / "skills" / name


def test_skills_follow_the_agent_skills_rules(places: tuple[dict[str, str], Path, Path]) -> None:
    env, user, project = places
    skill(user, "pdf-forms", "name: pdf-forms\ndescription: Fill PDF forms (user).")
    skill(project, "pdf-forms", "name: pdf-forms\ndescription: >\n  Fill PDF forms,\n  project.")
    skill(project, "Bad_Name", "name: Bad_Name\ndescription: x")
    skill(project, "elsewhere", "name: other\ndescription: x")
    skill(project, "silent", "name: silent")
    skill(project, "long", "name: long\ndescription: " + "x" * 1025)
    skills, problems = load_skills(project.parent, env=env)
    assert [(s.name, s.description, s.scope) for s in skills] == [
        ("pdf-forms", "Fill PDF forms, project.", "project")
    ]
    reasons = " | ".join(p.problem for p in problems)
    assert "lowercase" in reasons and "must match its folder" in reasons
    assert "`description` is missing" in reasons and "over 1,024" in reasons


def test_a_skill_file_is_read_only_from_inside_its_folder(
    places: tuple[dict[str, str], Path, Path], tmp_path: Path
) -> None:
    env, _, project = places
    folder = skill(project, "deploy", "name: deploy\ndescription: Deploy the app.", "Run it.")
    write(folder / "scripts" / "run.sh", "echo deploy\n")
    write(tmp_path / "secret.txt", "secret")
    (folder / "leak.txt").symlink_to(tmp_path / "secret.txt")
    os.mkfifo(folder / "pipe")
    write(folder / "big.txt", "b" * (MAX_SKILL_FILE_BYTES + 10))
    [deploy], _ = load_skills(project.parent, env=env)
    text = read_skill_file(deploy)
    assert text.startswith("---\nname: deploy") and "Run it." in text
    assert "scripts/run.sh" in text.split("[files in this skill")[1]
    assert read_skill_file(deploy, "scripts/run.sh") == "echo deploy\n"
    assert read_skill_file(deploy, "big.txt").endswith("[cut at 256 KiB]")
    for bad, why in [
        ("../../secret.txt", "not a path inside"),
        ("/etc/passwd", "not a path inside"),
        ("leak.txt", "leads outside"),
        ("pipe", "not a regular file"),
        ("missing.md", "cannot be read"),
    ]:
        with pytest.raises(SkillFileError, match=why):
            read_skill_file(deploy, bad)
