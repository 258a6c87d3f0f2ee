"""`LocalCluster`: a real Kubernetes control plane on loopback, built from Go modules.

It runs etcd, kube-apiserver (RBAC, client-certificate and ServiceAccount-token authentication),
kube-controller-manager (all default controllers: garbage collection, namespaces, ServiceAccounts
and their tokens, ...), kube-scheduler, kwok (which plays the kubelet of fake nodes and serves
`pods/exec`) and the kubelet simulation of `sandbox.py`, each on a free 127.0.0.1 port, so two
LocalClusters (each with its own state directory) can run side by side.

Typical use (start-up and stop are synchronous: a pytest session fixture, or the CLI before
`asyncio.run`):

    cluster = LocalCluster(state_dir=Path(".dev")).start()   # waits until ready
    cluster.create_node("node-1")       # a Ready kwok node without taints

    LocalCluster(state_dir=..., real_node=True)   # also a real kubelet node, `real-1` (realnode.py)
    ... use cluster.kubeconfig (admin, system:masters) ...
    cluster.stop()                      # also at interpreter exit, SIGTERM or SIGHUP

State directory layout: `kubeconfig`, `pki/`, `etcd/` (kept across starts of the same directory),
`logs/<component>.log` (and the API server's `logs/audit.log` of lists and watches with
`audit=True`), `kwok/`, `processes.json`, and `sandbox` (a link to this run's sandbox folder
under /tmp, which is removed on stop). Without a state directory a temporary one is used and
removed on stop.

Exec safety: kwok runs exec commands on this machine. kwok starts with
`PATH=<stand-ins>:<stand-ins>/guard:/usr/local/bin:/usr/bin:/bin`, so a bare `kill` (and pkill,
killall, reboot, shutdown, halt, poweroff) resolves to a recording stand-in (`standins.py`), or to
its guard, which refuses, should the stand-in be missing; every command runs in
its container's sandbox folder and, when the harness is root, as uid/gid 65534 (`sandbox.py`).
If that user cannot be used, commands run as the harness's own user and a warning is logged.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import grp
import logging
import os
import pwd
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

import yaml

from .audit import AuditedRequest, read_audit_log, write_audit_policy
from .binaries import KWOK_CRDS, Binaries, default_bin_dir, kwok_crd_file
from .kubelet import (
    SignalRecord,
    container_folder,
    read_signals,
    request_exit,
)
from .pki import Pki
from .ports import free_ports
from .processes import ManagedProcess, ProcessRegistry
from .realnode import NODE_IP, RealNode
from .restclient import ApiError, RestClient
from .sandbox import exec_path
from .stages import (
    KUBELET_VERSION_ANNOTATION,
    NODE_LABEL_KEY,
    NODE_LABEL_VALUE,
    NODE_SELECTOR,
    write_kwok_config,
)
from .standins import HANDLES_FILE, NO_INIT_FILE, write_atomic, write_standins

log = logging.getLogger(__name__)

SANDBOX_UID = 65534
SANDBOX_GID = 65534
SERVICE_CIDR = "10.96.0.0/16"
POD_CIDR = "10.244.0.0/16"
_PACKAGE_ROOT = Path(__file__).resolve().parents[1]  # what the sandbox process imports


class ClusterStartError(RuntimeError):
    """A component did not come up; the message names it and ends with its log."""


class LocalCluster:
    """One local control plane; see the module docstring."""

    def __init__(
        self,
        state_dir: Path | None = None,
        *,
        bin_dir: Path | None = None,
        start_timeout: float = 120.0,
        audit: bool = False,
        real_node: bool = False,
        dedicated_real_node: bool = False,
    ) -> None:
        self._temporary = state_dir is None
        if state_dir is None:  # created by start(), removed by stop()
            state_dir = Path(tempfile.gettempdir()) / f"allocbridge-cluster-{uuid.uuid4().hex[:12]}"
        self.state_dir: Path = state_dir.expanduser().resolve()
        self.kubeconfig: Path = self.state_dir / "kubeconfig"
        self.server: str = ""
        self.sandbox_root: Path = Path()
        self.standins_dir: Path = Path()
        self.sandbox_user: tuple[int, int] | None = None
        self.startup_seconds: float = 0.0
        self._bin_dir = bin_dir
        self._binaries: Binaries | None = None
        self._timeout = start_timeout
        self._audit = audit
        self._want_real_node = real_node
        self._dedicated_real_node = dedicated_real_node
        self.real_node: RealNode | None = None
        self._procs: list[ManagedProcess] = []
        self._envs: dict[str, dict[str, str] | None] = {}  # for start_component
        self._ports: dict[str, int] = {}
        self._api: RestClient | None = None
        self._sandbox_tmp: Path | None = None
        self._lock_fd: int | None = None
        self._registry = ProcessRegistry(self.state_dir / "processes.json", str(self.state_dir))
        self._running = False

    # -- public API ----------------------------------------------------------------------

    @property
    def binaries(self) -> Binaries:
        """The built executables (raises BinariesMissingError with the fix if absent)."""
        if self._binaries is None:
            self._binaries = Binaries.locate(self._bin_dir)
        return self._binaries

    @property
    def kubectl(self) -> Path:
        return self.binaries.kubectl

    @property
    def api(self) -> RestClient:
        """A synchronous admin JSON client (for harness code; tests use kubernetes_asyncio)."""
        if self._api is None:
            raise RuntimeError("the cluster is not started")
        return self._api

    def start(self) -> LocalCluster:
        """Start every component and wait until the API, controllers and kwok are ready."""
        if self._running:
            return self
        began = time.monotonic()
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self._take_lock()
        try:
            ended = self._registry.end_leftovers()
            if ended:
                log.warning("ended leftovers of an earlier run in %s: %s", self.state_dir, ended)
            binaries = self.binaries
            crds = [kwok_crd_file(plural, self._bin_dir) for plural in KWOK_CRDS.values()]
            pki = Pki(self.state_dir / "pki").ensure()
            names = (
                "etcd",
                "etcd-peer",
                "kube-apiserver",
                "controller-manager",
                "scheduler",
                "kwok",
            )
            self._ports = dict(zip(names, free_ports(len(names)), strict=True))
            self.server = f"https://127.0.0.1:{self._ports['kube-apiserver']}"
            pki.write_admin_kubeconfig(self.kubeconfig, self.server)
            self._api = RestClient(self.server, pki.ca_cert, pki.admin_cert, pki.admin_key)
            self._prepare_sandbox()
            self._running = True
            _RUNNING.add(self)
            _install_signal_handlers()
            self._start_control_plane(binaries, pki)
            self._wait(self._api_ready, "kube-apiserver /readyz")
            # Only now: the controller manager exits (status 1) when the API server refuses
            # its first connection, which happens on a loaded machine.
            self._start_controllers(binaries, pki)
            for crd in crds:
                self._apply_crd(crd)
            self._reset_nodes()
            self._start_kwok_and_simulation(binaries)
            self._wait(self._components_ready, "controller-manager, scheduler, kwok, sandbox")
            self._wait(self._default_service_account, "the default ServiceAccount")
            if self._want_real_node:
                self._start_real_node(pki)
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - began
        log.info("local cluster ready at %s in %.1fs", self.server, self.startup_seconds)
        return self

    def stop(self) -> None:
        """Stop every process (SIGTERM, then SIGKILL), remove the sandbox; idempotent."""
        _RUNNING.discard(self)
        if self._lock_fd is None:
            return  # never started here: the state directory (if any) is not ours to tidy
        self._running = False
        try:
            self.stop_real_node()
        except Exception:
            log.exception("stopping the real node failed")
            self.real_node = None
        procs, self._procs = self._procs, []
        by_name = {p.name: p for p in procs}
        for phase in (
            ("sandbox", "kwok", "scheduler", "controller-manager"),
            ("kube-apiserver",),
            ("etcd",),
        ):
            group = [by_name.pop(n) for n in phase if n in by_name]
            for p in group:
                p.terminate()
            for p in group:
                p.stop()
        for p in by_name.values():
            p.stop()
        self._registry.clear()
        link = self.state_dir / "sandbox"
        if link.is_symlink():
            link.unlink()
        if self._sandbox_tmp is not None:
            shutil.rmtree(self._sandbox_tmp, ignore_errors=True)
            self._sandbox_tmp = None
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None
        if self._temporary:
            shutil.rmtree(self.state_dir, ignore_errors=True)

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def create_node(
        self, name: str, *, kubelet_version: str | None = None, timeout: float = 60.0
    ) -> dict[str, Any]:
        """Create (or adopt) a kwok-managed Node without taints; return it once schedulable.

        `kubelet_version` (`v1.34.3`) makes it report, and the kubelet simulation play, an
        older kubelet, as in a cluster whose control plane was upgraded before its nodes.
        """
        labels = {
            NODE_LABEL_KEY: NODE_LABEL_VALUE,
            "kubernetes.io/hostname": name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "type": "kwok",
        }
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "labels": labels,
                "annotations": {
                    "node.alpha.kubernetes.io/ttl": "0",
                    **({KUBELET_VERSION_ANNOTATION: kubelet_version} if kubelet_version else {}),
                },
            },
            "spec": {},
        }
        try:
            self.api.post("/api/v1/nodes", body)
        except ApiError as err:
            if err.status != 409:
                raise
            self.api.patch(f"/api/v1/nodes/{name}", {"metadata": {"labels": labels}})
        node: dict[str, Any] = {}

        def schedulable() -> bool:
            nonlocal node
            node = self.api.get(f"/api/v1/nodes/{name}")
            ready = any(
                c.get("type") == "Ready" and c.get("status") == "True"
                for c in node.get("status", {}).get("conditions") or []
            )
            taints = [
                t
                for t in node.get("spec", {}).get("taints") or []
                if t.get("effect") in ("NoSchedule", "NoExecute")
            ]
            return ready and not taints

        self._wait(schedulable, f"node {name} to be Ready without taints", timeout)
        return node

    def sandbox_dir(self, namespace: str, pod: str, container: str) -> Path:
        """The container's sandbox folder (its exec cwd and `$ALLOCBRIDGE_SANDBOX`)."""
        return container_folder(self.sandbox_root, namespace, pod, container)

    def container_exit(self, namespace: str, pod: str, container: str, exit_code: int) -> None:
        """End the container's main process with `exit_code`, as if it had exited by itself."""
        request_exit(self.sandbox_dir(namespace, pod, container), exit_code)

    def signals(self, namespace: str, pod: str, container: str) -> list[SignalRecord]:
        """What the stand-ins recorded for this container, oldest first."""
        return read_signals(self.sandbox_dir(namespace, pod, container))

    def set_handled_signals(
        self, namespace: str, pod: str, container: str, signals: Iterable[str]
    ) -> None:
        """Declare the signals the container's main process traps (they do not end it)."""
        folder = self.sandbox_dir(namespace, pod, container)
        write_atomic(folder / HANDLES_FILE, " ".join(signals) + "\n")

    def run_without_init(self, namespace: str, pod: str, container: str) -> None:
        """Make the container's main process its PID 1, with no init or wrapper above it.

        May be called before the pod exists: the sandbox keeps a folder it finds.
        """
        folder = self.sandbox_dir(namespace, pod, container)
        folder.mkdir(parents=True, exist_ok=True)
        write_atomic(folder / NO_INIT_FILE, "\n")

    def process_rss(self) -> dict[str, int]:
        """Resident memory in bytes of each running component (from /proc)."""
        sizes: dict[str, int] = {}
        for p in self._procs:
            with contextlib.suppress(OSError):
                for line in Path(f"/proc/{p.pid}/status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        sizes[p.name] = int(line.split()[1]) * 1024
        return sizes

    def log_path(self, component: str) -> Path:
        return self.state_dir / "logs" / f"{component}.log"

    def audited_requests(self) -> list[AuditedRequest]:
        """The list and watch requests the API server has served so far (`audit=True` only)."""
        if not self._audit:
            raise RuntimeError("this cluster was started without audit=True")
        return read_audit_log(self.log_path("audit"))

    def stop_component(self, name: str) -> None:
        """Stop one component (e.g. "kube-apiserver") to test an outage; see start_component."""
        self._component(name).stop()

    def start_component(self, name: str) -> None:
        """Start a stopped component again as it was; for the API server, wait until ready."""
        old = self._component(name)
        if old.alive():
            return
        new = ManagedProcess(name, old.argv, old.log_path, self._envs.get(name))
        self._procs[self._procs.index(old)] = new
        self._registry.write(self._procs)
        if name == "kube-apiserver":
            self._wait(self._api_ready, "kube-apiserver /readyz")

    def restart_apiserver(self) -> None:
        """Stop kube-apiserver and start it again in place (same port, flags and etcd), as a
        control-plane restart does; returns once it is ready."""
        self.stop_component("kube-apiserver")
        self.start_component("kube-apiserver")

    def restart_etcd(self) -> None:
        """Stop etcd and start it again on its data directory and ports; returns once the API
        server, which keeps running and reconnects, is ready (its /readyz checks etcd)."""
        self.stop_component("etcd")
        self.start_component("etcd")
        self._wait(self._api_ready, "kube-apiserver /readyz after etcd's restart")

    def _component(self, name: str) -> ManagedProcess:
        found = next((p for p in self._procs if p.name == name), None)
        if found is None:
            raise KeyError(f"no component named {name!r} in this cluster")
        return found

    # -- start-up steps ------------------------------------------------------------------

    def _take_lock(self) -> None:
        fd = os.open(self.state_dir / ".lock", os.O_CREAT | os.O_RDWR, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise ClusterStartError(
                f"{self.state_dir} is in use by another running LocalCluster"
            ) from None
        self._lock_fd = fd

    def _spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        self._envs[name] = env
        self._procs.append(ManagedProcess(name, argv, self.log_path(name), env))
        self._registry.write(self._procs)

    def _start_control_plane(self, b: Binaries, pki: Pki) -> None:
        s, p = self.state_dir, self._ports
        etcd_url = f"http://127.0.0.1:{p['etcd']}"
        peer_url = f"http://127.0.0.1:{p['etcd-peer']}"
        self._spawn(
            "etcd",
            [
                str(b.etcd),
                "--name=default",
                f"--data-dir={s / 'etcd'}",
                f"--listen-client-urls={etcd_url}",
                f"--advertise-client-urls={etcd_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=default={peer_url}",
                "--unsafe-no-fsync=true",
                "--log-level=warn",
            ],
        )
        self._spawn(
            "kube-apiserver",
            [
                str(b.kube_apiserver),
                f"--etcd-servers={etcd_url}",
                *self._api_server_addresses(),
                f"--secure-port={p['kube-apiserver']}",
                f"--cert-dir={s / 'pki'}",
                f"--tls-cert-file={pki.serving_cert}",
                f"--tls-private-key-file={pki.serving_key}",
                f"--client-ca-file={pki.ca_cert}",
                "--authorization-mode=Node,RBAC",
                # logs, exec and the stats proxy of a real node's kubelet (realnode.py)
                f"--kubelet-client-certificate={pki.admin_cert}",
                f"--kubelet-client-key={pki.admin_key}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={pki.sa_pub}",
                f"--service-account-signing-key-file={pki.sa_key}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--kubelet-preferred-address-types=InternalIP",
                "--allow-privileged=true",
                "--feature-gates=PodLogsQuerySplitStreams=true",
                "--profiling=false",
                # namespaces whose pods go to a dedicated real node (realnode.py)
                "--enable-admission-plugins=PodNodeSelector,PodTolerationRestriction",
                *self._audit_flags(),
            ],
        )

    def _api_server_addresses(self) -> list[str]:
        """Where the API server listens and what the `kubernetes` Service points at.

        Without a real node: loopback only, and no endpoints (nothing runs in a pod). With
        one, pods reach it as in-cluster clients do, through kube-proxy: 10.96.0.1:443 ->
        the node IP (advertised, published by the endpoint reconciler) -> this listener,
        bound on every address because the node's bridge is created after the API server
        starts. Harness clients still use 127.0.0.1; the serving certificate has 10.96.0.1.
        """
        if not self._want_real_node:
            return [
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                "--endpoint-reconciler-type=none",
            ]
        return [
            "--bind-address=0.0.0.0",
            f"--advertise-address={NODE_IP}",
            "--endpoint-reconciler-type=lease",
        ]

    def stop_real_node(self) -> None:
        """Stop the real node and undo its host changes (its pods' containers go with it)."""
        if self.real_node is not None:
            self.real_node.stop()
            self.real_node = None

    def start_real_node(self) -> None:
        """Start a real node again after `stop_real_node` (or add one to a started cluster)."""
        if self.real_node is None:
            self._start_real_node(Pki(self.state_dir / "pki"))

    def _start_real_node(self, pki: Pki) -> None:
        """The kubelet node of `realnode.py`, its files under `<state>/node`."""
        node = self.make_real_node(self.state_dir / "node", pki)
        self.real_node = node
        node.start(self._wait)

    def make_real_node(self, folder: Path, pki: Pki | None = None) -> RealNode:
        """A real node of this cluster with its files in `folder`, not started (`start` it
        with `wait`) and not this cluster's `real_node`."""
        return RealNode(
            folder,
            bin_dir=self.binaries.kubectl.parent,
            image_cache=default_bin_dir().parent.parent / "images",
            server=self.server,
            pki=pki or Pki(self.state_dir / "pki"),
            admin_kubeconfig=self.kubeconfig,
            api=self.api,
            service_cidr=SERVICE_CIDR,
            dedicated=self._dedicated_real_node,
        )

    def wait(self, check: Callable[[], bool], what: str) -> None:
        """Wait until `check()` is true, failing fast when a component exits (API errors
        and the like are a "not yet"): what a real node's `start` waits with."""
        self._wait(check, what)

    def _audit_flags(self) -> list[str]:
        if not self._audit:
            return []
        self.log_path("audit").unlink(missing_ok=True)
        policy = write_audit_policy(self.state_dir / "audit-policy.yaml")
        return [f"--audit-policy-file={policy}", f"--audit-log-path={self.log_path('audit')}"]

    def _start_controllers(self, b: Binaries, pki: Pki) -> None:
        p = self._ports
        common = [
            f"--kubeconfig={self.kubeconfig}",
            f"--authentication-kubeconfig={self.kubeconfig}",
            f"--authorization-kubeconfig={self.kubeconfig}",
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
        ]
        self._spawn(
            "controller-manager",
            [
                str(b.kube_controller_manager),
                *common,
                f"--secure-port={p['controller-manager']}",
                f"--service-account-private-key-file={pki.sa_key}",
                f"--root-ca-file={pki.ca_cert}",
                f"--cluster-signing-cert-file={pki.ca_cert}",
                f"--cluster-signing-key-file={pki.ca_key}",
                "--use-service-account-credentials=false",
                "--kube-api-qps=200",
                "--kube-api-burst=400",
                "--profiling=false",
            ],
        )
        self._spawn(
            "scheduler",
            [
                str(b.kube_scheduler),
                *common,
                f"--secure-port={p['scheduler']}",
                "--profiling=false",
            ],
        )

    def _apply_crd(self, path: Path) -> None:
        crd = yaml.safe_load(path.read_text())
        name = crd["metadata"]["name"]
        try:
            self.api.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
        except ApiError as err:
            if err.status != 409:
                raise

        def established() -> bool:
            got = self.api.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
            return any(
                c.get("type") == "Established" and c.get("status") == "True"
                for c in got.get("status", {}).get("conditions") or []
            )

        self._wait(established, f"CRD {name}")

    def _reset_nodes(self) -> None:
        """Let this run's kwok take over nodes kept in etcd from an earlier run.

        kwok only plays the kubelet of nodes whose Lease it holds, and writes its own port
        into a node only while initialising it; so old Leases go and the nodes are marked
        not Ready, which makes kwok initialise them again.
        """
        nodes = self.api.get(f"/api/v1/nodes?labelSelector={NODE_SELECTOR}")
        for node in nodes.get("items") or []:
            name = node["metadata"]["name"]
            with contextlib.suppress(ApiError):
                self.api.delete(
                    f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{name}"
                )
            condition = {
                "type": "Ready",
                "status": "Unknown",
                "reason": "KwokRestarted",
                "message": "waiting for this run's kwok",
            }
            self.api.patch(
                f"/api/v1/nodes/{name}/status",
                {"status": {"conditions": [condition]}},
                merge=False,
            )

    def _start_kwok_and_simulation(self, b: Binaries) -> None:
        s, port = self.state_dir, self._ports["kwok"]
        config = write_kwok_config(s / "kwok" / "stages.yaml")
        self._spawn(
            "kwok",
            [
                str(b.kwok),
                f"--kubeconfig={self.kubeconfig}",
                f"--config={config}",
                f"--enable-crds={','.join(KWOK_CRDS)}",
                f"--manage-nodes-with-label-selector={NODE_SELECTOR}",
                "--node-ip=127.0.0.1",
                f"--node-port={port}",
                f"--server-address=127.0.0.1:{port}",
                "--node-lease-duration-seconds=40",
                f"--cidr={POD_CIDR}",
            ],
            # kwok resolves an exec's argv[0] through its own PATH; HOME keeps it away from
            # ~/.kwok/kwok.yaml.
            env={"PATH": exec_path(self.standins_dir), "HOME": str(s / "kwok")},
        )
        ready_file = s / "sandbox.ready"
        ready_file.unlink(missing_ok=True)
        argv = [
            sys.executable,
            "-m",
            "allocbridge_localcluster.sandbox",
            "--kubeconfig",
            str(self.kubeconfig),
            "--root",
            str(self.sandbox_root),
            "--standins",
            str(self.standins_dir),
            "--ready-file",
            str(ready_file),
        ]
        if self.sandbox_user is not None:
            argv += ["--run-as", "{}:{}".format(*self.sandbox_user)]
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [str(_PACKAGE_ROOT), *filter(None, [env.get("PYTHONPATH")])]
        )
        self._spawn("sandbox", argv, env)

    def _prepare_sandbox(self) -> None:
        """A fresh world-traversable folder under /tmp with the stand-ins and the pods."""
        base = "/tmp" if os.path.isdir("/tmp") else tempfile.gettempdir()
        tmp = Path(tempfile.mkdtemp(prefix="allocbridge-sandbox-", dir=base))
        self._sandbox_tmp = tmp
        os.chmod(tmp, 0o755)
        self.standins_dir = write_standins(tmp / "bin")
        self.sandbox_root = tmp / "pods"
        self.sandbox_root.mkdir()
        os.chmod(self.sandbox_root, 0o755)
        link = self.state_dir / "sandbox"
        if link.is_symlink():
            old = Path(os.readlink(link))
            if old.name.startswith("allocbridge-sandbox-") and old != tmp:
                shutil.rmtree(old, ignore_errors=True)  # left by a run that was SIGKILLed
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(tmp)
        self.sandbox_user = self._choose_sandbox_user(tmp)

    def _choose_sandbox_user(self, tmp: Path) -> tuple[int, int] | None:
        if os.geteuid() != 0:
            log.warning(
                "exec commands in local pods run as this user (uid %d): a shell builtin `kill` "
                "inside a pod can reach this user's own processes",
                os.geteuid(),
            )
            return None
        try:
            pwd.getpwuid(SANDBOX_UID)
            grp.getgrgid(SANDBOX_GID)
            probe = tmp / "probe"
            probe.mkdir()
            os.chown(probe, SANDBOX_UID, SANDBOX_GID)
            done = subprocess.run(
                [str(self.standins_dir / "kill"), "-0", "1"],
                cwd=probe,
                env={
                    "PATH": exec_path(self.standins_dir),
                    "ALLOCBRIDGE_SANDBOX": str(probe),
                },
                user=SANDBOX_UID,
                group=SANDBOX_GID,
                extra_groups=[],
                capture_output=True,
                timeout=10,
                check=False,
            )
            shutil.rmtree(probe)
            if done.returncode != 0:
                raise OSError(done.stderr.decode(errors="replace").strip())
        except (KeyError, OSError, subprocess.SubprocessError) as err:
            log.warning(
                "cannot run pod exec commands as uid/gid %d/%d (%s); they run as root instead, "
                "so only the kill stand-ins protect this machine",
                SANDBOX_UID,
                SANDBOX_GID,
                err,
            )
            return None
        return (SANDBOX_UID, SANDBOX_GID)

    # -- readiness -----------------------------------------------------------------------

    def _wait(self, check: Callable[[], bool], what: str, timeout: float | None = None) -> None:
        deadline = time.monotonic() + (timeout or self._timeout)
        last_error = ""
        while True:
            node_procs = self.real_node.processes if self.real_node else []
            for p in [*self._procs, *node_procs]:
                if not p.alive():
                    raise ClusterStartError(
                        f"{p.name} exited with status {p.popen.returncode} while waiting for "
                        f"{what}; its log {p.log_path} ends with:\n{p.log_tail()}"
                    )
            try:
                if check():
                    return
            except (OSError, ApiError, ValueError, KeyError) as err:
                last_error = str(err)
            if time.monotonic() > deadline:
                raise ClusterStartError(f"timed out waiting for {what} (last error: {last_error})")
            time.sleep(0.05)

    def _api_ready(self) -> bool:
        return bool(self.api.get("/readyz", timeout=2) == "ok")

    def _components_ready(self) -> bool:
        p = self._ports
        return (
            _http_ok(f"https://127.0.0.1:{p['controller-manager']}/healthz")
            and _http_ok(f"https://127.0.0.1:{p['scheduler']}/healthz")
            and _http_ok(f"http://127.0.0.1:{p['kwok']}/healthz")
            and (self.state_dir / "sandbox.ready").exists()
        )

    def _default_service_account(self) -> bool:
        self.api.get("/api/v1/namespaces/default/serviceaccounts/default")
        return True


_INSECURE = ssl.create_default_context()
_INSECURE.check_hostname = False
_INSECURE.verify_mode = ssl.CERT_NONE


def _http_ok(url: str) -> bool:
    """GET answered 200 (components' self-signed health endpoints are not verified)."""
    try:
        with urllib.request.urlopen(url, timeout=2, context=_INSECURE) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


# -- never leave a process behind --------------------------------------------------------

_RUNNING: set[LocalCluster] = set()
_handlers_installed = False


def _stop_all() -> None:
    for cluster in list(_RUNNING):
        with contextlib.suppress(Exception):
            cluster.stop()


atexit.register(_stop_all)


def _install_signal_handlers() -> None:
    """Stop running clusters on SIGTERM/SIGHUP, then let the signal do what it did before."""
    global _handlers_installed  # noqa: PLW0603 - one process-wide installation
    if _handlers_installed or threading.current_thread() is not threading.main_thread():
        return
    _handlers_installed = True
    for sig in (signal.SIGTERM, signal.SIGHUP):
        previous = signal.getsignal(sig)
        if previous in (signal.SIG_IGN, None):
            continue

        def handler(signum: int, frame: FrameType | None, previous: Any = previous) -> None:
            _stop_all()
            if callable(previous):
                previous(signum, frame)
            else:
                signal.signal(signum, signal.SIG_DFL)
                os.kill(os.getpid(), signum)

        signal.signal(sig, handler)
