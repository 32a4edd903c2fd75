"""The search tool: regex over contents, glob over names, .gitignore, caps, skipped files."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from defect_core.tools.backends import LocalFsBackend, LocalShellBackend
from defect_core.tools.base import ToolContext, ToolError
from defect_core.tools.search import SearchTool, parse_ignore, translate_glob, walk_files
from defect_core.tools.workspace import OutsideWorkspace

SEARCH = SearchTool()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def make_ctx(root: Path, **kw: Any) -> ToolContext:
    return ToolContext("s1", root, LocalFsBackend(), LocalShellBackend(), **kw)


def write(root: Path, files: dict[str, str | bytes]) -> None:
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)


def listed(root: Path) -> list[str]:
    return [rel for _, rel in walk_files(str(root), str(root))]


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    write(
        root,
        {
            "src/app.py": "import os\n\ndef main():\n    return os.getcwd()\n",
            "src/util.py": "def helper():\n    return 42\n",
            "src/web/page.ts": "export const main = () => 1;\n",
            "README.md": "# Project\nmain entry point\n",
        },
    )
    return root


@pytest.mark.anyio
async def test_regex_lists_matching_lines_with_project_paths(ws: Path) -> None:
    out = await SEARCH.run({"pattern": r"def \w+\("}, make_ctx(ws))
    assert out.content == (
        "2 matching lines in 2 files:\nsrc/app.py:3: def main():\nsrc/util.py:1: def helper():"
    )
    assert not out.is_error


@pytest.mark.anyio
async def test_glob_alone_lists_files_and_filters_a_content_search(ws: Path) -> None:
    out = await SEARCH.run({"glob": "*.py"}, make_ctx(ws))
    assert out.content == "2 files matching '*.py':\nsrc/app.py\nsrc/util.py"
    out = await SEARCH.run({"glob": "src/**/*.{ts,md}"}, make_ctx(ws))
    assert out.content == "1 file matching 'src/**/*.{ts,md}':\nsrc/web/page.ts"
    out = await SEARCH.run({"pattern": "main", "glob": "*.ts"}, make_ctx(ws))
    assert out.content == (
        "1 matching line in 1 file:\nsrc/web/page.ts:1: export const main = () => 1;"
    )


@pytest.mark.anyio
async def test_path_limits_the_search_to_a_directory_or_a_file(ws: Path) -> None:
    out = await SEARCH.run({"pattern": "main", "path": "src"}, make_ctx(ws))
    assert isinstance(out.content, str)
    assert out.content.splitlines()[1:] == [
        "src/app.py:3: def main():",
        "src/web/page.ts:1: export const main = () => 1;",
    ]
    out = await SEARCH.run({"pattern": "return", "path": "src/util.py"}, make_ctx(ws))
    assert out.content == "1 matching line in 1 file in src/util.py:\nsrc/util.py:2:     return 42"
    assert SEARCH.describe({"pattern": "foo", "path": "src"}, make_ctx(ws)).title == (
        "Search 'foo' in src/"
    )


@pytest.mark.anyio
async def test_no_match_is_a_plain_answer_not_an_error(ws: Path) -> None:
    out = await SEARCH.run({"pattern": "nothing-like-this"}, make_ctx(ws))
    assert out.content == "No matches for 'nothing-like-this'"
    assert not out.is_error


@pytest.mark.anyio
async def test_case_insensitive_and_anchors(ws: Path) -> None:
    out = await SEARCH.run({"pattern": "^# project$", "case_insensitive": True}, make_ctx(ws))
    assert out.content == "1 matching line in 1 file:\nREADME.md:1: # Project"


@pytest.mark.anyio
async def test_gitignore_rules_nested_negated_anchored_and_directory_only(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            ".gitignore": "*.log\n!keep.log\nbuild/\n/top.txt\ndocs/**/draft*\n",
            "a.log": "x\n",
            "keep.log": "x\n",
            "top.txt": "x\n",
            "sub/top.txt": "x\n",
            "build/out.txt": "x\n",
            "sub/build": "x\n",  # a file named build: `build/` only ignores directories
            "docs/guide/draft1.md": "x\n",
            "docs/guide/final.md": "x\n",
            "sub/.gitignore": "*.tmp\n!important.tmp\n",
            "sub/junk.tmp": "x\n",
            "sub/important.tmp": "x\n",
            "other/junk.tmp": "x\n",  # the nested rule applies below sub/ only
            ".git/config": "x\n",
            ".git/HEAD": "x\n",
        },
    )
    assert sorted(listed(tmp_path)) == [
        ".gitignore",
        "docs/guide/final.md",
        "keep.log",
        "other/junk.tmp",
        "sub/.gitignore",
        "sub/build",
        "sub/important.tmp",
        "sub/top.txt",
    ]
    out = await SEARCH.run({"pattern": "x"}, make_ctx(tmp_path))
    assert isinstance(out.content, str)
    assert "a.log" not in out.content and ".git/" not in out.content
    assert "keep.log:1: x" in out.content


def test_a_file_in_an_ignored_directory_cannot_be_re_included(tmp_path: Path) -> None:
    write(tmp_path, {".gitignore": "out/\n!out/keep.txt\n", "out/keep.txt": "x", "a.txt": "x"})
    assert listed(tmp_path) == [".gitignore", "a.txt"]


def test_rules_of_ancestors_apply_when_searching_a_subdirectory(tmp_path: Path) -> None:
    write(tmp_path, {".gitignore": "*.gen.py\n/pkg/local.txt\n", "pkg/a.gen.py": "x",
                     "pkg/b.py": "x", "pkg/local.txt": "x"})  # fmt: skip
    assert [rel for _, rel in walk_files(str(tmp_path / "pkg"), str(tmp_path))] == ["b.py"]


def test_repository_root_above_the_workspace_and_info_exclude(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            ".git/info/exclude": "*.secret\n",
            ".gitignore": "ws/ignored.txt\n",
            "ws/a.txt": "x",
            "ws/ignored.txt": "x",
            "ws/key.secret": "x",
        },
    )
    ws = tmp_path / "ws"
    assert [rel for _, rel in walk_files(str(ws), str(ws))] == ["a.txt"]


@pytest.mark.anyio
async def test_binary_non_utf8_and_huge_files_are_skipped_and_counted(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "blob.bin": b"needle\x00\x01\x02",
            "latin.txt": "needle café".encode("latin-1"),
            "latin_no_needle.txt": "café crème".encode("latin-1"),
            "big.txt": "needle\n" + "x" * (3 * 1024 * 1024),
            "ok.txt": "needle\n",
        },
    )
    out = await SEARCH.run({"pattern": "needle"}, make_ctx(tmp_path))
    assert out.content == (
        "1 matching line in 1 file:\nok.txt:1: needle\n"
        "[skipped files: 1 binary, 1 not UTF-8 with a match, 1 larger than 2 MB]"
    )


@pytest.mark.anyio
async def test_results_are_capped_with_a_marker(tmp_path: Path) -> None:
    write(tmp_path, {f"f{i:02}.txt": "hit\nhit\n" for i in range(30)})
    out = await SEARCH.run({"pattern": "hit", "max_results": 5}, make_ctx(tmp_path))
    assert isinstance(out.content, str)
    lines = out.content.splitlines()
    assert lines[1:6] == ["f00.txt:1: hit", "f00.txt:2: hit", "f01.txt:1: hit",
                          "f01.txt:2: hit", "f02.txt:1: hit"]  # fmt: skip
    assert lines[-1] == "[results capped at 5; narrow the search with `path` or `glob`]"
    out = await SEARCH.run({"glob": "*.txt", "max_results": 3}, make_ctx(tmp_path))
    assert isinstance(out.content, str)
    assert out.content.startswith("30 files matching '*.txt':\nf00.txt\nf01.txt\nf02.txt\n[results")


@pytest.mark.anyio
async def test_long_lines_are_cut(tmp_path: Path) -> None:
    write(tmp_path, {"min.js": "needle" + "y" * 1000 + "\n"})
    out = await SEARCH.run({"pattern": "needle"}, make_ctx(tmp_path))
    assert isinstance(out.content, str)
    line = out.content.splitlines()[1]
    assert line.startswith("min.js:1: needle") and line.endswith("…")
    assert len(line) < 330


@pytest.mark.anyio
async def test_symlinks_are_not_followed(tmp_path: Path) -> None:
    write(tmp_path, {"outside/secret.txt": "needle\n", "ws/a.txt": "needle\n"})
    ws = tmp_path / "ws"
    (ws / "link.txt").symlink_to(tmp_path / "outside" / "secret.txt")
    (ws / "linkdir").symlink_to(tmp_path / "outside")
    out = await SEARCH.run({"pattern": "needle"}, make_ctx(ws))
    assert out.content == "1 matching line in 1 file:\na.txt:1: needle"


@pytest.mark.anyio
async def test_path_outside_the_workspace_is_refused_unless_reads_are_allowed(
    tmp_path: Path,
) -> None:
    write(tmp_path, {"outside/secret.txt": "needle\n", "ws/a.txt": "x\n"})
    ws = tmp_path / "ws"
    with pytest.raises(OutsideWorkspace):
        await SEARCH.run({"pattern": "needle", "path": "../outside"}, make_ctx(ws))
    out = await SEARCH.run(
        {"pattern": "needle", "path": "../outside"}, make_ctx(ws, allow_read_outside=True)
    )
    assert isinstance(out.content, str) and "secret.txt:1: needle" in out.content


@pytest.mark.anyio
async def test_bad_arguments(ws: Path) -> None:
    with pytest.raises(ToolError, match="give a `pattern`, a `glob`, or both"):
        await SEARCH.run({}, make_ctx(ws))
    with pytest.raises(ToolError, match="invalid regular expression '\\(unclosed'"):
        await SEARCH.run({"pattern": "(unclosed"}, make_ctx(ws))
    with pytest.raises(ToolError, match="path not found: nope"):
        await SEARCH.run({"pattern": "x", "path": "nope"}, make_ctx(ws))
    with pytest.raises(ToolError, match="max_results: Input should be less than or equal"):
        await SEARCH.run({"pattern": "x", "max_results": 10**6}, make_ctx(ws))


@pytest.mark.parametrize(
    ("pattern", "path", "matches"),
    [
        ("*.py", "a.py", True),
        ("*.py", "d/a.py", False),
        ("**/*.py", "d/e/a.py", True),
        ("**/*.py", "a.py", True),
        ("src/**", "src/a/b", True),
        ("src/**", "src", False),
        ("a/**/b", "a/b", True),
        ("a/**/b", "a/x/y/b", True),
        ("f?o", "foo", True),
        ("f?o", "f/o", False),
        ("[abc].txt", "b.txt", True),
        ("[!abc].txt", "b.txt", False),
        ("[!abc].txt", "d.txt", True),
        ("\\*.txt", "*.txt", True),
        ("\\*.txt", "a.txt", False),
        ("[unclosed", "[unclosed", True),
    ],
)
def test_translate_glob(pattern: str, path: str, matches: bool) -> None:
    assert (re.fullmatch(translate_glob(pattern), path) is not None) is matches


def test_parse_ignore_skips_comments_blanks_and_keeps_escaped_spaces() -> None:
    runs = parse_ignore("# comment\n\nfoo \nbar\\ \n!baz\n")
    assert [r.negate for r in runs] == [False, True]
    assert runs[0].matches("foo", "foo", False)
    assert runs[0].matches("bar ", "bar ", False)
    assert not runs[0].matches("bar", "bar", False)


def test_search_identity() -> None:
    assert (SEARCH.name, SEARCH.kind, SEARCH.safety.value) == ("search", "search", "read_only")
    assert SEARCH.permission_key({"pattern": "x"}) == "search"


@pytest.mark.anyio
async def test_a_catastrophic_pattern_runs_in_linear_time(tmp_path: Path) -> None:
    # `(a+)+$` backtracks exponentially in Python's `re` on a line of `a`s that ends in `b`
    # (it would hold the GIL for longer than the universe has existed); RE2 answers at once.
    write(tmp_path, {"aaa.txt": "a" * 200_000 + "b\n", "ok.txt": "aaa\n"})
    out = await SEARCH.run({"pattern": r"(a+)+$"}, make_ctx(tmp_path))
    assert out.content == "1 matching line in 1 file:\nok.txt:1: aaa"


@pytest.mark.anyio
async def test_patterns_re2_cannot_run_are_a_clear_error(tmp_path: Path) -> None:
    write(tmp_path, {"a.txt": "ab\n"})
    for pattern in (r"(?<=a)b", r"(a)\1"):
        with pytest.raises(ToolError, match=r"the syntax is RE2: like Python's, without lookar"):
            await SEARCH.run({"pattern": pattern}, make_ctx(tmp_path))


@pytest.mark.anyio
async def test_unicode_and_case_insensitive_matching(tmp_path: Path) -> None:
    write(tmp_path, {"fr.txt": "une École\nune ecole\n", "x.txt": "ÉCOLE"})
    out = await SEARCH.run({"pattern": r"école$", "case_insensitive": True}, make_ctx(tmp_path))
    assert out.content == "2 matching lines in 2 files:\nfr.txt:1: une École\nx.txt:1: ÉCOLE"
    # RE2's `\w` is ASCII; `\pL` is any letter.
    out = await SEARCH.run({"pattern": r"\pL+cole"}, make_ctx(tmp_path))
    assert "fr.txt:1: une École" in out.content and "fr.txt:2: une ecole" in out.content
