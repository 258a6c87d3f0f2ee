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


class RouteCounts:
    """The request counter and latency histogram of one listener's routes.

    The labelled children are looked up once per label set and kept: `labels()` costs more
    than the count itself, on every request (a paging walk makes a hundred).
    """

    def __init__(self, metrics: Metrics, listener: str) -> None:
        self.metrics = metrics
        self.listener = listener
        self._counters: dict[tuple[str, str, int], Counter] = {}
        self._histograms: dict[str, Histogram] = {}

    def record(self, route: str, method: str, code: int, seconds: float) -> None:
        key = (route, method, code)
        counter = self._counters.get(key)
        if counter is None:
            counter = self._counters[key] = self.metrics.requests.labels(
                self.listener, route, method, str(code)
            )
        counter.inc()
        histogram = self._histograms.get(route)
        if histogram is None:
            histogram = self._histograms[route] = self.metrics.latency.labels(self.listener, route)
        histogram.observe(seconds)

    def counted(self, route: str, handler: Handler) -> Handler:
        """`handler`, its requests counted under `route` (the pattern, not the raw path).

        Wrapping each route's handler when it is registered counts what `request_metrics`
        counts without an aiohttp middleware: an application with middlewares runs two more
        coroutines per request (the middleware and aiohttp's own current-app one), a tenth of
        a single read's CPU.
        """
        record = self.record

        async def counted_handler(request: web.Request) -> web.StreamResponse:
            started = time.perf_counter()
            code = 500
            try:
                response = await handler(request)
                code = response.status
                return response
            except web.HTTPException as exc:
                code = exc.status
                raise
            finally:
                record(route, request.method, code, time.perf_counter() - started)

        return counted_handler


def request_metrics(metrics: Metrics, listener: str) -> Middleware:
    """An aiohttp middleware counting requests by route (the pattern, not the raw path), for
    an application whose routes are not wrapped by `RouteCounts.counted`."""
    counts = RouteCounts(metrics, listener)

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        return await counts.counted(_route_name(request), handler)(request)

    return middleware


def _route_name(request: web.Request) -> str:
    info = request.match_info
    resource = info.route.resource if info.route is not None else None
    if resource is None:
        return "unmatched"
    return resource.canonical
