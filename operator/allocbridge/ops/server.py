"""The ops listener's aiohttp application: `/health` and `/metrics`.

`/health` follows the controller health contract: an empty body, 200 while the API listener
serves, 503 while starting or draining; `?worker_info=1` adds the worker view as JSON. It is
only routed when the configuration has a controller block, an api and an ops listener;
`/metrics` is always there. Other methods answer 405.
"""

from __future__ import annotations

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from allocbridge.lifecycle import Lifecycle
from allocbridge.telemetry import Metrics, request_metrics


def create_app(lifecycle: Lifecycle, metrics: Metrics, *, health: bool) -> web.Application:
    """Build the ops application; `health=False` leaves `/health` unrouted (404)."""
    app = web.Application(middlewares=[request_metrics(metrics, "ops")])

    async def get_health(request: web.Request) -> web.Response:
        status = lifecycle.health_status()
        if request.query.get("worker_info") in ("1", "true"):
            return web.json_response(lifecycle.worker_info(), status=status)
        return web.Response(status=status)

    async def get_metrics(request: web.Request) -> web.Response:
        metrics.draining.set(1 if lifecycle.draining else 0)
        metrics.exec_sessions.set(lifecycle.active_sessions)
        body = generate_latest(metrics.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    if health:
        app.router.add_route("GET", "/health", get_health)
        app.router.add_route("*", "/health", _method_not_allowed)
    app.router.add_route("GET", "/metrics", get_metrics)
    app.router.add_route("*", "/metrics", _method_not_allowed)
    return app


async def _method_not_allowed(request: web.Request) -> web.Response:
    return web.Response(status=405, text="Invalid method", headers={"Allow": "GET"})
