"""Faults in the middle of a burst of 200 Allocations: nothing is lost, nothing is doubled.

Each test runs on a control plane of its own with kwok's node only (pods run nowhere, which is
what lets 200 start in seconds), so a fault it injects never disturbs the session's cluster,
and its one standalone replica is the only reconciler there. A client creates the 200
Allocations from 8 threads, retrying each until it exists (a create that got no answer may have
been applied: an `AlreadyExists` then counts as created). In the middle of that, once some pods
exist and before all do, the test injects its fault: the replica SIGKILLed and started again,
or the kube-apiserver or etcd restarted in place (same ports, same data directory).

Afterwards, within a bound that only tells convergence from its absence: every Allocation has
exactly one pod (the pod is named after it and its controller reference is the Allocation's
UID), no pod lacks its Allocation, every Allocation's status says its task runs, the replica's
API lists all 200 as running, and every pod that existed at the fault is the same pod (same
UID) at the end: the fault made the operator neither lose nor replace work.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from running_operator import (
    ClusterKubectl,
    Operator,
    allocation_manifest,
    operator_kubeconfig,
)

from allocbridge_localcluster import LocalCluster
from allocbridge_localcluster.kubectl import eventually
from allocbridge_localcluster.restclient import ApiError

pytestmark = pytest.mark.cluster

COUNT = 200
NAMESPACE = "burst"
CREATORS = 8
#: Pods that must exist before the fault, so it lands in the middle of the reconciling.
PODS_BEFORE_FAULT = 20
ALLOCATIONS = f"/apis/allocbridge.io/v1/namespaces/{NAMESPACE}/allocations"
PODS = f"/api/v1/namespaces/{NAMESPACE}/pods"


class Burst:
    """Creates `COUNT` Allocations from `CREATORS` threads, each retried until it exists."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster
        self.retries = 0
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._lock = threading.Lock()

    def start(self) -> Burst:
        self._thread.start()
        return self

    def join(self, timeout: float = 120) -> None:
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "the burst's creates did not finish"

    def _run(self) -> None:
        names = [f"alloc-{i:03d}" for i in range(COUNT)]
        with ThreadPoolExecutor(CREATORS) as pool:
            list(pool.map(self._create, names))

    def _create(self, name: str) -> None:
        body = allocation_manifest(name, NAMESPACE)
        deadline = time.monotonic() + 90
        while True:
            try:
                self.cluster.api.post(ALLOCATIONS, body)
                return
            except ApiError as exc:
                if exc.status == 409:  # an earlier try was applied without an answer
                    return
                error: Exception = exc
            except OSError as exc:  # the API server is away: refused, reset, timed out
                error = exc
            with self._lock:
                self.retries += 1
            if time.monotonic() > deadline:
                raise AssertionError(f"could not create {name}: {error}")
            time.sleep(0.2)


def pod_uids(cluster: LocalCluster) -> dict[str, str]:
    """Pod name -> pod UID, as the API server has them now."""
    items = cluster.api.get(PODS)["items"]
    return {pod["metadata"]["name"]: pod["metadata"]["uid"] for pod in items}


