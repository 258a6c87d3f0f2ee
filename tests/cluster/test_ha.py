"""High availability: several `allocbridge run` replicas against one control plane.

Each replica serves /v1 from its own watch-fed store; Kopf peering (a ClusterKopfPeering of the
test's own, with distinct priorities) lets only the replica with the highest priority reconcile.
A replica's JSON log says what it did: Kopf logs "Resuming operations after the pause" when a
replica starts reconciling and "Pausing operations in favour of ..." when it stops, and the
reconciler logs each pass with the allocation it was for. That ties reconciliation to one
replica even while another reconciler (the session's standalone operator) watches the same
cluster.

The API-server restart test runs on a LocalCluster of its own, so stopping kube-apiserver
never disturbs the session's cluster.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import functools
import json
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from running_operator import (
    REPO,
    ClusterKubectl,
    Operator,
    allocation_manifest,
    http,
    kubelet_warning,
    operator_kubeconfig,
    service_account_kubeconfig,
)

from allocbridge.config import LogSettings
from allocbridge_localcluster import LocalCluster
from allocbridge_localcluster.kubectl import eventually

pytestmark = pytest.mark.cluster

LEADER_PRIORITY, FOLLOWER_PRIORITY = 200, 100
# Allocations without pods: once failed validation, nothing about them changes, so indexes
# stand still and a blocking query has something to wait for.
PODLESS = "no-such-driver"
PEERING_LIFETIME = 60  # Kopf's default: a killed leader's record expires after this long


class Replica(Operator):
    """An `allocbridge run` process logging JSON, in a peering (or standalone with None)."""

    def __init__(
        self,
        folder: Path,
        kubeconfig: Path,
        *,
        peering: str | None,
        priority: int = 0,
        namespaces: tuple[str, ...] = (),
    ) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        # debug: each reconcile pass is logged, which is how `reconciled` tells the replica
        # that acted, even where the session's own operator wrote the status first
        super().__init__(
            folder,
            kubeconfig,
            namespaces=namespaces,
            peering=peering,
            priority=priority,
            log=LogSettings(format="json", level="debug"),
            grace=3.0,
        )
        self._log_start = 0

    def start(self) -> Replica:
        self._log_start = self.log.stat().st_size if self.log.exists() else 0
        super().start()
        return self

    def records(self) -> list[dict[str, Any]]:
        """This run's JSON log records (a restart appends to the same file)."""
        with self.log.open("rb") as file:
            file.seek(self._log_start)
            lines = file.read().decode(errors="replace").splitlines()
        found = []
        for line in lines:
            with contextlib.suppress(ValueError):
                record = json.loads(line)
                if isinstance(record, dict):
                    found.append(record)
        return found

    def leading(self) -> bool:
        """Kopf's last word on peering in this run: resumed (reconciling) or paused."""
        state = False
        for record in self.records():
            message = str(record.get("msg", ""))
            if message.startswith("Resuming operations"):
                state = True
            elif message.startswith("Pausing operations"):
                state = False
        return state

    def reconciled(self, namespace: str, name: str | None = None) -> bool:
        """Whether this run's reconciler made a pass over an allocation in `namespace` (named
        `name`), as its debug log says."""
        for record in self.records():
            where, _, which = str(record.get("allocation", "")).partition("/")
            if (
                record.get("msg") == "reconcile pass"
                and where == namespace
                and (name is None or which == name)
            ):
                return True
        return False

    def health(self) -> int:
        return http(self.ops + "/health")[0]


def alloc_manifest(name: str, namespace: str, driver: str = "docker") -> dict[str, Any]:
    """An allocation of one task; an unknown `driver` fails validation once and gets no pod."""
    return {
        "apiVersion": "allocbridge.io/v1",
        "kind": "Allocation",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "job": {"id": name, "type": "service"},  # JobID names it in API answers
            "taskGroup": {"name": "g"},
            "tasks": [{"name": "main", "driver": driver, "config": {"image": "busybox"}}],
        },
    }


def header(headers: dict[str, str], name: str) -> str:
    return next((v for k, v in headers.items() if k.lower() == name.lower()), "")


