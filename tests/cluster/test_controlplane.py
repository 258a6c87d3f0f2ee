"""The local control plane is a real one: scheduling, exec, kubelet-like restarts, GC, RBAC.

These tests pin the behaviour the operator's Kubernetes-facing code relies on, against the
binaries built from Go modules (or an external cluster, where the kwok-only parts skip).
"""

from __future__ import annotations

import asyncio
import json
import re
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import aiohttp
import pytest
from kubernetes_asyncio import client as k8s_client
from kubernetes_asyncio import config as k8s_config
from kubernetes_asyncio.client.rest import ApiException

from allocbridge_localcluster import LocalCluster, write_token_kubeconfig
from allocbridge_localcluster.stages import SANDBOX_CONDITION

V5 = "v5.channel.k8s.io"
V4 = "v4.channel.k8s.io"
STDIN, STDOUT, STDERR, STATUS, CLOSE = 0, 1, 2, 3, 255


def pod_manifest(
    name: str,
    *,
    containers: tuple[str, ...] = ("main",),
    restart_policy: str = "Always",
    sidecars: tuple[str, ...] = (),
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": restart_policy,
            "initContainers": [
                {
                    "name": s,
                    "image": "busybox",
                    "command": ["sleep", "infinity"],
                    "restartPolicy": "Always",
                }
                for s in sidecars
            ],
            # kwok ignores the command; a real node (ALLOCBRIDGE_TEST_KUBECONFIG) runs it.
            "containers": [
                {"name": c, "image": "busybox", "command": ["sleep", "infinity"]}
                for c in containers
            ],
        },
    }


async def eventually(probe: Callable[[], Awaitable[Any]], what: str, within: float = 30.0) -> Any:
    """Poll `probe` until it returns something truthy."""
    deadline = time.monotonic() + within
    while True:
        result = await probe()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


async def running_pod(kube: Any, namespace: str, manifest: dict[str, Any]) -> Any:
    core: Any = k8s_client.CoreV1Api(kube)  # bodies are plain dicts, which the client accepts
    await core.create_namespaced_pod(namespace, manifest)
    name = manifest["metadata"]["name"]

    async def running() -> Any:
        pod = await core.read_namespaced_pod(name, namespace)
        return pod if pod.status.phase == "Running" else None

    return await eventually(running, f"pod {name} to run")


async def container_status(kube: Any, namespace: str, pod: str, container: str = "main") -> Any:
    got = await k8s_client.CoreV1Api(kube).read_namespaced_pod(pod, namespace)
    statuses = (got.status.container_statuses or []) + (got.status.init_container_statuses or [])
    return next(s for s in statuses if s.name == container)


@dataclass
class ExecResult:
    protocol: str | None
    stdout: bytes
    stderr: bytes
    status: dict[str, Any]

    @property
    def exit_code(self) -> int:
        """The exit code as a Kubernetes client reads it from the status channel.

        A real kubelet reports a non-zero exit as reason NonZeroExitCode with an ExitCode
        cause. kwok v0.8.0 wraps the process error before its streaming server sees it, so the
        code only survives at the end of an InternalError message ("... exit status 3");
        both shapes are accepted here, and the kwok shape is pinned by the tests below.
        """
        if self.status.get("status") == "Success":
            return 0
        for cause in (self.status.get("details") or {}).get("causes") or []:
            if cause.get("reason") == "ExitCode":
                return int(cause["message"])
        match = re.search(r"exit status (\d+)$", self.status.get("message", ""))
        if match is None:
            raise AssertionError(f"no exit code in status {self.status}")
        return int(match.group(1))


