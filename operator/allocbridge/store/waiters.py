"""The current index and the blocking queries parked on it.

A blocking query parks until the index passes the one it has seen. Each parked request owns
one future in a set: no polling, O(1) to park and to leave (timeouts and client disconnects
remove their own future), one pass over the set per index change. A change wakes everyone
parked; waiters whose target is still ahead (a client that came from a replica further along)
simply park again.

Not thread-safe: mutate only from the event loop that serves the API.
"""

from __future__ import annotations

import asyncio


class IndexWatch:
    """A monotonic index with wake-ups for waiters; `close` releases everyone for good."""

    def __init__(self) -> None:
        self._index = 0
        self._waiters: set[asyncio.Future[None]] = set()
        self._closed = False

    @property
    def index(self) -> int:
        return self._index

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def parked(self) -> int:
        """How many requests are waiting right now."""
        return len(self._waiters)

    def advance(self, index: int) -> bool:
        """Move the index forward (never back); True if it moved, and then waiters wake."""
        if index <= self._index:
            return False
        self._index = index
        self.wake()
        return True

    def close(self) -> None:
        """Wake every waiter now, and make later waits return at once (shutdown)."""
        self._closed = True
        self.wake()

    async def wait_for_index(self, min_index: int, timeout: float) -> int:  # noqa: ASYNC109
        """Wait until the index is above `min_index`, the timeout passes, or `close`.

        Returns the index at that moment; the caller compares it with `min_index`. The timeout
        is a parameter (not the caller's `asyncio.timeout`) because running out is a normal
        answer for a blocking query, not a cancellation.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self._index <= min_index and not self._closed:
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            waiter: asyncio.Future[None] = loop.create_future()
            self._waiters.add(waiter)
            try:
                async with asyncio.timeout(remaining):
                    await waiter
            except TimeoutError:
                break
            finally:
                self._waiters.discard(waiter)
        return self._index

    def wake(self) -> None:
        """Wake every waiter; those whose target index is still ahead park again."""
        waiters, self._waiters = self._waiters, set()
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)
