"""Allocations reconciled onto pods, with Nomad task states and events, on the real control plane.

Pods run on the real node (`real_namespace`): real containers that exit, are restarted in place
by the kubelet (with its back-off), killed on pod deletion and probed. A task that must exit on
cue runs a scripted BusyBox program (scripted.py) that `end_container` ends with a chosen code;
one that only has to run is `quiet_task` (tini above `sleep`, so TERM ends it at once). The real
kubelet's own Events (Scheduled, Pulled, Started, ...) become `Driver` task events, so order
checks look at the lifecycle events without them.

On kwok and the kubelet simulation still: what the real node cannot be (a node of an older
kubelet, a node deleted and registered again) and what needs a control plane of the test's own
(only one real node runs per machine); tests that create no pod stay in a kwok namespace.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
import urllib.parse
from pathlib import Path
from typing import Any

import pytest
import yaml
from running_operator import (
    FAST_RESTARTS,
    REPO,
    ClusterKubectl,
    Operator,
    allocation_manifest,
    http,
    operator_kubeconfig,
)
from scripted import IMAGE, end_container, scripted_task

from allocbridge.cluster.resources import GROUP, PLURAL, VERSION
from allocbridge.model.placement import bound_ns
from allocbridge.model.pods import PodSettings
from allocbridge_localcluster import LocalCluster
from allocbridge_localcluster.kubectl import eventually

pytestmark = pytest.mark.cluster

EXAMPLES = REPO / "examples"


def allocation(kubectl: Any, namespace: str, name: str) -> dict[str, Any]:
    found: dict[str, Any] = kubectl.json("get", "allocation", name, "-n", namespace)
    return found


def status(kubectl: Any, namespace: str, name: str) -> dict[str, Any]:
    found: dict[str, Any] = allocation(kubectl, namespace, name).get("status") or {}
    return found


def wait_status(
    kubectl: Any, namespace: str, name: str, client_status: str, timeout: float = 30
) -> dict[str, Any]:
    reached: dict[str, Any] = eventually(
        lambda: (s := status(kubectl, namespace, name)).get("clientStatus") == client_status and s,
        timeout=timeout,
        what=f"{namespace}/{name} to be {client_status}",
    )
    return reached


def event_types(state: dict[str, Any], task: str) -> list[str]:
    return [e["type"] for e in state["taskStates"][task]["events"]]


def lifecycle(state: dict[str, Any], task: str) -> list[str]:
    """The task's event types without `Driver`: the kubelet's own Events (Scheduled, Pulled,
    Created, Started, Killing) interleave with the operator's on a real node."""
    return [t for t in event_types(state, task) if t != "Driver"]


def wait_task_event(
    kubectl: Any, namespace: str, name: str, prefix: str, *, what: str, timeout: float = 30
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the status, the event) once task `main` has an event whose message starts `prefix`."""

    def found() -> tuple[dict[str, Any], dict[str, Any]] | None:
        state = status(kubectl, namespace, name)
        events = ((state.get("taskStates") or {}).get("main") or {}).get("events") or []
        event = next((e for e in events if e["displayMessage"].startswith(prefix)), None)
        return (state, event) if event is not None else None

    result: tuple[dict[str, Any], dict[str, Any]] = eventually(found, timeout=timeout, what=what)
    return result


def wait_restarted(kubectl: Any, namespace: str, name: str, what: str) -> dict[str, Any]:
    """The status once task `main` restarted once and the allocation runs again."""
    result: dict[str, Any] = eventually(
        lambda: (
            (s := status(kubectl, namespace, name))["taskStates"]["main"]["restarts"] == 1
            and s["clientStatus"] == "running"
            and s
        ),
        what=what,
    )
    return result


def container_status(kubectl: Any, namespace: str, pod: str, container: str) -> dict[str, Any]:
    """The kubelet's status of one container of the pod."""
    found = kubectl.json("get", "pod", pod, "-n", namespace)["status"]
    statuses = (found.get("containerStatuses") or []) + (found.get("initContainerStatuses") or [])
    mine: dict[str, Any] = next(c for c in statuses if c["name"] == container)
    return mine


def quiet_task(name: str = "main", **fields: Any) -> dict[str, Any]:
    """A task that only runs: tini above `sleep`, so the TERM of a pod deletion ends it at once
    (scripted.idle_task's bare `sleep` drops it and waits for the kill timeout), and nothing
    polls, which keeps many pods cheap."""
    config = {"image": IMAGE, "command": "/sbin/tini", "args": ["--", "sleep", "100000"]}
    return {"name": name, "driver": "docker", "config": config, **fields}


