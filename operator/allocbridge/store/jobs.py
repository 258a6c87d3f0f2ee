"""The read-only jobs view: Nomad `JobListStub`s derived from the allocations that name a job.

There are no Job objects here, only Allocations, each carrying a copy of its job (`Job` in the
wire dict). The nomad CLI's `-job` forms need `GET /v1/jobs?prefix=` to resolve a job ID and
`GET /v1/job/:id/allocations` to pick one of its allocations, so a job exists while at least one
allocation names it. Its fields come from the newest allocation's copy (highest CreateIndex);
its indexes span its allocations (CreateIndex the oldest's, ModifyIndex the newest change);
its status and summary are counted from their client statuses.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from allocbridge.model.allocstatus import TERMINAL  # a job with nothing else is `dead`
from allocbridge.store.allocation import StoredAllocation

Json = dict[str, Any]

#: `JobSummary` counter per allocation client status (Nomad's `TaskGroupSummary` fields).
_SUMMARY_FIELD: Final = {
    "pending": "Starting",
    "running": "Running",
    "complete": "Complete",
    "failed": "Failed",
    "lost": "Lost",
    "unknown": "Unknown",
}
_SUMMARY_ZERO: Final = ("Queued", "Complete", "Failed", "Running", "Starting", "Lost", "Unknown")


def job_status(allocs: Sequence[StoredAllocation]) -> str:
    """`running` while an allocation should run and has not ended, `pending` before any was
    placed, `dead` once all have ended or been told to stop (Nomad's job status values)."""
    if not allocs:
        return "pending"
    for alloc in allocs:
        wire = alloc.wire
        if wire.get("DesiredStatus", "run") == "run" and wire.get("ClientStatus") not in TERMINAL:
            return "running"
    return "dead"


def job_summary(namespace: str, job_id: str, allocs: Sequence[StoredAllocation]) -> Json:
    """Nomad's `JobSummary`: per task group, how many allocations are in each client status."""
    groups: dict[str, dict[str, int]] = {}
    for alloc in allocs:
        group = str(alloc.wire.get("TaskGroup") or "")
        counts = groups.setdefault(group, dict.fromkeys(_SUMMARY_ZERO, 0))
        field = _SUMMARY_FIELD.get(str(alloc.wire.get("ClientStatus") or ""))
        if field is not None:
            counts[field] += 1
    return {
        "JobID": job_id,
        "Namespace": namespace,
        "Summary": groups,
        "Children": {"Pending": 0, "Running": 0, "Dead": 0},
        "CreateIndex": min((a.create_index for a in allocs), default=0),
        "ModifyIndex": max((a.modify_index for a in allocs), default=0),
    }


def job_stub(namespace: str, job_id: str, allocs: Sequence[StoredAllocation]) -> Json:
    """The `JobListStub` of a job from its allocations (oldest first, at least one)."""
    newest = max(allocs, key=lambda a: (a.create_index, a.id))
    job: Json = newest.wire.get("Job") or {}
    return {
        "ID": job_id,
        "ParentID": job.get("ParentID", ""),
        "Name": job.get("Name") or job_id,
        "Namespace": namespace,
        "Datacenters": job.get("Datacenters"),
        "NodePool": job.get("NodePool", "default"),
        "Multiregion": None,
        "Type": job.get("Type", "service"),
        "Priority": job.get("Priority", 50),
        "Periodic": False,
        "ParameterizedJob": False,
        "Stop": False,
        "Status": job_status(allocs),
        "StatusDescription": "",
        "JobSummary": job_summary(namespace, job_id, allocs),
        "Version": job.get("Version", 0),
        "CreateIndex": min(a.create_index for a in allocs),
        "ModifyIndex": max(a.modify_index for a in allocs),
        "JobModifyIndex": job.get("JobModifyIndex", newest.create_index),
        "SubmitTime": job.get("SubmitTime", 0),
        **({"Meta": job["Meta"]} if job.get("Meta") else {}),
    }
