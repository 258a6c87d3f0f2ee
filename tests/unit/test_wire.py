"""Allocation objects rendered as Nomad wire JSON: allocation, services, checks."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import yaml

from allocbridge.model.spec import parse_spec
from allocbridge.model.status import derive, rfc3339
from allocbridge.model.wire import (
    allocation,
    checks,
    eval_id,
    pod_view,
    services,
    task_event,
    task_state,
)
from allocbridge.store import StoredAllocation
from allocbridge.store.stubs import ALLOCATION_ZERO

EXAMPLES = Path(__file__).parents[2] / "examples"
NS = 1_000_000_000
T0 = 1_800_000_000 * NS
UID = "8c3d9a1f-0000-4000-8000-000000000001"

ALLOCATION_FIELDS = {
    "ID",
    "Namespace",
    "EvalID",
    "Name",
    "NodeID",
    "NodeName",
    "JobID",
    "Job",
    "TaskGroup",
    "Resources",
    "SharedResources",
    "TaskResources",
    "AllocatedResources",
    "Metrics",
    "DesiredStatus",
    "DesiredDescription",
    "DesiredTransition",
    "ClientStatus",
    "ClientDescription",
    "TaskStates",
    "PreviousAllocation",
    "NextAllocation",
    "DeploymentStatus",
    "RescheduleTracker",
    "FollowupEvalID",
    "PreemptedAllocations",
    "PreemptedByAllocation",
    "CreateIndex",
    "ModifyIndex",
    "AllocModifyIndex",
    "CreateTime",
    "ModifyTime",
}


def example(name: str) -> dict[str, Any]:
    obj: dict[str, Any] = yaml.safe_load((EXAMPLES / name).read_text())
    obj["metadata"].update(uid=UID, namespace="default", resourceVersion="120")
    return obj


def running_pod(obj: dict[str, Any], ready: bool) -> dict[str, Any]:
    spec = parse_spec(obj["spec"])
    return {
        "spec": {"restartPolicy": "Always", "nodeName": "node-1"},
        "status": {
            "phase": "Running",
            "podIP": "10.0.0.7",
            "startTime": rfc3339(T0),
            "containerStatuses": [
                {
                    "name": t.name,
                    "restartCount": 0,
                    "ready": ready,
                    "state": {"running": {"startedAt": rfc3339(T0)}},
                }
                for t in spec.tasks
            ],
        },
    }


def test_pod_view_holds_everything_the_shapes_read() -> None:
    obj = example("services-checks.yaml")
    spec = parse_spec(obj["spec"])
    obj["status"] = {"clientStatus": "running", "nodeID": "n1"}
    pod = running_pod(obj, ready=True)
    elsewhere = copy.deepcopy(pod)  # changed only outside the view
    elsewhere["metadata"] = {"resourceVersion": "9", "labels": {"extra": "label"}}
    elsewhere["spec"]["nodeName"] = "node-2"
    elsewhere["status"]["phase"] = "Unknown"
    elsewhere["status"]["conditions"] = [{"type": "PodScheduled", "status": "True"}]
    for container in elsewhere["status"]["containerStatuses"]:
        container["restartCount"] = 3
    assert pod_view(elsewhere) == pod_view(pod)
    for shape in (allocation, services, checks):
        assert shape(obj, spec, elsewhere) == shape(obj, spec, pod)
    unready = running_pod(obj, ready=False)
    assert pod_view(unready) != pod_view(pod)
    assert checks(obj, spec, unready) != checks(obj, spec, pod)
    moved = copy.deepcopy(pod)
    moved["status"]["podIP"] = "10.0.0.8"
    assert pod_view(moved) != pod_view(pod)
    assert services(obj, spec, moved) != services(obj, spec, pod)
    assert pod_view(None) == pod_view({"status": {}})


def test_allocation_has_the_spec_fields_and_index_rules() -> None:
    obj = example("web.yaml")
    spec = parse_spec(obj["spec"])
    obj["status"] = {**derive(spec, {}, None, T0).status, "createIndex": 100}
    wire = allocation(obj, spec)
    assert set(wire) >= ALLOCATION_FIELDS
    assert wire["ID"] == UID
    assert wire["Name"] == "web.web[0]"
    assert (wire["CreateIndex"], wire["ModifyIndex"]) == (100, 120)
    assert wire["EvalID"] == eval_id(UID)
    assert wire["Job"]["ID"] == "web" and wire["Job"]["TaskGroups"][0]["Name"] == "web"
    state = wire["TaskStates"]["server"]
    assert state["State"] == "pending" and state["FinishedAt"] is None
    assert state["Events"][0]["Type"] == "Received"
    assert set(state["Events"][0]) >= {"DisplayMessage", "ExitCode", "Details", "FailsTask"}


def test_allocation_has_no_stub_only_fields_and_the_stub_keeps_them() -> None:
    """`JobType` and `JobVersion` exist only on Nomad's `AllocListStub` (copied from the Job
    there): a read, or a filter (which runs on the full allocation), must not see them."""
    obj = example("web.yaml")
    obj["spec"]["job"]["version"] = 4
    spec = parse_spec(obj["spec"])
    obj["status"] = {**derive(spec, {}, None, T0).status, "createIndex": 100}
    for usable in (spec, None):
        extra = set(allocation(obj, usable)) - set(ALLOCATION_ZERO)
        assert not extra, f"not fields of Nomad's Allocation: {sorted(extra)}"
    stub = StoredAllocation.from_wire(allocation(obj, spec)).stub
    assert (stub["JobType"], stub["JobVersion"]) == ("service", 4)


def test_task_event_details_mirror_typed_fields() -> None:
    event = task_event(
        {"type": "Terminated", "time": 5, "displayMessage": "Exit Code: 3", "exitCode": 3}
    )
    assert event["ExitCode"] == 3 and event["Details"] == {"exit_code": "3"}
    assert event["Signal"] == 0 and event["KillError"] == ""


def test_invalid_spec_still_renders() -> None:
    obj = example("web.yaml")
    obj["spec"]["tasks"][0]["driver"] = "qemu"
    wire = allocation(obj, None)
    assert wire["JobID"] == "web"
    job = wire["Job"]
    # The nomad CLI dereferences alloc.Job (ID, Type, Version, the group's tasks): never null.
    assert (job["ID"], job["Name"], job["Namespace"]) == ("web", "web", "default")
    assert job["Type"] == "service" and job["Version"] == 0
    groups = job["TaskGroups"]
    assert [g["Name"] for g in groups] == [obj["spec"]["taskGroup"]["name"]]
    assert [t["Name"] for t in groups[0]["Tasks"]] == [t["name"] for t in obj["spec"]["tasks"]]
    stored = StoredAllocation.from_wire(wire)
    assert stored.stub["JobType"] == "service"


def test_job_stand_in_takes_only_what_it_can_read() -> None:
    """Fields of the wrong type or missing are left at Nomad's defaults, not copied."""
    obj = example("web.yaml")
    obj["spec"] = {"job": {"id": "broken", "type": 7}, "taskGroup": {}, "tasks": [3, {}]}
    job = allocation(obj, None)["Job"]
    assert job["ID"] == "broken" and job["Type"] == "service"
    assert job["TaskGroups"] == []
    obj["spec"] = {"taskGroup": {"name": "g"}, "tasks": [{"name": "a"}, {"image": "x"}]}
    job = allocation(obj, None)["Job"]
    assert job["ID"] == "" and [t["Name"] for t in job["TaskGroups"][0]["Tasks"]] == ["a"]


