"""The writes diagnostic's objects: pods re-created as nobody schedules them, a pod without its
environment, the ReplicaSet's pod, and the Allocation CRD without its CEL rules."""

from __future__ import annotations

from typing import Any

import yaml
from benchmarks.harness import REPO
from benchmarks.writes import (
    NO_SCHEDULER,
    replica_set_pod,
    unscheduled,
    without_cel,
    without_env,
)

POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "name": "seed",
        "namespace": "bench-exec",
        "uid": "u-1",
        "resourceVersion": "7",
        "labels": {"app.kubernetes.io/managed-by": "allocbridge"},
        "annotations": {"allocbridge.io/job-id": "bench-seed"},
        "ownerReferences": [{"kind": "Allocation", "name": "seed", "uid": "a-1"}],
        "managedFields": [{"manager": "allocbridge"}],
    },
    "spec": {
        "nodeName": "node-1",
        "schedulerName": "default-scheduler",
        "initContainers": [{"name": "pre", "env": [{"name": "A", "value": "1"}]}],
        "containers": [{"name": "main", "env": [{"name": "NOMAD_ALLOC_ID", "value": "a-1"}]}],
    },
    "status": {"phase": "Running"},
}


def test_a_pod_is_recreated_unscheduled_without_owner_node_or_status() -> None:
    pod = unscheduled(POD, "w-3", "bench-writes")
    assert pod["metadata"] == {
        "name": "w-3",
        "namespace": "bench-writes",
        "labels": {"app.kubernetes.io/managed-by": "allocbridge"},
        "annotations": {"allocbridge.io/job-id": "bench-seed"},
    }
    assert "nodeName" not in pod["spec"] and "status" not in pod
    assert pod["spec"]["schedulerName"] == NO_SCHEDULER
    assert pod["spec"]["containers"] == POD["spec"]["containers"]
    assert POD["spec"]["nodeName"] == "node-1"  # the original is left as it was


def test_without_env_drops_every_containers_variables_only() -> None:
    bare = without_env(POD)
    assert [c.get("env") for c in bare["spec"]["initContainers"] + bare["spec"]["containers"]] == [
        None,
        None,
    ]
    assert [c["name"] for c in bare["spec"]["containers"]] == ["main"]
    assert POD["spec"]["containers"][0]["env"]  # the original is left as it was


def test_the_replica_set_pod_is_the_reconciliation_rounds_template() -> None:
    pod = replica_set_pod()
    assert pod["metadata"]["labels"] == {"app": "bench-rs"}
    assert [c["name"] for c in pod["spec"]["containers"]] == ["main"]


def test_the_plain_crd_has_no_cel_rules_and_its_own_group() -> None:
    crd = yaml.safe_load((REPO / "crds" / "allocations.yaml").read_text())
    assert "x-kubernetes-validations" in (REPO / "crds" / "allocations.yaml").read_text()

    plain = without_cel(crd, "nocel.example.io")

    assert "x-kubernetes-validations" not in yaml.safe_dump(plain)
    assert plain["metadata"] == {"name": "allocations.nocel.example.io"}
    assert plain["spec"]["group"] == "nocel.example.io"
    assert plain["spec"]["names"] == crd["spec"]["names"]
    assert crd["spec"]["group"] == "allocbridge.io"  # the original is left as it was
