"""The reconciliation section's rows: time and CPU each judged against the ReplicaSet as a
ratio of medians, the CPU without the operator's share and the operator's CPU per Allocation,
from figures given here."""

from __future__ import annotations

from benchmarks import reconcile
from benchmarks.reconcile import Round


def _round(seconds: float, bench_cpu: float, operator_cpu: float = 0.0) -> Round:
    return Round(
        seconds,
        issued=1.0,
        requests=4000,
        apiserver_cpu=5.0,
        operator_cpu=operator_cpu,
        bench_cpu=bench_cpu,
        machine_cpu=bench_cpu + 1.0,
        machine_share=0.9,
    )


def test_time_and_cpu_are_each_a_ratio_of_medians_with_the_same_goal() -> None:
    ours = [_round(12, 20, 1.0), _round(30, 21, 2.0), _round(11, 40, 1.5)]
    peers = [_round(10, 14, 0.5), _round(8, 15), _round(9, 10)]
    time, cpu, without_operator, per_allocation = reconcile.rows(500, ours, peers)

    assert time.value == 12 and time.peer_value == 9 and time.result == "met"
    assert cpu.value == 21 and cpu.peer_value == 14 and cpu.result == "met"  # 1.5x
    assert cpu.unit == "CPU-s" and "round ratios" in cpu.note

    # Round by round (19, 19, 38.5; the peer's 13.5, 15, 10), then the median: not the
    # medians' difference (21 - 1.5).
    assert without_operator.value == 19 and without_operator.peer_value == 13.5
    assert without_operator.goals == () and without_operator.result == ""

    assert per_allocation.value == 1.5 / 500 * 1000 and per_allocation.unit == "ms"
    assert per_allocation.goals == () and per_allocation.peer_value is None


def test_cpu_above_one_and_a_half_times_the_replica_set_misses_even_when_time_is_met() -> None:
    time, cpu, _, _ = reconcile.rows(500, [_round(10, 23)], [_round(10, 15)])
    assert time.result == "met"
    assert cpu.result == "MISSED"
