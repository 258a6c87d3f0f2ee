"""Stop, signal, restart and pause, as operations on the allocation's pod.

Stop marks the Allocation stopped (with `stopAt`, the end of its shutdown delay) and creates
its linked replacement; the reconciler deletes the pod. Signal, restart and pause run
`kill -SIG TARGET` in the task's container through `pods/exec`, never through a shell, and
first read `/proc/1` there: Linux drops signals sent to a container's PID 1 from inside unless
it takes them, so the target comes from `allocbridge.model.pid1` and an action that would be
dropped answers an error instead of a false success. A kill signal that could not be sent takes
its restart back. Every action writes its events into the Allocation's status with an
optimistic-concurrency retry, so API replicas and the reconciler never overwrite each other.

What each action does, step by step: docs/kubernetes-mapping.md ("How the actions map to
Kubernetes", "Signals and a container's PID 1").
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from allocbridge.cluster.commands import CommandResult, run_command
from allocbridge.cluster.connection import ClientConfiguration
from allocbridge.cluster.errors import ConflictError, KubernetesError, RefusedError
from allocbridge.cluster.resources import Json, Kube
from allocbridge.model import pid1 as pid1_rules
from allocbridge.model import schedule as sched
from allocbridge.model.signals import canonical, number
from allocbridge.model.spec import AllocationSpec, parse_spec
from allocbridge.model.status import MAX_EVENTS, NS, merge_patch, task_event

TASK_NOT_RUNNING = "Task not running"
#: Seconds a failed exec's container status gets to show an exit or a restart (see `exec`).
STATUS_SETTLE = 3.0
_KILLED_WITH_ITS_CONTAINER = 128 + 9
#: Seconds a PID 1 gets to exit once everything below it got SIGKILL, before its pod goes.
AFTER_SIGKILL = 5.0

log = logging.getLogger(__name__)

WRITE_RETRIES = 8


class ActionError(Exception):
    """A request the action refuses or cannot carry out; `status` is the HTTP status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class Target:
    """The Allocation object an action works on."""

    namespace: str
    name: str
    alloc_id: str


Mutation = Callable[[Json, Json], None]  # (status, whole object) -> None, edits status in place
#: Which run of a task's container is live: (pod uid, restart count), None when none runs.
ContainerRun = tuple[str, int] | None


