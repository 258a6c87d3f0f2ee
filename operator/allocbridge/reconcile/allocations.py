"""Reconciles one Allocation at a time onto its pod, level-triggered.

Watch events for an Allocation, its pod or the pod's Kubernetes Events only mark the allocation
dirty; one worker per allocation then reads the current objects and applies
`allocbridge.model.status.derive`. Bursts coalesce into one pass, passes for one allocation never
overlap, and every pass starts from what the API server says now, so an operator restarted
half-way simply converges (the pod's name is fixed, so creating it twice is impossible).
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import time
from collections.abc import Mapping
from typing import Any

from kubernetes_asyncio.client.exceptions import ApiException

from allocbridge.actions.lifecycle import ActionError, Actions, Target
from allocbridge.cluster.resources import Json, Kube
from allocbridge.model import pods
from allocbridge.model import schedule as sched
from allocbridge.model.spec import AllocationSpec
from allocbridge.model.status import (
    KubeEvent,
    derive,
    merge_patch,
    parse_time_ns,
    validation_failed,
)
from allocbridge.model.validation import parse_and_validate

log = logging.getLogger(__name__)

Key = tuple[str, str]  # (namespace, allocation name)


def kube_event(event: Mapping[str, Any]) -> KubeEvent:
    """A Kubernetes Event about a pod, reduced to what `derive` needs."""
    involved = event.get("involvedObject") or {}
    field_path = str(involved.get("fieldPath") or "")
    container = None
    if "{" in field_path and field_path.endswith("}"):
        container = field_path[field_path.index("{") + 1 : -1]
    stamp = (
        event.get("eventTime")
        or event.get("lastTimestamp")
        or event.get("firstTimestamp")
        or (event.get("metadata") or {}).get("creationTimestamp")
    )
    return KubeEvent(
        uid=str((event.get("metadata") or {}).get("uid", "")),
        reason=str(event.get("reason") or ""),
        message=str(event.get("message") or ""),
        type=str(event.get("type") or "Normal"),
        time_ns=parse_time_ns(stamp) or time.time_ns(),
        container=container,
    )


class Reconciler:
    """Coalescing, per-allocation reconciliation workers."""

    def __init__(
        self, kube: Kube, settings: pods.PodSettings, actions: Actions | None = None
    ) -> None:
        self.kube = kube
        self.settings = settings
        self.actions = actions
        self.dirty: set[Key] = set()
        self.workers: dict[Key, asyncio.Task[None]] = {}
        self.timers: dict[Key, asyncio.TimerHandle] = {}
        self.node_uids: dict[str, str] = {}
        self.known: set[Key] = set()  # allocations seen, so pod Events can find theirs
        # The resourceVersion each allocation's last status write produced: the watch event
        # of that version only echoes what this reconciler wrote, so it needs no pass.
        self.written: dict[Key, str] = {}

    def allocation_changed(self, namespace: str, name: str, resource_version: str | None) -> None:
        """An Allocation watch event: a pass, unless it is the echo of our own last write."""
        key = (namespace, name)
        if resource_version is None or self.written.get(key) != resource_version:
            self.schedule(namespace, name)

    def schedule(self, namespace: str, name: str, delay: float = 0.0) -> None:
        """Ask for a pass over `namespace/name` now, or after `delay` seconds."""
        key = (namespace, name)
        self.known.add(key)
        if delay > 0:
            timer = self.timers.pop(key, None)
            if timer:
                timer.cancel()
            loop = asyncio.get_running_loop()
            self.timers[key] = loop.call_later(delay, self.schedule, namespace, name)
            return
        self.dirty.add(key)
        if key not in self.workers:
            self.workers[key] = asyncio.create_task(self._work(key), name=f"reconcile {key}")

    async def _work(self, key: Key) -> None:
        try:
            while key in self.dirty:
                self.dirty.discard(key)
                try:
                    await self.reconcile(*key)
                except ApiException as exc:
                    if exc.status == 409:  # a concurrent write: read again and retry
                        self.dirty.add(key)
                        continue
                    if exc.status == 404:  # deleted while we worked: nothing left to do
                        continue
                    log.warning(
                        "reconcile failed; retrying",
                        extra={"allocation": "/".join(key), "status": exc.status},
                    )
                    self.schedule(*key, delay=2.0)
                except Exception:
                    log.exception("reconcile failed; retrying", extra={"allocation": "/".join(key)})
                    self.schedule(*key, delay=5.0)
        finally:
            self.workers.pop(key, None)

    async def stop(self) -> None:
        for timer in self.timers.values():
            timer.cancel()
        for worker in list(self.workers.values()):
            worker.cancel()
        await asyncio.gather(*self.workers.values(), return_exceptions=True)

    async def reconcile(self, namespace: str, name: str) -> None:
        log.debug("reconcile pass", extra={"allocation": f"{namespace}/{name}"})
        alloc = await self.kube.get_allocation(namespace, name)
        if alloc is None or alloc["metadata"].get("deletionTimestamp"):
            self.known.discard((namespace, name))
            self.written.pop((namespace, name), None)
            return  # deleted: the pod goes with it through its owner reference
        meta = alloc["metadata"]
        previous: Json = alloc.get("status") or {}
        now = time.time_ns()
        bookkeeping = self._bookkeeping(alloc, previous, now)
        spec, found = parse_and_validate(alloc.get("spec") or {})
        problems = [str(p) for p in found]
        if spec is None or problems:
            if previous.get("clientStatus") != "failed":
                names = [t.get("name", "task") for t in (alloc.get("spec") or {}).get("tasks", [])]
                status = {**bookkeeping, **validation_failed(names, problems, now)}
                await self._write(alloc, previous, status)
                log.info("allocation failed validation", extra={"problems": problems})
            return

        pod = await self.kube.get_pod(namespace, name)
        if pod is not None and not _owned_by(pod, meta["uid"]):
            log.warning("a pod of the allocation's name belongs to something else; waiting")
            self.schedule(namespace, name, delay=5.0)
            return
        events: list[KubeEvent] = []
        if pod is not None:
            pod_events = await self.kube.pod_events(namespace, pod["metadata"]["uid"])
            events = [kube_event(e) for e in pod_events]
        decision = derive(spec, {**previous, **bookkeeping}, pod, now, events)
        log.debug(
            "reconciled",
            extra={
                "allocation": f"{namespace}/{name}",
                "pod": pod is not None,
                "create_pod": decision.create_pod,
                "delete_pod": decision.delete_pod,
                "requeue_after": decision.requeue_after,
            },
        )
        status = decision.status
        if pod is not None:
            await self._node(status, pod)

        if decision.create_pod:
            body = pods.render_pod(
                name=name, namespace=namespace, uid=meta["uid"], spec=spec, settings=self.settings
            )
            created = await self.kube.create_pod(namespace, body)
            status["podCreated"] = True
            status["podName"] = name
            log.info("created pod" if created else "pod exists already", extra={"pod": name})
        if decision.delete_pod and pod is not None:
            await self.kube.delete_pod(
                namespace, name, pods.termination_grace_seconds(spec), uid=pod["metadata"]["uid"]
            )
        await self._write(alloc, previous, status)
        boundary = await self._follow_schedules(alloc, spec, status)
        if boundary is not None:
            decision.requeue_after = min(decision.requeue_after or boundary, boundary)
        if decision.requeue_after is not None:
            self.schedule(namespace, name, delay=max(decision.requeue_after, 0.05))

    async def _follow_schedules(
        self, alloc: Json, spec: AllocationSpec, status: Json
    ) -> float | None:
        """Pause or resume running tasks whose cron window says so; seconds to the next check."""
        if self.actions is None or status.get("desiredStatus") == "stop":
            return None
        meta = alloc["metadata"]
        target = Target(meta["namespace"], meta["name"], meta["uid"])
        now = datetime.datetime.now(datetime.UTC)
        next_check: float | None = None
        for task in spec.tasks:
            if task.schedule is None:
                continue
            state = (status.get("taskStates") or {}).get(task.name) or {}
            next_check = min(next_check or 3600.0, sched.next_boundary(task.schedule, now))
            if state.get("state") != "running":
                continue
            current = str(state.get("paused", ""))
            wanted = sched.settle(current, task.schedule, now)
            refused = ((status.get("observed") or {}).get(task.name) or {}).get("pauseRefused")
            if wanted in (current, refused):
                continue
            try:
                await self.actions.apply_pause(target, task.name, current, wanted, override=False)
            except ActionError as exc:  # recorded once on the task, not retried every pass
                log.warning("schedule not followed: %s", exc.message, extra={"task": task.name})
                await self.actions.refuse_pause(target, task.name, wanted, exc.message)
        return next_check

    def _bookkeeping(self, alloc: Json, previous: Json, now: int) -> Json:
        """Fields recorded once, at first observation (design.md: CreateIndex)."""
        meta = alloc["metadata"]
        out: Json = {}
        if "createIndex" not in previous:
            out["createIndex"] = int(meta["resourceVersion"])
            out["createTime"] = parse_time_ns(meta.get("creationTimestamp")) or now
        if "desiredStatus" not in previous:
            out["desiredStatus"] = "run"
        return out

    async def _node(self, status: Json, pod: Json) -> None:
        node = (pod.get("spec") or {}).get("nodeName")
        if not node:
            return
        if node not in self.node_uids:
            uid = await self.kube.node_uid(node)
            if uid:
                self.node_uids[node] = uid
        status["nodeName"] = node
        status["nodeID"] = self.node_uids.get(node, "")

    async def _write(self, alloc: Json, previous: Json, status: Json) -> None:
        patch = merge_patch(previous, status)
        if not patch:
            return
        patch["modifyTime"] = time.time_ns()
        meta = alloc["metadata"]
        written = await self.kube.patch_allocation_status(
            meta["namespace"], meta["name"], patch, meta["resourceVersion"]
        )
        version = (written.get("metadata") or {}).get("resourceVersion")
        if version:
            self.written[(meta["namespace"], meta["name"])] = str(version)


def _owned_by(pod: Json, uid: str) -> bool:
    owners = (pod.get("metadata") or {}).get("ownerReferences") or []
    return any(o.get("uid") == uid for o in owners)
