"""What the reconciler keeps from the watches, and which status changes it writes at once."""

from __future__ import annotations

import asyncio
import logging
from typing import Any, cast

import pytest

from allocbridge.cluster.resources import Kube
from allocbridge.model.pods import PodSettings
from allocbridge.model.status import KubeEvent
from allocbridge.reconcile.allocations import Reconciler
from allocbridge.reconcile.observed import UNCLAIMED_GRACE, Observed
from allocbridge.reconcile.writes import routine_start, urgent


def body(name: str, version: int, uid: str = "u1", namespace: str = "ns") -> dict[str, Any]:
    meta = {"name": name, "namespace": namespace, "uid": uid, "resourceVersion": str(version)}
    return {"metadata": meta}


def event(uid: str) -> KubeEvent:
    return KubeEvent(
        uid=uid, reason="Scheduled", message="", type="Normal", time_ns=1, container=None
    )


def test_a_late_older_version_never_replaces_a_newer_one() -> None:
    observed = Observed()
    assert observed.put_allocation(body("a", 12))  # e.g. the response of our own write
    assert not observed.put_allocation(body("a", 11))  # the watch catching up
    assert observed.allocation(("ns", "a")) == body("a", 12)
    assert observed.put_allocation(body("a", 12))  # the echo of that write: same version
    assert observed.knows(("ns", "a"))


def test_a_deletion_removes_only_the_object_it_names() -> None:
    observed = Observed()
    observed.put_pod(body("a", 20, uid="new"))  # a recreated pod, same name
    observed.drop_pod(body("a", 10, uid="old"))  # the old pod's deletion, delivered late
    assert observed.pod(("ns", "a")) == body("a", 20, uid="new")
    observed.put_pod(body("a", 15, uid="old"))  # and its older events change nothing
    assert observed.pod(("ns", "a")) == body("a", 20, uid="new")
    observed.drop_pod(body("a", 21, uid="new"))
    assert observed.pod(("ns", "a")) is None


def test_pod_events_are_kept_by_pod_uid_and_go_with_the_pod() -> None:
    observed = Observed()
    observed.put_event("pod-1", ("ns", "p"), event("e1"), now=0)
    observed.put_event("pod-1", ("ns", "p"), event("e2"), now=0)
    observed.put_event("pod-1", ("ns", "p"), event("e2"), now=0)
    observed.put_event("pod-2", ("ns", "q"), event("e3"), now=0)
    assert sorted(e.uid for e in observed.pod_events("pod-1")) == ["e1", "e2"]
    observed.drop_event("pod-1", "e1")
    assert [e.uid for e in observed.pod_events("pod-1")] == ["e2"]
    observed.drop_pod(body("p", 5, uid="pod-1"))
    assert observed.pod_events("pod-1") == []
    assert [e.uid for e in observed.pod_events("pod-2")] == ["e3"]


def test_events_of_a_pod_no_allocation_claims_go_after_the_grace() -> None:
    observed = Observed()
    observed.put_event("foreign", ("ns", "other-app"), event("e1"), now=0)
    observed.put_event("foreign", ("ns", "other-app"), event("e2"), now=UNCLAIMED_GRACE - 1)
    assert len(observed.pod_events("foreign")) == 2  # within the grace: kept on trust
    observed.put_event("ours", ("ns", "a"), event("e3"), now=UNCLAIMED_GRACE)
    assert observed.pod_events("foreign") == []
    assert observed.sizes()[2] == 1  # only "ours" is still held, and still on trust
    # A later Event of the same foreign pod gets a grace of its own, then goes too.
    observed.put_event("foreign", ("ns", "other-app"), event("e4"), now=UNCLAIMED_GRACE + 1)
    assert [e.uid for e in observed.pod_events("foreign")] == ["e4"]
    observed.put_event("ours", ("ns", "a"), event("e5"), now=3 * UNCLAIMED_GRACE)
    assert observed.pod_events("foreign") == []


def test_events_that_arrive_before_their_allocation_and_pod_are_kept() -> None:
    observed = Observed()
    observed.put_event("pod-1", ("ns", "a"), event("e1"), now=0)  # the Event came first
    observed.put_allocation(body("a", 3, uid="alloc-a"))  # then, within the grace, the rest
    observed.put_event("elsewhere", ("ns", "z"), event("e2"), now=UNCLAIMED_GRACE)
    assert [e.uid for e in observed.pod_events("pod-1")] == ["e1"]  # not seen yet: claimed
    observed.put_pod(body("a", 4, uid="pod-1"))
    observed.put_event("pod-1", ("ns", "a"), event("e3"), now=5 * UNCLAIMED_GRACE)
    assert sorted(e.uid for e in observed.pod_events("pod-1")) == ["e1", "e3"]


