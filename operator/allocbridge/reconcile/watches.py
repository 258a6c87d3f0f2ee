"""The reconciler's watches: Allocations, their pods, Events about pods and Nodes, streamed to
the `Reconciler` while Kopf's peering lets this replica lead.

Kopf used to deliver these through `on.event` handlers. Its per-event machinery (a body view,
three loggers, cause detection, handler selection and invocation under timeouts, all in Python,
after a decode with the standard library's json) cost more CPU than the reconciliation itself:
a start of 500 Allocations is about 5,500 watch events. Here each event is decoded with orjson
and handed to the reconciler's intake as it is (`cluster.watch`); Kopf keeps the peering, which
decides whether this replica reconciles at all.

Allocations and pods are not watched here: the store feed, which every replica runs, watches
the same ones, and hands what it decoded on (`FedStreams`, `store.relay`), so each event is
read and decoded once per replica and the API server has one watcher of each fewer. Events
about pods and Nodes are watched here, as only the reconciler reads them.

Kopf's rules for its own watches are kept: nothing is followed while the replica is paused
(`peering`), and resuming lists every object again (for Allocations and pods: what the store
feed holds of them then), which the reconciler takes as a listed object (event type None: its
pod is read once more, as after any list). The API server filters the pods (the operator's
label) and the Events (about pods), so other workloads cost neither side. Allocations, pods
and Events are followed in each configured namespace, or cluster-wide.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol

from allocbridge.cluster.resources import Json
from allocbridge.cluster.watch import Changed, Listed, ObjectWatches
from allocbridge.model.pods import MANAGED_SELECTOR, owning_allocation
from allocbridge.reconcile.allocations import Reconciler
from allocbridge.reconcile.peering import PeeringPause
from allocbridge.store.relay import ALLOCATIONS, PODS, FeedRelay

log = logging.getLogger(__name__)

#: The Events the reconciler reads: those about pods (`involvedObject.kind=Pod`).
POD_EVENTS = "involvedObject.kind=Pod"

#: Seconds between two warnings about interrupted watches (each stream retries within 5 s).
WARN_EVERY = 30.0

Intake = Callable[[str | None, Json], None]


class Streams(Protocol):
    """Where the reconciler's streams come from (`ObjectWatches`' calls)."""

    def allocations(self, namespace: str | None) -> AsyncIterator[Listed | Changed]: ...

    def pods(
        self, namespace: str | None, label_selector: str
    ) -> AsyncIterator[Listed | Changed]: ...

    def events(
        self, namespace: str | None, field_selector: str
    ) -> AsyncIterator[Listed | Changed]: ...

    def nodes(self) -> AsyncIterator[Listed | Changed]: ...


class FedStreams:
    """Allocations and pods as the store feed read them (`relay`), Events and Nodes from watches
    of the reconciler's own (`watches`)."""

    def __init__(self, relay: FeedRelay, watches: ObjectWatches) -> None:
        self.relay = relay
        self.watches = watches

    def allocations(self, namespace: str | None) -> AsyncIterator[Listed | Changed]:
        return self.relay.follow(ALLOCATIONS, namespace)

    def pods(self, namespace: str | None, label_selector: str) -> AsyncIterator[Listed | Changed]:
        if label_selector != MANAGED_SELECTOR:  # the feed watches the managed pods only
            raise ValueError(f"the store feed does not watch pods by {label_selector!r}")
        return self.relay.follow(PODS, namespace)

    def events(self, namespace: str | None, field_selector: str) -> AsyncIterator[Listed | Changed]:
        return self.watches.events(namespace, field_selector)

    def nodes(self) -> AsyncIterator[Listed | Changed]:
        return self.watches.nodes()


