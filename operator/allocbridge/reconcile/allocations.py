"""Reconciles one Allocation at a time onto its pod, level-triggered: the pass.

Watch events (`watches`) for an Allocation, its pod or the pod's Kubernetes Events update
`Observed` (the latest body of each) and ask `queue` for a pass: at once for an Allocation,
within `DEFAULT_SETTLE` for a pod's change or an Event, so those that come together cost one
pass; the echo of what a pass holds already (the status it wrote, the pod it created) costs
none. A pass applies
`allocbridge.model.status.derive` to what was observed, creates or deletes the pod, writes the
status through `writes` (which may hold it back to coalesce it with the next change), and
follows the tasks' pause `schedules`. Passes read memory, not the API server, which is the
bottleneck when hundreds of allocations start at once; where memory may be behind, they ask:

- an allocation that is not observed is read (GET);
- a pod that is not observed although the status says one was created is read, so a slow pod
  watch never looks like a vanished pod; so is every pod on a pass caused by a (re-)list, which
  is how the watches resume after Kopf's peering paused them, when deletions may have been
  missed;
- a status write conflict (409) or a 404 drops what was observed, and the next pass reads.

The pod's name is fixed, so creating it twice is impossible; an operator restarted half-way
lists everything again and converges.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from allocbridge.actions.lifecycle import Actions
from allocbridge.cluster.errors import ConflictError, KubernetesError, NotFoundError
from allocbridge.cluster.resources import Json, Kube
from allocbridge.model import pods
from allocbridge.model.allocstatus import (
    CLIENT_STATUS,
    CREATE_INDEX,
    CREATE_TIME,
    DESIRED_RUN,
    DESIRED_STATUS,
    FAILED,
    POD_CREATED,
    POD_NAME,
    RECREATE_POD,
)
from allocbridge.model.placement import KnownNode, node_fields
from allocbridge.model.sharedspecs import SharedSpecs
from allocbridge.model.spec import AllocationSpec
from allocbridge.model.status import KubeEvent, derive, parse_time_ns, validation_failed
from allocbridge.reconcile.kubeevents import kube_event
from allocbridge.reconcile.observed import Observed, key_of
from allocbridge.reconcile.queue import Key, WorkQueue
from allocbridge.reconcile.schedules import follow_schedules
from allocbridge.reconcile.writes import (
    DEFAULT_COALESCE,
    DEFAULT_START_HOLD,
    FLUSH_TIMEOUT,
    StatusWrites,
)

log = logging.getLogger(__name__)

#: Seconds a pass asked for by a pod's change or a Kubernetes Event waits for more of them: a
#: pod's binding and its Scheduled Event, or the kubelet's status writes of one start, arrive
#: together and cost one pass instead of one each. Nomad's client, likewise, sends its
#: allocations' changes to the servers in batches every 200 ms.
DEFAULT_SETTLE = 0.2


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
        settle: float = DEFAULT_SETTLE,
        paused: Callable[[], bool] = lambda: False,
    ) -> None:
        self.kube = kube
        self.settle = settle
        # Whether Kopf's peering has paused this replica (see `peering`): then its watches
        # stand still and what it holds grows stale, so timers fire no pass.
        self.paused = paused
        self.settings = settings
        self.actions = actions
        self.observed = Observed()
        self.queue = WorkQueue(self._pass, paused)
        self.writes = StatusWrites(
            kube, self.observed, self.queue.schedule, coalesce=coalesce, start_hold=start_hold
        )
        self.nodes: dict[str, KnownNode] = {}  # by name, kept current by `node_event`
        self.verify: set[Key] = set()  # next pass reads the pod: it was (re-)listed
        self.first_versions: dict[Key, int] = {}  # createIndex of allocations not written yet
        # Parsed specs by allocation, with the (uid, generation) they were parsed from; the
        # parses themselves are shared by allocations with equal specs (`shared_specs`).
        self.specs: dict[Key, tuple[tuple[str, Any], AllocationSpec | None, list[str]]] = {}
        self.shared_specs = SharedSpecs()

    @property
    def timers(self) -> dict[Key, asyncio.TimerHandle]:
        """The pending timed passes (see `queue`)."""
        return self.queue.timers

    @property
    def workers(self) -> dict[Key, asyncio.Task[None]]:
        """The running passes (see `queue`)."""
        return self.queue.workers

    @property
    def held(self) -> dict[Key, tuple[float, str, Json]]:
        """The held-back status writes (see `writes`)."""
        return self.writes.held

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
        if not self.writes.echoes(key, (body.get("metadata") or {}).get("resourceVersion")):
            self.schedule(*key)

    def pod_event(self, event_type: str | None, body: Json, allocation: str) -> None:
        """A watch event of a pod this operator manages, owned by Allocation `allocation`: a
        pass, unless it only echoes the version a pass already holds (the pod it created)."""
        key = (key_of(body)[0], allocation)
        if event_type == "DELETED":
            self.observed.drop_pod(body)
        elif self.observed.holds_pod(body) and key not in self.verify:
            return
        else:
            self.observed.put_pod(body)
        if self.observed.knows(key):
            self.schedule(*key, delay=self.settle)

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
            self.schedule(*key, delay=self.settle)

    def _forget(self, key: Key) -> None:
        """Drop what is kept per allocation, once it is gone, and its pending pass: that pass
        would find nothing in memory and ask the API server for an allocation that is gone
        (or for a new one of the same name, before its own events arrive)."""
        self.queue.cancel(key)
        self.writes.forget(key)
        self.verify.discard(key)
        self.first_versions.pop(key, None)
        self.specs.pop(key, None)

    # -- passes ---------------------------------------------------------------------------

    def schedule(self, namespace: str, name: str, delay: float = 0.0) -> None:
        """Ask for a pass over `namespace/name` now, or after `delay` seconds (see `queue`)."""
        self.queue.schedule((namespace, name), delay)

    async def _pass(self, key: Key) -> None:
        """One pass, its failures turned into what comes next: a conflict reads again and
        retries at once, a deletion reads again, anything else retries after a while."""
        try:
            await self.reconcile(*key)
        except ConflictError:
            # A concurrent write: what was observed is out of date; read again, retry.
            self.observed.forget_allocation(key)
            self.schedule(*key)
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

    async def stop(self, flush_timeout: float = FLUSH_TIMEOUT) -> None:
        """Cancel every timer and pass, then write what is held back, unless paused (then
        the leading replica writes)."""
        await self.queue.stop()
        if not self.paused():
            await self.writes.flush(flush_timeout)

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
        previous = self.writes.base(key, meta, written)
        now = time.time_ns()
        bookkeeping = self._bookkeeping(alloc, previous, now)
        spec, problems = self._spec(alloc)
        if spec is None or problems:
            if previous.get(CLIENT_STATUS) != FAILED:
                names = [t.get("name", "task") for t in (alloc.get("spec") or {}).get("tasks", [])]
                status = {**bookkeeping, **validation_failed(names, problems, now)}
                await self.writes.write(alloc, written, status)
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
            status[POD_CREATED] = True
            status[POD_NAME] = name
            status.update(node_fields(pod, node, previous))

        if decision.create_pod:
            body = pods.render_pod(
                name=name, namespace=namespace, uid=meta["uid"], spec=spec, settings=self.settings
            )
            created = await self.kube.create_pod(namespace, body)
            status[POD_CREATED] = True
            status[POD_NAME] = name
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
        await self.writes.write(
            alloc, written, status, self.writes.patience(written, status, events)
        )
        self.verify.discard(key)
        boundary = None
        if self.actions is not None:
            boundary = await follow_schedules(self.actions, alloc, spec, status)
        if boundary is not None:
            decision.requeue_after = min(decision.requeue_after or boundary, boundary)
        if decision.requeue_after is not None:
            self.schedule(namespace, name, delay=max(decision.requeue_after, 0.05))

    async def _pod(self, key: Key, previous: Json) -> Json | None:
        """The allocation's pod as observed; read when memory may be behind (see the module
        docstring): on a pass after a (re-)list, or when a pod should exist but is not seen."""
        pod = self.observed.pod(key)
        expected = previous.get(POD_CREATED) or previous.get(RECREATE_POD)
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
        refuses changes), and parsing it was a third of a pass's CPU; once per distinct spec,
        too (see `model.sharedspecs`)."""
        meta = alloc["metadata"]
        key = (meta["namespace"], meta["name"])
        version = (str(meta.get("uid", "")), meta.get("generation"))
        cached = self.specs.get(key)
        if cached is not None and cached[0] == version:
            return cached[1], cached[2]
        spec, found = self.shared_specs.parse(alloc.get("spec") or {})
        problems = list(found)
        self.specs[key] = (version, spec, problems)
        return spec, problems

    def _bookkeeping(self, alloc: Json, previous: Json, now: int) -> Json:
        """Fields recorded once, at first observation (design.md: CreateIndex)."""
        meta = alloc["metadata"]
        key = (meta["namespace"], meta["name"])
        out: Json = {}
        if CREATE_INDEX not in previous:
            # The version first observed, even if the write that records it is held back
            # while others write the object.
            first = self.first_versions.setdefault(key, int(meta["resourceVersion"]))
            out[CREATE_INDEX] = first
            out[CREATE_TIME] = parse_time_ns(meta.get("creationTimestamp")) or now
        else:
            self.first_versions.pop(key, None)
        if DESIRED_STATUS not in previous:
            out[DESIRED_STATUS] = DESIRED_RUN
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


def _owned_by(pod: Json, uid: str) -> bool:
    owners = (pod.get("metadata") or {}).get("ownerReferences") or []
    return any(o.get("uid") == uid for o in owners)
