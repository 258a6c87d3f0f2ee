"""`GET /v1/allocation/:alloc_id/checks` and `/v1/client/allocation/:alloc_id/checks`.

The latest result of each health check, keyed by check ID. Like Nomad's client endpoints: no
blocking, no `X-Nomad-*` headers, and an unknown allocation is 404 `Unknown allocation "<id>"`.
The caller needs `read-job` on the allocation's namespace (the request's, for an unknown ID).

Deviations: only GET is served (Nomad accepts any method here); an allocation without results
answers `{}` where Nomad's client may answer `null`.
"""

from __future__ import annotations

from aiohttp import web

from allocbridge.api.answers import Answer
from allocbridge.api.query import parse_query
from allocbridge.api.routing import ALLOC_ID, Endpoint
from allocbridge.api.targets import readable_allocation
from allocbridge.auth import READ_JOB


async def allocation_checks(request: web.Request) -> Answer:
    parse_query(request.query)  # its 400s, though only `namespace` and `pretty` are used
    alloc = await readable_allocation(request, READ_JOB)
    return Answer(dict(alloc.checks))


ENDPOINTS = [
    Endpoint(f"/v1/allocation/{ALLOC_ID}/checks", {"GET": allocation_checks}),
    Endpoint(f"/v1/client/allocation/{ALLOC_ID}/checks", {"GET": allocation_checks}),
]
