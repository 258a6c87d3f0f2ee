"""`POST|PUT /v1/client/allocation/:alloc_id/signal`: send a signal to one task or all running.

Body `{"Signal": "SIGUSR1", "Task": "web"}` (keys case-insensitive, as Go decodes them); answers
`{}`. Nomad answers 500 for an unknown or stopped task; here those are 404 `Task not found` and
409 `Task not running` (also when no task is named and none is running), and an unknown signal
name is 400 (docs/api.md lists these differences). As in Nomad, a body that is not JSON fails
first, then an unknown allocation (404) and a missing capability (403), then the signal.
"""

from __future__ import annotations

from aiohttp import web

from allocbridge.api.answers import Answer
from allocbridge.api.errors import NomadError
from allocbridge.api.routing import ALLOC_ID, Endpoint
from allocbridge.api.targets import actions, field, json_body, target
from allocbridge.auth import ALLOC_LIFECYCLE
from allocbridge.model.signals import UnknownSignalError, canonical


async def signal_allocation(request: web.Request) -> Answer:
    body = await json_body(request, required=True)
    name = field(body, "Signal", str, "")
    task = field(body, "Task", str, "")
    _alloc, where = await target(request, ALLOC_LIFECYCLE)
    if not name:
        raise NomadError(400, 'missing signal: the body needs a Signal such as "SIGUSR1"')
    try:
        canonical(name)
    except UnknownSignalError as exc:
        raise NomadError(400, str(exc)) from exc
    await actions(request).signal(where, name, task or None)
    return Answer({})


ENDPOINTS = [
    Endpoint(
        f"/v1/client/allocation/{ALLOC_ID}/signal",
        {"POST": signal_allocation, "PUT": signal_allocation},
    ),
]
