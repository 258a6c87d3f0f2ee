"""Pause: stop or continue a task's processes, by override or by its schedule's cron window.

The state machine is `allocbridge.model.schedule`'s; this module moves the task there: SIGSTOP
or SIGCONT to everything below the container's PID 1 (which itself cannot be stopped from
inside), and the new state and its event written into the status. A schedule the task cannot
follow is recorded once (`pauseRefused`), not retried on every pass.
"""

from __future__ import annotations

import datetime
import time

from allocbridge.actions.incontainer import InContainer
from allocbridge.actions.records import Target
from allocbridge.cluster.resources import Json
from allocbridge.model import pid1 as pid1_rules
from allocbridge.model import schedule as sched
from allocbridge.model.allocstatus import (
    OBSERVED,
    PAUSE_REFUSED,
    PAUSED,
    TASK_STATES,
    TaskEvent,
    add_events,
    task_event,
)
from allocbridge.model.errors import NomadError

UNPAUSABLE = (
    "its main process is the container's PID 1, which Linux does not let anything inside "
    "the container stop; run the task under an init such as tini (pausing then stops every "
    "process below it)"
)


class Pausing(InContainer):
    """The pause action: overrides through the API, schedule moves for the reconciler."""

    async def set_pause(self, target: Target, task: str, request: str) -> int:
        """Apply an override; returns the index of the write."""
        if request not in sched.REQUESTS:
            raise NomadError(400, sched.INVALID_STATE)
        obj, spec = await self.load(target)
        found = spec.task(task)
        if found is None:
            raise NomadError(404, "Task not found")
        current = str(
            (((obj.get("status") or {}).get(TASK_STATES) or {}).get(task) or {}).get(PAUSED, "")
        )
        wanted = sched.transition(current, request, found.schedule)
        settled = sched.settle(wanted, found.schedule, datetime.datetime.now(datetime.UTC))
        return await self.apply_pause(target, task, current, settled, override=True)

    async def apply_pause(
        self, target: Target, task: str, current: str, new: str, *, override: bool
    ) -> int:
        """Move a task to schedule state `new`, stopping or continuing its process.

        `current` is what the caller saw. The reconciler (override False) sees the object
        through its watch, a moment behind, so a schedule move already made is not made twice.
        """
        if not override:
            obj, _spec = await self.load(target)
            task_state = ((obj.get("status") or {}).get(TASK_STATES) or {}).get(task) or {}
            if str(task_state.get(PAUSED, "")) != current:  # moved meanwhile
                return int(obj["metadata"]["resourceVersion"])
        cause = "override" if override else "schedule"
        events: list[TaskEvent] = []
        if sched.paused(new) != sched.paused(current):
            where = pid1_rules.route(await self.pid1(target, task), pid1_rules.SIGSTOP)
            if where is None:
                raise NomadError(500, f'cannot pause task "{task}": {UNPAUSABLE}')
            if sched.paused(new):
                await self.kill(target, task, "SIGSTOP", where)
                events.append(task_event("Pausing", time.time_ns(), f"Pausing due to {cause}"))
            else:
                await self.kill(target, task, "SIGCONT", where)
                events.append(task_event("Running", time.time_ns(), f"Running due to {cause}"))

        def move(status: Json, _obj: Json) -> None:
            add_events(status, {task: events})
            status.setdefault(TASK_STATES, {}).setdefault(task, {})[PAUSED] = new
            (status.get(OBSERVED) or {}).get(task, {}).pop(PAUSE_REFUSED, None)

        written = await self.update(target, move)
        return int(written["metadata"]["resourceVersion"])

    async def refuse_pause(self, target: Target, task: str, wanted: str, reason: str) -> None:
        """Record once that the schedule asked for `wanted` and the task cannot follow it."""
        message = f"Schedule not followed: {reason}"
        event = task_event("Driver", time.time_ns(), message, driverMessage=message)

        def refuse(status: Json, _obj: Json) -> None:
            seen = status.setdefault(OBSERVED, {}).setdefault(task, {})
            if seen.get(PAUSE_REFUSED) != wanted:  # recorded once, however often asked
                seen[PAUSE_REFUSED] = wanted
                add_events(status, {task: [event]})

        await self.update(target, refuse)
