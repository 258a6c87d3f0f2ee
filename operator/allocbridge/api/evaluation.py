"""`GET /v1/evaluation/:eval_id` and `GET /v1/evaluation/:eval_id/allocations`.

What the `nomad` CLI reads after `nomad alloc stop` when it is not told `-detach`: it polls the
evaluation until its status is final, then lists the allocations it placed. Evaluations are
derived from the allocations that name them (`model.evaluations`), so both answer from the
store, with blocking queries.

As for an allocation, the caller needs `read-job` on the evaluation's namespace, or on the
request's `namespace` when the evaluation is unknown. An unknown evaluation is 404
`eval not found`; its allocations are `[]`. A malformed ID is 400
`eval lookup failed: index error: <reason>` (Nomad: 500, as for allocations).
"""

from __future__ import annotations

from typing import Final

from aiohttp import web

from allocbridge.api.answers import Answer
from allocbridge.api.blocking import blocking_query
from allocbridge.api.context import caller, context, synced_store
from allocbridge.api.errors import NomadError
from allocbridge.api.ids import parse_full_id
from allocbridge.api.query import QueryOptions, parse_query
from allocbridge.api.routing import EVAL_ID, Endpoint
from allocbridge.auth import READ_JOB
from allocbridge.model.evaluations import evaluation
from allocbridge.store import StoredAllocation, stub_array

EVAL_NOT_FOUND: Final = "eval not found"


async def _placed(
    request: web.Request, query: QueryOptions, *, table_index: bool
) -> tuple[int, str, list[StoredAllocation]]:
    """(index, evaluation ID, allocations it placed), once the caller may read them.

    The index is the store's (`table_index`, Nomad's for a list of allocations), else the
    newest change among the allocations placed, which is what can change what is shown.
    """
    evaluation_id = parse_full_id(request.match_info["eval_id"], "eval")
    ctx = context(request)
    store = await synced_store(ctx)

    def run() -> tuple[int, list[StoredAllocation]]:
        placed = store.placed_by(evaluation_id) if evaluation_id else []
        if table_index or not placed:
            return store.index, placed
        return max(a.modify_index for a in placed), placed

    _, placed = run()
    checked = placed[0].namespace if placed else query.namespace
    await ctx.authorizer.check(caller(request), READ_JOB, checked)
    index, placed = await blocking_query(store, query, run)
    if placed and placed[0].namespace != checked:  # it appeared while the request was parked
        await ctx.authorizer.check(caller(request), READ_JOB, placed[0].namespace)
    return index, evaluation_id or "", placed


async def read_evaluation(request: web.Request) -> Answer:
    query = parse_query(request.query)
    index, evaluation_id, placed = await _placed(request, query, table_index=False)
    found = evaluation(evaluation_id, [a.wire for a in placed])
    if found is None:
        raise NomadError(404, EVAL_NOT_FOUND, index=index)
    return Answer(found, index=index)


async def evaluation_allocations(request: web.Request) -> Answer:
    query = parse_query(request.query)
    index, _, placed = await _placed(request, query, table_index=True)
    return Answer(array=stub_array(placed), index=index)


ENDPOINTS = [
    Endpoint(f"/v1/evaluation/{EVAL_ID}", {"GET": read_evaluation}),
    Endpoint(f"/v1/evaluation/{EVAL_ID}/allocations", {"GET": evaluation_allocations}),
]
