"""The benchmark's CPU accounting: what a reconciliation round's note says about the machine."""

from __future__ import annotations

import os

from benchmarks.harness import CpuSnapshot, machine_cpu_used, other_cpu_share

HZ = os.sysconf("SC_CLK_TCK")
CORES = os.cpu_count() or 1


def test_machine_cpu_counts_every_process_and_its_share_of_all_cores() -> None:
    start = CpuSnapshot(at=100.0, machine_busy=0, ours=0)
    end = CpuSnapshot(at=110.0, machine_busy=int(5 * CORES * HZ), ours=int(1 * HZ))
    used, share = machine_cpu_used(start, end)
    assert used == 5 * CORES
    assert share == 0.5


def test_machine_cpu_of_an_empty_window_has_no_share() -> None:
    at = CpuSnapshot(at=100.0, machine_busy=10, ours=0)
    assert machine_cpu_used(at, at) == (0.0, 0.0)


def test_other_processes_are_the_machine_minus_this_process_tree() -> None:
    start = CpuSnapshot(at=0.0, machine_busy=0, ours=0)
    end = CpuSnapshot(at=10.0, machine_busy=int(4 * HZ), ours=int(3 * HZ))
    others, share = other_cpu_share(start, end)
    assert others == 1.0
    assert share == 1.0 / (10 * CORES)
