"""Wiring of one replica: start-up order and graceful shutdown.

Start: ops listener, API listener, then the upstream monitor and, once Kubernetes answers, the
store feed and the Kopf operator on its own thread. `/health` answers 200 only once the store
has loaded its first full list (an empty store would give this replica's clients wrong
answers); a later loss of the Kubernetes API shows in `upstream_connection_state` but keeps the
replica ready, since it still answers from its store.

Stop, on the first SIGTERM or SIGINT: `/health` turns 503 at once and the API keeps serving for
`graceful_shutdown_wait_duration` (a second signal cuts the wait short); then the API listener
stops accepting and in-flight requests get a bounded time to finish; then Kopf stops; the ops
listener closes last. A third signal exits at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import signal
import ssl
from dataclasses import dataclass, field
from typing import Final

from aiohttp import web

from allocbridge.actions.lifecycle import Actions, ActionsSlot
from allocbridge.api.context import NodeStats, PodClients
from allocbridge.api.server import create_app as create_api_app
from allocbridge.api.shortcut import ApiRunner
from allocbridge.auth.base import AllowAll, Authorizer
from allocbridge.auth.kubernetes import KubernetesAuthorizer
from allocbridge.cluster.connection import Credentials
from allocbridge.cluster.nodestats import NodeStatsReader
from allocbridge.cluster.podexec import PodExecutor
from allocbridge.cluster.podfs import PodFiles
from allocbridge.cluster.podlogs import PodLogReader
from allocbridge.cluster.resources import Kube
from allocbridge.cluster.upstream import UpstreamMonitor
from allocbridge.cluster.watch import ObjectWatches
from allocbridge.config import ListenerSettings, Settings
from allocbridge.eventloop import new_event_loop, uvloop_tls
from allocbridge.lifecycle import Lifecycle, Next, Phase
from allocbridge.ops.server import create_app as create_ops_app
from allocbridge.reconcile.runner import OperatorThread
from allocbridge.store.feed import StoreFeed
from allocbridge.store.memory import AllocationStore
from allocbridge.store.relay import FeedRelay
from allocbridge.telemetry import Metrics

log = logging.getLogger(__name__)

IN_FLIGHT_TIMEOUT = 10.0  # seconds in-flight API requests get once the listener stops accepting
OPERATOR_RESTART_DELAY = 5.0


@dataclass
class Replica:
    """One allocbridge process: its listeners, its operator thread and its shutdown choreography."""

    settings: Settings
    metrics: Metrics = field(default_factory=Metrics)
    store: AllocationStore = field(default_factory=AllocationStore)
    authorizer: Authorizer = field(init=False)  # from settings.acl: see `authorizer_for`
    actions: ActionsSlot = field(default_factory=ActionsSlot)
    lifecycle: Lifecycle = field(init=False)
    _signalled: asyncio.Event = field(default_factory=asyncio.Event, init=False)
    _stop_now: asyncio.Event = field(default_factory=asyncio.Event, init=False)
    _operator: OperatorThread | None = field(default=None, init=False)
    _credentials: Credentials | None = field(default=None, init=False)  # once loaded (exec)
    # The store feed's events for the reconciler on Kopf's loop; bound to the loop of `run`.
    relay: FeedRelay = field(init=False)

    def __post_init__(self) -> None:
        controller = self.settings.controller
        grace = controller.graceful_shutdown_wait if controller else None
        self.lifecycle = Lifecycle(
            grace_period=grace if self.settings.health_enabled else None, store_synced=False
        )
        self.authorizer = authorizer_for(self.settings)

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        self.relay = FeedRelay(loop)
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, self._on_signal, signum)
        ops = await self._serve_ops()
        api = await self._serve_api()
        self.lifecycle.serving()
        log.info("allocbridge is serving", extra={"addresses": self._addresses()})

        monitor = UpstreamMonitor(
            self.settings.kubernetes, self.lifecycle, on_credentials=self._credentials_loaded
        )
        background = [
            asyncio.create_task(monitor.run(), name="upstream"),
            asyncio.create_task(self._feed_store(monitor), name="store"),
            asyncio.create_task(self._ready_once_synced(), name="readiness"),
            asyncio.create_task(self._supervise_operator(monitor), name="operator"),
        ]
        await self._signalled.wait()
        if self.lifecycle.phase is Phase.DRAINING:
            await self._drain()
        self.lifecycle.stopping()
        self.store.close()  # parked blocking queries answer now instead of being cut off
        log.info("stopping the API listener")
        if api is not None:
            await api.cleanup()
        if isinstance(self.authorizer, KubernetesAuthorizer):
            await self.authorizer.close()
        for task in background:
            task.cancel()
        for task in background:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._operator is not None:
            log.info("stopping the operator")
            await asyncio.to_thread(self._operator.stop)
        log.info("stopping the ops listener")
        if ops is not None:
            await ops.cleanup()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)
        log.info("allocbridge stopped")
        return 0

    def _on_signal(self, signum: int) -> None:
        decision = self.lifecycle.on_signal()
        log.info("received signal", extra={"signal": signal.Signals(signum).name})
        if decision is Next.FORCE:
            log.warning("forcing shutdown")
            os._exit(1)
        self._signalled.set()
        if decision is Next.STOP:
            self._stop_now.set()

    def _credentials_loaded(self, credentials: Credentials) -> None:
        """Reviews need the process's own credentials; requests before this wait, then 403."""
        self._credentials = credentials
        if isinstance(self.authorizer, KubernetesAuthorizer):
            self.authorizer.connect(credentials)

    async def _drain(self) -> None:
        wait = self.lifecycle.grace_period or 0.0
        self.metrics.draining.set(1)
        log.info(
            "health is enabled, waiting before shutdown; signal again to stop now",
            extra={"wait_seconds": wait},
        )
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop_now.wait(), timeout=wait)

    async def _feed_store(self, monitor: UpstreamMonitor) -> None:
        """Keep this replica's store in step with Kubernetes, whoever leads reconciliation."""
        await monitor.ready.wait()
        assert monitor.credentials is not None  # ready implies credentials
        api = monitor.credentials.api_client()
        self.actions.current = Actions(Kube(api), monitor.credentials.configuration())
        try:
            # uvloop's TLS, in C, for the watches: a watch whose tail it drops ends early and
            # resumes from the last resourceVersion the feed took (allocbridge.eventloop).
            with uvloop_tls():
                await StoreFeed(
                    self.store, ObjectWatches(api), self.settings.kubernetes.namespaces, self.relay
                ).run()
        finally:
            await self.actions.current.close()
            self.actions.current = None
            await api.close()

    async def _ready_once_synced(self) -> None:
        """Let `/health` answer 200 from the store's first full list on; never take it back."""
        while not self.store.closed:
            if await self.store.wait_synced(timeout=3600.0):
                self.lifecycle.store_synced = True
                log.info("the allocation store has synced; the replica is ready")
                return

    async def _supervise_operator(self, monitor: UpstreamMonitor) -> None:
        """Start Kopf once Kubernetes answers; start it again if it dies on its own."""
        while True:
            await monitor.ready.wait()
            credentials: Credentials | None = monitor.credentials
            if credentials is None:  # pragma: no cover - ready implies credentials
                await asyncio.sleep(OPERATOR_RESTART_DELAY)
                continue
            self._operator = OperatorThread(self.settings.kubernetes, credentials, self.relay)
            self._operator.start()
            await asyncio.to_thread(self._operator.thread.join)
            log.warning(
                "the operator stopped unexpectedly; restarting",
                extra={"delay_seconds": OPERATOR_RESTART_DELAY},
            )
            await asyncio.sleep(OPERATOR_RESTART_DELAY)

    async def _serve_ops(self) -> web.AppRunner | None:
        listener = self.settings.listener("ops")
        if listener is None:
            return None
        app = create_ops_app(self.lifecycle, self.metrics, health=self.settings.health_enabled)
        return await _serve(app, listener, shutdown_timeout=5.0)

    async def _serve_api(self) -> web.AppRunner | None:
        listener = self.settings.listener("api")
        if listener is None:
            return None
        executor = PodExecutor(lambda: self._credentials)
        pods = PodClients(
            executor=executor,
            files=PodFiles(executor),  # over exec's client
            logs=PodLogReader(lambda: self._credentials),
            stats=NodeStats(
                NodeStatsReader(lambda: self._credentials),
                mhz_per_cpu=self.settings.kubernetes.pods.mhz_per_cpu,
            ),
        )
        app = create_api_app(
            self.metrics,
            store=self.store,
            authorizer=self.authorizer,
            actions=self.actions,
            pods=pods,
            lifecycle=self.lifecycle,
        )
        # From SIGTERM on (`lifecycle.draining`) its answers close their connections.
        return await _serve(app, listener, shutdown_timeout=IN_FLIGHT_TIMEOUT, runner=ApiRunner)

    def _addresses(self) -> dict[str, str]:
        return {
            item.purpose: ("http" if item.tls_disable else "https") + "://" + item.address
            for item in self.settings.listeners
        }


