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
from dataclasses import replace
from typing import Any

import kopf

from allocbridge.actions.lifecycle import Actions
from allocbridge.cluster.connection import Credentials
from allocbridge.cluster.errors import KubernetesError, NotFoundError, UnavailableError
from allocbridge.cluster.resources import Kube
from allocbridge.cluster.watch import ObjectWatches
from allocbridge.config import KubernetesSettings
from allocbridge.eventloop import new_event_loop, uvloop_tls
from allocbridge.model.pods import LABEL_MANAGED_BY, MANAGED_BY, honours_container_restart_policies
from allocbridge.reconcile.allocations import Reconciler
from allocbridge.reconcile.peering import PeeringPause, following_peering
from allocbridge.reconcile.watches import FedStreams, ReconcilerWatches
from allocbridge.store.relay import FeedRelay

log = logging.getLogger(__name__)

#: Connections the reconciler's client keeps to the API server for requests, besides one per
#: watch: enough to keep a 2-core API server busy when hundreds of pods are created at once,
#: where every connection more costs a TLS handshake on both sides (kubernetes_asyncio would
#: open up to 100).
RECONCILER_REQUESTS = 16

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
    relay: FeedRelay,
    pause: PeeringPause | None = None,
) -> kopf.OperatorRegistry:
    """What Kopf runs besides its peering: the login with the credentials the process already
    loaded, and the start and end of the reconciler and its watches (`watches`: Allocations
    and pods from the store feed's `relay`); `pause` follows Kopf's peering pause (see
    `peering`).

    No resource handler is registered: the reconciler's own watches feed it, and Kopf's
    per-event machinery cost more CPU than the reconciliation (see `watches`). So Kopf adds no
    finalizers and no annotations, an Allocation never gets stuck when the operator is down,
    and reconciliation stays level-triggered (see `allocbridge.reconcile.allocations`).
    """
    registry = kopf.OperatorRegistry()
    state: dict[str, Any] = {}
    pod_settings = settings.pods

    def paused() -> bool:
        return pause is not None and pause.paused

    @kopf.on.login(registry=registry)
    def login(**_: object) -> kopf.ConnectionInfo:
        return credentials.kopf_connection()

    @kopf.on.startup(registry=registry)
    async def startup(**_: Any) -> None:
        watching = ReconcilerWatches.count(settings.namespaces)
        api = credentials.api_client(watching + RECONCILER_REQUESTS)
        state["api"] = api
        kube = Kube(api)
        honoured = honours_container_restart_policies(*await kube.server_version())
        log.info("pods rendered", extra={"container_restart_policies": honoured})
        rendering = replace(pod_settings, container_restart_policies=honoured)
        actions = Actions(kube, credentials.configuration())
        reconciler = Reconciler(kube, rendering, actions, paused=paused)
        state["reconciler"] = reconciler
        feeding = ReconcilerWatches(
            reconciler,
            lambda on_error: FedStreams(relay, ObjectWatches(api, on_error)),
            settings.namespaces,
            pause,
        )
        state["watches"] = asyncio.create_task(feeding.run(), name="reconciler watches")
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
        for name in ("peering", "watches"):
            task: asyncio.Task[None] | None = state.get(name)
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        reconciler: Reconciler | None = state.get("reconciler")
        if reconciler is not None:
            await reconciler.stop()
        api = state.get("api")
        if api is not None:
            await api.close()

    return registry


class OperatorThread:
    """One run of the Kopf operator; `stop()` asks it to finish and waits."""

    def __init__(
        self, settings: KubernetesSettings, credentials: Credentials, relay: FeedRelay
    ) -> None:
        self.settings = settings
        self.credentials = credentials
        self.relay = relay  # the store feed's, on the main loop (see `watches`)
        self.stop_flag = threading.Event()
        self.ready_flag = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._main, name="kopf", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def _main(self) -> None:
        try:
            # uvloop, as the main loop (allocbridge.eventloop), here with uvloop's TLS, in C,
            # for every connection: this loop carries the reconciler's watches (cut off, they
            # resume from the last event taken) and short framed requests, and Kopf's
            # peering; exec opens its streams with the tail-keeping TLS wherever it runs
            # (cluster.podexec).
            with uvloop_tls(), asyncio.Runner(loop_factory=new_event_loop) as runner:
                runner.run(self._operate())
        except BaseException as exc:
            self.error = exc
            log.exception("the Kopf operator stopped with an error")

    async def _operate(self) -> None:
        settings = kopf.OperatorSettings()
        settings.posting.level = logging.WARNING
        settings.watching.server_timeout = 300
        settings.watching.client_timeout = 330
        settings.networking.error_backoffs = [1, 1, 2, 3, 5, 8]
        namespaces = self.settings.namespaces
        with following_peering(starts_paused=not self.settings.standalone) as pause:
            await kopf.operator(
                registry=build_registry(self.credentials, self.settings, self.relay, pause),
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
