"""What handlers share, kept on the application under one typed key (no module globals).

`create_app` (api/server.py) builds it from everything the endpoints need, the client
endpoints included: the store, the authorizer, the actions, the Kubernetes clients that reach
into pods (exec, fs, logs) and nodes (stats), and the bookkeeping of the streams in progress.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any, Final

from aiohttp import web

from allocbridge.actions.lifecycle import ActionsSlot
from allocbridge.api.errors import NomadError
from allocbridge.auth import Authorizer, Caller, extract_token
from allocbridge.cluster.nodestats import NodeStatsReader
from allocbridge.cluster.podexec import PodExecutor
from allocbridge.cluster.podfs import PodFiles
from allocbridge.cluster.podlogs import PodLogReader
from allocbridge.lifecycle import Lifecycle
from allocbridge.store import AllocationStore
from allocbridge.telemetry import Metrics

#: Nomad's text when a server cannot answer reads yet; sent with 503 so balancers retry.
NOT_SYNCED: Final = "No cluster leader"


@dataclass(frozen=True)
class NodeStats:
    reader: NodeStatsReader
    mhz_per_cpu: int  # Nomad MHz per Kubernetes CPU, to report CPU ticks as Nomad counts them


@dataclass(frozen=True)
class PodClients:
    """The Kubernetes clients of the endpoints that reach into pods and nodes. An endpoint whose
    client is missing answers 503 (exec, past its upgrade, closes with 1011)."""

    executor: PodExecutor | None = None  # exec
    files: PodFiles | None = None  # fs, over the executor's client (closed with it)
    logs: PodLogReader | None = None
    stats: NodeStats | None = None


@dataclass
class Streams:
    """Streaming answers in progress and the event that ends them when the server stops.

    Exec sessions are counted in `Lifecycle.active_sessions` (what `/health` reports) and the
    `allocbridge_exec_sessions` gauge; followed logs and files watch `stopping` only.
    """

    lifecycle: Lifecycle
    metrics: Metrics
    stopping: asyncio.Event = field(default_factory=asyncio.Event)
    sessions: set[asyncio.Future[None]] = field(default_factory=set)
    background: set[asyncio.Task[object]] = field(default_factory=set)

    def opened(self) -> asyncio.Future[None]:
        """Count an exec session in; the future is done once `closed`."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.sessions.add(done)
        self.lifecycle.active_sessions += 1
        self.metrics.exec_sessions.set(self.lifecycle.active_sessions)
        return done

    def closed(self, done: asyncio.Future[None]) -> None:
        self.sessions.discard(done)
        self.lifecycle.active_sessions -= 1
        self.metrics.exec_sessions.set(self.lifecycle.active_sessions)
        if not done.done():
            done.set_result(None)

    def in_background(self, work: Coroutine[Any, Any, object]) -> None:
        """Run `work` past the request that started it (an exec's leftover command being
        ended); cleanup waits for it before the clients close."""
        task = asyncio.create_task(work)
        self.background.add(task)
        task.add_done_callback(self.background.discard)

    async def finish_background(self, seconds: float) -> None:
        """Wait up to `seconds` for the background work, then cancel what is left."""
        if not self.background:
            return
        await asyncio.wait(set(self.background), timeout=seconds)
        for task in set(self.background):
            task.cancel()


@dataclass(frozen=True)
class ApiContext:
    store: AllocationStore
    authorizer: Authorizer
    sync_timeout: float  # seconds a request waits for the store's first full list
    streams: Streams
    actions: ActionsSlot = field(default_factory=ActionsSlot)  # stop, signal, restart, pause
    pods: PodClients = field(default_factory=PodClients)


CONTEXT: Final = web.AppKey("allocbridge_api", ApiContext)


def context(request: web.Request) -> ApiContext:
    return request.app[CONTEXT]


def caller(request: web.Request) -> Caller:
    return Caller(token=extract_token(request.headers))


async def synced_store(ctx: ApiContext) -> AllocationStore:
    """The store once it holds a full list; 503 if it does not within `sync_timeout`."""
    if not await ctx.store.wait_synced(ctx.sync_timeout):
        raise NomadError(503, NOT_SYNCED)
    return ctx.store