async def exec_in_pod(
    kube: Any,
    namespace: str,
    pod: str,
    command: list[str],
    *,
    container: str | None = None,
    protocol: str = V5,
    stdin: bytes | None = None,
) -> ExecResult:
    """`pods/exec` over a WebSocket through kube-apiserver, channels parsed by hand."""
    query = [("command", c) for c in command]
    query += [("stdout", "true"), ("stderr", "true"), ("tty", "false")]
    query.append(("stdin", "true" if stdin is not None else "false"))
    if container:
        query.append(("container", container))
    headers: dict[str, str] = {}
    await kube.update_params_for_auth(headers, [], ["BearerToken"])
    host = kube.configuration.host.replace("https://", "wss://", 1)
    url = f"{host}/api/v1/namespaces/{namespace}/pods/{pod}/exec?{urlencode(query)}"
    out, err, status = bytearray(), bytearray(), bytearray()
    session: aiohttp.ClientSession = kube.rest_client.pool_manager
    async with session.ws_connect(url, protocols=(protocol,), headers=headers) as ws:
        if stdin is not None:
            await ws.send_bytes(bytes([STDIN]) + stdin)
            await ws.send_bytes(bytes([CLOSE, STDIN]))
        async for msg in ws:
            if msg.type != aiohttp.WSMsgType.BINARY:
                break
            channel, payload = msg.data[0], msg.data[1:]
            {STDOUT: out, STDERR: err, STATUS: status}.get(channel, bytearray()).extend(payload)
        negotiated = ws.protocol
    return ExecResult(negotiated, bytes(out), bytes(err), json.loads(status) if status else {})


# -- scheduling ------------------------------------------------------------------------------


async def test_pod_is_scheduled_to_the_fake_node_and_runs(
    cluster: LocalCluster, kube: Any, namespace: str
) -> None:
    pod = await running_pod(kube, namespace, pod_manifest("web", sidecars=("proxy",)))
    if getattr(cluster, "is_local", True):
        assert pod.spec.node_name == "node-1"
        assert pod.status.host_ip == "127.0.0.1"
    assert pod.status.pod_ip
    ready = {c.type: c.status for c in pod.status.conditions}
    assert ready["Ready"] == "True"
    assert ready["PodScheduled"] == "True"
    [main] = pod.status.container_statuses
    assert main.ready and main.state.running and main.restart_count == 0
    [proxy] = pod.status.init_container_statuses
    assert proxy.state.running and proxy.started


# -- exec ------------------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", [V5, V4])
async def test_exec_returns_stdout_stderr_and_exit_codes(
    cluster: LocalCluster, kube: Any, namespace: str, protocol: str
) -> None:
    await running_pod(kube, namespace, pod_manifest("p"))

    ok = await exec_in_pod(kube, namespace, "p", ["echo", "hello"], protocol=protocol)
    assert ok.protocol == protocol
    assert ok.stdout == b"hello\n"
    assert ok.status["status"] == "Success"
    assert ok.exit_code == 0

    script = "echo out; echo err >&2; exit 3"
    failed = await exec_in_pod(kube, namespace, "p", ["sh", "-c", script], protocol=protocol)
    assert failed.protocol == protocol
    assert (failed.stdout, failed.stderr) == (b"out\n", b"err\n")
    assert failed.status["status"] == "Failure"
    assert failed.exit_code == 3


async def test_exec_status_shape_of_a_non_zero_exit_under_kwok(
    cluster: LocalCluster, kube: Any, namespace: str
) -> None:
    """Pins kwok v0.8.0's deviation from a kubelet (see ExecResult.exit_code)."""
    if not getattr(cluster, "is_local", True):
        pytest.skip("kwok-specific")
    await running_pod(kube, namespace, pod_manifest("p"))
    failed = await exec_in_pod(kube, namespace, "p", ["sh", "-c", "exit 7"])
    assert failed.status["reason"] == "InternalError"
    assert failed.status["message"].endswith("exit status 7")


async def test_exec_stdin_reaches_the_command(
    cluster: LocalCluster, kube: Any, namespace: str
) -> None:
    """Stdin arrives; `head -c` ends by itself because kwok v0.8.0 never passes the v5
    half-close (EOF) on to the process: `cat` would wait forever under kwok."""
    await running_pod(kube, namespace, pod_manifest("p"))
    got = await asyncio.wait_for(
        exec_in_pod(kube, namespace, "p", ["head", "-c", "9"], stdin=b"to stdin\n"), timeout=20
    )
    assert got.stdout == b"to stdin\n"
    assert got.exit_code == 0


