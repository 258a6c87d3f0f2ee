"""The local cluster's real node itself: what it runs, what it serves, and what it leaves behind.

The node (localcluster/allocbridge_localcluster/realnode.py) runs kubelet, kube-proxy, containerd,
runc and the CNI bridge on this machine. These tests check it as a user of `make dev` sees it
(a containerd runtime, the stand-in images, a pod IP that serves HTTP, a ClusterIP through
kube-proxy) and that stopping it gives the machine back as it was: processes, mounts, cgroups,
network links, iptables rules, sysctls and the host paths a kubelet writes.
"""

from __future__ import annotations

import json
import os
import signal
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from running_operator import (
    REPO,
    Operator,
)

from allocbridge_localcluster import hoststate, realnode
from allocbridge_localcluster.kubectl import eventually

pytestmark = pytest.mark.cluster


def real_node(cluster: Any) -> realnode.RealNode:
    node = getattr(cluster, "real_node", None)
    if node is None:
        reason = getattr(cluster, "is_local", True) and "it did not start on this machine"
        pytest.skip(f"needs the local cluster's real node ({reason or 'an external cluster'})")
    assert isinstance(node, realnode.RealNode)
    return node


def test_the_node_runs_containerd_and_kubelet_of_the_control_planes_version(
    cluster: Any, kubectl: Any
) -> None:
    node = kubectl.json("get", "node", real_node(cluster).name)
    info = node["status"]["nodeInfo"]
    assert info["containerRuntimeVersion"].startswith("containerd://2.")
    assert info["kubeletVersion"] == kubectl.json("version")["serverVersion"]["gitVersion"]
    addresses = {a["type"]: a["address"] for a in node["status"]["addresses"]}
    assert addresses["InternalIP"] == realnode.NODE_IP


