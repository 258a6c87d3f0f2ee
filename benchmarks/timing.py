"""Timing loops shared by the measurements: sequential latency series and closed-loop rates."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from benchmarks.table import Latencies, rate

Fetch = Callable[[], Awaitable[int]]  # one request; returns the body size in bytes


@dataclass(frozen=True)
class Series:
    latencies: Latencies
    body_bytes: int


async def latency_series(
    fetch: Fetch, *, samples: int, budget: float, warmup: int = 2, minimum: int = 5
) -> Series:
    """Up to `samples` requests one after another (after `warmup` unrecorded ones), stopping
    early once `budget` seconds have passed and at least `minimum` were recorded."""
    size = 0
    for _ in range(warmup):
        size = await fetch()
    times: list[float] = []
    began = time.perf_counter()
    while len(times) < samples:
        start = time.perf_counter()
        size = await fetch()
        times.append(time.perf_counter() - start)
        if len(times) >= minimum and time.perf_counter() - began > budget:
            break
    return Series(Latencies.of(times), size)


async def closed_loop_rate(fetch: Fetch, *, concurrency: int, seconds: float) -> float:
    """Requests per second with `concurrency` clients, each sending its next request as soon as
    the last one is answered, for about `seconds` (requests under way at the end complete)."""
    deadline = time.perf_counter() + seconds
    done = 0

    async def client() -> None:
        nonlocal done
        while time.perf_counter() < deadline:
            await fetch()
            done += 1

    began = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(concurrency)))
    return rate(done, time.perf_counter() - began)


def timed_in_thread(work: Callable[[], int]) -> Fetch:
    """A blocking call (a subprocess) as a Fetch, timed by the caller around the thread hop."""

    async def fetch() -> int:
        return await asyncio.to_thread(work)

    return fetch