def pods_of(kubectl: Any, namespace: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = kubectl.json("get", "pods", "-n", namespace)["items"]
    return items


def apply_example(kubectl: Any, namespace: str, file: str) -> str:
    manifest = yaml.safe_load((EXAMPLES / file).read_text())
    manifest["metadata"]["namespace"] = namespace
    kubectl.apply(manifest)
    return str(manifest["metadata"]["name"])


def alloc_manifest(
    name: str,
    namespace: str,
    *,
    job_type: str = "service",
    restart: dict[str, Any] | None = None,
    tasks: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """An Allocation whose task `main` runs on a real node unless `tasks` says otherwise."""
    tasks = tasks or [quiet_task()]
    return allocation_manifest(name, namespace, job_type=job_type, restart=restart, tasks=tasks)


@pytest.mark.parametrize(
    ("file", "expected"),
    [
        ("web.yaml", "running"),
        ("prestart-leader.yaml", "running"),
        ("services-checks.yaml", "running"),
        ("raw-exec.yaml", "running"),
        ("scheduled.yaml", "running"),
        ("batch.yaml", "complete"),  # its task ends by itself after 5 s
    ],
)
def test_every_example_reaches_its_pod_and_status(
    operator: Operator, kubectl: Any, real_namespace: str, file: str, expected: str
) -> None:
    namespace = real_namespace
    name = apply_example(kubectl, namespace, file)
    spec = yaml.safe_load((EXAMPLES / file).read_text())["spec"]
    main = [t["name"] for t in spec["tasks"] if not t.get("lifecycle")]

    def reached() -> dict[str, Any] | None:
        # A prestart task running makes the allocation `running` (as in Nomad) before its main
        # tasks start: those wait for the prestart task to end.
        state = status(kubectl, namespace, name)
        tasks = [state["taskStates"][t] for t in main]
        if state.get("clientStatus") != expected:
            return None
        if expected == "running":
            return state if any(t["state"] == "running" for t in tasks) else None
        return state if all(t["state"] == "dead" and not t["failed"] for t in tasks) else None

    state = eventually(reached, timeout=60, what=f"{name} to be {expected}")
    pod = kubectl.json("get", "pod", name, "-n", namespace)
    owner = pod["metadata"]["ownerReferences"][0]
    assert owner["kind"] == "Allocation" and owner["controller"] is True
    assert owner["uid"] == allocation(kubectl, namespace, name)["metadata"]["uid"]
    assert state["nodeName"] == pod["spec"]["nodeName"] and state["nodeID"]
    assert state["createIndex"] > 0 and state["desiredStatus"] == "run"
    for task in spec["tasks"]:
        assert "Received" in event_types(state, task["name"])
    # The API serves the same allocation with the fields filled.
    uid = allocation(kubectl, namespace, name)["metadata"]["uid"]
    wire = operator.get(f"/v1/allocation/{uid}?namespace={namespace}")
    assert wire["ID"] == uid and wire["Namespace"] == namespace
    assert wire["ClientStatus"] == expected and wire["NodeName"] == state["nodeName"]
    assert wire["Job"]["ID"] == spec["job"]["id"]


def test_batch_allocation_completes(operator: Operator, kubectl: Any, real_namespace: str) -> None:
    """The example's task echoes, sleeps 5 s and exits 0 by itself: the pod succeeds."""
    namespace = real_namespace
    name = apply_example(kubectl, namespace, "batch.yaml")
    wait_status(kubectl, namespace, name, "running", timeout=60)
    state = wait_status(kubectl, namespace, name, "complete")
    task = state["taskStates"]["generate"]
    assert task["state"] == "dead" and task["failed"] is False and task["finishedAt"]
    last = [e for e in task["events"] if e["type"] != "Driver"][-1]
    assert (last["type"], last["displayMessage"]) == ("Terminated", "Exit Code: 0")
    # The kubelet writes the phase once the pod's sandbox is down, a moment after the exit.
    eventually(
        lambda: kubectl.json("get", "pod", name, "-n", namespace)["status"]["phase"] == "Succeeded",
        what="the pod to succeed",
    )
    assert container_status(kubectl, namespace, name, "generate")["restartCount"] == 0


def test_non_zero_exit_gives_terminated_then_restarting(
    operator: Operator, kubectl: Any, real_namespace: str
) -> None:
    namespace = real_namespace
    restart = {"attempts": 3, "interval": "10m", "delay": "1s", "mode": "fail"}
    kubectl.apply(alloc_manifest("crashy", namespace, restart=restart, tasks=[scripted_task()]))
    wait_status(kubectl, namespace, "crashy", "running")
    pod_uid = kubectl.json("get", "pod", "crashy", "-n", namespace)["metadata"]["uid"]
    end_container(kubectl, namespace, "crashy", "main", 3)
    state = eventually(
        lambda: (
            (s := status(kubectl, namespace, "crashy"))["taskStates"]["main"]["restarts"] == 1 and s
        ),
        what="the restart to be recorded",
    )
    events = [e for e in state["taskStates"]["main"]["events"] if e["type"] != "Driver"]
    kinds = [e["type"] for e in events]
    terminated = kinds.index("Terminated")
    assert kinds[terminated + 1] == "Restarting"
    assert events[terminated]["exitCode"] == 3
    assert state["taskStates"]["main"]["lastRestart"]
    assert eventually(
        lambda: status(kubectl, namespace, "crashy")["taskStates"]["main"]["state"] == "running",
        what="the task to run again",
    )
    # The kubelet ran the container again in the same pod, after the exit the test caused.
    assert kubectl.json("get", "pod", "crashy", "-n", namespace)["metadata"]["uid"] == pod_uid
    main = container_status(kubectl, namespace, "crashy", "main")
    assert main["restartCount"] == 1 and main["lastState"]["terminated"]["exitCode"] == 3


def test_restart_policy_exhausted_fails_the_allocation(
    operator: Operator, kubectl: Any, real_namespace: str
) -> None:
    namespace = real_namespace
    kubectl.apply(
        alloc_manifest("fragile", namespace, restart=FAST_RESTARTS, tasks=[scripted_task()])
    )
    wait_status(kubectl, namespace, "fragile", "running")
    end_container(kubectl, namespace, "fragile", "main", 1)
    eventually(
        lambda: status(kubectl, namespace, "fragile")["taskStates"]["main"]["restarts"] == 1,
        what="the first restart",
    )
    eventually(
        lambda: container_status(kubectl, namespace, "fragile", "main")["state"].get("running"),
        what="the kubelet to run the container again",
    )
    eventually(
        lambda: status(kubectl, namespace, "fragile")["taskStates"]["main"]["state"] == "running",
        what="the task to run again",
    )
    end_container(kubectl, namespace, "fragile", "main", 1)
    state = wait_status(kubectl, namespace, "fragile", "failed")
    task = state["taskStates"]["main"]
    assert task["state"] == "dead" and task["failed"] is True
    assert "Not Restarting" in event_types(state, "main")
    # The operator stops the failed allocation's pod.
    eventually(lambda: not pods_of(kubectl, namespace), what="the failed pod to be deleted")


def test_deleted_pod_is_a_task_failure_and_restarts(
    operator: Operator, kubectl: Any, real_namespace: str
) -> None:
    namespace = real_namespace
    restart = {"attempts": 2, "interval": "10m", "delay": "1s", "mode": "fail"}
    kubectl.apply(alloc_manifest("victim", namespace, restart=restart))
    wait_status(kubectl, namespace, "victim", "running")
    first_uid = kubectl.json("get", "pod", "victim", "-n", namespace)["metadata"]["uid"]
    kubectl("delete", "pod", "victim", "-n", namespace, "--wait=false")
    state = wait_restarted(kubectl, namespace, "victim", "a restart with a new pod")
    assert lifecycle(state, "main")[-3:] == ["Terminated", "Restarting", "Started"]
    pods = pods_of(kubectl, namespace)
    assert len(pods) == 1 and pods[0]["metadata"]["uid"] != first_uid


def test_a_pod_that_loses_its_managed_by_label_is_not_taken_for_deleted(
    operator: Operator, kubectl: Any, real_namespace: str
) -> None:
    """The operator's pod watch selects by the managed-by label, so removing the label makes
    the API server report the pod DELETED to it. The pod still exists and still belongs to the
    allocation: the operator reads it instead of counting a failure and replacing it."""
    namespace = real_namespace
    restart = {"attempts": 2, "interval": "10m", "delay": "1s", "mode": "fail"}
    kubectl.apply(alloc_manifest("relabelled", namespace, restart=restart))
    wait_status(kubectl, namespace, "relabelled", "running")
    uid = kubectl.json("get", "pod", "relabelled", "-n", namespace)["metadata"]["uid"]
    kubectl("label", "pod", "relabelled", "-n", namespace, "app.kubernetes.io/managed-by-")
    time.sleep(3)  # a replacement (1 s delay) would have begun
    [pod] = pods_of(kubectl, namespace)
    assert pod["metadata"]["uid"] == uid and "deletionTimestamp" not in pod["metadata"]
    state = status(kubectl, namespace, "relabelled")
    assert state["clientStatus"] == "running"
    assert state["taskStates"]["main"]["restarts"] == 0, event_types(state, "main")


def test_dead_leader_stops_its_siblings(
    operator: Operator, kubectl: Any, real_namespace: str
) -> None:
    namespace = real_namespace
    tasks = [scripted_task("leader", leader=True), scripted_task("helper")]
    kubectl.apply(alloc_manifest("led", namespace, job_type="batch", tasks=tasks))
    wait_status(kubectl, namespace, "led", "running")
    end_container(kubectl, namespace, "led", "leader", 0)
    state = wait_status(kubectl, namespace, "led", "complete")
    assert "Leader Task Dead" in event_types(state, "helper")
    assert state["taskStates"]["helper"]["state"] == "dead"
    # The helper really stops: its pod goes away.
    eventually(lambda: not pods_of(kubectl, namespace), what="the group's pod to be deleted")


#: A main task and a poststart sidecar, each a script that `end_container` ends.
SIDECAR_TASKS: list[dict[str, Any]] = [
    scripted_task("main"),
    scripted_task("proxy", lifecycle={"hook": "poststart", "sidecar": True}),
]


def test_batch_with_a_poststart_sidecar_completes_with_its_main_task(
    operator: Operator, kubectl: Any, real_namespace: str
) -> None:
    namespace = real_namespace
    kubectl.apply(alloc_manifest("sided", namespace, job_type="batch", tasks=SIDECAR_TASKS))
    wait_status(kubectl, namespace, "sided", "running")
    end_container(kubectl, namespace, "sided", "main", 0)
    state = wait_status(kubectl, namespace, "sided", "complete")
    proxy = state["taskStates"]["proxy"]
    assert proxy["state"] == "dead" and proxy["failed"] is False
    assert lifecycle(state, "proxy")[-2:] == ["Killing", "Killed"]
    killing = [e for e in proxy["events"] if e["type"] == "Killing"][-1]
    assert killing["killReason"] == "Main tasks in the group died"
    eventually(lambda: not pods_of(kubectl, namespace), what="the sidecar's pod to be deleted")


def test_a_batch_poststart_sidecar_runs_again_after_exit_0(
    operator: Operator, kubectl: Any, real_namespace: str
) -> None:
    """Nomad restarts a sidecar whatever its exit code; the pod is `OnFailure`, so the
    container carries its own `Always` (Kubernetes 1.35+), which the real node's 1.36 kubelet
    honours: it runs the container again, and the restart counts."""
    namespace = real_namespace
    kubectl.apply(alloc_manifest("resided", namespace, job_type="batch", tasks=SIDECAR_TASKS))
    wait_status(kubectl, namespace, "resided", "running")
    own = {
        c["name"]: c.get("restartPolicy")
        for c in kubectl.json("get", "pod", "resided", "-n", namespace)["spec"]["containers"]
    }
    assert own == {"main": None, "proxy": "Always"}
    end_container(kubectl, namespace, "resided", "proxy", 0)
    state = eventually(
        lambda: (
            (s := status(kubectl, namespace, "resided"))["taskStates"]["proxy"]["restarts"] == 1
            and s["taskStates"]["proxy"]["state"] == "running"
            and s
        ),
        what="the sidecar to run again",
    )
    assert lifecycle(state, "proxy")[-3:] == ["Terminated", "Restarting", "Started"]
    restarting = [e for e in state["taskStates"]["proxy"]["events"] if e["type"] == "Restarting"]
    assert restarting[-1]["restartReason"] == "Restart within policy"
    assert state["taskStates"]["main"]["state"] == "running"
    assert state["clientStatus"] == "running"
    proxy = container_status(kubectl, namespace, "resided", "proxy")
    assert proxy["restartCount"] == 1 and proxy["lastState"]["terminated"]["exitCode"] == 0
    assert container_status(kubectl, namespace, "resided", "main")["restartCount"] == 0


def test_on_a_node_with_an_older_kubelet_a_batch_poststart_sidecar_that_exits_0_is_dead(
    own_cluster: LocalCluster, tmp_path: Path
) -> None:
    """A control plane upgraded before its nodes: the 1.36 API server keeps the sidecar's own
    `Always`, but the node's 1.34 kubelet runs the pod's `OnFailure` and leaves it stopped
    after exit 0. The status says so (dead, not failed; the main task runs on) instead of
    waiting for a restart that never comes. On a control plane of the test's own, whose only
    node reports kubeletVersion v1.34.3 and is played by the simulation as that kubelet."""
    kubectl = ClusterKubectl(own_cluster)
    kubectl("delete", "node", "node-1")
    own_cluster.create_node("old-1", kubelet_version="v1.34.3")
    assert kubectl.json("get", "node", "old-1")["status"]["nodeInfo"]["kubeletVersion"] == "v1.34.3"
    kubeconfig = operator_kubeconfig(kubectl, own_cluster.kubeconfig, tmp_path / "sa")
    kubectl.create_namespace("skew")
    operator = Operator(tmp_path, kubeconfig).start()
    try:
        kubectl.apply(alloc_manifest("sided", "skew", job_type="batch", tasks=SIDECAR_TASKS))
        wait_status(kubectl, "skew", "sided", "running")
        pod = kubectl.json("get", "pod", "sided", "-n", "skew")
        assert pod["spec"]["nodeName"] == "old-1"
        own = {c["name"]: c.get("restartPolicy") for c in pod["spec"]["containers"]}
        assert own == {"main": None, "proxy": "Always"}  # kept by the API server

        own_cluster.container_exit("skew", "sided", "proxy", 0)
        state = eventually(
            lambda: (
                (s := status(kubectl, "skew", "sided"))["taskStates"]["proxy"]["state"] == "dead"
                and s
            ),
            what="the stopped sidecar to be dead",
        )
        proxy = state["taskStates"]["proxy"]
        assert proxy["failed"] is False and proxy["restarts"] == 0
        assert event_types(state, "proxy")[-1] == "Terminated"
        assert state["taskStates"]["main"]["state"] == "running"
        assert state["clientStatus"] == "running"
        statuses = kubectl.json("get", "pod", "sided", "-n", "skew")["status"]["containerStatuses"]
        sidecar = next(c for c in statuses if c["name"] == "proxy")
        assert sidecar["restartCount"] == 0 and "terminated" in sidecar["state"]
    finally:
        operator.stop()


def test_a_run_once_poststart_task_completes_in_a_service(
    operator: Operator, kubectl: Any, real_namespace: str
) -> None:
    """Nomad runs it once: the pod is `Always`, so the container carries its own `OnFailure`
    (Kubernetes 1.35+) and its exit 0 ends it, with the restart policy (one attempt) unspent.
    The real kubelet would run it again at once (a first restart has no back-off) if it
    ignored the container's own policy."""
    namespace = real_namespace
    tasks = [scripted_task("main"), scripted_task("announce", lifecycle={"hook": "poststart"})]
    kubectl.apply(alloc_manifest("announced", namespace, restart=FAST_RESTARTS, tasks=tasks))
    wait_status(kubectl, namespace, "announced", "running")
    end_container(kubectl, namespace, "announced", "announce", 0)

    def announce_container() -> dict[str, Any]:
        return container_status(kubectl, namespace, "announced", "announce")

    ended = eventually(
        lambda: (c := announce_container())["state"].get("terminated") and c,
        what="the poststart container to stay terminated",
    )
    assert ended["restartCount"] == 0 and ended["state"]["terminated"]["exitCode"] == 0
    state = eventually(
        lambda: (
            (s := status(kubectl, namespace, "announced"))["taskStates"]["announce"]["state"]
            == "dead"
            and s
        ),
        what="the poststart task to be complete",
    )
    announce = state["taskStates"]["announce"]
    assert announce["failed"] is False and announce["restarts"] == 0
    assert "Not Restarting" not in event_types(state, "announce")
    assert state["clientStatus"] == "running"
    assert announce_container()["restartCount"] == 0, "the kubelet ran it again"
    assert len(pods_of(kubectl, namespace)) == 1


def test_unknown_driver_fails_validation(operator: Operator, kubectl: Any, namespace: str) -> None:
    tasks = [{"name": "vm", "driver": "qemu", "config": {"image": "x"}}]
    kubectl.apply(alloc_manifest("bad", namespace, tasks=tasks))
    state = wait_status(kubectl, namespace, "bad", "failed")
    last = state["taskStates"]["vm"]["events"][-1]
    assert last["type"] == "Failed Validation" and "qemu" in last["displayMessage"]
    assert not pods_of(kubectl, namespace)


def test_spec_is_immutable(operator: Operator, kubectl: Any, namespace: str) -> None:
    kubectl.apply(alloc_manifest("fixed", namespace))
    done = kubectl(
        "patch",
        "allocation",
        "fixed",
        "-n",
        namespace,
        "--type=merge",
        "-p",
        json.dumps({"spec": {"job": {"priority": 90}}}),
        check=False,
    )
    assert done.returncode != 0 and "immutable" in done.stderr


def test_kubernetes_pod_events_become_task_events(
    operator: Operator, kubectl: Any, real_namespace: str
) -> None:
    """The kubelet's own Warning: the task's HTTP check is its readiness probe, and nothing in
    the container listens on the port, so the real kubelet reports `Unhealthy`."""
    namespace = real_namespace
    check = {"name": "alive", "type": "http", "path": "/", "interval": "1s", "timeout": "1s"}
    service = {"name": "probed", "portLabel": "8080", "checks": [check]}
    kubectl.apply(alloc_manifest("probed", namespace, tasks=[quiet_task(services=[service])]))
    wait_status(kubectl, namespace, "probed", "running")
    _, event = wait_task_event(
        kubectl, namespace, "probed", "Unhealthy", what="the kubelet's probe event as a task event"
    )
    assert event["type"] == "Driver"
    assert event["displayMessage"].startswith("Unhealthy: Readiness probe failed: ")
    assert "8080" in event["displayMessage"] and "connection refused" in event["displayMessage"]


def watched_statuses(text: str) -> list[dict[str, Any]]:
    """The successive statuses in a watch's output (JSON watch events, one after another)."""
    decoder = json.JSONDecoder()
    statuses: list[dict[str, Any]] = []
    at = 0
    while (at := text.find("{", at)) >= 0:
        try:
            event, at = decoder.raw_decode(text, at)
        except json.JSONDecodeError:
            break  # the tail of a document still being written
        found = event["object"].get("status") or {}
        if not statuses or found != statuses[-1]:
            statuses.append(found)
    return statuses


def test_a_routine_start_costs_one_status_write(
    operator: Operator, kubectl: Any, real_namespace: str
) -> None:
    namespace = real_namespace
    # What the API server saw: a watch from a revision taken before the Allocation exists
    # replays every change since (a watch started first could connect too late).
    path = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}"
    before = json.loads(kubectl("get", "--raw", path).stdout)["metadata"]["resourceVersion"]
    kubectl.apply(alloc_manifest("smooth", namespace))
    watch = subprocess.Popen(
        [
            str(kubectl.binary),
            f"--kubeconfig={kubectl.kubeconfig}",
            *("get", "--raw", f"{path}?watch=1&resourceVersion={before}&timeoutSeconds=300"),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert watch.stdout is not None
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(watch.stdout or ()), daemon=True)
    reader.start()
    try:
        statuses = eventually(
            lambda: (
                (found := watched_statuses("".join(lines)))
                and found[-1].get("clientStatus") == "running"
                and found
            ),
            what="the watch to see the allocation running",
        )
    finally:
        watch.terminate()
        watch.wait(timeout=10)
    assert [s.get("clientStatus") for s in statuses] == [None, "running"]
    events = event_types(statuses[-1], "main")
    assert events[:2] == ["Received", "Task Setup"] and "Started" in events
    assert statuses[-1]["nodeName"] and statuses[-1]["createIndex"] > 0
    # Kopf wrote nothing of its own either: no finalizer, no progress or diff-base annotation.
    for kind in ("allocation", "pod"):
        meta = kubectl.json("get", kind, "smooth", "-n", namespace)["metadata"]
        assert not meta.get("finalizers"), (kind, meta)
        assert not [k for k in meta.get("annotations") or {} if "kopf" in k], (kind, meta)


def test_an_unschedulable_allocation_shows_the_warning_within_seconds(
    operator: Operator, kubectl: Any, real_namespace: str
) -> None:
    namespace = real_namespace
    # The first write of a routine start may wait for the start (30 s); a Warning Event is
    # trouble, which cuts the wait back to the 5 s coalescing window.
    # 2,000 CPUs; no node has as many
    task = quiet_task(resources={"cpu": 2_000_000, "memoryMB": 64})
    kubectl.apply(alloc_manifest("too-big", namespace, tasks=[task]))
    state, _ = wait_task_event(
        kubectl,
        namespace,
        "too-big",
        "FailedScheduling",
        timeout=20,
        what="the scheduler's FailedScheduling warning as a task event",
    )
    assert state["clientStatus"] == "pending"
    assert "Received" in event_types(state, "main")


def test_deleting_the_allocation_removes_its_pod(
    operator: Operator, kubectl: Any, real_namespace: str
) -> None:
    namespace = real_namespace
    kubectl.apply(alloc_manifest("shortlived", namespace))
    wait_status(kubectl, namespace, "shortlived", "running")
    kubectl("delete", "allocation", "shortlived", "-n", namespace)
    eventually(lambda: not pods_of(kubectl, namespace), what="garbage collection of the pod")


def test_operator_killed_mid_reconcile_converges_to_one_pod(
    operator: Operator, kubectl: Any, real_namespace: str
) -> None:
    namespace = real_namespace
    names = [f"burst-{i}" for i in range(5)]
    for name in names:
        kubectl.apply(alloc_manifest(name, namespace))
    operator.kill()  # right after the writes, while it is reconciling them
    for name in [f"late-{i}" for i in range(3)]:
        kubectl.apply(alloc_manifest(name, namespace))
        names.append(name)
    operator.start()
    for name in names:
        wait_status(kubectl, namespace, name, "running")
    pods = pods_of(kubectl, namespace)
    assert sorted(p["metadata"]["name"] for p in pods) == sorted(names)


def test_pod_deleted_while_the_operator_is_down_is_noticed_after_a_restart(
    operator: Operator, kubectl: Any, real_namespace: str
) -> None:
    """The restarted operator knows nothing but what its watches list: a pod missing from
    that list is read before it counts as vanished, and then it does."""
    namespace = real_namespace
    restart = {"attempts": 2, "interval": "10m", "delay": "1s", "mode": "fail"}
    kubectl.apply(alloc_manifest("orphaned", namespace, restart=restart))
    wait_status(kubectl, namespace, "orphaned", "running")
    first_uid = kubectl.json("get", "pod", "orphaned", "-n", namespace)["metadata"]["uid"]
    operator.kill()
    kubectl("delete", "pod", "orphaned", "-n", namespace)
    operator.start()
    state = wait_restarted(
        kubectl, namespace, "orphaned", "the vanished pod counted as a restart, and a new pod"
    )
    assert "Restarting" in event_types(state, "main")
    pods = pods_of(kubectl, namespace)
    assert len(pods) == 1 and pods[0]["metadata"]["uid"] != first_uid


def test_operator_runs_without_admin_rights(operator: Operator) -> None:
    """The fixture's kubeconfig holds only the shipped ServiceAccount's token."""
    config = yaml.safe_load(Path(operator.config.parent / "kubeconfig").read_text())
    user = config["users"][0]["user"]
    assert set(user) == {"token"}
    who = subprocess.run(
        [
            "python3",
            "-c",
            "import base64,json,sys; p=sys.argv[1].split('.')[1]; "
            "print(json.loads(base64.urlsafe_b64decode(p + '==')).get('sub'))",
            user["token"],
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert who == "system:serviceaccount:allocbridge-system:allocbridge"


def test_a_node_registered_again_under_its_name_is_a_new_node_id(
    own_cluster: LocalCluster, tmp_path: Path
) -> None:
    """A node deleted and registered again under the same name (as EKS reuses IP-based names)
    is a new node: allocations placed on it get its new uid as NodeID, while one whose pod was
    bound to the old node keeps the old uid. On a control plane of the test's own, since the
    session's node must stay."""
    kubectl = ClusterKubectl(own_cluster)
    kubeconfig = operator_kubeconfig(kubectl, own_cluster.kubeconfig, tmp_path / "sa")
    kubectl.create_namespace("nodes")
    operator = Operator(tmp_path, kubeconfig).start()
    try:
        old_node = kubectl.json("get", "node", "node-1")["metadata"]["uid"]
        kubectl.apply(allocation_manifest("before", "nodes"))
        before = wait_status(kubectl, "nodes", "before", "running")
        assert (before["nodeName"], before["nodeID"]) == ("node-1", old_node)

        kubectl("delete", "node", "node-1")
        # Timestamps have whole seconds, and a node created in the second of a binding counts
        # as the pod's; a real node takes far longer to come back than this test.
        bound = bound_ns(kubectl.json("get", "pod", "before", "-n", "nodes"))
        assert bound is not None
        time.sleep(max(0.0, (bound + 1_000_000_000 - time.time_ns()) / 1e9) + 0.05)
        new_node = own_cluster.create_node("node-1")["metadata"]["uid"]
        assert new_node != old_node
        kubectl.apply(allocation_manifest("after", "nodes"))
        after = wait_status(kubectl, "nodes", "after", "running")
        assert (after["nodeName"], after["nodeID"]) == ("node-1", new_node)

        # A pass of `before` now, made to write at once by stopping it, keeps its own node.
        before_uid = allocation(kubectl, "nodes", "before")["metadata"]["uid"]
        code, raw, _ = http(f"{operator.api}/v1/allocation/{before_uid}/stop", method="PUT")
        assert code == 200, raw
        stopped = eventually(
            lambda: (s := status(kubectl, "nodes", "before"))["desiredStatus"] == "stop" and s,
            what="the stop to be written",
        )
        assert stopped["nodeID"] == old_node

        after_uid = allocation(kubectl, "nodes", "after")["metadata"]["uid"]
        query = "/v1/allocations?" + urllib.parse.urlencode(
            {"namespace": "nodes", "filter": f'NodeID == "{new_node}"'}
        )
        on_new_node = [a["ID"] for a in operator.get(query)]  # with `before`'s replacement
        assert after_uid in on_new_node and before_uid not in on_new_node
    finally:
        operator.stop()


def test_the_operator_watches_only_its_own_pods_and_events_about_pods(
    audited_cluster: LocalCluster, tmp_path: Path
) -> None:
    """The API server, not the operator, drops other workloads' pods and Events: without
    selectors in the requests every pod and Event of the cluster would reach each replica. The
    pods are listed and watched by the store and the reconciler, the Events by the reconciler
    (`reconcile/watches.py`). On a control plane of the test's own, whose API server records
    lists and watches."""
    kubectl = ClusterKubectl(audited_cluster)
    kubeconfig = operator_kubeconfig(kubectl, audited_cluster.kubeconfig, tmp_path / "sa")
    kubectl.create_namespace("watched")
    operator = Operator(tmp_path, kubeconfig).start()
    try:
        kubectl.apply(allocation_manifest("watched", "watched"))
        wait_status(kubectl, "watched", "watched", "running")  # the narrowed watches deliver
    finally:
        operator.stop()

    asked = [
        r
        for r in audited_cluster.audited_requests()
        if r.username == "system:serviceaccount:allocbridge-system:allocbridge"
    ]
    pods = [r for r in asked if r.path == "/api/v1/pods"]
    events = [r for r in asked if r.path == "/api/v1/events"]
    assert {r.verb for r in pods} == {"list", "watch"}, pods
    assert all(
        r.query.get("labelSelector") == "app.kubernetes.io/managed-by=allocbridge" for r in pods
    ), pods
    assert {r.verb for r in events} == {"list", "watch"}, events
    assert all(r.query.get("fieldSelector") == "involvedObject.kind=Pod" for r in events), events
    assert all(r.code == 200 for r in pods + events), pods + events


def test_the_pod_settings_of_the_configuration_file_reach_the_pods(
    own_cluster: LocalCluster, tmp_path: Path
) -> None:
    """Labels, annotations, a node selector and tolerations set in the `kubernetes` block of
    the operator's HCL file are on the pods it creates, and the scheduler places such a pod."""
    kubectl = ClusterKubectl(own_cluster)
    kubeconfig = operator_kubeconfig(kubectl, own_cluster.kubeconfig, tmp_path / "sa")
    kubectl.create_namespace("configured")
    toleration = {"key": "dedicated", "operator": "Equal", "value": "nomad", "effect": "NoSchedule"}
    pods = PodSettings(
        extra_labels={"team": "web"},
        extra_annotations={"owner": "ops"},
        node_selector={"kubernetes.io/hostname": "node-1"},
        tolerations=(toleration,),
    )
    operator = Operator(tmp_path, kubeconfig, pods=pods).start()
    try:
        assert 'pod_labels = {"team" = "web"}' in operator.config.read_text()  # the file it reads
        kubectl.apply(alloc_manifest("configured", "configured"))
        wait_status(kubectl, "configured", "configured", "running")
        pod = kubectl.json("get", "pod", "configured", "-n", "configured")
        assert pod["metadata"]["labels"]["team"] == "web"
        assert pod["metadata"]["annotations"]["owner"] == "ops"
        assert pod["spec"]["nodeSelector"] == {"kubernetes.io/hostname": "node-1"}
        assert toleration in pod["spec"]["tolerations"]
        assert pod["spec"]["nodeName"] == "node-1"
    finally:
        operator.stop()
