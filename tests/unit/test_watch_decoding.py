"""Watch events decoded without `metadata.managedFields` (cut from the bytes first)."""

from __future__ import annotations

import json
from typing import Any

import orjson

from allocbridge.cluster.watch import decode_event


def managed(manager: str = "kubelet") -> list[dict[str, Any]]:
    fields: dict[str, Any] = {
        "f:status": {'k:{"type":"Ready"}': {".": {}}, "v:[1]": {}, "f:x]": {}}
    }
    return [
        {
            "manager": manager,
            "operation": "Update",
            "apiVersion": "v1",
            "time": "2026-11-26T06:00:00Z",
            "fieldsType": "FieldsV1",
            "fieldsV1": fields,
            "subresource": "status",
        }
    ] * 3


def event(metadata: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "MODIFIED",
        "object": {
            "kind": "Pod",
            "apiVersion": "v1",
            "metadata": metadata,
            "spec": {"containers": [{"name": "c", "ports": [{"containerPort": 80}]}]},
            "status": {"phase": "Running", "podIPs": [{"ip": "10.0.0.9"}]},
        },
    }


def without_managed_fields(line: bytes) -> Any:
    decoded = orjson.loads(line)
    decoded["object"]["metadata"].pop("managedFields", None)
    return decoded


def test_managed_fields_last_in_metadata_are_cut_and_nothing_else() -> None:
    """A typed object's order: `managedFields` closes `metadata`."""
    metadata = {"name": "a", "resourceVersion": "5", "labels": {"x": "y"}}
    line = orjson.dumps(event({**metadata, "managedFields": managed()}))
    decoded = decode_event(line)
    assert "managedFields" not in decoded["object"]["metadata"]
    assert decoded == without_managed_fields(line)


def test_managed_fields_between_other_keys_are_cut() -> None:
    """A custom resource's order (sorted keys): more of `metadata` follows."""
    metadata = {"labels": {"x": "y"}, "managedFields": managed(), "name": "a", "uid": "u"}
    line = json.dumps(event(metadata), separators=(",", ":")).encode()
    decoded = decode_event(line)
    assert decoded["object"]["metadata"] == {"labels": {"x": "y"}, "name": "a", "uid": "u"}
    assert decoded == without_managed_fields(line)


def test_a_manager_named_like_the_arrays_end_still_decodes_right() -> None:
    """`x]}` in a string looks like the array's end: the cut line is not JSON, and the whole
    line is decoded (quotes in strings are escaped, so `],"` never matches inside one)."""
    for name in ('x]},"', "x]}", "x]}}", 'x],"name":"b', "]"):
        line = orjson.dumps(event({"name": "a", "managedFields": managed(name)}))
        assert decode_event(line) == without_managed_fields(line), name


def test_an_event_without_managed_fields_is_decoded_as_is() -> None:
    line = orjson.dumps(event({"name": "a", "resourceVersion": "5"}))
    assert decode_event(line) == orjson.loads(line)
    bookmark = b'{"type":"BOOKMARK","object":{"kind":"Pod","metadata":{"resourceVersion":"9"}}}'
    assert decode_event(bookmark) == orjson.loads(bookmark)


def test_a_managed_fields_array_in_the_spec_or_status_is_never_cut() -> None:
    """An Allocation's task config and task states are free-form: a key named `managedFields`
    there is the user's data. Without `metadata.managedFields` (cleared by a write of `[{}]`),
    the first such key in the bytes is the user's, and it stays."""
    for where in ("spec", "status"):
        body = event({"name": "a", "resourceVersion": "5"})
        body["object"][where] = {"config": {"a": 1, "managedFields": [{"k": "v"}]}, "x": 1}
        line = json.dumps(body, separators=(",", ":")).encode()
        assert b',"managedFields":[' in line
        assert decode_event(line) == orjson.loads(line), where