def listing(replica: Replica, namespace: str, query: str = "") -> tuple[list[Any], dict[str, str]]:
    status, body, headers = http(f"{replica.api}/v1/allocations?namespace={namespace}{query}")
    assert status == 200, f"{replica.api}: {status} {body[:200]!r}"
    items: list[Any] = json.loads(body)
    return items, headers


def names(items: list[Any]) -> list[str]:
    """The allocations' JobIDs, which the tests set to the object names."""
    return sorted(item["JobID"] for item in items)


def wait_listed(replicas: tuple[Replica, ...], namespace: str, expected: list[str]) -> None:
    """Wait until every replica's store lists exactly these allocation names."""
    for replica in replicas:
        eventually(
            functools.partial(lambda r: names(listing(r, namespace)[0]) == expected, replica),
            what=f"{replica.api} to list {expected}",
        )


def stop_all(*replicas: Replica) -> None:
    """SIGTERM every live replica at once, then wait for each (their grace periods overlap)."""
    for replica in replicas:
        if replica.process is not None and replica.process.poll() is None:
            replica.process.send_signal(signal.SIGTERM)
    for replica in replicas:
        replica.stop()


@pytest.fixture(scope="module")
def sa_kubeconfig(cluster: Any, kubectl: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("ha")
    return operator_kubeconfig(kubectl, cluster.kubeconfig, folder / "kubeconfig")


@pytest.fixture
def peering(kubectl: Any) -> Iterator[str]:
    name = f"allocbridge-ha-{uuid.uuid4().hex[:8]}"
    kubectl.apply(
        {"apiVersion": "kopf.dev/v1", "kind": "ClusterKopfPeering", "metadata": {"name": name}}
    )
    yield name
    kubectl("delete", "clusterkopfpeering", name, "--wait=false", check=False)


@pytest.fixture
def pair(sa_kubeconfig: Path, peering: str, tmp_path: Path) -> Iterator[tuple[Replica, Replica]]:
    """A leader (started first, higher priority) and a follower, both ready."""
    leader = Replica(tmp_path / "a", sa_kubeconfig, peering=peering, priority=LEADER_PRIORITY)
    follower = Replica(tmp_path / "b", sa_kubeconfig, peering=peering, priority=FOLLOWER_PRIORITY)
    try:
        leader.start()
        eventually(leader.leading, what="the first replica to start reconciling")
        follower.start()
        yield leader, follower
    finally:
        stop_all(follower, leader)


def test_one_replica_reconciles_and_the_other_takes_over_when_it_dies(
    pair: tuple[Replica, Replica], namespace: str, kubectl: Any
) -> None:
    leader, follower = pair
    kubectl.apply(alloc_manifest("first", namespace, driver=PODLESS))
    eventually(lambda: leader.reconciled(namespace, "first"), what="the leader to reconcile")
    wait_listed(pair, namespace, ["first"])  # both serve the API, from their own stores
    time.sleep(1.0)
    assert leader.leading() and not follower.leading()
    assert not follower.reconciled(namespace), "the paused replica reconciled"

    leader.kill()  # SIGKILL: no goodbye in the peering; its record has to expire
    killed = time.monotonic()
    kubectl.apply(alloc_manifest("second", namespace))
    eventually(follower.leading, timeout=PEERING_LIFETIME + 30, what="the follower to take over")
    eventually(lambda: follower.reconciled(namespace, "second"), what="the follower to reconcile")
    pod = eventually(lambda: kubectl.json("get", "pod", "second", "-n", namespace), what="pod")
    assert pod["metadata"]["ownerReferences"][0]["name"] == "second"
    print(f"takeover after SIGKILL: {time.monotonic() - killed:.1f}s")
    assert names(listing(follower, namespace)[0]) == ["first", "second"]

    # The old leader comes back (as after a rolling restart): the higher priority leads again
    # and the other pauses; both serve the API throughout.
    leader.start()
    eventually(leader.leading, what="the restarted replica to lead again")
    eventually(lambda: not follower.leading(), what="the follower to pause again")
    for replica in pair:
        assert names(listing(replica, namespace)[0]) == ["first", "second"]


def test_a_replica_creates_its_missing_peering_and_reconciles(
    sa_kubeconfig: Path, namespace: str, kubectl: Any, tmp_path: Path
) -> None:
    """Kopf waits, paused, for a named peering that does not exist; the replica creates it
    (with the RBAC of manifests/, which holds no peering object of its own)."""
    name = f"allocbridge-ha-{uuid.uuid4().hex[:8]}"
    assert kubectl("get", "clusterkopfpeering", name, check=False).returncode != 0
    replica = Replica(tmp_path / "a", sa_kubeconfig, peering=name, priority=LEADER_PRIORITY)
    try:
        replica.start()
        eventually(replica.leading, what="the replica to create its peering and reconcile")
        kubectl.apply(alloc_manifest("first", namespace, driver=PODLESS))
        eventually(lambda: replica.reconciled(namespace, "first"), what="the replica to reconcile")
        peering = kubectl.json("get", "clusterkopfpeering", name)
        assert peering["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "allocbridge"}
        created = [r for r in replica.records() if r.get("msg") == "ClusterKopfPeering created"]
        assert [r.get("peering") for r in created] == [name]
    finally:
        stop_all(replica)
        kubectl("delete", "clusterkopfpeering", name, "--wait=false", check=False)


def test_replicas_watching_named_namespaces_elect_one_reconciler(
    sa_kubeconfig: Path, peering: str, namespace: str, kubectl: Any, tmp_path: Path
) -> None:
    """`kubernetes { namespaces = [...] }` with peering on: the replicas meet in the same
    ClusterKopfPeering as cluster-wide ones (Kopf alone would look for a KopfPeering in each
    namespace and, finding none, stay paused for good), so one reconciles, the others stand
    by, and a replica watching every namespace joins the same election."""

    def running(name: str) -> bool:
        found = kubectl.json("get", "allocation", name, "-n", namespace)
        return (found.get("status") or {}).get("clientStatus") == "running"

    only = (namespace,)
    leader = Replica(
        tmp_path / "a", sa_kubeconfig, peering=peering, priority=LEADER_PRIORITY, namespaces=only
    )
    follower = Replica(
        tmp_path / "b", sa_kubeconfig, peering=peering, priority=FOLLOWER_PRIORITY, namespaces=only
    )
    everywhere = Replica(tmp_path / "c", sa_kubeconfig, peering=peering, priority=50)
    try:
        leader.start()
        eventually(leader.leading, what="the namespaced replica to start reconciling")
        follower.start()
        everywhere.start()
        kubectl.apply(alloc_manifest("first", namespace))
        eventually(lambda: leader.reconciled(namespace, "first"), what="the leader to reconcile")
        eventually(lambda: running("first"), timeout=60, what="the allocation to run")
        wait_listed((leader, follower, everywhere), namespace, ["first"])
        time.sleep(1.0)
        assert leader.leading() and not follower.leading() and not everywhere.leading()
        assert not follower.reconciled(namespace) and not everywhere.reconciled(namespace)

        assert leader.stop() == 0  # a graceful stop leaves the peering at once
        eventually(follower.leading, timeout=10, what="the namespaced follower to take over")
        kubectl.apply(alloc_manifest("second", namespace))
        eventually(lambda: follower.reconciled(namespace, "second"), what="the follower")
        eventually(lambda: running("second"), timeout=60, what="the second allocation to run")
        assert not everywhere.leading() and not everywhere.reconciled(namespace)

        # Leave no pods behind: the index is global, and pods going away with the namespace
        # later would wake the next test's blocking queries.
        kubectl("delete", "allocations", "--all", "-n", namespace)
        eventually(
            lambda: not kubectl.json("get", "pods", "-n", namespace)["items"],
            timeout=60,
            what="the pods to go",
        )
    finally:
        stop_all(everywhere, follower, leader)


def test_page_tokens_and_blocking_indexes_work_across_replicas(
    pair: tuple[Replica, Replica], namespace: str, kubectl: Any
) -> None:
    a, b = pair
    created = [f"alloc-{i}" for i in range(5)]
    for name in created:
        kubectl.apply(alloc_manifest(name, namespace, driver=PODLESS))

    def settled() -> bool:
        """Both stores list every allocation with the CreateIndex the reconciler recorded."""
        items = kubectl.json("get", "allocations", "-n", namespace)["items"]
        if not all((item.get("status") or {}).get("createIndex") for item in items):
            return False
        views = [[(x["ID"], x["CreateIndex"]) for x in listing(r, namespace)[0]] for r in (a, b)]
        return len(views[0]) == len(created) and views[0] == views[1]

    eventually(settled, what="both replicas to list the same allocations")

    def walk(replicas: list[Replica]) -> list[str]:
        """Page through with 2 per page, asking the replicas in turn."""
        seen: list[str] = []
        token = ""
        for turn in range(10):
            query = "&per_page=2" + (f"&next_token={token}" if token else "")
            items, headers = listing(replicas[turn % len(replicas)], namespace, query)
            seen += [item["ID"] for item in items]
            token = header(headers, "X-Nomad-NextToken")
            if not token:
                return seen
        raise AssertionError("paging never ended")

    only_a = walk([a])
    assert walk([a, b]) == only_a  # a token from A resumes on B, and back
    assert walk([b, a]) == only_a
    assert len(only_a) == len(created) == len(set(only_a))

    # Once nothing changes, a blocking query on B with the index A reported parks until the
    # next change, and never answers with an index at or below A's.
    def quiet() -> int:
        """The index both replicas report, once it has stood still for a moment (else 0)."""
        first = [int(header(listing(r, namespace)[1], "X-Nomad-Index")) for r in (a, b)]
        time.sleep(1.5)
        again = [int(header(listing(r, namespace)[1], "X-Nomad-Index")) for r in (a, b)]
        return first[0] if len(set(first + again)) == 1 else 0

    index = eventually(quiet, timeout=60, what="the pods to settle")
    answers: list[tuple[int, list[str], float]] = []

    def block_on_b() -> None:
        """What a Nomad client does: block, and again from the new index, until it sees it."""
        since = index
        while not answers or "late" not in answers[-1][1]:
            found, got = listing(b, namespace, f"&index={since}&wait=30s")
            since = int(header(got, "X-Nomad-Index"))
            answers.append((since, names(found), time.monotonic()))

    waiter = threading.Thread(target=block_on_b, daemon=True)
    waiter.start()
    time.sleep(1.0)
    assert answers == [], "B answered a blocking query although nothing had changed"
    written = time.monotonic()
    kubectl.apply(alloc_manifest("late", namespace, driver=PODLESS))
    waiter.join(timeout=60)
    assert not waiter.is_alive(), "the blocking query on B never saw the change"
    assert all(got > index for got, _, _ in answers), answers
    assert answers[0][2] >= written
    assert "late" in answers[-1][1]


def test_a_draining_replica_leaves_the_pool_without_failing_a_request(
    pair: tuple[Replica, Replica], namespace: str, kubectl: Any
) -> None:
    leader, follower = pair
    kubectl.apply(alloc_manifest("steady", namespace))
    path = f"/v1/allocations?namespace={namespace}"
    wait_listed(pair, namespace, ["steady"])
    balancer = Balancer([leader, follower], path)
    balancer.start()
    try:
        eventually(lambda: all(balancer.served[r.api] >= 20 for r in pair), what="traffic")
        assert leader.health() == 200

        assert leader.process is not None
        leader.process.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        # 503 early in the grace period (3 s here), while the API is still served below.
        eventually(lambda: leader.health() == 503, timeout=2.0, what="503 after SIGTERM")
        assert time.monotonic() - signalled < 2.0
        # Draining: unready, yet the API still answers whoever has not noticed yet.
        status, body, _ = http(leader.api + path)
        assert status == 200 and names(json.loads(body)) == ["steady"]
        assert "allocbridge_draining 1.0" in http(leader.ops + "/metrics")[1].decode()
        assert leader.process.wait(timeout=30) == 0
        assert time.monotonic() - signalled >= leader.grace
        # A graceful stop leaves the peering at once: no waiting for a record to expire.
        eventually(follower.leading, timeout=10, what="the follower to take over")
        after_exit = balancer.served[follower.api]
        eventually(lambda: balancer.served[follower.api] >= after_exit + 20, what="traffic")
    finally:
        balancer.stop()

    assert balancer.failures == [], balancer.failures[:5]
    seen = balancer.health_seen[leader.api]
    assert seen[0] == 200 and 503 in seen
    assert 200 not in seen[seen.index(503) :], "a draining replica turned ready again"
    assert set(balancer.health_seen[follower.api]) == {200}


class Balancer:
    """A load balancer in miniature: health checks every 100 ms, requests to healthy replicas.

    Requests go round-robin, one after another, only to replicas whose last health check
    answered 200; every answer that is not a 200 (or no answer) is a failure.
    """

    def __init__(self, replicas: list[Replica], path: str) -> None:
        self.replicas = replicas
        self.path = path
        self.healthy: dict[str, bool] = {r.api: False for r in replicas}
        self.health_seen: dict[str, list[int]] = {r.api: [] for r in replicas}
        self.served: dict[str, int] = {r.api: 0 for r in replicas}
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._check, daemon=True),
            threading.Thread(target=self._send, daemon=True),
        ]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=10)

    def _check(self) -> None:
        while not self._stop.is_set():
            for replica in self.replicas:
                try:
                    status = replica.health()
                except OSError:
                    status = 0  # gone: out of the pool, not a request failure
                if not self.health_seen[replica.api] or self.health_seen[replica.api][-1] != status:
                    self.health_seen[replica.api].append(status)
                self.healthy[replica.api] = status == 200
            self._stop.wait(0.1)

    def _send(self) -> None:
        turn = 0
        while not self._stop.is_set():
            pool = [r for r in self.replicas if self.healthy[r.api]]
            if not pool:
                self._stop.wait(0.01)
                continue
            replica = pool[turn % len(pool)]
            turn += 1
            try:
                status, body, _ = http(replica.api + self.path)
            except OSError as exc:
                self.failures.append(f"{replica.api}: {exc!r}")
                continue
            if status != 200:
                self.failures.append(f"{replica.api}: {status} {body[:100]!r}")
            else:
                self.served[replica.api] += 1
            self._stop.wait(0.005)


