"""read_file of a file far larger than what it returns holds a bounded part of it at a time.

`defect_core/tools/backends.py` reads a window in chunks (`_read_window`): lines before the
window are counted, not kept, and the window itself stops at `WINDOW_BYTES` (and a line at
`WINDOW_LINE_BYTES`). Measured here with tracemalloc — every bytes object Python allocates,
in every thread, deterministically — while the real tool reads a 64 MB file: the peak stays
a small fraction of the file, wherever the window lies and however long its lines are.
"""

from __future__ import annotations

import tracemalloc
from pathlib import Path
from typing import Any

import anyio
import pytest

from defect_core.tools.backends import WINDOW_BYTES, LocalFsBackend, LocalShellBackend
from defect_core.tools.base import ToolContext
from defect_core.tools.files import ReadFileTool

SIZE = 64 * 1024 * 1024
BOUND = WINDOW_BYTES
"""A window's worth (8 MB): an eighth of the file. The peaks seen are 1-3 MB (a 1 MB chunk
and its pieces); a read that held the file, or a fixed part of it, would be far above."""


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    path = tmp_path_factory.mktemp("read") / "big.txt"
    row = "".join(f"line {k:07d} alpha beta gamma delta\n" for k in range(1000)).encode()
    with path.open("wb") as out:
        while out.tell() < SIZE:
            out.write(row)
    return path, path.stat().st_size // (len(row) // 1000)


def _peak_of_read(path: Path, args: dict[str, Any]) -> tuple[str, int]:
    ctx = ToolContext("s", path.parent, LocalFsBackend(), LocalShellBackend())
    tracemalloc.start()
    try:
        out = anyio.run(ReadFileTool().run, {"path": path.name, **args}, ctx)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert isinstance(out.content, str)
    return out.content, peak


def test_a_window_at_the_end_of_a_big_file_is_read_in_chunks(big: tuple[Path, int]) -> None:
    path, lines = big
    content, peak = _peak_of_read(path, {"offset": lines - 9})
    assert content.splitlines()[0] == f"{lines - 9:>6}\tline {(lines - 10) % 1000:07d} " + (
        "alpha beta gamma delta"
    )
    assert len(content.splitlines()) == 10  # the last ten lines, and no continuation note
    assert peak < BOUND


def test_the_default_window_of_a_big_file_is_capped(big: tuple[Path, int]) -> None:
    path, _ = big
    content, peak = _peak_of_read(path, {})
    assert "[showing lines 1–2000; the file continues: read with offset=2001 for more]" in content
    assert peak < BOUND


def test_a_big_file_of_one_line_is_cut_not_loaded(tmp_path: Path) -> None:
    path = tmp_path / "one_line.txt"
    with path.open("wb") as out:
        for _ in range(SIZE >> 20):
            out.write(b"x" * (1 << 20))
    content, peak = _peak_of_read(path, {})
    assert "chars cut]" in content
    assert peak < BOUND