def test_services_need_a_running_pod_with_an_address() -> None:
    obj = example("services-checks.yaml")
    spec = parse_spec(obj["spec"])
    obj["status"] = {"clientStatus": "pending"}
    assert services(obj, spec, None) == []
    obj["status"] = {"clientStatus": "running", "nodeID": "n1"}
    found = services(obj, spec, running_pod(obj, ready=True))
    assert found, "the example declares services"
    for registration in found:
        assert registration["Address"] == "10.0.0.7"
        assert registration["AllocID"] == UID
        assert registration["Port"] > 0
        assert registration["NodeID"] == "n1"


def test_checks_follow_probe_readiness() -> None:
    obj = example("services-checks.yaml")
    spec = parse_spec(obj["spec"])
    obj["status"] = {"clientStatus": "running"}
    pending = checks(obj, spec, None)
    assert pending and all(c["Status"] == "pending" for c in pending.values())
    ready = checks(obj, spec, running_pod(obj, ready=True))
    assert set(ready) == set(pending), "check IDs are stable"
    probed = [c for c in ready.values() if c["Output"] != "no Kubernetes probe runs this check"]
    assert probed and all(c["Status"] == "success" for c in probed)
    assert all(c["Mode"] in ("healthiness", "readiness") for c in ready.values())


