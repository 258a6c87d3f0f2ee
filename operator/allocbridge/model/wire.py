"""An Allocation custom resource (and its pod) in Nomad's wire shapes. No I/O.

`allocation` renders the full `Allocation` of `GET /v1/allocation/:id`; `services` and
`checks` render the registrations and check results of the allocation's pod. The status keys
written by `allocbridge.model.status` are camelCase forms of Nomad's names, so turning them back
is a matter of the first letter; fields Nomad always sends are filled with its zero values.

The full allocation has only fields of Nomad's `Allocation` struct, since list filters run
against it: `JobType` and `JobVersion` belong to the list stub (`allocbridge.store.stubs`).
"""

from __future__ import annotations

import functools
import hashlib
import sys
import uuid
from collections.abc import Mapping
from typing import Any

from allocbridge.model import jobs
from allocbridge.model.allocstatus import (
    ALLOC_MODIFY_INDEX,
    CLIENT_DESCRIPTION,
    CLIENT_STATUS,
    CREATE_INDEX,
    CREATE_TIME,
    DESIRED_DESCRIPTION,
    DESIRED_RUN,
    DESIRED_STATUS,
    DESIRED_TRANSITION,
    EVAL_ID,
    MODIFY_TIME,
    NEXT_ALLOCATION,
    NODE_ID,
    NODE_NAME,
    PENDING,
    PREVIOUS_ALLOCATION,
    RESCHEDULE_TRACKER,
    RUNNING,
    TASK_PENDING,
    TASK_STATES,
    RescheduleTracker,
    TaskState,
)
from allocbridge.model.pods import probe_assignments
from allocbridge.model.spec import AllocationSpec
from allocbridge.model.status import parse_time_ns

Json = dict[str, Any]

_EVENT_ZERO: Json = {
    "Type": "",
    "Time": 0,
    "Message": "",
    "DisplayMessage": "",
    "Details": {},
    "FailsTask": False,
    "RestartReason": "",
    "SetupError": "",
    "DriverError": "",
    "DriverMessage": "",
    "ExitCode": 0,
    "Signal": 0,
    "KillReason": "",
    "KillTimeout": 0,
    "KillError": "",
    "StartDelay": 0,
    "DownloadError": "",
    "ValidationError": "",
    "DiskLimit": 0,
    "FailedSibling": "",
    "VaultError": "",
    "TaskSignalReason": "",
    "TaskSignal": "",
    "GenericSource": "",
}
# Nomad also fills `Details` with snake_case copies of the typed fields.
_DETAIL_KEYS = {
    "exitCode": "exit_code",
    "signal": "signal",
    "restartReason": "restart_reason",
    "startDelay": "start_delay",
    "killTimeout": "kill_timeout",
    "killReason": "kill_reason",
    "driverMessage": "driver_message",
    "driverError": "driver_error",
    "validationError": "validation_error",
    "failedSibling": "failed_sibling",
    "taskSignal": "task_signal",
    "taskSignalReason": "task_signal_reason",
    "message": "message",
}
_NAMESPACE = uuid.UUID("6f1c1b7e-9a53-4d4a-8a5e-2b7f0c3d9e11")
#: The output of Nomad's initial result for a check that has not run yet.
WAITING_TO_RUN = "nomad: waiting to run"


def pascal(name: str) -> str:
    return name[:1].upper() + name[1:]


@functools.lru_cache(maxsize=4096)
def eval_id(alloc_id: str) -> str:
    """A stable evaluation ID for an allocation created with kubectl (Nomad always has one);
    remembered for the allocations that change most, as each change renders it again."""
    return str(uuid.uuid5(_NAMESPACE, f"eval/{alloc_id}"))


def shared(value: Any) -> Any:
    """A string as the one object every equal string is (`sys.intern`), anything else as is.

    Event types and messages, task states and node names repeat across thousands of stored
    allocations, each decoded from JSON as a string of its own (about 1 KB per allocation).
    """
    return sys.intern(value) if type(value) is str else value


def task_event(event: Mapping[str, Any]) -> Json:
    out = dict(_EVENT_ZERO)
    details: dict[str, str] = {}
    for key, value in event.items():
        out[pascal(key)] = shared(value)
        if key in _DETAIL_KEYS and value not in (None, ""):
            details[_DETAIL_KEYS[key]] = shared(
                str(value).lower() if isinstance(value, bool) else str(value)
            )
    out["Details"] = details
    return out


