"""The Allocation CRD: names, structural schema, its agreement with the models, the examples.

No JSON-schema library is installed, so `schema_errors` below checks the OpenAPI subset the CRD
uses (types, required, enums, bounds, unknown fields). The CEL rules need the API server; their
Python counterparts in `validation.validate` are run on every example instead.
"""

from __future__ import annotations

import copy
import types
import typing
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from allocbridge.model.spec import AllocationSpec, DriverConfig, parse_spec
from allocbridge.model.validation import validate

ROOT = Path(__file__).resolve().parents[2]
CRD_PATH = ROOT / "crds" / "allocations.yaml"
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))


def load_crd() -> dict[str, Any]:
    return dict(yaml.safe_load(CRD_PATH.read_text()))


CRD = load_crd()
VERSION = CRD["spec"]["versions"][0]
SCHEMA = VERSION["schema"]["openAPIV3Schema"]
SPEC_SCHEMA = SCHEMA["properties"]["spec"]


def load_examples() -> list[tuple[str, dict[str, Any]]]:
    """(file name, document) for every document in examples/."""
    out = []
    for path in EXAMPLES:
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                out.append((path.name, doc))
    return out


# --- a small checker for the OpenAPI subset of structural schemas ------------------------------

_SCALARS: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
}


def schema_errors(schema: dict[str, Any], value: Any, path: str = "") -> list[str]:
    """What the API server's OpenAPI validation (not CEL) would reject, plus pruned fields."""
    where = path or "<root>"
    if value is None:
        return [] if schema.get("nullable") else [f"{where}: must not be null"]
    kind = schema.get("type")
    if kind is None:
        return []  # preserve-unknown-fields or int-or-string: anything goes
    if kind == "object":
        return _object_errors(schema, value, path)
    if kind == "array":
        if not isinstance(value, list):
            return [f"{where}: must be an array"]
        errors = _bounds(where, len(value), schema.get("minItems"), schema.get("maxItems"), "items")
        for i, item in enumerate(value):
            errors += schema_errors(schema["items"], item, f"{path}[{i}]")
        return errors
    expected = _SCALARS[kind]
    if not isinstance(value, expected) or (kind != "boolean" and isinstance(value, bool)):
        return [f"{where}: must be {kind}, got {value!r}"]
    scalar: Any = value
    errors = []
    if "enum" in schema and scalar not in schema["enum"]:
        errors.append(f"{where}: {scalar!r} is not one of {schema['enum']}")
    if kind == "string":
        errors += _bounds(where, len(scalar), schema.get("minLength"), schema.get("maxLength"), "")
    else:
        errors += _bounds(where, scalar, schema.get("minimum"), schema.get("maximum"), "value")
    return errors


def _object_errors(schema: dict[str, Any], value: Any, path: str) -> list[str]:
    where = path or "<root>"
    if not isinstance(value, dict):
        return [f"{where}: must be an object"]
    if path == "metadata":
        return []  # ObjectMeta is validated by the API server itself
    errors = [
        f"{where}: {key} is required" for key in schema.get("required", ()) if key not in value
    ]
    errors += _bounds(where, len(value), None, schema.get("maxProperties"), "properties")
    properties = schema.get("properties", {})
    additional = schema.get("additionalProperties")
    for key, item in value.items():
        sub = f"{path}.{key}" if path else key
        if key in properties:
            errors += schema_errors(properties[key], item, sub)
        elif isinstance(additional, dict):
            errors += schema_errors(additional, item, sub)
        elif not schema.get("x-kubernetes-preserve-unknown-fields"):
            errors.append(f"{sub}: unknown field (the API server would prune it)")
    return errors


def _bounds(where: str, n: int, low: int | None, high: int | None, what: str) -> list[str]:
    if low is not None and n < low:
        return [f"{where}: {what or 'length'} {n} is below {low}"]
    if high is not None and n > high:
        return [f"{where}: {what or 'length'} {n} is above {high}"]
    return []


_ALLOWED_KEYS = {
    "type", "description", "properties", "required", "items", "additionalProperties", "enum",
    "minimum", "maximum", "minLength", "maxLength", "minItems", "maxItems", "maxProperties",
    "pattern", "format", "nullable", "default", "x-kubernetes-validations",
    "x-kubernetes-preserve-unknown-fields", "x-kubernetes-int-or-string",
    "x-kubernetes-list-type", "x-kubernetes-list-map-keys", "x-kubernetes-map-type",
}  # fmt: skip