async def test_exec_runs_in_the_container_sandbox_with_the_standins(
    cluster: LocalCluster, kube: Any, namespace: str
) -> None:
    await running_pod(kube, namespace, pod_manifest("p", containers=("main", "side")))
    script = (
        'pwd; which kill; echo "$ALLOCBRIDGE_SANDBOX $POD_NAMESPACE $POD_NAME $CONTAINER_NAME";'
        " id -u"
    )
    got = await exec_in_pod(kube, namespace, "p", ["sh", "-c", script], container="side")
    pwd, kill, env, uid = got.stdout.decode().splitlines()
    folder = cluster.sandbox_dir(namespace, "p", "side")
    assert Path(pwd) == folder
    assert Path(kill) == cluster.standins_dir / "kill"
    assert env == f"{folder} {namespace} p side"
    expected = cluster.sandbox_user[0] if cluster.sandbox_user else None
    if expected is not None:
        assert int(uid) == expected
    # argv[0] resolves through kwok's own PATH: a bare `kill` is the stand-in.
    version = await exec_in_pod(kube, namespace, "p", ["kill", "-V"], container="main")
    assert b"allocbridge sandbox stand-in" in version.stdout


async def test_an_exec_of_a_missing_standin_is_refused_not_run_on_the_machine(
    cluster: LocalCluster, kube: Any, namespace: str
) -> None:
    await running_pod(kube, namespace, pod_manifest("p"))
    standin = cluster.standins_dir / "kill"
    aside = standin.with_name(".kill.aside")
    standin.rename(aside)
    try:
        # `-0` only asks whether PID 1 exists: harmless even if the guard failed.
        got = await exec_in_pod(kube, namespace, "p", ["kill", "-0", "1"])
    finally:
        aside.rename(standin)
    assert got.exit_code == 126
    assert b"the stand-in kill is missing" in got.stderr
    assert cluster.signals(namespace, "p", "main") == []
    again = await exec_in_pod(kube, namespace, "p", ["kill", "-0", "1"])
    assert again.exit_code == 0
    [record] = cluster.signals(namespace, "p", "main")
    assert record.number == 0


# -- the kubelet simulation ------------------------------------------------------------------


async def test_kill_term_is_recorded_and_restarts_the_container(
    cluster: LocalCluster, kube: Any, namespace: str
) -> None:
    await running_pod(kube, namespace, pod_manifest("p"))
    got = await exec_in_pod(kube, namespace, "p", ["kill", "-TERM", "1"])
    assert got.exit_code == 0
    [record] = cluster.signals(namespace, "p", "main")
    assert (record.signal, record.number, record.pids) == ("TERM", 15, (1,))
    assert record.argv == ("kill", "-TERM", "1")

    async def restarted() -> Any:
        status = await container_status(kube, namespace, "p")
        return status if status.restart_count == 1 else None

    status = await eventually(restarted, "the container to restart")
    assert status.state.running is not None
    terminated = status.last_state.terminated
    assert (terminated.exit_code, terminated.signal, terminated.reason) == (143, 15, "Error")
    pod = await k8s_client.CoreV1Api(kube).read_namespaced_pod("p", namespace)
    assert pod.status.phase == "Running"


async def test_kill_of_another_pid_answers_no_such_process(
    cluster: LocalCluster, kube: Any, namespace: str
) -> None:
    await running_pod(kube, namespace, pod_manifest("p"))
    got = await exec_in_pod(kube, namespace, "p", ["kill", "-TERM", "4242"])
    assert got.exit_code == 1
    assert got.stderr == b"kill: (4242): No such process\n"


