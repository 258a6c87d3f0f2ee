"""`/v1/client/allocation/:alloc_id/pause`: read or override a task's pause schedule state.

GET `?task=` answers `{"ScheduleState"}` (`read-job`); POST/PUT `{"Task", "ScheduleState":
"pause"|"run"|"scheduled"}` answers `{"Index"}` (`job-submit`). An invalid state is 400
`Not a valid task schedule state`, checked first, as in Nomad. Nomad serves this only in its
Enterprise edition; here it is part of the product.
"""

from __future__ import annotations

from aiohttp import web

from allocbridge.api.answers import Answer
from allocbridge.api.errors import NomadError
from allocbridge.api.routing import ALLOC_ID, Endpoint
from allocbridge.api.targets import actions, field, json_body, target
from allocbridge.auth import JOB_SUBMIT, READ_JOB
from allocbridge.model import schedule as sched


async def read_pause(request: web.Request) -> Answer:
    task = request.query.get("task", "")
    if not task:
        raise NomadError(400, "missing task: give the task name as ?task=")
    _alloc, where = await target(request, READ_JOB)
    state = await actions(request).pause_state(where, task)
    return Answer({"ScheduleState": state})


async def set_pause(request: web.Request) -> Answer:
    body = await json_body(request, required=False)
    state = field(body, "ScheduleState", str, "")
    if state not in sched.REQUESTS:
        raise NomadError(400, sched.INVALID_STATE)
    task = field(body, "Task", str, "")
    if not task:
        raise NomadError(400, "missing task: the body needs a Task")
    _alloc, where = await target(request, JOB_SUBMIT)
    index = await actions(request).set_pause(where, task, state)
    return Answer({"Index": index})


ENDPOINTS = [
    Endpoint(
        f"/v1/client/allocation/{ALLOC_ID}/pause",
        {"GET": read_pause, "POST": set_pause, "PUT": set_pause},
    ),
]
