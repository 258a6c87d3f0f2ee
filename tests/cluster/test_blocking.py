"""Blocking queries on the real control plane: what wakes a parked `GET /v1/allocations`.

The store's index is global, as Nomad's table index is, so other suites' clean-up (namespaces
being deleted) can move it too. Each check therefore names the change it is about by its
resourceVersion: a parked query that answers with another index was woken by something else,
and parks again from there. A read of one allocation waits on its ModifyIndex instead, which
only that allocation and its pod move.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from running_operator import (
    Operator,
    http,
    quick_allocation,
)

from allocbridge_localcluster.kubectl import eventually

pytestmark = pytest.mark.cluster

#: Tries when unrelated changes keep waking the parked query.
TRIES = 10
#: Seconds a parked query waits (Nomad adds up to 1/16 more as jitter).
WAIT = 20


def index_now(operator: Operator) -> int:
    code, _, headers = http(operator.api + "/v1/allocations?namespace=*")
    assert code == 200
    return int(headers["X-Nomad-Index"])


def quiet_index(operator: Operator) -> int:
    """The index once it has stood still for a second (earlier suites' namespaces may still be
    going away, and their allocations and pods with them)."""

    def settled() -> int | None:
        before = index_now(operator)
        time.sleep(1.0)
        return before if index_now(operator) == before else None

    found: int = eventually(settled, timeout=120, what="the index to stand still")
    return found


class Parked:
    """One blocking query of `path` (the list of every namespace unless given) from `since`,
    answered on a thread: the index it answered with, and its body."""

    def __init__(
        self, operator: Operator, since: int, path: str = "/v1/allocations?namespace=*"
    ) -> None:
        self.answered: int | None = None
        self.body: Any = None
        url = f"{operator.api}{path}{'&' if '?' in path else '?'}index={since}&wait={WAIT}s"

        def ask() -> None:
            code, body, headers = http(url)
            assert code == 200
            self.body = json.loads(body)
            self.answered = int(headers["X-Nomad-Index"])

        self.thread = threading.Thread(target=ask, daemon=True)
        self.thread.start()

    def answer(self, within: float) -> int | None:
        self.thread.join(timeout=within)
        return self.answered


def woken_by(operator: Operator, change: Callable[[], int], within: float = 2.0) -> bool:
    """True if `change()` (which returns the resourceVersion it wrote) answers a parked query
    with that revision; False if the query stays parked. A query answered with any other
    index was woken by an unrelated change, and the check starts again."""
    for _ in range(TRIES):
        parked = Parked(operator, quiet_index(operator))
        time.sleep(0.3)  # parked before the change is made
        if parked.answer(0) is not None:
            continue  # something else changed meanwhile
        version = change()
        answered = parked.answer(within)
        if answered is None:
            return False
        if answered == version:
            return True
    raise AssertionError(f"unrelated changes woke the parked query {TRIES} times in a row")


def test_a_pod_change_the_api_does_not_show_leaves_parked_queries_parked(
    operator: Operator, kubectl: Any, namespace: str
) -> None:
    kubectl.apply(quick_allocation("steady", namespace))
    eventually(
        lambda: any(
            a["Name"] == "steady.g[0]" and a["ClientStatus"] == "running"
            for a in operator.get(f"/v1/allocations?namespace={namespace}")
        ),
        what="the API to show steady running",
    )
    touches = iter(range(1_000))

    def annotate(kind: str) -> int:
        """Touch the allocation or its pod (both named `steady`); the revision it wrote."""
        touch = f"example.com/touch={next(touches)}"
        changed = kubectl.json("annotate", "--overwrite", kind, "steady", "-n", namespace, touch)
        return int(changed["metadata"]["resourceVersion"])

    assert not woken_by(operator, lambda: annotate("pod")), "a pod annotation woke a parked query"
    assert woken_by(operator, lambda: annotate("allocation")), "a change of the allocation did not"


def test_a_blocking_read_of_one_allocation_wakes_when_its_pod_gets_a_new_address(
    operator: Operator, kubectl: Any, namespace: str
) -> None:
    """The pod's address shows in the allocation (NetworkStatus) but the reconciler never
    writes it into the Allocation, so the read can wake only because ModifyIndex follows the
    pod's revision, as a Nomad client's update moves it."""
    kubectl.apply(quick_allocation("addressed", namespace))
    listed = eventually(
        lambda: [
            a
            for a in operator.get(f"/v1/allocations?namespace={namespace}")
            if a["ClientStatus"] == "running"
        ],
        what="the API to show addressed running",
    )
    path = f"/v1/allocation/{listed[0]['ID']}"

    def settled() -> Any:
        """The allocation once it shows an address and its ModifyIndex stood still a second."""
        before = operator.get(path)
        time.sleep(1.0)
        after = operator.get(path)
        return after if after == before and after["NetworkStatus"] else None

    shown = eventually(settled, what="the allocation to settle with an address")
    old_address = shown["NetworkStatus"]["Address"]
    new_address = "10.244.255.254" if old_address != "10.244.255.254" else "10.244.255.253"
    allocation_version = kubectl.json("get", "allocation", "addressed", "-n", namespace)[
        "metadata"
    ]["resourceVersion"]

    parked = Parked(operator, shown["ModifyIndex"], path)
    time.sleep(0.3)  # parked before the pod changes
    assert parked.answer(0) is None, "the settled allocation's read did not park"
    started = time.monotonic()
    pod = kubectl.json(
        "patch",
        "pod",
        "addressed",
        "-n",
        namespace,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps({"status": {"podIP": new_address, "podIPs": [{"ip": new_address}]}}),
    )
    pod_version = int(pod["metadata"]["resourceVersion"])

    answered = parked.answer(5.0)
    assert answered is not None, f"the new address left the read parked (5 s of its {WAIT} s)"
    assert time.monotonic() - started < WAIT
    assert answered == parked.body["ModifyIndex"] == pod_version > shown["ModifyIndex"]
    assert parked.body["NetworkStatus"]["Address"] == new_address
    unchanged = kubectl.json("get", "allocation", "addressed", "-n", namespace)
    assert unchanged["metadata"]["resourceVersion"] == allocation_version, (
        "the Allocation changed too, so this does not show the pod alone waking the read"
    )


def test_a_wait_in_microseconds_spelled_with_the_micro_sign_parks_the_query(
    operator: Operator,
) -> None:
    """Go's ParseDuration takes `µs` (and `μs`), so the Nomad CLI's users may send it; it used
    to be refused as non-ASCII. Sent percent-encoded, as a client must."""
    since = quiet_index(operator)
    started = time.monotonic()
    code, body, headers = http(
        f"{operator.api}/v1/allocations?namespace=*&index={since}&wait=500000%C2%B5s"
    )
    assert code == 200, body
    assert int(headers["X-Nomad-Index"]) >= since
    assert time.monotonic() - started < WAIT, "the wait was not read as half a second"