@dataclass
class Actions:
    """The lifecycle actions, bound to one Kubernetes client (on the API's event loop)."""

    kube: Kube
    configuration: ClientConfiguration
    escalations: set[asyncio.Task[None]] = field(default_factory=set)

    # -- reading and writing the Allocation ----------------------------------------------

    async def load(self, target: Target) -> tuple[Json, AllocationSpec]:
        obj = await self.kube.get_allocation(target.namespace, target.name)
        if obj is None or obj["metadata"]["uid"] != target.alloc_id:
            raise ActionError(404, f'Unknown allocation "{target.alloc_id}"')
        try:
            return obj, parse_spec(obj.get("spec") or {})
        except ValueError as exc:
            raise ActionError(409, f"allocation has an invalid spec: {exc}") from exc

    async def update(self, target: Target, mutate: Mutation) -> Json:
        """Read-modify-write of the status with the resourceVersion as precondition."""
        for _ in range(WRITE_RETRIES):
            obj, _spec = await self.load(target)
            status: Json = _deep_copy(obj.get("status") or {})
            mutate(status, obj)
            try:
                return await self.kube.patch_allocation_status(
                    target.namespace,
                    target.name,
                    merge_patch(obj.get("status") or {}, status),
                    obj["metadata"]["resourceVersion"],
                )
            except ConflictError:
                continue  # changed since it was read: read it again
        raise ActionError(500, "the allocation kept changing; try again")

    async def record(self, target: Target, events: Mapping[str, list[Json]]) -> Json:
        return await self.update(target, lambda status, _obj: _add_events(status, events))

    async def exec(self, target: Target, task: str, argv: list[str]) -> CommandResult:
        """Run `argv` in the task's container. An exec that fails because the task is not
        running (its pod is gone; the container ended, is restarting, or restarted while the
        exec started, which the runtime reports in many ways) is Nomad's 409 `Task not
        running`: the pod is read again after a failure to tell that from a real fault."""
        began = time.time()
        try:
            return await run_command(self.configuration, target.namespace, target.name, task, argv)
        except KubernetesError as exc:
            # Refused: the pod is gone (404) or its container is not running (400).
            refused = isinstance(exc, RefusedError)
            if refused or not await self._ran_throughout(target, task, began):
                log.info(
                    "the task was not running for an exec", extra={"task": task, "error": str(exc)}
                )
                raise ActionError(409, TASK_NOT_RUNNING) from exc
            text = str(exc)
            if "executable file not found" in text or "no such file" in text.lower():
                raise ActionError(
                    500,
                    f'cannot act on task "{task}": its container has no "{argv[0]}" binary '
                    f"(allocbridge {_WHY_BINARY.get(argv[0], 'runs it in the container')})",
                ) from exc
            raise ActionError(500, f'cannot run {argv[0]} in task "{task}": {text}') from exc

    async def _ran_throughout(self, target: Target, task: str, since: float) -> bool:
        """Whether the task's container has run since `since` (Unix seconds) and still runs,
        in a pod that is not being deleted. The kubelet reports an exit a second or two late,
        so a container that still looks running is read again for up to `STATUS_SETTLE`
        seconds before the failure is taken for a fault."""
        deadline = time.monotonic() + STATUS_SETTLE
        while await self._runs_since(target, task, since):
            if time.monotonic() >= deadline:
                return True
            await asyncio.sleep(0.25)
        return False

    async def _runs_since(self, target: Target, task: str, since: float) -> bool:
        pod = await self.kube.get_pod(target.namespace, target.name)
        if pod is None or (pod.get("metadata") or {}).get("deletionTimestamp"):
            return False  # gone, or going: the kubelet is ending its containers
        status = pod.get("status") or {}
        for key in ("initContainerStatuses", "containerStatuses"):
            for item in status.get(key) or []:
                running = (item.get("state") or {}).get("running")
                if item.get("name") == task and running is not None:
                    started = _unix_seconds(str(running.get("startedAt") or ""))
                    return started is not None and started < since - 1
        return False

    async def pid1(self, target: Target, task: str) -> pid1_rules.Pid1:
        """What the task container's PID 1 does with signals (see `allocbridge.model.pid1`)."""
        began = time.time()
        result = await self.exec(target, task, list(pid1_rules.PROBE))
        if "SigCgt:" not in result.stdout and not await self._ran_throughout(target, task, began):
            raise ActionError(409, TASK_NOT_RUNNING)  # PID 1 was ending under the probe
        if "SigCgt:" not in result.stdout:
            detail = result.stderr.strip() or f"exit code {result.exit_code}"
            raise ActionError(500, f'cannot read /proc/1/status in task "{task}": {detail}')
        return pid1_rules.parse(result.stdout, children_readable=result.exit_code == 0)

    async def kill(self, target: Target, task: str, signal: str, where: str) -> None:
        """`kill -SIG <where>` in the task's container; a non-zero exit is an error.

        A `kill` that ends with SIGKILL's status (137) was itself killed as the container's
        PID namespace ended: the signal it had sent ended the task (`kill -1` spares its
        sender), so it was delivered. The `-SIG PID` form (PID 1 or -1) is the one procps,
        util-linux and busybox all parse the same way: busybox refuses a `--` before the PID
        ("invalid number '--'"), and procps 4 takes `-s SIG -1` for a second signal and fails.
        """
        argv = ["kill", f"-{signal.removeprefix('SIG')}", where]
        began = time.time()
        result = await self.exec(target, task, argv)
        if result.exit_code == _KILLED_WITH_ITS_CONTAINER:
            return  # the signal ended the container, whose end took the `kill` with it
        if result.exit_code != 0 and not await self._ran_throughout(target, task, began):
            raise ActionError(409, TASK_NOT_RUNNING)  # its processes were ending meanwhile
        if result.exit_code != 0:
            detail = result.stderr.strip() or f"exit code {result.exit_code}"
            raise ActionError(500, f'{" ".join(argv)} in task "{task}" failed: {detail}')

    # -- stop ----------------------------------------------------------------------------

    async def stop(self, target: Target, *, no_shutdown_delay: bool) -> tuple[str, int]:
        """Stop and reschedule; returns (EvalID, index of the write)."""
        obj, spec = await self.load(target)
        status = obj.get("status") or {}
        if status.get("desiredStatus") == "stop":
            raise ActionError(409, f'allocation "{target.alloc_id}" is already stopped')
        eval_id = str(uuid.uuid4())
        now = time.time_ns()
        replacement = await self._replace(obj, now, eval_id)
        new_id = replacement["metadata"]["uid"]
        delay = 0.0 if no_shutdown_delay else _shutdown_delay(spec)

        def stop(status: Json, _obj: Json) -> None:
            if status.get("desiredStatus") == "stop":
                raise ActionError(409, f'allocation "{target.alloc_id}" is already stopped')
            status["desiredStatus"] = "stop"
            status["desiredDescription"] = "alloc was stopped by user request and rescheduled"
            status["desiredTransition"] = {"migrate": True, "noShutdownDelay": no_shutdown_delay}
            status["nextAllocation"] = new_id
            status["followupEvalID"] = eval_id
            status["stopAt"] = now + int(delay * NS)

        written = await self.update(target, stop)
        return eval_id, int(written["metadata"]["resourceVersion"])

    async def _replace(self, obj: Json, now: int, eval_id: str) -> Json:
        """Create the replacement, placed by the stop's evaluation `eval_id`."""
        meta = obj["metadata"]
        status = obj.get("status") or {}
        body = {
            "apiVersion": obj["apiVersion"],
            "kind": obj["kind"],
            "metadata": {
                "name": replacement_name(meta["name"]),
                "namespace": meta["namespace"],
                "labels": meta.get("labels") or {},
            },
            "spec": obj["spec"],
        }
        try:
            created = await self.kube.create_allocation(meta["namespace"], body)
        except ConflictError as exc:
            raise ActionError(409, "a replacement allocation exists already") from exc
        tracker = status.get("rescheduleTracker") or {}
        event = {
            "prevAllocID": meta["uid"],
            "prevNodeID": status.get("nodeID", ""),
            "rescheduleTime": now,
            "delay": 0,
        }
        link = {
            "evalID": eval_id,
            "previousAllocation": meta["uid"],
            "rescheduleTracker": {
                "events": [*tracker.get("events", []), event],
                "lastReschedule": "ok",
            },
        }
        new = Target(meta["namespace"], created["metadata"]["name"], created["metadata"]["uid"])
        await self.update(new, lambda s, _o: s.update(link))
        return created

    # -- signal --------------------------------------------------------------------------

    async def signal(self, target: Target, signal_name: str, task: str | None) -> None:
        name = canonical(signal_name)
        signum = number(name)
        obj, spec = await self.load(target)
        tasks = self._running_tasks(obj, spec, task)
        if not tasks:  # no task named and none running: an error, never a silent success
            raise ActionError(409, TASK_NOT_RUNNING)
        routes: dict[str, str] = {}
        failures = []
        for t in tasks:  # every task is checked before anything is sent or recorded
            where = pid1_rules.route(await self.pid1(target, t), signum)
            if where is None:
                failures.append(f"Failed to signal task: {t}, err: {undeliverable(name)}")
            else:
                routes[t] = where
        if failures:
            raise ActionError(500, "; ".join(failures))
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
            except ActionError as exc:
                if exc.status == 409:  # it stopped running after it was checked
                    not_running.append(t)
                else:
                    failures.append(f"Failed to signal task: {t}, err: {exc.message}")
        if failures:
            raise ActionError(500, "; ".join(failures))
        if not_running and len(not_running) == len(routes):
            raise ActionError(409, TASK_NOT_RUNNING)

    def _running_tasks(self, obj: Json, spec: AllocationSpec, task: str | None) -> list[str]:
        states = (obj.get("status") or {}).get("taskStates") or {}
        if task:
            if spec.task(task) is None:
                raise ActionError(404, "Task not found")
            if (states.get(task) or {}).get("state") != "running":
                raise ActionError(409, TASK_NOT_RUNNING)
            return [task]
        return [t.name for t in spec.tasks if (states.get(t.name) or {}).get("state") == "running"]

    # -- restart -------------------------------------------------------------------------

    async def restart(self, target: Target, task_name: str, all_tasks: bool) -> None:
        if task_name and all_tasks:
            raise ActionError(400, "task name cannot be set when restarting all tasks")
        obj, spec = await self.load(target)
        status = obj.get("status") or {}
        if status.get("desiredStatus") == "stop" or status.get("clientStatus") in (
            "complete",
            "failed",
            "lost",
        ):
            raise ActionError(409, "restart of an alloc that should not run")
        if task_name and spec.task(task_name) is None:
            raise ActionError(404, f"Could not find task runner for task: {task_name}")
        now = time.time_ns()
        if all_tasks:
            reason = "User requested all tasks to restart"
            events = {t.name: [_restart_signaled(now, reason)] for t in spec.tasks}

            def recreate(status: Json, _obj: Json) -> None:
                _add_events(status, events)
                status["recreatePod"] = True

            await self.update(target, recreate)
            return
        tasks = self._running_tasks(obj, spec, task_name or None)
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
            raise ActionError(
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
            _add_events(status, events)
            observed = status.setdefault("observed", {})
            for t in tasks:
                seen = observed.setdefault(t, {})
                seen["userRestarts"] = int(seen.get("userRestarts", 0)) + 1

        # Which run of each container gets the kill signal, read before it is sent: a quick exit
        # must not look like no exit to the escalation.
        before = await self.kube.get_pod(target.namespace, target.name)
        await self.update(target, expect)
        for index, t in enumerate(tasks):
            try:
                await self.kill(target, t, stop_with[t], term_at[t])
            except ActionError:
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
            _add_events(status, {task: [event]})
            if kill_at is None:
                status["recreatePod"] = True

        await self.update(target, escalate)
        if kill_at is None:
            return
        with contextlib.suppress(ActionError):
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
            _add_events(status, {task: [replaced]})
            status["recreatePod"] = True

        await self.update(target, replace)

    async def _same_run(self, target: Target, task: str, run: ContainerRun) -> bool:
        """Whether the task's container is still the run that was sent the kill signal."""
        now = _container_run(await self.kube.get_pod(target.namespace, target.name), task)
        return now is not None and now == run

    # -- pause ---------------------------------------------------------------------------

    async def pause_state(self, target: Target, task: str) -> str:
        obj, spec = await self.load(target)
        if spec.task(task) is None:
            raise ActionError(404, "Task not found")
        state = ((obj.get("status") or {}).get("taskStates") or {}).get(task) or {}
        return str(state.get("paused", ""))

    async def set_pause(self, target: Target, task: str, request: str) -> int:
        """Apply an override; returns the index of the write."""
        if request not in sched.REQUESTS:
            raise ActionError(400, sched.INVALID_STATE)
        obj, spec = await self.load(target)
        found = spec.task(task)
        if found is None:
            raise ActionError(404, "Task not found")
        current = str(
            (((obj.get("status") or {}).get("taskStates") or {}).get(task) or {}).get("paused", "")
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
            task_state = ((obj.get("status") or {}).get("taskStates") or {}).get(task) or {}
            if str(task_state.get("paused", "")) != current:  # moved meanwhile
                return int(obj["metadata"]["resourceVersion"])
        cause = "override" if override else "schedule"
        events: list[Json] = []
        if sched.paused(new) != sched.paused(current):
            where = pid1_rules.route(await self.pid1(target, task), pid1_rules.SIGSTOP)
            if where is None:
                raise ActionError(500, f'cannot pause task "{task}": {UNPAUSABLE}')
            if sched.paused(new):
                await self.kill(target, task, "SIGSTOP", where)
                events.append(task_event("Pausing", time.time_ns(), f"Pausing due to {cause}"))
            else:
                await self.kill(target, task, "SIGCONT", where)
                events.append(task_event("Running", time.time_ns(), f"Running due to {cause}"))

        def move(status: Json, _obj: Json) -> None:
            _add_events(status, {task: events})
            status.setdefault("taskStates", {}).setdefault(task, {})["paused"] = new
            (status.get("observed") or {}).get(task, {}).pop("pauseRefused", None)

        written = await self.update(target, move)
        return int(written["metadata"]["resourceVersion"])

    async def refuse_pause(self, target: Target, task: str, wanted: str, reason: str) -> None:
        """Record once that the schedule asked for `wanted` and the task cannot follow it."""
        message = f"Schedule not followed: {reason}"
        event = task_event("Driver", time.time_ns(), message, driverMessage=message)

        def refuse(status: Json, _obj: Json) -> None:
            seen = status.setdefault("observed", {}).setdefault(task, {})
            if seen.get("pauseRefused") != wanted:  # recorded once, however often asked
                seen["pauseRefused"] = wanted
                _add_events(status, {task: [event]})

        await self.update(target, refuse)

    async def close(self) -> None:
        for task in list(self.escalations):
            task.cancel()
        await asyncio.gather(*self.escalations, return_exceptions=True)


@dataclass
class ActionsSlot:
    """Where the API finds the actions: empty until Kubernetes credentials are loaded."""

    current: Actions | None = None


_WHY_BINARY = {
    "kill": "delivers signals with the container's own kill",
    "cat": "reads /proc/1/status with it to learn which signals the main process takes",
}

UNPAUSABLE = (
    "its main process is the container's PID 1, which Linux does not let anything inside "
    "the container stop; run the task under an init such as tini (pausing then stops every "
    "process below it)"
)


def undeliverable(name: str) -> str:
    """Why `name` cannot reach a task whose main process is PID 1 with nothing below it."""
    if name in ("SIGKILL", "SIGSTOP"):
        why = f"{name} never reaches a container's PID 1 from inside the container"
    else:
        why = (
            f"the container's PID 1 neither handles nor blocks {name}, so Linux drops it; "
            "handle the signal in the process"
        )
    return f"{why}, and no process runs below PID 1; run the task under an init such as tini"


def replacement_name(name: str) -> str:
    """`web-0` -> `web-0-r1` -> `web-0-r2`: the replacement of a stopped allocation."""
    base, sep, generation = name.rpartition("-r")
    if sep and base and generation.isdigit():
        return f"{base}-r{int(generation) + 1}"
    return f"{name}-r1"


def _shutdown_delay(spec: AllocationSpec) -> float:
    delays = [spec.task_group.shutdown_delay_seconds] + [
        t.shutdown_delay_seconds for t in spec.tasks
    ]
    return max(delays)


def _restart_signaled(now: int, reason: str) -> Json:
    return task_event("Restart Signaled", now, reason, restartReason=reason)


def _add_events(status: Json, events: Mapping[str, list[Json]]) -> None:
    states = status.setdefault("taskStates", {})
    for task, new in events.items():
        state = states.setdefault(task, {"state": "pending", "events": []})
        state["events"] = [*state.get("events", []), *new][-MAX_EVENTS:]


def _unix_seconds(rfc3339: str) -> float | None:
    try:
        return datetime.datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


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
        observed = status.get("observed") or {}
        for task in tasks:
            seen = observed.get(task) or {}
            if int(seen.get("userRestarts", 0)) > 0:
                seen["userRestarts"] = int(seen["userRestarts"]) - 1

    return take_back


def _deep_copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _deep_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_deep_copy(v) for v in value]
    return value
