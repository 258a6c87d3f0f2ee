"""Single reads: `GET /v1/allocation/:id` under load, against the API server's GET of the same
Allocation.

What a dashboard or the nomad CLI polling one allocation costs the server. allocbridge answers
from its store, with ACL on (the client token; the operator's TokenReview and
SubjectAccessReview answers are cached, so a warm token costs a cache lookup); the peer is
kube-apiserver's GET of the same Allocation custom resource
(`/apis/allocbridge.io/v1/namespaces/<ns>/allocations/<name>`, the admin certificate). Both sides
use the same client library, aiohttp, in this process, one keep-alive connection per client.

For each concurrency (4 and 32 clients), each side runs closed-loop clients for
`--rps-seconds` (each sends its next request as soon as its last is answered, after 2 warm-up
requests per client): requests per second and the p99 of every request's time to its last
byte. Sides alternate: allocbridge first at 4, the API server first at 32. Neither side decodes
the JSON. The clients' own cost (aiohttp, one event loop) is in both figures.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Final

from benchmarks.harness import Bench, OperatorProcess, fetch_body, log
from benchmarks.population import collection
from benchmarks.table import Latencies, Row, faster_than, rate, rate_times
from benchmarks.timing import Fetch

SECTION: Final = "Single reads"
RATE_GOAL: Final = 10.0
CONCURRENCIES: Final = (4, 32)
WARMUP: Final = 2


@dataclass(frozen=True)
class Load:
    """What a closed loop of clients measured: every request's time, and the rate."""

    latencies: Latencies
    per_second: float


async def closed_loop(fetch: Fetch, *, concurrency: int, seconds: float) -> Load:
    """`concurrency` clients, each sending its next request once the last is answered, for
    about `seconds`; every request is timed."""
    await asyncio.gather(*(fetch() for _ in range(concurrency * WARMUP)))
    times: list[float] = []
    deadline = time.perf_counter() + seconds

    async def client() -> None:
        while time.perf_counter() < deadline:
            start = time.perf_counter()
            await fetch()
            times.append(time.perf_counter() - start)

    began = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(concurrency)))
    return Load(Latencies.of(times), rate(len(times), time.perf_counter() - began))


def ours(bench: Bench, replica: OperatorProcess, alloc_id: str) -> Fetch:
    return fetch_body(bench.http, f"{replica.api}/v1/allocation/{alloc_id}")


def apiserver(bench: Bench, namespace: str, name: str) -> Fetch:
    return fetch_body(bench.api.session, f"{bench.api.server}{collection(namespace)}/{name}")


async def measure(
    bench: Bench, replica: OperatorProcess, namespace: str, name: str, seconds: float
) -> list[Row]:
    obj = await bench.api.get(f"{collection(namespace)}/{name}")
    mine = ours(bench, replica, obj["metadata"]["uid"])
    peer = apiserver(bench, namespace, name)
    sizes = (await mine(), await peer())
    loads: dict[tuple[str, int], Load] = {}
    for concurrency in CONCURRENCIES:
        sides = [("ours", mine), ("peer", peer)]
        if concurrency != CONCURRENCIES[0]:
            sides.reverse()
        for side, fetch in sides:
            log(f"single reads: {side}, {concurrency} clients")
            loads[side, concurrency] = await closed_loop(
                fetch, concurrency=concurrency, seconds=seconds
            )
    return rows(loads, sizes)


def rows(loads: dict[tuple[str, int], Load], sizes: tuple[int, int]) -> list[Row]:
    peer = "kube-apiserver GET of the same Allocation (aiohttp, admin certificate)"
    result: list[Row] = []
    for concurrency in CONCURRENCIES:
        mine, theirs = loads["ours", concurrency], loads["peer", concurrency]
        counts = f"n={mine.latencies.n:,}/{theirs.latencies.n:,}"
        result += [
            Row(
                SECTION,
                f"GET /v1/allocation/:id, {concurrency} clients: requests/s",
                mine.per_second,
                "req/s",
                peer,
                theirs.per_second,
                better="higher",
                goals=(rate_times(RATE_GOAL),),
                note=f"{counts}; bodies {sizes[0]:,} B vs {sizes[1]:,} B; ACL on",
            ),
            Row(
                SECTION,
                f"GET /v1/allocation/:id, {concurrency} clients: p99",
                mine.latencies.ms(99),
                "ms",
                peer,
                theirs.latencies.ms(99),
                goals=(faster_than(RATE_GOAL),),
                note=f"p50 {mine.latencies.ms(50):.2f} ms vs {theirs.latencies.ms(50):.2f} ms",
            ),
        ]
    return result
