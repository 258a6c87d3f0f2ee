"""`model.sharedspecs.SharedSpecs`: one parse per distinct spec, the same answer as a parse."""

from __future__ import annotations

from typing import Any

from allocbridge.model.sharedspecs import SharedSpecs
from allocbridge.model.validation import parse_and_validate


def spec(job: str = "web", image: str = "nginx:1.27") -> dict[str, Any]:
    return {
        "job": {"id": job},
        "taskGroup": {"name": "web"},
        "tasks": [{"name": "server", "driver": "docker", "config": {"image": image}}],
    }


def test_equal_specs_share_one_parse() -> None:
    specs = SharedSpecs()
    first, problems = specs.parse(spec())
    again, _ = specs.parse(spec())  # an equal spec, another dict (another allocation's)
    assert first is not None and problems == ()
    assert again is first
    other, _ = specs.parse(spec(job="shop"))
    assert other is not first and other is not None and other.job.id == "shop"


def test_answers_as_parse_and_validate_does() -> None:
    specs = SharedSpecs()
    raw = spec()
    raw["tasks"].append({"name": "server", "driver": "docker", "config": {"image": "x"}})
    parsed, problems = specs.parse(raw)
    expected, found = parse_and_validate(raw)
    assert (parsed, problems) == (expected, tuple(str(p) for p in found))
    assert problems  # two tasks of one name: a problem, kept with the spec
    assert specs.parse(raw)[1] == problems
    unparsable, problems = specs.parse({"tasks": "no"})
    assert unparsable is None and problems


def test_bounded_least_recently_used_first_out() -> None:
    specs = SharedSpecs(limit=2)
    a, _ = specs.parse(spec(job="a"))
    specs.parse(spec(job="b"))
    assert specs.parse(spec(job="a"))[0] is a  # a used again: b is the oldest now
    specs.parse(spec(job="c"))
    assert specs.parse(spec(job="a"))[0] is a
    b_again, _ = specs.parse(spec(job="b"))  # dropped: parsed anew
    assert b_again is not None and b_again.job.id == "b"
    assert len(specs._parsed) == 2


def test_a_spec_orjson_cannot_encode_is_parsed_each_time() -> None:
    specs = SharedSpecs()
    raw = spec()
    raw["tasks"][0]["config"]["huge"] = 2**70  # beyond 64 bits
    first, _ = specs.parse(raw)
    second, _ = specs.parse(raw)
    assert first is not None and second is not None and first is not second
    assert first == second
    assert not specs._parsed
