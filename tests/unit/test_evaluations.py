"""Evaluations derived from the allocations they placed (no I/O)."""

from __future__ import annotations

import uuid

from allocations_fixture import alloc_id, wire

from allocbridge.model.evaluations import evaluation
from allocbridge.model.wire import eval_id


def test_the_evaluation_of_an_allocation_created_with_kubectl() -> None:
    alloc = {**wire(alloc_id(1), create_index=140, job_id="api", group="api")}
    alloc["EvalID"] = eval_id(alloc["ID"])
    assert evaluation(alloc["EvalID"], [alloc]) == {
        "ID": alloc["EvalID"],
        "Namespace": "default",
        "Priority": 50,
        "Type": "service",
        "TriggeredBy": "job-register",
        "JobID": "api",
        "Status": "complete",
        "QueuedAllocations": {"api": 0},
        "CreateIndex": 140,
        "ModifyIndex": 140,
        "CreateTime": alloc["CreateTime"],
        "ModifyTime": alloc["CreateTime"],
    }


def test_a_stops_evaluation_placed_the_replacement() -> None:
    stop = str(uuid.uuid4())
    replacement = {**wire(alloc_id(2), namespace="team-a", create_index=210)}
    replacement.update(EvalID=stop, PreviousAllocation=alloc_id(1))
    found = evaluation(stop, [replacement])
    assert found is not None
    assert (found["ID"], found["TriggeredBy"], found["Namespace"]) == (stop, "alloc-stop", "team-a")
    assert found["CreateIndex"] == 210


def test_a_rescheduled_allocation_was_placed_after_a_failure() -> None:
    alloc = {**wire(alloc_id(3), create_index=300)}
    alloc.update(EvalID=eval_id(alloc["ID"]), PreviousAllocation=alloc_id(1))
    found = evaluation(alloc["EvalID"], [alloc])
    assert found is not None and found["TriggeredBy"] == "alloc-failure"


def test_indexes_and_times_are_the_oldest_placements_and_zero_fields_are_left_out() -> None:
    shared = str(uuid.uuid4())
    newer = {**wire(alloc_id(4), create_index=500, group="b"), "EvalID": shared}
    older = {**wire(alloc_id(5), create_index=400, group="a"), "EvalID": shared}
    older["Job"] = {**older["Job"], "Priority": 0, "Type": "batch"}  # no JobType: a stub field
    found = evaluation(shared, [newer, older])
    assert found is not None
    assert (found["CreateIndex"], found["ModifyIndex"]) == (400, 400)
    assert found["Type"] == "batch" and found["Priority"] == 50
    assert found["QueuedAllocations"] == {"a": 0, "b": 0}
    assert not {"NodeID", "Wait", "NextEval", "BlockedEval", "DeploymentID"} & set(found)


def test_an_evaluation_that_placed_nothing_is_unknown() -> None:
    assert evaluation(str(uuid.uuid4()), []) is None
