"""API server CPU per write: what the reconciliation's extra API server work is made of.

A diagnostic section, not one of the issue's goals: `--only writes` runs it, the default suite
does not. The reconciliation rows show the API server spending far more CPU on 500 Allocations
than on a ReplicaSet's 500 pods; this section prices single writes, each kind beside its peer:

- a pod create and a pod status PATCH (the write kwok and the kubelet simulation make twice per
  pod): allocbridge's pod (the seed allocation's, as the operator made it) against the
  ReplicaSet's pod of the reconciliation rounds; also allocbridge's pod without its environment
  variables, to show what Nomad's variables cost;
- an Allocation create (what the user sends) and the status PATCH the reconciler makes (the
  seed's status), against the same CRD without its CEL validation rules, installed beside it
  under another group.

Each kind is written `count` times (20 in flight) into a namespace of this section, and the API
server's CPU time (`/proc`) is read around them; the kinds alternate over `rounds` rounds and
the medians are reported in milliseconds of CPU per write. Pods are created for a scheduler
that does not exist and without owners, so no scheduler, kwok, kubelet simulation or garbage
collector writes them meanwhile.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Awaitable, Callable
from typing import Any, Final

import yaml

from benchmarks.harness import REPO, Bench, Json, cpu_seconds, gather_limited, log
from benchmarks.population import allocation, job_of
from benchmarks.reconcile import replica_set
from benchmarks.table import Row, median

SECTION: Final = "API server CPU per write (diagnostic, no goal)"
NAMESPACE: Final = "bench-writes"
NO_SCHEDULER: Final = "allocbridge-bench-nobody"
PLAIN_GROUP: Final = "nocel.bench.allocbridge.io"
IN_FLIGHT: Final = 20
SETTLE: Final = 1.5  # seconds of quiet before each reading, for the previous kind's tail

Write = Callable[[int], Awaitable[Any]]


def unscheduled(pod: Json, name: str, namespace: str) -> Json:
    """A copy of `pod` to create afresh: its name, labels and annotations, its spec for a
    scheduler that does not exist, no node, owners or status."""
    meta = pod.get("metadata") or {}
    spec = copy.deepcopy(pod["spec"])
    spec.pop("nodeName", None)
    spec["schedulerName"] = NO_SCHEDULER
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            **{k: copy.deepcopy(meta[k]) for k in ("labels", "annotations") if k in meta},
        },
        "spec": spec,
    }


def without_env(pod: Json) -> Json:
    """`pod` with no environment variables in any container."""
    bare = copy.deepcopy(pod)
    for key in ("initContainers", "containers"):
        for container in bare["spec"].get(key) or []:
            container.pop("env", None)
    return bare


def replica_set_pod() -> Json:
    """A pod of the reconciliation's ReplicaSet, as its template describes it."""
    template = replica_set(1)["spec"]["template"]
    return {"metadata": copy.deepcopy(template["metadata"]), "spec": template["spec"]}


def without_cel(crd: Json, group: str) -> Json:
    """The CRD `crd` under `group`, without any `x-kubernetes-validations` rule."""

    def strip(node: Any) -> Any:
        if isinstance(node, dict):
            return {k: strip(v) for k, v in node.items() if k != "x-kubernetes-validations"}
        if isinstance(node, list):
            return [strip(v) for v in node]
        return node

    plain: Json = strip(crd)
    plain["metadata"] = {"name": f"{crd['spec']['names']['plural']}.{group}"}
    plain["spec"]["group"] = group
    return plain


async def measure(
    bench: Bench, seed_pod: Json, seed_status: Json, count: int, rounds: int
) -> list[Row]:
    """The section's rows; the plain CRD exists only while it runs."""
    await bench.ensure_namespace(NAMESPACE)
    crd = yaml.safe_load((REPO / "crds" / "allocations.yaml").read_text())
    plain = without_cel(crd, PLAIN_GROUP)
    crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    await bench.api.post(crds, plain)
    crd_name = f"crd/{plain['metadata']['name']}"
    await asyncio.to_thread(bench.kubectl, "wait", "--for=condition=Established", crd_name)
    try:
        return await _measure(
            bench, seed_pod, seed_status, count, rounds, group=crd["spec"]["group"]
        )
    finally:
        await bench.api.delete(f"{crds}/{plain['metadata']['name']}")


