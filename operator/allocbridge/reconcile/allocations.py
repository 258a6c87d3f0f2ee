"""Reconciles one Allocation at a time onto its pod, level-triggered.

Watch events for an Allocation, its pod or the pod's Kubernetes Events update `Observed` (the
latest body of each) and mark the allocation dirty; one worker per allocation then applies
`allocbridge.model.status.derive` to what was observed. Bursts coalesce into one pass and
passes for one allocation never overlap. Passes read memory, not the API server, which is the
bottleneck when hundreds of allocations start at once; where memory may be behind, they ask:

- an allocation that is not observed is read (GET);
- a pod that is not observed although the status says one was created is read, so a slow pod
  watch never looks like a vanished pod; so is every pod on a pass caused by a (re-)list, which
  is how Kopf resumes after a pause, when deletions may have been missed;
- a status write conflict (409) or a 404 drops what was observed, and the next pass reads.

Every write's response goes back into `Observed`, so a pass never works from something older
than its own last write. The pod's name is fixed, so creating it twice is impossible; an
operator restarted half-way lists everything again and converges.

Status writes are coalesced: a change that only adds information (the node, task events, the
bookkeeping of what was seen, the first write of a pending allocation) waits up to `coalesce`
seconds for the next change that matters (a task or client status, a stop, a restart), and
goes out with it in one PATCH: a pod that starts within that time costs a single status write.
The first write of an allocation whose start shows no trouble (no Warning Event, no waiting
reason) waits longer, up to `start_hold` seconds, for the start itself: when hundreds start at
once and the API server is the bottleneck, a start takes longer than `coalesce`, and a pending
write that the running one replaces moments later would double the writes. Trouble cuts the
wait back to `coalesce`, so a failing pull or an unschedulable pod still shows within seconds.
Later passes derive from the held-back status, so nothing a pass added is lost, unless someone
else writes the status meanwhile (then the pass starts again from what is written). A clean stop
writes what is still held (`stop`); the price left: an operator that dies within those seconds
has not written what it held, so a pod deleted while no operator runs is replaced without a
restart being counted.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from allocbridge.actions.lifecycle import ActionError, Actions, Target
from allocbridge.cluster.errors import ConflictError, KubernetesError, NotFoundError
from allocbridge.cluster.resources import Json, Kube
from allocbridge.model import pods
from allocbridge.model import schedule as sched
from allocbridge.model.placement import KnownNode, node_fields
from allocbridge.model.spec import AllocationSpec
from allocbridge.model.status import (
    KubeEvent,
    derive,
    merge_patch,
    parse_time_ns,
    validation_failed,
)
from allocbridge.model.validation import parse_and_validate
from allocbridge.reconcile.observed import Observed, key_of

log = logging.getLogger(__name__)

Key = tuple[str, str]  # (namespace, allocation name)

#: Seconds an informational status change may wait to be written with the next one: long
#: enough to cover a pod's way from created to running on a busy API server (when the node,
#: the Scheduled event and the start would otherwise be three writes), short enough that an
#: image pull error still shows within seconds.
DEFAULT_COALESCE = 5.0

#: Seconds the first write of a routinely starting allocation may wait for the start (see the
#: module docstring): above the slowest start of a burst of 500 on a 2-core machine (about
#: 15 s), and bounded, so a long but routine image pull shows its events within half a minute.
DEFAULT_START_HOLD = 30.0

#: Seconds a clean stop may spend writing the held-back statuses (all at once, concurrently).
FLUSH_TIMEOUT = 5.0

#: Status keys (top level) whose changes alone need no immediate write; in `taskStates`, a
#: task whose only change is new events needs none either.
_INFORMATIONAL = frozenset(
    {"nodeName", "nodeID", "seenEvents", "seenEventsUntil", "observed", "modifyTime"}
)

#: What the first write of a pending allocation may hold besides: its bookkeeping and the
#: initial pending status, which is what the API shows for an allocation without a status.
_FIRST = _INFORMATIONAL | {
    "createIndex",
    "createTime",
    "desiredStatus",
    "podCreated",
    "podName",
    "clientStatus",
    "clientDescription",
    "taskStates",
}


def urgent(patch: Mapping[str, Any], previous: Mapping[str, Any]) -> bool:
    """Whether a status merge patch changes something a client waits for, not just adds detail.

    The first write of an allocation that is still pending, when nothing else has written its
    status, is not urgent either: until it lands the API already shows it pending, and the
    CreateIndex it records is the object's version, which the API shows meanwhile.
    """
    if not previous and "createIndex" in patch:
        return not (
            set(patch) <= _FIRST
            and patch.get("clientStatus", "pending") == "pending"
            and patch.get("desiredStatus", "run") == "run"
            and all(
                isinstance(task, Mapping) and task.get("state", "pending") == "pending"
                for task in (patch.get("taskStates") or {}).values()
            )
        )
    for key, value in patch.items():
        if key == "taskStates" and isinstance(value, Mapping):
            for task in value.values():
                if not isinstance(task, Mapping) or set(task) - {"events"}:
                    return True
        elif key not in _INFORMATIONAL:
            return True
    return False


def routine_start(
    written: Mapping[str, Any], status: Mapping[str, Any], events: Sequence[KubeEvent]
) -> bool:
    """Whether `status` is the first write of an allocation that is starting without trouble:
    nothing written yet, still pending, no Warning Event about its pod and no task waiting for
    a reason (a pull error, a crash back-off)."""
    if written or status.get("clientStatus", "pending") != "pending":
        return False
    if any(event.type != "Normal" for event in events):
        return False
    seen = (status.get("observed") or {}).values()
    return not any(isinstance(task, Mapping) and task.get("waiting") for task in seen)


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
        self,
        kube: Kube,
        settings: pods.PodSettings,
        actions: Actions | None = None,
        *,
        coalesce: float = DEFAULT_COALESCE,
        start_hold: float = DEFAULT_START_HOLD,
        paused: Callable[[], bool] = lambda: False,
    ) -> None:
        self.kube = kube
        # Whether Kopf's peering has paused this replica (see `pausing`): then its watches
        # stand still and what it holds grows stale, so timers fire no pass.
        self.paused = paused
        self.settings = settings
        self.actions = actions
        self.coalesce = coalesce
        self.start_hold = start_hold
        self.observed = Observed()
        self.dirty: set[Key] = set()
        self.workers: dict[Key, asyncio.Task[None]] = {}
        self.timers: dict[Key, asyncio.TimerHandle] = {}
        self.nodes: dict[str, KnownNode] = {}  # by name, kept current by `node_event`
        # The resourceVersion each allocation's last status write produced: the watch event
        # of that version only echoes what this reconciler wrote, so it needs no pass.
        self.written: dict[Key, str] = {}
        self.verify: set[Key] = set()  # next pass reads the pod: it was (re-)listed
        # Held-back status writes: (loop time it was first held back, the resourceVersion it
        # was derived from, the status). The next pass derives from it, not from the written
        # status, so what one pass added (events of a transition) is never derived away.
        self.held: dict[Key, tuple[float, str, Json]] = {}
        self.first_versions: dict[Key, int] = {}  # createIndex of allocations not written yet
        # Parsed specs by allocation, with the (uid, generation) they were parsed from.
        self.specs: dict[Key, tuple[tuple[str, Any], AllocationSpec | None, list[str]]] = {}

    # -- watch events (Kopf's handlers in `runner`) ---------------------------------------

    def allocation_event(self, event_type: str | None, body: Json) -> None:
        """An Allocation watch event: a pass, unless it is the echo of our own last write."""
        key = key_of(body)
        if event_type == "DELETED":
            self.observed.drop_allocation(body)
            self._forget(key)
            return  # the pod goes with it through its owner reference
        self.observed.put_allocation(body)
        if event_type is None:  # listed: Kopf started or resumed watching
            self.verify.add(key)
        version = (body.get("metadata") or {}).get("resourceVersion")
        if version is None or self.written.get(key) != version:
            self.schedule(*key)

    def pod_event(self, event_type: str | None, body: Json, allocation: str) -> None:
        """A watch event of a pod this operator manages, owned by Allocation `allocation`."""
        if event_type == "DELETED":
            self.observed.drop_pod(body)
        else:
            self.observed.put_pod(body)
        key = (key_of(body)[0], allocation)
        if self.observed.knows(key):
            self.schedule(*key)

    def node_event(self, event_type: str | None, body: Json) -> None:
        """A Node watch event: which node each name stands for now. A name can come back as a
        new node (see `allocbridge.model.placement`), which is why a read is not kept forever."""
        name = (body.get("metadata") or {}).get("name")
        known = KnownNode.of(body)
        if not name or known is None:
            return
        if event_type != "DELETED":
            self.nodes[name] = known
        elif self.nodes.get(name) == known:
            del self.nodes[name]

    def kubernetes_event(self, event_type: str | None, body: Mapping[str, Any]) -> None:
        """A Kubernetes Event about a pod, kept by the pod's uid (at first whosever the pod
        is: it may arrive before the pod; see `observed`), and a pass for the allocation of
        that name."""
        involved = body.get("involvedObject") or {}
        pod_uid = str(involved.get("uid") or "")
        if event_type == "DELETED":
            self.observed.drop_event(pod_uid, str((body.get("metadata") or {}).get("uid", "")))
            return
        key = (str(involved.get("namespace") or ""), str(involved.get("name") or ""))
        self.observed.put_event(pod_uid, key, kube_event(body), now=time.monotonic())
        if self.observed.knows(key):
            self.schedule(*key)

    def _forget(self, key: Key) -> None:
        """Drop what is kept per allocation, once it is gone, and its pending pass: that pass
        would find nothing in memory and ask the API server for an allocation that is gone
        (or for a new one of the same name, before its own events arrive)."""
        timer = self.timers.pop(key, None)
        if timer is not None:
            timer.cancel()
        self.written.pop(key, None)
        self.verify.discard(key)
        self.held.pop(key, None)
        self.first_versions.pop(key, None)
        self.specs.pop(key, None)

    # -- passes ---------------------------------------------------------------------------

    def schedule(self, namespace: str, name: str, delay: float = 0.0) -> None:
        """Ask for a pass over `namespace/name` now, or after `delay` seconds (a pending timer
        that fires sooner is kept: a pass is level-triggered, an early one does no harm)."""
        key = (namespace, name)
        if delay > 0:
            loop = asyncio.get_running_loop()
            timer = self.timers.get(key)
            if timer is not None and not timer.cancelled():
                if timer.when() <= loop.time() + delay:
                    return
                timer.cancel()
            self.timers[key] = loop.call_later(delay, self._due, namespace, name)
            return
        self.dirty.add(key)
        if key not in self.workers:
            self.workers[key] = asyncio.create_task(self._work(key), name=f"reconcile {key}")

    def _due(self, namespace: str, name: str) -> None:
        """A timer's pass, unless the replica is paused: the replica that leads acts now, and
        this one, when it resumes, makes a pass over every allocation Kopf lists again."""
        self.timers.pop((namespace, name), None)
        if self.paused():
            log.debug("paused: no pass", extra={"allocation": f"{namespace}/{name}"})
            return
        self.schedule(namespace, name)

    async def _work(self, key: Key) -> None:
        try:
            while key in self.dirty:
                self.dirty.discard(key)
                try:
                    await self.reconcile(*key)
                except ConflictError:
                    # A concurrent write: what was observed is out of date; read again, retry.
                    self.observed.forget_allocation(key)
                    self.dirty.add(key)
                except NotFoundError:
                    # Deleted while we worked (the next read says so).
                    self.observed.forget_allocation(key)
                except KubernetesError as exc:
                    log.warning(
                        "reconcile failed; retrying",
                        extra={
                            "allocation": "/".join(key),
                            "status": exc.status,
                            "error": exc.message,
                        },
                    )
                    self.schedule(*key, delay=2.0)
                except Exception:
                    log.exception("reconcile failed; retrying", extra={"allocation": "/".join(key)})
                    self.schedule(*key, delay=5.0)
        finally:
            self.workers.pop(key, None)

    async def stop(self, flush_timeout: float = FLUSH_TIMEOUT) -> None:
        """Cancel every timer and pass, then write what is held back, unless paused (then
        the leading replica writes)."""
        for timer in self.timers.values():
            timer.cancel()
        for worker in list(self.workers.values()):
            worker.cancel()
        await asyncio.gather(*self.workers.values(), return_exceptions=True)
        if not self.paused():
            await self.flush(flush_timeout)

    async def flush(self, timeout: float) -> None:  # noqa: ASYNC109
        """Write every held-back status still derived from the allocation as observed now, as
        its timer would have: a clean stop loses nothing a pass saw. A status written by
        someone else meanwhile wins (the write's precondition, a 409), as in a pass."""
        writes = []
        for key, (_, version, status) in list(self.held.items()):
            alloc = self.observed.allocation(key)
            if alloc is not None and alloc["metadata"].get("resourceVersion") == version:
                writes.append(self._write(alloc, alloc.get("status") or {}, status, patience=0))
        self.held.clear()
        if not writes:
            return
        try:
            async with asyncio.timeout(timeout):
                results = await asyncio.gather(*writes, return_exceptions=True)
        except TimeoutError:
            log.warning("held status writes not all flushed in time", extra={"timeout": timeout})
            return
        failed = [r for r in results if isinstance(r, BaseException)]
        log.info(
            "held status writes flushed",
            extra={"written": len(results) - len(failed), "failed": len(failed)},
        )

    async def reconcile(self, namespace: str, name: str) -> None:
        log.debug("reconcile pass", extra={"allocation": f"{namespace}/{name}"})
        key = (namespace, name)
        alloc = self.observed.allocation(key)
        if alloc is None:
            alloc = await self.kube.get_allocation(namespace, name)
            if alloc is not None:
                self.observed.put_allocation(alloc)
        if alloc is None or alloc["metadata"].get("deletionTimestamp"):
            self._forget(key)
            return  # deleted: the pod goes with it through its owner reference
        meta = alloc["metadata"]
        written: Json = alloc.get("status") or {}
        previous = self._base(key, meta, written)
        now = time.time_ns()
        bookkeeping = self._bookkeeping(alloc, previous, now)
        spec, problems = self._spec(alloc)
        if spec is None or problems:
            if previous.get("clientStatus") != "failed":
                names = [t.get("name", "task") for t in (alloc.get("spec") or {}).get("tasks", [])]
                status = {**bookkeeping, **validation_failed(names, problems, now)}
                await self._write(alloc, written, status)
                log.info(
                    "allocation failed validation",
                    extra={"allocation": f"{namespace}/{name}", "problems": problems},
                )
            return

        pod = await self._pod(key, previous)
        if pod is not None and not _owned_by(pod, meta["uid"]):
            log.warning("a pod of the allocation's name belongs to something else; waiting")
            self.schedule(namespace, name, delay=5.0)
            return
        events: list[KubeEvent] = []
        node: KnownNode | None = None
        if pod is not None:
            events = self.observed.pod_events(pod["metadata"]["uid"])
            node = await self._known_node(pod)
        decision = derive(
            spec,
            {**previous, **bookkeeping},
            pod,
            now,
            events,
            container_restart_policies=node is None or node.container_restart_policies is not False,
        )
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
            # Recorded from the pod that exists, not only when this pass created it: the write
            # of the pass that created it may have been held back and merged into this one.
            status["podCreated"] = True
            status["podName"] = name
            status.update(node_fields(pod, node, previous))

        if decision.create_pod:
            body = pods.render_pod(
                name=name, namespace=namespace, uid=meta["uid"], spec=spec, settings=self.settings
            )
            created = await self.kube.create_pod(namespace, body)
            status["podCreated"] = True
            status["podName"] = name
            log.info(
                "created pod" if created else "pod exists already",
                extra={"allocation": f"{namespace}/{name}", "pod": name},
            )
            if created is None:  # not observed yet: read it, and look again with it
                existing = await self.kube.get_pod(namespace, name)
                if existing is not None:
                    self.observed.put_pod(existing)
                self.schedule(namespace, name)
            else:
                self.observed.put_pod(created)
        if decision.delete_pod and pod is not None:
            await self.kube.delete_pod(
                namespace, name, pods.termination_grace_seconds(spec), uid=pod["metadata"]["uid"]
            )
        patience = self.start_hold if routine_start(written, status, events) else self.coalesce
        await self._write(alloc, written, status, patience)
        self.verify.discard(key)
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

    async def _pod(self, key: Key, previous: Json) -> Json | None:
        """The allocation's pod as observed; read when memory may be behind (see the module
        docstring): on a pass after a (re-)list, or when a pod should exist but is not seen."""
        pod = self.observed.pod(key)
        expected = previous.get("podCreated") or previous.get("recreatePod")
        if key not in self.verify and (pod is not None or not expected):
            return pod
        found = await self.kube.get_pod(*key)
        if found is not None:
            self.observed.put_pod(found)
        elif pod is not None:
            self.observed.drop_pod(pod)
        return found

    def _spec(self, alloc: Json) -> tuple[AllocationSpec | None, list[str]]:
        """The parsed and validated spec, once per object: the spec is immutable (the CRD
        refuses changes), and parsing it was a third of a pass's CPU."""
        meta = alloc["metadata"]
        key = (meta["namespace"], meta["name"])
        version = (str(meta.get("uid", "")), meta.get("generation"))
        cached = self.specs.get(key)
        if cached is not None and cached[0] == version:
            return cached[1], cached[2]
        spec, found = parse_and_validate(alloc.get("spec") or {})
        problems = [str(p) for p in found]
        self.specs[key] = (version, spec, problems)
        return spec, problems

    def _bookkeeping(self, alloc: Json, previous: Json, now: int) -> Json:
        """Fields recorded once, at first observation (design.md: CreateIndex)."""
        meta = alloc["metadata"]
        key = (meta["namespace"], meta["name"])
        out: Json = {}
        if "createIndex" not in previous:
            # The version first observed, even if the write that records it is held back
            # while others write the object.
            first = self.first_versions.setdefault(key, int(meta["resourceVersion"]))
            out["createIndex"] = first
            out["createTime"] = parse_time_ns(meta.get("creationTimestamp")) or now
        else:
            self.first_versions.pop(key, None)
        if "desiredStatus" not in previous:
            out["desiredStatus"] = "run"
        return out

    async def _known_node(self, pod: Json) -> KnownNode | None:
        """The node the pod's node name stands for now: from the node watch, else read."""
        name = (pod.get("spec") or {}).get("nodeName")
        if not name:
            return None
        known = self.nodes.get(name)
        if known is None:
            node = await self.kube.get_node(name)
            known = KnownNode.of(node) if node is not None else None
            if known is not None:
                self.nodes[name] = known
        return known

    def _base(self, key: Key, meta: Json, written: Json) -> Json:
        """The status a pass derives from: the held-back one if it was derived from the
        object as it is now, else (someone else wrote meanwhile) what is written."""
        held = self.held.get(key)
        if held is not None and held[1] == meta["resourceVersion"]:
            return held[2]
        self.held.pop(key, None)
        return written

    async def _write(
        self, alloc: Json, written: Json, status: Json, patience: float | None = None
    ) -> None:
        """PATCH the status change, or hold back an informational one for up to `patience`
        seconds since it was first held (default `coalesce`; see the module docstring)."""
        meta = alloc["metadata"]
        key = (meta["namespace"], meta["name"])
        patch = merge_patch(written, status)
        if not patch:
            self.held.pop(key, None)
            return
        patience = self.coalesce if patience is None else patience
        if patience > 0 and not urgent(patch, written):
            now = asyncio.get_running_loop().time()
            held = self.held.get(key)
            since = held[0] if held is not None else now
            if since + patience > now:
                self.held[key] = (since, meta["resourceVersion"], status)
                log.debug("status write held back", extra={"allocation": "/".join(key)})
                self.schedule(*key, delay=since + patience - now)
                return
        self.held.pop(key, None)
        patch["modifyTime"] = time.time_ns()
        written = await self.kube.patch_allocation_status(
            meta["namespace"], meta["name"], patch, meta["resourceVersion"]
        )
        self.observed.put_allocation(written)
        version = (written.get("metadata") or {}).get("resourceVersion")
        if version:
            self.written[key] = str(version)


def _owned_by(pod: Json, uid: str) -> bool:
    owners = (pod.get("metadata") or {}).get("ownerReferences") or []
    return any(o.get("uid") == uid for o in owners)
