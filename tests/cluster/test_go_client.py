"""The official Nomad Go client (`github.com/hashicorp/nomad/api`) against the real operator.

The Go module in tests/goclient holds one Go test per step (see its doc.go); this module
prepares allocations with kubectl, runs each step with `go test -run '^Step$' ./...` and the
inputs in environment variables (NOMAD_ADDR, NOMAD_NAMESPACE and NOMAD_TOKEN, read by the
client's `api.DefaultConfig` as the nomad CLI reads them, plus GOCLIENT_*), and then checks
what the step did inside the pods (the signals the task's process trapped,
tests/cluster/scripted.py). On failure the assertion carries the Go output.

Two namespaces: READ holds three allocations that nothing changes (list, paging, filter,
info, services, checks), on kwok's node; ACT holds one allocation per action (signal, restart,
pause, exec, stop) and one for `alloc fs`, logs and stats, on the real node, where the actions
reach real processes. The ACL step has a third namespace, also on the real node, and an
operator of its own with ACLs enabled.

The first `go test` downloads the module's dependencies through the Go module proxy and
compiles them (GOFLAGS=-mod=readonly: go.sum is committed); the `go_tests` fixture does that
once, with a generous timeout, and prints how long it took.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from running_operator import (
    REPO,
    Operator,
    http,
    install,
    quick_allocation,
    real_node_annotations,
    service_account_kubeconfig,
)
from scripted import IMAGE, files_task, process_states, scripted_task, trapped_signals

from allocbridge_localcluster.kubectl import eventually

pytestmark = pytest.mark.cluster

GO_MODULE = REPO / "tests" / "goclient"
NODE_NAME = "node-1"  # tests/conftest.py's node
FIRST_BUILD_TIMEOUT = 1200.0  # download and compile on a fresh machine (docs/development.md)
STEP_TIMEOUT = 600.0


# -- running the Go steps -----------------------------------------------------------------------


def go_environment(variables: dict[str, str]) -> dict[str, str]:
    """This process's environment without NOMAD_* and GOCLIENT_* leftovers, plus `variables`.

    GOFLAGS keeps `-mod=readonly` (the committed go.sum is the truth), GOTOOLCHAIN=local keeps
    `go` from fetching another toolchain, and CGO_ENABLED=0 (the client needs no cgo) reuses
    the standard library the control-plane build (also CGO_ENABLED=0) left in the build cache.
    """
    base = {k: v for k, v in os.environ.items() if not k.startswith(("NOMAD_", "GOCLIENT_"))}
    base["GOFLAGS"] = f"{os.environ.get('GOFLAGS', '')} -mod=readonly".strip()
    base.setdefault("GOTOOLCHAIN", "local")
    base["CGO_ENABLED"] = "0"
    return {**base, **variables}


def go_test(pattern: str, variables: dict[str, str], timeout: float) -> str:
    """`go test -count=1 -v -run PATTERN ./...` in tests/goclient; fails with the Go output."""
    go = shutil.which("go")
    if go is None:
        pytest.fail("the Go client tests need Go 1.26 or newer on PATH (https://go.dev/dl/)", False)
    command = [go, "test", "-count=1", "-v", "-run", pattern, "./..."]
    try:
        done = subprocess.run(
            command,
            cwd=GO_MODULE,
            env=go_environment(variables),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        output = (exc.stdout or b"").decode() if isinstance(exc.stdout, bytes) else exc.stdout
        pytest.fail(f"{' '.join(command)} timed out after {timeout:.0f}s:\n{output}", False)
    output = done.stdout + done.stderr
    if done.returncode != 0:
        pytest.fail(f"{' '.join(command)} exited {done.returncode}:\n{output}", False)
    return output


@pytest.fixture(scope="module")
def go_tests() -> None:
    """Download and compile the Go module once (every step is skipped: no GOCLIENT_*)."""
    started = time.monotonic()
    go_test("^$", {}, FIRST_BUILD_TIMEOUT)
    print(f"go test compiled tests/goclient in {time.monotonic() - started:.1f}s")


def step(name: str, variables: dict[str, str]) -> str:
    """Run the Go test `name` and require that it ran and passed (not skipped)."""
    output = go_test(f"^{name}$", variables, STEP_TIMEOUT)
    assert f"--- PASS: {name} " in output, f"{name} did not run:\n{output}"
    print(output)
    return output


# -- the allocations ----------------------------------------------------------------------------


ADMIN_SERVICE = {
    "networks": [{"reservedPorts": [{"label": "admin", "value": 9000}]}],
    "services": [
        {
            "name": "admin",
            "portLabel": "admin",
            "tags": ["ops", "v1"],
            "checks": [{"name": "admin-port", "type": "tcp", "interval": "10s", "timeout": "2s"}],
        }
    ],
}
SETUP_AND_MAIN = [
    {
        "name": "setup",
        "driver": "docker",
        "config": {"image": IMAGE, "command": "true"},
        "lifecycle": {"hook": "prestart"},
    },
    scripted_task(),
]


def create_namespace(kubectl: Any, name: str, annotations: dict[str, str] | None = None) -> None:
    kubectl.apply(
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": name, "annotations": annotations or {}},
        }
    )
    eventually(
        lambda: (
            kubectl("get", "serviceaccount", "default", "-n", name, check=False).returncode == 0
        ),
        what=f"namespace {name} to get its default ServiceAccount",
    )


def wait_running(kubectl: Any, api: str, namespace: str, name: str, token: str = "") -> str:
    """Wait until the allocation runs and the API serves it so; return its ID."""

    def uid() -> str | None:
        found = kubectl.json("get", "allocation", name, "-n", namespace)
        running = (found.get("status") or {}).get("clientStatus") == "running"
        return str(found["metadata"]["uid"]) if running else None

    alloc_id: str = eventually(uid, timeout=120, what=f"{namespace}/{name} to run")

    def served_running() -> bool:
        code, body, _ = http(f"{api}/v1/allocation/{alloc_id}", token=token or None)
        return code == 200 and b'"ClientStatus":"running"' in body

    eventually(served_running, timeout=60, what=f"the API to serve {namespace}/{name} running")
    return alloc_id


@dataclass
class World:
    operator: Operator
    cluster: Any
    kubectl: Any
    read: str  # namespace of web-a, web-b, web-c
    act: str  # namespace of sig, rst, pz, ex, stopme
    ids: dict[str, str] = field(default_factory=dict)  # allocation name -> ID

    def env(self, namespace: str, **variables: str) -> dict[str, str]:
        return {"NOMAD_ADDR": self.operator.api, "NOMAD_NAMESPACE": namespace, **variables}

    def signals(self, name: str, task: str = "main") -> list[str]:
        """What the task's process in ACT has trapped so far."""
        return trapped_signals(self.kubectl, self.act, name, task)


