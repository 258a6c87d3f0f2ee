"""`GET /v1/allocation/:alloc_id/services`: the allocation's service registrations.

Nomad's namespace rule: the caller needs `read-job` on the *request* namespace (`namespace`,
default `default`), and an allocation in another namespace is `allocation not found`, so a
non-default namespace must be named. The index is the store's (at least 1), as Nomad uses its
registrations table index.
"""

from __future__ import annotations

from aiohttp import web

from allocbridge.api.answers import Answer
from allocbridge.api.blocking import blocking_query
from allocbridge.api.context import caller, context, synced_store
from allocbridge.api.errors import NomadError
from allocbridge.api.ids import parse_alloc_id
from allocbridge.api.query import parse_query
from allocbridge.api.routing import ALLOC_ID, Endpoint
from allocbridge.auth import READ_JOB
from allocbridge.store import StoredAllocation

ALLOCATION_NOT_FOUND = "allocation not found"


async def allocation_services(request: web.Request) -> Answer:
    query = parse_query(request.query)
    alloc_id = parse_alloc_id(request.match_info["alloc_id"])
    ctx = context(request)
    await ctx.authorizer.check(caller(request), READ_JOB, query.namespace)
    store = await synced_store(ctx)

    def run() -> tuple[int, StoredAllocation | None]:
        alloc = store.get(alloc_id) if alloc_id else None
        if alloc is not None and alloc.namespace != query.namespace:
            alloc = None
        return max(1, store.index), alloc

    index, alloc = await blocking_query(store, query, run)
    if alloc is None:
        raise NomadError(404, ALLOCATION_NOT_FOUND, index=index)
    return Answer(list(alloc.services), index=index)


ENDPOINTS = [Endpoint(f"/v1/allocation/{ALLOC_ID}/services", {"GET": allocation_services})]
