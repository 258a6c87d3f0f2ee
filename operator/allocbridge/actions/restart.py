"""Restart: one task, the running tasks, or all tasks (a new pod) of an allocation.

A task restarts in place: it gets its kill signal, as a stop would send it, and the kubelet
runs its container again; the restart is recorded first (`userRestarts`), so the derivation
counts the exit as the user's restart, and taken back when the signal could not be sent. A
container still running after its kill timeout is forced out (`Restarting._escalate`). All
tasks restart in a new pod, which the reconciler creates once the old one is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field

from allocbridge.actions.incontainer import InContainer, undeliverable
from allocbridge.actions.records import Mutation, Target
from allocbridge.cluster.resources import Json
from allocbridge.model import pid1 as pid1_rules
from allocbridge.model.allocstatus import (
    CLIENT_STATUS,
    DESIRED_STATUS,
    DESIRED_STOP,
    OBSERVED,
    RECREATE_POD,
    TERMINAL,
    USER_RESTARTS,
    TaskEvent,
    add_events,
    task_event,
)
from allocbridge.model.errors import NomadError
from allocbridge.model.signals import canonical, number

#: Seconds a PID 1 gets to exit once everything below it got SIGKILL, before its pod goes.
AFTER_SIGKILL = 5.0

#: Which run of a task's container is live: (pod uid, restart count), None when none runs.
ContainerRun = tuple[str, int] | None

log = logging.getLogger(__name__)


@dataclass
class Restarting(InContainer):
    """The restart action, and the escalations it leaves running after it answered."""

    escalations: set[asyncio.Task[None]] = field(default_factory=set)

    async def restart(self, target: Target, task_name: str, all_tasks: bool) -> None:
        if task_name and all_tasks:
            raise NomadError(400, "task name cannot be set when restarting all tasks")
        obj, spec = await self.load(target)
        status = obj.get("status") or {}
        if status.get(DESIRED_STATUS) == DESIRED_STOP or status.get(CLIENT_STATUS) in TERMINAL:
            raise NomadError(409, "restart of an alloc that should not run")
        if task_name and spec.task(task_name) is None:
            raise NomadError(404, f"Could not find task runner for task: {task_name}")
        now = time.time_ns()
        if all_tasks:
            reason = "User requested all tasks to restart"
            events = {t.name: [_restart_signaled(now, reason)] for t in spec.tasks}

            def recreate(status: Json, _obj: Json) -> None:
                add_events(status, events)
                status[RECREATE_POD] = True

            await self.update(target, recreate)
            return
        tasks = self.running_tasks(obj, spec, task_name or None)
        probes = {t: await self.pid1(target, t) for t in tasks}
        # As in Nomad, a restart stops the task with its kill signal, as a stop would.
        stop_with = {
            t: canonical((spec.task(t) or spec.tasks[0]).kill_signal or "SIGTERM") for t in tasks
        }
        term_at: dict[str, str] = {}
        stuck: list[str] = []
        for t, probe in probes.items():
            where = pid1_rules.route(probe, number(stop_with[t]))
            if where is None:
                stuck.append(t)
            else:
                term_at[t] = where
        if stuck:
            raise NomadError(
                500,
                "; ".join(
                    f'cannot restart task "{t}" in place: {undeliverable(stop_with[t])}; '
                    "or restart all tasks (AllTasks), which replaces the pod"
                    for t in stuck
                ),
            )
        reason = (
            "User requested task to restart"
            if task_name
            else ("User requested running tasks to restart")
        )
        events = {t: [_restart_signaled(now, reason)] for t in tasks}

        def expect(status: Json, _obj: Json) -> None:
            add_events(status, events)
            observed = status.setdefault(OBSERVED, {})
            for t in tasks:
                seen = observed.setdefault(t, {})
                seen[USER_RESTARTS] = int(seen.get(USER_RESTARTS, 0)) + 1

        # Which run of each container gets the kill signal, read before it is sent: a quick exit
        # must not look like no exit to the escalation.
        before = await self.kube.get_pod(target.namespace, target.name)
        await self.update(target, expect)
        for index, t in enumerate(tasks):
            try:
                await self.kill(target, t, stop_with[t], term_at[t])
            except NomadError:
                # Not sent: the next exits of this task and the ones after it are not restarts.
                await self.update(target, _take_back_restarts(tasks[index:]))
                raise
            wait = (spec.task(t) or spec.tasks[0]).kill_timeout_seconds
            kill_at = pid1_rules.route(probes[t], pid1_rules.SIGKILL)
            run = _container_run(before, t)
            escalation = asyncio.create_task(
                self._escalate(target, t, sent=stop_with[t], kill_at=kill_at, wait=wait, run=run)
            )
            self.escalations.add(escalation)
            escalation.add_done_callback(self.escalations.discard)

    async def _escalate(
        self,
        target: Target,
        task: str,
        *,
        sent: str,
        kill_at: str | None,
        wait: float,
        run: ContainerRun,
    ) -> None:
        """Force out a container that has not exited within its kill timeout.

        SIGKILL goes to the processes below PID 1; when there are none, it cannot reach PID 1
        from inside the container, so the pod is replaced (the kubelet kills from outside).
        A PID 1 that outlives the SIGKILL of everything below it (a shell that traps the kill
        signal and waits on a child) gets its pod replaced too, `AFTER_SIGKILL` seconds later.
        Nothing happens if the run that got the kill signal (`sent`) has ended meanwhile:
        restarted in place, stopped (a batch task's exit 0), or its pod replaced.
        """
        await asyncio.sleep(wait)
        if not await self._same_run(target, task, run):
            return
        log.warning("task did not exit after its kill signal", extra={"task": task, "signal": sent})
        if kill_at is None:
            message = f"Task did not exit after {sent}; replacing the pod"
        else:
            message = "Sent SIGKILL after kill timeout"
        event = task_event(
            "Killing",
            time.time_ns(),
            message,
            killReason=f"restart: task did not exit after {sent}",
        )

        def escalate(status: Json, _obj: Json) -> None:
            add_events(status, {task: [event]})
            if kill_at is None:
                status[RECREATE_POD] = True

        await self.update(target, escalate)
        if kill_at is None:
            return
        with contextlib.suppress(NomadError):
            await self.kill(target, task, "SIGKILL", kill_at)
        await asyncio.sleep(AFTER_SIGKILL)
        if not await self._same_run(target, task, run):
            return
        log.warning("the task's PID 1 outlived SIGKILL of its processes", extra={"task": task})
        replaced = task_event(
            "Killing",
            time.time_ns(),
            "PID 1 did not exit after SIGKILL of its processes; replacing the pod",
            killReason=f"restart: task did not exit after {sent} and SIGKILL",
        )

        def replace(status: Json, _obj: Json) -> None:
            add_events(status, {task: [replaced]})
            status[RECREATE_POD] = True

        await self.update(target, replace)

    async def _same_run(self, target: Target, task: str, run: ContainerRun) -> bool:
        """Whether the task's container is still the run that was sent the kill signal."""
        now = _container_run(await self.kube.get_pod(target.namespace, target.name), task)
        return now is not None and now == run

    async def close(self) -> None:
        """Cancel the escalations still waiting (at shutdown)."""
        for task in list(self.escalations):
            task.cancel()
        await asyncio.gather(*self.escalations, return_exceptions=True)


def _restart_signaled(now: int, reason: str) -> TaskEvent:
    return task_event("Restart Signaled", now, reason, restartReason=reason)


def _container_run(pod: Json | None, task: str) -> ContainerRun:
    """The live run of `task`'s container in `pod` (a prestart sidecar's too)."""
    status = (pod or {}).get("status") or {}
    for key in ("initContainerStatuses", "containerStatuses"):
        for item in status.get(key) or []:
            if item.get("name") == task and "running" in (item.get("state") or {}):
                uid = str(((pod or {}).get("metadata") or {}).get("uid", ""))
                return uid, int(item.get("restartCount", 0))
    return None


def _take_back_restarts(tasks: list[str]) -> Mutation:
    """Undo the pending user restarts of `tasks` (their SIGTERM was not sent)."""

    def take_back(status: Json, _obj: Json) -> None:
        observed = status.get(OBSERVED) or {}
        for task in tasks:
            seen = observed.get(task) or {}
            if int(seen.get(USER_RESTARTS, 0)) > 0:
                seen[USER_RESTARTS] = int(seen[USER_RESTARTS]) - 1

    return take_back
