"""Runs Kopf on a thread and event loop of its own.

Kopf cancels every task created after it started when it exits, which would cut the HTTP
servers' connection tasks if they shared its loop; a dedicated loop keeps the listeners out of
its reach, so the shutdown order stays ours (design.md, boundary-health-k8s-exec-kopf.md C.9).
"""

from __future__ import annotations

import asyncio
import logging
import threading

import kopf

from allocbridge.cluster.connection import Credentials
from allocbridge.config import KubernetesSettings

log = logging.getLogger(__name__)


def build_registry(credentials: Credentials) -> kopf.OperatorRegistry:
    """The handlers this operator runs; login uses the credentials the process already loaded."""
    registry = kopf.OperatorRegistry()

    @kopf.on.login(registry=registry)
    def login(**_: object) -> kopf.ConnectionInfo:
        return credentials.kopf_connection()

    return registry


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
            asyncio.run(self._operate())
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
        await kopf.operator(
            registry=build_registry(self.credentials),
            settings=settings,
            standalone=self.settings.standalone,
            priority=self.settings.priority,
            peering_name=self.settings.peering,
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
