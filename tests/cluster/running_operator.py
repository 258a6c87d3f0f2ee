"""Running the operator under test: the real `allocbridge run` process on the local control plane.

It runs with the token of the ServiceAccount that `manifests/rbac.yaml` ships, never as admin,
so a permission missing from the manifests fails a test.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from allocbridge.config import (
    AclSettings,
    KubernetesSettings,
    LogSettings,
    local_settings,
    render,
)
from allocbridge.model.pods import PodSettings
from allocbridge_localcluster import LocalCluster, realnode
from allocbridge_localcluster.binaries import default_bin_dir
from allocbridge_localcluster.kubectl import Kubectl, eventually
from allocbridge_localcluster.pki import write_token_kubeconfig
from allocbridge_localcluster.ports import free_ports

REPO = Path(__file__).resolve().parents[2]


def real_node_annotations(cluster: Any) -> dict[str, str]:
    """The annotations that send a namespace's pods to the session cluster's real node; skips
    the test, saying why, where this machine cannot run one. An external cluster's nodes are
    all real: no annotations."""
    if not getattr(cluster, "is_local", True):
        return {}
    if getattr(cluster, "real_node", None) is None:
        reason = realnode.why_unavailable(default_bin_dir())
        pytest.skip(f"no real node in the session cluster: {reason or 'it did not start'}")
    return dict(realnode.NAMESPACE_ANNOTATIONS)


def make_namespace(kubectl: Any, name: str, annotations: dict[str, str]) -> Iterator[str]:
    """Create a namespace, wait for its default ServiceAccount (pods need it), yield its name,
    and delete it."""
    kubectl.apply(
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": name, "annotations": annotations},
        }
    )
    eventually(
        lambda: (
            kubectl("get", "serviceaccount", "default", "-n", name, check=False).returncode == 0
        ),
        what=f"namespace {name}'s default ServiceAccount",
    )
    yield name
    kubectl("delete", "namespace", name, "--wait=false", check=False)


def http(
    url: str,
    method: str = "GET",
    body: Any = None,
    token: str | None = None,
    raw: bytes | None = None,
) -> tuple[int, bytes, dict[str, str]]:
    """A request with a JSON `body` (or `raw` bytes); returns status, body and headers."""
    data = raw if raw is not None else None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, method=method, data=data)
    if token:
        request.add_header("X-Nomad-Token", token)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read(), dict(response.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(), dict(exc.headers)


class Operator:
    """One `allocbridge run` process; `restart()` kills it hard and starts it again."""

    def __init__(
        self,
        folder: Path,
        kubeconfig: Path,
        acl: bool = False,
        audiences: tuple[str, ...] = (),
        *,
        namespaces: tuple[str, ...] = (),
        peering: str | None = None,
        priority: int = 0,
        log: LogSettings | None = None,
        grace: float = 1.0,
        pods: PodSettings | None = None,
    ) -> None:
        """Standalone unless `peering` names a Kopf peering to join with `priority`; every
        namespace unless `namespaces` names some; `pods` goes into the configuration file."""
        self.folder = folder
        self.grace = grace
        self.api_port, self.ops_port = free_ports(2)
        self.api = f"http://127.0.0.1:{self.api_port}"
        self.ops = f"http://127.0.0.1:{self.ops_port}"
        self.config = folder / "allocbridge.hcl"
        kubernetes = KubernetesSettings(
            kubeconfig=str(kubeconfig),
            namespaces=namespaces,
            standalone=peering is None,
            peering=peering or KubernetesSettings.peering,
            priority=priority,
            pods=pods or PodSettings(),
        )
        settings = local_settings(
            "test",
            self.api_port,
            self.ops_port,
            kubernetes,
            acl=AclSettings(acl, audiences),
            log=log or LogSettings(),
            graceful_shutdown_wait=grace,
        )
        self.config.write_text(render(settings))
        self.log = folder / "operator.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> Operator:
        env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "allocbridge.cli", "run", "--config", str(self.config)],
            stdout=self.log.open("ab"),
            stderr=subprocess.STDOUT,
            env=env,
        )
        eventually(self.ready, timeout=60, what="the operator to be ready and connected")
        return self

    def ready(self) -> bool:
        """True once `/health` says the store synced and Kubernetes answers; fails at once,
        with the end of the operator's log, if the process has exited."""
        if self.process is not None and self.process.poll() is not None:
            tail = self.log.read_text(errors="replace").splitlines()[-20:]
            pytest.fail(
                f"the operator exited with {self.process.returncode} before it was ready; "
                "the end of its log:\n" + "\n".join(tail)
            )
        status, body, _ = http(self.ops + "/health?worker_info=1")
        info = json.loads(body)["worker_process_info"]
        return status == 200 and info["upstream_connection_state"] == "READY"

    def open_exec_sessions(self) -> int:
        """The exec sessions the replica counts as open."""
        _, body, _ = http(self.ops + "/health?worker_info=1")
        count: int = json.loads(body)["worker_process_info"]["active_session_count"]
        return count

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def restart(self) -> None:
        self.kill()
        self.start()

    def stop(self) -> int | None:
        if self.process is None or self.process.poll() is not None:
            return None if self.process is None else self.process.returncode
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()

    def get(self, path: str, token: str | None = None) -> Any:
        status, body, _ = http(self.api + path, token=token)
        assert status == 200, f"GET {path}: {status} {body[:300]!r}"
        return json.loads(body)


