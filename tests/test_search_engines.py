"""ripgrep as the search's prefilter gives exactly the Python engine's results.

`defect_core/tools/search/rg_engine.py` lists the files the scan must read; the scan's rules
stay the only rules. Each case runs the real scan twice on a real tree - over the Python
walk, and over rg's candidates - and the two results must be equal: lines, order, counts of
binary, non-UTF-8 (holding a match) and large files. The tree has what trips engines up:
nested `.gitignore` files with re-includes, `.git/info/exclude`, hidden files, binaries (a
NUL early, and one only after the 8 KiB sniff), files that are not UTF-8, UTF-8 text that
is not ASCII, a file over the size limit, symbolic links to a file and to a directory, and
a name that is not UTF-8. Skipped when ripgrep is not installed.
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
pytestmark = pytest.mark.skipif(RG is None, reason="ripgrep is not installed")


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
    # Every binary the walk skips and counts is among the candidates, whatever the pattern;
    # the file that is not UTF-8 is, and counts, when the pattern matches its bytes.
    assert (walked.binary, walked.large) == (prefiltered.binary, prefiltered.large) == (1, 1)
    latin = (tree / "src" / "pkg" / "latin1.txt").read_bytes()
    in_latin = compile_pattern(pattern, insensitive).search(latin) is not None
    assert walked.undecodable == prefiltered.undecodable == int(in_latin)


def test_the_fixture_exercises_what_it_claims(tree: Path) -> None:
    result = _scan(walk_files(str(tree), str(tree)), "handler")
    shown = "\n".join(result.lines)
    assert ".config/settings.py:1" in shown and ".hidden.py:1" in shown
    assert "keep.log:1" in shown and "src/pkg/only_top.py:1" in shown
    assert "late_nul.txt:1" in shown and "dir_\udcff/name_\udcfe.py:1" in shown
    for absent in ("noise.log", "build/", "excluded_by_git", "generated_x", "link_", ".git/"):
        assert absent not in shown
    assert result.binary == 1  # the early NUL
    assert result.undecodable == 1  # the latin-1 file, which holds "handler"
    assert result.large == 1
    absent = _scan(walk_files(str(tree), str(tree)), "no such text anywhere")
    assert (absent.binary, absent.undecodable, absent.large) == (1, 0, 1)


def test_a_file_not_in_utf8_is_listed_and_counted_only_when_it_matches(tmp_path: Path) -> None:
    """rg looks for a NUL beside the pattern, not for every byte over 0x7F: a binary is
    listed whatever the pattern (the scan counts it), a file that is not UTF-8 only when the
    pattern matches its bytes."""
    assert RG is not None
    (tmp_path / "hit.txt").write_bytes("café needle\n".encode("latin-1"))
    (tmp_path / "miss.txt").write_bytes("café crème\n".encode("latin-1"))
    (tmp_path / "blob.bin").write_bytes(b"\x89PNG\x00 nothing\n")
    (tmp_path / "utf8.md").write_text("naïve — no hit\n")
    with rg_engine.RgSearch(RG, str(tmp_path), "(?m)needle", False, MAX_FILE_BYTES) as run:
        listed = sorted(run.files(threading.Event(), time.monotonic() + 60))
    assert listed == ["blob.bin", "hit.txt"]
    result = _scan(walk_files(str(tmp_path), str(tmp_path)), "needle")
    assert (result.lines, result.binary, result.undecodable) == ([], 1, 1)


@pytest.mark.parametrize(
    "pattern", ["caf.", "caf[^a]", r"caf\W", r"caf\S", r"\pL{4} x", r"[^ ]+ end", "x.", r"\W\W"]
)
def test_stray_bytes_match_in_neither_engine(tmp_path: Path, pattern: str) -> None:
    """The count of non-UTF-8 files with a match is the scan's (RE2 over the file's bytes):
    rg must list every such file, so its pattern must match wherever RE2's does there too.
    Neither engine's classes match a byte that is not part of a UTF-8 character."""
    assert RG is not None
    (tmp_path / "latin.txt").write_bytes("café x\xff\xfe end\n".encode("latin-1"))
    (tmp_path / "mixed.txt").write_bytes(b"caf\xc3\xa9 x\xff\xfe end\n")
    (tmp_path / "text.txt").write_text("café x end\n")
    translated = rg_engine.translate_pattern(pattern)
    assert translated is not None
    found = rg_engine.candidates(
        RG, str(tmp_path), translated, False, MAX_FILE_BYTES, threading.Event(),
        time.monotonic() + 60,
    )  # fmt: skip
    assert found is not None
    walked = _scan(walk_files(str(tmp_path), str(tmp_path)), pattern)
    assert _scan(iter(found.files), pattern) == walked


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
    skipped = "[skipped files: 1 binary, 1 not UTF-8 with a match, 1 larger than 2 MB]"
    assert skipped in with_rg.content.replace(
        "[results capped at 50; narrow the search with `path` or `glob`]\n", ""
    )


