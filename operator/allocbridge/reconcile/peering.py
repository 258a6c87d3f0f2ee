"""Whether Kopf's peering has paused this replica (Kopf's peering pause, not Nomad's task pause).

Kopf pauses a replica while a live peer has a higher priority (or the same one): it stops the
replica's watches, so no handler runs, but it tells the handlers nothing, and the reconciler's
own timers (restart delays, held status writes, schedule checks, retries) would still fire and
act on what the replica saw last, beside the replica that leads. Kopf has no API for its pause.
Its peering engine logs every change of it ("Pausing operations in favour of ...", "Pausing
all operators, including self: ...", "Resuming operations after the pause. ..."), so a filter
on that logger reads them.

`tests/unit/test_pausing.py` runs the installed Kopf's own peering code through this filter, so
a Kopf that words its records differently fails there. In the field such a Kopf would only let
timers fire while paused again (as before this module); it could never pause a replica that
Kopf lets lead. A replica that starts paused is not told either (Kopf starts paused and logs
only the resumption), which is harmless: it has seen nothing, so it has no timers.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

#: The logger of Kopf's peering engine (`kopf._core.engines.peering`).
PEERING_LOGGER: Final = "kopf._core.engines.peering"
_PAUSING: Final = ("Pausing operations", "Pausing all operators")
_RESUMING: Final = ("Resuming operations",)


class PeeringPause(logging.Filter):
    """Follows Kopf's pause from its peering log records, then lets through only those at or
    above `shown_from`, the level the configuration shows (the logger itself must let the
    records be made, so it is lowered to INFO while this filter is on it)."""

    def __init__(self, shown_from: int) -> None:
        super().__init__()
        self.paused = False
        self.shown_from = shown_from

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if message.startswith(_PAUSING):
            self.paused = True
        elif message.startswith(_RESUMING):
            self.paused = False
        return record.levelno >= self.shown_from


@contextmanager
def following_peering() -> Iterator[PeeringPause]:
    """A `PeeringPause` on Kopf's peering logger for the duration; the logger as it was after."""
    logger = logging.getLogger(PEERING_LOGGER)
    shown_from = logger.getEffectiveLevel()
    pause = PeeringPause(shown_from)
    level = logger.level
    logger.setLevel(min(shown_from, logging.INFO))
    logger.addFilter(pause)
    try:
        yield pause
    finally:
        logger.removeFilter(pause)
        logger.setLevel(level)