def install(kubectl: Any) -> None:
    """The CRDs and the operator's namespace, ServiceAccount and RBAC, as a user would."""
    kubectl.apply_crds(REPO / "crds")
    kubectl("apply", "-f", str(REPO / "manifests" / "namespace.yaml"))
    kubectl("apply", "-f", str(REPO / "manifests" / "rbac.yaml"))


def operator_kubeconfig(kubectl: Any, admin_kubeconfig: Path, folder: Path) -> Path:
    """Install allocbridge and return a kubeconfig of its ServiceAccount, as a replica uses."""
    install(kubectl)
    return service_account_kubeconfig(kubectl, admin_kubeconfig, folder)


def service_account_kubeconfig(kubectl: Any, kubeconfig: Path, path: Path) -> Path:
    token = kubectl(
        "create", "token", "allocbridge", "-n", "allocbridge-system", "--duration=6h"
    ).stdout.strip()
    admin = yaml.safe_load(kubeconfig.read_text())
    cluster = admin["clusters"][0]["cluster"]
    ca = base64.b64decode(cluster["certificate-authority-data"])
    return write_token_kubeconfig(path, cluster["server"], ca, token)


#: A restart policy that keeps tests quick: one attempt, one-second delay.
FAST_RESTARTS: dict[str, Any] = {"attempts": 1, "interval": "10m", "delay": "1s", "mode": "fail"}


def allocation_manifest(
    name: str,
    namespace: str,
    *,
    job_type: str = "service",
    restart: dict[str, Any] | None = None,
    group: dict[str, Any] | None = None,
    tasks: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """An Allocation with one docker task `main` unless `tasks` says otherwise."""
    task_group: dict[str, Any] = {"name": "g", **(group or {})}
    if restart:
        task_group["restartPolicy"] = restart
    return {
        "apiVersion": "allocbridge.io/v1",
        "kind": "Allocation",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "job": {"id": name, "type": job_type},
            "taskGroup": task_group,
            "tasks": tasks
            or [{"name": "main", "driver": "docker", "config": {"image": "busybox"}}],
        },
    }


def quick_allocation(
    name: str,
    namespace: str,
    *,
    tasks: list[dict[str, Any]] | None = None,
    group: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """An Allocation with the fast restart policy, as the action and client suites use."""
    return allocation_manifest(name, namespace, restart=FAST_RESTARTS, group=group, tasks=tasks)


def kubelet_warning(pod: dict[str, Any], reason: str, message: str) -> dict[str, Any]:
    """A Warning Event about container `main` of `pod`, as a kubelet reports a failed probe."""
    meta = pod["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{meta['name']}.{reason.lower()}", "namespace": meta["namespace"]},
        "involvedObject": {
            "kind": "Pod",
            "name": meta["name"],
            "namespace": meta["namespace"],
            "uid": meta["uid"],
            "fieldPath": "spec.containers{main}",
        },
        "reason": reason,
        "message": message,
        "type": "Warning",
        "source": {"component": "kubelet"},
    }


class ClusterKubectl(Kubectl):
    """The built kubectl on a LocalCluster of this test's own (the fixture's is session-wide)."""

    def __init__(self, cluster: LocalCluster) -> None:
        super().__init__(cluster.kubectl, cluster.kubeconfig)