@pytest.fixture(scope="module")
def skipped_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Hits in text files, and the pattern also in files the search skips: a binary (a NUL
    in its head), a file that is not UTF-8, a large file; binary, non-UTF-8 and large files
    without it; text that is UTF-8 but not ASCII, and a NUL past the sniffed head."""
    root = tmp_path_factory.mktemp("skipped")
    (root / "a_text.py").write_text("needle one\n")
    (root / "b_nul.bin").write_bytes(b"needle\x00 needle\n")
    (root / "c_latin.txt").write_bytes("needle café\n".encode("latin-1"))
    (root / "d_blob.bin").write_bytes(b"\x89PNG\x00\x01\x02 nothing here\n")
    (root / "e_latin.txt").write_bytes("café crème\n".encode("latin-1"))
    (root / "f_utf8.md").write_text("naïve needle\n")
    (root / "g_large.txt").write_text("needle\n" * (MAX_FILE_BYTES // 7 + 1))
    (root / "h_late_nul.txt").write_bytes(b"needle late\n" + b"x" * 9000 + b"\n\x00\n")
    sub = root / "sub"
    sub.mkdir()
    (sub / "i_text.py").write_text("needle two\nneedle three\n")
    (sub / "j_large.txt").write_text("hay\n" * (MAX_FILE_BYTES // 4 + 1))
    (sub / "k_nul.bin").write_bytes(b"\x00needle\n")
    (sub / "l_text.py").write_text("needle four\n")
    return root


def _with_and_without_rg(
    root: Path, args: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> tuple[str, str]:
    """The tool's answer through rg (checked to be rg's: it ran and gave its count of large
    files, so the walk did not answer), and without rg."""
    ctx = ToolContext("s", root, LocalFsBackend(), LocalShellBackend())
    runs: list[rg_engine.RgSearch] = []

    class Recorded(rg_engine.RgSearch):
        def __init__(self, *a: Any) -> None:
            super().__init__(*a)
            runs.append(self)

    with monkeypatch.context() as patch:
        patch.setattr(rg_engine, "RgSearch", Recorded)
        with_rg = anyio.run(SearchTool().run, args, ctx).content
    assert len(runs) == 1 and runs[0].large() is not None
    with monkeypatch.context() as patch:
        patch.setattr(rg_engine, "ripgrep_binary", lambda: None)
        without = anyio.run(SearchTool().run, args, ctx).content
    assert isinstance(with_rg, str) and isinstance(without, str)
    return with_rg, without


_LATIN = "1 not UTF-8 with a match"  # c_latin.txt; e_latin.txt holds no needle
_HITS = [
    "a_text.py:1: needle one",
    "f_utf8.md:1: naïve needle",
    "h_late_nul.txt:1: needle late",
    "sub/i_text.py:1: needle two",
    "sub/i_text.py:2: needle three",
    "sub/l_text.py:1: needle four",
]


@pytest.mark.parametrize(
    ("cap", "head", "skipped"),
    [
        # The cap falls in f_utf8.md: the skipped files before it count, none after.
        (1, "1 matching line in 1 file", "2 binary, 1 not UTF-8 with a match"),
        (3, "3 matching lines in 3 files", f"2 binary, {_LATIN}, 1 larger than 2 MB"),
        (4, "4 matching lines in 3 files", f"2 binary, {_LATIN}, 1 larger than 2 MB"),
        (5, "5 matching lines in 4 files", f"3 binary, {_LATIN}, 2 larger than 2 MB"),
        (6, "6 matching lines in 5 files", f"3 binary, {_LATIN}, 2 larger than 2 MB"),
    ],
)
def test_skipped_counts_and_order_are_the_walks_with_rg(
    skipped_tree: Path, monkeypatch: pytest.MonkeyPatch, cap: int, head: str, skipped: str
) -> None:
    """A file holding the pattern and a NUL in its head is counted as skipped, never shown;
    so is one that is not UTF-8; a binary without the pattern counts too (rg lists it for
    the count alone), a file that is not UTF-8 without it does not; only files before the
    cap point count. The answer is pinned, and is the same through rg (its count of large
    files included) and without it."""
    args = {"pattern": "needle", "max_results": cap}
    with_rg, without = _with_and_without_rg(skipped_tree, args, monkeypatch)
    capped = [f"[results capped at {cap}; narrow the search with `path` or `glob`]"]
    expected = [head + ":", *_HITS[:cap], *(capped if cap < len(_HITS) else [])]
    assert with_rg == without == "\n".join([*expected, f"[skipped files: {skipped}]"])


@pytest.mark.parametrize(
    ("glob", "answer"),
    [
        ("*.py", "4 matching lines in 3 files:"),
        ("*.txt", "1 matching line in 1 file:\nh_late_nul.txt:1: needle late\n"
         f"[skipped files: {_LATIN}, 2 larger than 2 MB]"),
    ],
)  # fmt: skip
def test_skipped_files_count_only_where_the_glob_selects(
    skipped_tree: Path, monkeypatch: pytest.MonkeyPatch, glob: str, answer: str
) -> None:
    """The large files rg leaves out count only when the glob selects them, as the walk's
    do: the `.py` files hold hits only; the `.txt` ones one hit, two non-UTF-8 files (one
    with the needle) and both large files."""
    args = {"pattern": "needle", "glob": glob}
    with_rg, without = _with_and_without_rg(skipped_tree, args, monkeypatch)
    assert with_rg == without
    assert with_rg.startswith(answer) and ("[skipped" in with_rg) == (glob == "*.txt")


def _large(root: Path, name: bytes) -> None:
    with open(os.path.join(os.fsencode(root), name), "wb") as f:
        f.write(b"needle\n" * (MAX_FILE_BYTES // 7 + 1))


def test_large_files_with_names_the_log_cannot_carry_are_named_exactly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """rg's log splits a name with a line feed over two lines and writes one that is not
    UTF-8 with U+FFFD: each large file is still the one on disk, counted once."""
    assert RG is not None
    for name in (b"big\nname.txt", b"big_\xff.txt", b"big ok: 12 bytes.txt"):
        _large(tmp_path, name)
    (tmp_path / "a.txt").write_text("needle\n")
    with rg_engine.RgSearch(RG, str(tmp_path), "needle", False, MAX_FILE_BYTES) as run:
        assert list(run.files(threading.Event(), time.monotonic() + 60)) == ["a.txt"]
        found = run.large_files()
    assert found is not None
    assert sorted(map(os.fsencode, found)) == [
        b"big\nname.txt",
        b"big ok: 12 bytes.txt",
        b"big_\xff.txt",
    ]
    with_rg, without = _with_and_without_rg(tmp_path, {"pattern": "needle"}, monkeypatch)
    assert (
        with_rg
        == without
        == "1 matching line in 1 file:\na.txt:1: needle\n[skipped files: 3 larger than 2 MB]"
    )


def test_large_files_the_log_names_alike_leave_the_answer_to_the_walk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two names that differ in bytes that are not UTF-8 read alike in rg's log: which is
    which is unknown, so rg gives no count and the walk's is the answer."""
    assert RG is not None
    _large(tmp_path, b"big_\xff.txt")
    _large(tmp_path, b"big_\xfe.txt")
    (tmp_path / "a.txt").write_text("needle\n")
    with rg_engine.RgSearch(RG, str(tmp_path), "needle", False, MAX_FILE_BYTES) as run:
        assert list(run.files(threading.Event(), time.monotonic() + 60)) == ["a.txt"]
        assert run.large_files() is None and run.large() is None
    ctx = ToolContext("s", tmp_path, LocalFsBackend(), LocalShellBackend())
    answer = anyio.run(SearchTool().run, {"pattern": "needle", "max_results": 1}, ctx).content
    assert (
        answer == "1 matching line in 1 file:\na.txt:1: needle\n[skipped files: 2 larger than 2 MB]"
    )
