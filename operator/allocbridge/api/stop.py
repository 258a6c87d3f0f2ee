"""`POST|PUT /v1/allocation/:alloc_id/stop`: stop the allocation and reschedule it.

Answers `{"EvalID", "Index"}` with `X-Nomad-Index`; an unknown allocation is 404
`allocation not found` (checked before the capability, as in Nomad). Stopping an allocation
that is already stopped answers 409 with a message saying so (Nomad would stop it again).

The answer waits (up to `CATCH_UP` seconds) until this replica's store shows the stop's writes:
`nomad alloc stop` reads the returned evaluation at once and gives up on the first 404, and the
evaluation is derived from the replacement the stop created, which the store learns of through
its watch a few milliseconds after the write.
"""

from __future__ import annotations

from typing import Final

from aiohttp import web

from allocbridge.api.answers import Answer
from allocbridge.api.context import context
from allocbridge.api.query import parse_bool_option
from allocbridge.api.routing import ALLOC_ID, Endpoint
from allocbridge.api.targets import actions, target
from allocbridge.auth import ALLOC_LIFECYCLE

#: Seconds a stop's answer waits for the store to show the stop; a watch that lags longer
#: only delays the answer this much (the CLI may then see 404 `eval not found` once).
CATCH_UP: Final = 5.0


async def stop_allocation(request: web.Request) -> Answer:
    no_delay = parse_bool_option(request.query, "no_shutdown_delay") or False
    parse_bool_option(
        request.query, "reschedule"
    )  # accepted as Nomad does; stop always reschedules
    _alloc, where = await target(request, ALLOC_LIFECYCLE, not_found="allocation not found")
    eval_id, index = await actions(request).stop(where, no_shutdown_delay=no_delay)
    await context(request).store.wait_for_index(index - 1, CATCH_UP)
    return Answer({"EvalID": eval_id, "Index": index}, write_index=index)


ENDPOINTS = [
    Endpoint(f"/v1/allocation/{ALLOC_ID}/stop", {"POST": stop_allocation, "PUT": stop_allocation}),
]
