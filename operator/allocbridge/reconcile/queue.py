"""Passes over allocations, one allocation at a time: coalesced, never overlapping, timed.

An allocation asked for while its pass runs gets one more pass after it, however often it was
asked for (a burst of watch events costs one pass), and passes of one allocation never overlap.
A pass asked for later waits on a timer (restart delays, held status writes, schedule checks,
retries); a timer that fires while Kopf's peering has paused the replica makes no pass, as
its watches stand still and what it holds is stale (see `peering`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)

Key = tuple[str, str]  # (namespace, allocation name)


class WorkQueue:
    """Per-allocation workers running `work(key)` while the key is dirty."""

    def __init__(
        self, work: Callable[[Key], Awaitable[None]], paused: Callable[[], bool] = lambda: False
    ) -> None:
        self.work = work
        self.paused = paused
        self.dirty: set[Key] = set()
        self.workers: dict[Key, asyncio.Task[None]] = {}
        self.timers: dict[Key, asyncio.TimerHandle] = {}

    def schedule(self, key: Key, delay: float = 0.0) -> None:
        """Ask for a pass over `key` now, or after `delay` seconds (a pending timer that fires
        sooner is kept: a pass is level-triggered, an early one does no harm)."""
        if delay > 0:
            loop = asyncio.get_running_loop()
            timer = self.timers.get(key)
            if timer is not None and not timer.cancelled():
                if timer.when() <= loop.time() + delay:
                    return
                timer.cancel()
            self.timers[key] = loop.call_later(delay, self._due, key)
            return
        self.dirty.add(key)
        if key not in self.workers:
            self.workers[key] = asyncio.create_task(self._run(key), name=f"reconcile {key}")

    def cancel(self, key: Key) -> None:
        """Drop the pending timer of `key`, if any."""
        timer = self.timers.pop(key, None)
        if timer is not None:
            timer.cancel()

    def _due(self, key: Key) -> None:
        """A timer's pass, unless the replica is paused: the replica that leads acts now, and
        this one, when it resumes, makes a pass over every allocation Kopf lists again."""
        self.timers.pop(key, None)
        if self.paused():
            log.debug("paused: no pass", extra={"allocation": "/".join(key)})
            return
        self.schedule(key)

    async def _run(self, key: Key) -> None:
        try:
            while key in self.dirty:
                self.dirty.discard(key)
                await self.work(key)
        finally:
            self.workers.pop(key, None)

    async def stop(self) -> None:
        """Cancel every timer and running pass, and wait for the passes to end."""
        for timer in self.timers.values():
            timer.cancel()
        for worker in list(self.workers.values()):
            worker.cancel()
        await asyncio.gather(*self.workers.values(), return_exceptions=True)
