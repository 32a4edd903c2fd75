"""read_file, write_file and edit_file against a real temporary workspace."""

from __future__ import annotations

import base64
import os
import stat
from pathlib import Path
from typing import Any

import anyio
import pytest

from defect_core.events import DiffDisplay, ImageDisplay, Location
from defect_core.model import ImageBlock, TextBlock
from defect_core.tools.backends import FileStat, LocalFsBackend, LocalShellBackend
from defect_core.tools.base import ToolContext, ToolError
from defect_core.tools.beneath import Escape
from defect_core.tools.files import (
    DEFAULT_READ_LIMIT,
    MAX_LINE_CHARS,
    EditError,
    EditFileTool,
    ReadFileTool,
    WriteFileTool,
    plan_edit,
)
from defect_core.tools.files.access import stat_of
from defect_core.tools.workspace import OutsideWorkspace

PNG = (
    b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00"
    b"\x1f\x15\xc4\x89\x00\x00\x00\rIDATx\x9cc\xf8\xff\xff?\x00\x05\xfe\x02\xfe\xa7\x35\x81"
    b"\x84\x00\x00\x00\x00IEND\xaeB`\x82"
)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class RecordingFs:
    """A local fs that records every call (and can pretend to be the editor's)."""

    def __init__(self, delegated: bool = False) -> None:
        self.inner = LocalFsBackend()
        self.calls: list[tuple[str, Path]] = []
        self._delegated = delegated
        self.after_read: Any = None

    @property
    def delegated(self) -> bool:
        return self._delegated

    async def read_text(self, path: Path, line: int | None = None, limit: int | None = None) -> str:
        self.calls.append(("read_text", path))
        text = await self.inner.read_text(path, line, limit)
        if self.after_read is not None:
            self.after_read(path)
        return text

    async def write_text(self, path: Path, content: str) -> None:
        self.calls.append(("write_text", path))
        await self.inner.write_text(path, content)

    async def stat(self, path: Path) -> FileStat | None:
        self.calls.append(("stat", path))
        return await self.inner.stat(path)


def make_ctx(root: Path, fs: Any = None, **kw: Any) -> ToolContext:
    return ToolContext(
        session_id="s1",
        cwd=root,
        fs=fs if fs is not None else LocalFsBackend(),
        shell=LocalShellBackend(),
        **kw,
    )


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    (root / "src").mkdir(parents=True)
    return root


READ, WRITE, EDIT = ReadFileTool(), WriteFileTool(), EditFileTool()


# --- read_file --------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_read_numbers_lines_like_cat_n(ws: Path) -> None:
    (ws / "src" / "app.py").write_text("import os\n\nprint(os.getcwd())\n")
    out = await READ.run({"path": "src/app.py"}, make_ctx(ws))
    assert out.content == "     1\timport os\n     2\t\n     3\tprint(os.getcwd())"
    assert not out.is_error
    assert out.locations == (Location(str(ws / "src" / "app.py"), 1),)


@pytest.mark.anyio
async def test_read_window_with_offset_and_limit_says_how_to_continue(ws: Path) -> None:
    (ws / "big.txt").write_text("".join(f"line {i}\n" for i in range(1, 101)))
    out = await READ.run({"path": "big.txt", "offset": 10, "limit": 5}, make_ctx(ws))
    assert isinstance(out.content, str)
    lines = out.content.splitlines()
    assert lines[:5] == [f"{n:>6}\tline {n}" for n in range(10, 15)]
    assert "offset=15" in lines[-1]
    # The window at the very end has no continuation note.
    out = await READ.run({"path": "big.txt", "offset": 99}, make_ctx(ws))
    assert out.content == "    99\tline 99\n   100\tline 100"


@pytest.mark.anyio
async def test_read_defaults_to_a_window_of_2000_lines(ws: Path) -> None:
    (ws / "big.txt").write_text("".join(f"{i}\n" for i in range(1, 2501)))
    out = await READ.run({"path": "big.txt"}, make_ctx(ws))
    assert isinstance(out.content, str)
    numbered = [line for line in out.content.splitlines() if "\t" in line]
    assert len(numbered) == DEFAULT_READ_LIMIT
    assert f"offset={DEFAULT_READ_LIMIT + 1}" in out.content


