"""The store feed's watch events, handed on to followers on other event loops.

The reconciler (on Kopf's thread and loop) needs the same Allocations and pods the store feed
watches (on the main loop). Watching them twice cost the API server a second watcher of each
and the operator a second read and decode of every event (a start of 500 is about 5,000 of
them), so the feed hands what it decoded to whoever follows it: the same `Listed` and
`Changed` items, as read-only objects shared between the threads (the feed keeps the pods it
hands over, and neither side changes a decoded object: a pass derives new dicts).

A follower subscribes to one stream (a kind in one namespace, or in all) and gets, in order,
what the feed has of it now (a `Listed`, if the feed has listed it yet), then every change and
every list again (after an expired resourceVersion) as the feed reads them. Items reach the
follower's loop in batches: a follower that took some lets the next ones gather for `GATHER`
seconds, during which the feed queues them without waking the follower's loop, so a burst of
hundreds of events costs a few wake-ups instead of one each (each wake-up is a system call on
both threads and a handover of the interpreter lock). Leaving (closing the follower's
iterator) unsubscribes. Bookmarks are not handed on.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Callable
from typing import Final

from allocbridge.cluster.watch import Changed, Listed

Item = Listed | Changed

#: Seconds a follower that was handed items lets the next ones gather before it takes them:
#: far below the reconciler's own settling of pod changes (0.2 s).
GATHER: Final = 0.02

ALLOCATIONS: Final = "allocations"
PODS: Final = "pods"


def stream_name(kind: str, namespace: str | None) -> str:
    """The name of the feed's stream of `kind` in `namespace` (None: every namespace)."""
    return f"{kind}/{namespace}"


class _Follower:
    """One follower's inbox: filled on the feed's thread, emptied on the follower's loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.lock = threading.Lock()
        self.items: list[Item] = []
        # The follower is taking or gathering items, or a wake-up is on its way to `loop`: a put
        # needs no wake-up (under `lock`).
        self.awake = False
        self.closed = False
        self.waiter: asyncio.Future[None] | None = None  # only touched on `loop`

    def put(self, item: Item) -> None:
        """On the feed's thread: queue `item`, and wake the follower's loop if it is not."""
        with self.lock:
            if self.closed:
                return
            self.items.append(item)
            if self.awake:
                return
            self.awake = True
        with contextlib.suppress(RuntimeError):  # the follower's loop has closed
            self.loop.call_soon_threadsafe(self._wake)

    def _wake(self) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def take(self) -> list[Item]:
        """On the follower's loop: what was queued, in order; when nothing was, the next put
        wakes the loop (see `wait`)."""
        with self.lock:
            items, self.items = self.items, []
            if not items:
                self.awake = False
        return items

    async def wait(self) -> None:
        """On the follower's loop, after an empty `take`: until something is queued."""
        self.waiter = self.loop.create_future()
        try:
            await self.waiter
        finally:
            self.waiter = None

    def close(self) -> None:
        with self.lock:
            self.closed = True
            self.items = []


class FeedRelay:
    """Followers of the store feed's streams; lives on the feed's loop (`loop`), where the feed
    calls `hand` and `listed`, and followers subscribe from their own loops (`follow`)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.followers: dict[str, list[_Follower]] = {}
        # What the feed has of a stream now, as a `Listed`, or None before its first list: set
        # by the feed (see `StoreFeed`).
        self.snapshot: Callable[[str], Listed | None] = lambda _: None

    def following(self, name: str) -> bool:
        """Whether anyone follows the stream `name` (the feed skips the work otherwise)."""
        return bool(self.followers.get(name))

    def hand(self, name: str, item: Item) -> None:
        """On the feed's loop: hand `item` of the stream `name` to its followers."""
        for follower in self.followers.get(name, ()):
            follower.put(item)

    async def follow(
        self, kind: str, namespace: str | None, gather: float = GATHER
    ) -> AsyncIterator[Item]:
        """On the follower's loop: the stream of `kind` in `namespace`, until closed; items that
        come while the follower handles a batch are gathered for `gather` seconds."""
        name = stream_name(kind, namespace)
        follower = _Follower(asyncio.get_running_loop())
        self.loop.call_soon_threadsafe(self._add, name, follower)
        try:
            while True:
                items = follower.take()
                if not items:
                    await follower.wait()
                    continue
                for item in items:
                    yield item
                await asyncio.sleep(gather)
        finally:
            follower.close()
            with contextlib.suppress(RuntimeError):  # the feed's loop has closed
                self.loop.call_soon_threadsafe(self._remove, name, follower)

    def _add(self, name: str, follower: _Follower) -> None:
        """On the feed's loop, between two of its events: what the feed has now comes first."""
        self.followers.setdefault(name, []).append(follower)
        listed = self.snapshot(name)
        if listed is not None:
            follower.put(listed)

    def _remove(self, name: str, follower: _Follower) -> None:
        followers = self.followers.get(name, [])
        with contextlib.suppress(ValueError):
            followers.remove(follower)
        if not followers:
            self.followers.pop(name, None)
