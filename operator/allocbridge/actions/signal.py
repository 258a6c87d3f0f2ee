"""Signal: send a signal to one task, or to every running task, of an allocation.

Every task is checked (its PID 1 probed, see `incontainer`) before anything is sent or
recorded, so a signal that would be dropped is an error, never a silent success.
"""

from __future__ import annotations

import time

from allocbridge.actions.errors import TASK_NOT_RUNNING
from allocbridge.actions.incontainer import InContainer, undeliverable
from allocbridge.actions.records import Target
from allocbridge.model import pid1 as pid1_rules
from allocbridge.model.allocstatus import task_event
from allocbridge.model.errors import NomadError
from allocbridge.model.signals import canonical, number


class Signalling(InContainer):
    """The signal action."""

    async def signal(self, target: Target, signal_name: str, task: str | None) -> None:
        name = canonical(signal_name)
        signum = number(name)
        obj, spec = await self.load(target)
        tasks = self.running_tasks(obj, spec, task)
        if not tasks:  # no task named and none running: an error, never a silent success
            raise NomadError(409, TASK_NOT_RUNNING)
        routes: dict[str, str] = {}
        failures = []
        for t in tasks:  # every task is checked before anything is sent or recorded
            where = pid1_rules.route(await self.pid1(target, t), signum)
            if where is None:
                failures.append(f"Failed to signal task: {t}, err: {undeliverable(name)}")
            else:
                routes[t] = where
        if failures:
            raise NomadError(500, "; ".join(failures))
        events = {
            t: [
                task_event(
                    "Signaling",
                    time.time_ns(),
                    f"Task being sent signal {name}",
                    taskSignal=name,
                    taskSignalReason="signal sent through the API",
                )
            ]
            for t in tasks
        }
        await self.record(target, events)
        not_running = []
        for t, where in routes.items():
            try:
                await self.kill(target, t, name, where)
            except NomadError as exc:
                if exc.status == 409:  # it stopped running after it was checked
                    not_running.append(t)
                else:
                    failures.append(f"Failed to signal task: {t}, err: {exc.message}")
        if failures:
            raise NomadError(500, "; ".join(failures))
        if not_running and len(not_running) == len(routes):
            raise NomadError(409, TASK_NOT_RUNNING)