def task_state(state: TaskState) -> Json:
    return {
        "State": shared(state.get("state", TASK_PENDING)),
        "Failed": bool(state.get("failed", False)),
        "Restarts": int(state.get("restarts", 0)),
        "LastRestart": state.get("lastRestart"),
        "StartedAt": state.get("startedAt"),
        "FinishedAt": state.get("finishedAt"),
        "Events": [task_event(e) for e in state.get("events", [])],
        "TaskHandle": None,
        "Paused": state.get("paused", ""),
    }


def _reschedule_tracker(tracker: RescheduleTracker | None) -> Json | None:
    if not tracker:
        return None
    return {
        "Events": [
            {
                "PrevAllocID": e.get("prevAllocID", ""),
                "PrevNodeID": e.get("prevNodeID", ""),
                "RescheduleTime": int(e.get("rescheduleTime", 0)),
                "Delay": int(e.get("delay", 0)),
            }
            for e in tracker.get("events", [])
        ],
        "LastReschedule": tracker.get("lastReschedule", "ok"),
    }


def pod_ip(pod: Mapping[str, Any] | None) -> str:
    return str(((pod or {}).get("status") or {}).get("podIP") or "")


def pod_view(pod: Mapping[str, Any] | None) -> tuple[Any, ...]:
    """All that the shapes below read from a pod (its address, start time, whether it is being
    deleted, and each container's readiness and start), so that a pod change outside it needs
    no new render: most of a starting pod's changes (its binding, conditions) are outside it."""
    status = (pod or {}).get("status") or {}
    containers = tuple(
        (
            c.get("name"),
            bool(c.get("ready")),
            "running" in (c.get("state") or {}),
            ((c.get("state") or {}).get("running") or {}).get("startedAt"),
        )
        for key in ("initContainerStatuses", "containerStatuses")
        for c in status.get(key) or []
    )
    return pod_ip(pod), status.get("startTime"), _deleting(pod), containers


def _deleting(obj: Mapping[str, Any] | None) -> bool:
    return bool(((obj or {}).get("metadata") or {}).get("deletionTimestamp"))


