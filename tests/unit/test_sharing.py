"""Equal parts of stored wire dicts are one object (the store's memory), never a changed value."""

from __future__ import annotations

import copy
from typing import Any

from allocbridge.store.sharing import SHARED_FIELDS, SharedParts


def wire(cpu: int) -> dict[str, Any]:
    resources = {"CPU": cpu, "MemoryMB": 128, "Networks": None}
    return {
        "ID": "a",
        "Job": {"ID": "web", "CreateIndex": cpu, "TaskGroups": [{"Name": "web", "Tasks": []}]},
        "Resources": resources,
        "Metrics": {"NodesEvaluated": 1},
        "AllocatedResources": None,
    }


def test_equal_parts_become_the_first_instance_seen() -> None:
    shared = SharedParts()
    first = shared.share(wire(100))
    second = shared.share(wire(100))
    assert second["Resources"] is first["Resources"]
    assert second["Metrics"] is first["Metrics"]
    assert second["Job"]["TaskGroups"] is first["Job"]["TaskGroups"]
    assert second["Job"] is not first["Job"]  # the job copy carries the allocation's indexes


def test_sharing_changes_no_value() -> None:
    shared = SharedParts()
    shared.share(wire(100))
    original = wire(200)
    assert shared.share(copy.deepcopy(original)) == original
    assert shared.share(wire(100))["Resources"]["CPU"] == 100


def test_different_parts_stay_apart_and_none_is_left_alone() -> None:
    shared = SharedParts()
    a, b = shared.share(wire(100)), shared.share(wire(200))
    assert a["Resources"] is not b["Resources"]
    assert a["Resources"]["CPU"] == 100 and b["Resources"]["CPU"] == 200
    assert b["AllocatedResources"] is None
    assert "AllocatedResources" in SHARED_FIELDS


def test_the_table_starts_over_at_its_limit() -> None:
    shared = SharedParts(limit=2)
    first = shared.canonical({"a": 1})
    shared.canonical({"b": 2})
    assert len(shared) == 2
    shared.canonical({"c": 3})  # the limit was reached: the table starts over
    assert len(shared) == 1
    again = shared.canonical({"a": 1})
    assert again is not first and again == first


def test_the_desired_transition_is_shared_too() -> None:
    shared = SharedParts()
    first = shared.share({"DesiredTransition": {"Migrate": None, "Reschedule": None}})
    second = shared.share({"DesiredTransition": {"Migrate": None, "Reschedule": None}})
    assert second["DesiredTransition"] is first["DesiredTransition"]
