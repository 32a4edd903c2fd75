"""ripgrep as the search's prefilter gives exactly the Python engine's results.

`defect_core/tools/search/rg_engine.py` lists the files the scan must read; the scan's rules
stay the only rules. Each case runs the real scan twice on a real tree - over the Python
walk, and over rg's candidates - and the two results must be equal: lines, order, counts of
binary, non-UTF-8 and large files. The tree has what trips engines up: nested `.gitignore`
files with re-includes, `.git/info/exclude`, hidden files, binaries (a NUL early, and one
only after the 8 KiB sniff), files that are not UTF-8, UTF-8 text that is not ASCII, a file
over the size limit, symbolic links to a file and to a directory, and a name that is not
UTF-8. Skipped when the `ripgrep` dev extra is not installed.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from defect_core.tools.backends import LocalFsBackend, LocalShellBackend
from defect_core.tools.base import ToolContext
from defect_core.tools.search import SearchTool, compile_pattern, rg_engine, scan, walk_files
from defect_core.tools.search.matching import MAX_FILE_BYTES, ScanResult

RG = rg_engine.ripgrep_binary()
pytestmark = pytest.mark.skipif(RG is None, reason="ripgrep (the dev extra) is not installed")


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("engines")
    (root / ".git" / "info").mkdir(parents=True)
    (root / ".git" / "info" / "exclude").write_text("excluded_by_git.py\n")
    (root / ".git" / "config.py").write_text("def handler(): never searched\n")
    (root / ".gitignore").write_text("*.log\nbuild/\n/only_top.py\n!keep.log\n")
    (root / "excluded_by_git.py").write_text("def handler(): excluded\n")
    (root / "only_top.py").write_text("def handler(): ignored at the top\n")
    (root / "keep.log").write_text("handler kept by a re-include\n")
    (root / "noise.log").write_text("handler in an ignored log\n")
    src = root / "src" / "pkg"
    src.mkdir(parents=True)
    (src / "only_top.py").write_text("def handler(): not anchored here\n")
    (src / "a.py").write_text("def handler_1(x):\n    return x  # handler\nfoo\n  bar\n")
    (src / "b.py").write_text("HANDLER = 1\nclass Handler:\n    pass\nvalue_99 = 'ok'\n")
    (src / ".gitignore").write_text("generated_*.py\n")
    (src / "generated_x.py").write_text("def handler(): generated\n")
    (src / "utf8.md").write_text("Résumé: handler naïve — ünïcode\nΣίσυφος handler\n")
    (src / "latin1.txt").write_bytes("café handler\n".encode("latin-1"))
    (src / "early_nul.bin").write_bytes(b"handler\x00\x01\x02 handler\n")
    (src / "late_nul.txt").write_bytes(b"handler line\n" + b"x" * 9000 + b"\x00 handler\n")
    (src / "large.py").write_text("handler = 1\n" * (MAX_FILE_BYTES // 12 + 10))
    (root / "build").mkdir()
    (root / "build" / "out.py").write_text("def handler(): built\n")
    hidden = root / ".config"
    hidden.mkdir()
    (hidden / "settings.py").write_text("def handler(): hidden but searched\n")
    (root / ".hidden.py").write_text("handler = 'hidden file'\n")
    (root / "link_to_a.py").symlink_to(src / "a.py")
    (root / "link_dir").symlink_to(src, target_is_directory=True)
    os.mkdir(os.path.join(os.fsencode(root), b"dir_\xff"))
    with open(os.path.join(os.fsencode(root), b"dir_\xff", b"name_\xfe.py"), "wb") as f:
        f.write(b"def handler(): a name that is not UTF-8\n")
    (root / "multi.py").write_text("first handler\nsecond\n\nopen(\n  arg)\n")
    return root


def _scan(files: Any, pattern: str, insensitive: bool = False, cap: int = 2000) -> ScanResult:
    stop = threading.Event()
    return scan(
        files, "", compile_pattern(pattern, insensitive), None, cap, stop, time.monotonic() + 60
    )


PATTERNS = [
    "handler",
    r"def handler_\d+\(",
    r"\bHandler\b",
    r"^\s+return",
    r"\w+_99",
    r"open\(\s+arg",  # crosses a line end
    r"foo[^z]*bar",  # a negated class crosses a line end
    r"[[:upper:]]{7}",
    r"\pL+ handler",
    "naïve",
    "café",
    "no such text anywhere",
]


@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("insensitive", [False, True])
def test_rg_candidates_give_the_walks_results(tree: Path, pattern: str, insensitive: bool) -> None:
    assert RG is not None
    translated = rg_engine.translate_pattern(pattern)
    assert translated is not None, pattern
    stop = threading.Event()
    found = rg_engine.candidates(
        RG, str(tree), translated, insensitive, MAX_FILE_BYTES, stop, time.monotonic() + 60
    )
    assert found is not None
    walked = _scan(walk_files(str(tree), str(tree)), pattern, insensitive)
    prefiltered = _scan(iter(found.files), pattern, insensitive)
    prefiltered.large += found.large  # rg leaves large files out, and counts them
    assert prefiltered == walked
    # Every file the walk skips and counts is among the candidates, whatever the pattern.
    assert (walked.binary, walked.large) == (prefiltered.binary, prefiltered.large)
    assert walked.binary == 2 and walked.large == 1


def test_the_fixture_exercises_what_it_claims(tree: Path) -> None:
    result = _scan(walk_files(str(tree), str(tree)), "handler")
    shown = "\n".join(result.lines)
    assert ".config/settings.py:1" in shown and ".hidden.py:1" in shown
    assert "keep.log:1" in shown and "src/pkg/only_top.py:1" in shown
    assert "late_nul.txt:1" in shown and "dir_\udcff/name_\udcfe.py:1" in shown
    for absent in ("noise.log", "build/", "excluded_by_git", "generated_x", "link_", ".git/"):
        assert absent not in shown
    assert result.binary == 2  # the early NUL and the latin-1 file
    assert result.large == 1


def test_a_cap_stops_both_engines_at_the_same_line(tree: Path) -> None:
    assert RG is not None
    found = rg_engine.candidates(
        RG, str(tree), rg_engine.translate_pattern("handler") or "", False, MAX_FILE_BYTES,
        threading.Event(), time.monotonic() + 60,
    )  # fmt: skip
    assert found is not None
    walked = _scan(walk_files(str(tree), str(tree)), "handler", cap=4)
    capped = _scan(iter(found.files), "handler", cap=4)
    assert capped.lines == walked.lines and capped.capped and walked.capped


@pytest.mark.parametrize("pattern", [r"\C", r"\Qa.b\E", r"\101", "[a"])
def test_what_rust_cannot_say_falls_back_to_the_python_engine(pattern: str) -> None:
    assert rg_engine.translate_pattern(pattern) is None


@pytest.mark.parametrize("pattern", [r"handler\b", r"^$", r"\C"])
def test_the_tool_answers_the_same_with_and_without_rg(
    tree: Path, monkeypatch: pytest.MonkeyPatch, pattern: str
) -> None:
    # `^$` matches an empty file (no prefilter can help) and `\C` has no Rust spelling:
    # both fall back to the walk; the answer never depends on the engine.
    ctx = ToolContext("s", tree, LocalFsBackend(), LocalShellBackend())
    args = {"pattern": pattern, "max_results": 50}
    used: list[object] = []
    real = rg_engine.RgSearch
    monkeypatch.setattr(rg_engine, "RgSearch", lambda *a: used.append(a) or real(*a))
    with_rg = anyio.run(SearchTool().run, args, ctx)
    assert bool(used) == (pattern == r"handler\b")
    monkeypatch.setattr(rg_engine, "ripgrep_binary", lambda: None)
    without = anyio.run(SearchTool().run, args, ctx)
    assert with_rg.content == without.content
    assert "[skipped files: 2 binary or non-UTF-8, 1 larger than 2 MB]" in with_rg.content.replace(
        "[results capped at 50; narrow the search with `path` or `glob`]\n", ""
    )
