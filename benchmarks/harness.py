"""What every measurement runs on: the local control plane, operator processes and clients.

- `Bench`: one `LocalCluster` (its own temporary state directory), the CRDs and RBAC of
  `crds/` and `manifests/`, a kwok node (and, for the interactive section, the dedicated real
  node, where only pods of annotated namespaces go), the operator's ServiceAccount kubeconfig,
  a client token bound to `allocbridge-admin`, and HTTP clients for the API server (admin
  certificate) and for the operators' `/v1` (the client token, as any Nomad client sends it).
- `OperatorProcess`: one real `allocbridge run` process with a configuration written here;
  `rss()` and `peak_rss()` read its `/proc/<pid>/status`.
- `/proc` readings: resident memory, the machine, and CPU accounting that tells how much of
  the machine other processes used while the suite ran.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import platform
import re
import signal
import ssl
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import aiohttp
import orjson
import yaml

from allocbridge.config import AclSettings, KubernetesSettings, local_settings, render
from allocbridge_localcluster import LocalCluster
from allocbridge_localcluster.binaries import BinariesMissingError
from allocbridge_localcluster.pki import Pki, write_token_kubeconfig
from allocbridge_localcluster.ports import free_ports
from allocbridge_localcluster.realnode import why_unavailable

REPO: Final = Path(__file__).resolve().parents[1]
GROUP: Final = "allocbridge.io"
ALLOCATIONS: Final = f"/apis/{GROUP}/v1"
NODE: Final = "bench-node"
CLIENT_SA: Final = "bench-client"
SYSTEM_NS: Final = "allocbridge-system"

Json = dict[str, Any]

_LABEL: Final = re.compile(r'(\w+)="([^"]*)"')


class BenchError(RuntimeError):
    """A step of the suite could not be done; the message says which."""


def fetch_body(session: aiohttp.ClientSession, url: str) -> Callable[[], Awaitable[int]]:
    """One GET of `url` that must answer 200, as a bench's request: returns the body's size."""

    async def fetch() -> int:
        async with session.get(url) as response:
            body = await response.read()
            if response.status != 200:
                raise BenchError(f"GET {url}: {response.status} {body[:200]!r}")
            return len(body)

    return fetch


def log(message: str) -> None:
    """Progress on stderr, so stdout carries only the table."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# --- /proc ------------------------------------------------------------------------------------


def proc_status(pid: int) -> dict[str, int]:
    """The `kB` fields of /proc/<pid>/status (VmRSS, VmHWM, ...) in bytes."""
    fields: dict[str, int] = {}
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            name, _, rest = line.partition(":")
            parts = rest.split()
            if len(parts) == 2 and parts[1] == "kB":
                fields[name] = int(parts[0]) * 1024
    return fields


def rss(pid: int) -> int:
    """Resident set size in bytes (0 once the process is gone)."""
    return proc_status(pid).get("VmRSS", 0)


def established_connections(port: int) -> int:
    """Server-side TCP connections in ESTABLISHED state on 127.0.0.1:`port`."""
    count = 0
    with contextlib.suppress(OSError):
        for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
            parts = line.split()
            local, state = parts[1], parts[3]
            if state == "01" and int(local.split(":")[1], 16) == port:
                count += 1
    return count


def _proc_jiffies(pid: int) -> tuple[int, int, int]:
    """(utime+stime, cutime+cstime, ppid) of a process."""
    text = Path(f"/proc/{pid}/stat").read_text()
    fields = text[text.rindex(")") + 2 :].split()
    ppid = int(fields[1])
    own = int(fields[11]) + int(fields[12])
    children = int(fields[13]) + int(fields[14])
    return own, children, ppid


def cpu_seconds(pid: int) -> float:
    """CPU time (user and system) a process has used so far."""
    return _proc_jiffies(pid)[0] / os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class CpuSnapshot:
    at: float
    machine_busy: int  # jiffies, every CPU
    ours: int  # jiffies of this process, its descendants and its waited-for children


