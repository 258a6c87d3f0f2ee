"""Pure derivations from an allocation's wire dict: the list stub and the filter datum.

The list answers `AllocListStub`s, which (unlike the full `Allocation`) always carry every
field, so absent wire fields get Nomad's zero values here. `JobType` and `JobVersion` come
from the embedded `Job`, as in Nomad's `Allocation.Stub`.

The filter datum is the wire dict with every top-level `Allocation` field present: Nomad
evaluates filters against the Go struct, where zero fields exist, while our wire dict (like
Nomad's read response) may leave them out. Without this, `NodeName == ""` would fail with
"couldn't find key" instead of matching. It is a copy (about 0.8 KB per allocation), not a view:
the filter evaluator's fast path reads plain dicts, and a `Mapping` view over the wire made a
filter over 10,000 allocations take 17.6 ms instead of 4.1.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

Json = dict[str, Any]

#: `DesiredTransition` is a struct of nullable bools; its zero value has every field null.
EMPTY_DESIRED_TRANSITION: Final[Mapping[str, None]] = {
    "ForceReschedule": None,
    "Migrate": None,
    "MigrateDisablePlacement": None,
    "NoShutdownDelay": None,
    "Reschedule": None,
}

#: Stub fields copied from the wire dict, with the zero value used when absent.
_STUB_FIELDS: Final[tuple[tuple[str, Any], ...]] = (
    ("ClientDescription", ""),
    ("ClientStatus", ""),
    ("CreateTime", 0),
    ("DeploymentStatus", None),
    ("DesiredDescription", ""),
    ("DesiredStatus", ""),
    ("EvalID", ""),
    ("FollowupEvalID", ""),
    ("JobID", ""),
    ("ModifyTime", 0),
    ("Name", ""),
    ("NextAllocation", ""),
    ("NodeID", ""),
    ("NodeName", ""),
    ("PreemptedAllocations", None),
    ("PreemptedByAllocation", ""),
    ("RescheduleTracker", None),
    ("TaskGroup", ""),
    ("TaskStates", None),
)

#: Every top-level field of Nomad's `Allocation` with its JSON zero value.
ALLOCATION_ZERO: Final[Mapping[str, Any]] = {
    "ID": "",
    "Namespace": "",
    "EvalID": "",
    "Name": "",
    "NodeID": "",
    "NodeName": "",
    "JobID": "",
    "Job": None,
    "TaskGroup": "",
    "Resources": None,
    "SharedResources": None,
    "TaskResources": None,
    "AllocatedResources": None,
    "Metrics": None,
    "DesiredStatus": "",
    "DesiredDescription": "",
    "DesiredTransition": EMPTY_DESIRED_TRANSITION,
    "ClientStatus": "",
    "ClientDescription": "",
    "TaskStates": None,
    "AllocStates": None,
    "PreviousAllocation": "",
    "NextAllocation": "",
    "DeploymentID": "",
    "DeploymentStatus": None,
    "RescheduleTracker": None,
    "NetworkStatus": None,
    "FollowupEvalID": "",
    "PreemptedAllocations": None,
    "PreemptedByAllocation": "",
    "SigningKeyID": "",
    "CreateIndex": 0,
    "ModifyIndex": 0,
    "AllocModifyIndex": 0,
    "CreateTime": 0,
    "ModifyTime": 0,
}


def stub_from_wire(
    wire: Mapping[str, Any], *, alloc_id: str, namespace: str, create_index: int, modify_index: int
) -> Json:
    """The `AllocListStub` of an allocation, with TaskStates and without AllocatedResources.

    Nested values are shared with `wire`, not copied: both are read-only once stored.
    """
    stub: Json = {name: wire.get(name, zero) for name, zero in _STUB_FIELDS}
    job = wire.get("Job") or {}
    stub["ID"] = alloc_id
    stub["Namespace"] = namespace
    stub["CreateIndex"] = create_index
    stub["ModifyIndex"] = modify_index
    stub["JobType"] = job.get("Type", "")
    stub["JobVersion"] = job.get("Version", 0)
    transition = wire.get("DesiredTransition")
    stub["DesiredTransition"] = (
        {**EMPTY_DESIRED_TRANSITION, **transition} if transition else dict(EMPTY_DESIRED_TRANSITION)
    )
    return stub


def filter_datum(wire: Mapping[str, Any]) -> Mapping[str, Any]:
    """The wire dict with absent top-level fields set to their zero values (or itself)."""
    if all(name in wire for name in ALLOCATION_ZERO):
        return wire
    return {**ALLOCATION_ZERO, **wire}
