"""The Allocation an action works on: reading it, and writing its status safely.

Every action writes its events into the Allocation's status by read-modify-write with the
resourceVersion as precondition, retried on a conflict, so API replicas and the reconciler
never overwrite each other.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from allocbridge.actions.errors import TASK_NOT_RUNNING
from allocbridge.cluster.errors import ConflictError
from allocbridge.cluster.resources import Json, Kube
from allocbridge.model.allocstatus import (
    STATE,
    TASK_RUNNING,
    TASK_STATES,
    TaskEvent,
    add_events,
)
from allocbridge.model.errors import NomadError
from allocbridge.model.spec import AllocationSpec, parse_spec
from allocbridge.model.status import merge_patch

#: Times a status write is tried again after a conflict before the action gives up.
WRITE_RETRIES = 8


@dataclass(frozen=True)
class Target:
    """The Allocation object an action works on."""

    namespace: str
    name: str
    alloc_id: str


Mutation = Callable[[Json, Json], None]  # (status, whole object) -> None, edits status in place


@dataclass
class AllocationRecords:
    """Reads an Allocation and writes its status, through one Kubernetes client."""

    kube: Kube

    async def load(self, target: Target) -> tuple[Json, AllocationSpec]:
        obj = await self.kube.get_allocation(target.namespace, target.name)
        if obj is None or obj["metadata"]["uid"] != target.alloc_id:
            raise NomadError(404, f'Unknown allocation "{target.alloc_id}"')
        try:
            return obj, parse_spec(obj.get("spec") or {})
        except ValueError as exc:
            raise NomadError(409, f"allocation has an invalid spec: {exc}") from exc

    async def update(self, target: Target, mutate: Mutation) -> Json:
        """Read-modify-write of the status with the resourceVersion as precondition."""
        for _ in range(WRITE_RETRIES):
            obj, _spec = await self.load(target)
            status: Json = _deep_copy(obj.get("status") or {})
            mutate(status, obj)
            try:
                return await self.kube.patch_allocation_status(
                    target.namespace,
                    target.name,
                    merge_patch(obj.get("status") or {}, status),
                    obj["metadata"]["resourceVersion"],
                )
            except ConflictError:
                continue  # changed since it was read: read it again
        raise NomadError(500, "the allocation kept changing; try again")

    async def record(self, target: Target, events: Mapping[str, list[TaskEvent]]) -> Json:
        return await self.update(target, lambda status, _obj: add_events(status, events))

    def running_tasks(self, obj: Json, spec: AllocationSpec, task: str | None) -> list[str]:
        """`task` if it runs (404 if unknown, 409 if not running), else every running task."""
        states = (obj.get("status") or {}).get(TASK_STATES) or {}
        if task:
            if spec.task(task) is None:
                raise NomadError(404, "Task not found")
            if (states.get(task) or {}).get(STATE) != TASK_RUNNING:
                raise NomadError(409, TASK_NOT_RUNNING)
            return [task]
        return [t.name for t in spec.tasks if (states.get(t.name) or {}).get(STATE) == TASK_RUNNING]


def _deep_copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _deep_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_deep_copy(v) for v in value]
    return value
