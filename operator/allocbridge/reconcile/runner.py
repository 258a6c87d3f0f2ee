"""Runs Kopf on a thread and event loop of its own.

Kopf cancels every task created after it started when it exits, which would cut the HTTP
servers' connection tasks if they shared its loop; a dedicated loop keeps the listeners out of
its reach, so the shutdown order stays ours (design.md, boundary-health-k8s-exec-kopf.md C.9).

Peering is always cluster-wide: every replica, whatever `kubernetes.namespaces` says, announces
itself in the one ClusterKopfPeering named by `kubernetes.peering` (see `build_registry`), and
creates that object when it is missing (`create_peering`).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import kopf
import uvloop

from allocbridge.actions.lifecycle import Actions
from allocbridge.cluster.connection import Credentials
from allocbridge.cluster.errors import KubernetesError, NotFoundError, UnavailableError
from allocbridge.cluster.resources import GROUP, PLURAL, VERSION, Kube
from allocbridge.config import KubernetesSettings
from allocbridge.model.pods import (
    LABEL_MANAGED_BY,
    MANAGED_BY,
    MANAGED_SELECTOR,
    honours_container_restart_policies,
    owning_allocation,
)
from allocbridge.reconcile.allocations import Reconciler
from allocbridge.reconcile.peering import following_peering

log = logging.getLogger(__name__)

#: Seconds between attempts to create the peering while its kind is not served yet (the last
#: one repeats: a cluster without the CRD gets a warning a minute).
PEERING_RETRY_DELAYS: tuple[float, ...] = (1, 1, 2, 3, 5, 8, 13, 30, 60)


async def create_peering(kube: Kube, name: str) -> None:
    """Create the ClusterKopfPeering `name` if it is missing.

    Kopf does not create it: it waits, paused, for the object to appear, so a replica installed
    without it would never reconcile. Keeping it out of `manifests/` also lets one
    `kubectl apply -k` install everything: kubectl cannot map an object whose CRD it creates in
    the same run. While the kind is not served yet (that CRD still being established), retry.
    """
    for attempt in itertools.count():
        try:
            created = await kube.create_cluster_peering(name, {LABEL_MANAGED_BY: MANAGED_BY})
            break
        except NotFoundError:
            why = "its kind is not served yet"
        except UnavailableError as exc:
            why = exc.message
        except KubernetesError as exc:
            log.error(
                "the ClusterKopfPeering could not be created; reconciliation waits for it",
                extra={"peering": name, "status": exc.status, "error": exc.message},
            )
            return
        delay = PEERING_RETRY_DELAYS[min(attempt, len(PEERING_RETRY_DELAYS) - 1)]
        log.warning(
            "the ClusterKopfPeering could not be created yet; retrying",
            extra={"peering": name, "error": why, "delay": delay},
        )
        await asyncio.sleep(delay)
    if created:
        log.info("ClusterKopfPeering created", extra={"peering": name})


def build_registry(
    credentials: Credentials,
    settings: KubernetesSettings,
    paused: Callable[[], bool] = lambda: False,
) -> kopf.OperatorRegistry:
    """The handlers this operator runs; login uses the credentials the process already loaded;
    `paused` says whether Kopf's peering has paused the operator (see `peering`).

    Only low-level `on.event` handlers are used: they add no finalizers and no annotations, so
    an Allocation never gets stuck when the operator is down, and reconciliation stays
    level-triggered (see `allocbridge.reconcile.allocations`).
    """
    registry = kopf.OperatorRegistry()
    state: dict[str, Any] = {}
    pod_settings = settings.pods

    @kopf.on.login(registry=registry)
    def login(**_: object) -> kopf.ConnectionInfo:
        return credentials.kopf_connection()

    @kopf.on.startup(registry=registry)
    async def startup(**_: Any) -> None:
        api = credentials.api_client()
        state["api"] = api
        kube = Kube(api)
        honoured = honours_container_restart_policies(*await kube.server_version())
        log.info("pods rendered", extra={"container_restart_policies": honoured})
        rendering = replace(pod_settings, container_restart_policies=honoured)
        actions = Actions(kube, credentials.configuration())
        state["reconciler"] = Reconciler(kube, rendering, actions, paused=paused)
        if not settings.standalone:
            state["peering"] = asyncio.create_task(create_peering(kube, settings.peering))

    @kopf.on.startup(registry=registry)
    async def peer_cluster_wide(settings: kopf.OperatorSettings, **_: Any) -> None:
        """Use the ClusterKopfPeering even with `namespaces`: Kopf would otherwise wait for a
        KopfPeering in each namespace and, finding none, stay paused for good; one object also
        lets replicas with different `namespaces` elect one reconciler. `kopf.operator` resets
        this setting, so it is set here, before the peering tasks start."""
        settings.peering.clusterwide = True

    @kopf.on.cleanup(registry=registry)
    async def cleanup(**_: Any) -> None:
        creating: asyncio.Task[None] | None = state.get("peering")
        if creating is not None:
            creating.cancel()
        reconciler: Reconciler | None = state.get("reconciler")
        if reconciler is not None:
            await reconciler.stop()
        api = state.get("api")
        if api is not None:
            await api.close()

    # Each handler hands the raw watch event (type None for a listed object) to the
    # reconciler, which keeps the bodies: its passes read them instead of the API server.

    @kopf.on.event(GROUP, VERSION, PLURAL, registry=registry)
    async def allocation_changed(event: kopf.RawEvent, **_: Any) -> None:
        state["reconciler"].allocation_event(event["type"], event["object"])

    @kopf.on.event("", "v1", "pods", labels={LABEL_MANAGED_BY: MANAGED_BY}, registry=registry)
    async def pod_changed(event: kopf.RawEvent, body: kopf.Body, **_: Any) -> None:
        alloc = owning_allocation(body)
        if alloc is not None:
            state["reconciler"].pod_event(event["type"], event["object"], alloc)

    @kopf.on.event("", "v1", "nodes", registry=registry)
    async def node_changed(event: kopf.RawEvent, **_: Any) -> None:
        state["reconciler"].node_event(event["type"], event["object"])

    def about_our_pod(body: kopf.Body, **_: Any) -> bool:
        involved = body.get("involvedObject") or {}
        return bool(involved.get("kind") == "Pod" and involved.get("name"))

    @kopf.on.event("", "v1", "events", when=about_our_pod, registry=registry)
    async def pod_event(event: kopf.RawEvent, **_: Any) -> None:
        state["reconciler"].kubernetes_event(event["type"], event["object"])

    return registry


def watch_only_what_is_handled(settings: kopf.OperatorSettings) -> None:
    """Let the API server filter the pods and Events that the handlers would drop.

    A handler's `labels=` and `when=` filter in this process, after the API server has sent
    every pod and every Event in the watched namespaces (the whole cluster by default); these
    selectors go into the watch requests themselves, so other workloads cost neither side.
    """
    settings.watching.label_selectors["", "v1", "pods"] = MANAGED_SELECTOR
    settings.watching.field_selectors["", "v1", "events"] = "involvedObject.kind=Pod"


class NoDiffBase(kopf.DiffBaseStorage):
    """No diff base: Kopf would deep-copy every watched body (pods, Events, Allocations with
    their task events) to diff it, for change-detecting handlers this operator does not have.

    It never writes anything either: with only `on.event` handlers Kopf patches no object.
    """

    def build(self, *, body: kopf.Body, extra_fields: Any = None) -> kopf.BodyEssence:
        return kopf.BodyEssence()

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        return None

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        return None


class NoProgress(kopf.ProgressStorage):
    """No handler progress: Kopf keeps it for change handlers that retry, which this operator
    does not have, and otherwise copies every event's (empty) diff base to strip it of
    progress fields. Like `NoDiffBase`, it never writes anything."""

    def fetch(self, *, key: kopf.HandlerId, body: kopf.Body) -> kopf.ProgressRecord | None:
        return None

    def store(self, **_: Any) -> None:
        return None

    def purge(self, **_: Any) -> None:
        return None

    def touch(self, **_: Any) -> None:
        return None

    def clear(self, *, essence: kopf.BodyEssence) -> kopf.BodyEssence:
        return essence


class OperatorThread:
    """One run of the Kopf operator; `stop()` asks it to finish and waits."""

    def __init__(self, settings: KubernetesSettings, credentials: Credentials) -> None:
        self.settings = settings
        self.credentials = credentials
        self.stop_flag = threading.Event()
        self.ready_flag = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._main, name="kopf", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def _main(self) -> None:
        try:
            # uvloop: its event loop and TLS are cheaper per watch event and per request than
            # asyncio's, and this loop carries Kopf's watches and every reconciler call. (The
            # HTTP servers stay on asyncio's loop: uvloop lost the tail of an exec stream.)
            with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
                runner.run(self._operate())
        except BaseException as exc:
            self.error = exc
            log.exception("the Kopf operator stopped with an error")

    async def _operate(self) -> None:
        settings = kopf.OperatorSettings()
        settings.persistence.diffbase_storage = NoDiffBase()
        settings.persistence.progress_storage = NoProgress()
        settings.posting.level = logging.WARNING
        settings.watching.server_timeout = 300
        settings.watching.client_timeout = 330
        settings.networking.error_backoffs = [1, 1, 2, 3, 5, 8]
        watch_only_what_is_handled(settings)
        namespaces = self.settings.namespaces
        with following_peering() as pause:
            await kopf.operator(
                registry=build_registry(self.credentials, self.settings, lambda: pause.paused),
                settings=settings,
                standalone=self.settings.standalone,
                priority=self.settings.priority,
                # Naming a peering makes it mandatory in Kopf: only when not standalone.
                peering_name=None if self.settings.standalone else self.settings.peering,
                clusterwide=not namespaces,
                namespaces=namespaces,
                stop_flag=self.stop_flag,
                ready_flag=self.ready_flag,
            )

    def stop(self, timeout: float = 30.0) -> None:
        """Blocking: set the stop flag and join the thread."""
        self.stop_flag.set()
        self.thread.join(timeout)
        if self.thread.is_alive():
            log.warning("the Kopf operator did not stop in time", extra={"timeout": timeout})
