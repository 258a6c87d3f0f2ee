"""Container sandboxes and the kubelet simulation of the local control plane.

kwok serves `pods/exec` by running the command as a plain process on this machine. This module
makes that safe and makes containers react to what is sent into them, the way the operator's
signal, restart and pause actions expect from a real kubelet. The rules a container reacts by
(signals, the exit file, the pod status after an end, PID 1) are in `kubelet.py`.

Run as `python -m allocbridge_localcluster.sandbox ...` (LocalCluster starts and stops it), it:

1. watches pods bound to the local cluster's kwok nodes and, for each, creates the sandbox
   folders `<root>/<namespace>/<pod>/<container>/` (owned by the sandbox user) and a kwok `Exec`
   object named like the pod with one target per container: `workDir` = that container's folder,
   env `PATH=<stand-ins>:<stand-ins>/guard:/usr/local/bin:/usr/bin:/bin` (`exec_path`), `HOME`
   and `ALLOCBRIDGE_SANDBOX` = the folder, `POD_NAMESPACE`, `POD_NAME`, `CONTAINER_NAME`, and
   (when the harness runs as root) `securityContext.runAsUser/runAsGroup` = the unprivileged
   sandbox user (65534), so even a shell builtin `kill` cannot reach the machine's processes.
   Then it sets the pod condition
   `localcluster.allocbridge.io/SandboxReady`, which is what lets kwok's pod-ready stage start
   the pod: a Running pod always has its exec targets. The condition patch carries the pod's
   UID, so it never reaches a newer pod of the same name, and a failed preparation is tried
   again (a Pending pod may see no other event). Folders and the Exec go with the pod.
2. plays the kubelet for container ends. It looks at every sandbox within ~100 ms of a
   stand-in or `request_exit` appending to `<root>/.activity` (exec env
   `ALLOCBRIDGE_ACTIVITY`), and at least once a second regardless, for new `kill` records and
   an `exit` file, and writes the ends they make (by the rules of `kubelet.py`) into the pod
   status. An end also clears the `stopped` marker (which the stand-in keeps from STOP
   until CONT; STOP itself changes no status, as on a real node).

There is no ClusterExec fallback: an exec into a pod whose sandbox is not prepared fails
instead of running somewhere unintended.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import logging
import os
import shutil
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
from kubernetes_asyncio import client as k8s_client
from kubernetes_asyncio import config as k8s_config

from .kubelet import (
    ACTIVITY_FILE,
    SignalRecord,
    container_ended,
    honours_own_restart_policy,
    read_handles,
    terminates,
)
from .stages import NODE_LABEL_KEY, NODE_LABEL_VALUE, SANDBOX_CONDITION
from .standins import (
    EXIT_FILE,
    NO_INIT_FILE,
    SIGNALS_LOG,
    STOPPED_FILE,
    search_path,
)

log = logging.getLogger("allocbridge_localcluster.sandbox")

SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"
EXEC_API = "/apis/kwok.x-k8s.io/v1alpha1"
MANAGED_BY = {"app.kubernetes.io/managed-by": "allocbridge-localcluster"}
POLL_INTERVAL = 0.1
SYNC_ATTEMPTS = 12  # preparing a pod's sandbox: tries while nothing newer about the pod came
SYNC_RETRY_DELAY = (0.2, 5.0)  # first and longest pause between those tries, in seconds
FULL_SCAN_INTERVAL = 1.0


def exec_path(standins: Path) -> str:
    """PATH for kwok and every exec'd command: the stand-ins and their guards come first."""
    return f"{search_path(standins)}:{SANDBOX_PATH}"


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class _ApiError(RuntimeError):
    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"HTTP {status}: {body[:300]}")
        self.status = status
        self.body = body


