"""The reconciler's status writes: coalesced, echo-aware, and flushed at a clean stop.

A change that only adds information (the node, task events, the bookkeeping of what was seen,
the first write of a pending allocation) waits up to `coalesce` seconds for the next change
that matters (a task or client status, a stop, a restart), and goes out with it in one PATCH:
a pod that starts within that time costs a single status write. The first write of an
allocation whose start shows no trouble (no Warning Event, no waiting reason) waits longer, up
to `start_hold` seconds, for the start itself: when hundreds start at once and the API server
is the bottleneck, a start takes longer than `coalesce`, and a pending write that the running
one replaces moments later would double the writes. Trouble cuts the wait back to `coalesce`,
so a failing pull or an unschedulable pod still shows within seconds.

Later passes derive from the held-back status (`base`), so nothing a pass added is lost,
unless someone else writes the status meanwhile (then the pass starts again from what is
written). A clean stop writes what is still held (`flush`); the price left: an operator that
dies within those seconds has not written what it held, so a pod deleted while no operator runs
is replaced without a restart being counted.

Every write's response goes back into `Observed`, so a pass never works from something older
than its own last write, and the watch event of that version (its echo) needs no pass.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from allocbridge.cluster.resources import Json, Kube
from allocbridge.model.allocstatus import (
    CLIENT_DESCRIPTION,
    CLIENT_STATUS,
    CREATE_INDEX,
    CREATE_TIME,
    DESIRED_RUN,
    DESIRED_STATUS,
    EVENTS,
    MODIFY_TIME,
    NODE_ID,
    NODE_NAME,
    OBSERVED,
    PENDING,
    POD_CREATED,
    POD_NAME,
    SEEN_EVENTS,
    SEEN_EVENTS_UNTIL,
    STATE,
    TASK_PENDING,
    TASK_STATES,
    WAITING,
)
from allocbridge.model.status import KubeEvent, merge_patch
from allocbridge.reconcile.observed import Observed
from allocbridge.reconcile.queue import Key

log = logging.getLogger(__name__)

#: Seconds an informational status change may wait to be written with the next one: long
#: enough to cover a pod's way from created to running on a busy API server (when the node,
#: the Scheduled event and the start would otherwise be three writes), short enough that an
#: image pull error still shows within seconds.
DEFAULT_COALESCE = 5.0

#: Seconds the first write of a routinely starting allocation may wait for the start (see the
#: module docstring): above the slowest start of a burst of 500 on a 2-core machine (about
#: 15 s), and bounded, so a long but routine image pull shows its events within half a minute.
DEFAULT_START_HOLD = 30.0

#: Seconds a clean stop may spend writing the held-back statuses (all at once, concurrently).
FLUSH_TIMEOUT = 5.0

#: Status keys (top level) whose changes alone need no immediate write; in `taskStates`, a
#: task whose only change is new events needs none either.
_INFORMATIONAL = frozenset(
    {NODE_NAME, NODE_ID, SEEN_EVENTS, SEEN_EVENTS_UNTIL, OBSERVED, MODIFY_TIME}
)

#: What the first write of a pending allocation may hold besides: its bookkeeping and the
#: initial pending status, which is what the API shows for an allocation without a status.
_FIRST = _INFORMATIONAL | {
    CREATE_INDEX,
    CREATE_TIME,
    DESIRED_STATUS,
    POD_CREATED,
    POD_NAME,
    CLIENT_STATUS,
    CLIENT_DESCRIPTION,
    TASK_STATES,
}


def urgent(patch: Mapping[str, Any], previous: Mapping[str, Any]) -> bool:
    """Whether a status merge patch changes something a client waits for, not just adds detail.

    The first write of an allocation that is still pending, when nothing else has written its
    status, is not urgent either: until it lands the API already shows it pending, and the
    CreateIndex it records is the object's version, which the API shows meanwhile.
    """
    if not previous and CREATE_INDEX in patch:
        return not (
            set(patch) <= _FIRST
            and patch.get(CLIENT_STATUS, PENDING) == PENDING
            and patch.get(DESIRED_STATUS, DESIRED_RUN) == DESIRED_RUN
            and all(
                isinstance(task, Mapping) and task.get(STATE, TASK_PENDING) == TASK_PENDING
                for task in (patch.get(TASK_STATES) or {}).values()
            )
        )
    for key, value in patch.items():
        if key == TASK_STATES and isinstance(value, Mapping):
            for task in value.values():
                if not isinstance(task, Mapping) or set(task) - {EVENTS}:
                    return True
        elif key not in _INFORMATIONAL:
            return True
    return False


def routine_start(
    written: Mapping[str, Any], status: Mapping[str, Any], events: Sequence[KubeEvent]
) -> bool:
    """Whether `status` is the first write of an allocation that is starting without trouble:
    nothing written yet, still pending, no Warning Event about its pod and no task waiting for
    a reason (a pull error, a crash back-off)."""
    if written or status.get(CLIENT_STATUS, PENDING) != PENDING:
        return False
    if any(event.type != "Normal" for event in events):
        return False
    seen = (status.get(OBSERVED) or {}).values()
    return not any(isinstance(task, Mapping) and task.get(WAITING) for task in seen)


class StatusWrites:
    """The status writes of one reconciler, and what it holds back."""

    def __init__(
        self,
        kube: Kube,
        observed: Observed,
        schedule: Callable[[Key, float], None],
        *,
        coalesce: float = DEFAULT_COALESCE,
        start_hold: float = DEFAULT_START_HOLD,
    ) -> None:
        self.kube = kube
        self.observed = observed
        self.schedule = schedule  # a pass after a delay: when a held write falls due
        self.coalesce = coalesce
        self.start_hold = start_hold
        # The resourceVersion each allocation's last status write produced: the watch event
        # of that version only echoes what this reconciler wrote, so it needs no pass.
        self.written: dict[Key, str] = {}
        # Held-back status writes: (loop time it was first held back, the resourceVersion it
        # was derived from, the status). The next pass derives from it, not from the written
        # status, so what one pass added (events of a transition) is never derived away.
        self.held: dict[Key, tuple[float, str, Json]] = {}

    def echoes(self, key: Key, version: str | None) -> bool:
        """Whether the allocation at `version` is just what this reconciler last wrote."""
        return version is not None and self.written.get(key) == version

    def forget(self, key: Key) -> None:
        self.written.pop(key, None)
        self.held.pop(key, None)

    def base(self, key: Key, meta: Json, written: Json) -> Json:
        """The status a pass derives from: the held-back one if it was derived from the
        object as it is now, else (someone else wrote meanwhile) what is written."""
        held = self.held.get(key)
        if held is not None and held[1] == meta["resourceVersion"]:
            return held[2]
        self.held.pop(key, None)
        return written

    def patience(self, written: Json, status: Json, events: Sequence[KubeEvent]) -> float:
        """Seconds an informational change of this pass may be held back."""
        return self.start_hold if routine_start(written, status, events) else self.coalesce

    async def write(
        self, alloc: Json, written: Json, status: Json, patience: float | None = None
    ) -> None:
        """PATCH the status change, or hold back an informational one for up to `patience`
        seconds since it was first held (default `coalesce`; see the module docstring)."""
        meta = alloc["metadata"]
        key = (meta["namespace"], meta["name"])
        patch = merge_patch(written, status)
        if not patch:
            self.held.pop(key, None)
            return
        patience = self.coalesce if patience is None else patience
        if patience > 0 and not urgent(patch, written):
            now = asyncio.get_running_loop().time()
            held = self.held.get(key)
            since = held[0] if held is not None else now
            if since + patience > now:
                self.held[key] = (since, meta["resourceVersion"], status)
                log.debug("status write held back", extra={"allocation": "/".join(key)})
                self.schedule(key, since + patience - now)
                return
        self.held.pop(key, None)
        patch[MODIFY_TIME] = time.time_ns()
        written = await self.kube.patch_allocation_status(
            meta["namespace"], meta["name"], patch, meta["resourceVersion"]
        )
        self.observed.put_allocation(written)
        version = (written.get("metadata") or {}).get("resourceVersion")
        if version:
            self.written[key] = str(version)

    async def flush(self, timeout: float) -> None:  # noqa: ASYNC109
        """Write every held-back status still derived from the allocation as observed now, as
        its timer would have: a clean stop loses nothing a pass saw. A status written by
        someone else meanwhile wins (the write's precondition, a 409), as in a pass."""
        writes = []
        for key, (_, version, status) in list(self.held.items()):
            alloc = self.observed.allocation(key)
            if alloc is not None and alloc["metadata"].get("resourceVersion") == version:
                writes.append(self.write(alloc, alloc.get("status") or {}, status, patience=0))
        self.held.clear()
        if not writes:
            return
        try:
            async with asyncio.timeout(timeout):
                results = await asyncio.gather(*writes, return_exceptions=True)
        except TimeoutError:
            log.warning("held status writes not all flushed in time", extra={"timeout": timeout})
            return
        failed = [r for r in results if isinstance(r, BaseException)]
        log.info(
            "held status writes flushed",
            extra={"written": len(results) - len(failed), "failed": len(failed)},
        )
