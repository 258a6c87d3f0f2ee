"""The image deployed with the shipped manifests on the real node, used through its Service.

In order: both replicas Ready through their readiness probes under the namespace's enforced
`restricted` Pod Security level, holding only the operator; black-box clients (the official
Go client's steps, python-nomad) with tokens from RoleBindings of the shipped ClusterRoles;
a `rollout restart` under a steady stream of requests, with what each old replica did and
when; the reconciling replica killed during a burst of Allocations.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from typing import Any

import nomad
import pytest
from e2e_support import (
    NAMESPACE,
    TRAP,
    Deployed,
    Traffic,
    Watcher,
    allocation,
    go_test,
    ready,
    report,
    sleeper,
    task,
    wait_running,
    workload_namespace,
)

from allocbridge_localcluster.kubectl import eventually

WORK = "e2e-work"  # three allocations nothing changes but signals, for reads and exec
ACT = "e2e-act"  # one allocation per action that changes it (restart, pause, stop)
BURST = "e2e-burst"
BURST_SIZE = 50


@pytest.fixture(scope="module")
def work(deployed: Deployed) -> Iterator[tuple[dict[str, str], list[str]]]:
    """Namespace WORK with tokens per shipped role and three running allocations."""
    tokens = workload_namespace(deployed, WORK)
    names = ["web-a", "web-b", "web-c"]
    for name in names:
        deployed.kubectl.apply(sleeper(name, WORK, trap=True))
    yield tokens, wait_running(deployed, WORK, names, tokens["reader"])


@pytest.fixture(scope="module")
def act(deployed: Deployed) -> Iterator[tuple[dict[str, str], dict[str, str]]]:
    """Namespace ACT with tokens per shipped role and its allocations by name -> ID."""
    tokens = workload_namespace(deployed, ACT)
    shapes = {
        "rst": allocation(
            "rst",
            ACT,
            [task("setup", "true", lifecycle={"hook": "prestart"}), task("main", TRAP, tini=True)],
        ),
        "pz": sleeper("pz", ACT, trap=True),
        "stopme": allocation("stopme", ACT, [task("main", TRAP)], {"shutdownDelay": "10s"}),
    }
    for manifest in shapes.values():
        deployed.kubectl.apply(manifest)
    ids = wait_running(deployed, ACT, list(shapes), tokens["reader"])
    yield tokens, dict(zip(shapes, ids, strict=True))


def test_both_replicas_are_ready_under_the_restricted_pod_security_level(
    deployed: Deployed,
) -> None:
    pods = deployed.pods()
    assert len(pods) == 2 and all(ready(p) for p in pods), [p["status"] for p in pods]
    assert {p["spec"]["nodeName"] for p in pods} == {"real-1"}
    for pod in pods:
        (container,) = pod["spec"]["containers"]
        assert container["readinessProbe"]["httpGet"]["path"] == "/health"
        assert container["image"] == "allocbridge:dev"
    namespace = deployed.kubectl.json("get", "namespace", NAMESPACE)
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    # The API server enforces it: a pod that is not restricted is refused in that namespace.
    refused = deployed.kubectl(
        "run",
        "privileged",
        "-n",
        NAMESPACE,
        "--image=busybox:1.37",
        "--dry-run=server",
        '--overrides={"spec": {"containers": [{"name": "privileged", "image": "busybox:1.37",'
        ' "securityContext": {"privileged": true}}]}}',
        check=False,
    )
    assert refused.returncode != 0 and 'violates PodSecurity "restricted' in refused.stderr
    # They reached the API server through the `kubernetes` Service (kube-proxy): ready means
    # their stores have listed every Allocation.
    endpoints = deployed.kubectl.json("get", "endpoints", "kubernetes", "-n", "default")
    addresses = [a["ip"] for s in endpoints["subsets"] for a in s["addresses"]]
    assert addresses == ["10.245.0.1"]


def test_the_image_holds_the_operator_and_not_the_test_control_plane(deployed: Deployed) -> None:
    probe = (
        "import importlib.util, shutil, sys\n"
        "print(importlib.util.find_spec('allocbridge.app') is not None,"
        " importlib.util.find_spec('allocbridge_localcluster') is None,"
        " [t for t in ('gcc', 'cc', 'pip', 'apt-get', 'dpkg', 'kubelet') if shutil.which(t)],"
        " sys.version_info[:2])"
    )
    done = deployed.kubectl(
        "exec", "-n", NAMESPACE, "deploy/allocbridge", "-c", "allocbridge", "--",
        "python", "-c", probe,
    )  # fmt: skip
    assert done.stdout.strip() == "True True [] (3, 11)", done.stdout
    user = deployed.kubectl("exec", "-n", NAMESPACE, "deploy/allocbridge", "--", "id", "-u")
    assert user.stdout.strip() == "10001"


def test_black_box_clients_through_the_service_with_role_bound_tokens(
    deployed: Deployed,
    work: tuple[dict[str, str], list[str]],
    act: tuple[dict[str, str], dict[str, str]],
) -> None:
    """Steps of the official Go client's suite (tests/goclient: List, Info, BlockingQueries,
    Signal, Exec, Denied, Restart, Pause, Stop, UnknownAllocation) and python-nomad, against
    the ClusterIP, with ACLs on: the reader's token reads, the operator's signals and execs,
    the admin's restarts, pauses and stops, an unbound token is refused. Left out of the Go
    suite: ServicesAndChecks and LogsJobsAndStats, whose fixtures are shaped for kwok's node
    (tests/cluster/test_go_client.py runs them)."""
    tokens, ids = work
    began = time.monotonic()
    base = {"NOMAD_ADDR": deployed.api, "NOMAD_NAMESPACE": WORK}
    go_test(
        "^TestList$", {**base, "NOMAD_TOKEN": tokens["reader"], "GOCLIENT_ALLOCS": ",".join(ids)}
    )
    go_test(
        "^TestInfo$",
        {
            **base,
            "NOMAD_TOKEN": tokens["reader"],
            "GOCLIENT_ALLOC": ids[1],
            "GOCLIENT_JOB": "web-b",
            "GOCLIENT_NODE": "real-1",
        },
    )
    operator_token = {**base, "NOMAD_TOKEN": tokens["operator"]}
    go_test("^TestBlockingQueries$", {**operator_token, "GOCLIENT_ALLOC": ids[1]})
    go_test("^TestSignal$", {**operator_token, "GOCLIENT_ALLOC": ids[2]})
    go_test("^TestExec$", {**operator_token, "GOCLIENT_ALLOC": ids[0]})
    go_test(
        "^TestDenied$",
        {
            **base,
            "NOMAD_TOKEN": tokens["nobody"],
            "GOCLIENT_READER_TOKEN": tokens["reader"],
            "GOCLIENT_ALLOC": ids[0],
        },
    )

    # The task's shell printed the signals it trapped (both arrive during one `sleep 1`; the
    # shell then runs pending traps by signal number, so the order is not the sending order).
    trapped: list[str] = []

    def printed() -> bool:
        pod = _pod_of(deployed, WORK, ids[2])
        trapped[:] = deployed.kubectl("logs", "-n", WORK, pod).stdout.split()
        return sorted(trapped) == ["HUP", "USR1"]

    try:
        eventually(printed, timeout=60, what="web-c's task to trap SIGUSR1 and SIGHUP")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; its log: {trapped}") from None
    act_tokens, act_ids = act
    admin = {"NOMAD_ADDR": deployed.api, "NOMAD_NAMESPACE": ACT, "NOMAD_TOKEN": act_tokens["admin"]}
    go_test("^TestRestart$", {**admin, "GOCLIENT_ALLOC": act_ids["rst"]})
    go_test("^TestPause$", {**admin, "GOCLIENT_ALLOC": act_ids["pz"]})
    go_test("^TestStop$", {**admin, "GOCLIENT_ALLOC": act_ids["stopme"]})
    go_test("^TestUnknownAllocation$", admin)

    client = nomad.Nomad(
        host=deployed.service_ip, port=4646, token=tokens["reader"], namespace=WORK, timeout=30
    )
    listed = client.allocations.get_allocations(namespace=WORK)
    assert sorted(a["ID"] for a in listed) == sorted(ids)
    assert client.allocation.get_allocation(ids[2])["JobID"] == "web-c"
    with pytest.raises(nomad.api.exceptions.URLNotAuthorizedNomadException):
        client.client.allocation.signal_allocation(ids[2], signal="SIGUSR1")
    operator = nomad.Nomad(
        host=deployed.service_ip, port=4646, token=tokens["operator"], namespace=WORK, timeout=30
    )
    operator.client.allocation.signal_allocation(ids[2], signal="SIGHUP")
    report(
        f"black box through the Service {deployed.service_ip}:4646 with ACLs: Go client "
        f"TestList, TestInfo, TestBlockingQueries, TestSignal, TestExec, TestDenied, "
        f"TestRestart, TestPause, TestStop, TestUnknownAllocation and "
        f"python-nomad list/read/signal/403 passed in "
        f"{time.monotonic() - began:.1f}s"
    )


async def test_rollout_restart_under_load_fails_no_request(
    deployed: Deployed, work: tuple[dict[str, str], list[str]]
) -> None:
    tokens, ids = work
    old = deployed.ready_pods()
    assert len(old) == 2
    traffic = Traffic(deployed.api, WORK, ids, tokens["operator"])
    load = asyncio.create_task(traffic.run())
    await asyncio.sleep(3)  # the stream flows before the restart
    watcher = Watcher(deployed, old)
    watching = asyncio.create_task(watcher.run())
    began = time.monotonic()
    await asyncio.to_thread(
        deployed.kubectl, "rollout", "restart", "deployment/allocbridge", "-n", NAMESPACE
    )
    await asyncio.to_thread(
        deployed.kubectl,
        "rollout", "status", "deployment/allocbridge", "-n", NAMESPACE, "--timeout=300s",
        timeout=320,
    )  # fmt: skip
    rolled = time.monotonic() - began
    try:
        await asyncio.wait_for(watching, timeout=120)  # until both old pods left the slices
    finally:
        watcher.stop()
    await asyncio.sleep(3)  # and a little more traffic on the new replicas alone
    traffic.stop()
    tally = await load

    total = sum(tally.sent.values())
    report(
        f"rollout restart under load: {total} requests through the Service "
        f"({', '.join(f'{n} {k}' for k, n in sorted(tally.sent.items()))}), "
        f"{len(tally.failures)} failed; rollout status done after {rolled:.1f}s"
    )
    for failure in tally.failures[:10]:
        report(f"  failed at {failure[0]:.2f}s: {failure[1]}: {failure[2]}")
    for line in watcher.timelines:
        report(
            f"  old replica {line.pod} ({line.ip}), seconds after `rollout restart`: /health "
            f"503 at {_s(line.health_503)}; endpoint not ready at {_s(line.not_ready)}, not "
            f"serving at {_s(line.not_serving)}, gone from the EndpointSlice at "
            f"{_s(line.left_slice)}; API listener closed at {_s(line.listener_closed)}"
        )
    assert not tally.failures
    assert all(tally.sent.get(kind) for kind in ("read", "blocking query", "paging walk"))
    assert tally.sent.get("exec session")
    for line in watcher.timelines:
        assert line.health_503 is not None and line.not_serving is not None
        assert line.not_ready is not None and line.listener_closed is not None
        # 503 first; the Service stops routing to it (the probe saw the 503); then it closes.
        assert line.health_503 <= line.not_serving < line.listener_closed, line
        assert line.not_ready < line.listener_closed, line
    assert len(deployed.ready_pods()) == 2


def _pod_of(deployed: Deployed, namespace: str, alloc_id: str) -> str:
    """The name of the pod of the allocation with this ID (its owner)."""
    pods = deployed.kubectl.json("get", "pods", "-n", namespace)["items"]
    (name,) = [
        p["metadata"]["name"]
        for p in pods
        if any(r["uid"] == alloc_id for r in p["metadata"].get("ownerReferences") or [])
    ]
    return str(name)


def _s(value: float | None) -> str:
    return "never" if value is None else f"{value:.2f}"


def _peers(deployed: Deployed) -> dict[str, int]:
    """Peer (pod name) -> priority in the replicas' ClusterKopfPeering."""
    peering = deployed.kubectl.json("get", "clusterkopfpeering", "allocbridge")
    return {peer: int(info["priority"]) for peer, info in (peering.get("status") or {}).items()}