async def _serve(
    app: web.Application,
    listener: ListenerSettings,
    *,
    shutdown_timeout: float,
    runner: type[web.AppRunner] = web.AppRunner,
) -> web.AppRunner:
    served = runner(app, shutdown_timeout=shutdown_timeout, access_log=None)
    await served.setup()
    site = web.TCPSite(
        served,
        host=listener.host,
        port=listener.port,
        ssl_context=tls_context(listener),
        reuse_address=True,
    )
    await site.start()
    return served


def authorizer_for(settings: Settings) -> Authorizer:
    """`acl { enabled = false }` allows everything; otherwise Kubernetes reviews decide."""
    if not settings.acl.enabled:
        log.warning("ACLs are disabled: every API request is allowed")
        return AllowAll()
    return KubernetesAuthorizer(
        namespaces=settings.kubernetes.namespaces, audiences=settings.acl.audiences
    )


def tls_context(listener: ListenerSettings) -> ssl.SSLContext | None:
    """The server TLS context of a listener, or None when `tls_disable = true`."""
    if listener.tls_disable:
        return None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = (
        ssl.TLSVersion.TLSv1_3 if listener.tls_min_version == "tls13" else ssl.TLSVersion.TLSv1_2
    )
    assert listener.tls_cert_file and listener.tls_key_file  # guaranteed by config validation
    context.load_cert_chain(listener.tls_cert_file, listener.tls_key_file)
    return context


#: Allocations between young-generation collections (CPython's default is 700).
GC_YOUNG_THRESHOLD: Final = 50_000


def tune_garbage_collection() -> None:
    """Collect cycles less often, and never walk what was loaded at start-up again.

    A replica decodes a watch event, a pod or an API answer into thousands of short-lived
    objects, almost all freed by reference counting; CPython's default thresholds still ran a
    collection every 700 of them, each full one walking every module, class and cached
    object. With the code frozen and a higher young threshold, the operator used about a sixth
    less CPU while 500 allocations started (docs/benchmarks/2026-11-25.md).
    """
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, middle, old)


def run(settings: Settings) -> int:
    """Run a replica until it is told to stop; returns the process exit status."""
    tune_garbage_collection()
    with asyncio.Runner(loop_factory=new_event_loop) as runner:  # uvloop (see eventloop)
        return runner.run(Replica(settings).run())
