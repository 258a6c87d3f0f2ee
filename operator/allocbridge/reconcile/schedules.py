"""Following the pause schedules of running tasks, on every reconcile pass.

Each pass moves a task into or out of its cron window (`allocbridge.model.schedule`) through
the pause action, and says when to look again.

A move the task cannot make (its main process is a bare PID 1) is recorded once on the task
(`refuse_pause`) and not tried again on every pass.
"""

from __future__ import annotations

import datetime
import logging

from allocbridge.actions.pause import Pausing
from allocbridge.actions.records import Target
from allocbridge.cluster.resources import Json
from allocbridge.model import schedule as sched
from allocbridge.model.allocstatus import (
    DESIRED_STATUS,
    DESIRED_STOP,
    OBSERVED,
    PAUSE_REFUSED,
    PAUSED,
    STATE,
    TASK_RUNNING,
    TASK_STATES,
)
from allocbridge.model.errors import NomadError
from allocbridge.model.spec import AllocationSpec

log = logging.getLogger(__name__)

#: Seconds to the next check when no schedule boundary comes sooner.
MAX_CHECK_INTERVAL = 3600.0


async def follow_schedules(
    actions: Pausing, alloc: Json, spec: AllocationSpec, status: Json
) -> float | None:
    """Pause or resume running tasks whose cron window says so; seconds to the next check
    (None: no task has a schedule, or the allocation is stopping)."""
    if status.get(DESIRED_STATUS) == DESIRED_STOP:
        return None
    meta = alloc["metadata"]
    target = Target(meta["namespace"], meta["name"], meta["uid"])
    now = datetime.datetime.now(datetime.UTC)
    next_check: float | None = None
    for task in spec.tasks:
        if task.schedule is None:
            continue
        state = (status.get(TASK_STATES) or {}).get(task.name) or {}
        next_check = min(next_check or MAX_CHECK_INTERVAL, sched.next_boundary(task.schedule, now))
        if state.get(STATE) != TASK_RUNNING:
            continue
        current = str(state.get(PAUSED, ""))
        wanted = sched.settle(current, task.schedule, now)
        refused = ((status.get(OBSERVED) or {}).get(task.name) or {}).get(PAUSE_REFUSED)
        if wanted in (current, refused):
            continue
        try:
            await actions.apply_pause(target, task.name, current, wanted, override=False)
        except NomadError as exc:  # recorded once on the task, not retried every pass
            log.warning("schedule not followed: %s", exc.message, extra={"task": task.name})
            await actions.refuse_pause(target, task.name, wanted, exc.message)
    return next_check
