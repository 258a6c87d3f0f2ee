"""Datum shape: what a JSON dict cannot say about the Go value it stands for.

go-bexpr walks Go values; we walk JSON-like dicts, which do not say what a real Nomad's
reflection sees. A `DatumShape` fills the gaps with dotted path patterns (`*` is any one map
key or list index, a final `**` covers a subtree):

- `maps`: dicts that are Go maps. Every other dict is a struct: an unknown key there is the
  error `couldn't find key: struct field with name "X"`, while a missing *last* key under a map
  gives the operator's "not present" answer (`==` false, `!=` true, ...). A missing key earlier
  in the path is an error in both, as in go-bexpr (`TaskStates.nope.State` fails).
- `slices`: a `null` there is a nil slice (empty); other nulls are nil pointers.
- `pointers`: primitives behind a Go pointer (`*bool`), which `is nil` may ask about.
- `unsigned`: `uint64` fields, whose literals go through `ParseUint`.

`NOMAD_ALLOCATION_SHAPE` describes Nomad's `structs.Allocation`; it is the default.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Final

MAP: Final = 1
SLICE: Final = 2
POINTER: Final = 4
UNSIGNED: Final = 8


@dataclass(frozen=True)
class DatumShape:
    """Path patterns naming the Go maps, nilable slices, pointers and unsigned ints of a datum."""

    maps: frozenset[str] = field(default_factory=frozenset)
    slices: frozenset[str] = field(default_factory=frozenset)
    pointers: frozenset[str] = field(default_factory=frozenset)
    unsigned: frozenset[str] = field(default_factory=frozenset)


_TG: Final = "Job.TaskGroups.*"
_TASK: Final = "Job.TaskGroups.*.Tasks.*"
_SERVICE_MAPS: Final = ("Meta", "CanaryMeta", "TaggedAddresses")
_SERVICE_SLICES: Final = ("Tags", "CanaryTags", "Checks")

NOMAD_ALLOCATION_SHAPE: Final = DatumShape(
    maps=frozenset(
        {
            "TaskStates",
            "TaskStates.*.Events.*.Details",
            "TaskResources",
            "SignedIdentities",
            "AllocatedResources.Tasks",
            "AllocatedResources.TaskLifecycles",
            "Metrics.NodesAvailable",
            "Metrics.ClassFiltered",
            "Metrics.ConstraintFiltered",
            "Metrics.ClassExhausted",
            "Metrics.DimensionExhausted",
            "Metrics.ResourcesExhausted",
            "Metrics.Scores",
            "Job.Meta",
            f"{_TG}.Meta",
            f"{_TG}.Volumes",
            f"{_TASK}.Env",
            f"{_TASK}.Meta",
            f"{_TASK}.Config.**",
            *(f"{_TG}.Services.*.{name}" for name in _SERVICE_MAPS),
            *(f"{_TASK}.Services.*.{name}" for name in _SERVICE_MAPS),
        }
    ),
    slices=frozenset(
        {
            "PreemptedAllocations",
            "AllocStates",
            "TaskStates.*.Events",
            "RescheduleTracker.Events",
            "Metrics.QuotaExhausted",
            "Metrics.ScoreMetaData",
            "AllocatedResources.Shared.Networks",
            "AllocatedResources.Shared.Ports",
            "AllocatedResources.Tasks.*.Networks",
            "AllocatedResources.Tasks.*.Devices",
            "Job.Datacenters",
            "Job.Constraints",
            "Job.Affinities",
            "Job.Spreads",
            "Job.TaskGroups",
            f"{_TG}.Tasks",
            f"{_TG}.Constraints",
            f"{_TG}.Affinities",
            f"{_TG}.Spreads",
            f"{_TG}.Networks",
            f"{_TG}.Services",
            f"{_TASK}.Services",
            f"{_TASK}.Constraints",
            f"{_TASK}.Affinities",
            f"{_TASK}.Templates",
            f"{_TASK}.Artifacts",
            f"{_TASK}.VolumeMounts",
            *(f"{_TG}.Services.*.{name}" for name in _SERVICE_SLICES),
            *(f"{_TASK}.Services.*.{name}" for name in _SERVICE_SLICES),
        }
    ),
    pointers=frozenset(
        {
            "DeploymentStatus.Healthy",
            "DesiredTransition.Migrate",
            "DesiredTransition.MigrateDisablePlacement",
            "DesiredTransition.Reschedule",
            "DesiredTransition.ForceReschedule",
            "DesiredTransition.NoShutdownDelay",
            f"{_TG}.StopAfterClientDisconnect",
            f"{_TG}.MaxClientDisconnect",
        }
    ),
    unsigned=frozenset(
        {
            "CreateIndex",
            "ModifyIndex",
            "AllocModifyIndex",
            "DeploymentStatus.ModifyIndex",
            "TaskStates.*.Restarts",
            "Job.Version",
            "Job.CreateIndex",
            "Job.ModifyIndex",
            "Job.JobModifyIndex",
        }
    ),
)


class _ShapeNode:
    __slots__ = ("children", "deep", "flags", "star")

    def __init__(self) -> None:
        self.children: dict[str, _ShapeNode] = {}
        self.star: _ShapeNode | None = None
        self.flags = 0
        self.deep = 0


class ShapeIndex:
    """A trie of the shape's patterns; `hints(path)` gives the flags of every prefix."""

    def __init__(self, shape: DatumShape) -> None:
        self.root = _ShapeNode()
        for patterns, flag in (
            (shape.maps, MAP),
            (shape.slices, SLICE),
            (shape.pointers, POINTER),
            (shape.unsigned, UNSIGNED),
        ):
            for pattern in patterns:
                self._add(pattern, flag)

    def _add(self, pattern: str, flag: int) -> None:
        node = self.root
        segments = pattern.split(".") if pattern else []
        for index, segment in enumerate(segments):
            if segment == "**":
                if index != len(segments) - 1:
                    raise ValueError(f"'**' must end a shape pattern: {pattern!r}")
                node.deep |= flag
                return
            if segment == "*":
                if node.star is None:
                    node.star = _ShapeNode()
                node = node.star
            else:
                node = node.children.setdefault(segment, _ShapeNode())
        node.flags |= flag

    def hints(self, path: tuple[str, ...]) -> tuple[int, ...]:
        """Flags for the value at each prefix of `path`, the root first (len(path) + 1 items)."""
        active = [self.root]
        deep = self.root.deep
        out = [self.root.flags | deep]
        for segment in path:
            following: list[_ShapeNode] = []
            for node in active:
                child = node.children.get(segment)
                if child is not None:
                    following.append(child)
                if node.star is not None:
                    following.append(node.star)
            active = following
            flags = 0
            for node in active:
                deep |= node.deep
                flags |= node.flags
            out.append(flags | deep)
        return tuple(out)


@lru_cache(maxsize=32)
def shape_index(shape: DatumShape) -> ShapeIndex:
    return ShapeIndex(shape)
