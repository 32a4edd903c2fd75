"""The workspace boundary and the argument check every built-in tool starts with."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from defect_core.tools.base import ToolError
from defect_core.tools.workspace import (
    OutsideWorkspace,
    ToolArgs,
    display_path,
    parse_args,
    resolve_path,
)


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    (root / "src").mkdir(parents=True)
    (root / "src" / "app.py").write_text("x = 1\n")
    (tmp_path / "secret.txt").write_text("secret\n")
    return root


def test_relative_paths_resolve_against_the_workspace(ws: Path) -> None:
    assert resolve_path("src/app.py", ws, write=True) == ws / "src" / "app.py"
    assert resolve_path("./src/../src/app.py", ws, write=False) == ws / "src" / "app.py"
    assert resolve_path("new/file.txt", ws, write=True) == ws / "new" / "file.txt"


def test_absolute_path_inside_is_accepted(ws: Path) -> None:
    assert resolve_path(str(ws / "src" / "app.py"), ws, write=True) == ws / "src" / "app.py"


def test_dotdot_escape_is_refused_with_the_path_as_written(ws: Path) -> None:
    with pytest.raises(OutsideWorkspace) as err:
        resolve_path("../secret.txt", ws, write=False)
    assert str(err.value).startswith(
        f"path is outside the workspace: ../secret.txt (workspace: {ws})"
    )


def test_absolute_path_elsewhere_is_refused(ws: Path) -> None:
    with pytest.raises(OutsideWorkspace, match="path is outside the workspace: /etc/passwd"):
        resolve_path("/etc/passwd", ws, write=False)


def test_sibling_with_common_prefix_is_outside(ws: Path) -> None:
    (ws.parent / "proj2").mkdir()
    with pytest.raises(OutsideWorkspace):
        resolve_path(str(ws.parent / "proj2" / "x"), ws, write=True)


def test_symlink_pointing_out_is_refused_and_named(ws: Path) -> None:
    (ws / "link.txt").symlink_to(ws.parent / "secret.txt")
    (ws / "linkdir").symlink_to(ws.parent)
    with pytest.raises(OutsideWorkspace) as err:
        resolve_path("link.txt", ws, write=False)
    assert f"link.txt -> {ws.parent / 'secret.txt'}" in str(err.value)
    with pytest.raises(OutsideWorkspace):
        resolve_path("linkdir/secret.txt", ws, write=True)


def test_symlink_inside_the_workspace_is_fine(ws: Path) -> None:
    (ws / "alias.py").symlink_to(ws / "src" / "app.py")
    assert resolve_path("alias.py", ws, write=True) == ws / "alias.py"


def test_workspace_reached_through_a_symlinked_cwd(ws: Path) -> None:
    alias = ws.parent / "alias"
    alias.symlink_to(ws)
    assert resolve_path("src/app.py", alias, write=True) == alias / "src" / "app.py"
    # The real spelling of a file of the workspace is inside too.
    assert resolve_path(str(ws / "src" / "app.py"), alias, write=True) == ws / "src" / "app.py"


def test_reads_outside_only_when_allowed_and_writes_never(ws: Path) -> None:
    outside = ws.parent / "secret.txt"
    with pytest.raises(OutsideWorkspace, match="set allow_read_outside = true in"):
        resolve_path(str(outside), ws, write=False)
    assert resolve_path(str(outside), ws, write=False, allow_read_outside=True) == outside
    with pytest.raises(OutsideWorkspace):
        resolve_path(str(outside), ws, write=True, allow_read_outside=True)


def test_empty_and_nul_paths_are_refused(ws: Path) -> None:
    with pytest.raises(ToolError, match="path is empty"):
        resolve_path("  ", ws, write=False)
    with pytest.raises(ToolError, match="NUL"):
        resolve_path("a\x00b", ws, write=False)


def test_display_path_is_project_relative_inside_and_absolute_outside(ws: Path) -> None:
    assert display_path("src/app.py", ws) == "src/app.py"
    assert display_path(str(ws / "src" / "app.py"), ws) == "src/app.py"
    assert display_path(str(ws), ws) == "."
    assert display_path("../secret.txt", ws) == os.path.join(str(ws.parent), "secret.txt")


class _Args(ToolArgs):
    path: str
    count: int = 1


def test_parse_args_names_each_problem() -> None:
    with pytest.raises(ToolError) as err:
        parse_args(_Args, {"count": "many"}, "demo")
    message = str(err.value)
    assert message.startswith("invalid arguments for demo: ")
    assert "path: Field required" in message
    assert "count: Input should be a valid integer" in message


def test_parse_args_refuses_unknown_keys_naming_the_known_ones_and_non_objects() -> None:
    # Ignoring a key the model thought meaningful (`cwd` for `workdir`) would change what the
    # call does without a word; the refusal says which keys exist, so one retry fixes it.
    with pytest.raises(ToolError) as err:
        parse_args(_Args, {"path": "a", "extra": 1}, "demo")
    assert str(err.value) == (
        "invalid arguments for demo: extra: unknown argument; the arguments are path, count"
    )
    assert parse_args(_Args, {"path": "a"}, "demo").path == "a"
    with pytest.raises(ToolError, match="expected an object"):
        parse_args(_Args, ["a"], "demo")
