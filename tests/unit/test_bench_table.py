"""The benchmark suite's pure parts: percentiles, ratios, goals and the table (no timing here)."""

from __future__ import annotations

import statistics

import pytest
from benchmarks.table import (
    Goal,
    Latencies,
    Report,
    Row,
    below,
    faster_than,
    format_value,
    mb,
    median,
    percentile,
    rate,
    rate_times,
    ratio_text,
    render_report,
    render_table,
    share_of,
    within,
)
from hypothesis import given
from hypothesis import strategies as st

# -- statistics -----------------------------------------------------------------------------------


def test_percentile_interpolates_between_closest_ranks() -> None:
    samples = [4.0, 1.0, 3.0, 2.0]  # order does not matter
    assert percentile(samples, 0) == 1.0
    assert percentile(samples, 100) == 4.0
    assert percentile(samples, 50) == 2.5
    assert percentile(samples, 25) == pytest.approx(1.75)
    assert percentile([7.0], 99) == 7.0


def test_p99_of_a_hundred_samples_sits_between_the_top_two() -> None:
    samples = [float(i) for i in range(1, 101)]
    assert percentile(samples, 99) == pytest.approx(99.01)
    assert median(samples) == 50.5


@given(st.lists(st.floats(0, 1e6, allow_nan=False), min_size=2, max_size=200))
def test_percentile_agrees_with_statistics_inclusive_quantiles(samples: list[float]) -> None:
    quartiles = statistics.quantiles(samples, n=4, method="inclusive")
    for q, expected in zip((25, 50, 75), quartiles, strict=True):
        assert percentile(samples, q) == pytest.approx(expected, rel=1e-9, abs=1e-9)


@given(st.lists(st.floats(0, 1e6, allow_nan=False), min_size=1, max_size=50), st.floats(0, 100))
def test_percentile_is_within_the_samples(samples: list[float], q: float) -> None:
    assert min(samples) <= percentile(samples, q) <= max(samples)


def test_percentile_refuses_nothing_and_out_of_range() -> None:
    with pytest.raises(ValueError):
        percentile([], 50)
    with pytest.raises(ValueError):
        percentile([1.0], 101)


def test_latencies_in_milliseconds() -> None:
    series = Latencies.of([0.010, 0.020, 0.030])
    assert series.n == 3
    assert series.ms(50) == pytest.approx(20.0)
    with pytest.raises(ValueError):
        Latencies.of([])
    with pytest.raises(ValueError):
        Latencies.of([-1.0])


def test_rate_and_megabytes() -> None:
    assert rate(50, 2.0) == 25.0
    with pytest.raises(ValueError):
        rate(1, 0.0)
    assert mb(209_715_200) == pytest.approx(209.7152)


# -- ratios and goals -----------------------------------------------------------------------------


def row(value: float | None, peer: float | None, unit: str = "ms", **kw: object) -> Row:
    return Row("S", "figure", value, unit, "peer", peer, **kw)  # type: ignore[arg-type]


def test_ratio_is_allocbridge_over_peer() -> None:
    assert row(10.0, 400.0).ratio == 0.025
    assert row(None, 400.0).ratio is None
    assert row(10.0, None).ratio is None
    assert row(10.0, 0.0).ratio is None
    assert row(-1.0, 5.0, "MB").ratio is None  # a difference of readings below zero: noise
    assert row(1.0, -5.0, "MB").ratio is None
    assert row(0.0, 5.0, "MB").ratio == 0.0


def test_faster_than_five_times() -> None:
    goal = faster_than(5)
    assert goal.check(10.0, 10.0 / 50.0) is True  # exactly 5x
    assert goal.check(10.0, 10.0 / 49.0) is False
    assert goal.check(10.0, None) is None
    assert row(10.0, 400.0, goals=(goal,)).result == "met"
    assert row(100.0, 400.0, goals=(goal,)).result == "MISSED"


def test_within_and_share_and_rate_goals() -> None:
    assert row(15.0, 10.0, "s", goals=(within(1.5),)).result == "met"
    assert row(15.1, 10.0, "s", goals=(within(1.5),)).result == "MISSED"
    assert row(80.0, 100.0, "MB/s", goals=(share_of(0.8),)).result == "met"
    assert row(79.0, 100.0, "MB/s", goals=(share_of(0.8),)).result == "MISSED"
    assert row(500.0, 100.0, "req/s", goals=(rate_times(5),)).result == "met"