def test_late_events_of_a_replaced_pod_go_after_the_grace() -> None:
    observed = Observed()
    observed.put_allocation(body("a", 3, uid="alloc-a"))
    observed.put_pod(body("a", 4, uid="pod-2"))  # the restarted allocation's new pod
    observed.put_event("pod-1", ("ns", "a"), event("late"), now=0)  # about the old pod
    observed.put_event("pod-2", ("ns", "a"), event("e1"), now=1)
    observed.put_event("pod-2", ("ns", "a"), event("e2"), now=UNCLAIMED_GRACE + 1)
    assert observed.pod_events("pod-1") == []
    assert sorted(e.uid for e in observed.pod_events("pod-2")) == ["e1", "e2"]


def test_events_of_a_watched_pod_stay_while_its_allocation_is_forgotten() -> None:
    observed = Observed()
    observed.put_allocation(body("a", 3, uid="alloc-a"))
    observed.put_pod(body("a", 4, uid="pod-1"))
    observed.put_event("pod-1", ("ns", "a"), event("e1"), now=0)
    observed.forget_allocation(("ns", "a"))  # a write conflict: the pass reads it again
    observed.put_event("pod-9", ("ns", "z"), event("e2"), now=UNCLAIMED_GRACE)
    assert [e.uid for e in observed.pod_events("pod-1")] == ["e1"]


def test_events_that_went_and_came_back_get_a_new_grace() -> None:
    observed = Observed()
    observed.put_event("pod-1", ("ns", "x"), event("e1"), now=0)
    observed.drop_event("pod-1", "e1")  # the Event object expired
    observed.put_event("pod-1", ("ns", "x"), event("e2"), now=UNCLAIMED_GRACE - 1)
    observed.put_event("pod-9", ("ns", "y"), event("e3"), now=UNCLAIMED_GRACE)
    assert [e.uid for e in observed.pod_events("pod-1")] == ["e2"]  # its own grace runs on


def test_forgetting_an_allocation_makes_the_next_pass_read_it() -> None:
    observed = Observed()
    observed.put_allocation(body("a", 3))
    observed.forget_allocation(("ns", "a"))
    assert observed.allocation(("ns", "a")) is None
    assert observed.sizes() == (0, 0, 0)


WRITTEN = {"createIndex": 5, "clientStatus": "pending"}


def test_only_added_detail_may_wait_to_be_written() -> None:
    assert not urgent({"nodeName": "n1", "nodeID": "x", "seenEvents": ["e1"]}, WRITTEN)
    detail = {"taskStates": {"web": {"events": [{"type": "Driver"}]}}, "observed": {}}
    assert not urgent(detail, WRITTEN)
    assert urgent({"clientStatus": "running"}, WRITTEN)
    assert urgent({"taskStates": {"web": {"events": [], "state": "running"}}}, WRITTEN)
    assert urgent({"podCreated": False, "startAfter": 9}, WRITTEN)
    assert urgent({"desiredStatus": "stop"}, WRITTEN)
    assert urgent({"taskStates": None}, WRITTEN)


def test_the_first_write_waits_only_while_the_allocation_is_pending() -> None:
    first = {
        "createIndex": 5,
        "createTime": 1,
        "desiredStatus": "run",
        "clientStatus": "pending",
        "taskStates": {"web": {"state": "pending", "events": [{"type": "Received"}]}},
        "podCreated": True,
        "podName": "a",
    }
    assert not urgent(first, {})
    assert urgent({**first, "clientStatus": "failed"}, {})  # failed validation
    assert urgent({**first, "taskStates": {"web": {"state": "dead", "failed": True}}}, {})
    assert urgent({**first, "desiredStatus": "stop"}, {})
    assert urgent({**first, "startAfter": 7}, {})


def kube(kind: str) -> KubeEvent:
    return KubeEvent(uid="e1", reason="Scheduled", message="", type=kind, time_ns=1, container=None)


def test_only_a_first_pending_write_without_trouble_is_a_routine_start() -> None:
    first = {"clientStatus": "pending", "observed": {"web": {}}}
    assert routine_start({}, first, [kube("Normal")])
    assert routine_start({}, {}, [])  # nothing derived yet reads as pending
    assert not routine_start(WRITTEN, first, [])  # something was written before
    assert not routine_start({}, {**first, "clientStatus": "running"}, [])
    assert not routine_start({}, first, [kube("Normal"), kube("Warning")])
    waiting = {**first, "observed": {"web": {"waiting": "ErrImagePull"}}}
    assert not routine_start({}, waiting, [])


def test_managed_fields_are_not_kept() -> None:
    observed = Observed()
    watched = body("a", 3)
    watched["metadata"]["managedFields"] = [{"manager": "kubectl"}]
    observed.put_pod(watched)
    kept = observed.pod(("ns", "a"))
    assert kept is not None and "managedFields" not in kept["metadata"]
    assert watched["metadata"]["managedFields"]  # the watch's own dict is left alone


