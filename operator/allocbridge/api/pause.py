"""`/v1/client/allocation/:alloc_id/pause`: read or override a task's pause schedule state.

GET `?task=` answers `{"ScheduleState"}` (`read-job`); POST/PUT `{"Task", "ScheduleState":
"pause"|"run"|"scheduled"}` answers `{"Index"}` (`job-submit`). An invalid state is 400
`Not a valid task schedule state`, checked first, as in Nomad. Nomad serves this only in its
Enterprise edition; here it is part of the product.

GET reads the store, as every read does; an override's answer waits (up to `CATCH_UP` seconds)
until this replica's store shows the override's write, so a read that follows it here sees it.
"""

from __future__ import annotations

from typing import Final

from aiohttp import web

from allocbridge.api.answers import Answer
from allocbridge.api.context import context
from allocbridge.api.errors import NomadError
from allocbridge.api.routing import ALLOC_ID, Endpoint
from allocbridge.api.targets import actions, field, json_body, target
from allocbridge.auth import JOB_SUBMIT, READ_JOB
from allocbridge.model import schedule as sched
from allocbridge.store import StoredAllocation

#: Seconds an override's answer waits for the store to show it; a watch that lags longer only
#: delays the answer this much (a read right after it may then show the state before).
CATCH_UP: Final = 5.0


async def read_pause(request: web.Request) -> Answer:
    task = request.query.get("task", "")
    if not task:
        raise NomadError(400, "missing task: give the task name as ?task=")
    alloc, _where = await target(request, READ_JOB)
    if task not in _task_names(alloc):
        raise NomadError(404, "Task not found")
    state = ((alloc.wire.get("TaskStates") or {}).get(task) or {}).get("Paused", "")
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
    await context(request).store.wait_for_index(index - 1, CATCH_UP)
    return Answer({"Index": index})


def _task_names(alloc: StoredAllocation) -> set[str]:
    """The allocation's tasks, from the copy of its job the wire carries (which lists them
    even when the spec is invalid)."""
    groups = (alloc.wire.get("Job") or {}).get("TaskGroups") or []
    return {str(task.get("Name")) for group in groups for task in group.get("Tasks") or []}


ENDPOINTS = [
    Endpoint(
        f"/v1/client/allocation/{ALLOC_ID}/pause",
        {"GET": read_pause, "POST": set_pause, "PUT": set_pause},
    ),
]
