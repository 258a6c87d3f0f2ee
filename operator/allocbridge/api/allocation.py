"""`GET /v1/allocation/:alloc_id`: one allocation, full ID only, with blocking.

The index is the allocation's ModifyIndex, or the store's index when it is unknown; the 404
`alloc not found` carries the metadata headers too, as Nomad's does. The caller needs
`read-job` on the allocation's namespace; for an unknown ID the check runs on the request's
`namespace`, so a bad token gets 403 whether or not the ID exists.

`read_at_once` is the same read for the API listener's shortcut (`api.shortcut`), which answers
a plain request (no query options) without a task of its own when nothing needs waiting for.

Deviation: a caller without `read-job` gets 403 `Permission denied`; Nomad answers 500
`Unknown allocation "<id>"`.
"""

from __future__ import annotations

from aiohttp import web

from allocbridge.api.answers import Answer
from allocbridge.api.blocking import blocking_query
from allocbridge.api.context import ApiContext, caller, context, synced_store
from allocbridge.api.errors import NomadError
from allocbridge.api.ids import parse_alloc_id
from allocbridge.api.query import parse_query
from allocbridge.api.routing import ALLOC_ID, Endpoint
from allocbridge.auth import READ_JOB, Caller, GrantsAtOnce
from allocbridge.store import StoredAllocation

ALLOC_NOT_FOUND = "alloc not found"


async def read_allocation(request: web.Request) -> Answer:
    query = parse_query(request.query)
    alloc_id = parse_alloc_id(request.match_info["alloc_id"])
    ctx = context(request)
    who = caller(request)
    store = ctx.store if ctx.store.synced else await synced_store(ctx)
    found = store.get(alloc_id) if alloc_id else None
    checked = found.namespace if found else query.namespace
    await ctx.authorizer.check(who, READ_JOB, checked)

    def run() -> tuple[int, StoredAllocation | None]:
        alloc = store.get(alloc_id) if alloc_id else None
        return (store.index if alloc is None else alloc.modify_index), alloc

    index, alloc = await blocking_query(store, query, run) if query.blocking else run()
    if alloc is None:
        raise NomadError(404, ALLOC_NOT_FOUND, index=index)
    if alloc.namespace != checked:  # it appeared while the request was parked
        await ctx.authorizer.check(who, READ_JOB, alloc.namespace)
    return Answer(alloc.wire, encoded=alloc.wire_json, index=index)


def read_at_once(
    ctx: ApiContext, grants: GrantsAtOnce, path_id: str, token: str | None
) -> StoredAllocation | None:
    """What `read_allocation` answers a request without query options, when that answer is a
    success known without waiting: a synced store, an ID that is found, a caller `grants`
    allows at once. None otherwise; the handler then answers it (every error included)."""
    store = ctx.store
    if not store.synced:
        return None
    try:
        alloc_id = parse_alloc_id(path_id)
    except NomadError:
        return None
    alloc = store.get(alloc_id) if alloc_id else None
    if alloc is None or not grants.granted(Caller(token=token), READ_JOB, alloc.namespace):
        return None
    return alloc


ENDPOINTS = [Endpoint(f"/v1/allocation/{ALLOC_ID}", {"GET": read_allocation})]