async def test_a_deleted_allocation_keeps_no_pending_pass() -> None:
    """A pass still due for a deleted allocation would find nothing in memory and GET it from
    the API server (or its same-named successor); the deletion cancels it. Other allocations'
    passes stay due. No request is made here: the reconciler's client is never touched."""
    reconciler = Reconciler(cast(Kube, None), PodSettings())
    reconciler.schedule("ns", "gone", delay=30.0)
    reconciler.schedule("ns", "kept", delay=30.0)
    pending = reconciler.timers[("ns", "gone")]

    reconciler.allocation_event("DELETED", body("gone", 7))

    assert pending.cancelled()
    assert list(reconciler.timers) == [("ns", "kept")]
    assert not reconciler.timers[("ns", "kept")].cancelled()
    assert not reconciler.workers
    await reconciler.stop()


async def test_a_stop_writes_nothing_held_back_while_paused_or_from_an_older_version(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A paused replica leaves what it held to the leader, and a held status derived from an
    older version of the allocation than the one observed now is not written over it (a pass
    would derive again first). No request is made: the reconciler's client is never touched.
    The write itself is tested on the cluster (`test_ha.py`, a clean stop)."""
    caplog.set_level(logging.INFO, logger="allocbridge.reconcile.writes")
    paused = Reconciler(cast(Kube, None), PodSettings(), paused=lambda: True)
    paused.observed.put_allocation(body("a", 5))
    paused.held[("ns", "a")] = (0.0, "5", {"nodeName": "node-1"})
    await paused.stop()

    stale = Reconciler(cast(Kube, None), PodSettings())
    stale.observed.put_allocation(body("a", 6))
    stale.held[("ns", "a")] = (0.0, "5", {"nodeName": "node-1"})
    await stale.stop()

    assert not stale.held
    assert not [r for r in caplog.records if "flushed" in r.getMessage()]


def test_node_events_keep_the_node_each_name_stands_for_now() -> None:
    """A node re-created under the same name replaces the old one; the old one's late
    deletion event does not remove its successor."""
    reconciler = Reconciler(cast(Kube, None), PodSettings())

    def node(uid: str) -> dict[str, Any]:
        return {"metadata": {"name": "n", "uid": uid, "creationTimestamp": "2026-11-21T10:00:00Z"}}

    reconciler.node_event(None, node("old"))
    assert reconciler.nodes["n"].uid == "old"
    reconciler.node_event("ADDED", node("new"))
    reconciler.node_event("DELETED", node("old"))
    assert reconciler.nodes["n"].uid == "new"
    reconciler.node_event("DELETED", node("new"))
    assert "n" not in reconciler.nodes


async def test_the_watch_echo_of_a_pod_a_pass_holds_makes_no_pass() -> None:
    """The pod a pass created (its create's answer, stored) comes back from the watch at the
    same version: nothing new, so no pass; a newer version, or the same one after a list
    (memory may be behind), makes one. Passes are counted where they start; no request."""
    reconciler = Reconciler(cast(Kube, None), PodSettings(), settle=0.0)
    passes: list[tuple[str, str]] = []

    async def count(namespace: str, name: str) -> None:
        passes.append((namespace, name))

    reconciler.reconcile = count  # type: ignore[method-assign]
    reconciler.observed.put_allocation(body("a", 5))
    reconciler.observed.put_pod(body("a", 6, uid="pod"))  # what the create answered

    reconciler.pod_event("ADDED", body("a", 6, uid="pod"), "a")
    await asyncio.sleep(0.01)
    assert passes == []

    reconciler.pod_event("MODIFIED", body("a", 7, uid="pod"), "a")
    await asyncio.sleep(0.01)
    assert passes == [("ns", "a")]

    reconciler.verify.add(("ns", "a"))
    reconciler.pod_event(None, body("a", 7, uid="pod"), "a")
    await asyncio.sleep(0.01)
    assert passes == [("ns", "a")] * 2
    await reconciler.stop()


async def test_a_pods_changes_and_events_that_come_together_cost_one_pass() -> None:
    """A pod's binding, its Scheduled Event and the kubelet's status writes of one start come
    within moments: they wait `settle` seconds for each other and make one pass."""
    reconciler = Reconciler(cast(Kube, None), PodSettings(), settle=0.05)
    passes: list[tuple[str, str]] = []

    async def count(namespace: str, name: str) -> None:
        passes.append((namespace, name))

    reconciler.reconcile = count  # type: ignore[method-assign]
    reconciler.observed.put_allocation(body("a", 5))
    reconciler.pod_event("MODIFIED", body("a", 6, uid="pod"), "a")
    scheduled = {
        "metadata": {"uid": "e1", "namespace": "ns", "name": "a.1"},
        "involvedObject": {"kind": "Pod", "namespace": "ns", "name": "a", "uid": "pod"},
        "reason": "Scheduled",
    }
    reconciler.kubernetes_event("ADDED", scheduled)
    reconciler.pod_event("MODIFIED", body("a", 8, uid="pod"), "a")
    await asyncio.sleep(0.01)
    assert passes == []  # still settling
    await asyncio.sleep(0.15)
    assert passes == [("ns", "a")]
    await reconciler.stop()
