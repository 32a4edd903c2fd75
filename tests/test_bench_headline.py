"""`make bench`'s headline: at most 15 rows, each judged by its ratio to a floor of the same run.

`scripts/bench_all.py` builds the headline from the figures the benchmarks write
(`headline_rows`), each beside a floor measured in the same run: its own, another figure's,
or the machine's yardstick (`import acp`, for targets set as absolute figures on one
machine). These tests feed it figures shaped as the benchmarks write them and check the rows:
every row has a target and a floor, a missing figure is shown as not measured (never as met),
and the same figures pass on a slow machine as on a fast one when the yardstick scales with
them. The last test ties each row to the benchmark that writes its figure, so a renamed
figure fails here rather than silently dropping out of the headline.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from scripts.bench_all import (
    HEADLINE,
    REFERENCE_ACP_MS,
    YARDSTICK,
    BenchRun,
    headline_rows,
    headline_table,
)

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def _figure(name: str, value: float, unit: str = "ms", **more: Any) -> dict[str, Any]:
    return {"name": name, "value": value, "unit": unit, "target": "—", "ok": None, **more}


def _runs(scale: float = 1.0) -> list[BenchRun]:
    """Figures as the benchmarks write them, times × `scale` (a slower machine)."""

    def run(name: str, *figures: dict[str, Any]) -> BenchRun:
        return BenchRun(name, SCRIPTS / f"bench_{name}.py", figures=list(figures))

    t = scale
    return [
        run(
            "startup",
            _figure("spawn → session/new answered", 900 * t, floor=760 * t),
            _figure("peak RSS after session/new", 95.0, "MB"),
            _figure("floor peak RSS (import acp)", 41.3, "MB"),
        ),
        run(
            "first_token",
            _figure("spawn → first streamed token", 850 * t, floor=880 * t),
            _figure("spawn → first token, SDK imported whole (public path)", 1400 * t),
        ),
        run(
            "turn",
            _figure("agent overhead per round trip", 12 * t),
            _figure("delta → session/update latency, median (5 ms apart)", 0.5 * t),
            _figure("delta → session/update, 200 deltas in 50 ms, 1 session, median", 1 * t),
            _figure(
                "delta → session/update, 200 deltas in 50 ms, 4 sessions at once, median",
                2.5 * t,
            ),
        ),
        run(
            "cache",
            _figure("cache share of input tokens (outside …)", 92.0, "%", floor=97.0),
            _figure("input cost ÷ uncached", 0.26, "x", floor=0.255),
        ),
        run(
            "search",
            _figure("search literal, 20k files", 100 * t, floor=90 * t),
            _figure("search literal ÷ rg", 1.1, "×"),
            _figure("search regex, 20k files", 140 * t, floor=100 * t),
        ),
        run(
            "load",
            _figure("session/load + replay, 200 messages", 0.2 * t, "s"),
            _figure("session/load + replay, 5000 messages", 2500 * t),
            _figure("load sent → first update, 5000 msgs", 40 * t),
            _figure("agent peak RSS, 5000 msgs loaded", 180.0, "MB"),
        ),
    ]


def test_the_headline_has_at_most_15_rows_each_with_a_target_and_a_floor() -> None:
    rows = headline_rows(_runs(), REFERENCE_ACP_MS)
    assert 0 < len(HEADLINE) <= 15
    assert len(rows) == len(HEADLINE)
    for row in rows:
        assert row["target"].startswith(("≤", "≥")), row
        assert row["floor"] is not None and row["floor_label"], row
        assert row["ratio"] == pytest.approx(row["value"] / row["floor"]), row
        assert row["ok"] is True, row
    table = headline_table(rows).splitlines()
    assert len(table) == len(rows) + 2  # the header, its rule, one line per row
    assert "not measured" not in "\n".join(table)


def test_a_target_set_on_one_machine_says_which_and_scales_with_the_yardstick() -> None:
    by_label = {r["label"]: r for r in headline_rows(_runs(), REFERENCE_ACP_MS)}
    overhead = by_label["turn overhead per round trip"]
    assert "where import acp took 760 ms" in overhead["target"]
    assert overhead["floor"] == REFERENCE_ACP_MS
    assert by_label["session/load + replay"]["value"] == pytest.approx(200.0)  # s → ms
    assert by_label["session/load + replay, long session"]["value"] == pytest.approx(2500.0)
    # A machine 1.6× slower: every time 1.6× longer, the yardstick too. Same verdicts.
    slow = headline_rows(_runs(1.6), REFERENCE_ACP_MS * 1.6)
    assert [r["ok"] for r in slow] == [True] * len(HEADLINE)
    # The same slow figures judged against the fast machine's yardstick miss.
    judged_fast = {r["label"]: r["ok"] for r in headline_rows(_runs(1.6), REFERENCE_ACP_MS)}
    assert judged_fast["turn overhead per round trip"] is False


def test_the_worst_pattern_and_a_missed_target_are_shown() -> None:
    runs = _runs()
    search = next(r for r in runs if r.name == "search")
    search.figures.append(_figure("search alternation, 20k files", 200.0, floor=100.0))
    rows = {r["label"]: r for r in headline_rows(runs, REFERENCE_ACP_MS)}
    worst = rows["search (worst pattern) ÷ rg"]
    assert worst["ratio"] == pytest.approx(2.0) and worst["ok"] is False
    assert "alternation" in worst["figure"]
    assert "MISS" in headline_table(list(rows.values()))


def test_a_figure_not_measured_is_never_shown_as_met() -> None:
    runs = [r for r in _runs() if r.name != "turn"]
    broken = BenchRun("cache", SCRIPTS / "bench_cache.py", error="exit 1: boom")
    runs = [broken if r.name == "cache" else r for r in runs]
    rows = headline_rows(runs, None)  # and no yardstick either
    missing = [r["label"] for r in rows if r["ok"] is None]
    assert set(missing) == {
        h.label for h in HEADLINE if h.bench in ("turn", "cache") or h.floor == YARDSTICK
    }
    table = headline_table(rows)
    assert table.count("not measured") == len(missing)
    assert all(r["value"] is None for r in rows if r["ok"] is None)


@pytest.mark.parametrize("row", HEADLINE, ids=[h.label for h in HEADLINE])
def test_each_row_names_a_figure_its_benchmark_writes(row: Any) -> None:
    script = (SCRIPTS / f"bench_{row.bench}.py").read_text(encoding="utf-8")
    # The literal start of the pattern (up to a comma or its first regex metacharacter) is
    # in the script that writes the figure.
    literal = _literal(row.figure)
    assert len(literal) >= 6 and literal in script, (row.bench, literal)
    if row.floor not in ("own", YARDSTICK):
        bench, _, pattern = row.floor.partition(":")
        other = (SCRIPTS / f"bench_{bench}.py").read_text(encoding="utf-8")
        assert _literal(pattern) in other


def _literal(pattern: str) -> str:
    return re.split(r"[,\\.*+?()\[\]$^]", pattern)[0].rstrip()


def test_a_zero_value_is_measured_and_a_zero_floor_is_not() -> None:
    runs = _runs()
    turn = next(r for r in runs if r.name == "turn")
    turn.figures[0] = _figure("agent overhead per round trip", 0.0)
    startup = next(r for r in runs if r.name == "startup")
    startup.figures[0] = _figure("spawn → session/new answered", 900.0, floor=0.0)
    rows = {r["label"]: r for r in headline_rows(runs, REFERENCE_ACP_MS)}
    assert rows["turn overhead per round trip"]["ok"] is True
    assert rows["turn overhead per round trip"]["ratio"] == 0.0
    assert rows["start-up: spawn → session/new"]["ok"] is None