def cpu_snapshot() -> CpuSnapshot:
    """CPU time used so far by the whole machine and by this process tree."""
    first = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    values = [int(v) for v in first]
    idle = values[3] + (values[4] if len(values) > 4 else 0)
    busy = sum(values[:8]) - idle
    tree: dict[int, tuple[int, int, int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                tree[int(entry.name)] = _proc_jiffies(int(entry.name))
    me = os.getpid()
    children: dict[int, list[int]] = {}
    for pid, (_, _, ppid) in tree.items():
        children.setdefault(ppid, []).append(pid)
    ours = 0
    stack = [me]
    while stack:
        pid = stack.pop()
        own, waited, _ = tree.get(pid, (0, 0, 0))
        ours += own + waited
        stack += children.get(pid, [])
    return CpuSnapshot(time.monotonic(), busy, ours)


def _with_share(jiffies: int, start: CpuSnapshot, end: CpuSnapshot) -> tuple[float, float]:
    """(`jiffies` in CPU-seconds, their share of the machine's capacity between the two)."""
    seconds = jiffies / os.sysconf("SC_CLK_TCK")
    capacity = (end.at - start.at) * (os.cpu_count() or 1)
    return seconds, (seconds / capacity if capacity > 0 else 0.0)


def other_cpu_share(start: CpuSnapshot, end: CpuSnapshot) -> tuple[float, float]:
    """(CPU-seconds used by other processes, their share of the machine's capacity)."""
    others = max(0, (end.machine_busy - start.machine_busy) - (end.ours - start.ours))
    return _with_share(others, start, end)


def machine_cpu_used(start: CpuSnapshot, end: CpuSnapshot) -> tuple[float, float]:
    """(CPU-seconds every process of the machine used, their share of its capacity)."""
    return _with_share(end.machine_busy - start.machine_busy, start, end)


def machine() -> str:
    """CPU model, cores, memory and kernel, from /proc."""
    model = "unknown CPU"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = " ".join(line.split(":", 1)[1].split())
                break
    memory = proc_meminfo().get("MemTotal", 0)
    return (
        f"{model}, {os.cpu_count()} cores, {memory / 2**30:.1f} GiB RAM, "
        f"Linux {platform.release()}, Python {platform.python_version()}"
    )


def proc_meminfo() -> dict[str, int]:
    fields: dict[str, int] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            name, _, rest = line.partition(":")
            fields[name] = int(rest.split()[0]) * 1024
    return fields


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def other_control_planes() -> int:
    """kube-apiserver processes running besides ours (other engineers' test clusters)."""
    count = 0
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if (entry / "comm").read_text().strip() == "kube-apiserver":
                    count += 1
    return max(0, count - 1)


# --- the API server ---------------------------------------------------------------------------


class Kube:
    """A small JSON client for the API server with the admin certificate (aiohttp, one pool)."""

    def __init__(self, server: str, pki: Pki, *, connections: int = 64) -> None:
        self.server = server
        context = ssl.create_default_context(cafile=str(pki.ca_cert))
        context.load_cert_chain(str(pki.admin_cert), str(pki.admin_key))
        self.ssl = context
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=context, limit=connections),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=30),
        )

    async def close(self) -> None:
        await self.session.close()

    async def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = "application/json",
        ok: tuple[int, ...] = (200, 201, 202),
    ) -> Json:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": content_type} if data is not None else {}
        async with self.session.request(
            method, self.server + path, data=data, headers=headers
        ) as response:
            raw = await response.read()
            if response.status not in ok:
                raise BenchError(f"{method} {path}: {response.status} {raw[:300]!r}")
            return json.loads(raw) if raw else {}

    async def get(self, path: str) -> Json:
        return await self.request("GET", path)

    async def _metrics(self) -> list[str]:
        async with self.session.get(self.server + "/metrics") as response:
            return (await response.text()).splitlines()

    async def requests_served(self) -> dict[str, int]:
        """Requests the API server has answered so far (its `apiserver_request_total`), by
        `VERB resource[/subresource]`."""
        counts: dict[str, int] = {}
        for line in await self._metrics():
            if line.startswith("apiserver_request_total{"):
                labels = dict(_LABEL.findall(line))
                name = labels.get("resource", "") + (
                    "/" + labels["subresource"] if labels.get("subresource") else ""
                )
                code = labels.get("code", "")
                failed = "" if code.startswith("2") else f" ({code})"
                key = f"{labels.get('verb', '')} {name}{failed}"
                counts[key] = counts.get(key, 0) + int(float(line.rsplit(" ", 1)[1]))
        return counts

    async def cluster_watches(self, resource: str) -> int:
        """Open cluster-wide watches of `resource` (`apiserver_longrunning_requests`)."""
        open_now = 0
        for line in await self._metrics():
            if line.startswith("apiserver_longrunning_requests{"):
                labels = dict(_LABEL.findall(line))
                if (labels.get("verb"), labels.get("resource"), labels.get("scope")) == (
                    "WATCH",
                    resource,
                    "cluster",
                ):
                    open_now += int(float(line.rsplit(" ", 1)[1]))
        return open_now

    async def post(self, path: str, body: Any) -> Json:
        return await self.request("POST", path, body)

    async def merge_patch(self, path: str, body: Any) -> Json:
        return await self.request("PATCH", path, body, content_type="application/merge-patch+json")

    async def delete(self, path: str, body: Any = None) -> None:
        await self.request("DELETE", path, body, ok=(200, 202, 404))

    async def watch(self, path: str, resource_version: str) -> AsyncIterator[Json]:
        """Watch events (dicts with `type` and `object`) from `resource_version` on."""
        sep = "&" if "?" in path else "?"
        url = (
            f"{self.server}{path}{sep}watch=1&resourceVersion={resource_version}"
            "&allowWatchBookmarks=false&timeoutSeconds=1800"
        )
        async with self.session.get(url) as response:
            if response.status != 200:
                raise BenchError(f"watch {path}: {response.status}")
            while True:
                line = await response.content.readline()
                if not line:
                    return
                yield orjson.loads(line)  # the bench's own CPU competes with what it measures

    async def wait_gone(self, path: str, patience: float) -> None:
        """Wait up to `patience` seconds until a list at `path` is empty."""
        deadline = time.monotonic() + patience
        while True:
            items = (await self.get(path)).get("items") or []
            if not items:
                return
            if time.monotonic() > deadline:
                raise BenchError(f"{len(items)} objects at {path} still there after {patience}s")
            await asyncio.sleep(0.5)


