"""A real node for the local cluster: kubelet, kube-proxy, containerd, runc and CNI on this host.

Pods scheduled here run as real containers (their own PID, mount and network namespaces), so
exec, signals and PID 1, restarts and back-off, probes, pod IPs and logs are Kubernetes' own,
not a simulation. The kubelet and kube-proxy are built from the same Kubernetes module as the
control plane, containerd from its Go module; runc and the CNI plugins are Debian's
(docs/real-node.md: what this machine needs, and why each setting is there).

Networking stays on this machine: one bridge (`BRIDGE`) holds the node IP and is the CNI
bridge of the pods' /24; service ClusterIPs are routed to it. Only one real node runs on a
machine at a time (the kubelet hard-codes some host paths): `start()` takes a machine-wide lock.
`stop()` removes the pods' containers, stops every process (shims included), unmounts, and
undoes what `hoststate.HostSnapshot` recorded. The snapshot is also kept in `SNAPSHOT_FILE`
while the node runs: a killed run never reaches `stop()`, and the next `start()` undoes it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import yaml

from .hoststate import (
    HostSnapshot,
    SavedSnapshot,
    kill_cgroup_processes,
    kill_marked_processes,
    mounts,
    remove_kubepods_cgroups,
    summary,
    unmount_under,
)
from .images import LOCAL_IMAGES, PAUSE, build_image
from .pki import Pki
from .ports import free_ports
from .processes import ManagedProcess
from .restclient import ApiError, RestClient

log = logging.getLogger(__name__)

NODE_NAME = "real-1"
BRIDGE = "abnode0"
NODE_IP = "10.245.0.1"
POD_SUBNET = "10.245.0.0/24"
NODE_LABEL = "allocbridge.io/real-node"
# With `dedicated=True` the node carries this taint, so pods land on it only from namespaces
# annotated with NAMESPACE_ANNOTATIONS (the API server's PodNodeSelector and
# PodTolerationRestriction admission plugins add the selector and the toleration), while kwok
# nodes beside it take every other pod.
TAINT = {"key": NODE_LABEL, "value": "true", "effect": "NoSchedule"}
NAMESPACE_ANNOTATIONS = {
    "scheduler.alpha.kubernetes.io/node-selector": f"{NODE_LABEL}=true",
    "scheduler.alpha.kubernetes.io/defaultTolerations": json.dumps(
        [{"key": NODE_LABEL, "operator": "Equal", "value": "true", "effect": "NoSchedule"}]
    ),
}
NODE_BINARIES = ("kubelet", "kube-proxy", "containerd", "containerd-shim-runc-v2", "ctr")
RUNC = "/usr/sbin/runc"
CNI_BIN = "/usr/lib/cni"
_LOCK = Path("/run/allocbridge-real-node.lock")
# The running node's snapshot, machine-wide beside the lock: every run has a folder of its own,
# so only a file here tells the next start what a killed run changed.
SNAPSHOT_FILE = Path("/run/allocbridge-real-node.json")
_PREREQUISITES_HINT = "`make controlplane` builds the node's binaries and installs its packages"


class RealNodeUnavailableError(RuntimeError):
    """This machine cannot run a real node; the message says why in one line."""


def why_unavailable(bin_dir: Path) -> str | None:
    """Why a real node cannot run here, or None when it can."""
    if os.geteuid() != 0:
        return "a real node needs root (it runs containerd and a kubelet)"
    if (
        not Path("/sys/fs/cgroup/memory").is_dir()
        and not Path("/sys/fs/cgroup/cgroup.controllers").exists()
    ):
        return "a real node needs cgroups, and /sys/fs/cgroup has none"
    missing = [b for b in NODE_BINARIES if not (bin_dir / b).is_file()]
    if missing:
        return f"the real node's {', '.join(missing)} are not built ({_PREREQUISITES_HINT})"
    for path in (RUNC, f"{CNI_BIN}/bridge", f"{CNI_BIN}/host-local", f"{CNI_BIN}/loopback"):
        if not Path(path).exists():
            return f"{path} is missing ({_PREREQUISITES_HINT})"
    for tool in ("ip", "iptables", "apt-get", "dpkg-deb"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed ({_PREREQUISITES_HINT})"
    return None


class RealNode:
    """One kubelet node with its runtime; see the module docstring."""

    def __init__(
        self,
        folder: Path,
        *,
        bin_dir: Path,
        image_cache: Path,
        server: str,
        pki: Pki,
        admin_kubeconfig: Path,
        api: RestClient,
        service_cidr: str,
        dedicated: bool = False,
        name: str = NODE_NAME,
    ) -> None:
        self.folder = folder.absolute()  # as the saved snapshot and the processes name it
        self.name = name
        self._bin = bin_dir
        self._image_cache = image_cache
        self._server = server
        self._pki = pki
        self._admin_kubeconfig = admin_kubeconfig
        self._api = api
        self._service_cidr = service_cidr
        self._dedicated = dedicated
        self._procs: list[ManagedProcess] = []
        self._snapshot: HostSnapshot | None = None
        self._lock_fd: int | None = None
        self.containerd_socket = folder / "containerd" / "containerd.sock"

    # -- life -----------------------------------------------------------------------------

    def start(self, wait: Callable[[Callable[[], bool], str], None]) -> None:
        """Start containerd, import the images, start the kubelet and kube-proxy.

        `wait(check, what)` is the cluster's waiter (it fails fast when a component exits).
        """
        reason = why_unavailable(self._bin)
        if reason:
            raise RealNodeUnavailableError(reason)
        self._take_lock()
        undo_killed_run(SNAPSHOT_FILE)
        self._end_leftovers()
        self._snapshot = HostSnapshot.take()
        SavedSnapshot(self._snapshot, [self.folder], str(self.containerd_socket)).save(
            SNAPSHOT_FILE
        )
        self.folder.mkdir(parents=True)
        self._create_bridge()
        self._allow_node_role()
        self._start_containerd()
        wait(self._containerd_ready, "containerd")
        self._import_images()
        self._start_kubelet()
        self._start_kube_proxy()
        wait(self._node_ready, f"the real node {self.name} to be Ready")

    def stop(self) -> None:
        """Remove the pods' containers, stop everything, undo the host changes; idempotent."""
        if self._lock_fd is None:
            return
        by_name = {p.name: p for p in self._procs}
        self._remove_pods_containers(by_name.get("containerd"))
        for name in ("kube-proxy", "kubelet"):
            if name in by_name:
                by_name[name].stop()
        if "kube-proxy" in by_name:
            subprocess.run(
                [str(self._bin / "kube-proxy"), "--cleanup"],
                capture_output=True,
                check=False,
                timeout=60,
            )
        if "containerd" in by_name:
            by_name["containerd"].stop()
        self._procs = []
        if self._snapshot is not None:
            undone = self._snapshot.undo(
                state_dirs=[self.folder], marker=str(self.containerd_socket)
            )
            log.info("real node %s: undid %d host changes", self.name, len(undone))
            self._snapshot = None
            SNAPSHOT_FILE.unlink(missing_ok=True)
        _remove_unmounted(self.folder)
        with contextlib.suppress(ApiError, OSError):
            self._api.delete(f"/api/v1/nodes/{self.name}")
        os.close(self._lock_fd)
        self._lock_fd = None

    @property
    def processes(self) -> list[ManagedProcess]:
        return list(self._procs)

    # -- pieces ---------------------------------------------------------------------------

    def _take_lock(self) -> None:
        """One real node a machine: a second one waits for the first to stop (two test runs
        side by side), saying so."""
        fd = os.open(_LOCK, os.O_CREAT | os.O_RDWR, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.warning(
                "another local cluster's real node runs on this machine; waiting for it to stop"
            )
            fcntl.flock(fd, fcntl.LOCK_EX)
        self._lock_fd = fd

    def _spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        log_path = self.folder / "logs" / f"{name}.log"
        self._procs.append(ManagedProcess(name, argv, log_path, env))

    def _end_leftovers(self) -> None:
        """What a killed earlier run left in this folder: its shims and containers, mounts,
        and the bridge (its iptables rules are not known any more: `kube-proxy --cleanup`)."""
        marker = str(self.containerd_socket)
        if kill_marked_processes(marker) + kill_cgroup_processes():
            time.sleep(0.5)
        unmount_under([self.folder])
        remove_kubepods_cgroups()
        subprocess.run(["ip", "link", "delete", BRIDGE], capture_output=True, check=False)
        _remove_unmounted(self.folder)

    def _allow_node_role(self) -> None:
        """Bind `system:node` to the nodes' group: the kubelet's own TokenReviews and
        SubjectAccessReviews (webhook authentication of exec and logs) need it beside the
        Node authorizer."""
        binding = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "allocbridge:real-nodes"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "system:node",
            },
            "subjects": [
                {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:nodes"}
            ],
        }
        try:
            self._api.post("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", binding)
        except ApiError as err:
            if err.status != 409:
                raise

    def _create_bridge(self) -> None:
        """The node's bridge: node IP, CNI gateway of the pods, and the route to services."""
        subprocess.run(["ip", "link", "delete", BRIDGE], capture_output=True, check=False)
        prefix = POD_SUBNET.split("/")[1]
        for argv in (
            ["ip", "link", "add", BRIDGE, "type", "bridge"],
            ["ip", "addr", "add", f"{NODE_IP}/{prefix}", "dev", BRIDGE],
            ["ip", "link", "set", BRIDGE, "up"],
        ):
            subprocess.run(argv, check=True, capture_output=True)
        subprocess.run(
            ["ip", "route", "replace", self._service_cidr, "dev", BRIDGE, "src", NODE_IP],
            check=True,
            capture_output=True,
        )

    def _start_containerd(self) -> None:
        base = self.folder / "containerd"
        cni = self.folder / "cni"
        (cni / "net.d").mkdir(parents=True)
        (cni / "net.d" / "10-allocbridge.conflist").write_text(
            json.dumps(
                {
                    "cniVersion": "1.0.0",
                    "name": "allocbridge",
                    "plugins": [
                        {
                            "type": "bridge",
                            "bridge": BRIDGE,
                            "isGateway": True,
                            "hairpinMode": True,
                            "ipMasq": False,
                            "ipam": {
                                "type": "host-local",
                                "ranges": [[{"subnet": POD_SUBNET, "gateway": NODE_IP}]],
                                "routes": [{"dst": "0.0.0.0/0"}],
                                "dataDir": str(cni / "ipam"),
                            },
                        },
                        {"type": "portmap", "capabilities": {"portMappings": True}},
                    ],
                },
                indent=2,
            )
        )
        config = f"""version = 3
root = "{base}/root"
state = "{base}/state"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.blockfile",
  "io.containerd.snapshotter.v1.erofs", "io.containerd.nri.v1.nri",
  "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = "{self.containerd_socket}"

[ttrpc]
  address = "{self.containerd_socket}.ttrpc"

[plugins.'io.containerd.internal.v1.opt']
  path = "{base}/opt"

[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "{PAUSE.names[0]}"

[plugins.'io.containerd.cri.v1.runtime']
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  enable_cdi = false
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
      BinaryName = "{RUNC}"
      Root = "{base}/runc"
      SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["{CNI_BIN}"]
    conf_dir = "{cni}/net.d"

[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
"""
        base.mkdir(parents=True, exist_ok=True)
        (base / "config.toml").write_text(config)
        env = {
            "PATH": f"{self._bin}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "HOME": str(base),
        }
        self._spawn(
            "containerd",
            [str(self._bin / "containerd"), f"--config={base / 'config.toml'}"],
            env,
        )

    def _ctr(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self._bin / "ctr"), f"--address={self.containerd_socket}", "-n", "k8s.io", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def _containerd_ready(self) -> bool:
        return self.containerd_socket.exists() and self._ctr("version", timeout=5).returncode == 0

    def _import_images(self) -> None:
        for spec in LOCAL_IMAGES:
            tar = build_image(spec, self._image_cache)
            done = self._ctr("images", "import", "--local", str(tar))
            if done.returncode != 0:
                done = self._ctr("images", "import", str(tar))
            if done.returncode != 0:
                raise RuntimeError(f"ctr images import {tar} failed: {done.stderr.strip()}")

    def _start_kubelet(self) -> None:
        folder = self.folder / "kubelet"
        folder.mkdir()
        client_cert, client_key, serving_cert, serving_key = self._pki.issue_node(
            self.name, NODE_IP
        )
        kubeconfig = self._pki.write_node_kubeconfig(
            folder / "kubeconfig", self._server, client_cert, client_key
        )
        port, healthz = free_ports(2)
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "address": NODE_IP,
            "port": port,
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": healthz,
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": True},
                "x509": {"clientCAFile": str(self._pki.ca_cert)},
            },
            "authorization": {"mode": "Webhook"},
            "tlsCertFile": str(serving_cert),
            "tlsPrivateKeyFile": str(serving_key),
            "containerRuntimeEndpoint": f"unix://{self.containerd_socket}",
            "cgroupDriver": "cgroupfs",
            "failCgroupV1": False,  # this machine has cgroup v1; 1.35+ refuses it by default
            "failSwapOn": False,
            "clusterDomain": "cluster.local",
            # No DNS server runs here; naming the node IP keeps the kubelet from warning on
            # every pod (MissingClusterDNS), and a lookup fails at once on the local bridge.
            "clusterDNS": [NODE_IP],
            "resolvConf": "",
            "serializeImagePulls": False,
            "evictionHard": {
                "memory.available": "100Mi",
                "nodefs.available": "1%",
                "imagefs.available": "1%",
                "nodefs.inodesFree": "1%",
            },
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "nodeStatusReportFrequency": "10s",
            "shutdownGracePeriod": "0s",
            "protectKernelDefaults": False,
            "registerWithTaints": [TAINT] if self._dedicated else [],
            # The API server runs with it too (cluster.py): `nomad alloc logs -stderr` gets
            # stderr alone; without it here, the kubelet refuses a log request naming a stream.
            "featureGates": {"PodLogsQuerySplitStreams": True},
        }
        (folder / "config.yaml").write_text(yaml.safe_dump(config))
        self._spawn(
            "kubelet",
            [
                str(self._bin / "kubelet"),
                f"--config={folder / 'config.yaml'}",
                f"--kubeconfig={kubeconfig}",
                f"--root-dir={folder / 'root'}",
                f"--cert-dir={folder / 'pki'}",
                f"--hostname-override={self.name}",
                f"--node-ip={NODE_IP}",
                f"--node-labels={NODE_LABEL}=true",
                "--v=1",
            ],
        )

    def _start_kube_proxy(self) -> None:
        folder = self.folder / "kube-proxy"
        folder.mkdir()
        healthz, metrics = free_ports(2)
        config = {
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
            "kind": "KubeProxyConfiguration",
            "clientConnection": {"kubeconfig": str(self._admin_kubeconfig)},
            "hostnameOverride": self.name,
            "mode": "iptables",
            "clusterCIDR": POD_SUBNET,
            "healthzBindAddress": f"127.0.0.1:{healthz}",
            "metricsBindAddress": f"127.0.0.1:{metrics}",
            "nodePortAddresses": [f"{NODE_IP}/32"],
            "conntrack": {"maxPerCore": 0, "min": 0},
        }
        (folder / "config.yaml").write_text(yaml.safe_dump(config))
        self._spawn(
            "kube-proxy",
            [str(self._bin / "kube-proxy"), f"--config={folder / 'config.yaml'}", "--v=1"],
        )

    def _node_ready(self) -> bool:
        node = self._api.get(f"/api/v1/nodes/{self.name}")
        return any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in node.get("status", {}).get("conditions") or []
        )

    def _remove_pods_containers(self, containerd: ManagedProcess | None) -> None:
        """Stop the pods' tasks through containerd, so their shims exit on their own."""
        if containerd is None or not containerd.alive():
            return
        listed = self._ctr("tasks", "ls", "-q", timeout=10)
        for task in listed.stdout.split():
            self._ctr("tasks", "kill", "-s", "SIGKILL", task, timeout=10)
        deadline = time.monotonic() + 10
        for task in listed.stdout.split():
            while self._ctr("tasks", "delete", task, timeout=10).returncode != 0:
                if time.monotonic() > deadline:
                    break
                time.sleep(0.1)


