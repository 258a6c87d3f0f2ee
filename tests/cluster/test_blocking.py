"""Blocking queries on the real control plane: what wakes a parked `GET /v1/allocations`.

The store's index is global, as Nomad's table index is, so other suites' clean-up (namespaces
being deleted) can move it too. Each check therefore names the change it is about by its
resourceVersion: a parked query that answers with another index was woken by something else,
and parks again from there.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from running_operator import Operator, eventually, http, quick_allocation

pytestmark = pytest.mark.cluster

#: Tries when unrelated changes keep waking the parked query.
TRIES = 10


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
    """One blocking list query from `since`, answered on a thread."""

    def __init__(self, operator: Operator, since: int) -> None:
        self.answered: int | None = None
        url = f"{operator.api}/v1/allocations?namespace=*&index={since}&wait=20s"

        def ask() -> None:
            code, _, headers = http(url)
            assert code == 200
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