def allocation(
    obj: Mapping[str, Any], spec: AllocationSpec | None, pod: Mapping[str, Any] | None = None
) -> Json:
    """The full Nomad `Allocation` for an Allocation object (spec is None if invalid: the `Job`
    is then a stand-in, see `jobs.render_unparsed_job`)."""
    meta = obj["metadata"]
    status: Mapping[str, Any] = obj.get("status") or {}
    raw_spec: Mapping[str, Any] = obj.get("spec") or {}
    alloc_id = str(meta["uid"])
    namespace = str(meta.get("namespace", "default"))
    modify_index = int(meta.get("resourceVersion", 0))
    create_index = int(status.get(CREATE_INDEX) or modify_index)
    if pod is not None:
        # The pod's changes that show here (its address, its containers' readiness) are what
        # a Nomad client's updates are, and those move ModifyIndex: a blocking read waits on it.
        modify_index = max(modify_index, int((pod.get("metadata") or {}).get("resourceVersion", 0)))
    create_time = int(status.get(CREATE_TIME) or parse_time_ns(meta.get("creationTimestamp")) or 0)
    raw_job = raw_spec.get("job") or {}
    raw_group = raw_spec.get("taskGroup") or {}
    ip = pod_ip(pod)
    task_states = status.get(TASK_STATES) or {}
    wire: Json = {
        "ID": alloc_id,
        "Namespace": namespace,
        "EvalID": status.get(EVAL_ID) or eval_id(alloc_id),
        "Name": spec.alloc_name
        if spec
        else f"{raw_job.get('id', '')}.{raw_group.get('name', '')}[{raw_group.get('index', 0)}]",
        "NodeID": shared(status.get(NODE_ID, "")),
        "NodeName": shared(status.get(NODE_NAME, "")),
        "JobID": raw_job.get("id", ""),
        "TaskGroup": raw_group.get("name", ""),
        "DesiredStatus": shared(status.get(DESIRED_STATUS, DESIRED_RUN)),
        "DesiredDescription": status.get(DESIRED_DESCRIPTION, ""),
        "DesiredTransition": {
            key: (status.get(DESIRED_TRANSITION) or {}).get(key[:1].lower() + key[1:])
            for key in (
                "Migrate",
                "Reschedule",
                "ForceReschedule",
                "NoShutdownDelay",
                "MigrateDisablePlacement",
            )
        },
        "ClientStatus": shared(status.get(CLIENT_STATUS, PENDING)),
        "ClientDescription": shared(status.get(CLIENT_DESCRIPTION, "")),
        "TaskStates": {name: task_state(s) for name, s in task_states.items()} or None,
        "AllocStates": None,
        "PreviousAllocation": status.get(PREVIOUS_ALLOCATION, ""),
        "NextAllocation": status.get(NEXT_ALLOCATION, ""),
        "DeploymentID": "",
        "DeploymentStatus": None,
        "RescheduleTracker": _reschedule_tracker(status.get(RESCHEDULE_TRACKER)),
        "NetworkStatus": {"InterfaceName": "", "Address": ip, "DNS": None} if ip else None,
        "FollowupEvalID": "",
        "PreemptedAllocations": None,
        "PreemptedByAllocation": "",
        "Metrics": _metrics(raw_job),
        "CreateIndex": create_index,
        "ModifyIndex": modify_index,
        "AllocModifyIndex": int(status.get(ALLOC_MODIFY_INDEX) or create_index),
        "CreateTime": create_time,
        "ModifyTime": int(status.get(MODIFY_TIME) or create_time),
    }
    if spec is not None:
        ports = {p.label: p.value for p in spec.ports()}
        wire["Job"] = jobs.render_job(
            spec,
            namespace=namespace,
            create_index=create_index,
            modify_index=create_index,
            submit_time=create_time,
        )
        wire["Resources"] = jobs.render_resources(spec, ports=ports, ip=ip)
        wire["SharedResources"] = jobs.render_shared_resources(spec, ports=ports, ip=ip)
        wire["TaskResources"] = jobs.render_task_resources(spec)
        wire["AllocatedResources"] = jobs.render_allocated_resources(spec, ports=ports, ip=ip)
    else:
        wire["Job"] = jobs.render_unparsed_job(raw_spec, namespace=namespace)
        wire.update(Resources=None, SharedResources=None, TaskResources=None)
        wire["AllocatedResources"] = None
    return wire


def _metrics(raw_job: Mapping[str, Any]) -> Json:
    datacenters = raw_job.get("datacenters") or ["dc1"]
    return {
        "NodesEvaluated": 1,
        "NodesFiltered": 0,
        "NodesInPool": 1,
        "NodesAvailable": {dc: 1 for dc in datacenters},
        "ClassFiltered": None,
        "ConstraintFiltered": None,
        "NodesExhausted": 0,
        "ClassExhausted": None,
        "DimensionExhausted": None,
        "QuotaExhausted": None,
        "ResourcesExhausted": None,
        "Scores": None,
        "ScoreMetaData": None,
        "AllocationTime": 0,
        "CoalescedFailures": 0,
    }


def services(
    obj: Mapping[str, Any], spec: AllocationSpec | None, pod: Mapping[str, Any] | None
) -> list[Json]:
    """Nomad service registrations: present while the allocation runs, should run and its pod
    has an IP. Nomad deregisters when a stop starts, before the shutdown delay and the kill, so
    a desired status other than `run`, or the Allocation or pod being deleted, ends them."""
    status: Mapping[str, Any] = obj.get("status") or {}
    ip = pod_ip(pod)
    if (
        spec is None
        or not ip
        or status.get(CLIENT_STATUS) != RUNNING
        or status.get(DESIRED_STATUS, DESIRED_RUN) != DESIRED_RUN
        or _deleting(obj)
        or _deleting(pod)
    ):
        return []
    meta = obj["metadata"]
    alloc_id = str(meta["uid"])
    ports = {p.label: p.value for p in spec.ports()}
    index = int(meta.get("resourceVersion", 0))
    datacenter = spec.job.datacenters[0] if spec.job.datacenters else "dc1"
    if datacenter == "*":
        datacenter = "dc1"
    owners = [("group", spec.task_group.name, spec.task_group.services)]
    owners += [("task", t.name, t.services) for t in spec.tasks]
    out: list[Json] = []
    for kind, owner, owned in owners:
        for service in owned:
            label = service.port_label or ""
            port = ports.get(label, int(label) if label.isdigit() else 0)
            out.append(
                {
                    "Address": ip,
                    "AllocID": alloc_id,
                    "CreateIndex": int(status.get(CREATE_INDEX) or index),
                    "Datacenter": datacenter,
                    "ID": f"_nomad-task-{alloc_id}-{kind}-{owner}-{service.name}-{label}",
                    "JobID": spec.job.id,
                    "ModifyIndex": index,
                    "Namespace": meta.get("namespace", "default"),
                    "NodeID": status.get(NODE_ID, ""),
                    "Port": port,
                    "ServiceName": service.name,
                    "Tags": list(service.tags),
                }
            )
    return out


