"""Blocking queries: N parked on the current index, then one Allocation changes.

allocbridge: N clients each send `GET /v1/allocations?namespace=<ns>&task_states=false
&per_page=25&index=<X-Nomad-Index>&wait=300s` (a dashboard watching the first page of a
namespace) on connections of their own, and park. Once the operator holds N established
connections on its API port and a second has passed, its RSS is read again; then one Allocation
in that namespace gets a new label, and the clock runs from just before that PATCH is sent
until the last of the N answers (each must be 200 with a higher X-Nomad-Index).

Peer: the Kubernetes way to wait for a change, N watches of the same namespace's Allocations
from the current resourceVersion, each on its own connection: kube-apiserver's RSS added, and
the time until all N have received the event of the same kind of change.

The store's index also moves on watch bookmarks (the etcd revision moves with any write in the
cluster, e.g. node leases), which wakes parked queries without a change; a round in which any
query returns before the change is discarded and run again (at most 3 times).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Final

import aiohttp

from benchmarks.harness import (
    Bench,
    BenchError,
    OperatorProcess,
    established_connections,
    log,
    rss,
)
from benchmarks.population import collection
from benchmarks.table import Goal, Row, below, mb

SECTION: Final = "Blocking queries"
MEMORY_GOAL_MB: Final = 50.0
WAKE_GOAL_S: Final = 1.0
PAGE: Final = 25
ROUNDS: Final = 3


class EarlyAnswerError(Exception):
    """A parked query answered before the change (a bookmark moved the index)."""


@dataclass
class Outcome:
    added_bytes: int
    seconds: float
    first: float
    extra: dict[str, float] = field(default_factory=dict)

    @classmethod
    def timed(cls, added_bytes: int, answers: list[float], changed_at: float) -> Outcome:
        """The last and first answer's delay after the change at `changed_at`."""
        return cls(added_bytes, max(answers) - changed_at, min(answers) - changed_at)


async def _cancel_all(tasks: list[asyncio.Task[None]]) -> None:
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def _settle(check: int, port: int, wanted: int, patience: float) -> None:
    deadline = time.monotonic() + patience
    while established_connections(port) < check + wanted:
        if time.monotonic() > deadline:
            got = established_connections(port) - check
            raise BenchError(f"only {got} of {wanted} connections established on :{port}")
        await asyncio.sleep(0.1)


async def _touch(bench: Bench, namespace: str, name: str, value: str) -> None:
    await bench.api.merge_patch(
        f"{collection(namespace)}/{name}",
        {"metadata": {"labels": {"bench.allocbridge.io/touched": value}}},
    )


async def ours(
    bench: Bench,
    replica: OperatorProcess,
    *,
    namespace: str,
    target: str,
    count: int,
    round_: int,
) -> Outcome:
    base = f"{replica.api}/v1/allocations?namespace={namespace}&task_states=false&per_page={PAGE}"
    async with bench.http.get(base) as response:
        index = int(response.headers["X-Nomad-Index"])
        await response.read()
    changed_at = 0.0
    answers: list[float] = []
    connector = aiohttp.TCPConnector(limit=0, force_close=True)
    async with aiohttp.ClientSession(
        connector=connector,
        headers={"X-Nomad-Token": bench.client_token},
        timeout=aiohttp.ClientTimeout(total=None),
    ) as session:

        async def park() -> None:
            async with session.get(f"{base}&index={index}&wait=300s") as answer:
                await answer.read()
                now = time.perf_counter()
                if not changed_at:
                    raise EarlyAnswerError()
                if answer.status != 200 or int(answer.headers["X-Nomad-Index"]) <= index:
                    raise BenchError(f"blocking query answered {answer.status}")
                answers.append(now)

        before = rss(replica.pid)
        idle = established_connections(replica.api_port)
        tasks = [asyncio.create_task(park()) for _ in range(count)]
        try:
            await _settle(idle, replica.api_port, count, patience=120)
            await asyncio.sleep(1.0)
            early = [t for t in tasks if t.done()]
            if early:
                raise EarlyAnswerError()
            parked = rss(replica.pid)
            changed_at = time.perf_counter()
            await _touch(bench, namespace, target, f"ours-{round_}")
            await asyncio.gather(*tasks)
        finally:
            await _cancel_all(tasks)
    return Outcome.timed(parked - before, answers, changed_at)


