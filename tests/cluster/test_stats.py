"""`nomad alloc status`'s stats call end to end: the running operator's
`/v1/client/allocation/:id/stats` onto the node's summary stats through the API server's node
proxy (with the operator's shipped RBAC).

kwok's fake nodes serve no summary stats, so on the local control plane the answer is the 501
that says so (not a 404, which the CLI would read as an unknown allocation); the mapping of a
real summary is unit-tested (tests/unit/test_usage.py).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from running_operator import (
    Operator,
    allocation_manifest,
    http,
)

from allocbridge_localcluster.kubectl import eventually

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def running(operator: Operator, kubectl: Any) -> Iterator[tuple[str, str]]:
    """(namespace, allocation ID) of a running allocation on a kwok node."""
    namespace = f"stats-{uuid.uuid4().hex[:10]}"
    kubectl("create", "namespace", namespace)
    kubectl.apply(allocation_manifest("stats-0", namespace))
    uid = kubectl.json("get", "allocation", "stats-0", "-n", namespace)["metadata"]["uid"]
    eventually(
        lambda: (
            operator.get(f"/v1/allocation/{uid}?namespace={namespace}")["ClientStatus"] == "running"
        ),
        timeout=60,
        what="the allocation to run",
    )
    yield namespace, uid
    kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def test_a_node_without_stats_is_a_501_that_says_so(
    operator: Operator, running: tuple[str, str]
) -> None:
    _, alloc_id = running
    status, body, _ = http(f"{operator.api}/v1/client/allocation/{alloc_id}/stats")
    assert status == 501, body
    assert b"serves no resource stats" in body
    status, body, _ = http(f"{operator.api}/v1/client/allocation/{alloc_id}/stats?task=nope")
    assert (status, body) == (400, b'unknown task name "nope"')