def check_id(alloc_id: str, group: str, task: str, service: str, check: str) -> str:
    """Stable per check, and 64 hex digits of SHA-256 like Nomad's (which also hashes the
    check's definition; an Allocation's spec cannot change)."""
    return hashlib.sha256(f"{alloc_id}/{group}/{task}/{service}/{check}".encode()).hexdigest()


def checks(
    obj: Mapping[str, Any], spec: AllocationSpec | None, pod: Mapping[str, Any] | None
) -> dict[str, Json]:
    """Check results from the pod's readiness probes; checks without a probe stay `pending`.

    As in Nomad, `Group` holds the allocation's name (its checks hook passes `alloc.Name`) and
    `Task` is left out for a group service's check (`omitempty`).
    """
    if spec is None:
        return {}
    owners = [("", spec.task_group.services)] + [(t.name, t.services) for t in spec.tasks]
    if not any(service.checks for _, owned in owners for service in owned):
        return {}  # no probe plan to work out, on every change of most allocations
    meta = obj["metadata"]
    alloc_id = str(meta["uid"])
    probes = {(a.task, a.service, a.check): a.container for a in probe_assignments(spec).values()}
    statuses = {
        c["name"]: c
        for key in ("initContainerStatuses", "containerStatuses")
        for c in ((pod or {}).get("status") or {}).get(key) or []
    }
    task_states = (obj.get("status") or {}).get(TASK_STATES) or {}
    now = int((parse_time_ns(((pod or {}).get("status") or {}).get("startTime")) or 0) // 10**9)
    out: dict[str, Json] = {}
    for task, owned in owners:
        for service in owned:
            for check in service.checks:
                name = check.display_name(service.name)
                container = probes.get((task, service.name, name))
                status, output, stamp = _probe_result(container, statuses, task_states, now)
                ident = check_id(alloc_id, spec.task_group.name, task, service.name, name)
                result: Json = {
                    "ID": ident,
                    "Check": name,
                    "Group": spec.alloc_name,
                    "Service": service.name,
                    "Mode": "readiness" if check.on_update == "ignore" else "healthiness",
                    "Status": status,
                    "Output": output,
                    "Timestamp": stamp,
                }
                if task:
                    result["Task"] = task
                out[ident] = result
    return out


def _probe_result(
    container: str | None,
    statuses: Mapping[str, Mapping[str, Any]],
    task_states: Mapping[str, Any],
    fallback_time: int,
) -> tuple[str, str, int]:
    if container is None:
        return "pending", "no Kubernetes probe runs this check", fallback_time
    found = statuses.get(container)
    running = found is not None and "running" in (found.get("state") or {})
    if found is None or not running:
        return "pending", WAITING_TO_RUN, fallback_time
    started = parse_time_ns((found.get("state") or {})["running"].get("startedAt")) or 0
    failures = [
        e
        for e in (task_states.get(container) or {}).get("events", [])
        if str(e.get("displayMessage", "")).startswith("Unhealthy:")
    ]
    if found.get("ready"):
        return "success", "probe succeeded", started // 10**9
    if failures:
        last = failures[-1]
        return "failure", str(last["displayMessage"]), int(last["time"]) // 10**9
    return "pending", WAITING_TO_RUN, started // 10**9
