"""What the e2e tests share: the deployment, kubectl, tokens, and clients of the Service.

Every request to allocbridge goes to the Service's ClusterIP (10.96.0.0/16) or, for the
drain measurements, to a replica's pod IP (10.245.0.0/24): addresses the local cluster
created, nothing else.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from allocbridge_localcluster import LocalCluster
from allocbridge_localcluster.kubectl import Kubectl, eventually
from allocbridge_localcluster.operator_image import build

REPO = Path(__file__).resolve().parents[2]
NAMESPACE = "allocbridge-system"
IMAGE = "allocbridge:dev"
#: Lines printed at the end of the run (conftest.py's pytest_terminal_summary).
REPORT: list[str] = []


def report(line: str) -> None:
    REPORT.append(line)
    print(line)


@dataclass
class Deployed:
    cluster: LocalCluster
    kubectl: Kubectl
    service_ip: str
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def api(self) -> str:
        return f"http://{self.service_ip}:4646"

    def pods(self) -> list[dict[str, Any]]:
        """The replicas' pods that are not being deleted, oldest first."""
        found = self.kubectl.json(
            "get", "pods", "-n", NAMESPACE, "-l", "app.kubernetes.io/name=allocbridge"
        )["items"]
        alive = [p for p in found if not p["metadata"].get("deletionTimestamp")]
        return sorted(alive, key=lambda p: str(p["metadata"]["creationTimestamp"]))

    def ready_pods(self) -> list[dict[str, Any]]:
        return [p for p in self.pods() if ready(p)]


def ready(pod: dict[str, Any]) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in pod.get("status", {}).get("conditions") or []
    )


def deploy(cluster: LocalCluster, folder: Path) -> Deployed:
    """The image into the node's containerd, then `make deploy` exactly as a user runs it."""
    began = time.monotonic()
    tar = build(REPO / ".cache" / "images", IMAGE)
    built = time.monotonic()
    node = cluster.real_node
    assert node is not None
    ctr = cluster.binaries.kubectl.parent / "ctr"
    address = f"--address={node.containerd_socket}"
    done = subprocess.run(
        [str(ctr), address, "-n", "k8s.io", "images", "import", str(tar)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    imported = time.monotonic()
    kubectl_command = f"{cluster.kubectl} --kubeconfig={cluster.kubeconfig}"
    done = subprocess.run(
        [
            "make",
            "--no-print-directory",
            "deploy",
            f"IMAGE={IMAGE}",
            f"KUBECTL={kubectl_command}",
            f"DEPLOY_DIR={folder}",
            f"PYTHON={sys.executable}",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, f"make deploy failed:\n{done.stdout}\n{done.stderr}"
    deployed_at = time.monotonic()
    kubectl = Kubectl.of(cluster, timeout=120)
    service = kubectl.json("get", "service", "allocbridge", "-n", NAMESPACE)
    result = Deployed(cluster, kubectl, service["spec"]["clusterIP"])
    result.timings = {
        "cluster start": cluster.startup_seconds,
        "make image (cached)": built - began,
        "ctr images import": imported - built,
        "make deploy (both replicas Ready)": deployed_at - imported,
    }
    report(
        f"image {tar.name} ({tar.stat().st_size // 2**20} MiB); "
        + ", ".join(f"{k} {v:.1f}s" for k, v in result.timings.items())
    )
    return result


def workload_namespace(deployed: Deployed, name: str) -> dict[str, str]:
    """A namespace with one ServiceAccount per shipped ClusterRole, bound there by a
    RoleBinding as an operator of allocbridge would, and one bound to nothing; returns
    role ("reader", "operator", "admin", "nobody") -> token."""
    kubectl = deployed.kubectl
    kubectl.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    eventually(
        lambda: kubectl("get", "sa", "default", "-n", name, check=False).returncode == 0,
        timeout=60,
        what=f"{name}'s default ServiceAccount",
    )
    tokens: dict[str, str] = {}
    for role in ("reader", "operator", "admin"):
        account = f"nomad-{role}"
        kubectl.apply(
            {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {"name": account, "namespace": name},
            }
        )
        kubectl.apply(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": {"name": account, "namespace": name},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": f"allocbridge-{role}",
                },
                "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": name}],
            }
        )
        tokens[role] = kubectl("create", "token", account, "-n", name).stdout.strip()
    kubectl.apply(
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": "nomad-nobody", "namespace": name},
        }
    )  # bound to no role: a valid token that may do nothing
    tokens["nobody"] = kubectl("create", "token", "nomad-nobody", "-n", name).stdout.strip()
    return tokens