READ_ALLOCS = {"web-a": {"group": ADMIN_SERVICE}, "web-b": {}, "web-c": {}}
ACT_ALLOCS: dict[str, dict[str, Any]] = {
    "sig": {"tasks": [scripted_task(traps=("USR1", "HUP"))]},
    "rst": {"tasks": SETUP_AND_MAIN},
    "pz": {"tasks": [scripted_task(traps=("CONT",))]},  # a resumed process gets SIGCONT
    "ex": {"tasks": [scripted_task()]},
    "stopme": {"group": {"shutdownDelay": "10s"}, "tasks": [scripted_task()]},
    "files": {"tasks": [files_task()]},
}


@pytest.fixture(scope="module")
def world(operator: Operator, cluster: Any, kubectl: Any, go_tests: None) -> Iterator[World]:
    suffix = uuid.uuid4().hex[:6]
    w = World(operator, cluster, kubectl, read=f"go-read-{suffix}", act=f"go-act-{suffix}")
    try:
        create_namespace(kubectl, w.read)
        create_namespace(kubectl, w.act, real_node_annotations(cluster))
        for namespace, allocs in ((w.read, READ_ALLOCS), (w.act, ACT_ALLOCS)):
            for name, shape in allocs.items():
                kubectl.apply(quick_allocation(name, namespace, **shape))
        for namespace, allocs in ((w.read, READ_ALLOCS), (w.act, ACT_ALLOCS)):
            for name in allocs:
                w.ids[name] = wait_running(kubectl, operator.api, namespace, name)
        yield w
    finally:
        for namespace in (w.read, w.act):
            kubectl("delete", "namespace", namespace, "--wait=false", check=False)


# -- the steps ----------------------------------------------------------------------------------