class ReconcilerWatches:
    """The watches feeding one reconciler; `run` follows the pause until cancelled."""

    def __init__(
        self,
        reconciler: Reconciler,
        streams: Callable[[Callable[[Exception], None]], Streams],
        namespaces: tuple[str, ...],
        pause: PeeringPause | None = None,
    ) -> None:
        self.reconciler = reconciler
        self.watches = streams(self._interrupted)
        self.namespaces: tuple[str | None, ...] = namespaces or (None,)
        self.pause = pause
        self.last_warning = -WARN_EVERY

    @staticmethod
    def count(namespaces: tuple[str, ...]) -> int:
        """How many watches of the reconciler's own (each a connection) follow `namespaces`
        with `FedStreams` (see `_streams`): Nodes, and Events in each namespace."""
        return 1 + max(1, len(namespaces))

    def _streams(self) -> list[tuple[str, AsyncIterator[Listed | Changed], Intake]]:
        reconciler = self.reconciler
        out: list[tuple[str, AsyncIterator[Listed | Changed], Intake]] = [
            ("nodes", self.watches.nodes(), reconciler.node_event)
        ]
        for namespace in self.namespaces:
            where = namespace or "all namespaces"
            out += [
                (
                    f"allocations in {where}",
                    self.watches.allocations(namespace),
                    reconciler.allocation_event,
                ),
                (
                    f"pods in {where}",
                    self.watches.pods(namespace, MANAGED_SELECTOR),
                    self._pod_event,
                ),
                (
                    f"events in {where}",
                    self.watches.events(namespace, POD_EVENTS),
                    self._kubernetes_event,
                ),
            ]
        return out

    def _pod_event(self, event_type: str | None, body: Json) -> None:
        allocation = owning_allocation(body)
        if allocation is not None:
            self.reconciler.pod_event(event_type, body, allocation)

    def _kubernetes_event(self, event_type: str | None, body: Json) -> None:
        involved = body.get("involvedObject") or {}
        if involved.get("kind") == "Pod" and involved.get("name"):
            self.reconciler.kubernetes_event(event_type, body)

    def _interrupted(self, exc: Exception) -> None:
        """A stream lost its connection and resumes (with back-off): warn now and then."""
        now = time.monotonic()
        if now - self.last_warning >= WARN_EVERY:
            self.last_warning = now
            log.warning(
                "a watch of the reconciler was interrupted; resuming", extra={"error": repr(exc)}
            )

    async def run(self) -> None:
        """Watch while leading; on a pause stop every stream, on resuming start them again."""
        changed = asyncio.Event()
        loop = asyncio.get_running_loop()

        def told(_: bool) -> None:
            loop.call_soon_threadsafe(changed.set)

        if self.pause is not None:
            self.pause.listeners.append(told)
        try:
            while True:
                changed.clear()
                if self.pause is not None and self.pause.paused:
                    await changed.wait()
                    continue
                log.debug("the reconciler's watches start")
                tasks = [
                    asyncio.create_task(_follow(stream, intake, what), name=f"watch {what}")
                    for what, stream, intake in self._streams()
                ]
                try:
                    await changed.wait()
                finally:
                    for task in tasks:
                        task.cancel()
                    await asyncio.gather(*tasks, return_exceptions=True)
                log.debug("the reconciler's watches stop: paused")
        finally:
            if self.pause is not None:
                with contextlib.suppress(ValueError):
                    self.pause.listeners.remove(told)


async def _follow(stream: AsyncIterator[Listed | Changed], intake: Intake, what: str) -> None:
    """Hand every object of `stream` to `intake`: a listed one with type None, as Kopf did, and
    a change with its type; bookmarks carry no object. A failing intake is logged and skipped,
    so one bad object never stops the stream."""
    try:
        async for item in stream:
            if isinstance(item, Listed):
                for body in item.items:
                    _hand(intake, None, body, what)
            elif item.kind != "BOOKMARK":
                _hand(intake, item.kind, item.obj, what)
    finally:
        aclose: Any = getattr(stream, "aclose", None)
        if aclose is not None:
            await aclose()


def _hand(intake: Intake, event_type: str | None, body: Json, what: str) -> None:
    try:
        intake(event_type, body)
    except Exception:
        log.exception("a watch event could not be taken in", extra={"watch": what})
