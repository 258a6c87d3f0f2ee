"""Prometheus metrics of one replica, kept in a registry of its own (so tests can run many)."""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Iterator
from typing import Final

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware
from prometheus_client import CollectorRegistry, Gauge, PlatformCollector, ProcessCollector
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

#: Upper bounds (seconds) of the request latency histogram's buckets, `+Inf` aside.
LATENCY_BUCKETS: Final = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1,
    2.5,
    5,
    10,
    60,
)
#: Their `le` labels, as prometheus_client writes them (`1.0`, `+Inf`).
_LE_LABELS: Final = (*(repr(float(bound)) for bound in LATENCY_BUCKETS), "+Inf")


class Metrics:
    """The process collectors plus the HTTP, draining and session metrics."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        self.http = HttpMetrics()
        self.registry.register(self.http)
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


class _RouteLatency:
    """One route's latency histogram: a count per bucket (not cumulative) and the sum."""

    __slots__ = ("counts", "created", "total")

    def __init__(self) -> None:
        self.counts = [0] * (len(LATENCY_BUCKETS) + 1)  # the last one is +Inf
        self.total = 0.0
        self.created = time.time()


class HttpMetrics(Collector):
    """`allocbridge_http_requests` (a counter by listener, route, method and code) and
    `allocbridge_http_request_duration_seconds` (a histogram by listener and route), kept in
    plain dicts and exported as Prometheus families when scraped.

    prometheus_client's own labelled children take a lock per increment and walk the buckets
    in Python per observation: 1.2 µs of a single read's CPU, against a third of that here. The
    scrape shows the same series (`_total`, `_created`, `_bucket`, `_count`, `_sum`). Only the
    event loop thread of a listener records into its tables; a scrape from another thread may
    see a request counted before its latency, as a scrape of prometheus_client's may.
    """

    def __init__(self) -> None:
        self.requests: dict[str, dict[tuple[str, str, int], int]] = {}  # by listener
        self.latencies: dict[str, dict[str, _RouteLatency]] = {}  # by listener
        self._created: dict[tuple[str, str, str, int], float] = {}

    def describe(self) -> Iterator[Metric]:
        yield _requests_family()
        yield _latency_family()

    def collect(self) -> Iterator[Metric]:
        requests = _requests_family()
        for listener, counts in list(self.requests.items()):
            for (route, method, code), value in list(counts.items()):
                created = self._created.get((listener, route, method, code))
                requests.add_metric([listener, route, method, str(code)], value, created=created)
        yield requests
        latency = _latency_family()
        created_samples = []
        for listener, routes in list(self.latencies.items()):
            for route, observed in list(routes.items()):
                cumulative, buckets = 0, []
                for le, count in zip(_LE_LABELS, observed.counts, strict=True):
                    cumulative += count
                    buckets.append((le, float(cumulative)))
                latency.add_metric([listener, route], buckets, observed.total)
                labels = {"listener": listener, "route": route}
                created_samples.append(Sample(latency.name + "_created", labels, observed.created))
        latency.samples.extend(created_samples)
        yield latency

    def route_counts(
        self, listener: str
    ) -> tuple[dict[tuple[str, str, int], int], dict[str, _RouteLatency]]:
        """The tables one listener's `RouteCounts` records into."""
        return (
            self.requests.setdefault(listener, {}),
            self.latencies.setdefault(listener, {}),
        )

    def first_request(self, listener: str, route: str, method: str, code: int) -> None:
        self._created[(listener, route, method, code)] = time.time()


def _requests_family() -> CounterMetricFamily:
    return CounterMetricFamily(
        "allocbridge_http_requests",
        "HTTP requests answered, by listener, route, method and status code.",
        labels=["listener", "route", "method", "code"],
    )


def _latency_family() -> HistogramMetricFamily:
    return HistogramMetricFamily(
        "allocbridge_http_request_duration_seconds",
        "Time to answer an HTTP request, by listener and route.",
        labels=["listener", "route"],
    )


class RouteCounts:
    """Counts one listener's requests and their latency by route (see `HttpMetrics`)."""

    def __init__(self, metrics: Metrics, listener: str) -> None:
        self.metrics = metrics
        self.listener = listener
        self._requests, self._latencies = metrics.http.route_counts(listener)

    def record(self, route: str, method: str, code: int, seconds: float) -> None:
        key = (route, method, code)
        requests = self._requests
        if key in requests:
            requests[key] += 1
        else:
            self.metrics.http.first_request(self.listener, route, method, code)
            requests[key] = 1
        latency = self._latencies.get(route)
        if latency is None:
            latency = self._latencies[route] = _RouteLatency()
        latency.counts[bisect_left(LATENCY_BUCKETS, seconds)] += 1
        latency.total += seconds

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