class _Kube:
    """Raw-JSON requests through a kubernetes_asyncio ApiClient (no model (de)serialising)."""

    def __init__(self, api: Any) -> None:
        self.api = api
        self.base = str(api.configuration.host).rstrip("/")

    async def _send(
        self,
        method: str,
        path: str,
        *,
        query: list[tuple[str, str]] | None,
        body: Any = None,
        content_type: str = "application/json",
        limits: Any = 30,
    ) -> Any:
        headers = {"Accept": "application/json", "Content-Type": content_type}
        params = list(query or [])
        await self.api.update_params_for_auth(headers, params, ["BearerToken"])
        return await self.api.rest_client.request(
            method,
            self.base + path,
            query_params=params,
            headers=headers,
            body=body,
            _preload_content=False,
            _request_timeout=limits,
        )

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: list[tuple[str, str]] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> Any:
        resp = await self._send(method, path, query=query, body=body, content_type=content_type)
        try:
            data = await resp.read()
        finally:
            resp.release()
        if not 200 <= resp.status < 300:
            raise _ApiError(resp.status, data.decode(errors="replace"))
        return json.loads(data) if data else None

    async def watch(self, path: str, query: list[tuple[str, str]]) -> AsyncIterator[dict[str, Any]]:
        endless = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=None)
        resp = await self._send("GET", path, query=query, limits=endless)
        try:
            if resp.status != 200:
                raise _ApiError(resp.status, (await resp.read()).decode(errors="replace"))
            pending = b""
            async for chunk in resp.content.iter_any():
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    if line.strip():
                        yield json.loads(line)
        finally:
            resp.release()


@dataclass
class _Container:
    name: str
    folder: Path
    offset: int = 0
    partial: bytes = b""


@dataclass
class _Pod:
    namespace: str
    name: str
    uid: str
    folder: Path
    containers: dict[str, _Container] = field(default_factory=dict)


@dataclass(frozen=True)
class SimulationConfig:
    """What the kubelet simulation needs to know (LocalCluster passes it on the command line)."""

    kubeconfig: Path
    root: Path
    standins: Path
    run_as: tuple[int, int] | None
    ready_file: Path | None = None


