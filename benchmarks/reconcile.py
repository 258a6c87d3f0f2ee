"""Reconciliation: N Allocations applied at once until all report `running`, against a ReplicaSet.

allocbridge: N Allocations created by 48 concurrent clients (as fast as the API server takes
them); the clock runs from the first create until every Allocation's status says
`clientStatus: running`, seen through a watch. A real operator (standalone, ServiceAccount
token) reconciles them: a pod each, scheduled by kube-scheduler onto the kwok node, run by kwok
and the kubelet simulation, and the pod's state written back as task states.

Peer: one ReplicaSet of N pods of the same container in the same control plane, from its create
until its status reports N ready replicas (the ReplicaSet controller's own report), also seen
through a watch. Rounds alternate, the peer first; each run's objects are deleted and gone
before the next run starts.

Both are judged in wall time and in CPU-seconds, measured in the same rounds: the CPU of every
process of the benchmark (control plane, kwok, the operator, the benchmark's own clients: this
process's tree), which other work on the machine does not move, unlike the time. A third row
gives the operator's own CPU per Allocation started, the figure reconciliation work is cut by.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final

from benchmarks.harness import (
    Bench,
    BenchError,
    Json,
    cpu_seconds,
    cpu_snapshot,
    gather_limited,
    log,
    machine_cpu_used,
    other_cpu_share,
)
from benchmarks.population import allocation, collection, job_of
from benchmarks.table import Goal, Row, median, within

SECTION: Final = "Reconciliation"
RATIO_GOAL: Final = 1.5
#: The same bound on the CPU-seconds of every process of the benchmark.
CPU_GOAL: Final = Goal("ratio", "<=", RATIO_GOAL, f"≤ {RATIO_GOAL}x peer's CPU-seconds")
TIMEOUT: Final = 600.0
RS_NAMESPACE: Final = "bench-rs"


def replica_set(count: int) -> Json:
    labels = {"app": "bench-rs"}
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": "bench-rs", "labels": labels},
        "spec": {
            "replicas": count,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "containers": [
                        {
                            "name": "main",
                            "image": "busybox:1.36",
                            "ports": [{"containerPort": 8080, "name": "http"}],
                            "resources": {
                                "requests": {"cpu": "10m", "memory": "16Mi"},
                                "limits": {"memory": "16Mi"},
                            },
                        }
                    ]
                },
            },
        },
    }


class Progress:
    """How many followed objects pass `test`, kept up to date one event at a time: a check
    that counted all N objects on every event would make the bench's own watcher a slow
    consumer of the API server, competing for the same cores as what it measures."""

    def __init__(self, test: Callable[[Json], bool], needed: int) -> None:
        self.test = test
        self.needed = needed
        self.passing: set[str] = set()

    def see(self, name: str, obj: Json | None) -> None:
        if obj is not None and self.test(obj):
            self.passing.add(name)
        else:
            self.passing.discard(name)

    @property
    def done(self) -> bool:
        return len(self.passing) >= self.needed


async def watch_until(bench: Bench, path: str, progress: Progress, ready: asyncio.Event) -> float:
    """Follow the objects at `path` (list, then watch; list again if the API server ends the
    watch) until `progress` is done; returns the `perf_counter` time of the list or event that
    made it so. Sets `ready` once the first list is in."""
    while True:
        listed = await bench.api.get(path)
        progress.passing.clear()
        for item in listed.get("items") or []:
            progress.see(item["metadata"]["name"], item)
        ready.set()
        if progress.done:
            return time.perf_counter()
        async for event in bench.api.watch(path, listed["metadata"]["resourceVersion"]):
            if event["type"] == "ERROR":
                log(f"reconcile: watch error: {event['object'].get('message', '')}")
                break
            obj = event["object"]
            progress.see(obj["metadata"]["name"], obj if event["type"] != "DELETED" else None)
            if progress.done:
                return time.perf_counter()
        log(f"reconcile: the watch of {path} ended; listing again")


async def _timed(
    bench: Bench, path: str, progress: Progress, start: Callable[[], Awaitable[None]]
) -> tuple[float, float]:
    """(seconds until done, seconds `start` itself took)."""
    ready = asyncio.Event()
    watcher = asyncio.create_task(watch_until(bench, path, progress, ready))
    await ready.wait()
    began = time.perf_counter()
    await start()
    issued = time.perf_counter() - began
    try:
        async with asyncio.timeout(TIMEOUT):
            finished = await watcher
    except TimeoutError:
        raise BenchError(f"not done within {TIMEOUT:.0f}s: {path}") from None
    return finished - began, issued


def _running(count: int) -> Progress:
    """Done when `count` Allocations report `clientStatus: running`."""
    return Progress(lambda o: (o.get("status") or {}).get("clientStatus") == "running", count)


def _ready_replicas(count: int) -> Progress:
    """Done when the ReplicaSet reports `count` ready replicas."""
    return Progress(lambda o: (o.get("status") or {}).get("readyReplicas", 0) >= count, 1)


def _since(before: dict[str, int], after: dict[str, int], what: str) -> int:
    """Requests answered between two readings; the busiest kinds go to the progress log."""
    delta = {key: after[key] - before.get(key, 0) for key in after}
    busiest = sorted(((n, key) for key, n in delta.items() if n > 0), reverse=True)[:8]
    log(
        f"reconcile: API server requests during {what}: "
        + ", ".join(f"{k} {n}" for n, k in busiest)
    )
    return sum(delta.values())


@dataclass(frozen=True)
class Round:
    """One side's run: seconds until done, seconds its creates took, API server requests, the
    CPU-seconds the API server and the operator used meanwhile, those of every process of the
    benchmark (this process's tree: control plane, kwok, operator, clients), and those of every
    process of the machine with their share of its capacity: a share near 100% means the round
    was bound by CPU, so its time measures work rather than waiting."""

    seconds: float
    issued: float
    requests: int
    apiserver_cpu: float
    operator_cpu: float
    bench_cpu: float
    machine_cpu: float
    machine_share: float


#: The pids whose CPU a round reports: (kube-apiserver, the reconciling operator).
Pids = tuple[int, int]


async def _measured(
    bench: Bench,
    path: str,
    progress: Progress,
    create: Callable[[], Awaitable[None]],
    *,
    pids: Pids,
    what: str,
) -> Round:
    served = await bench.api.requests_served()
    began = [cpu_seconds(pid) for pid in pids]
    machine_began = cpu_snapshot()
    seconds, issued = await _timed(bench, path, progress, create)
    machine_ended = cpu_snapshot()
    used = [cpu_seconds(pid) - before for pid, before in zip(pids, began, strict=True)]
    machine_cpu, machine_share = machine_cpu_used(machine_began, machine_ended)
    others, _ = other_cpu_share(machine_began, machine_ended)
    requests = _since(served, await bench.api.requests_served(), what)
    log(
        f"reconcile: {what} done in {seconds:.1f}s (API server CPU {used[0]:.1f}s, "
        f"operator {used[1]:.1f}s, the benchmark's processes {machine_cpu - others:.1f}s, "
        f"machine {machine_cpu:.1f}s = {machine_share:.0%} of its cores); deleting"
    )
    return Round(
        seconds,
        issued,
        requests,
        apiserver_cpu=used[0],
        operator_cpu=used[1],
        bench_cpu=machine_cpu - others,
        machine_cpu=machine_cpu,
        machine_share=machine_share,
    )


async def _replica_set_round(bench: Bench, count: int, pids: Pids) -> Round:
    path = f"/apis/apps/v1/namespaces/{RS_NAMESPACE}/replicasets"

    async def create() -> None:
        await bench.api.post(path, replica_set(count))

    done = await _measured(
        bench, path, _ready_replicas(count), create, pids=pids, what="ReplicaSet"
    )
    await bench.api.delete(f"{path}/bench-rs", {"propagationPolicy": "Background"})
    await bench.api.wait_gone(f"/api/v1/namespaces/{RS_NAMESPACE}/pods", patience=TIMEOUT)
    return done


async def _allocations_round(bench: Bench, namespace: str, count: int, pids: Pids) -> Round:
    path = collection(namespace)

    async def create() -> None:
        async def one(i: int) -> None:
            await bench.api.post(path, allocation(f"rec-{i:05d}", namespace, job_of(i)))

        await gather_limited(count, one)

    done = await _measured(bench, path, _running(count), create, pids=pids, what="Allocations")
    await bench.api.request("DELETE", path, ok=(200,))
    await bench.api.wait_gone(path, patience=TIMEOUT)
    # Delete the orphaned pods directly rather than wait for the garbage collector.
    pods = f"/api/v1/namespaces/{namespace}/pods"
    await bench.api.request("DELETE", pods, ok=(200,))
    await bench.api.wait_gone(pods, patience=TIMEOUT)
    return done


#: Seconds to wait for the controller manager's watch of Allocations (its discovery runs every
#: 30 s); without it the first round would run in a quieter cluster than any in use.
GC_WATCH_PATIENCE: Final = 90.0


async def _controller_manager_watching(bench: Bench) -> None:
    """Wait until the controller manager watches Allocations, as it does in any cluster where
    the CRD is not brand new: the garbage collector and the quota controller follow every kind
    they can delete, a CRD's kind from their first discovery after it appeared. That watch is
    one more receiver of every Allocation change. The operator and the bench watch namespaces,
    so the cluster-wide watch is the controller manager's."""
    deadline = time.monotonic() + GC_WATCH_PATIENCE
    while not await bench.api.cluster_watches("allocations"):
        if time.monotonic() > deadline:
            raise BenchError(
                f"the controller manager did not watch Allocations within {GC_WATCH_PATIENCE:.0f}s"
            )
        await asyncio.sleep(1.0)


async def measure(
    bench: Bench, namespace: str, count: int, rounds: int, operator_pid: int
) -> list[Row]:
    """`rounds` alternating pairs (ReplicaSet, then Allocations); the row is their medians.

    One pair is not enough: on two shared cores the ratio of a single pair moved by a fifth
    between runs of the same code, so each figure is the median and the note gives the range.
    """
    await bench.ensure_namespace(RS_NAMESPACE)
    await bench.ensure_namespace(namespace)
    log("reconcile: waiting for the controller manager's watch of Allocations")
    await _controller_manager_watching(bench)
    pids = (bench.component_pid("kube-apiserver"), operator_pid)
    peers: list[Round] = []
    ours: list[Round] = []
    for number in range(1, rounds + 1):
        log(f"reconcile: round {number}/{rounds}, a ReplicaSet of {count} pods")
        peers.append(await _replica_set_round(bench, count, pids))
        log(f"reconcile: round {number}/{rounds}, {count} Allocations")
        ours.append(await _allocations_round(bench, namespace, count, pids))
    return rows(count, ours, peers)


def _spread(ours: list[Round], peers: list[Round], figure: Callable[[Round], float]) -> str:
    """The range of the rounds' own ratios, when there are several rounds."""
    if len(ours) < 2:
        return ""
    ratios = sorted(figure(mine) / figure(peer) for mine, peer in zip(ours, peers, strict=True))
    return f"round ratios {ratios[0]:.2f}-{ratios[-1]:.2f}; "


def rows(count: int, ours: list[Round], peers: list[Round]) -> list[Row]:
    """The time row, the CPU row (ratios of medians, each with its goal), the CPU row without
    the operator's own share and the operator's CPU per Allocation (no goal: what the contract's
    API server work leaves, and what reconciliation work is cut by)."""
    rounds = len(ours)
    peer = f"ReplicaSet of {count:,} pods until {count:,} ready"
    operator_cpu = median([r.operator_cpu for r in ours])
    return [
        Row(
            SECTION,
            f"{count:,} Allocations created at once until all running",
            median([r.seconds for r in ours]),
            "s",
            peer,
            median([r.seconds for r in peers]),
            goals=(within(RATIO_GOAL),),
            note=(
                f"medians of {rounds} alternating rounds; "
                f"{_spread(ours, peers, lambda r: r.seconds)}creating the {count:,} "
                f"objects took {median([r.issued for r in ours]):.1f} s of it; API server "
                f"requests {median([r.requests for r in ours]) / count:.1f} vs "
                f"{median([r.requests for r in peers]) / count:.1f} per pod; API server CPU "
                f"{median([r.apiserver_cpu for r in ours]):.1f} s vs "
                f"{median([r.apiserver_cpu for r in peers]):.1f} s, operator "
                f"{operator_cpu:.1f} s; every process "
                f"{median([r.machine_cpu for r in ours]):.1f} s vs "
                f"{median([r.machine_cpu for r in peers]):.1f} s, "
                f"{median([r.machine_share for r in ours]):.0%} vs "
                f"{median([r.machine_share for r in peers]):.0%} of the cores"
            ),
        ),
        Row(
            SECTION,
            f"{count:,} Allocations until all running: CPU-seconds of every process",
            median([r.bench_cpu for r in ours]),
            "CPU-s",
            peer,
            median([r.bench_cpu for r in peers]),
            goals=(CPU_GOAL,),
            note=(
                f"the same rounds, medians; {_spread(ours, peers, lambda r: r.bench_cpu)}"
                "every process of the benchmark (control plane, kwok, operator, the "
                "benchmark's clients); of it the API server "
                f"{median([r.apiserver_cpu for r in ours]):.1f} vs "
                f"{median([r.apiserver_cpu for r in peers]):.1f}, the operator "
                f"{operator_cpu:.1f}; the whole machine "
                f"{median([r.machine_cpu for r in ours]):.1f} vs "
                f"{median([r.machine_cpu for r in peers]):.1f}"
            ),
        ),
        Row(
            SECTION,
            f"{count:,} Allocations until all running: CPU-seconds of every process but the "
            "operator",
            median([r.bench_cpu - r.operator_cpu for r in ours]),
            "CPU-s",
            peer,
            median([r.bench_cpu - r.operator_cpu for r in peers]),
            note=(
                "no goal; the row above without the operator's own CPU-seconds (on both sides: "
                "it runs through the ReplicaSet's rounds too), round by round: the ratio an "
                "operator that cost nothing would leave (the API server's work for each "
                "Allocation, its pod's and their watchers' stay)"
            ),
        ),
        Row(
            SECTION,
            "operator CPU per Allocation started",
            operator_cpu / count * 1000,
            "ms",
            note=(
                f"the operator's CPU-seconds in the same rounds (median {operator_cpu:.2f} s) "
                f"÷ {count:,}; no peer, no goal: issue 36 asked to halve it (see benchmarks.md)"
            ),
        ),
    ]
