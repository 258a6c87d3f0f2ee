"""The Allocation's status: its shape, its key names and its values, owned in one place. No I/O.

Three parties write the status: the reconciler (`allocbridge.model.status.derive` and the pass
in `allocbridge.reconcile`), the actions (`allocbridge.actions`: events, stops, restarts,
pauses) and, read-only, the wire rendering (`allocbridge.model.wire`). They share it as the
JSON the API server stores, so the names they meet on are these constants, and the shapes the
TypedDicts below; docs/kubernetes-mapping.md says what each field means for Nomad.

Keys are Kubernetes camelCase versions of Nomad's names (`taskStates.web.state`), except the
bookkeeping: what the operator remembers between passes so that any replica can take over
(`observed`, `podCreated`, `recreatePod`, ...), which Nomad's wire never shows.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Required, TypedDict, cast

#: Task events kept per task, as Nomad keeps them.
MAX_EVENTS: Final = 10

# -- values ----------------------------------------------------------------------------------

#: Nomad's client statuses (`clientStatus`).
PENDING: Final = "pending"
RUNNING: Final = "running"
COMPLETE: Final = "complete"
FAILED: Final = "failed"
LOST: Final = "lost"
#: Client statuses an allocation never leaves.
TERMINAL: Final = frozenset({COMPLETE, FAILED, LOST})

#: Nomad's task states (`taskStates.<task>.state`).
TASK_PENDING: Final = "pending"
TASK_RUNNING: Final = "running"
TASK_DEAD: Final = "dead"

#: Nomad's desired statuses (`desiredStatus`).
DESIRED_RUN: Final = "run"
DESIRED_STOP: Final = "stop"

# -- keys of the status (top level) -----------------------------------------------------------

CLIENT_STATUS: Final = "clientStatus"
CLIENT_DESCRIPTION: Final = "clientDescription"
DESIRED_STATUS: Final = "desiredStatus"
DESIRED_DESCRIPTION: Final = "desiredDescription"
DESIRED_TRANSITION: Final = "desiredTransition"
TASK_STATES: Final = "taskStates"
NODE_NAME: Final = "nodeName"
NODE_ID: Final = "nodeID"
CREATE_INDEX: Final = "createIndex"
CREATE_TIME: Final = "createTime"
MODIFY_TIME: Final = "modifyTime"
ALLOC_MODIFY_INDEX: Final = "allocModifyIndex"
EVAL_ID: Final = "evalID"
PREVIOUS_ALLOCATION: Final = "previousAllocation"
NEXT_ALLOCATION: Final = "nextAllocation"
FOLLOWUP_EVAL_ID: Final = "followupEvalID"
RESCHEDULE_TRACKER: Final = "rescheduleTracker"

# Bookkeeping (top level), never on Nomad's wire.
#: Per task, what the reconciler has seen of its container (`TaskBookkeeping`).
OBSERVED: Final = "observed"
#: A pod was created for the allocation (a missing pod is then a vanished one).
POD_CREATED: Final = "podCreated"
POD_NAME: Final = "podName"
#: Unix ns before which no new pod is created (a restart delay after a vanished pod).
START_AFTER: Final = "startAfter"
#: Unix ns at which a stopped allocation's pod is deleted (the end of its shutdown delay).
STOP_AT: Final = "stopAt"
#: The stop's `Killing` events are recorded.
KILL_SENT: Final = "killSent"
#: Replace the pod (a restart of all tasks, or one the kubelet cannot restart in place).
RECREATE_POD: Final = "recreatePod"
#: The pod being replaced was deleted; waiting for it to be gone.
RECREATE_KILL_SENT: Final = "recreateKillSent"
#: The task whose restart the replacement is (its restart is recorded already).
RECREATE_FOR: Final = "recreateFor"
#: UIDs of the newest Kubernetes Events recorded, and the time mark covering older ones.
SEEN_EVENTS: Final = "seenEvents"
SEEN_EVENTS_UNTIL: Final = "seenEventsUntil"

# -- keys of a task's bookkeeping (`observed.<task>`) -----------------------------------------

#: The container's restart count already turned into events.
SEEN_RESTART_COUNT: Final = "restartCount"
#: The container's start (Unix ns) already reported.
SEEN_STARTED_AT: Final = "startedAt"
#: The container's end (Unix ns) already reported.
SEEN_FINISHED_AT: Final = "finishedAt"
#: Unix ns of the restarts inside the restart policy's interval.
RESTART_TIMES: Final = "restartTimes"
#: The waiting reason already reported (`ErrImagePull`, ...).
WAITING: Final = "waiting"
#: Restarts asked for through the API, not seen yet: each claims the task's next exit.
USER_RESTARTS: Final = "userRestarts"
#: The schedule state the task could not be moved to (recorded once, not retried).
PAUSE_REFUSED: Final = "pauseRefused"

# -- keys of a task state read outside the derivation -----------------------------------------

STATE: Final = "state"
PAUSED: Final = "paused"
EVENTS: Final = "events"


class TaskEvent(TypedDict, total=False):
    """A Nomad task event; fields Nomad leaves empty are left out (the wire fills them)."""

    type: Required[str]
    time: Required[int]  # Unix ns
    displayMessage: Required[str]
    message: str
    exitCode: int
    signal: int
    restartReason: str
    startDelay: int  # ns
    killTimeout: int  # ns
    killReason: str
    driverMessage: str
    driverError: str
    validationError: str
    failsTask: bool
    failedSibling: str
    taskSignal: str
    taskSignalReason: str


class TaskState(TypedDict, total=False):
    """Nomad's `TaskState` of one task."""

    state: str  # TASK_PENDING, TASK_RUNNING or TASK_DEAD
    failed: bool
    restarts: int
    startedAt: str | None  # RFC 3339
    finishedAt: str | None
    lastRestart: str | None
    paused: str  # a schedule state, `allocbridge.model.schedule`
    events: list[TaskEvent]


