"""Scale: one replica's store at 50,000 allocations, beside the same replica at 10,000.

Opt-in (`--only scale`, or added to `--only`): creating 40,000 more Allocations through the API
server takes minutes, which the default run's 15-minute budget cannot hold. It runs on the
store sections' standby replica once they are done, so it starts at `--allocations` (10,000):

1. the full list's p50 (`GET /v1/allocations?namespace=*&task_states=false`, the listing
   section's request, sequential, one connection) at 10,000, by three clients. The goal binds
   Go's net/http reading the body as it arrives (`benchmarks/goclients load` with one client,
   in a process of its own; as a client decoding while it reads, Go's `json.Decoder`). Shown
   beside it without a goal: aiohttp in this process counting the body's bytes as they arrive,
   and aiohttp's `read()` of the whole body (the listing section's client). Those clients' own
   time grows faster than the body (a 40 MB body read in Python: a fresh mmap and its page
   faults for every body above glibc's 32 MB threshold; more garbage per request), and they
   share the two cores with the replica, so they measure themselves as much as the server.
   Without Go, the counting aiohttp client is the goal's;
2. `--scale-allocations` minus those created the same way (status included), the replica's
   store growing through its watch; its RSS then, and kube-apiserver's;
3. the same lists' p50 at 50,000: goal at most 5x the 10,000 figure (Go's client); beside it,
   without a goal, the machine's floor: a minimal server's prepared body of each list's size,
   timed by the same client (`benchmarks/floor.py`): the growth of moving the bytes alone;
4. a restart: time from the process's spawn until `/health` says it serves from a synced store
   (the initial list of every allocation), beside one raw kubernetes_asyncio list of the same
   50,000 objects from the API server (what that initial list must at least wait for); then its
   RSS, and the Go client's list p50 again, without a goal (a store built by one list lies more
   compactly in memory than one grown by the watch among its garbage). Goals: RSS at most 1 GB,
   and at most 15 KB per allocation (the RSS added over the empty store's, read when the
   replica started).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Final

from benchmarks import floor, golang, listing
from benchmarks.harness import Bench, BenchError, Json, OperatorProcess, log, rss
from benchmarks.population import populate, wait_listed
from benchmarks.table import Row, below, mb, within
from benchmarks.timing import Fetch, Series, latency_series

SECTION: Final = "Scale"
RSS_GOAL_MB: Final = 1000.0
PER_ALLOCATION_GOAL_KB: Final = 15.0
LIST_GROWTH_GOAL: Final = 5.0
READY_PATIENCE: Final = 900.0


@dataclass(frozen=True)
class ScaleOptions:
    allocations: int  # the size to grow to
    samples: int
    series_budget: float


@dataclass
class Figures:
    small: int
    large: int
    list_small: Series | None = None  # the counting aiohttp client
    list_large: Series | None = None
    go_small: Series | None = None  # Go's net/http, the goal's client when Go is there
    go_large: Series | None = None
    go_restarted: Series | None = None  # the same at the large size, after the restart
    floor_small: Series | None = None  # a minimal server's prepared body of each size
    floor_large: Series | None = None
    whole_small: Series | None = None  # aiohttp's read() of the whole body
    whole_large: Series | None = None
    empty_rss: int = 0
    live: tuple[int, int] = (0, 0)  # (operator, kube-apiserver) after growing
    fresh: tuple[int, int] = (0, 0)  # after the restart
    ready_seconds: float = 0.0
    raw_list_seconds: float = 0.0
    created_seconds: float = 0.0


async def measure(
    bench: Bench,
    replica: OperatorProcess,
    namespaces: list[str],
    template: Json,
    options: ScaleOptions,
    *,
    already: int,
    empty_rss: int,
    apiserver_pid: int,
) -> list[Row]:
    figures = Figures(small=already, large=max(options.allocations, already), empty_rss=empty_rss)
    binary = await golang.build()
    log(f"scale: list p50 at {already:,}")
    if binary is not None:
        figures.go_small = await go_list(binary, bench, replica, options)
    figures.list_small = await latency_series(
        counted_list(bench, replica), samples=options.samples, budget=options.series_budget
    )
    figures.whole_small = await latency_series(
        listing.ours(bench, replica), samples=options.samples, budget=options.series_budget
    )
    more = figures.large - already
    log(f"scale: creating {more:,} more allocations (up to {figures.large:,})")
    figures.created_seconds = await populate(
        bench, more, namespaces, template, start=already, concurrency=64
    )
    await wait_listed(bench, replica.api, figures.large, patience=READY_PATIENCE)
    figures.live = (replica.rss(), rss(apiserver_pid))
    log(f"scale: list p50 at {figures.large:,}")
    if binary is not None and figures.go_small is not None:
        figures.go_large = await go_list(binary, bench, replica, options)
        log("scale: the machine's floor, a prepared body of each list's size")
        figures.floor_small, figures.floor_large = await floor.measure(
            binary,
            small=figures.go_small.body_bytes,
            large=figures.go_large.body_bytes,
            samples=options.samples,
            budget=options.series_budget,
        )
    figures.list_large = await latency_series(
        counted_list(bench, replica), samples=options.samples, budget=options.series_budget
    )
    figures.whole_large = await latency_series(
        listing.ours(bench, replica), samples=options.samples, budget=options.series_budget
    )
    log("scale: one raw list of every allocation from the API server")
    api = await listing.admin_client(bench)
    try:
        began = time.perf_counter()
        await listing.raw_list(api)()
        figures.raw_list_seconds = time.perf_counter() - began
    finally:
        await api.close()
    log("scale: restarting the replica (initial list of every allocation)")
    replica.stop()
    began = time.perf_counter()
    await replica.start(patience=READY_PATIENCE)
    figures.ready_seconds = time.perf_counter() - began
    await wait_listed(bench, replica.api, figures.large, patience=READY_PATIENCE)
    figures.fresh = (replica.rss(), rss(apiserver_pid))
    if binary is not None:
        log(f"scale: list p50 at {figures.large:,} after the restart")
        figures.go_restarted = await go_list(binary, bench, replica, options)
    return rows(figures)


LIST_TARGET: Final = "/v1/allocations?namespace=*&task_states=false"


async def go_list(
    binary: Path, bench: Bench, replica: OperatorProcess, options: ScaleOptions
) -> Series:
    """The listing section's request, `--samples` times in a row by one Go client, each body
    read as it arrives and discarded."""
    return await golang.one_client_series(
        binary,
        replica.api + LIST_TARGET,
        requests=options.samples,
        seconds=options.series_budget,
        token=bench.client_token,
    )


def counted_list(bench: Bench, replica: OperatorProcess) -> Fetch:
    """The listing section's request, its body counted as it arrives rather than kept."""
    url = replica.api + LIST_TARGET

    async def fetch() -> int:
        size = 0
        async with bench.http.get(url) as response:
            if response.status != 200:
                raise BenchError(f"GET {url}: {response.status}")
            async for chunk in response.content.iter_any():
                size += len(chunk)
        return size

    return fetch


