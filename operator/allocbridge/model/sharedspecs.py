"""Parsed Allocation specs shared by content, for the store feed and the reconciler alike.

The allocations of one task group have equal specs, and an allocation's spec never changes
while its status is written again and again, so both consumers would parse the same spec many
times: a start of hundreds of allocations, or a replica's start over 50,000 of them. Parsing
and validating one is about 75 us; the key, the spec's compact JSON, costs well under a
microsecond. A parse depends on nothing but the spec, and `AllocationSpec` is frozen, so one
parse serves every allocation with that spec. Bounded, least recently used first out: keeping
all 10,000 specs of a large store added 66 MB.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

import orjson

from allocbridge.model.spec import AllocationSpec
from allocbridge.model.validation import parse_and_validate

Parsed = tuple[AllocationSpec | None, tuple[str, ...]]


class SharedSpecs:
    """The specs parsed last (the spec, or None, and the problems found), by content."""

    def __init__(self, limit: int = 512) -> None:
        self.limit = limit
        self._parsed: OrderedDict[bytes, Parsed] = OrderedDict()

    def parse(self, raw: Mapping[str, Any]) -> Parsed:
        """`raw` parsed and validated, as `parse_and_validate` does, with problems as text."""
        try:
            key = orjson.dumps(raw, option=orjson.OPT_SORT_KEYS)
        except TypeError:  # not JSON orjson encodes (an integer beyond 64 bits): not kept
            return _parse(raw)
        parsed = self._parsed.get(key)
        if parsed is not None:
            self._parsed.move_to_end(key)
            return parsed
        parsed = self._parsed[key] = _parse(raw)
        if len(self._parsed) > self.limit:
            self._parsed.popitem(last=False)
        return parsed

    def usable(self, raw: Mapping[str, Any]) -> AllocationSpec | None:
        """The parsed spec when it is valid, else None (what the API's rendering needs)."""
        spec, problems = self.parse(raw)
        return spec if not problems else None


def _parse(raw: Mapping[str, Any]) -> Parsed:
    spec, found = parse_and_validate(raw)
    return spec, tuple(str(p) for p in found)