class KubeletSimulation:
    """The two loops described in the module docstring, plus their bookkeeping."""

    def __init__(self, kube: _Kube, config: SimulationConfig) -> None:
        self.kube = kube
        self.config = config
        self.pods: dict[tuple[str, str], _Pod] = {}
        self._chains: dict[tuple[str, str], asyncio.Task[None]] = {}
        self._nodes: dict[str, tuple[bool, float]] = {}
        self._kubelet_versions: dict[str, str] = {}  # of our nodes, by name
        self._api_slots = asyncio.Semaphore(32)
        self._activity = config.root / ACTIVITY_FILE
        self._activity.touch()
        os.chmod(self._activity, 0o666)  # the sandbox user's stand-ins append to it

    # -- bookkeeping ---------------------------------------------------------------------

    def _enqueue(self, key: tuple[str, str], job: Callable[[], Awaitable[None]]) -> None:
        """Run `job` after every earlier job of the same pod, concurrently with other pods."""
        previous = self._chains.get(key)

        async def run() -> None:
            if previous is not None:
                await asyncio.wait([previous])
            try:
                await job()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("handling pod %s/%s failed", *key)

        task = asyncio.create_task(run())
        self._chains[key] = task

        def forget(done: asyncio.Task[None]) -> None:
            if self._chains.get(key) is done:
                del self._chains[key]

        task.add_done_callback(forget)

    async def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        async with self._api_slots:
            return await self.kube.request(method, path, **kwargs)

    async def _node_is_ours(self, name: str) -> bool:
        known = self._nodes.get(name)
        if known is not None and (known[0] or known[1] > time.monotonic()):
            return known[0]
        try:
            node = await self._call("GET", f"/api/v1/nodes/{name}")
            ours = (node["metadata"].get("labels") or {}).get(NODE_LABEL_KEY) == NODE_LABEL_VALUE
            info = (node.get("status") or {}).get("nodeInfo") or {}
            self._kubelet_versions[name] = str(info.get("kubeletVersion") or "")
        except _ApiError as err:
            if err.status != 404:
                raise
            ours = False
        self._nodes[name] = (ours, time.monotonic() + 10)
        return ours

    # -- pods ----------------------------------------------------------------------------

    def on_pod_event(self, kind: str, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        key = (str(meta.get("namespace")), str(meta.get("name")))
        if kind == "DELETED":
            uid = str(meta.get("uid"))
            self._enqueue(key, lambda: self._remove(key, uid))
        else:
            self._enqueue(key, lambda: self._sync_retrying(key, obj))

    async def _sync_retrying(self, key: tuple[str, str], obj: dict[str, Any]) -> None:
        """`_sync`, tried again after a failure until a later event of the pod is queued.

        A Pending pod only starts once its sandbox is marked prepared, and it may see no other
        event until then: a failed attempt that was only logged would leave it Pending for good.
        """
        delay, longest = SYNC_RETRY_DELAY
        for attempt in range(1, SYNC_ATTEMPTS + 1):
            try:
                await self._sync(key, obj)
                return
            except (_ApiError, aiohttp.ClientError, OSError, TimeoutError) as err:
                if attempt == SYNC_ATTEMPTS:
                    raise
                failure = err
            if self._chains.get(key) is not asyncio.current_task():
                log.info("preparing pod %s/%s failed (%s); a newer event follows", *key, failure)
                return
            log.warning("preparing pod %s/%s failed, again in %.1fs: %s", *key, delay, failure)
            await asyncio.sleep(delay)
            delay = min(delay * 2, longest)

    async def _sync(self, key: tuple[str, str], obj: dict[str, Any]) -> None:
        meta, spec = obj["metadata"], obj.get("spec") or {}
        node = spec.get("nodeName")
        if not node or meta.get("deletionTimestamp") or not await self._node_is_ours(node):
            return
        pod = self.pods.get(key)
        if pod is not None and pod.uid != meta["uid"]:
            await self._remove(key, pod.uid)
            pod = None
        if pod is None:
            pod = await self._prepare(obj)
            self.pods[key] = pod
        conditions = (obj.get("status") or {}).get("conditions") or []
        if not any(
            c.get("type") == SANDBOX_CONDITION and c.get("status") == "True" for c in conditions
        ):
            await self._mark_prepared(pod)

    async def _prepare(self, obj: dict[str, Any]) -> _Pod:
        meta, spec = obj["metadata"], obj.get("spec") or {}
        namespace, name, uid = meta["namespace"], meta["name"], meta["uid"]
        pod = _Pod(namespace, name, uid, self.config.root / namespace / name)
        names = [c["name"] for c in (spec.get("initContainers") or []) + spec["containers"]]
        for part in (self.config.root / namespace, pod.folder):
            part.mkdir(exist_ok=True)
            os.chmod(part, 0o755)
        for cname in names:
            folder = pod.folder / cname
            folder.mkdir(exist_ok=True)
            os.chmod(folder, 0o755)
            if self.config.run_as is not None and os.geteuid() == 0:
                os.chown(folder, *self.config.run_as)
            with contextlib.suppress(FileNotFoundError):
                (folder / STOPPED_FILE).unlink()
            size = (folder / SIGNALS_LOG).stat().st_size if (folder / SIGNALS_LOG).exists() else 0
            pod.containers[cname] = _Container(cname, folder, offset=size)
        await self._put_exec(pod, names)
        log.info("prepared sandbox %s for pod %s/%s", pod.folder, namespace, name)
        return pod

    def _exec_object(self, pod: _Pod, containers: list[str]) -> dict[str, Any]:
        targets = []
        for cname in containers:
            folder = str(pod.folder / cname)
            local: dict[str, Any] = {
                "workDir": folder,
                "envs": [
                    {"name": "PATH", "value": exec_path(self.config.standins)},
                    {"name": "HOME", "value": folder},
                    {"name": "ALLOCBRIDGE_SANDBOX", "value": folder},
                    {"name": "POD_NAMESPACE", "value": pod.namespace},
                    {"name": "POD_NAME", "value": pod.name},
                    {"name": "CONTAINER_NAME", "value": cname},
                    {"name": "ALLOCBRIDGE_ACTIVITY", "value": str(self._activity)},
                ],
            }
            if self.config.run_as is not None:
                uid, gid = self.config.run_as
                local["securityContext"] = {"runAsUser": uid, "runAsGroup": gid}
            targets.append({"containers": [cname], "local": local})
        return {
            "apiVersion": "kwok.x-k8s.io/v1alpha1",
            "kind": "Exec",
            "metadata": {
                "name": pod.name,
                "namespace": pod.namespace,
                "labels": dict(MANAGED_BY),
                "ownerReferences": [
                    {"apiVersion": "v1", "kind": "Pod", "name": pod.name, "uid": pod.uid}
                ],
            },
            "spec": {"execs": targets},
        }

    async def _put_exec(self, pod: _Pod, containers: list[str]) -> None:
        """Create the pod's Exec, or take over the one of that name that is left.

        One is left when an earlier try for this pod got that far, or when an earlier pod of the
        same name went while this process did not follow it (the garbage collector deletes that
        one sooner or later, possibly between the reads and writes here): try again then.
        """
        collection = f"{EXEC_API}/namespaces/{pod.namespace}/execs"
        for _attempt in range(10):
            body = self._exec_object(pod, containers)
            try:
                await self._call("POST", collection, body=body)
                return
            except _ApiError as err:
                if err.status != 409:
                    raise
            try:
                existing = await self._call("GET", f"{collection}/{pod.name}")
                body["metadata"]["resourceVersion"] = existing["metadata"]["resourceVersion"]
                await self._call("PUT", f"{collection}/{pod.name}", body=body)
                return
            except _ApiError as err:
                if err.status not in (404, 409):
                    raise
        raise _ApiError(409, f"Exec {pod.namespace}/{pod.name} kept changing")

    async def _mark_prepared(self, pod: _Pod) -> None:
        condition = {
            "type": SANDBOX_CONDITION,
            "status": "True",
            "reason": "SandboxPrepared",
            "message": f"exec runs in {pod.folder}/<container>",
            "lastTransitionTime": _now(),
        }
        # The UID makes the patch fail (422, the UID is immutable) rather than land on a newer
        # pod of the same name, as a kubelet's status patches do: that pod's sandbox may not
        # exist yet, and this condition is what lets kwok start it.
        body = {"metadata": {"uid": pod.uid}, "status": {"conditions": [condition]}}
        try:
            await self._call(
                "PATCH",
                f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}/status",
                body=body,
                content_type="application/strategic-merge-patch+json",
            )
        except _ApiError as err:
            replaced = err.status == 422 and "metadata.uid" in err.body
            if err.status not in (404, 409) and not replaced:
                raise

    async def _remove(self, key: tuple[str, str], uid: str) -> None:
        pod = self.pods.get(key)
        if pod is None:  # never fully prepared: only its folders may exist
            shutil.rmtree(self.config.root / key[0] / key[1], ignore_errors=True)
            return
        if pod.uid != uid:
            return
        del self.pods[key]
        try:
            await self._call("DELETE", f"{EXEC_API}/namespaces/{pod.namespace}/execs/{pod.name}")
        except _ApiError as err:
            if err.status != 404:
                log.warning("deleting Exec %s/%s: %s", pod.namespace, pod.name, err)
        shutil.rmtree(pod.folder, ignore_errors=True)
        with contextlib.suppress(OSError):
            pod.folder.parent.rmdir()  # only when the namespace has no other sandbox
        log.info("removed sandbox of pod %s/%s", pod.namespace, pod.name)

    async def watch_pods(self) -> None:
        """List-then-watch pods bound to any node; relist whenever the watch breaks."""
        path = "/api/v1/pods"
        selector = ("fieldSelector", "spec.nodeName!=")
        while True:
            try:
                listing = await self._call("GET", path, query=[selector])
                version = listing["metadata"]["resourceVersion"]
                present = set()
                for item in listing.get("items") or []:
                    meta = item["metadata"]
                    present.add((meta["namespace"], meta["name"]))
                    self.on_pod_event("ADDED", item)
                for key, pod in list(self.pods.items()):
                    if key not in present:
                        self.on_pod_event(
                            "DELETED",
                            {"metadata": {"namespace": key[0], "name": key[1], "uid": pod.uid}},
                        )
                if self.config.ready_file is not None and not self.config.ready_file.exists():
                    self.config.ready_file.write_text(f"{os.getpid()}\n")
                while True:
                    query = [
                        selector,
                        ("watch", "true"),
                        ("resourceVersion", version),
                        ("allowWatchBookmarks", "true"),
                        ("timeoutSeconds", "300"),
                    ]
                    async for event in self.kube.watch(path, query):
                        obj = event.get("object") or {}
                        if event.get("type") == "ERROR":
                            raise _ApiError(int(obj.get("code") or 500), str(obj.get("message")))
                        version = (obj.get("metadata") or {}).get("resourceVersion") or version
                        if event.get("type") in ("ADDED", "MODIFIED", "DELETED"):
                            self.on_pod_event(str(event["type"]), obj)
            except asyncio.CancelledError:
                raise
            except (_ApiError, aiohttp.ClientError, OSError, ValueError, KeyError) as err:
                log.info("pod watch restarts after: %s", err)
                await asyncio.sleep(0.5)

    # -- container ends ------------------------------------------------------------------

    def _collect(self, pod: _Pod) -> list[tuple[str, int, int | None]]:
        """New ends of `pod`'s containers: (container, exit code, signal or None)."""
        ends: list[tuple[str, int, int | None]] = []
        for c in pod.containers.values():
            log_path = c.folder / SIGNALS_LOG
            try:
                size = log_path.stat().st_size
            except FileNotFoundError:
                size = 0
            if size > c.offset:
                with open(log_path, "rb") as f:
                    f.seek(c.offset)
                    data = c.partial + f.read(size - c.offset)
                c.offset = size
                *lines, c.partial = data.split(b"\n")
                handled = read_handles(c.folder)
                has_init = not (c.folder / NO_INIT_FILE).exists()
                for line in lines:
                    record = SignalRecord.parse(line.decode(errors="replace"))
                    if record is None or record.number is None:
                        continue
                    if not record.reaches_main_process(has_init, handled):
                        log.info(
                            "%s/%s/%s: %s dropped", pod.namespace, pod.name, c.name, record.signal
                        )
                        continue
                    if terminates(record.number, handled):
                        ends.append((c.name, 128 + record.number, record.number))
                    else:
                        log.info(
                            "%s/%s/%s: %s recorded, no end",
                            pod.namespace,
                            pod.name,
                            c.name,
                            record.signal,
                        )
            exit_path = c.folder / EXIT_FILE
            if exit_path.exists():
                try:
                    code = int(exit_path.read_text().strip())
                except (OSError, ValueError):
                    if time.time() - exit_path.stat().st_mtime < 2:
                        continue  # being written; look again next round
                    log.warning("ignoring unreadable %s", exit_path)
                    code = None
                with contextlib.suppress(FileNotFoundError):
                    exit_path.unlink()
                if code is not None:
                    ends.append((c.name, code, None))
        return ends

    async def _end_containers(self, pod: _Pod, ends: list[tuple[str, int, int | None]]) -> None:
        path = f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}"
        for _attempt in range(20):
            try:
                obj = await self._call("GET", path)
            except _ApiError as err:
                if err.status == 404:
                    return
                raise
            if obj["metadata"]["uid"] != pod.uid:
                return
            now = _now()
            status, applied = obj.get("status") or {}, []
            kubelet = self._kubelet_versions.get(obj["spec"].get("nodeName") or "", "")
            for cname, code, signum in ends:
                new = container_ended(
                    {"spec": obj["spec"], "status": status},
                    cname,
                    code,
                    signum,
                    now,
                    own_restart_policy=honours_own_restart_policy(kubelet),
                )
                if new is None:
                    log.info(
                        "%s/%s/%s is not running; end (%s) ignored",
                        pod.namespace,
                        pod.name,
                        cname,
                        code,
                    )
                    continue
                status = new
                applied.append((cname, code))
            if not applied:
                return
            keys = ("containerStatuses", "initContainerStatuses", "conditions", "phase")
            body = {
                "metadata": {"resourceVersion": obj["metadata"]["resourceVersion"]},
                "status": {k: status[k] for k in keys if k in status},
            }
            try:
                await self._call(
                    "PATCH",
                    f"{path}/status",
                    body=body,
                    content_type="application/merge-patch+json",
                )
            except _ApiError as err:
                if err.status == 409:
                    continue
                if err.status == 404:
                    return
                raise
            for cname, code in applied:
                with contextlib.suppress(FileNotFoundError):
                    (pod.containers[cname].folder / STOPPED_FILE).unlink()
                log.info("%s/%s/%s ended with %s", pod.namespace, pod.name, cname, code)
            return
        log.warning(
            "gave up writing the end of %s/%s after repeated conflicts", pod.namespace, pod.name
        )

    async def poll_sandboxes(self) -> None:
        """Scan every sandbox when a stand-in or `request_exit` noted activity, else each second.

        The full scan still catches an `exit` file a test wrote by hand, one second later at
        most; the activity file keeps 500 idle pods from costing a core's worth of polling.
        """
        seen: tuple[int, int] | None = None
        last_scan = 0.0
        while True:
            await asyncio.sleep(POLL_INTERVAL)
            try:
                info = self._activity.stat()
                now_seen: tuple[int, int] | None = (info.st_mtime_ns, info.st_size)
            except OSError:
                now_seen = None
            if now_seen == seen and time.monotonic() - last_scan < FULL_SCAN_INTERVAL:
                continue
            seen, last_scan = now_seen, time.monotonic()
            for key, pod in list(self.pods.items()):
                try:
                    ends = self._collect(pod)
                except OSError as err:
                    log.debug("polling %s: %s", pod.folder, err)
                    continue
                if ends:
                    self._enqueue(key, functools.partial(self._end_containers, pod, ends))


