"""Allocations for the measurements: their manifests, the seed, and thousands created at once.

Every benchmark allocation has the shape of `examples/web.yaml` (one docker task with resources
and a dynamic port), in a job `bench-<i mod 100>`, so `JobID == "bench-7"` (and the label
`bench.allocbridge.io/job=bench-7`) selects 1% of them.

The store measurements need 10,000 allocations as a replica serves them, but not 10,000 pods.
They are served by a *standby* replica: an operator in a Kopf peering where a higher-priority
peer holds the lease, which keeps serving `/v1` from its watch-fed store and never reconciles
(the documented HA mode). Their status is what the reconciler wrote for a real running
allocation (the seed's, reconciled by a real operator onto a real pod), re-keyed per allocation,
so the stubs carry realistic TaskStates and events.
"""

from __future__ import annotations

import asyncio
import datetime
import time
from typing import Any, Final

from benchmarks.harness import ALLOCATIONS, Bench, BenchError, Json, gather_limited, log

JOBS: Final = 100
JOB_LABEL: Final = "bench.allocbridge.io/job"
PEERING: Final = "allocbridge-bench"
HOLDER: Final = "bench-lease-holder"
BUSYBOX: Final = "busybox:1.37"  # the real node's stand-in image (real-node.md)


def job_of(index: int) -> str:
    return f"bench-{index % JOBS}"


def allocation(name: str, namespace: str, job: str) -> Json:
    return {
        "apiVersion": "allocbridge.io/v1",
        "kind": "Allocation",
        "metadata": {"name": name, "namespace": namespace, "labels": {JOB_LABEL: job}},
        "spec": {
            "job": {"id": job, "type": "service", "datacenters": ["dc1"]},
            "taskGroup": {
                "name": "web",
                "index": 0,
                "count": 1,
                "networks": [{"dynamicPorts": [{"label": "http", "to": 8080}]}],
            },
            "tasks": [
                {
                    "name": "main",
                    "driver": "docker",
                    "config": {"image": "busybox:1.36"},
                    "resources": {"cpu": 10, "memoryMB": 16},
                }
            ],
        },
    }


def one_task_allocation(
    name: str, namespace: str, *, job: str, group: str, task: str, command: list[str]
) -> Json:
    """An Allocation of one docker task running `command` in the real node's BusyBox image."""
    return {
        "apiVersion": "allocbridge.io/v1",
        "kind": "Allocation",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "job": {"id": job, "type": "service", "datacenters": ["dc1"]},
            "taskGroup": {"name": group, "index": 0, "count": 1},
            "tasks": [
                {
                    "name": task,
                    "driver": "docker",
                    "config": {"image": BUSYBOX, "command": command[0], "args": command[1:]},
                    "resources": {"cpu": 100, "memoryMB": 32},
                }
            ],
        },
    }


def collection(namespace: str) -> str:
    return f"{ALLOCATIONS}/namespaces/{namespace}/allocations"


def status_for(template: Json, created: Json) -> Json:
    """The template status re-keyed to an allocation: its own CreateIndex, time and pod name."""
    meta = created["metadata"]
    stamp = datetime.datetime.fromisoformat(meta["creationTimestamp"].replace("Z", "+00:00"))
    status = dict(template)
    status["createIndex"] = int(meta["resourceVersion"])
    status["createTime"] = int(stamp.timestamp()) * 1_000_000_000
    if "podName" in status:
        status["podName"] = meta["name"]
    return status


async def create_seed(bench: Bench, namespace: str, name: str, patience: float = 120) -> Json:
    """One allocation reconciled by a real operator until its task runs; returns the object."""
    await bench.ensure_namespace(namespace)
    await bench.api.post(collection(namespace), allocation(name, namespace, "bench-seed"))
    return await wait_running(bench, namespace, name, "main", patience)


async def wait_running(
    bench: Bench, namespace: str, name: str, task_name: str, patience: float = 120
) -> Json:
    """Wait until the allocation and its task run; returns the object."""
    deadline = time.monotonic() + patience
    while True:
        obj = await bench.api.get(f"{collection(namespace)}/{name}")
        status = obj.get("status") or {}
        task = (status.get("taskStates") or {}).get(task_name) or {}
        if status.get("clientStatus") == "running" and task.get("state") == "running":
            return obj
        if time.monotonic() > deadline:
            raise BenchError(f"allocation {name} not running after {patience}s: {status}")
        await asyncio.sleep(0.2)


async def populate(
    bench: Bench,
    count: int,
    namespaces: list[str],
    template: Json,
    *,
    start: int = 0,
    concurrency: int = 48,
) -> float:
    """Create `count` allocations (numbered from `start`) spread over `namespaces`, each with
    its status written; returns the seconds it took."""
    for namespace in namespaces:
        await bench.ensure_namespace(namespace)
    started = time.monotonic()
    done = 0

    async def one(n: int) -> None:
        nonlocal done
        i = start + n
        namespace = namespaces[i % len(namespaces)]
        name = f"alloc-{i:05d}"
        created = await bench.api.post(
            collection(namespace), allocation(name, namespace, job_of(i))
        )
        await bench.api.merge_patch(
            f"{collection(namespace)}/{name}/status", {"status": status_for(template, created)}
        )
        done += 1
        if done % 2000 == 0:
            log(f"  {done}/{count} allocations created")

    await gather_limited(count, one, concurrency=concurrency)
    return time.monotonic() - started


async def hold_peering(bench: Bench, *, lifetime: int = 7200) -> None:
    """A ClusterKopfPeering whose lease a peer of priority 1,000,000 holds for `lifetime` s:
    what `kopf freeze` writes. Replicas in it serve the API and never reconcile."""
    now = datetime.datetime.now(datetime.UTC).isoformat()
    body = {
        "apiVersion": "kopf.dev/v1",
        "kind": "ClusterKopfPeering",
        "metadata": {"name": PEERING},
        "status": {HOLDER: {"priority": 1_000_000, "lifetime": lifetime, "lastseen": now}},
    }
    path = "/apis/kopf.dev/v1/clusterkopfpeerings"
    await bench.api.request("POST", path, body, ok=(201, 409))
    await bench.api.merge_patch(f"{path}/{PEERING}", {"status": body["status"]})


async def wait_listed(
    bench: Bench, api: str, count: int, *, patience: float = 600, status: str = "running"
) -> None:
    """Wait until the replica at `api` lists `count` allocations, all with `status`."""
    url = f"{api}/v1/allocations?namespace=*&task_states=false"
    deadline = time.monotonic() + patience
    seen: tuple[int, int] = (0, 0)
    while True:
        async with bench.http.get(url) as response:
            items: list[Any] = await response.json() if response.status == 200 else []
        seen = (len(items), sum(1 for item in items if item["ClientStatus"] == status))
        if seen == (count, count):
            return
        if time.monotonic() > deadline:
            raise BenchError(f"the store lists {seen[0]} ({seen[1]} {status}), not {count}")
        await asyncio.sleep(1.0)
