"""A user's free-form data reaches `/v1` whole, whatever its keys are named.

The operator cuts `metadata.managedFields` out of each watch event's bytes before decoding
(`cluster/watch.decode_event`). A task's `config` is the user's own JSON, so a key there may be
named `managedFields` too. When an object has no `metadata.managedFields` (a write of `[{}]`
clears them), the cut must find nothing to cut rather than the user's key further on. On the
real control plane: the API server's own field order and bytes, not a hand-made event.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from running_operator import Operator, allocation_manifest, http

from allocbridge_localcluster.kubectl import eventually

pytestmark = pytest.mark.cluster

#: The user's config: a key named as the metadata the operator cuts, with a list value.
CONFIG: dict[str, Any] = {"image": "busybox", "managedFields": [{"manager": "mine", "n": 1}]}


def read(operator: Operator, alloc_id: str) -> tuple[int, dict[str, Any]]:
    """The allocation as `/v1` answers it, and the index the answer is at."""
    code, raw, headers = http(operator.api + f"/v1/allocation/{alloc_id}")
    assert code == 200, raw
    answer: dict[str, Any] = json.loads(raw)
    return int(headers["X-Nomad-Index"]), answer


def task_config(answer: dict[str, Any]) -> Any:
    return answer["Job"]["TaskGroups"][0]["Tasks"][0]["Config"]


def test_a_config_key_named_managed_fields_survives_when_the_metadata_has_none(
    operator: Operator, kubectl: Any, namespace: str
) -> None:
    tasks = [{"name": "main", "driver": "docker", "config": CONFIG}]
    kubectl.apply(allocation_manifest("keys", namespace, tasks=tasks))
    alloc_id = kubectl.json("get", "allocation", "keys", "-n", namespace)["metadata"]["uid"]
    eventually(
        lambda: http(operator.api + f"/v1/allocation/{alloc_id}")[0] == 200,
        what="the allocation in the operator's store",
    )
    assert task_config(read(operator, alloc_id)[1]) == CONFIG

    cleared = kubectl.json(
        "patch",
        "allocation",
        "keys",
        "-n",
        namespace,
        "--type=merge",
        "-p",
        json.dumps({"metadata": {"managedFields": [{}]}}),
    )
    assert "managedFields" not in cleared["metadata"]  # the event the store decodes next has none
    version = int(cleared["metadata"]["resourceVersion"])

    _, answer = eventually(
        lambda: (seen := read(operator, alloc_id))[0] >= version and seen,
        what="the store at the cleared object's version",
    )
    assert task_config(answer) == CONFIG
