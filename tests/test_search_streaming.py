"""A search over a big tree shows its first hits while it runs, and its answer does not
depend on the order rg finds the files in.

`defect_core/tools/search/ordering.py` scans rg's candidates as they come and must answer
exactly as the walk-order scan does (lines, order, cap, counts), reading nothing past the
cap point; `preview.py` and `tool.py` stream the first hits as the call's progress — checked
through the tool with a recording context, with and without rg, and through the real
`defect acp` process, where the progress arrives as `tool_call_update` content before the
final update.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from defect_core.events import TextDisplay, ToolDisplay
from defect_core.tools.backends import LocalFsBackend, LocalShellBackend
from defect_core.tools.base import ToolContext
from defect_core.tools.search import (
    SearchTool,
    compile_pattern,
    matching,
    ordering,
    rg_engine,
    scan,
)
from defect_core.tools.search import tool as tool_module
from defect_core.tools.search.ignore import walk_files, walk_order
from defect_core.tools.search.matching import MAX_FILE_BYTES, ScanResult
from defect_core.tools.search.preview import PREVIEW_LINES, Preview
from tests.support.acp_harness import RecordingClient, script_env, spawn_defect

RG = rg_engine.ripgrep_binary()
needs_rg = pytest.mark.skipif(RG is None, reason="ripgrep is not installed")


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A few hundred files in nested directories: matches spread everywhere, several per
    file in some, binaries, non-UTF-8 files and large files between them."""
    root = tmp_path_factory.mktemp("mixed")
    (root / ".gitignore").write_text("ignored/\n")
    for i in range(300):
        d = root / f"d{i % 7}" / f"e{i % 3}"
        d.mkdir(parents=True, exist_ok=True)
        if i % 23 == 0:
            (d / f"bin{i}.dat").write_bytes(b"needle\x00" + bytes(range(256)))
        elif i % 29 == 0:
            (d / f"latin{i}.txt").write_bytes("needle café\n".encode("latin-1"))
        elif i % 97 == 0:
            (d / f"large{i}.txt").write_text("needle\n" * (MAX_FILE_BYTES // 7 + 1))
        else:
            (d / f"f{i}.py").write_text("x = 1\n" + "needle here\n" * (i % 4) + "end\n")
    (root / "ignored").mkdir()
    (root / "ignored" / "n.py").write_text("needle ignored\n")
    return root


def _scan_tree(root: Path, pattern: str, cap: int = 2000) -> ScanResult:
    files = walk_files(str(root), str(root))
    regex = compile_pattern(pattern)
    return scan(files, "", regex, None, cap, threading.Event(), time.monotonic() + 60)


def _walked(root: Path, cap: int) -> ScanResult:
    return _scan_tree(root, "needle", cap)


def _in_any_order(
    root: Path, rels: Iterator[str], cap: int, preview: Preview | None = None
) -> ScanResult:
    regex, stop = compile_pattern("needle"), threading.Event()
    deadline = time.monotonic() + 60
    return ordering.scan_in_any_order(
        str(root), rels, "", regex, None, cap, stop, deadline, preview
    )


@pytest.mark.parametrize("cap", [1, 2, 3, 5, 17, 100, 2000])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_any_arrival_order_gives_the_walk_orders_answer(mixed: Path, cap: int, seed: int) -> None:
    files = list(walk_files(str(mixed), str(mixed)))
    random.Random(seed).shuffle(files)
    preview = Preview()
    shuffled = _in_any_order(mixed, (rel for _, rel in files), cap, preview)
    walked = _walked(mixed, cap)
    assert shuffled == walked
    if cap == 2000:  # the fixture has what it claims
        assert not walked.capped and walked.large == 3
        assert (walked.binary, walked.undecodable) == (14, 10)  # each latin-1 file holds one
    else:
        assert walked.capped
    assert preview.version > 0


@pytest.mark.parametrize("arrival", ["walk order", "reverse walk order"])
def test_nothing_past_the_cap_point_is_read(
    mixed: Path, monkeypatch: pytest.MonkeyPatch, arrival: str
) -> None:
    read: list[str] = []
    real = ordering.text_of
    monkeypatch.setattr(
        ordering, "text_of", lambda full, seen, rx: read.append(full) or real(full, seen, rx)
    )
    files = sorted(walk_files(str(mixed), str(mixed)), key=lambda f: walk_order(f[1]))
    if arrival == "reverse walk order":
        files.reverse()
    result = _in_any_order(mixed, (rel for _, rel in files), 3)
    assert result == _walked(mixed, 3) and result.capped
    # The cap falls in the first files of the walk. In walk order, the rest come after it,
    # unread; in reverse, the last files fill the cap, and the others wait for the end of
    # the listing, then are read in walk order up to the cap point only.
    assert len(read) < 20 < len(files)


@needs_rg
def test_rg_candidates_in_rgs_own_order_give_the_walks_answer(mixed: Path) -> None:
    assert RG is not None
    run = rg_engine.RgSearch(RG, str(mixed), "needle", False, MAX_FILE_BYTES)
    with run:
        result = _in_any_order(mixed, run.files(threading.Event(), time.monotonic() + 60), 2000)
        large = run.large()
    assert large == 3  # the three large files, counted from rg's log
    result.large += large
    assert result == _walked(mixed, 2000)


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Enough files that a search runs well past its first hit on any machine."""
    root = tmp_path_factory.mktemp("big")
    body = "".join(f"    value_{k} = compute({k})\n" for k in range(40))
    for i in range(4000):
        d = root / f"pkg{i // 400}" / f"mod{i // 40 % 10}"
        if i % 40 == 0:
            d.mkdir(parents=True)
        (d / f"m{i}.py").write_text(f"def target_{i}():\n{body}")
    return root


def _search(root: Path, args: dict[str, Any]) -> tuple[str, list[str]]:
    reports: list[str] = []

    async def report(display: tuple[ToolDisplay, ...]) -> None:
        assert len(display) == 1 and isinstance(display[0], TextDisplay)
        reports.append(display[0].text)

    ctx = ToolContext("s", root, LocalFsBackend(), LocalShellBackend(), report=report)
    out = anyio.run(SearchTool().run, args, ctx)
    assert isinstance(out.content, str)
    return out.content, reports


@pytest.mark.parametrize("engine", ["rg", "python"])
def test_the_first_hits_are_reported_before_the_answer(
    big: Path, engine: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if engine == "rg" and RG is None:
        pytest.skip("ripgrep is not installed")
    if engine == "python":
        monkeypatch.setattr(rg_engine, "ripgrep_binary", lambda: None)
    answer, reports = _search(big, {"pattern": r"def target_\d+", "max_results": 2000})
    assert answer.startswith("2000 matching lines in 2000 files:")
    assert reports, "no progress before the answer"
    first = reports[0].splitlines()
    assert first[0].startswith("Searching… ") and first[0].endswith(" so far:")
    hits = [line for line in first[1:] if line != "…"]
    assert hits
    for hit in hits:  # real hits, though maybe past the cap of the answer (found first)
        path, number, text = hit.split(":", 2)
        assert text.startswith(" def target_")
        assert (big / path).read_text().splitlines()[int(number) - 1] == text[1:]
    for text in reports:  # bounded, whatever the tree
        assert len(text.splitlines()) <= PREVIEW_LINES + 2


def test_the_preview_keeps_the_first_lines_and_counts_the_rest() -> None:
    preview = Preview(limit=3)
    assert preview.version == 0
    preview.add(["a.py:1: x", "a.py:2: y"], files=1)
    preview.add(["b.py:7: z", "b.py:9: w"], files=1)
    assert preview.version == 2
    assert preview.snapshot(files_only=False).splitlines() == [
        "Searching… 4 matching lines in 2 files so far:", "a.py:1: x", "a.py:2: y",
        "b.py:7: z", "…",
    ]  # fmt: skip
    listing = Preview()
    assert listing.snapshot(files_only=True) is None  # nothing to show yet
    listing.add(["a.py"], files=1)
    assert listing.snapshot(files_only=True) == "Searching… 1 file found so far:\na.py"
    listing.clear()
    assert listing.snapshot(files_only=True) is None and listing.version == 2


def test_a_search_without_hits_reports_nothing_until_its_answer(big: Path) -> None:
    answer, reports = _search(big, {"pattern": "no such text"})
    assert answer == "No matches for 'no such text'"
    assert reports == []


@pytest.mark.anyio
async def test_progress_reaches_the_editor_before_the_final_update(
    big: Path, tmp_path: Path
) -> None:
    replies = [
        {"tool_calls": [{"name": "search", "input": {"pattern": r"def target_\d+"}}]},
        {"text": "found them"},
    ]
    client = RecordingClient()
    async with spawn_defect(env=script_env(tmp_path, replies), client=client) as agent:
        await agent.initialize()
        session = await agent.new_session(big)
        done = await agent.prompt(session, "find the targets")
        assert done.stop_reason == "end_turn"
        calls = [
            u
            for sid, u in client.updates
            if sid == session and u.session_update in ("tool_call", "tool_call_update")
        ]
        texts = [
            (u.status, c.content.text)
            for u in calls
            for c in (u.content or ())
            if getattr(c.content, "type", None) == "text"
        ]
        progress = [t for status, t in texts if status is None and t.startswith("Searching… ")]
        final = [t for status, t in texts if status == "completed"]
        assert progress, texts
        assert len(final) == 1 and final[0].startswith("200 matching lines in 200 files:")
        last_progress = max(i for i, (s, t) in enumerate(texts) if t.startswith("Searching"))
        assert last_progress < texts.index(("completed", final[0]))
        agent.assert_schema_clean()


def test_rg_records_split_anywhere_and_names_with_line_feeds() -> None:
    stream = b"./a.py\x001\n./odd\nname.py\x001\n./dir/b.md\x001\n"
    for cut in range(len(stream) + 1):  # however the pipe splits it
        first, rest = rg_engine._records(stream[:cut])
        second, left = rg_engine._records(rest + stream[cut:])
        assert first + second == [b"./a.py", b"./odd\nname.py", b"./dir/b.md"]
        assert left == b""


@needs_rg
def test_a_name_with_a_line_feed_is_found_through_rg(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "odd\nname.py").write_text("needle\n")
    (tmp_path / "odd").write_text("no\n")
    (tmp_path / "name.py").write_text("needle too\n")
    with_rg, _ = _search(tmp_path, {"pattern": "needle"})
    monkeypatch.setattr(rg_engine, "ripgrep_binary", lambda: None)
    without, _ = _search(tmp_path, {"pattern": "needle"})
    assert with_rg == without
    assert "odd\nname.py:1: needle" in with_rg and "name.py:1: needle too" in with_rg


@needs_rg
def test_rg_left_writing_is_never_waited_on(big: Path) -> None:
    assert RG is not None
    run = rg_engine.RgSearch(RG, str(big), "def target_", False, MAX_FILE_BYTES)
    with run:
        files = run.files(threading.Event(), time.monotonic() + 60)
        assert next(files).endswith(".py")
        # 4000 candidates fill the pipe: rg blocks, and the count is not rg's to give.
        assert run.large() is None
    assert run.large() is None  # killed on leaving the block, still no count


def test_a_search_past_its_deadline_says_its_results_are_partial(
    big: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tool_module, "SEARCH_DEADLINE", 0.0)
    answer, _ = _search(big, {"pattern": "def target_"})
    assert answer.endswith("[the search stopped after 0 s; results are partial]")


def test_a_binary_is_not_read_past_its_sniffed_head(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "image.bin").write_bytes(b"\x89PNG\x00" + b"x" * (1 << 20))
    (tmp_path / "late_nul.txt").write_bytes(b"needle\n" + b"y" * 9000 + b"\x00\n")
    (tmp_path / "text.txt").write_bytes(b"needle\n" + b"z" * 9000 + b"\n")
    asked: list[int] = []
    real = os.read
    monkeypatch.setattr(matching.os, "read", lambda fd, n: asked.append(n) or real(fd, n))
    result = _scan_tree(tmp_path, "needle")
    assert result.binary == 1 and result.lines == ["late_nul.txt:1: needle", "text.txt:1: needle"]
    assert sum(asked) < 3 * 8192 + 2 * 9010  # the two texts whole, the image's head only


def test_a_reader_waiting_for_news_is_told_once_by_the_adding_thread() -> None:
    preview = Preview()
    told: list[str] = []
    preview.on_next_add(lambda: told.append(threading.current_thread().name))
    adder = threading.Thread(target=preview.add, args=(["a.py:1: x"], 1), name="scan")
    adder.start()
    adder.join()
    preview.add(["a.py:2: y"], files=0)  # told already: not again
    assert told == ["scan"]
    preview.on_next_add(lambda: told.append("again"))
    preview.on_next_add(None)  # forgotten
    preview.add(["b.py:1: z"], files=1)
    assert told == ["scan"]


@pytest.mark.parametrize("delay", [0.0, 0.05])
def test_a_hit_is_shown_while_the_scan_still_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, delay: float
) -> None:
    """The scan finds a hit, then waits for the user to see it before it goes on: the
    progress must reach the editor while the scan still runs, whether the hit comes before
    the progress task waits (no delay) or after (the scan's thread wakes it)."""
    seen = threading.Event()

    def scan_waiting_to_be_seen(*args: Any) -> ScanResult:
        preview = args[-1]
        assert isinstance(preview, Preview)
        time.sleep(delay)
        preview.add(["a.py:1: needle"], files=1)
        assert seen.wait(10), "the hit was not shown while the scan ran"
        return ScanResult(lines=["a.py:1: needle"], files_matched=1, matches=1)

    async def report(display: tuple[ToolDisplay, ...]) -> None:
        assert isinstance(display[0], TextDisplay) and "a.py:1: needle" in display[0].text
        seen.set()

    monkeypatch.setattr(SearchTool, "_search", staticmethod(scan_waiting_to_be_seen))
    ctx = ToolContext("s", tmp_path, LocalFsBackend(), LocalShellBackend(), report=report)
    out = anyio.run(SearchTool().run, {"pattern": "needle"}, ctx)
    assert out.content == "1 matching line in 1 file:\na.py:1: needle"


def test_a_name_that_is_not_utf8_shows_as_replacement_in_the_progress() -> None:
    """A scan hands names with surrogate escapes (bytes that are not UTF-8); the progress
    text is valid Unicode, as the final answer is, or no JSON writer could send it."""
    preview = Preview()
    preview.add([os.fsdecode(b"bad\xff.txt") + ":1: needle"], files=1)
    text = preview.snapshot(files_only=False)
    assert text is not None and "bad\ufffd.txt:1: needle" in text
    text.encode("utf-8")  # strict: raises on a lone surrogate