async def kube_watches(
    bench: Bench, *, namespace: str, target: str, count: int, apiserver_pid: int
) -> Outcome:
    path = collection(namespace)
    listed = await bench.api.get(f"{path}?limit=1")
    version = listed["metadata"]["resourceVersion"]
    url = (
        f"{bench.api.server}{path}?watch=1&resourceVersion={version}"
        "&allowWatchBookmarks=false&timeoutSeconds=600"
    )
    changed_at = 0.0
    answers: list[float] = []
    opened = 0
    all_open = asyncio.Event()
    connector = aiohttp.TCPConnector(limit=0, ssl=bench.api.ssl, force_close=True)
    async with aiohttp.ClientSession(
        connector=connector, timeout=aiohttp.ClientTimeout(total=None)
    ) as session:

        async def watch() -> None:
            nonlocal opened
            async with session.get(url) as response:
                if response.status != 200:
                    raise BenchError(f"watch: {response.status}")
                opened += 1
                if opened == count:
                    all_open.set()
                await response.content.readline()
                if not changed_at:
                    raise EarlyAnswerError()
                answers.append(time.perf_counter())

        before = rss(apiserver_pid)
        tasks = [asyncio.create_task(watch()) for _ in range(count)]
        try:
            async with asyncio.timeout(180):
                await all_open.wait()
            await asyncio.sleep(1.0)
            parked = rss(apiserver_pid)
            changed_at = time.perf_counter()
            await _touch(bench, namespace, target, f"kube-{time.time_ns()}")
            async with asyncio.timeout(120):
                await asyncio.gather(*tasks)
        finally:
            await _cancel_all(tasks)
    return Outcome.timed(parked - before, answers, changed_at)


async def _rounds(run: str, attempt: Callable[[int], Awaitable[Outcome]]) -> Outcome:
    for round_ in range(ROUNDS):
        with contextlib.suppress(EarlyAnswerError):
            return await attempt(round_)
        log(f"blocking: {run}: a query answered before the change (bookmark?); again")
    raise BenchError(f"{run}: parked queries kept answering without a change")


async def measure(
    bench: Bench,
    replica: OperatorProcess,
    *,
    namespace: str,
    target: str,
    count: int,
    apiserver_pid: int,
) -> list[Row]:
    log(f"blocking: {count} parked queries on allocbridge")
    mine = await _rounds(
        "allocbridge",
        lambda r: ours(bench, replica, namespace=namespace, target=target, count=count, round_=r),
    )
    await asyncio.sleep(2.0)
    log(f"blocking: {count} watches on the API server")
    peer = await _rounds(
        "API server",
        lambda _: kube_watches(
            bench, namespace=namespace, target=target, count=count, apiserver_pid=apiserver_pid
        ),
    )
    return [
        Row(
            SECTION,
            f"RSS added by {count:,} parked queries",
            mb(mine.added_bytes),
            "MB",
            f"kube-apiserver RSS added by {count:,} watches",
            mb(peer.added_bytes),
            goals=(below(MEMORY_GOAL_MB, "MB"),),
            note="operator /proc VmRSS before and after parking",
        ),
        Row(
            SECTION,
            f"all {count:,} answered after one Allocation changed",
            mine.seconds,
            "s",
            f"all {count:,} watches got the event",
            peer.seconds,
            goals=(Goal("value", "<", WAKE_GOAL_S, f"< {WAKE_GOAL_S:g} s"),),
            note=f"first answer after {mine.first * 1000:.0f} ms vs {peer.first * 1000:.0f} ms",
        ),
    ]