def test_services_are_deregistered_once_the_allocation_is_stopping() -> None:
    """Nomad deregisters services when a stop starts, then waits out the shutdown delay and
    kills the tasks: during the delay the tasks still run but their services are gone."""
    obj = example("services-checks.yaml")
    spec = parse_spec(obj["spec"])
    pod = running_pod(obj, ready=True)
    obj["status"] = {"clientStatus": "running", "desiredStatus": "run", "nodeID": "n1"}
    assert services(obj, spec, pod)
    stopping = copy.deepcopy(obj)  # what `actions.lifecycle` writes for a stop
    stopping["status"].update(
        desiredStatus="stop",
        desiredDescription="alloc was stopped by user request and rescheduled",
        desiredTransition={"migrate": True, "noShutdownDelay": False},
        stopAt=T0 + 5 * NS,
    )
    assert services(stopping, spec, pod) == []
    evicted = copy.deepcopy(obj)
    evicted["status"]["desiredStatus"] = "evict"
    assert services(evicted, spec, pod) == []
    deleted = copy.deepcopy(obj)
    deleted["metadata"]["deletionTimestamp"] = rfc3339(T0)
    assert services(deleted, spec, pod) == []


def test_services_go_with_a_pod_being_deleted() -> None:
    """A pod being deleted (an eviction, a drain) is on its way out, as in Nomad's stop; the
    feed renders again when the pod says so, as for any change the shapes read."""
    obj = example("services-checks.yaml")
    spec = parse_spec(obj["spec"])
    obj["status"] = {"clientStatus": "running", "nodeID": "n1"}
    pod = running_pod(obj, ready=True)
    terminating = copy.deepcopy(pod)
    terminating["metadata"] = {"deletionTimestamp": rfc3339(T0), "deletionGracePeriodSeconds": 30}
    assert services(obj, spec, pod)
    assert services(obj, spec, terminating) == []
    assert pod_view(terminating) != pod_view(pod)


def test_check_results_have_nomads_shape() -> None:
    """Reference 7.2: a 64-hex SHA-256 ID, `Group` holding the allocation *name*, and no
    `Task` key for a group service's check (`omitempty`)."""
    obj = example("services-checks.yaml")
    spec = parse_spec(obj["spec"])
    obj["status"] = {"clientStatus": "running"}
    ready = checks(obj, spec, running_pod(obj, ready=True))
    by_name = {result["Check"]: result for result in ready.values()}
    assert set(by_name) == {"admin-port", "http-alive"}
    for key, result in ready.items():
        assert key == result["ID"] and re.fullmatch(r"[0-9a-f]{64}", key), key
        assert result["Group"] == "frontend.frontend[0]"
    assert "Task" not in by_name["admin-port"], "the group service's check"
    assert by_name["http-alive"]["Task"] == "web"
    assert set(checks(obj, spec, None)) == set(ready), "IDs are stable across renders"


def test_checks_not_run_yet_are_waiting_to_run() -> None:
    """Before a probe has a result, the check reads as Nomad's initial stub does."""
    obj = example("services-checks.yaml")
    spec = parse_spec(obj["spec"])
    obj["status"] = {"clientStatus": "pending"}
    for pod in (None, running_pod(obj, ready=False)):
        results = checks(obj, spec, pod).values()
        assert results
        assert {(c["Status"], c["Output"]) for c in results} == {
            ("pending", "nomad: waiting to run")
        }


def test_repeated_strings_are_one_object_across_allocations() -> None:
    """Event texts and states repeat across thousands of stored allocations: each rendering
    shares one string object (decoded JSON gives every one a copy of its own)."""
    raw = '{"state": "running", "events": [{"type": "Started", "message": "Task started"}]}'
    first, second = task_state(json.loads(raw)), task_state(json.loads(raw))
    assert first == second
    assert first["State"] is second["State"]
    assert first["Events"][0]["Message"] is second["Events"][0]["Message"]
    assert first["Events"][0]["Type"] is second["Events"][0]["Type"]
