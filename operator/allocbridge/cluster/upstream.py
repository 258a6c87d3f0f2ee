"""Watches the connection to the Kubernetes API and reports it as Boundary's upstream state.

It never gives up: credentials are (re)loaded and the API server probed with back-off until it
answers, so the process keeps its listeners up while Kubernetes is away. It also runs the
renewal of a kubeconfig exec plugin's token (`plugintokens`) for as long as it runs.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from kubernetes_asyncio import client

from allocbridge.cluster.connection import Credentials, load_credentials
from allocbridge.config import KubernetesSettings
from allocbridge.lifecycle import Lifecycle, Upstream

log = logging.getLogger(__name__)

BACKOFF = (0.5, 1.0, 2.0, 4.0, 8.0, 15.0)


class UpstreamMonitor:
    """Loads credentials, then probes `/version` every `interval` seconds, with back-off."""

    def __init__(
        self,
        settings: KubernetesSettings,
        lifecycle: Lifecycle,
        *,
        interval: float = 5.0,
        on_credentials: Callable[[Credentials], None] | None = None,
    ) -> None:
        self.settings = settings
        self.lifecycle = lifecycle
        self.interval = interval
        self.on_credentials = on_credentials
        self.credentials: Credentials | None = None
        self.ready = asyncio.Event()

    def report(self, state: Upstream) -> None:
        if self.lifecycle.upstream is not state:
            level = logging.DEBUG if state is Upstream.CONNECTING else logging.INFO
            log.log(level, "upstream connection state changed", extra={"state": state.value})
        self.lifecycle.upstream = state

    async def run(self) -> None:
        failures = 0
        api: client.ApiClient | None = None
        renewal: asyncio.Task[None] | None = None
        try:
            while True:
                if self.lifecycle.upstream is not Upstream.READY:
                    self.report(Upstream.CONNECTING)
                try:
                    if self.credentials is None:
                        self.credentials = await load_credentials(self.settings)
                        if self.credentials.plugin_tokens is not None:
                            renewal = asyncio.create_task(
                                self.credentials.plugin_tokens.keep_fresh(), name="token-renewal"
                            )
                        if self.on_credentials:
                            self.on_credentials(self.credentials)
                    if api is None:
                        api = self.credentials.api_client()
                    await asyncio.wait_for(client.VersionApi(api).get_code(), timeout=5.0)
                except Exception as exc:  # credentials, sockets, TLS, HTTP: all transient here
                    failures += 1
                    self.report(Upstream.TRANSIENT_FAILURE)
                    delay = BACKOFF[min(failures, len(BACKOFF)) - 1]
                    log.warning(
                        "Kubernetes API unreachable; retrying",
                        extra={"error": str(exc) or repr(exc), "retry_in_seconds": delay},
                    )
                    await asyncio.sleep(delay)
                    continue
                failures = 0
                self.report(Upstream.READY)
                self.ready.set()
                await asyncio.sleep(self.interval)
        finally:
            self.report(Upstream.SHUTDOWN)
            if renewal is not None:
                renewal.cancel()
            if api is not None:
                await api.close()
