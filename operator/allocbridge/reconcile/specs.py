"""Parsed Allocation specs shared by content: the allocations of one task group have equal
specs, so a start of hundreds of them parses each distinct spec once, not once per allocation.

Parsing and validating a spec is about 75 us, 2% of the operator's CPU per start; the key,
the spec's compact JSON, costs well under a microsecond. A parse depends on nothing but the
spec, and `AllocationSpec` is frozen, so one parse can serve every allocation with that spec.
Bounded, least recently used first out, as the store feed's `RecentSpecs`.
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
            key = orjson.dumps(raw)
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


def _parse(raw: Mapping[str, Any]) -> Parsed:
    spec, found = parse_and_validate(raw)
    return spec, tuple(str(p) for p in found)
