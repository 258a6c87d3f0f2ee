"""The reads and scale sections' rows: their ratios and goals, from figures given here."""

from __future__ import annotations

from benchmarks import reads, scale
from benchmarks.table import Latencies
from benchmarks.timing import Series


def load(ms: float, per_second: float) -> reads.Load:
    return reads.Load(Latencies.of([ms / 1000] * 100), per_second)


def test_single_reads_need_ten_times_the_rate_and_a_tenth_of_the_p99() -> None:
    loads = {
        ("ours", 4): load(0.5, 5000.0),
        ("peer", 4): load(5.0, 500.0),
        ("ours", 32): load(2.0, 6000.0),
        ("peer", 32): load(10.0, 1000.0),
    }
    rows = {row.name: row for row in reads.rows(loads, (5000, 2000), "Go net/http", goal=True)}
    assert rows["GET /v1/allocation/:id, 4 clients: requests/s"].result == "met"  # 10x
    assert rows["GET /v1/allocation/:id, 4 clients: p99"].result == "met"  # a tenth
    assert rows["GET /v1/allocation/:id, 32 clients: requests/s"].result == "MISSED"  # 6x
    assert rows["GET /v1/allocation/:id, 32 clients: p99"].result == "MISSED"  # a fifth
    assert "(Go net/http, admin certificate)" in rows["GET /v1/allocation/:id, 4 clients: p99"].peer


def test_the_second_clients_single_reads_are_shown_without_a_goal() -> None:
    loads = {(side, n): load(1.0, 1000.0) for side in ("ours", "peer") for n in (4, 32)}
    rows = {row.name: row for row in reads.rows(loads, (5000, 2000), "aiohttp", goal=False)}
    shown = rows["GET /v1/allocation/:id, 32 clients (aiohttp client): requests/s"]
    assert shown.ratio == 1.0 and shown.result == ""


def series(ms: float) -> Series:
    return Series(Latencies.of([ms / 1000] * 10), 1000)


def test_scale_goals_bind_memory_and_the_lists_growth() -> None:
    figures = scale.Figures(
        small=10_000,
        large=50_000,
        list_small=series(10.0),
        list_large=series(60.0),
        whole_small=series(12.0),
        whole_large=series(120.0),
        empty_rss=100_000_000,
        live=(800_000_000, 5_000_000_000),
        fresh=(700_000_000, 5_000_000_000),
        ready_seconds=20.0,
        raw_list_seconds=5.0,
    )
    rows = {row.name: row for row in scale.rows(figures)}
    assert rows["list all 50,000: p50"].result == "MISSED"  # 6x the p50 at 10,000
    whole = rows["list all 50,000: p50, the whole body read"]
    assert whole.ratio == 10.0 and whole.result == ""  # shown, without a goal
    assert rows["operator RSS with 50,000 allocations (grown by the watch)"].result == "met"
    per_allocation = rows["RSS per allocation at 50,000 (grown by the watch)"]
    assert per_allocation.value == 14.0 and per_allocation.result == "met"
    assert rows["time to first ready after a restart, 50,000 allocations"].ratio == 4.0


def test_with_go_the_go_clients_list_binds_the_goal_and_the_others_are_shown() -> None:
    figures = scale.Figures(
        small=10_000,
        large=50_000,
        list_small=series(10.0),
        list_large=series(80.0),
        go_small=series(10.0),
        go_large=series(45.0),
        go_restarted=series(40.0),
        floor_small=series(2.0),
        floor_large=series(11.0),
        empty_rss=100_000_000,
        live=(800_000_000, 5_000_000_000),
        fresh=(700_000_000, 5_000_000_000),
    )
    rows = {row.name: row for row in scale.rows(figures)}
    goal = rows["list all 50,000: p50"]
    assert goal.ratio == 4.5 and goal.result == "met"
    assert "Go net/http" in goal.note
    shown = rows["list all 50,000: p50 (aiohttp client)"]
    assert shown.ratio == 8.0 and shown.result == ""
    restarted = rows["list all 50,000: p50 after the restart"]
    assert restarted.ratio == 4.0 and restarted.result == ""
    floor = rows["the machine's floor: a prepared body of the 50,000 list's size"]
    assert floor.ratio == 5.5 and floor.result == ""  # shown beside the goal, without one
