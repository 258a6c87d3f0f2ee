"""A kubelet's summary stats (`/stats/summary`) as Nomad's `AllocResourceUsage`. No I/O.

Per task (container): memory from the container's `memory` block (`rssBytes` as RSS,
`usageBytes` as Usage, the page cache outside the working set as Cache, `swap.swapUsageBytes`
as Swap), CPU from `usageNanoCores` (Percent of one core, and TotalTicks in Nomad MHz at the
operator's `mhz_per_cpu`, the ratio that turns Nomad's CPU into Kubernetes requests). Fields the
kubelet does not measure (CPU user and system time, throttling, the kernel's memory) stay 0 and
are absent from `Measured`, which is how Nomad's clients tell a zero from an unknown.
`ResourceUsage` sums the tasks; timestamps are the newest sample's, in Unix nanoseconds.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from allocbridge.model.status import parse_time_ns

Json = dict[str, Any]

_MEMORY_FIELDS: Final = (
    "RSS",
    "Cache",
    "Swap",
    "Usage",
    "MaxUsage",
    "KernelUsage",
    "KernelMaxUsage",
)
_CPU_FIELDS: Final = (
    "SystemMode",
    "UserMode",
    "TotalTicks",
    "ThrottledPeriods",
    "ThrottledTime",
    "Percent",
)


def find_pod(summary: Mapping[str, Any], namespace: str, name: str) -> Mapping[str, Any] | None:
    """The pod's entry in a summary, if the kubelet reports it."""
    for pod in summary.get("pods") or []:
        ref = pod.get("podRef") or {}
        if ref.get("namespace") == namespace and ref.get("name") == name:
            found: Mapping[str, Any] = pod
            return found
    return None


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def task_usage(container: Mapping[str, Any], *, mhz_per_cpu: int) -> Json:
    """One container's `TaskResourceUsage` (`ResourceUsage`, `Timestamp`, `Pids`)."""
    memory = container.get("memory") or {}
    cpu = container.get("cpu") or {}
    swap = container.get("swap") or {}
    memory_stats: Json = dict.fromkeys(_MEMORY_FIELDS, 0)
    memory_measured: list[str] = []
    rss, usage = _int(memory.get("rssBytes")), _int(memory.get("usageBytes"))
    working_set = _int(memory.get("workingSetBytes"))
    for name, value in (
        ("RSS", rss),
        ("Cache", None if usage is None or working_set is None else max(0, usage - working_set)),
        ("Swap", _int(swap.get("swapUsageBytes"))),
        ("Usage", usage),
    ):
        if value is not None:
            memory_stats[name] = value
            memory_measured.append(name)
    memory_stats["Measured"] = memory_measured or None
    cpu_stats: Json = dict.fromkeys(_CPU_FIELDS, 0.0)
    cpu_stats["ThrottledPeriods"] = 0
    cpu_stats["ThrottledTime"] = 0
    nano_cores = _int(cpu.get("usageNanoCores"))
    if nano_cores is not None:
        cores = nano_cores / 1e9
        cpu_stats["Percent"] = cores * 100
        cpu_stats["TotalTicks"] = cores * mhz_per_cpu
        cpu_stats["Measured"] = ["Percent"]
    else:
        cpu_stats["Measured"] = None
    stamps = [parse_time_ns(block.get("time")) for block in (memory, cpu)]
    return {
        "ResourceUsage": {
            "MemoryStats": memory_stats,
            "CpuStats": cpu_stats,
            "DeviceStats": None,
        },
        "Timestamp": max((s for s in stamps if s), default=0),
        "Pids": None,
    }


def _sum(usages: Iterable[Json]) -> Json:
    memory: Json = dict.fromkeys(_MEMORY_FIELDS, 0)
    cpu: Json = dict.fromkeys(_CPU_FIELDS, 0.0)
    cpu["ThrottledPeriods"] = 0
    cpu["ThrottledTime"] = 0
    memory_measured: list[str] = []
    cpu_measured: list[str] = []
    for usage in usages:
        for totals, stats, measured in (
            (memory, usage["MemoryStats"], memory_measured),
            (cpu, usage["CpuStats"], cpu_measured),
        ):
            for key in totals:
                totals[key] += stats.get(key, 0)
            for name in stats.get("Measured") or []:
                if name not in measured:
                    measured.append(name)
    memory["Measured"] = memory_measured or None
    cpu["Measured"] = cpu_measured or None
    return {"MemoryStats": memory, "CpuStats": cpu, "DeviceStats": []}


def alloc_usage(
    pod: Mapping[str, Any], tasks: Iterable[str], *, mhz_per_cpu: int, task: str = ""
) -> Json:
    """`AllocResourceUsage` for the pod's containers that are the allocation's `tasks` (only
    `task` when given). A task the kubelet does not report (not running) is left out."""
    wanted = {task} if task else set(tasks)
    per_task = {
        str(c.get("name")): task_usage(c, mhz_per_cpu=mhz_per_cpu)
        for c in pod.get("containers") or []
        if c.get("name") in wanted
    }
    return {
        "ResourceUsage": _sum(u["ResourceUsage"] for u in per_task.values()),
        "Tasks": per_task,
        "Timestamp": max((u["Timestamp"] for u in per_task.values()), default=0),
    }
