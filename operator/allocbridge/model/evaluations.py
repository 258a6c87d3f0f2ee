"""Nomad `Evaluation`s, derived from the allocations they placed.

allocbridge keeps no evaluations: an Allocation object is placed the moment it exists, so the
evaluation behind an allocation is complete as soon as the allocation is there. What the
`nomad` CLI reads after a write (`nomad alloc stop` follows the returned `EvalID` until the
evaluation is complete and lists the allocations it placed) is derived here from the wire
allocations whose `EvalID` names it:

- A stop's evaluation placed the replacement allocation (`actions.lifecycle` writes its ID into
  the replacement's status): `TriggeredBy` `alloc-stop`.
- Every other allocation has an evaluation ID derived from its own ID (`wire.eval_id`): the
  evaluation that placed a rescheduled allocation says `alloc-failure`, any other
  `job-register`.

The indexes and times are those of the oldest allocation placed. Like Nomad's `Evaluation`
(whose struct tag is `omitempty`), fields with zero values are left out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from allocbridge.model.wire import Json, eval_id

#: Nomad's default job priority, for a placed allocation whose job does not say.
DEFAULT_PRIORITY: Final = 50


def evaluation(evaluation_id: str, placed: Sequence[Mapping[str, Any]]) -> Json | None:
    """The evaluation `evaluation_id` as `GET /v1/evaluation/:id` shows it; None if it placed
    nothing known."""
    if not placed:
        return None
    first = min(placed, key=lambda alloc: (alloc.get("CreateIndex", 0), alloc.get("ID", "")))
    job = first.get("Job") or {}
    queued = {str(alloc.get("TaskGroup", "")): 0 for alloc in placed if alloc.get("TaskGroup")}
    fields: Json = {
        "ID": evaluation_id,
        "Namespace": first.get("Namespace", ""),
        "Priority": job.get("Priority") or DEFAULT_PRIORITY,
        "Type": job.get("Type", ""),
        "TriggeredBy": _trigger(evaluation_id, first),
        "JobID": first.get("JobID", ""),
        "Status": "complete",
        "QueuedAllocations": queued,
        "CreateIndex": first.get("CreateIndex", 0),
        "ModifyIndex": first.get("CreateIndex", 0),
        "CreateTime": first.get("CreateTime", 0),
        "ModifyTime": first.get("CreateTime", 0),
    }
    return {key: value for key, value in fields.items() if value}


def _trigger(evaluation_id: str, alloc: Mapping[str, Any]) -> str:
    if evaluation_id != eval_id(str(alloc.get("ID", ""))):
        return "alloc-stop"
    return "alloc-failure" if alloc.get("PreviousAllocation") else "job-register"