async def test_handled_signals_do_not_restart_but_kill_does(
    cluster: LocalCluster, kube: Any, namespace: str
) -> None:
    await running_pod(kube, namespace, pod_manifest("p"))
    cluster.set_handled_signals(namespace, "p", "main", ["TERM", "HUP"])
    stopped = cluster.sandbox_dir(namespace, "p", "main") / "stopped"
    # The kernel drops KILL and STOP sent to PID 1 (here a tini-like init) from inside.
    for argv in (["-TERM", "1"], ["-HUP", "1"], ["-STOP", "1"], ["-KILL", "1"]):
        assert (await exec_in_pod(kube, namespace, "p", ["kill", *argv])).exit_code == 0
    assert not stopped.exists()
    assert (await exec_in_pod(kube, namespace, "p", ["kill", "-STOP", "--", "-1"])).exit_code == 0
    assert stopped.exists()  # -1 reaches the main process below the init
    await asyncio.sleep(0.5)  # several polls of the simulation
    assert (await container_status(kube, namespace, "p")).restart_count == 0
    assert (await exec_in_pod(kube, namespace, "p", ["kill", "-CONT", "1"])).exit_code == 0
    assert not stopped.exists()

    await exec_in_pod(kube, namespace, "p", ["kill", "-KILL", "--", "-1"])  # cannot be trapped

    async def killed() -> Any:
        status = await container_status(kube, namespace, "p")
        return status if status.restart_count == 1 else None

    status = await eventually(killed, "SIGKILL to restart the container")
    assert status.last_state.terminated.exit_code == 137
    assert [r.signal for r in cluster.signals(namespace, "p", "main")] == [
        "TERM",
        "HUP",
        "STOP",
        "KILL",
        "STOP",
        "CONT",
        "KILL",
    ]


async def test_exits_without_restart_end_the_pod(
    cluster: LocalCluster, kube: Any, namespace: str
) -> None:
    manifest = pod_manifest("job", containers=("a", "b"), restart_policy="Never")
    await running_pod(kube, namespace, manifest)
    core = k8s_client.CoreV1Api(kube)
    cluster.container_exit(namespace, "job", "a", 0)

    async def a_done() -> Any:
        status = await container_status(kube, namespace, "job", "a")
        return status if status.state.terminated else None

    a = await eventually(a_done, "container a to terminate")
    assert (a.state.terminated.exit_code, a.state.terminated.reason) == (0, "Completed")
    pod = await core.read_namespaced_pod("job", namespace)
    assert pod.status.phase == "Running"
    assert {c.type: c.status for c in pod.status.conditions}["Ready"] == "False"

    cluster.container_exit(namespace, "job", "b", 2)

    async def failed() -> Any:
        got = await core.read_namespaced_pod("job", namespace)
        return got if got.status.phase == "Failed" else None

    pod = await eventually(failed, "the pod to fail")
    b = next(s for s in pod.status.container_statuses if s.name == "b")
    assert (b.state.terminated.exit_code, b.restart_count) == (2, 0)


async def test_on_failure_restarts_only_failures(
    cluster: LocalCluster, kube: Any, namespace: str
) -> None:
    await running_pod(kube, namespace, pod_manifest("p", restart_policy="OnFailure"))
    cluster.container_exit(namespace, "p", "main", 1)

    async def restarted() -> Any:
        status = await container_status(kube, namespace, "p")
        return status if status.restart_count == 1 else None

    await eventually(restarted, "a restart after exit 1")
    cluster.container_exit(namespace, "p", "main", 0)

    async def succeeded() -> Any:
        got = await k8s_client.CoreV1Api(kube).read_namespaced_pod("p", namespace)
        return got if got.status.phase == "Succeeded" else None

    await eventually(succeeded, "the pod to succeed")


async def test_deleting_a_pod_removes_its_sandbox(
    cluster: LocalCluster, kube: Any, namespace: str
) -> None:
    await running_pod(kube, namespace, pod_manifest("p"))
    folder = cluster.sandbox_dir(namespace, "p", "main")
    assert folder.is_dir()
    core = k8s_client.CoreV1Api(kube)
    await core.delete_namespaced_pod("p", namespace)

    async def gone() -> bool:
        try:
            await core.read_namespaced_pod("p", namespace)
        except ApiException as err:
            return err.status == 404
        return False

    await eventually(gone, "the pod to be deleted")
    await eventually(lambda: asyncio.sleep(0, not folder.exists()), "the sandbox to go")