def problems(cluster: LocalCluster, replica: Operator) -> list[str]:
    """What still differs from "nothing lost, nothing doubled" (empty when all is well)."""
    allocations = cluster.api.get(ALLOCATIONS)["items"]
    pods = cluster.api.get(PODS)["items"]
    found: list[str] = []
    if len(allocations) != COUNT:
        found.append(f"{len(allocations)} Allocations, not {COUNT}")
    by_uid = {a["metadata"]["uid"]: a["metadata"]["name"] for a in allocations}
    owned: dict[str, list[str]] = {uid: [] for uid in by_uid}
    for pod in pods:
        name = pod["metadata"]["name"]
        owners = [
            o
            for o in pod["metadata"].get("ownerReferences") or []
            if o.get("kind") == "Allocation" and o.get("controller")
        ]
        if len(owners) != 1 or owners[0]["uid"] not in by_uid:
            found.append(f"orphan pod {name}: owners {owners}")
            continue
        owned[owners[0]["uid"]].append(name)
    for uid, names in owned.items():
        if names != [by_uid[uid]]:
            found.append(f"Allocation {by_uid[uid]} has pods {names}")
    not_running = [
        a["metadata"]["name"]
        for a in allocations
        if (a.get("status") or {}).get("clientStatus") != "running"
        or ((a["status"].get("taskStates") or {}).get("main") or {}).get("state") != "running"
    ]
    if not_running:
        found.append(f"{len(not_running)} Allocations without a running status: {not_running[:5]}")
    listed = replica.get(f"/v1/allocations?namespace={NAMESPACE}")
    served = sorted(a["ID"] for a in listed if a["ClientStatus"] == "running")
    if served != sorted(by_uid):
        found.append(f"the replica's API lists {len(served)} running of {len(by_uid)}")
    return found


def converged(cluster: LocalCluster, replica: Operator) -> bool:
    found = problems(cluster, replica)
    if found:
        raise AssertionError("; ".join(found))
    return True


@pytest.fixture
def replica(own_cluster: LocalCluster, tmp_path: Path) -> Iterator[Operator]:
    """The only reconciler of a control plane of the test's own, standalone, with `burst`."""
    kubectl = ClusterKubectl(own_cluster)
    kubeconfig = operator_kubeconfig(kubectl, own_cluster.kubeconfig, tmp_path / "sa")
    kubectl.create_namespace(NAMESPACE)
    folder = tmp_path / "operator"
    folder.mkdir()
    running = Operator(folder, kubeconfig).start()
    try:
        yield running
    finally:
        running.stop()


def fault_in_the_middle(
    cluster: LocalCluster, replica: Operator, fault: Callable[[], None]
) -> dict[str, str]:
    """Start the burst, inject `fault` once some pods exist, finish the burst; wait until
    everything converged and return the pods that existed at the fault (name -> UID)."""
    burst = Burst(cluster).start()
    eventually(
        lambda: len(pod_uids(cluster)) >= PODS_BEFORE_FAULT,
        timeout=60,
        what=f"{PODS_BEFORE_FAULT} pods",
    )
    created = len(cluster.api.get(ALLOCATIONS)["items"])
    before = pod_uids(cluster)
    assert len(before) < COUNT, "the fault came after the burst: it proves nothing"
    fault()
    burst.join()
    eventually(lambda: converged(cluster, replica), timeout=90, what="every Allocation settled")
    print(
        f"at the fault: {created} Allocations and {len(before)} pods of {COUNT}; "
        f"creates retried: {burst.retries}"
    )
    return before


def test_the_reconciling_replica_sigkilled_mid_burst_loses_and_doubles_nothing(
    own_cluster: LocalCluster, replica: Operator
) -> None:
    def kill_and_restart() -> None:
        replica.kill()  # SIGKILL: held-back status writes and in-flight creates are lost
        time.sleep(2.0)  # Allocations created meanwhile wait for the next replica
        replica.start()

    before = fault_in_the_middle(own_cluster, replica, kill_and_restart)
    after = pod_uids(own_cluster)
    assert {name: after.get(name) for name in before} == before, "pods were replaced"


@pytest.mark.parametrize("component", ["kube-apiserver", "etcd"])
def test_a_control_plane_restart_mid_burst_loses_and_doubles_nothing(
    own_cluster: LocalCluster, replica: Operator, component: str
) -> None:
    restart = (
        own_cluster.restart_apiserver
        if component == "kube-apiserver"
        else (own_cluster.restart_etcd)
    )
    before = fault_in_the_middle(own_cluster, replica, restart)
    after = pod_uids(own_cluster)
    assert {name: after.get(name) for name in before} == before, "pods were replaced"
    assert replica.process is not None and replica.process.poll() is None, "the replica exited"
    assert replica.ready(), "the replica is not ready and connected again"