@pytest.mark.anyio
async def test_read_cuts_very_long_lines(ws: Path) -> None:
    (ws / "min.js").write_text("x" * (MAX_LINE_CHARS + 500) + "\nshort\n")
    out = await READ.run({"path": "min.js"}, make_ctx(ws))
    assert isinstance(out.content, str)
    first = out.content.splitlines()[0]
    assert first.endswith("[…500 chars cut]")
    assert "     2\tshort" in out.content
    assert "were cut" in out.content


@pytest.mark.anyio
async def test_read_strips_carriage_returns_of_crlf_files(ws: Path) -> None:
    (ws / "win.txt").write_bytes(b"a\r\nb\r\n")
    out = await READ.run({"path": "win.txt"}, make_ctx(ws))
    assert out.content == "     1\ta\n     2\tb"


@pytest.mark.anyio
async def test_read_refuses_binary_files(ws: Path) -> None:
    (ws / "blob.bin").write_bytes(b"ELF\x00\x01\x02" * 100)
    with pytest.raises(ToolError, match=r"blob.bin is a binary file"):
        await READ.run({"path": "blob.bin"}, make_ctx(ws))


@pytest.mark.anyio
async def test_read_refuses_non_utf8_text(ws: Path) -> None:
    (ws / "latin1.txt").write_bytes("café\n".encode("latin-1"))
    with pytest.raises(ToolError, match=r"latin1.txt is not UTF-8 text"):
        await READ.run({"path": "latin1.txt"}, make_ctx(ws))


@pytest.mark.anyio
async def test_read_returns_images_as_image_blocks_when_local(ws: Path) -> None:
    (ws / "dot.png").write_bytes(PNG)
    out = await READ.run({"path": "dot.png"}, make_ctx(ws))
    assert isinstance(out.content, tuple)
    text, image = out.content
    assert isinstance(text, TextBlock) and "dot.png" in text.text
    assert isinstance(image, ImageBlock) and image.media_type == "image/png"
    assert image.data is not None and base64.b64decode(image.data) == PNG
    assert out.display == (ImageDisplay("image/png", image.data),)


@pytest.mark.anyio
async def test_read_of_an_image_through_the_editor_is_refused_clearly(ws: Path) -> None:
    (ws / "dot.png").write_bytes(PNG)
    with pytest.raises(ToolError, match="images can be read only when"):
        await READ.run({"path": "dot.png"}, make_ctx(ws, RecordingFs(delegated=True)))


@pytest.mark.anyio
async def test_read_of_missing_file_directory_empty_file_and_past_the_end(ws: Path) -> None:
    ctx = make_ctx(ws)
    with pytest.raises(ToolError, match=r"file not found: nope.txt"):
        await READ.run({"path": "nope.txt"}, ctx)
    with pytest.raises(ToolError, match="src is a directory"):
        await READ.run({"path": "src"}, ctx)
    (ws / "empty.txt").write_text("")
    assert (await READ.run({"path": "empty.txt"}, ctx)).content == "(empty file: empty.txt)"
    (ws / "two.txt").write_text("a\nb\n")
    with pytest.raises(ToolError, match="fewer than 9 lines"):
        await READ.run({"path": "two.txt", "offset": 9}, ctx)


@pytest.mark.anyio
async def test_read_with_bad_arguments_names_the_problem(ws: Path) -> None:
    with pytest.raises(ToolError, match="invalid arguments for read_file: path: Field required"):
        await READ.run({}, make_ctx(ws))
    with pytest.raises(ToolError, match="offset: Input should be a valid integer"):
        await READ.run({"path": "a", "offset": "ten"}, make_ctx(ws))
    with pytest.raises(ToolError, match="limit: Input should be greater than or equal to 1"):
        await READ.run({"path": "a", "limit": 0}, make_ctx(ws))


def test_read_describe_is_project_relative(ws: Path) -> None:
    ctx = make_ctx(ws)
    view = READ.describe({"path": "src/app.py", "offset": 10, "limit": 31}, ctx)
    assert view.title == "Read src/app.py (lines 10–40)"
    assert view.kind == "read"
    assert view.locations == (Location(str(ws / "src" / "app.py"), 10),)
    assert READ.describe({"path": str(ws / "a.md")}, ctx).title == "Read a.md"
    assert READ.describe({}, ctx).title == "Read file"


@pytest.mark.anyio
async def test_reads_outside_need_configuration(ws: Path) -> None:
    outside = ws.parent / "notes.txt"
    outside.write_text("hello\n")
    with pytest.raises(OutsideWorkspace):
        await READ.run({"path": str(outside)}, make_ctx(ws))
    out = await READ.run({"path": str(outside)}, make_ctx(ws, allow_read_outside=True))
    assert out.content == "     1\thello"


