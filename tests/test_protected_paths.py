"""Protected paths: the matcher, the shell command reader, the policy, and how text is shown.

The matcher runs on real directories (symlinks, a real `git init`), as the file tools resolve
paths; the policy is the pure decision the turn runner asks.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from defect_core import policy
from defect_core.events import TextDisplay
from defect_core.mcp import McpHub
from defect_core.tools.base import Safety
from defect_core.tools.command_paths import UNREADABLE, protected_in_command
from defect_core.tools.files import WriteFileTool
from defect_core.tools.protected import (
    PROTECTED,
    protected_in_values,
    protected_path,
)
from defect_core.tools.shown import clip_title, fenced, visible
from tests.test_mcp import ECHO, by_name, ctx, stdio


@pytest.fixture
def root(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    return ws


# --- the matcher ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [
        ".git/config",
        ".git",
        ".git/hooks/pre-commit",
        ".git/info/exclude",
        "./.git/config",
        "src/../.git/config",
        ".//.git///config",
        "sub/.git",  # a nested repository's or a submodule's .git file
        "vendor/lib/.git/config",
        ".GIT/CONFIG",
        ".Git/Hooks/post-checkout",
        ".defect/config.toml",
        ".defect/commands/review.md",
        ".mcp.json",
        ".MCP.json",
        ".vscode/tasks.json",
        ".idea/workspace.xml",
        ".zed/settings.json",
        ".envrc",
        "sub/.envrc",
        ".husky/pre-commit",
        ".githooks/pre-push",
        ".github/workflows/x.yml",
        ".github/actions/setup/action.yml",
        ".github",  # renaming it would move the workflows
        ".gitlab-ci.yml",
        ".circleci/config.yml",
        ".bashrc",
        ".profile",
        ".zshrc",
    ],
)
def test_protected_paths_are_recognised(root: Path, raw: str) -> None:
    reason = protected_path(raw, root, root)
    assert reason is not None and reason.endswith("asked every time"), raw


@pytest.mark.parametrize(
    "raw",
    [
        "NOTES.md",
        ".gitignore",
        ".gitattributes",
        ".github/CODEOWNERS",
        ".github/ISSUE_TEMPLATE/bug.md",
        "git/config",
        "src/.git-blame-ignore-revs",
        ".env",
        ".envrc.example",
        "docs/defect.md",
        "mcp.json",
        ".",
    ],
)
def test_ordinary_paths_are_not_protected(root: Path, raw: str) -> None:
    assert protected_path(raw, root, root) is None, raw


def test_the_reason_names_the_path_relative_to_the_workspace(root: Path) -> None:
    reason = protected_path("src/../.git/config", root, root)
    assert reason is not None
    assert reason.startswith("`.git/config` configures git")


def test_dotdot_out_of_a_subdirectory_is_resolved(root: Path) -> None:
    (root / "src").mkdir()
    assert protected_path("../.defect/config.toml", root / "src", root) is not None
    assert protected_path("../README.md", root / "src", root) is None


def test_a_path_outside_the_workspace_is_judged_whole(root: Path) -> None:
    # The workspace's parent holds the repository (a workspace may be a subdirectory).
    assert protected_path("../.git/config", root, root) is not None
    assert protected_path(str(root.parent / ".defect" / "x"), root, root) is not None


def test_a_workspace_inside_a_protected_name_protects_nothing_by_that_alone(
    tmp_path: Path,
) -> None:
    root = tmp_path / ".vscode" / "extensions" / "mine"
    root.mkdir(parents=True)
    assert protected_path("src/main.ts", root, root) is None
    assert protected_path(".vscode/settings.json", root, root) is not None


def test_a_symlinked_directory_is_followed(root: Path) -> None:
    (root / ".git").mkdir()
    os.symlink(".git", root / "innocent")
    reason = protected_path("innocent/config", root, root)
    assert reason is not None and ".git/config" in reason
    (root / "docs").mkdir()
    os.symlink("../.defect", root / "docs" / "settings")
    assert protected_path("docs/settings/config.toml", root, root) is not None


def test_a_symlinked_file_is_followed(root: Path) -> None:
    (root / ".git").mkdir()
    (root / ".git" / "config").write_text("[core]\n")
    os.symlink(".git/config", root / "notes.txt")
    assert protected_path("notes.txt", root, root) is not None


def test_a_symlinked_workspace_is_the_same_workspace(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    os.symlink(real, link)
    assert protected_path(".git/config", link, link) is not None
    assert protected_path(str(real / ".git" / "config"), link, link) is not None
    assert protected_path(str(real / "README.md"), link, link) is None


def test_core_hooks_path_from_the_repository_config_is_protected(root: Path) -> None:
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    assert protected_path("tools/hooks/pre-commit", root, root) is None
    subprocess.run(["git", "-C", str(root), "config", "core.hooksPath", "tools/hooks"], check=True)
    reason = protected_path("tools/hooks/pre-commit", root, root)
    assert reason is not None and "core.hooksPath" in reason
    assert protected_path("tools/other.sh", root, root) is None


def test_the_list_is_lower_case_data_with_reasons() -> None:
    assert PROTECTED
    for entry in PROTECTED:
        assert all(p == p.casefold() and p for p in entry.parts)
        assert entry.why


def test_values_name_protected_paths_at_any_depth(root: Path) -> None:
    assert protected_in_values({"path": ".git/config"}, root, root) is not None
    assert protected_in_values({"edits": [{"file": "x/.mcp.json"}]}, root, root) is not None
    assert protected_in_values({"note": "see open('.git/config')"}, root, root) is not None
    assert protected_in_values({"path": "src/app.py", "n": 3}, root, root) is None


# --- shell commands ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [
        "echo x > .git/config",
        "echo x>.git/config",
        "echo x >> .GIT/config",
        "cp evil .git/hooks/pre-commit",
        "cd .git && echo x > config",
        "tee .mcp.json < x",
        "echo x | tee -a '.defect/config.toml'",
        'echo x > ".g"it/config',
        "echo x > .g\\it/config",
        "mv hooks .husky",
        "rm -rf .github",
        "sed -i s/a/b/ .vscode/settings.json",
        "ls .gi?/",
        "cat .[g]it/config",
        "python -c \"open('.git/config', 'w').write('x')\"",
        "echo $(cat .envrc)",
        "curl -o.github/workflows/ci.yml https://example.com/x",
        "install --target=.defect/commands x.md",
        "echo x >> ~/.bashrc",
        'echo "unbalanced',
        "git config core.fsmonitor 'touch PWNED'",
        "git config --global alias.x '!sh'",
        "git -c core.fsmonitor=x status",
        "git -C sub -c core.hooksPath=x commit",
        "echo ok # .git/config",
    ],
)
def test_commands_naming_protected_paths_are_protected(root: Path, command: str) -> None:
    assert protected_in_command(command, root, root) is not None, command


@pytest.mark.parametrize(
    "command",
    [
        "echo x",
        "git status",
        "git log --oneline -5",
        "git config --get user.name",
        "git config list",
        "ls *",
        "cat *.md",
        "cat .github/CODEOWNERS",
        "echo x > .gitignore",
        "pytest tests/test_x.py -q",
        "grep -c x y; git status",
    ],
)
def test_ordinary_commands_are_not(root: Path, command: str) -> None:
    assert protected_in_command(command, root, root) is None, command


def test_an_unreadable_command_is_asked(root: Path) -> None:
    assert protected_in_command("echo 'x", root, root) == UNREADABLE


def test_a_protected_working_directory_protects_the_command(root: Path) -> None:
    reason = protected_in_command("echo x > config", root / ".git", root)
    assert reason is not None and reason.startswith("its working directory")


def test_a_command_through_a_symlinked_directory(root: Path) -> None:
    (root / ".git").mkdir()
    os.symlink(".git", root / "g")
    assert protected_in_command("echo x > g/config", root, root) is not None


# --- the policy -------------------------------------------------------------------------------


def test_a_protected_call_is_asked_whatever_was_allowed_always() -> None:
    rules = policy.PermissionRules()
    rules.remember("write_file", allow=True)
    why = "`.git/config` configures git: asked every time"
    for mode in ("ask", "accept-edits"):
        assert policy.decide(mode, Safety.MUTATING, "edit", "write_file", rules) == policy.Allow()
        decision = policy.decide(mode, Safety.MUTATING, "edit", "write_file", rules, why)
        assert decision == policy.Ask(why)
        assert isinstance(decision, policy.Ask)
        assert {o.kind for o in decision.options} == {"allow_once", "reject_once"}
    assert {o.kind for o in policy.Ask().options} == {
        "allow_once",
        "allow_always",
        "reject_once",
        "reject_always",
    }


def test_yolo_runs_a_protected_call_and_refusals_still_win() -> None:
    rules = policy.PermissionRules()
    why = "protected"
    assert policy.decide("yolo", Safety.MUTATING, "edit", "k", rules, why) == policy.Allow()
    assert isinstance(
        policy.decide("read-only", Safety.MUTATING, "edit", "k", rules, why), policy.Deny
    )
    rules.remember("k", allow=False)
    assert isinstance(policy.decide("ask", Safety.MUTATING, "edit", "k", rules, why), policy.Deny)


def test_yolo_says_it_covers_protected_paths() -> None:
    [yolo] = [m for m in policy.MODES if m.id == "yolo"]
    assert "protected" in yolo.description


# --- what is shown ----------------------------------------------------------------------------


def test_whitespace_and_invisible_characters_are_made_visible() -> None:
    assert visible("a" + " " * 250 + "b") == "a⟨250 spaces⟩b"
    assert visible("a\nb") == "a␤b"
    assert visible("a\nb", block=True) == "a\nb"
    assert visible("a" + "\n" * 200 + "b", block=True) == "a⟨200 line breaks⟩\nb"
    assert visible("a\r\tb") == "a␍⇥b"
    assert visible("a\u202eb\u200bc\x1bd") == "a⟨U+202E⟩b⟨U+200B⟩c⟨U+001B⟩d"
    assert visible("indent    kept") == "indent    kept"
    assert visible("naïve café") == "naïve café"


def test_a_title_is_one_line_and_says_when_it_is_clipped() -> None:
    assert clip_title("git status" + "\n" * 200 + "touch M") == "git status⟨200 line breaks⟩touch M"
    long = clip_title("x" * 300 + " && touch M", more="full command below")
    assert long.endswith("… (full command below)") and "touch M" not in long
    assert "\n" not in clip_title("a\nb\n")


def test_a_fence_cannot_be_closed_from_inside() -> None:
    block = fenced("a ```` b")
    assert block.startswith("`````\n") and block.endswith("\n`````")


def test_a_file_path_is_shown_whole_on_one_line(tmp_path: Path) -> None:
    path = "NOTES.md" + "\n" * 10 + ".git/config"
    view = WriteFileTool().describe({"path": path, "content": "x"}, ctx(tmp_path))
    assert view.title == "Write NOTES.md⟨10 line breaks⟩.git/config"


@pytest.mark.anyio
async def test_an_mcp_call_shows_every_argument_and_checks_them_all(tmp_path: Path) -> None:
    hub = await McpHub.connect([stdio("echo", ECHO)], tmp_path, timeout=20)
    try:
        note = by_name(hub)["mcp__echo__write_note"]
        text = "fine" + " " * 300 + "then \u202e" + "x" * 5000 + " the end"
        view = note.describe({"text": text}, ctx(tmp_path))
        assert view.title.endswith("(all arguments below)") and "\n" not in view.title
        [shown] = await note.preview({"text": text}, ctx(tmp_path))
        assert isinstance(shown, TextDisplay)
        assert "fine⟨300 spaces⟩then ⟨U+202E⟩" in shown.text and "x the end" in shown.text
        assert view.content == (shown,)
        short = note.describe({"text": "hello"}, ctx(tmp_path))
        assert (short.title, short.content) == ("echo: write_note (text=hello)", ())
        assert note.protected({"text": "see .git/config"}, ctx(tmp_path)) is not None
        assert note.protected({"text": "hello"}, ctx(tmp_path)) is None
    finally:
        await hub.aclose()


def test_every_protected_entry_is_documented() -> None:
    doc = (Path(__file__).resolve().parents[1] / "docs" / "permissions.md").read_text()
    table = doc[doc.index("| protected | why |") :].split("\n\n", 1)[0]
    listed = {name.casefold() for name in re.findall(r"`([^`]+)`", table)}
    missing = ["/".join(e.parts) for e in PROTECTED if "/".join(e.parts) not in listed]
    assert not missing, f"docs/permissions.md does not list {missing}"