def undo_killed_run(path: Path) -> list[str]:
    """Undo what the node that saved `path` changed, when it ended without `stop()`.

    Call it holding the lock: then no node runs, and a file left at `path` is a killed run's.
    Its processes go (those naming its containerd socket, as `stop()` ends shims, and those
    started with a `--config=` in its folder: a containerd, kubelet or kube-proxy that
    outlived the run, which no stranger's command line names), then everything
    added to the host since its snapshot, then its folder unless something is still mounted
    there. An unreadable file is reported and dropped: it must never stop a start.
    """
    if not path.exists():
        return []
    try:
        saved = SavedSnapshot.load(path)
    except (OSError, ValueError) as err:
        log.warning(
            "deleting %s, not a readable real node snapshot (%s); nothing undone", path, err
        )
        path.unlink(missing_ok=True)
        return []
    killed = [p for d in saved.state_dirs for p in kill_marked_processes(f"--config={d}/")]
    if killed:
        time.sleep(0.5)  # let the kernel release their mounts and links
    undone = killed + saved.undo()
    for folder in saved.state_dirs:
        _remove_unmounted(folder)
    log.warning(
        "a real node (%s) ended without stopping; undid the host changes it left: %s",
        ", ".join(str(d) for d in saved.state_dirs),
        summary(undone),
    )
    log.debug("every change undone:%s", "".join(f"\n  {change}" for change in undone))
    path.unlink(missing_ok=True)
    return undone


def _remove_unmounted(folder: Path) -> None:
    """Remove `folder` unless something is still mounted under it (a bind mount of a host
    folder in a pod's volume must never be deleted through)."""
    if not folder.exists():
        return
    prefix = str(folder.resolve()) + "/"
    left = [m for m in mounts() if m.startswith(prefix)]
    if left:
        log.warning("not removing %s: still mounted under it: %s", folder, left[:5])
        return
    shutil.rmtree(folder, ignore_errors=True)