# --- the boundary comes before any backend call -----------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("tool", [READ, WRITE, EDIT], ids=lambda t: t.name)
@pytest.mark.parametrize("target", ["../secret.txt", "ABS", "link.txt"])
async def test_escapes_are_refused_before_any_backend_call(
    ws: Path, tool: Any, target: str
) -> None:
    secret = ws.parent / "secret.txt"
    secret.write_text("secret\n")
    (ws / "link.txt").symlink_to(secret)
    path = str(secret) if target == "ABS" else target
    fs = RecordingFs(delegated=True)
    every = {"path": path, "content": "x", "old_string": "secret", "new_string": "public"}
    args = {k: v for k, v in every.items() if k in tool.input_schema["properties"]}
    with pytest.raises(OutsideWorkspace):
        await tool.run(args, make_ctx(ws, fs))
    assert fs.calls == []
    assert secret.read_text() == "secret\n"


@pytest.mark.anyio
async def test_writes_outside_are_refused_even_when_reads_are_allowed(ws: Path) -> None:
    secret = ws.parent / "secret.txt"
    secret.write_text("secret\n")
    fs = RecordingFs()
    ctx = make_ctx(ws, fs, allow_read_outside=True)
    with pytest.raises(OutsideWorkspace):
        await WRITE.run({"path": str(secret), "content": "x"}, ctx)
    with pytest.raises(OutsideWorkspace):
        await EDIT.run({"path": str(secret), "old_string": "secret", "new_string": "x"}, ctx)
    assert fs.calls == []
    assert secret.read_text() == "secret\n"


# --- write_file -------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_write_creates_a_file_and_its_directories_with_a_diff(ws: Path) -> None:
    out = await WRITE.run({"path": "docs/notes.md", "content": "# Notes\n"}, make_ctx(ws))
    assert (ws / "docs" / "notes.md").read_text() == "# Notes\n"
    assert out.content == "Created docs/notes.md (1 lines)"
    assert out.display == (DiffDisplay(str(ws / "docs" / "notes.md"), None, "# Notes\n"),)
    assert WRITE.describe({"path": "docs/notes.md"}, make_ctx(ws)).title == "Write docs/notes.md"


@pytest.mark.anyio
async def test_write_overwrites_atomically_keeping_mode_and_crlf(ws: Path) -> None:
    target = ws / "run.sh"
    target.write_bytes(b"#!/bin/sh\r\necho old\r\n")
    target.chmod(0o751)
    out = await WRITE.run({"path": "run.sh", "content": "#!/bin/sh\necho new\n"}, make_ctx(ws))
    assert target.read_bytes() == b"#!/bin/sh\r\necho new\r\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o751
    assert out.display == (
        DiffDisplay(str(target), "#!/bin/sh\r\necho old\r\n", "#!/bin/sh\r\necho new\r\n"),
    )
    assert sorted(p.name for p in ws.iterdir()) == ["run.sh", "src"]  # no temporary left


@pytest.mark.anyio
async def test_write_through_a_symlink_keeps_the_link(ws: Path) -> None:
    (ws / "real.txt").write_text("old\n")
    (ws / "alias.txt").symlink_to(ws / "real.txt")
    await WRITE.run({"path": "alias.txt", "content": "new\n"}, make_ctx(ws))
    assert (ws / "alias.txt").is_symlink()
    assert (ws / "real.txt").read_text() == "new\n"


@pytest.mark.anyio
async def test_write_preview_shows_the_diff_and_writes_nothing(ws: Path) -> None:
    (ws / "a.txt").write_text("old\n")
    shown = await WRITE.preview({"path": "a.txt", "content": "new\n"}, make_ctx(ws))
    assert shown == (DiffDisplay(str(ws / "a.txt"), "old\n", "new\n"),)
    assert (ws / "a.txt").read_text() == "old\n"


@pytest.mark.anyio
async def test_write_refuses_a_file_changed_since_it_was_read(ws: Path) -> None:
    ctx = make_ctx(ws)
    (ws / "a.txt").write_text("v1\n")
    await READ.run({"path": "a.txt"}, ctx)
    (ws / "a.txt").write_text("v2 from the user\n")
    with pytest.raises(ToolError, match=r"a.txt has changed since you last read it"):
        await WRITE.run({"path": "a.txt", "content": "v3\n"}, ctx)
    assert (ws / "a.txt").read_text() == "v2 from the user\n"
    await READ.run({"path": "a.txt"}, ctx)
    await WRITE.run({"path": "a.txt", "content": "v3\n"}, ctx)
    assert (ws / "a.txt").read_text() == "v3\n"


