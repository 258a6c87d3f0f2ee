"""Stop: mark the Allocation stopped and create its linked replacement.

The stop records `stopAt`, the end of the allocation's shutdown delay; the reconciler deletes
the pod then. The replacement (`web-0` -> `web-0-r1`) is linked both ways, as Nomad links a
rescheduled allocation.
"""

from __future__ import annotations

import time
import uuid

from allocbridge.actions.records import AllocationRecords, Target
from allocbridge.cluster.errors import ConflictError
from allocbridge.cluster.resources import Json
from allocbridge.model.allocstatus import (
    DESIRED_DESCRIPTION,
    DESIRED_STATUS,
    DESIRED_STOP,
    DESIRED_TRANSITION,
    EVAL_ID,
    FOLLOWUP_EVAL_ID,
    NEXT_ALLOCATION,
    NODE_ID,
    PREVIOUS_ALLOCATION,
    RESCHEDULE_TRACKER,
    STOP_AT,
    DesiredTransition,
    RescheduleEvent,
    RescheduleTracker,
)
from allocbridge.model.errors import NomadError
from allocbridge.model.spec import AllocationSpec
from allocbridge.model.status import NS


class Stopping(AllocationRecords):
    """The stop action."""

    async def stop(self, target: Target, *, no_shutdown_delay: bool) -> tuple[str, int]:
        """Stop and reschedule; returns (EvalID, index of the write)."""
        obj, spec = await self.load(target)
        status = obj.get("status") or {}
        if status.get(DESIRED_STATUS) == DESIRED_STOP:
            raise NomadError(409, f'allocation "{target.alloc_id}" is already stopped')
        eval_id = str(uuid.uuid4())
        now = time.time_ns()
        replacement = await self._replace(obj, now, eval_id)
        new_id = replacement["metadata"]["uid"]
        delay = 0.0 if no_shutdown_delay else _shutdown_delay(spec)

        def stop(status: Json, _obj: Json) -> None:
            if status.get(DESIRED_STATUS) == DESIRED_STOP:
                raise NomadError(409, f'allocation "{target.alloc_id}" is already stopped')
            status[DESIRED_STATUS] = DESIRED_STOP
            status[DESIRED_DESCRIPTION] = "alloc was stopped by user request and rescheduled"
            status[DESIRED_TRANSITION] = DesiredTransition(
                migrate=True, noShutdownDelay=no_shutdown_delay
            )
            status[NEXT_ALLOCATION] = new_id
            status[FOLLOWUP_EVAL_ID] = eval_id
            status[STOP_AT] = now + int(delay * NS)

        written = await self.update(target, stop)
        return eval_id, int(written["metadata"]["resourceVersion"])

    async def _replace(self, obj: Json, now: int, eval_id: str) -> Json:
        """Create the replacement, placed by the stop's evaluation `eval_id`."""
        meta = obj["metadata"]
        status = obj.get("status") or {}
        body = {
            "apiVersion": obj["apiVersion"],
            "kind": obj["kind"],
            "metadata": {
                "name": replacement_name(meta["name"]),
                "namespace": meta["namespace"],
                "labels": meta.get("labels") or {},
            },
            "spec": obj["spec"],
        }
        try:
            created = await self.kube.create_allocation(meta["namespace"], body)
        except ConflictError as exc:
            raise NomadError(409, "a replacement allocation exists already") from exc
        tracker = status.get(RESCHEDULE_TRACKER) or {}
        event = RescheduleEvent(
            prevAllocID=meta["uid"], prevNodeID=status.get(NODE_ID, ""), rescheduleTime=now, delay=0
        )
        link = {
            EVAL_ID: eval_id,
            PREVIOUS_ALLOCATION: meta["uid"],
            RESCHEDULE_TRACKER: RescheduleTracker(
                events=[*tracker.get("events", []), event], lastReschedule="ok"
            ),
        }
        new = Target(meta["namespace"], created["metadata"]["name"], created["metadata"]["uid"])
        await self.update(new, lambda s, _o: s.update(link))
        return created


def replacement_name(name: str) -> str:
    """`web-0` -> `web-0-r1` -> `web-0-r2`: the replacement of a stopped allocation."""
    base, sep, generation = name.rpartition("-r")
    if sep and base and generation.isdigit():
        return f"{base}-r{int(generation) + 1}"
    return f"{name}-r1"


def _shutdown_delay(spec: AllocationSpec) -> float:
    delays = [spec.task_group.shutdown_delay_seconds] + [
        t.shutdown_delay_seconds for t in spec.tasks
    ]
    return max(delays)
