"""Many clients at once on one replica: 200 concurrent clients mixing list, read, blocking and
paging requests for 60 s, and not one error.

The clients share the machine with the replica and the control plane, so this checks that the
replica keeps answering correctly under load (every answer a 200 with a whole JSON body), not
how fast: latencies belong to `make bench`. Requests go to the replica on loopback only; each
client's loop ends by itself when the time is up.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from typing import Any

import aiohttp
import pytest
from running_operator import (
    Operator,
    quick_allocation,
)

from allocbridge_localcluster.kubectl import eventually

pytestmark = pytest.mark.cluster

CLIENTS = 200
SECONDS = 60.0
ALLOCATIONS = 12
PER_PAGE = 5


async def one_client(
    session: aiohttp.ClientSession,
    api: str,
    namespace: str,
    ids: list[str],
    deadline: float,
    seed: int,
    counts: Counter[str],
    errors: list[str],
) -> None:
    """Until `deadline`: a random mix of the four kinds of request, each answer checked."""
    rng = random.Random(seed)
    listing = f"{api}/v1/allocations?namespace={namespace}"
    while time.monotonic() < deadline:
        kind = rng.choice(("list", "read", "blocking", "paging"))
        try:
            if kind == "list":
                body = await get(session, listing)
                ok = len(body) == len(ids)
            elif kind == "read":
                body = await get(session, f"{api}/v1/allocation/{rng.choice(ids)}")
                ok = body["ID"] in ids
            elif kind == "blocking":
                index = await current_index(session, listing)
                body = await get(session, f"{listing}&index={index}&wait=1s")
                ok = len(body) == len(ids)
            else:
                ok = await walk(session, listing) == sorted(ids)
        except (aiohttp.ClientError, TimeoutError, ValueError, KeyError) as exc:
            errors.append(f"{kind}: {exc!r}")
            continue
        if not ok:
            errors.append(f"{kind}: unexpected answer")
        counts[kind] += 1


async def get(session: aiohttp.ClientSession, url: str) -> Any:
    async with session.get(url) as response:
        if response.status != 200:
            raise ValueError(f"{url}: {response.status} {await response.text()}")
        return await response.json()


async def current_index(session: aiohttp.ClientSession, url: str) -> int:
    async with session.get(url) as response:
        await response.read()
        return int(response.headers["X-Nomad-Index"])


async def walk(session: aiohttp.ClientSession, listing: str) -> list[str]:
    """Every allocation's ID, a page at a time."""
    found: list[str] = []
    token = ""
    while True:
        url = f"{listing}&per_page={PER_PAGE}" + (f"&next_token={token}" if token else "")
        async with session.get(url) as response:
            if response.status != 200:
                raise ValueError(f"{url}: {response.status}")
            found += [stub["ID"] for stub in await response.json()]
            token = response.headers.get("X-Nomad-NextToken", "")
        if not token:
            return sorted(found)


def test_two_hundred_clients_for_a_minute_get_no_error(
    operator: Operator, kubectl: Any, namespace: str
) -> None:
    for i in range(ALLOCATIONS):
        kubectl.apply(quick_allocation(f"load-{i:02d}", namespace))

    def listed() -> list[str] | None:
        stubs = operator.get(f"/v1/allocations?namespace={namespace}")
        return [s["ID"] for s in stubs] if len(stubs) == ALLOCATIONS else None

    ids: list[str] = eventually(listed, timeout=60, what="the allocations in the store")

    async def run() -> tuple[Counter[str], list[str]]:
        counts: Counter[str] = Counter()
        errors: list[str] = []
        timeout = aiohttp.ClientTimeout(total=60)
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
            deadline = time.monotonic() + SECONDS
            await asyncio.gather(
                *(
                    one_client(session, operator.api, namespace, ids, deadline, i, counts, errors)
                    for i in range(CLIENTS)
                )
            )
        return counts, errors

    counts, errors = asyncio.run(run())
    print(f"{sum(counts.values()):,} requests in {SECONDS:.0f} s: {dict(counts)}")
    assert not errors, f"{len(errors)} errors, the first: {errors[:5]}"
    assert set(counts) == {"list", "read", "blocking", "paging"}