@pytest.mark.anyio
async def test_write_missing_content_is_an_argument_error(ws: Path) -> None:
    with pytest.raises(
        ToolError, match="invalid arguments for write_file: content: Field required"
    ):
        await WRITE.run({"path": "a.txt"}, make_ctx(ws))


# --- edit_file --------------------------------------------------------------------------------

SOURCE = """def greet(name):
    message = "hello " + name
    print(message)
    return message


def main():
    greet("world")
"""


@pytest.mark.anyio
async def test_edit_replaces_a_unique_exact_match_and_reports_a_diff(ws: Path) -> None:
    path = ws / "src" / "app.py"
    path.write_text(SOURCE)
    args = {"path": "src/app.py", "old_string": '"hello "', "new_string": '"hi "'}
    out = await EDIT.run(args, make_ctx(ws))
    assert path.read_text() == SOURCE.replace('"hello "', '"hi "')
    assert isinstance(out.content, str)
    assert out.content.startswith("Edited src/app.py: 1 replacement, first at line 2")
    assert '     2\t    message = "hi " + name' in out.content
    assert out.display == (DiffDisplay(str(path), SOURCE, path.read_text()),)
    assert out.locations == (Location(str(path), 2),)
    assert EDIT.describe(args, make_ctx(ws)).title == "Edit src/app.py"


@pytest.mark.anyio
async def test_edit_refuses_an_ambiguous_match_naming_the_lines(ws: Path) -> None:
    (ws / "a.py").write_text("x = 1\ny = 2\nx = 1\n")
    with pytest.raises(ToolError) as err:
        await EDIT.run({"path": "a.py", "old_string": "x = 1", "new_string": "x = 3"}, make_ctx(ws))
    assert "matches 2 places" in str(err.value)
    assert "lines 1, 3" in str(err.value)
    assert "replace_all" in str(err.value)
    assert (ws / "a.py").read_text() == "x = 1\ny = 2\nx = 1\n"


@pytest.mark.anyio
async def test_edit_replace_all_changes_every_occurrence(ws: Path) -> None:
    (ws / "a.py").write_text("x = 1\ny = 2\nx = 1\n")
    args = {"path": "a.py", "old_string": "x = 1", "new_string": "x = 3", "replace_all": True}
    out = await EDIT.run(args, make_ctx(ws))
    assert (ws / "a.py").read_text() == "x = 3\ny = 2\nx = 3\n"
    assert isinstance(out.content, str) and "2 replacements" in out.content


@pytest.mark.anyio
async def test_edit_falls_back_to_indentation_tolerant_matching_and_says_so(ws: Path) -> None:
    path = ws / "src" / "app.py"
    path.write_text(SOURCE)
    # The model lost the indentation of the body.
    old = 'message = "hello " + name\nprint(message)'
    new = 'message = "hi " + name\nlog(message)\nprint(message)'
    out = await EDIT.run({"path": "src/app.py", "old_string": old, "new_string": new}, make_ctx(ws))
    expected = SOURCE.replace(
        '    message = "hello " + name\n    print(message)',
        '    message = "hi " + name\n    log(message)\n    print(message)',
    )
    assert path.read_text() == expected
    assert isinstance(out.content, str)
    assert "tolerant rule 'indentation'" in out.content


@pytest.mark.anyio
async def test_edit_tolerates_trailing_whitespace_drift(ws: Path) -> None:
    (ws / "a.txt").write_text("alpha   \nbeta\t\ngamma\n")
    out = await EDIT.run(
        {"path": "a.txt", "old_string": "alpha\nbeta", "new_string": "ALPHA\nBETA"}, make_ctx(ws)
    )
    assert (ws / "a.txt").read_text() == "ALPHA\nBETA\ngamma\n"
    assert isinstance(out.content, str) and "'trailing-whitespace'" in out.content


def test_tolerant_rules_are_tried_in_order_and_must_be_unique() -> None:
    text = "if x:\n    a  =  1\nif y:\n    a  =  1\n"
    with pytest.raises(EditError, match=r"matches 2 places.*'whitespace'"):
        plan_edit(text, "a = 1", "a = 2")
    plan = plan_edit(text, "a = 1", "a = 2", replace_all=True)
    assert plan.rule == "whitespace" and plan.count == 2
    assert plan.text == "if x:\n    a = 2\nif y:\n    a = 2\n"


