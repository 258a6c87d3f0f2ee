"""Which node an allocation's pod runs on: its NodeName and NodeID. No I/O.

A pod names its node (`spec.nodeName`), but NodeID is the node's uid, and a name can stand for
different nodes over time: a node deleted and registered again under the same name (EKS names
nodes after their IP address, which gets reused) is a new object with a new uid. So the node a
name stands for now is only the pod's node if it existed when the pod was bound to it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from allocbridge.model.allocstatus import NODE_ID, NODE_NAME
from allocbridge.model.pods import kubelet_honours_container_restart_policies
from allocbridge.model.status import parse_time_ns


@dataclass(frozen=True)
class KnownNode:
    """The node a name stands for, as last seen by a watch event or a read."""

    uid: str
    created_ns: int  # creationTimestamp, whole seconds
    #: Whether its kubelet honours a regular container's own `restartPolicy` (None: unknown).
    container_restart_policies: bool | None = None

    @classmethod
    def of(cls, node: Mapping[str, Any]) -> KnownNode | None:
        meta = node.get("metadata") or {}
        uid = meta.get("uid")
        if not uid:
            return None
        kubelet = ((node.get("status") or {}).get("nodeInfo") or {}).get("kubeletVersion")
        return cls(
            str(uid),
            parse_time_ns(meta.get("creationTimestamp")) or 0,
            kubelet_honours_container_restart_policies(str(kubelet or "")),
        )


def bound_ns(pod: Mapping[str, Any]) -> int | None:
    """When the pod was bound to its node: the API server stamps the `PodScheduled` condition
    when it binds; a pod created with its `nodeName` already set was bound when created."""
    for condition in (pod.get("status") or {}).get("conditions") or ():
        if condition.get("type") == "PodScheduled" and condition.get("status") == "True":
            stamp = parse_time_ns(condition.get("lastTransitionTime"))
            if stamp is not None:
                return stamp
    return parse_time_ns((pod.get("metadata") or {}).get("creationTimestamp"))


def node_fields(
    pod: Mapping[str, Any], known: KnownNode | None, previous: Mapping[str, Any]
) -> dict[str, str]:
    """`nodeName` and `nodeID` for the status, from the pod, the node its name stands for now
    (`known`, None if unknown) and the `previous` status.

    A node created after the pod was bound is a newer node of the same name: the pod's own
    node is gone, so the ID already recorded for that name stays (or is unknown). Timestamps
    have whole seconds, so a node created in the second of the binding counts as the pod's.
    """
    name = (pod.get("spec") or {}).get("nodeName")
    if not name:
        return {}
    bound = bound_ns(pod)
    if known is not None and (bound is None or known.created_ns <= bound):
        return {NODE_NAME: name, NODE_ID: known.uid}
    recorded = previous.get(NODE_ID, "") if previous.get(NODE_NAME) == name else ""
    return {NODE_NAME: name, NODE_ID: str(recorded)}