def structural_problems(schema: dict[str, Any], path: str = "") -> list[str]:
    """Departures from Kubernetes' structural-schema rules (and from what this CRD allows)."""
    where = path or "<root>"
    problems = [f"{where}: {key} is not allowed" for key in schema if key not in _ALLOWED_KEYS]
    if "type" not in schema and not (
        schema.get("x-kubernetes-preserve-unknown-fields")
        or schema.get("x-kubernetes-int-or-string")
    ):
        problems.append(f"{where}: every node needs a type")
    if "properties" in schema and "additionalProperties" in schema:
        problems.append(f"{where}: properties and additionalProperties exclude each other")
    if schema.get("type") == "array" and not isinstance(schema.get("items"), dict):
        problems.append(f"{where}: arrays need one items schema")
    for rule in schema.get("x-kubernetes-validations", ()):
        if not rule.get("rule") or not rule.get("message"):
            problems.append(f"{where}: CEL rules need a rule and a readable message")
    for key, sub in schema.get("properties", {}).items():
        problems += structural_problems(sub, f"{path}.{key}" if path else key)
    if isinstance(schema.get("additionalProperties"), dict):
        problems += structural_problems(schema["additionalProperties"], f"{where}.*")
    if isinstance(schema.get("items"), dict):
        problems += structural_problems(schema["items"], f"{where}[]")
    return problems


def walk(schema: dict[str, Any], path: str = "") -> typing.Iterator[tuple[str, dict[str, Any]]]:
    yield path, schema
    for key, sub in schema.get("properties", {}).items():
        yield from walk(sub, f"{path}.{key}" if path else key)
    if isinstance(schema.get("additionalProperties"), dict):
        yield from walk(schema["additionalProperties"], f"{path}.*")
    if isinstance(schema.get("items"), dict):
        yield from walk(schema["items"], f"{path}[]")


# --- names and metadata ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        (("metadata", "name"), "allocations.allocbridge.io"),
        (("spec", "group"), "allocbridge.io"),
        (("spec", "scope"), "Namespaced"),
        (("spec", "names", "kind"), "Allocation"),
        (("spec", "names", "plural"), "allocations"),
        (("spec", "names", "singular"), "allocation"),
        (("spec", "names", "shortNames"), ["alloc", "allocs"]),
    ],
)
def test_crd_names(path: tuple[str, ...], expected: Any) -> None:
    value: Any = CRD
    for part in path:
        value = value[part]
    assert value == expected


def test_single_served_storage_version_v1_with_status_subresource() -> None:
    assert len(CRD["spec"]["versions"]) == 1
    assert (VERSION["name"], VERSION["served"], VERSION["storage"]) == ("v1", True, True)
    assert VERSION["subresources"] == {"status": {}}


def test_printer_columns() -> None:
    columns = [(c["name"], c["jsonPath"]) for c in VERSION["additionalPrinterColumns"]]
    assert columns == [
        ("Job", ".spec.job.id"),
        ("Group", ".spec.taskGroup.name"),
        ("Status", ".status.clientStatus"),
        ("Desired", ".status.desiredStatus"),
        ("Node", ".status.nodeName"),
        ("Age", ".metadata.creationTimestamp"),
    ]
    assert VERSION["additionalPrinterColumns"][-1]["type"] == "date"


def test_printer_columns_point_at_declared_fields() -> None:
    declared = {path for path, _ in walk(SCHEMA)}
    for column in VERSION["additionalPrinterColumns"][:-1]:
        assert column["jsonPath"].lstrip(".") in declared


# --- schema shape ------------------------------------------------------------------------------


def test_schema_is_structural() -> None:
    assert structural_problems(SCHEMA) == []


def test_spec_is_immutable_through_a_transition_rule() -> None:
    rules = SPEC_SCHEMA["x-kubernetes-validations"]
    assert {"rule": "self == oldSelf", "message": rules[0]["message"]} in rules
    assert rules[0]["message"].startswith("spec is immutable")


def test_preserve_unknown_fields_only_where_needed() -> None:
    open_nodes = {p for p, s in walk(SCHEMA) if s.get("x-kubernetes-preserve-unknown-fields")}
    assert open_nodes == {"spec.tasks[].config", "status", "status.taskStates.*"}


def test_every_cel_rule_is_cost_bounded() -> None:
    # The API server estimates CEL cost from these bounds; without them it rejects the CRD.
    for path, node in walk(SPEC_SCHEMA, "spec"):
        if node.get("type") == "string":
            assert "maxLength" in node or "enum" in node, path
        if node.get("type") == "array":
            assert "maxItems" in node, path
        if isinstance(node.get("additionalProperties"), dict):
            assert "maxProperties" in node, path


def test_any_driver_string_is_accepted_by_the_schema() -> None:
    driver = SPEC_SCHEMA["properties"]["tasks"]["items"]["properties"]["driver"]
    assert "enum" not in driver and "pattern" not in driver
    assert "x-kubernetes-validations" not in driver


@pytest.mark.parametrize(
    ("where", "message"),
    [
        ("tasks", "task names must be unique"),
        ("tasks", "at most one task may be the leader"),
        ("tasks[]", "docker tasks need config.image"),
        ("tasks[]", "exec and raw_exec tasks need config.command"),
        ("tasks[].name", "DNS-1123"),
        ("taskGroup.name", "DNS-1123"),
        ("taskGroup.restartPolicy.interval", "Go duration"),
        ("taskGroup", "index must be lower than"),
    ],
)
def test_cel_rules_explain_themselves(where: str, message: str) -> None:
    nodes = dict(walk(SPEC_SCHEMA))
    messages = [r["message"] for r in nodes[where].get("x-kubernetes-validations", ())]
    assert any(message in m for m in messages), messages