async def _measure(
    bench: Bench, seed_pod: Json, seed_status: Json, count: int, rounds: int, *, group: str
) -> list[Row]:
    apiserver = bench.component_pid("kube-apiserver")
    pods = f"/api/v1/namespaces/{NAMESPACE}/pods"
    shapes = {
        "allocbridge": seed_pod,
        "allocbridge, no env": without_env(seed_pod),
        "ReplicaSet": replica_set_pod(),
    }
    groups = {"with CEL": group, "without CEL": PLAIN_GROUP}

    async def cpu_ms(write: Write) -> float:
        await asyncio.sleep(SETTLE)
        before = cpu_seconds(apiserver)
        await gather_limited(count, write, concurrency=IN_FLIGHT)
        return (cpu_seconds(apiserver) - before) * 1000 / count

    def pod_create(shape: Json) -> Write:
        return lambda i: bench.api.post(pods, unscheduled(shape, f"w-{i}", NAMESPACE))

    def pod_status(i: int) -> Awaitable[Json]:
        condition = {"type": "BenchWrite", "status": "True"}
        return bench.api.request(
            "PATCH",
            f"{pods}/w-{i}/status",
            {"status": {"conditions": [condition]}},
            content_type="application/strategic-merge-patch+json",
        )

    def alloc_create(g: str) -> Write:
        def write(i: int) -> Awaitable[Json]:
            body = allocation(f"w-{i}", NAMESPACE, job_of(i))
            body["apiVersion"] = f"{g}/v1"
            return bench.api.post(f"/apis/{g}/v1/namespaces/{NAMESPACE}/allocations", body)

        return write

    def alloc_status(g: str) -> Write:
        path = f"/apis/{g}/v1/namespaces/{NAMESPACE}/allocations"
        return lambda i: bench.api.merge_patch(f"{path}/w-{i}/status", {"status": seed_status})

    readings: dict[str, list[float]] = {}

    def keep(name: str, value: float) -> None:
        readings.setdefault(name, []).append(value)

    for round_ in range(rounds):
        log(f"writes: round {round_ + 1}/{rounds}")
        order = list(shapes) if round_ % 2 == 0 else list(reversed(shapes))
        for name in order:
            keep(f"pod create {name}", await cpu_ms(pod_create(shapes[name])))
            keep(f"pod status {name}", await cpu_ms(pod_status))
            await bench.api.request("DELETE", f"{pods}?gracePeriodSeconds=0", ok=(200,))
            await bench.api.wait_gone(pods, patience=120)
        for name in list(groups) if round_ % 2 == 0 else list(reversed(groups)):
            path = f"/apis/{groups[name]}/v1/namespaces/{NAMESPACE}/allocations"
            keep(f"alloc create {name}", await cpu_ms(alloc_create(groups[name])))
            keep(f"alloc status {name}", await cpu_ms(alloc_status(groups[name])))
            await bench.api.request("DELETE", path, ok=(200,))
            await bench.api.wait_gone(path, patience=120)

    def ms(name: str) -> float:
        return median(readings[name])

    note = f"medians of {rounds} alternating rounds of {count:,} writes, {IN_FLIGHT} in flight"
    return [
        Row(
            SECTION,
            "pod create: allocbridge's pod",
            ms("pod create allocbridge"),
            "ms",
            "a ReplicaSet's pod",
            ms("pod create ReplicaSet"),
            note=f"{note}; allocbridge's pod without its env: "
            f"{ms('pod create allocbridge, no env'):.2f} ms",
        ),
        Row(
            SECTION,
            "pod status PATCH: allocbridge's pod",
            ms("pod status allocbridge"),
            "ms",
            "a ReplicaSet's pod",
            ms("pod status ReplicaSet"),
            note=f"allocbridge's pod without its env: "
            f"{ms('pod status allocbridge, no env'):.2f} ms",
        ),
        Row(
            SECTION,
            "Allocation create",
            ms("alloc create with CEL"),
            "ms",
            "the same CRD without its CEL rules",
            ms("alloc create without CEL"),
        ),
        Row(
            SECTION,
            "Allocation status PATCH (the reconciler's first)",
            ms("alloc status with CEL"),
            "ms",
            "the same CRD without its CEL rules",
            ms("alloc status without CEL"),
        ),
    ]
