"""Nomad's blocking queries over the store.

Run the query; if the request asked to block (`index` > 0) and the result's index is not above
it, park until the store's index moves past the one seen when the query ran, then run again.
When `wait` (plus up to wait/16 of random jitter, so parked clients do not return in lockstep)
runs out, the current result is the answer: 200, never an error. Shutdown releases everyone
at once with their current result.

The query runs synchronously between awaits, so it always sees one consistent store. What it
needs that takes awaiting (authorizing namespaces that appeared in the store) goes in
`prepare`, awaited before every run; the run follows it with no await between, so it sees the
store `prepare` left complete.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from typing import Final, TypeVar

from allocbridge.api.query import QueryOptions
from allocbridge.store import AllocationStore

T = TypeVar("T")

#: Nomad's `JitterFraction`.
JITTER_FRACTION: Final = 16


async def blocking_query(
    store: AllocationStore,
    query: QueryOptions,
    run: Callable[[], tuple[int, T]],
    *,
    prepare: Callable[[], Awaitable[None]] | None = None,
    jitter: Callable[[], float] = random.random,
) -> tuple[int, T]:
    """`run()` returns `(index, result)`; returns the first pair with index above the query's,
    or the last one when the wait runs out. `prepare()`, if given, is awaited before each run."""
    if prepare is not None:
        await prepare()
    seen = store.index
    index, result = run()
    if not query.blocking or index > query.index:
        return index, result
    loop = asyncio.get_running_loop()
    deadline = loop.time() + query.wait + jitter() * query.wait / JITTER_FRACTION
    while index <= query.index and not store.closed:
        remaining = deadline - loop.time()
        if remaining <= 0:
            break
        if await store.wait_for_index(seen, remaining) <= seen:
            break  # timed out (or shut down) without a change
        if prepare is not None:
            await prepare()
        seen = store.index
        index, result = run()
    return index, result
