"""The kwok configuration: the stages the local control plane's kubelet part is made of."""

from __future__ import annotations

from typing import Any

import yaml

from allocbridge_localcluster.stages import (
    KUBELET_VERSION_ANNOTATION,
    SANDBOX_CONDITION,
    kwok_config,
)


def _stages() -> dict[str, dict[str, Any]]:
    docs = list(yaml.safe_load_all(kwok_config()))
    assert all(d["apiVersion"] == "kwok.x-k8s.io/v1alpha1" and d["kind"] == "Stage" for d in docs)
    return {d["metadata"]["name"]: d["spec"] for d in docs}


def _expressions(spec: dict[str, Any]) -> list[tuple[str, str, list[str] | None]]:
    return [
        (e["key"], e["operator"], e.get("values")) for e in spec["selector"]["matchExpressions"]
    ]


def test_the_config_holds_the_four_stages_for_nodes_and_pods() -> None:
    stages = _stages()
    assert {name: spec["resourceRef"] for name, spec in stages.items()} == {
        "allocbridge-node-initialize": {"apiGroup": "v1", "kind": "Node"},
        "allocbridge-node-heartbeat": {"apiGroup": "v1", "kind": "Node"},
        "allocbridge-pod-ready": {"apiGroup": "v1", "kind": "Pod"},
        "allocbridge-pod-delete": {"apiGroup": "v1", "kind": "Pod"},
    }


def test_a_pod_starts_only_once_its_sandbox_is_prepared() -> None:
    ready = _stages()["allocbridge-pod-ready"]
    sandbox = f'.status.conditions.[] | select( .type == "{SANDBOX_CONDITION}" ) | .status'
    assert (sandbox, "In", ["True"]) in _expressions(ready)
    assert (".metadata.deletionTimestamp", "DoesNotExist", None) in _expressions(ready)
    assert "phase: Running" in ready["next"]["statusTemplate"]


def test_a_pod_already_deleted_with_grace_zero_is_left_to_the_api_server() -> None:
    delete = _stages()["allocbridge-pod-delete"]
    grace = (".metadata.deletionGracePeriodSeconds | tostring", "NotIn", ["0"])
    assert grace in _expressions(delete)
    assert delete["next"] == {"delete": True}


def test_both_node_stages_renew_every_condition_and_only_the_first_sets_the_node_up() -> None:
    stages = _stages()
    initialize = stages["allocbridge-node-initialize"]["next"]["statusTemplate"]
    heartbeat = stages["allocbridge-node-heartbeat"]["next"]["statusTemplate"]
    assert "range NodeConditions" in initialize and "range NodeConditions" in heartbeat
    assert f'index . "{KUBELET_VERSION_ANNOTATION}"' in initialize
    assert "nodeInfo:" in initialize and "nodeInfo:" not in heartbeat
    assert stages["allocbridge-node-heartbeat"]["immediateNextStage"] is True


def test_templates_are_written_as_literal_blocks_without_their_source_indent() -> None:
    text = kwok_config()
    assert "statusTemplate: |\n      {{ $now := Now }}\n" in text
    assert "\\n" not in text  # no template squeezed into one quoted line
