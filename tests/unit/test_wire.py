"""Allocation objects rendered as Nomad wire JSON: allocation, services, checks."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from allocbridge.model.spec import parse_spec
from allocbridge.model.status import derive, rfc3339
from allocbridge.model.wire import allocation, checks, eval_id, pod_view, services, task_event

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
    "JobType",
    "JobVersion",
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
    assert wire["JobID"] == "web" and wire["Job"] is None


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
