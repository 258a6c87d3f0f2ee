"""Prometheus metrics of one replica, kept in a registry of its own (so tests can run many)."""

from __future__ import annotations

import time

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
)


class Metrics:
    """The process collectors plus the HTTP, draining and session metrics."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        self.requests = Counter(
            "allocbridge_http_requests",
            "HTTP requests answered, by listener, route, method and status code.",
            ["listener", "route", "method", "code"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "allocbridge_http_request_duration_seconds",
            "Time to answer an HTTP request, by listener and route.",
            ["listener", "route"],
            registry=self.registry,
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 60),
        )
        self.draining = Gauge(
            "allocbridge_draining",
            "1 while the replica drains during the shutdown grace period, else 0.",
            registry=self.registry,
        )
        self.exec_sessions = Gauge(
            "allocbridge_exec_sessions",
            "Exec WebSocket sessions open on this replica.",
            registry=self.registry,
        )


def request_metrics(metrics: Metrics, listener: str) -> Middleware:
    """An aiohttp middleware counting requests by route (the pattern, not the raw path).

    The labelled children are looked up once per label set and kept: `labels()` costs more
    than the count itself, on every request (a paging walk makes a hundred).
    """
    counters: dict[tuple[str, str, int], Counter] = {}
    histograms: dict[str, Histogram] = {}

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        started = time.perf_counter()
        route = _route_name(request)
        code = 500
        try:
            response = await handler(request)
            code = response.status
            return response
        except web.HTTPException as exc:
            code = exc.status
            raise
        finally:
            key = (route, request.method, code)
            counter = counters.get(key)
            if counter is None:
                counter = counters[key] = metrics.requests.labels(
                    listener, route, request.method, str(code)
                )
            counter.inc()
            histogram = histograms.get(route)
            if histogram is None:
                histogram = histograms[route] = metrics.latency.labels(listener, route)
            histogram.observe(time.perf_counter() - started)

    return middleware


def _route_name(request: web.Request) -> str:
    info = request.match_info
    resource = info.route.resource if info.route is not None else None
    if resource is None:
        return "unmatched"
    return resource.canonical
