"""The API listener's aiohttp application: routes (each counting its requests), shutdown.

Layout (one module per job, Nomad's one-handler-per-resource style):

- `query`: query options parsed once into `QueryOptions`; `ids`: path IDs and prefixes;
- `answers`: the one response path (handlers return an `Answer` or raise `NomadError`; JSON,
  `?pretty`, the `X-Nomad-*` headers and errors are rendered there); `errors`: what each
  failure answers; `blocking`: blocking queries over the store;
- `routing`: endpoint registration, 405s and Nomad's fall-throughs;
- one module per resource: `allocations` (list), `allocation` (read), `services`, `checks`,
  and `openapi` (the document describing them all).

Write endpoints slot in as modules of their own, each exporting `ENDPOINTS`, appended to
`_ENDPOINT_MODULES` below (before the fall-throughs): `stop` (`/v1/allocation/:id/stop`),
`signal`, `restart`, `pause` and `exec` (`/v1/client/allocation/:id/...`). `evaluation` answers
what the CLI follows after a stop; `jobs` is the read-only jobs view the CLI's `-job` forms use;
`logs` streams a task's log (`/v1/client/fs/logs/:id`), `fs` reads the allocation directory
(`/v1/client/fs/stat|ls|cat|readat|stream/:id`) and `stats` reads the tasks' usage.

Served by `shortcut.ApiRunner`, a plain single read (`GET /v1/allocation/:id`, no query, a
warm token) is answered by `shortcut.ReadShortcut` without aiohttp's per-request machinery.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Final

from aiohttp import web

from allocbridge.actions.lifecycle import ActionsSlot
from allocbridge.api import (
    allocation,
    allocations,
    checks,
    evaluation,
    exec,
    fs,
    jobs,
    logs,
    nodes,
    openapi,
    pause,
    restart,
    services,
    signal,
    stats,
    stop,
)
from allocbridge.api.context import CONTEXT, ApiContext, PodClients, Streams
from allocbridge.api.routing import Endpoint, add_endpoints, add_fallthroughs
from allocbridge.api.shortcut import SHORTCUT, ReadShortcut
from allocbridge.auth import Authorizer, GrantsAtOnce
from allocbridge.lifecycle import Lifecycle
from allocbridge.store import AllocationStore
from allocbridge.telemetry import Metrics, RouteCounts

#: Seconds a request waits for the store's first full list before answering 503.
DEFAULT_SYNC_TIMEOUT: Final = 10.0
#: Seconds open exec sessions get to close when the server shuts down, and what they left
#: running in the background gets to finish before the clients close.
SHUTDOWN_WAIT: Final = 5.0

_ENDPOINT_MODULES: Final[Sequence[Sequence[Endpoint]]] = (
    allocations.ENDPOINTS,
    allocation.ENDPOINTS,
    services.ENDPOINTS,
    checks.ENDPOINTS,
    stop.ENDPOINTS,
    signal.ENDPOINTS,
    restart.ENDPOINTS,
    pause.ENDPOINTS,
    exec.ENDPOINTS,
    nodes.ENDPOINTS,
    evaluation.ENDPOINTS,
    jobs.ENDPOINTS,
    logs.ENDPOINTS,
    fs.ENDPOINTS,
    stats.ENDPOINTS,
    openapi.ENDPOINTS,
)


def create_app(
    metrics: Metrics,
    *,
    store: AllocationStore,
    authorizer: Authorizer,
    actions: ActionsSlot | None = None,
    pods: PodClients | None = None,
    lifecycle: Lifecycle | None = None,
    sync_timeout: float = DEFAULT_SYNC_TIMEOUT,
) -> web.Application:
    """Build the `/v1` application over `store`, asking `authorizer` about every request.

    `pods` are the Kubernetes clients of exec, fs, logs and stats (an endpoint whose client is
    missing answers 503); `lifecycle` counts the open exec sessions for `/health`.

    On shutdown the store's parked blocking queries are released, so they answer at once
    with their current data instead of being cut off; followed logs and files end, and exec
    sessions close with 1001, given up to `SHUTDOWN_WAIT` seconds; on cleanup, what streams left
    running in the background gets as long, then the clients close. While `lifecycle` says
    draining, every answer closes its connection (`closing_while_draining`).
    """
    app = web.Application()  # no middleware: each route counts its own requests
    counts = RouteCounts(metrics, "api")
    lifecycle = lifecycle if lifecycle is not None else Lifecycle()
    ctx = app[CONTEXT] = ApiContext(
        store=store,
        authorizer=authorizer,
        sync_timeout=sync_timeout,
        streams=Streams(lifecycle, metrics),
        actions=actions if actions is not None else ActionsSlot(),
        pods=pods if pods is not None else PodClients(),
    )
    for endpoints in _ENDPOINT_MODULES:
        add_endpoints(app.router, endpoints, counts.counted)
    add_fallthroughs(app.router, counts.counted)
    draining = closing_while_draining(lifecycle)
    app.on_response_prepare.append(draining)
    if isinstance(authorizer, GrantsAtOnce):
        app[SHORTCUT] = ReadShortcut(ctx, authorizer, lifecycle, counts.record, (draining,))
    app.on_shutdown.append(_release_waiters)
    app.on_shutdown.append(_end_streams)
    app.on_cleanup.append(_close_clients)
    return app


def closing_while_draining(
    lifecycle: Lifecycle,
) -> Callable[[web.Request, web.StreamResponse], Awaitable[None]]:
    """The `on_response_prepare` hook that, from SIGTERM on (`lifecycle.draining`), makes every
    answer say `Connection: close`: a client's next request opens a new connection, which the
    Service sends to a replica that stays, instead of reusing a kept-alive one that the
    listener would cut when it closes. An upgrade's answer (101, exec's WebSocket) keeps its
    `Connection: Upgrade`, which the client checks; the WebSocket ends its connection anyway."""

    async def close_connections_while_draining(
        _request: web.Request, response: web.StreamResponse
    ) -> None:
        if lifecycle.draining and response.status != 101:
            response.force_close()  # the server closes it after this answer
            response.headers["Connection"] = "close"  # headers are computed before this hook

    return close_connections_while_draining


async def _release_waiters(app: web.Application) -> None:
    app[CONTEXT].store.close()


async def _end_streams(app: web.Application) -> None:
    streams = app[CONTEXT].streams
    streams.stopping.set()
    if streams.sessions:
        await asyncio.wait(set(streams.sessions), timeout=SHUTDOWN_WAIT)


async def _close_clients(app: web.Application) -> None:
    ctx = app[CONTEXT]
    await ctx.streams.finish_background(SHUTDOWN_WAIT)
    if ctx.pods.executor is not None:
        await ctx.pods.executor.close()
    if ctx.pods.logs is not None:
        await ctx.pods.logs.close()
    if ctx.pods.stats is not None:
        await ctx.pods.stats.reader.close()
