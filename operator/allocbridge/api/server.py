"""The API listener's aiohttp application.

Unknown paths answer 404 with an empty body, like Nomad's root fall-through handler.
"""

from __future__ import annotations

from aiohttp import web

from allocbridge.telemetry import Metrics, request_metrics


def create_app(metrics: Metrics) -> web.Application:
    """Build the `/v1` application."""
    app = web.Application(middlewares=[request_metrics(metrics, "api")])
    app.router.add_route("*", "/{tail:.*}", _not_found)
    return app


async def _not_found(request: web.Request) -> web.Response:
    return web.Response(status=404)