# -- the Kubernetes API server goes away and comes back -----------------------------------


class HealthRecorder:
    """Polls `/health?worker_info=1` every 50 ms, keeping each change of (status, upstream)."""

    def __init__(self, replica: Replica) -> None:
        self.replica = replica
        self.seen: list[tuple[int, str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> HealthRecorder:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    @property
    def upstream(self) -> str:
        return self.seen[-1][1] if self.seen else ""

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                status, body, _ = http(self.replica.ops + "/health?worker_info=1")
                sample = (
                    status,
                    json.loads(body)["worker_process_info"]["upstream_connection_state"],
                )
            except (OSError, ValueError, KeyError) as exc:
                sample = (0, repr(exc))
            if not self.seen or self.seen[-1] != sample:
                self.seen.append(sample)
            self._stop.wait(0.05)


def standalone_replica(
    cluster: LocalCluster, tmp_path: Path, namespace: str
) -> tuple[ClusterKubectl, Replica]:
    """A started standalone replica on a control plane of the test's own, with `namespace`."""
    kubectl = ClusterKubectl(cluster)
    kubeconfig = operator_kubeconfig(kubectl, cluster.kubeconfig, tmp_path / "sa")
    kubectl.create_namespace(namespace)
    return kubectl, Replica(tmp_path / "operator", kubeconfig, peering=None).start()


def test_kubernetes_api_restart_is_reported_and_survived_without_losing_readiness(
    own_cluster: LocalCluster, tmp_path: Path
) -> None:
    kubectl, replica = standalone_replica(own_cluster, tmp_path, "outage")
    try:
        kubectl.apply(alloc_manifest("before", "outage"))
        eventually(
            lambda: kubectl("get", "pod", "before", "-n", "outage", check=False).returncode == 0,
            what="the first pod",
        )
        eventually(lambda: names(listing(replica, "outage")[0]) == ["before"], what="a list")

        with HealthRecorder(replica) as health:
            eventually(lambda: health.upstream == "READY", what="READY")
            own_cluster.stop_component("kube-apiserver")
            eventually(
                lambda: health.upstream in ("TRANSIENT_FAILURE", "CONNECTING"),
                timeout=20,
                what="the lost API server to be reported",
            )
            time.sleep(3.0)  # the store's watches and Kopf notice too
            assert names(listing(replica, "outage")[0]) == ["before"]  # served from the store
            own_cluster.start_component("kube-apiserver")
            # Changes the replica has not seen yet: its watches are still backing off.
            kubectl.apply(alloc_manifest("after", "outage"))
            kubectl("delete", "allocation", "before", "-n", "outage", "--wait=false")
            eventually(lambda: health.upstream == "READY", timeout=60, what="READY again")
            eventually(
                lambda: names(listing(replica, "outage")[0]) == ["after"],
                timeout=60,
                what="the store to catch up",
            )
            eventually(
                lambda: kubectl("get", "pod", "after", "-n", "outage", check=False).returncode == 0,
                timeout=60,
                what="reconciliation to resume",
            )
            time.sleep(0.5)

        statuses = [status for status, _ in health.seen]
        assert set(statuses) == {200}, f"readiness failed: {health.seen}"
        states = [state for _, state in health.seen]
        lost = next(i for i, s in enumerate(states) if s in ("TRANSIENT_FAILURE", "CONNECTING"))
        assert states[0] == "READY" and "READY" in states[lost:], states
    finally:
        replica.stop()


def test_acl_answers_503_while_the_kubernetes_api_is_away(
    own_cluster: LocalCluster, tmp_path: Path
) -> None:
    """Tokens cannot be reviewed without the API server: "try again", not a 403 verdict."""
    kubectl = ClusterKubectl(own_cluster)
    kubeconfig = operator_kubeconfig(kubectl, own_cluster.kubeconfig, tmp_path / "sa")
    kubectl("create", "serviceaccount", "caller", "-n", "default")
    token = kubectl("create", "token", "caller", "-n", "default").stdout.strip()
    folder = tmp_path / "acl"
    folder.mkdir()
    guarded = Operator(folder, kubeconfig, acl=True).start()
    path = "/v1/allocations?namespace=default"
    try:
        own_cluster.stop_component("kube-apiserver")
        try:
            status, body, headers = http(guarded.api + path, token=token)
            assert status == 503, (status, body)
            assert body.decode().startswith("ACL check unavailable: ")
            assert headers.get("Retry-After") == "1"
            closed = asyncio.run(exec_close(guarded.api, token))
            assert closed[0] == 1013 and closed[1].startswith("ACL check unavailable: ")
        finally:
            own_cluster.start_component("kube-apiserver")
        # Back: nothing was cached, and the token gets its verdict (no binding: denied).
        eventually(
            lambda: http(guarded.api + path, token=token)[0] == 403,
            timeout=60,
            what="a verdict once the API server is back",
        )
    finally:
        guarded.stop()


def test_an_action_answers_503_while_the_kubernetes_api_is_away(
    own_cluster: LocalCluster, tmp_path: Path
) -> None:
    """An action needs Kubernetes: without an answer from it, a 503 saying so and to try again
    (not a 500), and the same action done once the API server is back."""
    kubectl, replica = standalone_replica(own_cluster, tmp_path, "away")
    try:
        kubectl.apply(alloc_manifest("act", "away"))
        (alloc,) = eventually(lambda: listing(replica, "away")[0], what="the allocation listed")
        stop = f"{replica.api}/v1/allocation/{alloc['ID']}/stop"
        own_cluster.stop_component("kube-apiserver")
        try:
            status, body, headers = http(stop, method="POST")
            assert status == 503, (status, body)
            assert body.decode().startswith("Kubernetes unavailable: "), body
            assert headers.get("Retry-After") == "1"
        finally:
            own_cluster.start_component("kube-apiserver")
        eventually(lambda: http(stop, method="POST")[0] == 200, timeout=60, what="the stop")
    finally:
        replica.stop()


async def exec_close(api: str, token: str) -> tuple[int, str]:
    """The close code and reason of an exec WebSocket into an unknown allocation."""
    url = f"{api}/v1/client/allocation/0f0f0f0f-0000-4000-8000-000000000000/exec"
    url += "?task=main&command=%5B%22sh%22%5D"
    async with (
        aiohttp.ClientSession() as session,
        session.ws_connect(url, headers={"X-Nomad-Token": token}) as ws,
    ):
        message = await ws.receive(timeout=30)
        return int(message.data), str(message.extra)


def test_one_apply_on_a_fresh_cluster_brings_a_waiting_replica_to_reconcile(
    own_cluster: LocalCluster, tmp_path: Path
) -> None:
    """A user's install on a cluster that never had allocbridge: the replica starts before
    Kopf's peering CRD exists (it keeps retrying), then one `kubectl apply -k manifests/`
    installs everything, and the replica creates its ClusterKopfPeering and reconciles."""
    kubectl = ClusterKubectl(own_cluster)
    kubectl.apply_crds(REPO / "crds" / "allocations.yaml")
    for manifest in ("namespace.yaml", "rbac.yaml"):
        kubectl("apply", "-f", str(REPO / "manifests" / manifest))
    kubeconfig = service_account_kubeconfig(kubectl, own_cluster.kubeconfig, tmp_path / "sa")
    replica = Replica(tmp_path / "operator", kubeconfig, peering="allocbridge").start()
    try:
        eventually(
            lambda: any(
                r.get("msg") == "the ClusterKopfPeering could not be created yet; retrying"
                for r in replica.records()
            ),
            what="the replica to wait for the peering's kind",
        )
        assert not replica.leading()

        done = kubectl("apply", "-k", str(REPO / "manifests"), check=False)
        assert done.returncode == 0, done.stderr  # one apply, no "install the CRDs first"

        eventually(replica.leading, what="the replica to create its peering and reconcile")
        assert kubectl.json("get", "clusterkopfpeering", "allocbridge")["metadata"]["name"]
        kubectl("create", "namespace", "fresh")
        kubectl.apply(alloc_manifest("first", "fresh", driver=PODLESS))
        eventually(lambda: replica.reconciled("fresh", "first"), what="the replica to reconcile")
    finally:
        stop_all(replica)


#: The restart delay of the allocation whose timer a pause has to hold back: long enough for
#: the test to freeze the peering first, on a slow machine too.
RESTART_DELAY = 10


def test_a_paused_replica_fires_no_pass_from_its_timers(
    own_cluster: LocalCluster, tmp_path: Path
) -> None:
    """Kopf stops a paused replica's watches but not the reconciler's timers. A restart delay
    that runs out while another peer holds the lease must not make the paused replica act on
    what it saw last: the replica that leads decides. Here nobody leads (the peering is frozen,
    as `kopf freeze` does), so the deleted pod stays gone past its delay, and the replica
    replaces it once it resumes. On a control plane of the test's own: the session's standalone
    operator would replace the pod itself."""
    kubectl = ClusterKubectl(own_cluster)
    kubeconfig = operator_kubeconfig(kubectl, own_cluster.kubeconfig, tmp_path / "sa")
    kubectl.create_namespace("frozen")
    peering = "allocbridge-frozen"
    kubectl.apply(
        {"apiVersion": "kopf.dev/v1", "kind": "ClusterKopfPeering", "metadata": {"name": peering}}
    )
    replica = Replica(tmp_path / "operator", kubeconfig, peering=peering).start()
    try:
        eventually(replica.leading, what="the replica to lead")
        restart = {"attempts": 2, "interval": "10m", "delay": f"{RESTART_DELAY}s", "mode": "fail"}
        kubectl.apply(allocation_manifest("delayed", "frozen", restart=restart))

        def status() -> dict[str, Any]:
            found: dict[str, Any] = kubectl.json("get", "allocation", "delayed", "-n", "frozen")
            return found.get("status") or {}

        eventually(lambda: status().get("clientStatus") == "running", what="the allocation to run")
        kubectl("delete", "pod", "delayed", "-n", "frozen")
        start_after = eventually(
            lambda: status().get("startAfter"), what="the restart to wait for its delay"
        )

        frozen = {
            "priority": 1_000_000,
            "lifetime": 300,
            "lastseen": datetime.datetime.now(datetime.UTC).isoformat(),
        }
        freeze = {"status": {"frozen-by-test": frozen}}
        kubectl("patch", "clusterkopfpeering", peering, "--type=merge", "-p", json.dumps(freeze))
        eventually(lambda: not replica.leading(), what="the replica to pause")
        assert time.time() < int(start_after) / 1e9, "paused too late for this test to tell"

        time.sleep(int(start_after) / 1e9 - time.time() + 3.0)  # a pass would have made it
        gone = kubectl("get", "pod", "delayed", "-n", "frozen", check=False)
        assert gone.returncode != 0, "the paused replica replaced the pod"
        assert any(
            r.get("msg") == "paused: no pass" and r.get("allocation") == "frozen/delayed"
            for r in replica.records()
        ), "the restart delay's timer did not fire"

        thaw = {"status": {"frozen-by-test": None}}
        kubectl("patch", "clusterkopfpeering", peering, "--type=merge", "-p", json.dumps(thaw))
        eventually(replica.leading, what="the replica to resume")
        eventually(
            lambda: kubectl.json("get", "pod", "delayed", "-n", "frozen"),
            what="the resumed replica to replace the pod",
        )
        eventually(lambda: status().get("clientStatus") == "running", what="the allocation to run")
    finally:
        stop_all(replica)


def test_a_clean_stop_writes_the_status_it_held_back(
    own_cluster: LocalCluster, tmp_path: Path
) -> None:
    """A change that only adds detail (here a Kubernetes Event about the pod, a task event)
    waits up to 5 s to go out with the next one; a replica stopped meanwhile (a rolling
    update) writes it on the way out instead of leaving it to whoever reconciles next. On a
    control plane of the test's own: nothing else reconciles there to write it."""
    kubectl, replica = standalone_replica(own_cluster, tmp_path, "flush")
    try:
        kubectl.apply(allocation_manifest("flushed", "flush"))
        eventually(
            lambda: alloc_status(kubectl, "flush", "flushed").get("clientStatus") == "running",
            what="the allocation to run",
        )
        pod = kubectl.json("get", "pod", "flushed", "-n", "flush")
        kubectl.apply(kubelet_warning(pod, "Unhealthy", "Liveness probe failed: timeout"))
        eventually(
            lambda: any(
                r.get("msg") == "status write held back" and r.get("allocation") == "flush/flushed"
                for r in replica.records()
            ),
            what="the task event to be held back",
        )
        assert not unhealthy_events(alloc_status(kubectl, "flush", "flushed"))
    finally:
        code = replica.stop()
    assert code == 0
    flushed = [r for r in replica.records() if r.get("msg") == "held status writes flushed"]
    assert [(r["written"], r["failed"]) for r in flushed] == [(1, 0)]
    assert unhealthy_events(alloc_status(kubectl, "flush", "flushed")) == [
        "Unhealthy: Liveness probe failed: timeout"
    ]


def alloc_status(kubectl: ClusterKubectl, namespace: str, name: str) -> dict[str, Any]:
    found: dict[str, Any] = kubectl.json("get", "allocation", name, "-n", namespace)
    return found.get("status") or {}


def unhealthy_events(status: dict[str, Any]) -> list[str]:
    events = ((status.get("taskStates") or {}).get("main") or {}).get("events") or []
    return [e["displayMessage"] for e in events if e["displayMessage"].startswith("Unhealthy")]
