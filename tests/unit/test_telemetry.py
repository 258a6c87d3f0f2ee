"""The HTTP metrics as a scrape shows them: counts by label set, latency buckets as Prometheus
histograms have them (a value on a bound counts in that bound's bucket, cumulative upwards)."""

from __future__ import annotations

from prometheus_client import generate_latest

from allocbridge.telemetry import LATENCY_BUCKETS, Metrics, RouteCounts

ROUTE = "/v1/allocation/{alloc_id}"


def test_requests_are_counted_per_listener_route_method_and_code() -> None:
    metrics = Metrics()
    api, ops = RouteCounts(metrics, "api"), RouteCounts(metrics, "ops")
    for _ in range(3):
        api.record(ROUTE, "GET", 200, 0.0001)
    api.record(ROUTE, "DELETE", 405, 0.0001)
    ops.record("/health", "GET", 503, 0.0001)

    def count(listener: str, route: str, method: str, code: str) -> float | None:
        labels = {"listener": listener, "route": route, "method": method, "code": code}
        return metrics.registry.get_sample_value("allocbridge_http_requests_total", labels)

    assert count("api", ROUTE, "GET", "200") == 3
    assert count("api", ROUTE, "DELETE", "405") == 1
    assert count("ops", "/health", "GET", "503") == 1
    assert count("ops", ROUTE, "GET", "200") is None
    created = {"listener": "api", "route": ROUTE, "method": "GET", "code": "200"}
    assert metrics.registry.get_sample_value("allocbridge_http_requests_created", created)


def test_latency_buckets_are_cumulative_with_bounds_inclusive() -> None:
    metrics = Metrics()
    counts = RouteCounts(metrics, "api")
    observed = (0.0005, 0.001, 0.0011, 0.3, 60.0, 75.0)
    for seconds in observed:
        counts.record(ROUTE, "GET", 200, seconds)

    def sample(suffix: str, **extra: str) -> float | None:
        labels = {"listener": "api", "route": ROUTE, **extra}
        name = f"allocbridge_http_request_duration_seconds{suffix}"
        return metrics.registry.get_sample_value(name, labels)

    for bound in LATENCY_BUCKETS:
        expected = sum(1 for seconds in observed if seconds <= bound)
        assert sample("_bucket", le=repr(float(bound))) == expected, bound
    assert sample("_bucket", le="+Inf") == len(observed)
    assert sample("_count") == len(observed)
    assert sample("_sum") == sum(observed)
    assert sample("_created")
    text = generate_latest(metrics.registry).decode()
    assert "# TYPE allocbridge_http_request_duration_seconds histogram" in text
    assert "# TYPE allocbridge_http_requests_total counter" in text