TRAP = "trap 'echo HUP' HUP; trap 'echo USR1' USR1; while :; do sleep 1; done"
SMALL = {"cpu": 10, "memoryMB": 16}  # Nomad's defaults ask 100 MHz and 300 MiB


def task(name: str, *args: str, tini: bool = False, **extra: Any) -> dict[str, Any]:
    """A task running `sh -c ARGS...` in the busybox image (a real container), small enough
    that fifty fit on this machine's node. With `tini`, tini is PID 1 and passes signals on
    to the shell, which then ends on a SIGTERM it does not trap (a bare shell PID 1 ignores
    it, so a restart would have to replace the pod)."""
    command = ["/sbin/tini", "--", "sh", "-c", *args] if tini else ["sh", "-c", *args]
    config = {"image": "busybox:1.37", "command": command[0], "args": command[1:]}
    return {"name": name, "driver": "docker", "config": config, "resources": SMALL, **extra}


def allocation(
    name: str,
    namespace: str,
    tasks: list[dict[str, Any]],
    group: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "apiVersion": "allocbridge.io/v1",
        "kind": "Allocation",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "job": {"id": name, "type": "service"},
            "taskGroup": {"name": "g", **(group or {})},
            "tasks": tasks,
        },
    }


def sleeper(name: str, namespace: str, *, trap: bool = False) -> dict[str, Any]:
    """An Allocation whose task `main` sleeps. With `trap`, PID 1 is a shell that handles
    SIGHUP and SIGUSR1 (printing their names), so the task can be signalled and keeps
    running."""
    return allocation(name, namespace, [task("main", TRAP if trap else "exec sleep 3600")])