def list_row(
    f: Figures, small: Series | None, large: Series | None, client: str, *, goal: bool
) -> Row:
    """The full list at the large size beside the small one, by one client."""
    if small is None or large is None:
        raise ValueError("the scale figures are incomplete")
    return Row(
        SECTION,
        f"list all {f.large:,}: p50" + ("" if goal else f" ({client.split(',', 1)[0]} client)"),
        large.latencies.ms(50),
        "ms",
        f"the same list at {f.small:,}, same replica and client",
        small.latencies.ms(50),
        goals=(within(LIST_GROWTH_GOAL),) if goal else (),
        note=(
            f"n={large.latencies.n}/{small.latencies.n}; p99 {large.latencies.ms(99):,.1f} vs "
            f"{small.latencies.ms(99):,.1f} ms; bodies {mb(large.body_bytes):.1f} MB vs "
            f"{mb(small.body_bytes):.1f} MB; {client}"
        ),
    )


def rows(f: Figures) -> list[Row]:
    if f.list_small is None or f.list_large is None:
        raise ValueError("the scale figures are incomplete")
    large, small = f"{f.large:,}", f"{f.small:,}"
    added = f.live[0] - f.empty_rss
    per_allocation = added / max(f.large, 1) / 1000
    apiserver_note = f"kube-apiserver {mb(f.live[1]):,.0f} MB"
    counted = "aiohttp, counted as they arrive"
    if f.go_small is None or f.go_large is None:  # no Go here: the counting client binds
        result = [list_row(f, f.list_small, f.list_large, counted, goal=True)]
    else:
        result = [
            list_row(f, f.go_small, f.go_large, "Go net/http, read as they arrive", goal=True),
            list_row(f, f.list_small, f.list_large, counted, goal=False),
        ]
        if f.go_restarted is not None:  # the store built by one list, not grown by the watch
            restarted = list_row(f, f.go_small, f.go_restarted, "Go net/http", goal=False)
            result.append(replace(restarted, name=f"list all {large}: p50 after the restart"))
    if f.floor_small is not None and f.floor_large is not None:
        result.append(
            Row(
                SECTION,
                f"the machine's floor: a prepared body of the {large} list's size",
                f.floor_large.latencies.ms(50),
                "ms",
                f"the same at the {small} list's size",
                f.floor_small.latencies.ms(50),
                note="no goal: one sendall of a contiguous body by a minimal server, the same "
                "Go client (benchmarks/floor.py); the growth of moving the bytes alone",
            )
        )
    if f.whole_small is not None and f.whole_large is not None:
        result.append(
            Row(
                SECTION,
                f"list all {large}: p50, the whole body read",
                f.whole_large.latencies.ms(50),
                "ms",
                f"the same at {small}",
                f.whole_small.latencies.ms(50),
                note="no goal: aiohttp read(), the client's own cost grows faster than the body",
            )
        )
    result += [
        Row(
            SECTION,
            f"operator RSS with {large} allocations (grown by the watch)",
            mb(f.live[0]),
            "MB",
            "kube-apiserver RSS at the same moment",
            mb(f.live[1]),
            goals=(below(RSS_GOAL_MB, "MB"),),
            note=f"{f.large - f.small:,} created in {f.created_seconds:.0f} s",
        ),
        Row(
            SECTION,
            f"operator RSS with {large} allocations (fresh start)",
            mb(f.fresh[0]),
            "MB",
            "kube-apiserver RSS at the same moment",
            mb(f.fresh[1]),
            goals=(below(RSS_GOAL_MB, "MB"),),
        ),
        Row(
            SECTION,
            f"RSS per allocation at {large} (grown by the watch)",
            per_allocation,
            "KB",
            goals=(below(PER_ALLOCATION_GOAL_KB, "KB"),),
            note=(
                f"{mb(added):,.0f} MB over the empty store's {mb(f.empty_rss):.0f} MB; "
                f"{apiserver_note}"
            ),
        ),
        Row(
            SECTION,
            f"time to first ready after a restart, {large} allocations",
            f.ready_seconds,
            "s",
            f"one raw kubernetes_asyncio list of the same {large}",
            f.raw_list_seconds,
            note="no goal: from the process's spawn (Python's start included) until /health "
            "reports a synced store",
        ),
    ]
    return result