async def test_a_pod_deleted_and_created_again_under_its_name_runs_every_time(
    cluster: LocalCluster, kube: Any, namespace: str
) -> None:
    """The operator replaces a pod under the same name at once (restart with AllTasks).

    Every new pod must run with a sandbox and an Exec of its own. Without the pod-delete stage's
    grace-period guard, kwok's second delete of the old pod (by name, no UID precondition)
    could remove the new one: this test failed in each of three runs without the guard.
    """
    if not getattr(cluster, "is_local", True):
        pytest.skip("kwok-specific (a real kubelet takes the grace period to delete a pod)")
    core: Any = k8s_client.CoreV1Api(kube)  # the typed API takes V1Pod, not the manifest
    custom = k8s_client.CustomObjectsApi(kube)
    manifest = pod_manifest("same")
    pod = await running_pod(kube, namespace, manifest)
    for round_ in range(12):
        old_uid = pod.metadata.uid
        await core.delete_namespaced_pod("same", namespace)
        deadline = time.monotonic() + 30
        while True:  # as soon as the name is free, as the operator does
            try:
                created = await core.create_namespaced_pod(namespace, manifest)
                break
            except ApiException as err:
                if err.status != 409 or time.monotonic() > deadline:
                    raise
            await asyncio.sleep(0.005)
        uid = created.metadata.uid
        assert uid != old_uid

        async def running(uid: str = uid, round_: int = round_) -> Any:
            try:
                got = await core.read_namespaced_pod("same", namespace)
            except ApiException as err:
                if err.status == 404:
                    raise AssertionError(f"the pod of round {round_} was deleted") from None
                raise
            assert got.metadata.uid == uid, f"the pod of round {round_} was replaced"
            return got if got.status.phase == "Running" else None

        pod = await eventually(running, f"the pod of round {round_} to run")
        conditions = {c.type: c.status for c in pod.status.conditions}
        assert conditions[SANDBOX_CONDITION] == "True"
        execs = await custom.get_namespaced_custom_object(
            "kwok.x-k8s.io", "v1alpha1", namespace, "execs", "same"
        )
        assert [o["uid"] for o in execs["metadata"]["ownerReferences"]] == [uid]
        script = 'echo "$POD_NAME"; pwd; ls -A; touch "round-$1"'
        got = await exec_in_pod(kube, namespace, "same", ["sh", "-c", script, "sh", str(round_)])
        assert got.exit_code == 0, got
        name, pwd, *files = got.stdout.decode().splitlines()
        assert (name, Path(pwd)) == ("same", cluster.sandbox_dir(namespace, "same", "main"))
        assert not [f for f in files if f.startswith("round-")], "the old pod's sandbox is left"


# -- controllers and authorization -----------------------------------------------------------


async def test_garbage_collector_deletes_dependents(kube: Any, namespace: str) -> None:
    core: Any = k8s_client.CoreV1Api(kube)
    owner = await core.create_namespaced_config_map(
        namespace, {"metadata": {"name": "owner"}, "data": {"k": "v"}}
    )
    reference = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": "owner",
        "uid": owner.metadata.uid,
    }
    child = {"metadata": {"name": "child", "ownerReferences": [reference]}}
    await core.create_namespaced_config_map(namespace, child)
    await core.delete_namespaced_config_map("owner", namespace)

    async def collected() -> bool:
        try:
            await core.read_namespaced_config_map("child", namespace)
        except ApiException as err:
            return err.status == 404
        return False

    await eventually(collected, "the garbage collector to delete the child")


async def _service_account_token(kube: Any, namespace: str, name: str) -> str:
    core: Any = k8s_client.CoreV1Api(kube)
    await core.create_namespaced_service_account(namespace, {"metadata": {"name": name}})
    request = {"spec": {"audiences": [], "expirationSeconds": 600}}
    answer = await core.create_namespaced_service_account_token(name, namespace, request)
    return str(answer.status.token)