async def run(config: SimulationConfig) -> None:
    """Run the simulation until SIGTERM or SIGINT."""
    api_config = k8s_client.Configuration()
    await k8s_config.load_kube_config(
        config_file=str(config.kubeconfig), client_configuration=api_config
    )
    api_config.connection_pool_maxsize = 64
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with k8s_client.ApiClient(api_config) as api:
        sim = KubeletSimulation(_Kube(api), config)
        tasks = [asyncio.create_task(sim.watch_pods()), asyncio.create_task(sim.poll_sandboxes())]
        stopper = asyncio.create_task(stop.wait())
        done, _ = await asyncio.wait([*tasks, stopper], return_when=asyncio.FIRST_COMPLETED)
        for task in [*tasks, stopper, *sim._chains.values()]:
            task.cancel()
        await asyncio.gather(*tasks, stopper, return_exceptions=True)
        for task in done:
            if task is not stopper and not task.cancelled():
                error = task.exception()
                if error is not None:
                    raise error


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="allocbridge local cluster: kubelet simulation")
    parser.add_argument("--kubeconfig", type=Path, required=True)
    parser.add_argument("--root", type=Path, required=True, help="sandbox root of the pods")
    parser.add_argument("--standins", type=Path, required=True, help="stand-in folder")
    parser.add_argument("--run-as", default="", help="UID:GID the exec commands run as")
    parser.add_argument("--ready-file", type=Path, default=None)
    args = parser.parse_args(argv)
    run_as = None
    if args.run_as:
        uid, gid = args.run_as.split(":")
        run_as = (int(uid), int(gid))
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    config = SimulationConfig(args.kubeconfig, args.root, args.standins, run_as, args.ready_file)
    asyncio.run(run(config))


if __name__ == "__main__":
    main()
