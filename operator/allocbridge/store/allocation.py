"""One allocation as the store keeps it: the wire dict plus forms pre-rendered for the API.

A list of 10,000 stubs must answer in milliseconds, so what a list response needs is computed
once, at upsert time, instead of once per request: the stub's compact JSON in two parts, the
head (every field before TaskStates, which sorts last) and the tail (`,"TaskStates":...}`). A
list with TaskStates sends both, one without sends the head and a constant tail, so the head
(most of the stub) is kept once instead of in two whole renderings. `stub_array` lays out a
whole list as such fragments. The heads with AllocatedResources (`resources=true`) are rendered
on first use and cached. The full read body (about 6 KB) is kept for the 1,024 allocations read
last (`RECENT_BODIES`): cached on each, it would grow the store by its size for every allocation
ever read; rendered on every read, it was a tenth of a read's CPU. The stub dict is built on
demand.

Instances are immutable and share their nested dicts with the wire dict: whoever builds one
hands the dicts over and must not mutate them afterwards.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from operator import attrgetter
from typing import Any, Final

from allocbridge.store import encoding
from allocbridge.store.stubs import Json, filter_datum, stub_from_wire

#: A canonical, lower-case UUID: what Kubernetes puts in `metadata.uid`.
UUID_PATTERN: Final = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")

_ALLOCATED_RESOURCES_KEY: Final = b'{"AllocatedResources":'
_TASK_STATES_KEY: Final = b',"TaskStates":'
#: The stub's tail when TaskStates are null or left out (`task_states=false`).
_NULL_TAIL: Final = b',"TaskStates":null}'
_NULL_TAIL_COMMA: Final = _NULL_TAIL + b","


@dataclass(frozen=True, eq=False, slots=True)
class StoredAllocation:
    """An allocation as `GET /v1/allocation/:id` shows it, with its services and checks.

    `wire` is the full Nomad `Allocation` dict (PascalCase, TaskStates and Job included);
    `services` are the service registrations and `checks` maps a check ID to its result, both
    in the spec's shapes. The index fields must agree with `wire` where `wire` carries them.
    """

    id: str
    namespace: str
    create_index: int
    modify_index: int
    alloc_modify_index: int
    wire: dict[str, Any]
    services: Sequence[Mapping[str, Any]] = ()
    checks: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    object_name: str = ""
    """The Allocation object's Kubernetes name (the wire has only Nomad's `Name`)."""

    filter_datum: Mapping[str, Any] = field(init=False, repr=False)
    """What `filter` expressions are evaluated against (see `stubs.filter_datum`)."""
    _stub_head: bytes = field(init=False, repr=False)  # `{"ClientDescription":...` up to TaskStates
    _stub_tail: bytes = field(init=False, repr=False)  # `,"TaskStates":...}`
    _resources_head: bytes | None = field(init=False, repr=False, default=None)

    def __post_init__(self) -> None:
        if not UUID_PATTERN.fullmatch(self.id):
            raise ValueError(f"allocation ID {self.id!r} is not a lower-case UUID")
        for key, value in (
            ("ID", self.id),
            ("Namespace", self.namespace),
            ("CreateIndex", self.create_index),
            ("ModifyIndex", self.modify_index),
            ("AllocModifyIndex", self.alloc_modify_index),
        ):
            if self.wire.get(key, value) != value:
                raise ValueError(
                    f"allocation {self.id}: wire {key} {self.wire[key]!r} disagrees with {value!r}"
                )
        stub = self.stub
        # Keys are sorted and "TaskStates" sorts last among the stub's, so both TaskStates
        # variants share one rendering of everything else (the bulk is encoded and kept once).
        head = encoding.compact({k: v for k, v in stub.items() if k != "TaskStates"})[:-1]
        task_states = encoding.compact(stub["TaskStates"])
        tail = _NULL_TAIL if task_states == b"null" else _TASK_STATES_KEY + task_states + b"}"
        set_ = object.__setattr__
        set_(self, "filter_datum", filter_datum(self.wire))
        set_(self, "_stub_head", head)
        set_(self, "_stub_tail", tail)

    @classmethod
    def from_wire(
        cls,
        wire: dict[str, Any],
        *,
        services: Sequence[Mapping[str, Any]] = (),
        checks: Mapping[str, Mapping[str, Any]] | None = None,
        object_name: str = "",
    ) -> StoredAllocation:
        """Build one from a wire dict that carries its own ID, Namespace and indexes."""
        return cls(
            id=wire["ID"],
            namespace=wire.get("Namespace", ""),
            create_index=wire.get("CreateIndex", 0),
            modify_index=wire.get("ModifyIndex", 0),
            alloc_modify_index=wire.get("AllocModifyIndex", 0),
            wire=wire,
            services=services,
            checks={} if checks is None else checks,
            object_name=object_name,
        )

    @property
    def stub(self) -> Json:
        """The list stub with TaskStates and without AllocatedResources (a new dict sharing
        its nested values with `wire`)."""
        return stub_from_wire(
            self.wire,
            alloc_id=self.id,
            namespace=self.namespace,
            create_index=self.create_index,
            modify_index=self.modify_index,
        )

    def stub_json(self, *, task_states: bool = True, resources: bool = False) -> bytes:
        """The compact JSON stub as `GET /v1/allocations` shows it for these field options."""
        head = self._with_resources if resources else self._stub_head
        return head + (self._stub_tail if task_states else _NULL_TAIL)

    @property
    def stub_sizes(self) -> tuple[int, int]:
        """The lengths of `stub_json()` with and without TaskStates (without resources)."""
        head = len(self._stub_head)
        return head + len(self._stub_tail), head + len(_NULL_TAIL)

    def stub_dict(self, *, task_states: bool = True, resources: bool = False) -> Json:
        """The stub as a dict (for `?pretty`)."""
        stub = self.stub
        if not task_states:
            stub["TaskStates"] = None
        if resources and self.wire.get("AllocatedResources") is not None:
            stub["AllocatedResources"] = self.wire["AllocatedResources"]
        return stub

    @property
    def _with_resources(self) -> bytes:
        """The head with AllocatedResources spliced in front (its key sorts first), rendered
        on the first `resources=true` request: most lists never ask for them."""
        if self._resources_head is not None:
            return self._resources_head
        head = self._stub_head
        resources = self.wire.get("AllocatedResources")
        if resources is not None:  # omitempty in Nomad's stub
            head = _ALLOCATED_RESOURCES_KEY + encoding.compact(resources) + b"," + head[1:]
        object.__setattr__(self, "_resources_head", head)
        return head

    @property
    def wire_json(self) -> bytes:
        """The compact JSON of the full allocation (kept for the allocations read last)."""
        return _read_body(self)


#: Read bodies kept: about 6 MB for bodies of 6 KB.
RECENT_BODIES: Final = 1024


@lru_cache(maxsize=RECENT_BODIES)
def _read_body(alloc: StoredAllocation) -> bytes:
    """`wire_json`, cached by the instance (a changed allocation is a new instance)."""
    return memoryview(encoding.compact(alloc.wire)).tobytes()  # orjson's buffer has room to spare


_HEAD: Final = attrgetter("_stub_head")
_TAIL: Final = attrgetter("_stub_tail")
_WITH_RESOURCES: Final = attrgetter("_with_resources")


def stub_array(
    allocs: Iterable[StoredAllocation],
    *,
    task_states: bool = True,
    resources: bool = False,
    stubs_size: int | None = None,
) -> encoding.Fragments:
    """The JSON array of the allocations' stubs, as fragments of their kept heads and tails.

    Laid out without rendering or joining anything per allocation, and fetched in C: a list of
    50,000 otherwise spends its time in method calls and copies. Without TaskStates the heads
    are joined by the constant tail (`[h1` `,"TaskStates":null},` `h2` ... `hn,"TaskStates":
    null}]`); with them, heads and tails alternate with commas between stubs.

    `stubs_size`, when the caller knows it (`AllocationStore.stubs_size` of a whole list), is
    the sum of the stubs' lengths: measuring them is a pass over every head and tail before the
    response reads them again, and at 50,000 they no longer stay in the CPU's caches from one
    pass to the next (a fifth of the list's time there, a tenth at 10,000).
    """
    items = allocs if isinstance(allocs, list) else list(allocs)
    heads = list(map(_WITH_RESOURCES if resources else _HEAD, items))
    count = len(heads)
    if not count:
        return encoding.Fragments([b"[]"])
    separators = 1 + count  # the brackets and the commas between stubs
    if not task_states:
        # Measured now, while the heads just fetched are in the CPU's caches.
        length = separators + (
            sum(map(len, heads)) + count * len(_NULL_TAIL) if stubs_size is None else stubs_size
        )
        heads[0] = b"[" + heads[0]
        heads[-1] += _NULL_TAIL + b"]"
        return encoding.Fragments(heads, _NULL_TAIL_COMMA, length)
    tails = list(map(_TAIL, items))
    if stubs_size is None:
        stubs_size = sum(map(len, heads)) + sum(map(len, tails))
    fragments = [b","] * (3 * count + 1)
    fragments[0] = b"["
    fragments[1::3] = heads
    fragments[2::3] = tails
    fragments[-1] = b"]"
    return encoding.Fragments(fragments, length=separators + stubs_size)