def test_value_goals_and_several_goals() -> None:
    p50 = below(50, "ms")
    assert p50.check(49.9, None) is True
    assert p50.check(50.0, None) is False
    both = (p50, faster_than(5))
    assert row(12.0, 400.0, goals=both).result == "met"
    assert row(60.0, 400.0, goals=both).result == "MISSED"  # one missed is enough
    assert row(12.0, None, goals=both).result == "n/a"  # the ratio could not be checked
    assert row(None, None, goals=both).result == "n/a"
    assert row(12.0, 400.0).result == ""


def test_goal_descriptions() -> None:
    assert below(50, "ms").describe("ms") == "< 50.0 ms"
    assert faster_than(5).describe("ms") == "≥ 5x faster than peer"
    assert within(1.5).describe("s") == "≤ 1.5x peer's time"
    assert share_of(0.8).describe("MB/s") == "≥ 0.8x peer's throughput"
    assert Goal("ratio", "<=", 2).describe("ms") == "ratio ≤ 2"
    assert Goal("value", ">", 3, "").describe("MB") == "> 3.0 MB"


def test_ratio_text_says_what_it_means() -> None:
    assert ratio_text(row(10.0, 320.0)) == "0.031 (32x faster)"
    assert ratio_text(row(15.0, 10.0, "s")) == "1.50 (1.5x slower)"
    assert ratio_text(row(85.0, 100.0, "MB/s")) == "0.85 (1.18x lower)"
    assert ratio_text(row(300.0, 100.0, "req/s")) == "3.00 (3x higher)"
    assert ratio_text(row(20.0, 80.0, "MB")) == "0.25 (4x less)"
    assert ratio_text(row(10.0, 10.0)) == "1.00 (same)"
    assert ratio_text(row(0.0, 10.0)) == "0"
    assert ratio_text(row(None, 10.0)) == "—"


# -- formatting and the table ---------------------------------------------------------------------


def test_format_value_precision_follows_size() -> None:
    assert format_value(3.14159, "ms") == "3.14 ms"
    assert format_value(31.4159, "ms") == "31.4 ms"
    assert format_value(314.159, "ms") == "314 ms"
    assert format_value(0.4321, "s") == "0.432 s"
    assert format_value(12.345, "s") == "12.3 s"
    assert format_value(1234.5, "req/s") == "1,234 req/s"
    assert format_value(87.65, "MB/s") == "87.7 MB/s"
    assert format_value(None, "MB") == "—"
    assert format_value(3, "") == "3"


def test_table_has_one_section_row_per_section_and_aligned_columns() -> None:
    rows = [
        Row("Listing", "all: p50", 12.0, "ms", "raw list", 400.0, goals=(faster_than(5),)),
        Row("Listing", "all: p99", 20.0, "ms", "raw list", 500.0),
        Row("Footprint", "peak RSS", 200.0, "MB", goals=(below(500, "MB"),), note="a | b"),
    ]
    text = render_table(rows)
    lines = text.splitlines()
    assert lines[0].startswith("| Measurement")
    assert set(lines[1]) <= {"|", "-"}
    assert sum("**Listing**" in line for line in lines) == 1
    assert sum("**Footprint**" in line for line in lines) == 1
    assert len({len(line) for line in lines}) == 1  # padded to the same width
    assert "0.030 (33.3x faster)" in text
    assert "a \\| b" in text  # a pipe in a cell cannot break the row
    footprint = next(line for line in lines if "peak RSS" in line)
    cells = [cell.strip() for cell in footprint.strip("|").split("|")]
    assert cells[2:5] == ["", "", ""]  # no peer: no peer value and no ratio
    assert cells[6] == "met"


def test_report_lists_missed_rows_and_renders_heading_and_notes() -> None:
    report = Report("Bench", heading=["Machine: test"], notes=["a note"])
    report.add(Row("S", "good", 1.0, "ms", "p", 10.0, goals=(faster_than(5),)))
    report.add(Row("S", "bad", 9.0, "ms", "p", 10.0, goals=(faster_than(5),)))
    assert [r.name for r in report.missed] == ["bad"]
    text = render_report(report)
    assert text.startswith("## Bench\n\n- Machine: test\n")
    assert "MISSED" in text
    assert text.rstrip().endswith("- a note")
