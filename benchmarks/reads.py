"""Single reads: `GET /v1/allocation/:id` under load, against the API server's GET of the same
Allocation.

What a dashboard or the nomad CLI polling one allocation costs the server. allocbridge answers
from its store, with ACL on (the client token; the operator's TokenReview and
SubjectAccessReview answers are cached, so a warm token costs a cache lookup); the peer is
kube-apiserver's GET of the same Allocation custom resource
(`/apis/allocbridge.io/v1/namespaces/<ns>/allocations/<name>`, the admin certificate).

For each concurrency (4 and 32 clients), each side runs closed-loop clients for
`--rps-seconds` (each sends its next request as soon as its last is answered, on a keep-alive
HTTP/1.1 connection of its own, after 2 warm-up requests per client): requests per second and
the p99 of every request's time to its last byte. Sides alternate: allocbridge first at 4, the
API server first at 32. Neither side decodes the JSON.

The client shares the machine's two cores with both servers, so its own cost per request is in
both sides' figures, and weighs most on the faster side. The goal rows use one lean client for
both sides: Go's net/http (`benchmarks/goclients load`, the kind of client the nomad CLI is), in
a process of its own, with `GOMAXPROCS=1` on both sides by default (`--load-gomaxprocs`; 0 is
Go's default, a thread per core): with a thread per core, the client's idle threads spin looking
for work on the cores the servers need, which costs the single-threaded Python server more than
the multi-threaded API server. The peer gets the same client with the same setting. The same
loads with aiohttp in this process (what this section measured first) follow without a goal;
without Go, they are the goal rows.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from allocbridge_localcluster.pki import Pki
from benchmarks import golang
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


Driver = Callable[[int, float], Awaitable[Load]]  # (clients, seconds) -> what they measured


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


def aiohttp_driver(fetch: Fetch) -> Driver:
    async def drive(clients: int, seconds: float) -> Load:
        return await closed_loop(fetch, concurrency=clients, seconds=seconds)

    return drive


def go_driver(binary: Path, url: str, *auth: str, gomaxprocs: int = 0) -> Driver:
    """`goclients load` on `url`; `auth` is `-token T` or the `-ca/-cert/-key` files;
    `gomaxprocs` as `golang.run` takes it."""

    async def drive(clients: int, seconds: float) -> Load:
        result = await golang.run(
            binary,
            "load",
            "-url",
            url,
            *auth,
            "-clients",
            str(clients),
            "-seconds",
            str(seconds),
            "-warmup",
            str(WARMUP),
            gomaxprocs=gomaxprocs,
        )
        latencies = Latencies.of(result["latencies"])
        return Load(latencies, rate(latencies.n, result["seconds"]))

    return drive


@dataclass(frozen=True)
class Client:
    """One client kind driving both sides."""

    name: str  # in the rows
    ours: Driver
    peer: Driver
    goal: bool


async def measure(
    bench: Bench,
    replica: OperatorProcess,
    namespace: str,
    name: str,
    seconds: float,
    *,
    gomaxprocs: int = 1,
) -> list[Row]:
    """The rows; `gomaxprocs` is the Go client's on both sides (0: Go's default)."""
    obj = await bench.api.get(f"{collection(namespace)}/{name}")
    our_url = f"{replica.api}/v1/allocation/{obj['metadata']['uid']}"
    peer_url = f"{bench.api.server}{collection(namespace)}/{name}"
    sizes = (
        await fetch_body(bench.http, our_url)(),
        await fetch_body(bench.api.session, peer_url)(),
    )
    ours = aiohttp_driver(fetch_body(bench.http, our_url))
    peer = aiohttp_driver(fetch_body(bench.api.session, peer_url))
    clients = [Client("aiohttp", ours, peer, goal=True)]
    binary = await golang.build()
    if binary is not None:
        pki = Pki(bench.cluster.state_dir / "pki")
        certificate = (
            "-ca",
            str(pki.ca_cert),
            "-cert",
            str(pki.admin_cert),
            "-key",
            str(pki.admin_key),
        )
        threads = f"GOMAXPROCS={gomaxprocs}" if gomaxprocs > 0 else "Go's default GOMAXPROCS"
        clients = [
            Client(
                f"Go net/http, {threads}",
                go_driver(binary, our_url, "-token", bench.client_token, gomaxprocs=gomaxprocs),
                go_driver(binary, peer_url, *certificate, gomaxprocs=gomaxprocs),
                goal=True,
            ),
            Client("aiohttp", ours, peer, goal=False),
        ]
    result: list[Row] = []
    for client in clients:
        loads: dict[tuple[str, int], Load] = {}
        for concurrency in CONCURRENCIES:
            sides = [("ours", client.ours), ("peer", client.peer)]
            if concurrency != CONCURRENCIES[0]:
                sides.reverse()
            for side, drive in sides:
                log(f"single reads ({client.name}): {side}, {concurrency} clients")
                loads[side, concurrency] = await drive(concurrency, seconds)
        result += rows(loads, sizes, client.name, goal=client.goal)
    return result


def rows(
    loads: dict[tuple[str, int], Load], sizes: tuple[int, int], client: str, *, goal: bool
) -> list[Row]:
    peer = f"kube-apiserver GET of the same Allocation ({client}, admin certificate)"
    suffix = "" if goal else f" ({client} client)"
    result: list[Row] = []
    for concurrency in CONCURRENCIES:
        mine, theirs = loads["ours", concurrency], loads["peer", concurrency]
        counts = f"n={mine.latencies.n:,}/{theirs.latencies.n:,}"
        result += [
            Row(
                SECTION,
                f"GET /v1/allocation/:id, {concurrency} clients{suffix}: requests/s",
                mine.per_second,
                "req/s",
                peer,
                theirs.per_second,
                better="higher",
                goals=(rate_times(RATE_GOAL),) if goal else (),
                note=f"{counts}; bodies {sizes[0]:,} B vs {sizes[1]:,} B; ACL on",
            ),
            Row(
                SECTION,
                f"GET /v1/allocation/:id, {concurrency} clients{suffix}: p99",
                mine.latencies.ms(99),
                "ms",
                peer,
                theirs.latencies.ms(99),
                goals=(faster_than(RATE_GOAL),) if goal else (),
                note=f"p50 {mine.latencies.ms(50):.2f} ms vs {theirs.latencies.ms(50):.2f} ms",
            ),
        ]
    return result