@pytest.mark.anyio
async def test_edit_without_a_match_fails_and_points_at_the_closest_line(ws: Path) -> None:
    (ws / "src" / "app.py").write_text(SOURCE)
    args = {"path": "src/app.py", "old_string": "print(mesage)", "new_string": "pass"}
    with pytest.raises(ToolError) as err:
        await EDIT.run(args, make_ctx(ws))
    assert "old_string was not found" in str(err.value)
    assert "closest line is 3" in str(err.value)
    assert "src/app.py" in str(err.value)


@pytest.mark.anyio
async def test_edit_keeps_crlf_line_endings(ws: Path) -> None:
    (ws / "win.txt").write_bytes(b"one\r\ntwo\r\nthree\r\n")
    await EDIT.run(
        {"path": "win.txt", "old_string": "two\nthree", "new_string": "2\n3\n3.5"}, make_ctx(ws)
    )
    assert (ws / "win.txt").read_bytes() == b"one\r\n2\r\n3\r\n3.5\r\n"


@pytest.mark.anyio
async def test_edit_refuses_a_file_changed_since_it_was_read(ws: Path) -> None:
    ctx = make_ctx(ws)
    path = ws / "a.py"
    path.write_text("x = 1\ny = 2\n")
    await READ.run({"path": "a.py"}, ctx)
    path.write_text("x = 1\ny = 20\n")  # same size, maybe the same mtime tick: content decides
    args = {"path": "a.py", "old_string": "x = 1", "new_string": "x = 3"}
    with pytest.raises(ToolError, match=r"a.py has changed since you last read it"):
        await EDIT.run(args, ctx)
    await READ.run({"path": "a.py"}, ctx)
    await EDIT.run(args, ctx)
    # The session's own edit does not count as an outside change.
    await EDIT.run({"path": "a.py", "old_string": "y = 20", "new_string": "y = 4"}, ctx)
    assert path.read_text() == "x = 3\ny = 4\n"


@pytest.mark.anyio
async def test_edit_of_a_partly_read_file_compares_size_and_mtime(ws: Path) -> None:
    ctx = make_ctx(ws)
    path = ws / "long.txt"
    path.write_text("".join(f"{i}\n" for i in range(100)))
    await READ.run({"path": "long.txt", "limit": 10}, ctx)
    path.write_text("".join(f"{i}\n" for i in range(101)))
    with pytest.raises(ToolError, match="changed since you last read it"):
        await EDIT.run({"path": "long.txt", "old_string": "50\n", "new_string": "fifty\n"}, ctx)


@pytest.mark.anyio
async def test_edit_of_a_file_that_vanishes_mid_edit_fails_clearly(ws: Path) -> None:
    path = ws / "a.py"
    path.write_text("x = 1\n")
    fs = RecordingFs()
    fs.after_read = lambda p: os.unlink(p)
    with pytest.raises(ToolError, match=r"a.py was deleted while being edited"):
        await EDIT.run({"path": "a.py", "old_string": "x", "new_string": "y"}, make_ctx(ws, fs))
    assert not path.exists()
    assert ("write_text", path) not in fs.calls


@pytest.mark.anyio
async def test_edit_of_missing_binary_and_non_utf8_files(ws: Path) -> None:
    ctx = make_ctx(ws)
    args = {"old_string": "a", "new_string": "b"}
    with pytest.raises(ToolError, match=r"file not found: nope.py"):
        await EDIT.run({"path": "nope.py", **args}, ctx)
    (ws / "blob").write_bytes(b"a\x00b")
    with pytest.raises(ToolError, match="blob is a binary file"):
        await EDIT.run({"path": "blob", **args}, ctx)
    (ws / "l1.txt").write_bytes(b"a\xe9\n")
    with pytest.raises(ToolError, match=r"l1.txt is not UTF-8 text"):
        await EDIT.run({"path": "l1.txt", **args}, ctx)


@pytest.mark.anyio
async def test_edit_with_empty_old_string_creates_a_new_file(ws: Path) -> None:
    out = await EDIT.run(
        {"path": "new.py", "old_string": "", "new_string": "x = 1\n"}, make_ctx(ws)
    )
    assert (ws / "new.py").read_text() == "x = 1\n"
    assert out.display == (DiffDisplay(str(ws / "new.py"), None, "x = 1\n"),)
    (ws / "full.py").write_text("y\n")
    with pytest.raises(ToolError, match="old_string is empty but the file is not"):
        await EDIT.run({"path": "full.py", "old_string": "", "new_string": "z"}, make_ctx(ws))


