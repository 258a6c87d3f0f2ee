"""One copy of the parts of a wire dict that many allocations have equal.

Allocations of one task group are rendered from equal specs: their `Job.TaskGroups`, resources
and metrics come out equal, yet each render builds dicts of its own, several kilobytes each
(half of what the store held per allocation). Stored wire dicts are read-only (see
`allocation.StoredAllocation`), so equal parts can be one object: `SharedParts.share` swaps each
for the first equal one it has seen, found by its compact JSON.

Bounded: when `limit` distinct parts are known the table starts over (parts already shared stay
shared; only later renders stop finding them), so a store of allocations that are all different
costs a table of at most `limit` keys.
"""

from __future__ import annotations

from typing import Any, Final

from allocbridge.store import encoding

Json = dict[str, Any]

#: Top-level wire fields that are functions of the spec (and the pod's address and ports), and
#: the desired transition, nearly always all null.
SHARED_FIELDS: Final = (
    "DesiredTransition",
    "Metrics",
    "Resources",
    "SharedResources",
    "TaskResources",
    "AllocatedResources",
)


class SharedParts:
    """Canonical instances of equal wire parts, by their compact JSON."""

    def __init__(self, limit: int = 4096) -> None:
        self.limit = limit
        self._known: dict[bytes, Any] = {}

    def __len__(self) -> int:
        return len(self._known)

    def canonical(self, value: Any) -> Any:
        """The first value seen equal to `value` (by its JSON), or `value` itself."""
        if value is None:
            return None
        key = encoding.compact(value)
        found = self._known.get(key)
        if found is not None:
            return found
        if len(self._known) >= self.limit:
            self._known.clear()
        self._known[key] = value
        return value

    def share(self, wire: Json) -> Json:
        """`wire` with its spec-derived parts replaced by shared equal ones; it must not be
        handed out yet (its own `Job` dict is changed in place)."""
        for name in SHARED_FIELDS:
            if name in wire:
                wire[name] = self.canonical(wire[name])
        job = wire.get("Job")
        if isinstance(job, dict) and "TaskGroups" in job:
            job["TaskGroups"] = self.canonical(job["TaskGroups"])
        return wire