def test_list_prefix_filter_and_paging(world: World) -> None:
    ids = ",".join(world.ids[name] for name in READ_ALLOCS)
    step("TestList", world.env(world.read, GOCLIENT_ALLOCS=ids))


def test_info(world: World) -> None:
    step(
        "TestInfo",
        world.env(
            world.read,
            GOCLIENT_ALLOC=world.ids["web-b"],
            GOCLIENT_JOB="web-b",
            GOCLIENT_NODE=NODE_NAME,
        ),
    )


def test_services_and_checks(world: World) -> None:
    step("TestServicesAndChecks", world.env(world.read, GOCLIENT_ALLOC=world.ids["web-a"]))


def test_blocking_queries_return_after_a_change(world: World) -> None:
    before = world.signals("sig")
    step(
        "TestBlockingQueries",
        world.env(world.act, GOCLIENT_ALLOC=world.ids["sig"]),
    )
    eventually(  # the change that woke the queries
        lambda: world.signals("sig")[len(before) :] == ["HUP"], what="the task to trap SIGHUP"
    )


def test_signal(world: World) -> None:
    before = world.signals("sig")
    step("TestSignal", world.env(world.act, GOCLIENT_ALLOC=world.ids["sig"]))
    eventually(
        lambda: world.signals("sig")[len(before) :] == ["USR1", "HUP"],
        what="the task to trap SIGUSR1 and SIGHUP",
    )


def pod_uid(world: World, name: str) -> str:
    return str(world.kubectl.json("get", "pod", name, "-n", world.act)["metadata"]["uid"])


def test_restart(world: World) -> None:
    first_pod = pod_uid(world, "rst")
    step("TestRestart", world.env(world.act, GOCLIENT_ALLOC=world.ids["rst"]))
    # Restart(main) went to the running container (its events, checked by the step);
    # RestartAllTasks recreates the pod to run `setup` again.
    assert pod_uid(world, "rst") != first_pod


def test_pause(world: World) -> None:
    step("TestPause", world.env(world.act, GOCLIENT_ALLOC=world.ids["pz"]))
    # SIGSTOP cannot be trapped; the SIGCONT of the resume can, and a running shell is left.
    eventually(lambda: world.signals("pz") == ["CONT"], what="the task to be resumed")
    assert process_states(world.kubectl, world.act, "pz", "main")["sh"] != "T"


def test_exec(world: World) -> None:
    step("TestExec", world.env(world.act, GOCLIENT_ALLOC=world.ids["ex"]))
    # The SDK drops the connection once it has the exit code, which ends the server's wait for
    # a close frame at once: the session does not linger for that wait's 30 s.
    eventually(
        lambda: world.operator.open_exec_sessions() == 0, timeout=10, what="the session to end"
    )


def test_stop_without_shutdown_delay(world: World) -> None:
    step("TestStop", world.env(world.act, GOCLIENT_ALLOC=world.ids["stopme"]))
    kubectl, act = world.kubectl, world.act
    eventually(  # a real kubelet confirms the deletion once the container has ended
        lambda: kubectl("get", "pod", "stopme", "-n", act, check=False).returncode != 0,
        what="the stopped allocation's pod to be gone",
    )
    stopped = kubectl.json("get", "allocation", "stopme", "-n", act)["status"]
    replacements = [
        a
        for a in kubectl.json("get", "allocations", "-n", act)["items"]
        if a["metadata"]["uid"] == stopped["nextAllocation"]
    ]
    assert len(replacements) == 1, stopped


def test_unknown_allocation(world: World) -> None:
    step("TestUnknownAllocation", world.env(world.act))


def test_logs_jobs_and_stats(world: World, tmp_path: Path) -> None:
    """`alloc logs` (and its `-job` form) and `alloc status`'s stats call; kwok serves the
    log of web-c's `main` from a file in the CRI log format (its `Logs` object)."""
    lines = ["first line", "second line"]
    log = tmp_path / "main.log"
    log.write_text("".join(f"2026-11-25T12:00:00.000000000Z stdout F {line}\n" for line in lines))
    world.kubectl.apply(
        {
            "apiVersion": "kwok.x-k8s.io/v1alpha1",
            "kind": "Logs",
            "metadata": {"name": "web-c", "namespace": world.read},
            "spec": {"logs": [{"containers": ["main"], "logsFile": str(log)}]},
        }
    )
    want = "".join(f"{line}\n" for line in lines)
    alloc_id = world.ids["web-c"]
    url = f"{world.operator.api}/v1/client/fs/logs/{alloc_id}?task=main&type=stdout&plain=true"
    eventually(lambda: http(url)[1] == want.encode(), what="kwok to serve the log")
    step(
        "TestLogsJobsAndStats",
        world.env(
            world.read,
            GOCLIENT_ALLOC=alloc_id,
            GOCLIENT_JOB="web-c",
            GOCLIENT_LOG=want,
            GOCLIENT_STATS_ERROR="Unexpected response code: 501",
        ),
    )