def get(url: str, token: str = "") -> tuple[int, bytes, dict[str, str]]:
    """One plain request (urllib: a new connection each time)."""
    request = urllib.request.Request(url)
    if token:
        request.add_header("X-Nomad-Token", token)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read(), dict(response.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(), dict(exc.headers)


def wait_running(deployed: Deployed, namespace: str, names: list[str], token: str) -> list[str]:
    """Wait until the API serves every named allocation as running; return their IDs."""

    def listed() -> list[str] | None:
        status, body, _ = get(f"{deployed.api}/v1/allocations?namespace={namespace}", token)
        assert status == 200, (status, body[:200])
        stubs = {s["JobID"]: s for s in json.loads(body)}
        if all(stubs.get(n, {}).get("ClientStatus") == "running" for n in names):
            return [stubs[n]["ID"] for n in names]
        return None

    ids: list[str] = eventually(listed, timeout=180, what=f"{names} running in {namespace}")
    return ids


# -- traffic through the Service, and what the old replicas did while it flowed ------------------


@dataclass
class Tally:
    """Requests sent and the ones that failed (time since start, kind, what went wrong)."""

    began: float = field(default_factory=time.monotonic)
    sent: dict[str, int] = field(default_factory=dict)
    failures: list[tuple[float, str, str]] = field(default_factory=list)

    def ok(self, kind: str) -> None:
        self.sent[kind] = self.sent.get(kind, 0) + 1

    def failed(self, kind: str, what: str) -> None:
        self.ok(kind)
        self.failures.append((time.monotonic() - self.began, kind, what))


class Traffic:
    """A steady stream of /v1 requests through the Service from several clients, each with
    kept-alive connections as real clients have: reads, a blocking query, a paging walk and
    exec sessions. Every answer is checked; nothing is retried."""

    def __init__(self, api: str, namespace: str, ids: list[str], token: str) -> None:
        self.api, self.namespace, self.ids, self.token = api, namespace, ids, token
        self.tally = Tally()
        self._stop = asyncio.Event()

    def stop(self) -> None:
        self._stop.set()

    async def run(self) -> Tally:
        headers = {"X-Nomad-Token": self.token}
        timeout = aiohttp.ClientTimeout(total=60)
        async with aiohttp.ClientSession(headers=headers, timeout=timeout) as session:
            await asyncio.gather(
                self._loop(session, "read", self._read),
                self._loop(session, "read", self._read),
                self._loop(session, "blocking query", self._blocking),
                self._loop(session, "paging walk", self._walk),
                self._loop(session, "exec session", self._exec),
            )
        return self.tally

    async def _loop(
        self, session: aiohttp.ClientSession, kind: str, one: Callable[..., Any]
    ) -> None:
        state: dict[str, Any] = {}
        while not self._stop.is_set():
            try:
                problem = await one(session, state)
            except (aiohttp.ClientError, TimeoutError, OSError, ValueError, KeyError) as exc:
                problem = f"{type(exc).__name__}: {exc}"
            if problem:
                self.tally.failed(kind, problem)
            else:
                self.tally.ok(kind)
            await asyncio.sleep(0.02)

    async def _read(self, session: aiohttp.ClientSession, state: dict[str, Any]) -> str:
        state["n"] = state.get("n", 0) + 1
        if state["n"] % 2:
            url = f"{self.api}/v1/allocations?namespace={self.namespace}"
        else:
            url = f"{self.api}/v1/allocation/{self.ids[state['n'] % len(self.ids)]}"
        async with session.get(url) as response:
            body = await response.read()
            if response.status != 200:
                return f"GET {url}: {response.status} {body[:200]!r}"
            json.loads(body)
        return ""

    async def _blocking(self, session: aiohttp.ClientSession, state: dict[str, Any]) -> str:
        index = state.get("index", 1)
        url = f"{self.api}/v1/allocations?namespace={self.namespace}&index={index}&wait=3s"
        async with session.get(url) as response:
            body = await response.read()
            if response.status != 200:
                return f"blocking GET: {response.status} {body[:200]!r}"
            state["index"] = int(response.headers["X-Nomad-Index"])
        return ""

    async def _walk(self, session: aiohttp.ClientSession, state: dict[str, Any]) -> str:
        seen: list[str] = []
        token = ""
        for _ in range(len(self.ids) + 2):
            query = {"namespace": self.namespace, "per_page": "1"}
            if token:
                query["next_token"] = token
            url = f"{self.api}/v1/allocations?{urllib.parse.urlencode(query)}"
            async with session.get(url) as response:
                body = await response.read()
                if response.status != 200:
                    return f"page {len(seen) + 1}: {response.status} {body[:200]!r}"
                seen += [stub["ID"] for stub in json.loads(body)]
                token = response.headers.get("X-Nomad-NextToken", "")
            if not token:
                break
        if sorted(seen) != sorted(self.ids):
            return f"the walk saw {len(seen)} allocations, not {len(self.ids)}"
        return ""

    async def _exec(self, session: aiohttp.ClientSession, state: dict[str, Any]) -> str:
        state["n"] = state.get("n", 0) + 1
        alloc = self.ids[state["n"] % len(self.ids)]
        query = urllib.parse.urlencode(
            {"task": "main", "command": json.dumps(["sh", "-c", f"echo session {state['n']}"])}
        )
        url = "ws" + self.api.removeprefix("http") + f"/v1/client/allocation/{alloc}/exec?{query}"
        stdout = b""
        exit_code: int | None = None
        async with session.ws_connect(url) as ws:
            async for message in ws:
                if message.type is not aiohttp.WSMsgType.TEXT:
                    break
                frame = json.loads(message.data)
                if frame.get("stdout", {}).get("data"):
                    stdout += base64.b64decode(frame["stdout"]["data"])
                if frame.get("exited"):
                    exit_code = frame.get("result", {}).get("exit_code", 0)
        if exit_code != 0 or stdout != f"session {state['n']}\n".encode():
            return f"exec: exit code {exit_code}, stdout {stdout!r}, close {ws.close_code}"
        return ""


@dataclass
class ReplicaTimeline:
    """When an old replica's /health turned 503, when its endpoint stopped being ready and
    serving in the Service's EndpointSlice and when it left it, when its API listener
    closed (seconds since the rollout began)."""

    pod: str
    ip: str
    health_503: float | None = None
    not_ready: float | None = None
    not_serving: float | None = None
    left_slice: float | None = None
    listener_closed: float | None = None


class Watcher:
    """Polls each old replica (its ops and API ports on its pod IP) and the Service's
    EndpointSlices every 50 ms, recording the first moment of each change."""

    def __init__(self, deployed: Deployed, pods: list[dict[str, Any]]) -> None:
        self.deployed = deployed
        self.began = time.monotonic()
        self.timelines = [
            ReplicaTimeline(p["metadata"]["name"], p["status"]["podIP"]) for p in pods
        ]
        self._stop = asyncio.Event()

    def stop(self) -> None:
        self._stop.set()

    def _now(self) -> float:
        return time.monotonic() - self.began

    async def run(self) -> None:
        await asyncio.gather(
            self._slices(), *(self._replica(timeline) for timeline in self.timelines)
        )

    async def _replica(self, line: ReplicaTimeline) -> None:
        timeout = aiohttp.ClientTimeout(total=1)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            while not self._stop.is_set() and line.listener_closed is None:
                if line.health_503 is None:
                    try:
                        async with session.get(f"http://{line.ip}:9203/health") as response:
                            if response.status == 503:
                                line.health_503 = self._now()
                    except (aiohttp.ClientError, TimeoutError, OSError):
                        pass
                if not await _accepts(line.ip, 4646):
                    line.listener_closed = self._now()
                await asyncio.sleep(0.05)

    async def _slices(self) -> None:
        path = (
            f"/apis/discovery.k8s.io/v1/namespaces/{NAMESPACE}/endpointslices"
            "?labelSelector=kubernetes.io%2Fservice-name%3Dallocbridge"
        )
        while not self._stop.is_set():
            listed = await asyncio.to_thread(self.deployed.cluster.api.get, path)
            now = self._now()
            endpoints = {
                address: endpoint.get("conditions") or {}
                for item in listed.get("items") or []
                for endpoint in item.get("endpoints") or []
                for address in endpoint.get("addresses") or []
            }
            for line in self.timelines:
                conditions = endpoints.get(line.ip)
                if conditions is None:
                    if line.left_slice is None:
                        line.left_slice = now
                    conditions = {"ready": False, "serving": False}
                if line.not_ready is None and conditions.get("ready") is not True:
                    line.not_ready = now
                if line.not_serving is None and conditions.get("serving") is False:
                    line.not_serving = now
            if all(line.left_slice is not None for line in self.timelines):
                return
            await asyncio.sleep(0.05)


async def _accepts(ip: str, port: int) -> bool:
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(ip, port), timeout=1)
    except (OSError, TimeoutError):
        return False
    writer.close()
    return True


def tcp_accepts(ip: str, port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex((ip, port)) == 0


def go_test(pattern: str, variables: dict[str, str], timeout: float = 900) -> str:
    """`go test -run PATTERN` in tests/goclient with `variables`; fails with the Go output."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NOMAD_", "GOCLIENT_"))}
    env["GOFLAGS"] = f"{os.environ.get('GOFLAGS', '')} -mod=readonly".strip()
    env.setdefault("GOTOOLCHAIN", "local")
    env["CGO_ENABLED"] = "0"
    done = subprocess.run(
        ["go", "test", "-count=1", "-v", "-run", pattern, "./..."],
        cwd=REPO / "tests" / "goclient",
        env={**env, **variables},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0 and "--- PASS" in output and "SKIP" not in output, output[-4000:]
    return output