async def test_rbac_denies_a_service_account_without_a_role(
    cluster: LocalCluster, kube: Any, namespace: str, tmp_path: Path
) -> None:
    token = await _service_account_token(kube, namespace, "nobody")
    configuration = kube.configuration
    ca_pem = await asyncio.to_thread(Path(configuration.ssl_ca_cert).read_bytes)
    kubeconfig = write_token_kubeconfig(tmp_path / "token", configuration.host, ca_pem, token)
    as_sa = k8s_client.Configuration()
    await k8s_config.load_kube_config(config_file=str(kubeconfig), client_configuration=as_sa)
    async with k8s_client.ApiClient(as_sa) as api:
        with pytest.raises(ApiException) as denied:
            await k8s_client.CoreV1Api(api).list_namespaced_pod(namespace)
        assert denied.value.status == 403
        assert f"system:serviceaccount:{namespace}:nobody" in str(denied.value.body)

        rbac: Any = k8s_client.RbacAuthorizationV1Api(kube)
        role = {
            "metadata": {"name": "pod-reader"},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}],
        }
        await rbac.create_namespaced_role(namespace, role)
        binding = {
            "metadata": {"name": "nobody-reads-pods"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "pod-reader",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "nobody", "namespace": namespace}],
        }
        await rbac.create_namespaced_role_binding(namespace, binding)

        async def allowed() -> bool:
            try:
                await k8s_client.CoreV1Api(api).list_namespaced_pod(namespace)
            except ApiException as err:
                assert err.status == 403
                return False
            return True

        await eventually(allowed, "the RoleBinding to take effect", within=10)


async def test_token_review_and_subject_access_review(kube: Any, namespace: str) -> None:
    token = await _service_account_token(kube, namespace, "reviewed")
    authn: Any = k8s_client.AuthenticationV1Api(kube)
    review = await authn.create_token_review({"spec": {"token": token}})
    assert review.status.authenticated is True
    user = review.status.user
    assert user.username == f"system:serviceaccount:{namespace}:reviewed"
    assert f"system:serviceaccounts:{namespace}" in user.groups

    authz: Any = k8s_client.AuthorizationV1Api(kube)

    async def may(groups: list[str]) -> bool:
        sar = {
            "spec": {
                "user": user.username,
                "groups": groups,
                "resourceAttributes": {
                    "namespace": namespace,
                    "verb": "get",
                    "resource": "pods",
                },
            }
        }
        answer = await authz.create_subject_access_review(sar)
        return bool(answer.status.allowed)

    assert await may(list(user.groups)) is False
    assert await may(["system:masters"]) is True
    bogus = await authn.create_token_review({"spec": {"token": "not-a-token"}})
    assert not bogus.status.authenticated


# -- isolation -------------------------------------------------------------------------------


def test_two_local_clusters_run_side_by_side(
    cluster: LocalCluster, tmp_path: Path, kubectl: Any
) -> None:
    if not getattr(cluster, "is_local", True):
        pytest.skip("starts a second local control plane")
    second = LocalCluster(state_dir=tmp_path / "second")
    try:
        second.start()
        assert second.server != cluster.server
        assert second.sandbox_root != cluster.sandbox_root
        name = f"other-{uuid.uuid4().hex[:6]}"
        second.create_node(name)
        first_nodes = {n["metadata"]["name"] for n in kubectl.json("get", "nodes")["items"]}
        second_nodes = {n["metadata"]["name"] for n in second.api.get("/api/v1/nodes")["items"]}
        assert name in second_nodes and name not in first_nodes
        assert "node-1" in first_nodes and "node-1" not in second_nodes
        pids = [p.pid for p in second._procs]
        assert len(pids) == 6
    finally:
        second.stop()
    for pid in pids:
        assert (
            not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text()
        )
    assert cluster.api.get("/readyz") == "ok"