def test_alloc_fs_logs_and_stats_on_the_real_node(world: World) -> None:
    """`alloc fs` (Stat, List, Cat, ReadAt, Stream), `alloc logs -f` on stdout and stderr from
    the start and from the end, `alloc status`'s usage and `-job`'s PrefixList, on a real
    container (scripted.files_task)."""
    step(
        "TestAllocFSRealNode",
        world.env(world.act, GOCLIENT_ALLOC=world.ids["files"], GOCLIENT_JOB="files"),
    )


# -- ACL: an operator of this module's own with ACLs enabled ------------------------------------


GUARDED_TRAPS = ("HUP", "TERM", "USR1")  # what a denied Signal or Restart would send


@dataclass
class Guarded:
    acl: Operator
    namespace: str
    alloc_id: str
    reader_token: str
    nobody_token: str


def can_i(kubectl: Any, subject: str, verb: str, namespace: str) -> bool:
    done = kubectl(
        "auth", "can-i", verb, "allocations.allocbridge.io", "-n", namespace, f"--as={subject}",
        check=False,
    )  # fmt: skip
    return bool(done.stdout.strip() == "yes")


@pytest.fixture(scope="module")
def guarded(
    cluster: Any, kubectl: Any, go_tests: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Guarded]:
    """A namespace with one allocation, served by an `acl { enabled = true }` operator that
    watches only it; a reader (the shipped allocbridge-reader role) and a user with nothing."""
    install(kubectl)
    kubectl("apply", "-f", str(REPO / "manifests" / "roles.yaml"))
    namespace = f"go-acl-{uuid.uuid4().hex[:6]}"
    folder: Path = tmp_path_factory.mktemp("go-acl")
    kubeconfig = service_account_kubeconfig(kubectl, cluster.kubeconfig, folder / "kubeconfig")
    acl = Operator(folder, kubeconfig, acl=True, namespaces=(namespace,))
    try:
        create_namespace(kubectl, namespace, real_node_annotations(cluster))
        tokens = {}
        for user in ("reader", "nobody"):
            kubectl("create", "serviceaccount", user, "-n", namespace)
            tokens[user] = kubectl(
                "create", "token", user, "-n", namespace, "--duration=2h"
            ).stdout.strip()
        kubectl(
            "create", "rolebinding", "reader", "--clusterrole=allocbridge-reader",
            f"--serviceaccount={namespace}:reader", "-n", namespace,
        )  # fmt: skip
        reader = f"system:serviceaccount:{namespace}:reader"
        eventually(lambda: can_i(kubectl, reader, "read-job", namespace), what="the RoleBinding")
        tasks = [scripted_task(traps=GUARDED_TRAPS)]
        kubectl.apply(quick_allocation("guarded", namespace, tasks=tasks))
        acl.start()
        alloc_id = wait_running(kubectl, acl.api, namespace, "guarded", token=tokens["reader"])
        yield Guarded(acl, namespace, alloc_id, tokens["reader"], tokens["nobody"])
    finally:
        acl.stop()
        kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def test_denied_tokens(guarded: Guarded, kubectl: Any) -> None:
    step(
        "TestDenied",
        {
            "NOMAD_ADDR": guarded.acl.api,
            "NOMAD_NAMESPACE": guarded.namespace,
            "NOMAD_TOKEN": guarded.nobody_token,
            "GOCLIENT_READER_TOKEN": guarded.reader_token,
            "GOCLIENT_ALLOC": guarded.alloc_id,
        },
    )
    # Nothing a denied token asked for reached the task, and it was not restarted.
    assert trapped_signals(kubectl, guarded.namespace, "guarded", "main") == []
    pod = kubectl.json("get", "pod", "guarded", "-n", guarded.namespace)
    assert pod["status"]["containerStatuses"][0]["restartCount"] == 0