def web_pod(namespace: str) -> dict[str, Any]:
    """The web example's image, with a volume and a host port, so a pod uses the mounts, the
    CNI bridge and the portmap plugin that stopping the node must undo."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web", "namespace": namespace, "labels": {"app": "web"}},
        "spec": {
            "containers": [
                {
                    "name": "web",
                    "image": "nginxinc/nginx-unprivileged:1.27-alpine",
                    "ports": [{"containerPort": 8080, "hostPort": 18080}],
                    "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}],
                    "readinessProbe": {"httpGet": {"path": "/", "port": 8080}, "periodSeconds": 1},
                }
            ],
            "volumes": [{"name": "scratch", "emptyDir": {}}],
        },
    }


def fetch(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as response:
        return str(response.read().decode())


def test_a_pod_serves_http_on_its_pod_ip_and_through_its_cluster_ip(
    kubectl: Any, real_namespace: str
) -> None:
    ns = real_namespace
    kubectl.apply(web_pod(ns))
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "web", "namespace": ns},
        "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]},
    }
    kubectl.apply(service)
    kubectl("wait", "-n", ns, "--for=condition=Ready", "pod/web", "--timeout=60s")
    pod_ip = kubectl.json("get", "pod", "web", "-n", ns)["status"]["podIP"]
    assert pod_ip.startswith(realnode.NODE_IP.rsplit(".", 1)[0] + ".")
    assert "Welcome to nginx!" in fetch(f"http://{pod_ip}:8080/")
    cluster_ip = kubectl.json("get", "service", "web", "-n", ns)["spec"]["clusterIP"]
    page = eventually(lambda: fetch(f"http://{cluster_ip}/"), what="kube-proxy's rules")
    assert "Welcome to nginx!" in page


def host_view(node: realnode.RealNode) -> dict[str, Any]:
    """What a node may change on this machine, in a form two views can be compared in."""
    snapshot = hoststate.HostSnapshot.take()
    marker = str(node.folder)
    processes = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if marker in cmdline:
                processes.append(cmdline)
    kubepods = sorted(str(p) for p in Path("/sys/fs/cgroup").glob("*/kubepods"))
    return {
        "processes": sorted(processes),
        "mounts": sorted(hoststate.mounts()),
        "kubepods cgroups": kubepods,
        "links": sorted(snapshot.links),
        "iptables chains": {f"{k[0]} {k[1]}": sorted(v) for k, v in snapshot.chains.items()},
        "iptables rules": {f"{k[0]} {k[1]}": sorted(v) for k, v in snapshot.rules.items()},
        "sysctls": snapshot.sysctls,
        "host paths": sorted(snapshot.paths),
    }


def give_work(kubectl: Any, ns: str) -> None:
    """A namespace of the real node with the web pod and a Service: mounts, veths, portmap
    and kube-proxy rules on the host."""
    kubectl.apply(
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": ns, "annotations": realnode.NAMESPACE_ANNOTATIONS},
        }
    )
    eventually(
        lambda: kubectl("get", "sa", "default", "-n", ns, check=False).returncode == 0,
        what="the namespace's ServiceAccount",
    )
    kubectl.apply(web_pod(ns))
    kubectl("wait", "-n", ns, "--for=condition=Ready", "pod/web", "--timeout=60s")
    kubectl("expose", "pod", "web", "-n", ns, "--port=80", "--target-port=8080")


def test_stopping_the_node_leaves_nothing_behind(cluster: Any, kubectl: Any) -> None:
    """Stop the session's node, look at the machine, start a node and give it work (a pod with
    a volume, a host port and a Service), stop it, and look again: the two views are equal.
    The view in between must differ, or the comparison could not fail."""
    node = real_node(cluster)
    cluster.stop_real_node()
    try:
        before = host_view(node)
        cluster.start_real_node()
        node = real_node(cluster)
        ns = f"leftovers-{node.name}"
        give_work(kubectl, ns)
        during = host_view(node)
        changed = [key for key in before if before[key] != during[key]]
        for expected in ("processes", "mounts", "kubepods cgroups", "links", "iptables rules"):
            assert expected in changed, f"a running node should show in {expected}"
        cluster.stop_real_node()
        after = host_view(node)
        kubectl("delete", "namespace", ns, "--wait=false", check=False)
        left = {key: (before[key], after[key]) for key in before if before[key] != after[key]}
        assert not left, "left behind: " + json.dumps(left, indent=1, default=str)[:4000]
    finally:
        if getattr(cluster, "real_node", None) is None:
            cluster.start_real_node()


def test_a_killed_runs_node_is_undone_by_the_next_start_in_another_folder(
    cluster: Any, kubectl: Any, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Stop the session's node and look at the machine; start a node in a folder of its own,
    give it work, and kill it as a SIGKILL of its run would (its components die, the shims
    stay, `stop()` never runs, its lock is released); the machine now differs. Then the
    session's node starts in its own, other folder and stops: the machine is as before."""
    real_node(cluster)  # the session has one: this test needs a real node
    cluster.stop_real_node()
    killed = cluster.make_real_node(tmp_path_factory.mktemp("killed") / "node")
    ns = f"killed-{killed.name}"
    try:
        before = host_view(killed)
        assert not realnode.SNAPSHOT_FILE.exists(), "a stopped node removes its snapshot"
        killed.start(cluster.wait)
        give_work(kubectl, ns)
        for process in killed.processes:
            os.kill(process.pid, signal.SIGKILL)
            process.popen.wait(10)
        # What the dead run's exit would do: its lock goes; its `stop()` becomes a no-op.
        assert killed._lock_fd is not None
        os.close(killed._lock_fd)
        killed._lock_fd = None
        kubectl("delete", "pod", "web", "-n", ns, "--force", "--grace-period=0", check=False)
        kubectl("delete", "namespace", ns, "--wait=false", check=False)
        during = host_view(killed)
        changed = [key for key in before if before[key] != during[key]]
        for expected in ("processes", "mounts", "kubepods cgroups", "links", "iptables chains"):
            assert expected in changed, f"a killed node should leave {expected} behind"
        assert realnode.SNAPSHOT_FILE.exists()

        cluster.start_real_node()
        assert real_node(cluster).folder != killed.folder
        saved = hoststate.SavedSnapshot.load(realnode.SNAPSHOT_FILE)
        assert saved.state_dirs == [real_node(cluster).folder], "the new node's file, its own"
        cluster.stop_real_node()
        after = host_view(killed)
        left = {key: (before[key], after[key]) for key in before if before[key] != after[key]}
        assert not left, "left behind: " + json.dumps(left, indent=1, default=str)[:4000]
        assert not killed.folder.exists()
        assert not realnode.SNAPSHOT_FILE.exists()
    finally:
        killed.stop()  # when the test failed before the kill
        kubectl("delete", "namespace", ns, "--wait=false", check=False)
        if getattr(cluster, "real_node", None) is None:
            cluster.start_real_node()


def test_the_services_example_probes_really_probe_and_its_addresses_serve(
    operator: Operator, kubectl: Any, real_namespace: str
) -> None:
    """examples/services-checks.yaml unchanged: its HTTP and TCP checks are the kubelet's real
    readiness probes (the stand-in nginx serves, the sidecar's `nc` listens), so `/checks`
    reports them passing; `/services` gives the pod IP, where the page is served."""
    ns = real_namespace
    kubectl("apply", "-n", ns, "-f", str(REPO / "examples" / "services-checks.yaml"))
    uid = kubectl.json("get", "allocation", "frontend-0", "-n", ns)["metadata"]["uid"]

    def passing() -> dict[str, Any] | None:
        checks: dict[str, Any] = operator.get(f"/v1/allocation/{uid}/checks")
        statuses = {c["Check"]: c["Status"] for c in checks.values()}
        return checks if statuses == {"http-alive": "success", "admin-port": "success"} else None

    eventually(passing, timeout=90, what="both checks to pass")
    services = operator.get(f"/v1/allocation/{uid}/services?namespace={ns}")
    pod_ip = kubectl.json("get", "pod", "frontend-0", "-n", ns)["status"]["podIP"]
    frontend = [s for s in services if s["ServiceName"] == "frontend"]
    assert frontend and {s["Address"] for s in frontend} == {pod_ip}
    assert "Welcome to nginx!" in fetch(f"http://{pod_ip}:{frontend[0]['Port']}/")