async def gather_limited(
    count: int, make: Callable[[int], Any], *, concurrency: int = 48
) -> list[Any]:
    """Run `make(i)` coroutines for i in range(count), `concurrency` at a time, in order."""
    semaphore = asyncio.Semaphore(concurrency)

    async def one(i: int) -> Any:
        async with semaphore:
            return await make(i)

    return list(await asyncio.gather(*(one(i) for i in range(count))))


# --- the operator under test ------------------------------------------------------------------


@dataclass
class OperatorProcess:
    """One `allocbridge run` process; see `config_text` for what it is told."""

    folder: Path
    kubeconfig: Path
    name: str
    namespaces: tuple[str, ...] = ()
    peering: str | None = None  # None: standalone (reconciles); else a member of this peering
    priority: int = 0
    acl: bool = True
    api_port: int = field(default_factory=lambda: free_ports(1)[0])
    ops_port: int = field(default_factory=lambda: free_ports(1)[0])
    process: subprocess.Popen[bytes] | None = None

    @property
    def api(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    @property
    def ops(self) -> str:
        return f"http://127.0.0.1:{self.ops_port}"

    @property
    def log_path(self) -> Path:
        return self.folder / f"{self.name}.log"

    @property
    def pid(self) -> int:
        if self.process is None:
            raise BenchError(f"operator {self.name} is not running")
        return self.process.pid

    def config_text(self) -> str:
        kubernetes = KubernetesSettings(
            kubeconfig=str(self.kubeconfig),
            namespaces=self.namespaces,
            standalone=self.peering is None,
            peering=self.peering or KubernetesSettings.peering,
            priority=self.priority,
        )
        settings = local_settings(
            self.name, self.api_port, self.ops_port, kubernetes, acl=AclSettings(self.acl)
        )
        return render(settings)

    def _spawn(self) -> subprocess.Popen[bytes]:
        self.folder.mkdir(parents=True, exist_ok=True)
        config = self.folder / f"{self.name}.hcl"
        config.write_text(self.config_text())
        env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
        with self.log_path.open("ab") as out:
            return subprocess.Popen(
                [sys.executable, "-m", "allocbridge.cli", "run", "--config", str(config)],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
            )

    async def start(self, patience: float = 120.0) -> None:
        """Start the process and wait up to `patience` seconds until `/health` says it serves
        from a synced store."""
        self.process = self._spawn()
        deadline = time.monotonic() + patience
        async with aiohttp.ClientSession() as session:
            while True:
                if self.process.poll() is not None:
                    raise BenchError(
                        f"operator {self.name} exited with {self.process.returncode}; "
                        f"see {self.log_path}"
                    )
                with contextlib.suppress(aiohttp.ClientError, ValueError, KeyError):
                    async with session.get(self.ops + "/health?worker_info=1") as response:
                        info = (await response.json(content_type=None))["worker_process_info"]
                        if response.status == 200 and info["upstream_connection_state"] == "READY":
                            return
                if time.monotonic() > deadline:
                    raise BenchError(f"operator {self.name} not ready in {patience}s")
                await asyncio.sleep(0.1)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 20 s; idempotent."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    async def restart(self) -> None:
        self.stop()
        await self.start()

    def rss(self) -> int:
        return rss(self.pid)

    def peak_rss(self) -> int:
        return proc_status(self.pid).get("VmHWM", 0)

    def log_contains(self, text: str) -> bool:
        with contextlib.suppress(OSError):
            return text in self.log_path.read_text(errors="replace")
        return False


# --- the whole bench --------------------------------------------------------------------------


class Bench:
    """The cluster and everything installed in it; `close()` stops what was started here."""

    def __init__(self, state_dir: Path | None, *, real_node: bool = False) -> None:
        """`real_node`: also a dedicated real node (its pods come from namespaces annotated
        with `realnode.NAMESPACE_ANNOTATIONS`), unless `no_real_node` says why it cannot run."""
        self.cluster = LocalCluster(state_dir=state_dir)
        self.no_real_node: str | None = "not asked for"
        if real_node:
            try:
                self.no_real_node = why_unavailable(self.cluster.binaries.kubectl.parent)
            except BinariesMissingError as exc:  # start() fails with the same message
                self.no_real_node = str(exc)
            if self.no_real_node is None:
                self.cluster = LocalCluster(
                    state_dir=state_dir, real_node=True, dedicated_real_node=True
                )
        self.folder = Path()
        self.kube: Kube | None = None
        self.operator_kubeconfig = Path()
        self.client_token = ""
        self.operators: list[OperatorProcess] = []
        self._http: aiohttp.ClientSession | None = None

    # The cluster's start and stop are synchronous (subprocesses and polling); they run in a
    # thread so the event loop stays free.
    async def start(self) -> None:
        log("starting the local control plane")
        await asyncio.to_thread(self.cluster.start)
        self.folder = self.cluster.state_dir / "bench"
        self.folder.mkdir(parents=True, exist_ok=True)
        await asyncio.to_thread(self.cluster.create_node, NODE)
        self.kube = Kube(self.cluster.server, Pki(self.cluster.state_dir / "pki"))
        log(f"control plane ready in {self.cluster.startup_seconds:.1f}s; installing allocbridge")
        self.kubectl("apply", "-f", str(REPO / "crds"))
        self.kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
        for manifest in ("namespace.yaml", "rbac.yaml", "roles.yaml"):
            self.kubectl("apply", "-f", str(REPO / "manifests" / manifest))
        self.operator_kubeconfig = self._token_kubeconfig(
            "allocbridge", self.folder / "operator.kubeconfig"
        )
        client = [
            {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {"name": CLIENT_SA, "namespace": SYSTEM_NS},
            },
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": CLIENT_SA},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": "allocbridge-admin",
                },
                "subjects": [{"kind": "ServiceAccount", "name": CLIENT_SA, "namespace": SYSTEM_NS}],
            },
        ]
        self.kubectl(
            "apply",
            "-f",
            "-",
            stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": client}),
        )
        self.client_token = self._token(CLIENT_SA)

    def _token(self, account: str) -> str:
        return self.kubectl(
            "create", "token", account, "-n", SYSTEM_NS, "--duration=6h"
        ).stdout.strip()

    def _token_kubeconfig(self, account: str, path: Path) -> Path:
        admin = yaml.safe_load(self.cluster.kubeconfig.read_text())
        cluster = admin["clusters"][0]["cluster"]
        ca = base64.b64decode(cluster["certificate-authority-data"])
        return write_token_kubeconfig(path, cluster["server"], ca, self._token(account))

    @property
    def api(self) -> Kube:
        if self.kube is None:
            raise BenchError("the bench is not started")
        return self.kube

    @property
    def http(self) -> aiohttp.ClientSession:
        """A client for the operators' `/v1`, sending the client token; no connection limit."""
        if self._http is None:
            self._http = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0),
                headers={"X-Nomad-Token": self.client_token},
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=30),
            )
        return self._http

    def kubectl_argv(self, *args: str) -> list[str]:
        return [
            str(self.cluster.kubectl),
            f"--kubeconfig={self.cluster.kubeconfig}",
            f"--cache-dir={self.folder / 'kubectl-cache'}",
            *args,
        ]

    def kubectl(
        self, *args: str, stdin: str | None = None, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            self.kubectl_argv(*args),
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if done.returncode != 0:
            raise BenchError(f"kubectl {' '.join(args)}: {done.stderr.strip()}")
        return done

    async def ensure_namespace(
        self, name: str, annotations: Mapping[str, str] | None = None
    ) -> None:
        metadata: Json = {"name": name}
        if annotations:
            metadata["annotations"] = dict(annotations)
        await self.api.request(
            "POST",
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": metadata},
            ok=(201, 409),
        )
        deadline = time.monotonic() + 60
        while True:  # pods need the namespace's default ServiceAccount
            try:
                await self.api.get(f"/api/v1/namespaces/{name}/serviceaccounts/default")
                return
            except BenchError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.2)

    def operator(self, name: str, **options: Any) -> OperatorProcess:
        process = OperatorProcess(self.folder, self.operator_kubeconfig, name, **options)
        self.operators.append(process)
        return process

    def component_rss(self) -> Mapping[str, int]:
        return self.cluster.process_rss()

    def component_pid(self, comm: str) -> int:
        """The pid of this cluster's process named `comm` (found by its state directory)."""
        mark = str(self.cluster.state_dir).encode()
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            with contextlib.suppress(OSError):
                if (entry / "comm").read_text().strip() == comm and mark in (
                    entry / "cmdline"
                ).read_bytes():
                    return int(entry.name)
        raise BenchError(f"no {comm} process of this cluster")

    def stop_operators(self) -> None:
        for process in self.operators:
            process.stop()

    async def close(self) -> None:
        self.stop_operators()
        if self._http is not None:
            await self._http.close()
        if self.kube is not None:
            await self.kube.close()
        await asyncio.to_thread(self.cluster.stop)