class TaskBookkeeping(TypedDict, total=False):
    """What the operator remembers of one task's container between passes (`observed`)."""

    restartCount: int
    startedAt: int
    finishedAt: int
    restartTimes: list[int]
    waiting: str
    userRestarts: int
    pauseRefused: str


class DesiredTransition(TypedDict, total=False):
    migrate: bool
    noShutdownDelay: bool


class RescheduleEvent(TypedDict):
    prevAllocID: str
    prevNodeID: str
    rescheduleTime: int
    delay: int


class RescheduleTracker(TypedDict):
    events: list[RescheduleEvent]
    lastReschedule: str


class AllocationStatus(TypedDict, total=False):
    """The whole status of an Allocation object."""

    clientStatus: str
    clientDescription: str
    desiredStatus: str
    desiredDescription: str
    desiredTransition: DesiredTransition
    taskStates: dict[str, TaskState]
    nodeName: str
    nodeID: str
    createIndex: int
    createTime: int
    modifyTime: int
    allocModifyIndex: int
    evalID: str
    previousAllocation: str
    nextAllocation: str
    followupEvalID: str
    rescheduleTracker: RescheduleTracker
    observed: dict[str, TaskBookkeeping]
    podCreated: bool
    podName: str
    startAfter: int
    stopAt: int
    killSent: bool
    recreatePod: bool
    recreateKillSent: bool
    recreateFor: str
    seenEvents: list[str]
    seenEventsUntil: int


def task_event(kind: str, time_ns: int, display: str, **fields: Any) -> TaskEvent:
    """A Nomad task event in status form; empty fields are left out (the wire fills them)."""
    event: dict[str, Any] = {"type": kind, "time": time_ns, "displayMessage": display}
    event.update({k: v for k, v in fields.items() if v not in (None, "", 0, False, {})})
    return cast(TaskEvent, event)


def add_events(status: dict[str, Any], events: Mapping[str, list[TaskEvent]]) -> None:
    """Append task events to a status, keeping each task's newest `MAX_EVENTS`."""
    states = status.setdefault(TASK_STATES, {})
    for task, new in events.items():
        state = states.setdefault(task, {STATE: TASK_PENDING, EVENTS: []})
        state[EVENTS] = [*state.get(EVENTS, []), *new][-MAX_EVENTS:]
