"""Footprint: the operator's resident memory with 10,000 allocations in its store.

Read from /proc/<pid>/status (VmRSS; VmHWM for the peak), never from Python's own accounting,
at four moments of the store measurements:

1. the standby replica has started on an empty cluster (`empty`);
2. the 10,000 allocations were created and their status written, and the replica's store grew
   to hold them through its watch (`live`);
3. the replica was restarted and loaded them with one initial list (`fresh`): what a replica
   holds after a rollout;
4. after the listing, paging and blocking measurements on that process (`peak`, VmHWM).

Peer: kube-apiserver, which holds the same objects in its watch cache, read at the same moments.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from benchmarks.table import Row, below, mb

SECTION: Final = "Footprint"
GOAL_MB: Final = 500.0


@dataclass
class Readings:
    """Bytes of resident memory of (operator, kube-apiserver) at each moment."""

    empty: tuple[int, int] = (0, 0)
    live: tuple[int, int] = (0, 0)
    fresh: tuple[int, int] = (0, 0)
    peak: int | None = None


def rows(readings: Readings, count: int) -> list[Row]:
    empty, live, fresh = readings.empty, readings.live, readings.fresh
    return [
        Row(
            SECTION,
            f"operator RSS with {count:,} allocations (fresh start)",
            mb(fresh[0]),
            "MB",
            "kube-apiserver RSS at the same moment",
            mb(fresh[1]),
            goals=(below(GOAL_MB, "MB"),),
            note=f"empty store: {mb(empty[0]):.0f} MB",
        ),
        Row(
            SECTION,
            f"operator RSS with {count:,} allocations (grown by the watch)",
            mb(live[0]),
            "MB",
            "kube-apiserver RSS at the same moment",
            mb(live[1]),
            goals=(below(GOAL_MB, "MB"),),
        ),
        Row(
            SECTION,
            f"RSS added by {count:,} allocations (grown by the watch)",
            mb(live[0] - empty[0]),
            "MB",
            "kube-apiserver RSS added by the same objects",
            mb(live[1] - empty[1]),
            note=f"{(live[0] - empty[0]) / max(count, 1) / 1000:.1f} KB per allocation",
        ),
        Row(
            SECTION,
            "operator peak RSS (VmHWM) after all store measurements",
            None if readings.peak is None else mb(readings.peak),
            "MB",
            goals=(below(GOAL_MB, "MB"),),
            note="the restarted process: initial list, listing, paging, blocking",
        ),
    ]