@pytest.mark.anyio
async def test_edit_argument_errors(ws: Path) -> None:
    with pytest.raises(
        ToolError, match="invalid arguments for edit_file: old_string: Field required"
    ):
        await EDIT.run({"path": "a.py", "new_string": "x"}, make_ctx(ws))
    with pytest.raises(ToolError, match="replace_all: Input should be a valid boolean"):
        await EDIT.run(
            {"path": "a", "old_string": "a", "new_string": "b", "replace_all": "sometimes"},
            make_ctx(ws),
        )
    with pytest.raises(ToolError, match="are the same"):
        await EDIT.run({"path": "a.py", "old_string": "x", "new_string": "x"}, make_ctx(ws))


@pytest.mark.anyio
async def test_edit_preview_shows_the_diff_without_writing(ws: Path) -> None:
    (ws / "a.py").write_text("x = 1\n")
    args = {"path": "a.py", "old_string": "x = 1", "new_string": "x = 2"}
    shown = await EDIT.preview(args, make_ctx(ws))
    assert shown == (DiffDisplay(str(ws / "a.py"), "x = 1\n", "x = 2\n"),)
    assert (ws / "a.py").read_text() == "x = 1\n"
    assert (
        await EDIT.preview({"path": "a.py", "old_string": "zzz", "new_string": "y"}, make_ctx(ws))
        == ()
    )


@pytest.mark.anyio
async def test_concurrent_edits_of_one_file_are_serialised(ws: Path) -> None:
    path = ws / "a.txt"
    path.write_text("".join(f"line {i}\n" for i in range(20)))
    ctx = make_ctx(ws)

    async def edit(i: int) -> None:
        await EDIT.run({"path": "a.txt", "old_string": f"line {i}\n", "new_string": f"L{i}\n"}, ctx)

    async with anyio.create_task_group() as tg:
        for i in range(20):
            tg.start_soon(edit, i)
    assert path.read_text() == "".join(f"L{i}\n" for i in range(20))


def test_file_tools_identity() -> None:
    assert (READ.name, READ.kind, READ.safety.value) == ("read_file", "read", "read_only")
    assert (WRITE.name, WRITE.kind, WRITE.safety.value) == ("write_file", "edit", "mutating")
    assert (EDIT.name, EDIT.kind, EDIT.safety.value) == ("edit_file", "edit", "mutating")
    for tool in (READ, WRITE, EDIT):
        assert tool.permission_key({"path": "x"}) == tool.name
        schema = tool.input_schema
        assert schema["type"] == "object" and "path" in schema["required"]


@pytest.mark.anyio
async def test_stat_through_a_link_leading_out_is_refused_and_inside_links_are_followed(
    tmp_path: Path,
) -> None:
    # The metadata half of the flipped-link guarantee (tools/beneath.py): the path was
    # checked, then the link turned outward; a stat must not report the outside file.
    work, outside = tmp_path / "work", tmp_path / "outside"
    (work / "inside").mkdir(parents=True)
    outside.mkdir()
    (outside / "f.txt").write_text("SECRET, and longer than the inside one\n")
    (work / "inside" / "f.txt").write_text("inside\n")
    (work / "inside" / "alias.txt").symlink_to(work / "inside" / "f.txt")
    (work / "out.txt").symlink_to(outside / "f.txt")
    (work / "link").symlink_to(outside)
    fs = LocalFsBackend(work)
    for leading_out in (work / "link" / "f.txt", work / "out.txt"):
        with pytest.raises(Escape):
            await fs.stat(leading_out)
    through = await fs.stat(work / "inside" / "alias.txt")
    assert through is not None and through.size == len("inside\n") and through.kind == "file"
    root = await fs.stat(work)
    assert root is not None and root.is_dir
    assert await fs.stat(work / "inside" / "missing.txt") is None
    assert await fs.stat(work / "missing" / "f.txt") is None
    # Outside the workspace (a read the session allows) stays a plain stat.
    plain = await fs.stat(outside / "f.txt")
    assert plain is not None and plain.size == len("SECRET, and longer than the inside one\n")
    # Without a root nothing is refused.
    free = await LocalFsBackend().stat(work / "out.txt")
    assert free is not None and free.size == plain.size
    # Through the tools: the refusal names the way out.
    with pytest.raises(ToolError, match=r"outside the workspace: out\.txt"):
        await stat_of(fs, work / "out.txt", "out.txt")
