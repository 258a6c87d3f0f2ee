"""`/v1/client/allocation/:alloc_id/restart`: restart one task, the running ones, or all.

Body `{"TaskName", "AllTasks"}`, both optional (an empty body restarts the running tasks);
answers `{}`. GET, POST and PUT are accepted (Nomad takes any method). Where Nomad answers 500
this answers 400 for `TaskName` with `AllTasks` and malformed JSON, 404 for an unknown task and
409 for a task or allocation that is not running, with Nomad's texts. As in Nomad, a body
that is not JSON fails first, then an unknown allocation (404) and a missing capability (403),
then the fields.
"""

from __future__ import annotations

from aiohttp import web

from allocbridge.api.answers import Answer
from allocbridge.api.errors import NomadError
from allocbridge.api.routing import ALLOC_ID, Endpoint
from allocbridge.api.targets import actions, field, json_body, target
from allocbridge.auth import ALLOC_LIFECYCLE


async def restart_allocation(request: web.Request) -> Answer:
    body = await json_body(request, required=False)
    task = field(body, "TaskName", str, "")
    all_tasks = field(body, "AllTasks", bool, False)
    _alloc, where = await target(request, ALLOC_LIFECYCLE)
    if task and all_tasks:  # after the lookup and the capability, as in Nomad
        raise NomadError(400, "task name cannot be set when restarting all tasks")
    await actions(request).restart(where, task, all_tasks)
    return Answer({})


ENDPOINTS = [
    Endpoint(
        f"/v1/client/allocation/{ALLOC_ID}/restart",
        {"GET": restart_allocation, "POST": restart_allocation, "PUT": restart_allocation},
    ),
]