def _log_count(deployed: Deployed, pod: str, words: str) -> int:
    """How many of the replica's log lines carry `words` (Kopf's peering messages)."""
    done = deployed.kubectl("logs", "-n", NAMESPACE, pod, "-c", "allocbridge", check=False)
    return sum(words in line for line in done.stdout.splitlines())


def _log_says(deployed: Deployed, pod: str, words: str) -> bool:
    return _log_count(deployed, pod, words) > 0


def test_failover_when_the_reconciling_replica_is_killed_during_a_burst(
    deployed: Deployed,
) -> None:
    pods = {p["metadata"]["name"] for p in deployed.ready_pods()}
    assert len(pods) == 2
    peers = eventually(
        lambda: (found := _peers(deployed)) and pods <= set(found) and found,
        timeout=60,
        what="both replicas in the peering",
    )
    leader = max(pods, key=lambda name: peers[name])
    (standby,) = pods - {leader}
    assert _log_says(deployed, leader, "Resuming operations")

    resumed_before = _log_count(deployed, standby, "Resuming operations")
    workload_namespace(deployed, BURST)
    burst = {
        "apiVersion": "v1",
        "kind": "List",
        "items": [sleeper(f"burst-{i:02d}", BURST) for i in range(BURST_SIZE)],
    }
    applying = time.monotonic()
    deployed.kubectl("apply", "-f", "-", stdin=json.dumps(burst))
    time.sleep(1)  # the leader is busy with the burst
    deployed.kubectl("delete", "pod", leader, "-n", NAMESPACE, "--grace-period=0", "--force")
    killed = time.monotonic()

    eventually(
        lambda: _log_count(deployed, standby, "Resuming operations") > resumed_before,
        timeout=180,
        what=f"{standby} to take over",
    )
    took_over = time.monotonic() - killed
    lifetime = 60  # Kopf's default peering lifetime: the dead leader's announcement expires

    def settled() -> dict[str, Any] | None:
        allocs = deployed.kubectl.json("get", "allocations", "-n", BURST)["items"]
        pods = deployed.kubectl.json("get", "pods", "-n", BURST)["items"]
        owners: dict[str, int] = {}
        for pod in pods:
            if pod["metadata"].get("deletionTimestamp"):
                continue
            for ref in pod["metadata"].get("ownerReferences") or []:
                owners[ref["uid"]] = owners.get(ref["uid"], 0) + 1
        statuses = [(a.get("status") or {}).get("clientStatus") for a in allocs]
        if len(allocs) == BURST_SIZE and all(s == "running" for s in statuses):
            return {"owners": owners, "allocs": allocs}
        return None

    try:
        state = eventually(settled, timeout=300, what="every burst allocation running")
    except AssertionError:
        allocs = deployed.kubectl.json("get", "allocations", "-n", BURST)["items"]
        statuses = [(a.get("status") or {}).get("clientStatus") for a in allocs]
        listing = deployed.kubectl("get", "pods", "-n", BURST, "-o", "wide").stdout
        raise AssertionError(f"allocation statuses {statuses}; pods:\n{listing}") from None
    settled_after = time.monotonic() - applying
    counts = [state["owners"].get(a["metadata"]["uid"], 0) for a in state["allocs"]]
    assert counts == [1] * BURST_SIZE, counts

    replacement = eventually(
        lambda: [
            name for p in deployed.ready_pods() if (name := p["metadata"]["name"]) not in pods
        ],
        timeout=180,
        what="the replacement replica to be ready",
    )[0]
    peers = eventually(
        lambda: (found := _peers(deployed)) and replacement in found and found,
        timeout=60,
        what="the replacement in the peering",
    )
    assert peers[replacement] < peers[standby]
    assert not _log_says(deployed, replacement, "Resuming operations")
    report(
        f"failover: killed the reconciling replica {leader} (--grace-period=0) 1s into a burst "
        f"of {BURST_SIZE} Allocations; {standby} resumed reconciling {took_over:.1f}s later "
        f"(Kopf's peering lifetime: {lifetime}s); all {BURST_SIZE} running with exactly one "
        f"pod each {settled_after:.1f}s after the burst; the replacement {replacement} joined "
        f"as a standby"
    )
    assert took_over <= lifetime + 15  # the dead leader's announcement expires, then resume
