"""`GET /v1/jobs` and `GET /v1/job/:job_id/allocations`: the read-only jobs view.

What the nomad CLI's `-job` forms call (`alloc logs -job web`, `alloc exec -job web`): it
resolves the job with `/v1/jobs?prefix=web`, then picks an allocation from the job's list.
Jobs are derived from the allocations in the store (`store.jobs`), never read from Kubernetes.

`/v1/jobs` takes `prefix` (a job ID prefix), `namespace` (`*` for every namespace the caller
may read), `filter` (on the JobListStub), `per_page`, `next_token` and `reverse`, in Nomad's
order: by namespace, then job ID; the page token is `<namespace>.<job ID>`. Both endpoints
need `read-job` and answer blocking queries on the store's index. A job no allocation names is
unknown: its allocation list is `[]`, as Nomad answers for a job it does not know.

Deviations: only the `-job` forms' needs are served (no job read, versions or summary
endpoints); `meta` is not needed, as `Meta` is always present when set.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aiohttp import web

from allocbridge.api.allocations import (
    ReadableNamespaces,
    compile_matcher,
    filtered_blocking_query,
)
from allocbridge.api.answers import Answer
from allocbridge.api.blocking import blocking_query
from allocbridge.api.context import caller, context, synced_store
from allocbridge.api.query import parse_query
from allocbridge.api.routing import Endpoint
from allocbridge.auth import ALL_NAMESPACES, READ_JOB
from allocbridge.store import Page, StoredAllocation, stub_array
from allocbridge.store.jobs import job_stub
from allocbridge.store.paging import paginate

Json = dict[str, Any]


async def list_jobs(request: web.Request) -> Answer:
    query = parse_query(request.query)
    ctx = context(request)
    who = caller(request)
    await ctx.authorizer.check(who, READ_JOB, query.namespace)
    matches = compile_matcher(query.filter)
    store = await synced_store(ctx)
    every_namespace = query.namespace == ALL_NAMESPACES
    readable = ReadableNamespaces(ctx.authorizer, who, store) if every_namespace else None

    def run() -> tuple[int, Page[Json]]:
        allowed = None if readable is None else readable.allowed
        keys = [
            (namespace, job_id)
            for namespace, job_id in store.jobs()
            if job_id.startswith(query.prefix)
            and (every_namespace or namespace == query.namespace)
            and (allowed is None or namespace in allowed)
        ]
        if query.reverse:
            keys.reverse()
        stubs = (job_stub(ns, job_id, store.job_allocations(ns, job_id)) for ns, job_id in keys)
        page = paginate(
            stubs,
            per_page=query.per_page,
            token_of=_token,
            before_token=_before(query.next_token, reverse=query.reverse),
            accept=matches,
        )
        return store.index, page

    index, page = await filtered_blocking_query(store, query, run, readable)
    return Answer(page.items, index=index, next_token=page.next_token)


def _token(stub: Json) -> str:
    return f"{stub['Namespace']}.{stub['ID']}"


def _before(token: str, *, reverse: bool) -> Callable[[Json], bool] | None:
    """Skip jobs that sort before the token (strings compared, as Nomad's tokenizer does)."""
    if not token:
        return None
    if reverse:
        return lambda stub: _token(stub) > token
    return lambda stub: _token(stub) < token


async def job_allocations(request: web.Request) -> Answer:
    query = parse_query(request.query)
    job_id = request.match_info["job_id"]
    ctx = context(request)
    await ctx.authorizer.check(caller(request), READ_JOB, query.namespace)
    store = await synced_store(ctx)

    def run() -> tuple[int, list[StoredAllocation]]:
        return store.index, store.job_allocations(query.namespace, job_id)

    index, allocs = await blocking_query(store, query, run)
    return Answer(array=stub_array(allocs), index=index)


ENDPOINTS = [
    Endpoint("/v1/jobs", {"GET": list_jobs}),
    Endpoint("/v1/job/{job_id:[^/]+}/allocations", {"GET": job_allocations}),
]