def _alias_fields(model: type[BaseModel]) -> dict[str, Any]:
    return {(f.alias or name): f.annotation for name, f in model.model_fields.items()}


def _nested_model(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _nested_model(arg)
        if found is not None:
            return found
    return None


def _model_schema_pairs(
    model: type[BaseModel], schema: dict[str, Any], path: str
) -> typing.Iterator[tuple[str, type[BaseModel], dict[str, Any]]]:
    yield path, model, schema
    for alias, annotation in _alias_fields(model).items():
        nested = _nested_model(annotation)
        sub = schema.get("properties", {}).get(alias)
        if nested is None or sub is None:
            continue
        if sub.get("type") == "array":
            sub = sub["items"]
        yield from _model_schema_pairs(nested, sub, f"{path}.{alias}")


def test_crd_and_models_name_the_same_fields() -> None:
    for path, model, schema in _model_schema_pairs(AllocationSpec, SPEC_SCHEMA, "spec"):
        assert set(_alias_fields(model)) == set(schema.get("properties", {})), path
        if model is not DriverConfig:
            assert not schema.get("x-kubernetes-preserve-unknown-fields"), path


def test_required_fields_match_model_fields_without_defaults() -> None:
    for path, model, schema in _model_schema_pairs(AllocationSpec, SPEC_SCHEMA, "spec"):
        required = {(f.alias or n) for n, f in model.model_fields.items() if f.is_required()}
        assert required == set(schema.get("required", ())), path


# --- examples --------------------------------------------------------------------------------


def test_the_promised_examples_exist() -> None:
    names = {path.name for path in EXAMPLES}
    assert {
        "web.yaml",
        "prestart-leader.yaml",
        "batch.yaml",
        "services-checks.yaml",
        "raw-exec.yaml",
    } <= names


@pytest.mark.parametrize(
    ("name", "doc"), load_examples(), ids=[name for name, _ in load_examples()]
)
def test_example_is_an_allocation_valid_against_the_schema(name: str, doc: dict[str, Any]) -> None:
    assert (doc["apiVersion"], doc["kind"]) == ("allocbridge.io/v1", "Allocation")
    assert doc["metadata"]["name"]
    assert schema_errors(SCHEMA, doc) == []


@pytest.mark.parametrize(
    ("name", "doc"), load_examples(), ids=[name for name, _ in load_examples()]
)
def test_example_parses_and_passes_operator_validation(name: str, doc: dict[str, Any]) -> None:
    spec = parse_spec(doc["spec"])
    assert validate(spec) == []


def test_examples_cover_the_drivers_lifecycles_and_job_types() -> None:
    specs = [parse_spec(doc["spec"]) for _, doc in load_examples()]
    tasks = [t for s in specs for t in s.tasks]
    assert {t.driver for t in tasks} >= {"docker", "raw_exec", "exec"}
    assert any(t.hook == "prestart" and not t.is_sidecar for t in tasks)
    assert any(t.hook == "prestart" and t.is_sidecar for t in tasks)
    assert any(t.leader for t in tasks)
    assert {s.job.type for s in specs} >= {"service", "batch"}
    checks = [c for s in specs for svc in (*s.task_group.services, *(x for t in s.tasks
              for x in t.services)) for c in svc.checks]  # fmt: skip
    assert {c.type for c in checks} >= {"http", "tcp"}


# --- the checker itself rejects what it should -------------------------------------------------

WEB = next(doc for name, doc in load_examples() if name == "web.yaml")


def _broken(path: str, value: Any) -> dict[str, Any]:
    doc = copy.deepcopy(WEB)
    *parents, last = [int(p) if p.isdigit() else p for p in path.split(".")]
    node: Any = doc
    for part in parents:
        node = node[part]
    if value is types.NoneType:
        del node[last]
    else:
        node[last] = value
    return doc


@pytest.mark.parametrize(
    ("path", "value", "error"),
    [
        ("spec.tasks.0.driver", types.NoneType, "spec.tasks[0]: driver is required"),
        ("spec.tasks", [], "items 0 is below 1"),
        ("spec.job.type", "cron", "is not one of"),
        ("spec.job.priority", 0, "below 1"),
        ("spec.tasks.0.resources.memoryMB", "lots", "must be integer"),
        ("spec.tasks.0.colour", "blue", "unknown field"),
        ("spec.taskGroup.networks.0.dynamicPorts.0.to", 70000, "above 65535"),
        ("spec.taskGroup.name", "x" * 64, "above 63"),
        ("spec", types.NoneType, "spec is required"),
    ],
)
def test_schema_checker_rejects_broken_documents(path: str, value: Any, error: str) -> None:
    errors = schema_errors(SCHEMA, _broken(path, value))
    assert any(error in e for e in errors), errors


def test_schema_accepts_unknown_driver_config_keys_and_status() -> None:
    doc = _broken("spec.tasks.0.config.force_pull", True)
    doc["status"] = {"clientStatus": "running", "taskStates": {"server": {"State": "running"}}}
    assert schema_errors(SCHEMA, doc) == []
