"""NodeName and NodeID of an allocation: the node its pod was bound to, not a newer one."""

from __future__ import annotations

from typing import Any

from allocbridge.model.placement import KnownNode, bound_ns, node_fields
from allocbridge.model.status import parse_time_ns

OLD = "2026-11-21T10:00:00Z"
BOUND = "2026-11-21T10:05:00Z"
NEW = "2026-11-21T10:07:00Z"


def stamp(text: str) -> int:
    parsed = parse_time_ns(text)
    assert parsed is not None
    return parsed


def pod(node: str | None = "node-a", scheduled: str | None = BOUND) -> dict[str, Any]:
    conditions = [{"type": "Ready", "status": "True", "lastTransitionTime": NEW}]
    if scheduled is not None:
        conditions.append(
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": scheduled}
        )
    return {
        "metadata": {"creationTimestamp": OLD},
        "spec": {"nodeName": node} if node else {},
        "status": {"conditions": conditions},
    }


def test_the_binding_time_is_the_api_servers_scheduled_stamp() -> None:
    assert bound_ns(pod()) == stamp(BOUND)


def test_a_pod_created_on_its_node_was_bound_when_created() -> None:
    assert bound_ns(pod(scheduled=None)) == stamp(OLD)


def test_an_unscheduled_condition_is_not_a_binding() -> None:
    unschedulable = pod(scheduled=None)
    unschedulable["status"]["conditions"].append(
        {"type": "PodScheduled", "status": "False", "lastTransitionTime": NEW}
    )
    assert bound_ns(unschedulable) == stamp(OLD)


def test_a_node_that_existed_at_the_binding_gives_its_uid() -> None:
    fields = node_fields(pod(), KnownNode("uid-1", stamp(OLD)), {})
    assert fields == {"nodeName": "node-a", "nodeID": "uid-1"}


def test_a_node_created_in_the_second_of_the_binding_counts_as_the_pods() -> None:
    fields = node_fields(pod(), KnownNode("uid-1", stamp(BOUND)), {})
    assert fields["nodeID"] == "uid-1"


def test_a_newer_node_of_the_same_name_keeps_the_recorded_id() -> None:
    previous = {"nodeName": "node-a", "nodeID": "uid-1"}
    fields = node_fields(pod(), KnownNode("uid-2", stamp(NEW)), previous)
    assert fields == {"nodeName": "node-a", "nodeID": "uid-1"}


def test_a_newer_node_with_nothing_recorded_leaves_the_id_unknown() -> None:
    recorded_elsewhere = {"nodeName": "node-b", "nodeID": "uid-b"}
    fields = node_fields(pod(), KnownNode("uid-2", stamp(NEW)), recorded_elsewhere)
    assert fields == {"nodeName": "node-a", "nodeID": ""}


def test_a_node_gone_keeps_the_recorded_id() -> None:
    previous = {"nodeName": "node-a", "nodeID": "uid-1"}
    assert node_fields(pod(), None, previous)["nodeID"] == "uid-1"


def test_an_unbound_pod_has_no_node_fields() -> None:
    assert node_fields(pod(node=None), KnownNode("uid-1", stamp(OLD)), {}) == {}


def test_a_node_without_a_uid_is_not_known() -> None:
    assert KnownNode.of({"metadata": {"name": "node-a"}}) is None
    node = {"metadata": {"name": "node-a", "uid": "u", "creationTimestamp": OLD}}
    assert KnownNode.of(node) == KnownNode("u", stamp(OLD))


def test_a_nodes_kubelet_version_tells_whether_it_honours_container_policies() -> None:
    def node(kubelet: str) -> dict[str, Any]:
        meta = {"name": "n", "uid": "u", "creationTimestamp": OLD}
        return {"metadata": meta, "status": {"nodeInfo": {"kubeletVersion": kubelet}}}

    older = KnownNode.of(node("v1.34.2-eks-113cf36"))
    upgraded = KnownNode.of(node("v1.35.1"))
    assert older is not None and older.container_restart_policies is False
    assert upgraded is not None and upgraded.container_restart_policies is True
