"""An Allocation's status, derived from its spec, its previous status and its pod. No I/O.

The reconciler calls `derive` with what it read and writes back what comes out; everything
that needs memory between calls (restart counts already seen, start times already reported,
restart times inside the policy's interval) lives in the status itself, so any replica can take
over reconciliation and a restarted operator continues where the last one stopped.

The status's shape, key names and values belong to `allocbridge.model.allocstatus`;
`allocbridge.model.wire` turns its camelCase keys into Nomad's PascalCase.

The pod's life maps onto task states and events (container restarts as `Terminated` and
`Restarting`, the group restart policy enforced on top of the kubelet's, leader and sidecar
endings, user restarts, stops) as docs/kubernetes-mapping.md describes. A user restart reaches
this module as `observed[task].userRestarts`, written by the restart action, and claims the
task's next exit whatever its code.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Unpack, cast

from allocbridge.model.allocstatus import (
    CLIENT_DESCRIPTION,
    CLIENT_STATUS,
    COMPLETE,
    DESIRED_RUN,
    DESIRED_STATUS,
    DESIRED_STOP,
    FAILED,
    KILL_SENT,
    LOST,
    MAX_EVENTS,
    OBSERVED,
    PENDING,
    POD_CREATED,
    RECREATE_FOR,
    RECREATE_KILL_SENT,
    RECREATE_POD,
    RESTART_TIMES,
    RUNNING,
    SEEN_EVENTS,
    SEEN_EVENTS_UNTIL,
    SEEN_FINISHED_AT,
    SEEN_RESTART_COUNT,
    SEEN_STARTED_AT,
    START_AFTER,
    STOP_AT,
    TASK_DEAD,
    TASK_PENDING,
    TASK_RUNNING,
    TASK_STATES,
    TERMINAL,
    USER_RESTARTS,
    WAITING,
    TaskBookkeeping,
    TaskEvent,
    TaskState,
    task_event,
)
from allocbridge.model.spec import AllocationSpec, EffectiveRestartPolicy, Task

#: Kubernetes Event UIDs remembered per allocation; older Events are covered by a time mark.
MAX_SEEN_EVENTS = 50
USER_RESTART = "User requested restart"
WITHIN_POLICY = "Restart within policy"
NS = 1_000_000_000


@dataclass(frozen=True)
class KubeEvent:
    """A Kubernetes Event about the pod, reduced to what becomes a task event."""

    uid: str
    reason: str
    message: str
    type: str  # Normal or Warning
    time_ns: int
    container: str | None  # from involvedObject.fieldPath `spec.containers{name}`


@dataclass
class Decision:
    """What the reconciler should do: write `status`, maybe create or delete the pod, and
    maybe look again after `requeue_after` seconds (a restart delay)."""

    status: dict[str, Any]
    create_pod: bool = False
    delete_pod: bool = False
    requeue_after: float | None = None
    notes: list[str] = field(default_factory=list)


def rfc3339(time_ns: int) -> str:
    moment = datetime.datetime.fromtimestamp(time_ns / NS, tz=datetime.UTC)
    return moment.isoformat().replace("+00:00", "Z")


def parse_time_ns(text: str | None) -> int | None:
    """Kubernetes timestamps (`2026-11-21T10:00:00Z`) in Unix nanoseconds."""
    if not text:
        return None
    moment = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    return int(moment.timestamp() * NS)


def merge_patch(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON merge patch (RFC 7386) that turns `old` into `new`, at every depth.

    Keys missing from `new` become nulls (deletions), nested maps are diffed rather than
    replaced, and a null in `new` for a key `old` lacks is left out: a stored status never
    holds nulls, so sending them would patch the same status again on every pass (and each
    write triggers the next pass). Lists are replaced whole.
    """
    patch: dict[str, Any] = {k: None for k in old if k not in new}
    for key, value in new.items():
        before = old.get(key)
        if isinstance(value, Mapping) and isinstance(before, Mapping):
            nested = merge_patch(before, value)
            if nested:
                patch[key] = nested
        elif value is None:
            if key in old:
                patch[key] = None
        elif before != value:
            patch[key] = value
    return patch


