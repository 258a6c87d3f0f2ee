"""Whether Kopf's peering has paused this replica (Kopf's peering pause, not Nomad's task pause).

Kopf pauses a replica while a live peer has a higher priority (or the same one), but it tells
the operator's code nothing: the reconciler's own watches (`watches`) would keep feeding it and
its timers (restart delays, held status writes, schedule checks, retries) would keep firing,
acting beside the replica that leads. Kopf has no API for its pause. Its peering engine logs
every change of it ("Pausing operations in favour of ...", "Pausing all operators, including
self: ...", "Resuming operations after the pause. ..."), so a filter on that logger reads them
and tells its listeners.

A replica in a peering starts paused: Kopf turns its pause on before it has read the peering
and logs only the resumption, once no peer stands in the way (a peer that does keeps it paused
without a word). A standalone replica is never paused.

`tests/unit/test_peering.py` runs the installed Kopf's own peering code through this filter, so
a Kopf that words its records differently fails there. In the field such a Kopf would leave a
replica in a peering paused for good (nothing reconciles, which the logs show), never let one
reconcile that Kopf pauses. One pause Kopf does not log is not followed: the peering CRD
removed while replicas run (Kopf then pauses them all; they would go on reconciling).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Final

#: The logger of Kopf's peering engine (`kopf._core.engines.peering`).
PEERING_LOGGER: Final = "kopf._core.engines.peering"
_PAUSING: Final = ("Pausing operations", "Pausing all operators")
_RESUMING: Final = ("Resuming operations",)


class PeeringPause(logging.Filter):
    """Follows Kopf's pause from its peering log records, then lets through only those at or
    above `shown_from`, the level the configuration shows (the logger itself must let the
    records be made, so it is lowered to INFO while this filter is on it). Each change of the
    pause calls the `listeners` with the new state, on the thread that logged it (Kopf's)."""

    def __init__(self, shown_from: int, *, paused: bool = False) -> None:
        super().__init__()
        self.paused = paused
        self.shown_from = shown_from
        self.listeners: list[Callable[[bool], None]] = []

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if message.startswith(_PAUSING):
            self._turn(True)
        elif message.startswith(_RESUMING):
            self._turn(False)
        return record.levelno >= self.shown_from

    def _turn(self, paused: bool) -> None:
        if paused == self.paused:
            return
        self.paused = paused
        for listener in list(self.listeners):
            listener(paused)


@contextmanager
def following_peering(*, starts_paused: bool = False) -> Iterator[PeeringPause]:
    """A `PeeringPause` on Kopf's peering logger for the duration; the logger as it was after.
    `starts_paused`: the replica is in a peering, so Kopf starts it paused (see above)."""
    logger = logging.getLogger(PEERING_LOGGER)
    shown_from = logger.getEffectiveLevel()
    pause = PeeringPause(shown_from, paused=starts_paused)
    level = logger.level
    logger.setLevel(min(shown_from, logging.INFO))
    logger.addFilter(pause)
    try:
        yield pause
    finally:
        logger.removeFilter(pause)
        logger.setLevel(level)