def _duration_text(seconds: float) -> str:
    if seconds >= 60 and seconds % 60 == 0:
        minutes = int(seconds // 60)
        return f"{minutes // 60}h{minutes % 60}m0s" if minutes >= 60 else f"{minutes}m0s"
    return f"{seconds:g}s"


class _Tasks:
    """The task-state map being rebuilt, with helpers that keep the 10-event limit."""

    def __init__(self, previous: Mapping[str, Any], spec: AllocationSpec) -> None:
        self.states: dict[str, TaskState] = {}
        for task in spec.tasks:
            old = cast(TaskState, previous.get(task.name) or {})
            self.states[task.name] = TaskState(
                state=old.get("state", TASK_PENDING),
                failed=old.get("failed", False),
                restarts=old.get("restarts", 0),
                startedAt=old.get("startedAt"),
                finishedAt=old.get("finishedAt"),
                lastRestart=old.get("lastRestart"),
                paused=old.get("paused", ""),
                events=list(old.get("events", [])),
            )

    def add(self, task: str, event: TaskEvent) -> None:
        events = self.states[task]["events"]
        events.append(event)
        del events[:-MAX_EVENTS]

    def set(self, task: str, **values: Unpack[TaskState]) -> None:
        self.states[task].update(values)

    def state(self, task: str) -> str:
        return str(self.states[task]["state"])


def _container_statuses(pod: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    status = pod.get("status") or {}
    found: dict[str, Mapping[str, Any]] = {}
    for key in ("initContainerStatuses", "containerStatuses"):
        for item in status.get(key) or []:
            found[item["name"]] = item
    return found


def _restart_allowed(
    policy: EffectiveRestartPolicy, history: Sequence[int], now_ns: int
) -> tuple[bool, list[int]]:
    """Whether one more restart fits the policy; returns the history trimmed to the interval."""
    window = int(policy.interval_seconds * NS)
    recent = [t for t in history if window <= 0 or now_ns - t < window]
    return len(recent) < policy.attempts, recent


def _kubelet_restarts(task: Task, exit_code: int, policy: str) -> bool:
    """Whether the kubelet runs the task's container again in place after this exit: native
    sidecars whatever the code, other init containers until they succeed, regular containers
    as their `restartPolicy` (`_restart_policy`) says."""
    if task.hook == "prestart":
        return task.is_sidecar or (exit_code != 0 and policy != "Never")
    return policy == "Always" or (policy == "OnFailure" and exit_code != 0)


def _restart_policy(pod: Mapping[str, Any], container: str, own_honoured: bool = True) -> str:
    """The container's restart policy: its own where the pod carries one (the API server drops
    it where the cluster does not honour it), else the pod's. A regular container's own is
    ignored by a kubelet older than the API server's rule (`own_honoured` False, see `derive`);
    an init container's is a native sidecar's, which every supported kubelet honours."""
    spec = pod.get("spec") or {}
    regular = spec.get("containers") or ()
    for c in (*(spec.get("initContainers") or ()), *(regular if own_honoured else ())):
        if c.get("name") == container and c.get("restartPolicy"):
            return str(c["restartPolicy"])
    return str(spec.get("restartPolicy") or "Always")


def _completes(task: Task, exit_code: int) -> bool:
    """Whether this exit ends a run-once lifecycle task for good, as in Nomad, even if the
    kubelet runs its container again (a poststart task under `Always`, where the cluster does
    not honour the container's own `OnFailure`: `pods.container_restart_policy`)."""
    return task.lifecycle is not None and not task.is_sidecar and exit_code == 0


def initial_status(spec: AllocationSpec, now_ns: int) -> dict[str, Any]:
    """The status of an allocation the operator sees for the first time."""
    tasks = _Tasks({}, spec)
    for task in spec.tasks:
        tasks.add(task.name, task_event("Received", now_ns, "Task received by client"))
    return {
        CLIENT_STATUS: PENDING,
        CLIENT_DESCRIPTION: "No tasks have started",
        DESIRED_STATUS: DESIRED_RUN,
        TASK_STATES: tasks.states,
    }


def validation_failed(
    spec_tasks: Sequence[str], problems: Sequence[str], now_ns: int
) -> dict[str, Any]:
    """Status for an allocation whose spec cannot run: every task dead with `Failed Validation`."""
    message = "; ".join(problems)
    states: dict[str, TaskState] = {}
    for name in spec_tasks or ["task"]:
        states[name] = {
            "state": TASK_DEAD,
            "failed": True,
            "restarts": 0,
            "startedAt": None,
            "finishedAt": rfc3339(now_ns),
            "lastRestart": None,
            "events": [
                task_event("Received", now_ns, "Task received by client"),
                task_event(
                    "Failed Validation",
                    now_ns,
                    message,
                    validationError=message,
                    failsTask=True,
                ),
            ],
        }
    return {
        CLIENT_STATUS: FAILED,
        CLIENT_DESCRIPTION: "Failed tasks",
        DESIRED_STATUS: DESIRED_RUN,
        TASK_STATES: states,
    }


def derive(
    spec: AllocationSpec,
    previous: Mapping[str, Any],
    pod: Mapping[str, Any] | None,
    now_ns: int,
    kube_events: Sequence[KubeEvent] = (),
    *,
    container_restart_policies: bool = True,
) -> Decision:
    """The next status and actions for an allocation, given its pod (None when it has none).

    `container_restart_policies` False: the pod's node runs a kubelet that ignores a regular
    container's own `restartPolicy` (older than 1.35 under a newer API server, as during an
    upgrade), so the pod's policy decides whether an exited task runs again."""
    return _Derivation(spec, previous, now_ns, container_restart_policies).run(pod, kube_events)


class _Derivation:
    """One pass of `derive`: the context every step shares."""

    def __init__(
        self,
        spec: AllocationSpec,
        previous: Mapping[str, Any],
        now_ns: int,
        own_policies: bool = True,
    ) -> None:
        self.spec = spec
        self.own_policies = own_policies  # see `derive`
        self.previous = previous
        self.now = now_ns
        self.status = dict(previous)
        if not self.status.get(TASK_STATES):
            self.status.update(initial_status(spec, now_ns))
        self.tasks = _Tasks(self.status.get(TASK_STATES, {}), spec)
        self.observed: dict[str, TaskBookkeeping] = {
            name: cast(TaskBookkeeping, dict(value))
            for name, value in (self.status.get(OBSERVED) or {}).items()
        }
        self.policy = spec.restart_policy()
        self.decision = Decision(status=self.status)
        self.terminal = previous.get(CLIENT_STATUS) in TERMINAL
        self.stopping = self.status.get(DESIRED_STATUS) == DESIRED_STOP

    def run(self, pod: Mapping[str, Any] | None, kube_events: Sequence[KubeEvent]) -> Decision:
        if pod is None:
            if self.stopping or self.terminal:
                self.finish_killed()
            elif self.status.get(RECREATE_POD):
                self.recreated()
            elif self.status.get(POD_CREATED):
                self.pod_vanished()
            elif self.now < int(self.status.get(START_AFTER, 0)):
                self.decision.requeue_after = (int(self.status[START_AFTER]) - self.now) / NS
            else:
                self.status.pop(START_AFTER, None)
                self.decision.create_pod = True
                for task in self.spec.tasks:
                    events = self.tasks.states[task.name]["events"]
                    if not any(e["type"] == "Task Setup" for e in events):
                        self.add(task.name, "Task Setup", "Building Task Directory")
        else:
            self.follow_containers(pod)
            self.record_kube_events(kube_events)
            if self.stopping:
                self.stop_pod()
            elif self.status.get(RECREATE_POD):
                self.recreate_pod()
            else:
                self.enforce_leader()

        status = self.status
        status[TASK_STATES] = self.tasks.states
        status[OBSERVED] = self.observed
        client_status, description = _client_status(self.spec, self.tasks, pod, self.stopping)
        if self.terminal and client_status in (PENDING, RUNNING):
            client_status = self.previous[CLIENT_STATUS]
            description = self.previous.get(CLIENT_DESCRIPTION, "")
        status[CLIENT_STATUS] = client_status
        status[CLIENT_DESCRIPTION] = description
        finished = client_status in (COMPLETE, FAILED) and not self.stopping
        if finished and pod is not None and self._any_task_alive():
            self.decision.delete_pod = True  # e.g. sidecars still running after the main tasks
        return self.decision

    def _any_task_alive(self) -> bool:
        return any(self.tasks.state(t.name) != TASK_DEAD for t in self.spec.tasks)

    def add(self, task: str, kind: str, display: str, time_ns: int = 0, **fields: Any) -> None:
        self.tasks.add(task, task_event(kind, time_ns or self.now, display, **fields))

    def seen(self, task: str) -> TaskBookkeeping:
        return self.observed.setdefault(task, {})

    def follow_containers(self, pod: Mapping[str, Any]) -> None:
        statuses = _container_statuses(pod)
        for task in self.spec.tasks:
            container = statuses.get(task.name)
            if container is None:
                continue
            seen = self.seen(task.name)
            restart_count = int(container.get("restartCount", 0))
            known = int(seen.get(SEEN_RESTART_COUNT, 0))
            if restart_count > known:
                last = (container.get("lastState") or {}).get("terminated") or {}
                for _ in range(restart_count - known):
                    self.restarted(task, last)
                seen[SEEN_RESTART_COUNT] = restart_count
                # Kubernetes times have 1 s precision: a quick restart may keep `startedAt`.
                seen.pop(SEEN_STARTED_AT, None)
            state = container.get("state") or {}
            if "running" in state:
                started = parse_time_ns(state["running"].get("startedAt")) or self.now
                if (
                    seen.get(SEEN_STARTED_AT) != started
                    and self.tasks.state(task.name) != TASK_DEAD
                ):
                    seen[SEEN_STARTED_AT] = started
                    self.tasks.set(task.name, state=TASK_RUNNING, startedAt=rfc3339(started))
                    self.add(task.name, "Started", "Task started by client", started)
            elif "terminated" in state:
                policy = _restart_policy(pod, task.name, self.own_policies)
                self.terminated(task, state["terminated"], policy)
            elif "waiting" in state and self.tasks.state(task.name) != TASK_DEAD:
                self.waiting(task, state["waiting"])

    def waiting(self, task: Task, waiting: Mapping[str, Any]) -> None:
        seen = self.seen(task.name)
        reason = str(waiting.get("reason", ""))
        if not reason or seen.get(WAITING) == reason or reason == "ContainerCreating":
            return
        seen[WAITING] = reason
        message = str(waiting.get("message") or reason)
        if reason in ("ErrImagePull", "ImagePullBackOff", "CreateContainerError"):
            self.add(task.name, "Driver Failure", message, driverError=message)
        else:
            self.add(task.name, "Driver", message, driverMessage=message)

    def restarted(self, task: Task, last: Mapping[str, Any]) -> None:
        """One in-place container restart by the kubelet, checked against the group policy."""
        if self.tasks.state(task.name) == TASK_DEAD:
            return  # the task has ended (completed, killed, failed): a rerun is not the task
        self.exited(task, last)
        seen = self.seen(task.name)
        if self.take_user_restart(task):
            # Asked for through the restart API: Nomad does not count it against the policy.
            self.restarting(task, USER_RESTART, delay=0.0)
            return
        if _completes(task, int(last.get("exitCode", 0))):
            finished = parse_time_ns(last.get("finishedAt")) or self.now
            self.tasks.set(task.name, state=TASK_DEAD, failed=False, finishedAt=rfc3339(finished))
            return
        allowed, history = _restart_allowed(self.policy, seen.get(RESTART_TIMES, []), self.now)
        if not allowed and self.policy.mode == "fail":
            self.not_restarting(task)
            self.decision.delete_pod = True
            return
        seen[RESTART_TIMES] = [*history, self.now]
        reason = WITHIN_POLICY if allowed else "Exceeded allowed attempts, delaying"
        self.restarting(task, reason)

    def exited(self, task: Task, terminated: Mapping[str, Any]) -> None:
        exit_code = int(terminated.get("exitCode", 0))
        signal = int(terminated.get("signal", 0) or (exit_code - 128 if exit_code > 128 else 0))
        finished = parse_time_ns(terminated.get("finishedAt")) or self.now
        display = f"Exit Code: {exit_code}" + (f", Signal: {signal}" if signal else "")
        message = str(terminated.get("message") or "")
        self.add(
            task.name,
            "Terminated",
            display,
            finished,
            exitCode=exit_code,
            signal=signal,
            message=message,
        )

    def restarting(self, task: Task, reason: str, delay: float | None = None) -> None:
        delay = self.policy.delay_seconds if delay is None else delay
        display = f"Task restarting in {_duration_text(delay)}"
        if reason != WITHIN_POLICY:  # Nomad names every other reason before the delay
            display = f"{reason} - {display}"
        self.add(
            task.name,
            "Restarting",
            display,
            restartReason=reason,
            startDelay=int(delay * NS),
        )
        restarts = int(self.tasks.states[task.name]["restarts"]) + 1
        self.tasks.set(
            task.name, restarts=restarts, lastRestart=rfc3339(self.now), state=TASK_PENDING
        )

    def not_restarting(self, task: Task) -> None:
        policy = self.policy
        message = (
            f"Exceeded allowed attempts {policy.attempts} in interval "
            f'{_duration_text(policy.interval_seconds)} and mode is "{policy.mode}"'
        )
        self.add(task.name, "Not Restarting", message, restartReason=message, failsTask=True)
        self.tasks.set(task.name, state=TASK_DEAD, failed=True, finishedAt=rfc3339(self.now))

    def take_user_restart(self, task: Task) -> bool:
        """Whether a restart asked for through the API is pending for `task`; it is used up."""
        seen = self.seen(task.name)
        if int(seen.get(USER_RESTARTS, 0)) <= 0:
            return False
        seen[USER_RESTARTS] = int(seen[USER_RESTARTS]) - 1
        return True

    def terminated(self, task: Task, terminated: Mapping[str, Any], policy: str) -> None:
        """A container that stopped and has not run again (yet)."""
        finished = parse_time_ns(terminated.get("finishedAt")) or self.now
        seen = self.seen(task.name)
        if seen.get(SEEN_FINISHED_AT) == finished or self.tasks.state(task.name) == TASK_DEAD:
            return
        exit_code = int(terminated.get("exitCode", 0))
        if self.stopping:
            # The allocation is going away: the task ends, killed once the pod is deleted.
            seen[SEEN_FINISHED_AT] = finished
            self.exited(task, terminated)
            if self.status.get(KILL_SENT):
                self.add(task.name, "Killed", "Task successfully killed")
            self.tasks.set(task.name, state=TASK_DEAD, failed=False, finishedAt=rfc3339(finished))
            return
        if self.status.get(RECREATE_KILL_SENT):
            # The pod is being replaced: `recreated` restarts every task.
            seen[SEEN_FINISHED_AT] = finished
            self.exited(task, terminated)
            return
        user = int(seen.get(USER_RESTARTS, 0)) > 0
        if _kubelet_restarts(task, exit_code, policy) and (user or not _completes(task, exit_code)):
            return  # it runs again in place; the restart count will show it
        seen[SEEN_FINISHED_AT] = finished
        self.exited(task, terminated)
        if self.take_user_restart(task):
            # Nomad restarts a task the user restarted whatever its exit code, but the kubelet
            # will not run this container again (exit 0 under OnFailure): a new pod runs it.
            self.restarting(task, USER_RESTART, delay=0.0)
            self.status[RECREATE_POD] = True
            self.status[RECREATE_FOR] = task.name
            return
        self.tasks.set(
            task.name, state=TASK_DEAD, failed=exit_code != 0, finishedAt=rfc3339(finished)
        )

    def pod_vanished(self) -> None:
        """The pod of a running allocation disappeared: its tasks failed; restart per policy."""
        live = [t for t in self.spec.tasks if self.tasks.state(t.name) != TASK_DEAD]
        restart = bool(live)
        for task in live:
            seen = self.seen(task.name)
            self.exited(task, {"exitCode": 137, "message": "pod was deleted"})
            allowed, history = _restart_allowed(self.policy, seen.get(RESTART_TIMES, []), self.now)
            if not allowed and self.policy.mode == "fail":
                self.not_restarting(task)
                restart = False
                continue
            self.observed[task.name] = {RESTART_TIMES: [*history, self.now]}
            self.restarting(task, "Pod was deleted")
        if restart:
            # The next pass (after the policy's delay) creates the new pod.
            self.status[POD_CREATED] = False
            self.status[START_AFTER] = self.now + int(self.policy.delay_seconds * NS)
            self.decision.requeue_after = self.policy.delay_seconds

    def stop_pod(self) -> None:
        """Desired status `stop`: after the shutdown delay, `Killing` and delete the pod."""
        due = int(self.status.get(STOP_AT, 0))
        if self.now < due:
            self.decision.requeue_after = (due - self.now) / NS
            return
        if not self.status.get(KILL_SENT):
            self.status[KILL_SENT] = True
            for task in self.spec.tasks:
                if self.tasks.state(task.name) == TASK_DEAD:
                    continue
                kill = task.kill_timeout_seconds
                self.add(
                    task.name,
                    "Killing",
                    f"Sent interrupt. Waiting {_duration_text(kill)} before force killing",
                    killTimeout=int(kill * NS),
                    killReason="alloc was stopped",
                )
        self.decision.delete_pod = True

    def recreate_pod(self) -> None:
        """Restart all tasks (prestart ones too): the pod is replaced, not failed."""
        if not self.status.get(RECREATE_KILL_SENT):
            self.status[RECREATE_KILL_SENT] = True
            self.decision.delete_pod = True
        else:
            self.decision.requeue_after = 0.5  # still terminating

    def recreated(self) -> None:
        """The pod removed for a restart is gone: every task starts over in a new one."""
        counted = self.status.get(RECREATE_FOR)  # that task's restart was recorded at its exit
        for task in self.spec.tasks:
            self.observed[task.name] = {}
            if task.name == counted:
                continue
            reason = (
                f'Pod replaced to restart task "{counted}"'
                if counted
                else "User requested all tasks to restart"
            )
            self.restarting(task, reason, delay=0.0)
        for key in (RECREATE_POD, RECREATE_KILL_SENT, RECREATE_FOR):
            self.status.pop(key, None)
        self.status[POD_CREATED] = False
        self.decision.create_pod = True

    def finish_killed(self) -> None:
        """The pod is gone on purpose (stop, or a failed allocation): live tasks are `Killed`."""
        for task in self.spec.tasks:
            if self.tasks.state(task.name) != TASK_DEAD:
                self.add(task.name, "Killed", "Task successfully killed")
                self.tasks.set(task.name, state=TASK_DEAD, finishedAt=rfc3339(self.now))

    def enforce_leader(self) -> None:
        """A dead leader, or a failed task, stops the rest of the group; so does the end of
        every task but the sidecars, which then only have the sidecars to serve."""
        spec, tasks = self.spec, self.tasks
        leader = spec.leader
        failed = [
            t
            for t in spec.tasks
            if tasks.state(t.name) == TASK_DEAD and tasks.states[t.name]["failed"]
        ]
        live = [t for t in spec.tasks if tasks.state(t.name) != TASK_DEAD]
        if leader is not None and tasks.state(leader.name) == TASK_DEAD:
            cause, display, sibling = "Leader Task Dead", "Leader Task in Group dead", ""
        elif failed:
            sibling = failed[0].name
            cause, display = "Sibling Task Failed", f'Task\'s sibling "{sibling}" failed'
        elif live and all(t.is_sidecar for t in live):
            # Nomad records `Main Tasks Dead` first; the spec's event types do not have it, so
            # its reason goes with `Killing` alone.
            cause, display, sibling = "", "Main tasks in the group died", ""
        else:
            return
        for task in spec.tasks:
            if tasks.state(task.name) == TASK_DEAD:
                continue
            kill = task.kill_timeout_seconds
            if cause:
                self.add(task.name, cause, display, failedSibling=sibling)
            self.add(
                task.name,
                "Killing",
                f"Sent interrupt. Waiting {_duration_text(kill)} before force killing",
                killTimeout=int(kill * NS),
                killReason=display,
            )
            self.add(task.name, "Killed", "Task successfully killed")
            tasks.set(task.name, state=TASK_DEAD, finishedAt=rfc3339(self.now))
        self.decision.delete_pod = True

    def record_kube_events(self, events: Sequence[KubeEvent]) -> None:
        """Kubernetes Events about the pod (pulls, back-off, probes) as `Driver` task events.

        Each Event is recorded once. The UIDs of the newest `MAX_SEEN_EVENTS` are remembered
        (`seenEvents`, oldest first), and an Event no newer than the newest one forgotten
        (`seenEventsUntil`) counts as seen, so a pod with more Events than that does not get
        its old ones again on every pass.
        """
        remembered = list(self.status.get(SEEN_EVENTS, []))
        seen_uids = set(remembered)
        until = int(self.status.get(SEEN_EVENTS_UNTIL, 0))
        times: dict[str, int] = {}
        for event in sorted(events, key=lambda e: e.time_ns):
            times[event.uid] = event.time_ns
            if event.uid in seen_uids or event.time_ns <= until:
                continue
            seen_uids.add(event.uid)
            remembered.append(event.uid)
            names = [event.container] if event.container else [t.name for t in self.spec.tasks]
            text = f"{event.reason}: {event.message}" if event.message else event.reason
            failure = event.type == "Warning" and event.reason in ("Failed", "ErrImagePull")
            for name in names:
                if name not in self.tasks.states:
                    continue
                if failure:
                    self.add(name, "Driver Failure", text, event.time_ns, driverError=text)
                else:
                    self.add(name, "Driver", text, event.time_ns, driverMessage=text)
        if len(remembered) > MAX_SEEN_EVENTS:
            forgotten = remembered[:-MAX_SEEN_EVENTS]
            remembered = remembered[-MAX_SEEN_EVENTS:]
            until = max([until, *(times[uid] for uid in forgotten if uid in times)])
            self.status[SEEN_EVENTS_UNTIL] = until
        if remembered:
            self.status[SEEN_EVENTS] = remembered


def _client_status(
    spec: AllocationSpec, tasks: _Tasks, pod: Mapping[str, Any] | None, stopping: bool
) -> tuple[str, str]:
    """Nomad's ClientStatus and description from the task states and the pod phase."""
    if pod is not None and (pod.get("status") or {}).get("phase") == "Unknown":
        return LOST, "The node of this allocation is not reporting"
    mains = [t for t in spec.tasks if t.hook != "prestart" or t.is_sidecar]
    states = [tasks.states[t.name] for t in mains]
    if any(s["state"] == TASK_DEAD and s["failed"] for s in tasks.states.values()):
        return FAILED, "Failed tasks"
    if all(s["state"] == TASK_DEAD for s in states):
        if stopping:
            return COMPLETE, "All tasks have completed (stopped)"
        return COMPLETE, "All tasks have completed"
    if any(s["state"] == TASK_RUNNING for s in states):
        return RUNNING, "Tasks are running"
    return PENDING, "No tasks have started"
