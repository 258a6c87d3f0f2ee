"""The store feed's relay (`store/relay.py`): what a follower on another thread's event loop
gets, in which order, and when it stops getting it (no Kubernetes: the feed's streams are
scripted; the cluster tests `test_reconcile.py` and `test_ha.py` run the reconciler on it)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any, cast

import pytest
from kubernetes_asyncio import client

from allocbridge.cluster.watch import Changed, Listed, ObjectWatches
from allocbridge.store import AllocationStore
from allocbridge.store.feed import StoreFeed, _keyed
from allocbridge.store.relay import FeedRelay, stream_name

Item = Listed | Changed


def _obj(name: str, version: int, kind: str = "Allocation") -> dict[str, Any]:
    meta = {"name": name, "namespace": "ns", "resourceVersion": str(version)}
    return {"kind": kind, "metadata": meta}


class OtherLoop:
    """An event loop on a thread of its own, as Kopf's is: coroutines run there and their
    results come back."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    async def run(self, coroutine: Any) -> Any:
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coroutine, self.loop))

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


@pytest.fixture
def other() -> Iterator[OtherLoop]:
    running = OtherLoop()
    yield running
    running.close()


async def _first(stream: AsyncIterator[Item], count: int) -> list[Item]:
    """The first `count` items of `stream`, which is then closed (as a paused reconciler does)."""
    out: list[Item] = []
    try:
        async for item in stream:
            out.append(item)
            if len(out) == count:
                break
    finally:
        aclose: Any = getattr(stream, "aclose", None)
        await aclose()
    return out


async def _until(test: Any) -> None:
    for _ in range(200):
        if test():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("not reached in 2 s")


async def test_a_follower_on_another_loop_gets_the_items_in_order_and_leaves(
    other: OtherLoop,
) -> None:
    relay = FeedRelay(asyncio.get_running_loop())
    name = stream_name("pods", "ns")
    relay.snapshot = lambda asked: Listed([_obj("a", 1)], 1) if asked == name else None
    following = asyncio.ensure_future(other.run(_first(relay.follow("pods", "ns"), 201)))
    await _until(lambda: relay.following(name))
    changes = [Changed("MODIFIED", _obj("a", v), v) for v in range(2, 202)]
    for change in changes:  # a burst, as one read of the watch may bring
        relay.hand(name, change)
    got = await following
    assert isinstance(got[0], Listed) and got[0].items == [_obj("a", 1)]
    assert got[1:] == changes
    await _until(lambda: not relay.following(name))
    relay.hand(name, changes[0])  # nobody follows: nothing is kept


async def test_a_burst_handed_while_the_follower_gathers_wakes_it_once(
    other: OtherLoop,
) -> None:
    """After taking items the follower lets the next ones gather: the feed queues them without
    waking the follower's loop, which takes them all at once after the gathering time."""
    wakes: list[object] = []
    schedule = other.loop.call_soon_threadsafe

    def counted(callback: Any, *args: Any, **kwargs: Any) -> Any:
        if getattr(callback, "__name__", "") == "_wake":
            wakes.append(callback)
        return schedule(callback, *args, **kwargs)

    other.loop.call_soon_threadsafe = counted  # type: ignore[method-assign,assignment]
    relay = FeedRelay(asyncio.get_running_loop())
    name = stream_name("pods", "ns")
    following = asyncio.ensure_future(
        other.run(_first(relay.follow("pods", "ns", gather=0.3), 101))
    )
    await _until(lambda: relay.following(name))
    relay.hand(name, Changed("ADDED", _obj("a", 1), 1))
    await _until(lambda: len(wakes) == 1)
    await asyncio.sleep(0.05)  # the follower has taken the first and gathers now
    burst = [Changed("MODIFIED", _obj("a", v), v) for v in range(2, 102)]
    for change in burst:
        relay.hand(name, change)
    got = await following
    assert got[1:] == burst
    assert len(wakes) == 1


async def test_no_list_comes_first_before_the_feed_has_listed(other: OtherLoop) -> None:
    relay = FeedRelay(asyncio.get_running_loop())
    following = asyncio.ensure_future(other.run(_first(relay.follow("allocations", None), 1)))
    name = stream_name("allocations", None)
    await _until(lambda: relay.following(name))
    change = Changed("ADDED", _obj("a", 2), 2)
    relay.hand(name, change)
    assert await following == [change]


class ScriptedWatches:
    """The feed's two streams, yielding what the test puts in their queues."""

    def __init__(self) -> None:
        self.queues: dict[str, asyncio.Queue[Item]] = {
            "allocations": asyncio.Queue(),
            "pods": asyncio.Queue(),
        }

    async def _stream(self, kind: str) -> AsyncIterator[Item]:
        while True:
            yield await self.queues[kind].get()

    def allocations(self, namespace: str | None, *, pack: Any = None) -> AsyncIterator[Item]:
        return self._stream("allocations")

    def pods(self, namespace: str | None, label_selector: str) -> AsyncIterator[Item]:
        return self._stream("pods")


async def _drain() -> None:
    for _ in range(10):
        await asyncio.sleep(0)


@pytest.fixture
async def api() -> AsyncIterator[client.ApiClient]:
    unused = client.ApiClient()
    yield unused
    await unused.close()


async def test_the_feed_hands_followers_what_it_holds_then_what_it_reads(
    other: OtherLoop,
) -> None:
    """A follower that comes late gets the feed's current objects as one list (Allocations
    decoded from the JSON the feed keeps), then changes; bookmarks are not handed on; a list
    again (an expired resourceVersion) is handed on as a list."""
    relay = FeedRelay(asyncio.get_running_loop())
    watches = ScriptedWatches()
    store = AllocationStore()
    feed = StoreFeed(store, cast(ObjectWatches, watches), ("ns",), relay)
    feeding = asyncio.create_task(feed.run())
    alloc = _obj("a", 5)
    watches.queues["allocations"].put_nowait(Listed([_keyed(alloc)], 5))
    await _drain()
    name = stream_name("allocations", "ns")
    following = asyncio.ensure_future(other.run(_first(relay.follow("allocations", "ns"), 3)))
    await _until(lambda: relay.following(name))
    bookmark = Changed("BOOKMARK", {"metadata": {"resourceVersion": "6"}}, 6)
    deleted = Changed("DELETED", _obj("a", 7), 7)
    watches.queues["allocations"].put_nowait(bookmark)
    watches.queues["allocations"].put_nowait(deleted)
    watches.queues["allocations"].put_nowait(Listed([], 8))
    got = await following
    assert isinstance(got[0], Listed) and got[0].items == [alloc]
    assert got[1] is deleted
    assert isinstance(got[2], Listed) and got[2].items == []
    assert got[2].resource_version == 8
    feeding.cancel()
    await asyncio.gather(feeding, return_exceptions=True)


async def test_the_feed_lists_pods_for_a_follower_by_namespace(api: client.ApiClient) -> None:
    """A snapshot holds the objects of its own stream's namespace only, and there is none before
    that stream has listed (its list is handed on when it comes)."""
    feed = StoreFeed(AllocationStore(), ObjectWatches(api), ("ns", "other"))
    feed._expected = {stream_name(k, n) for k in ("allocations", "pods") for n in ("ns", "other")}
    assert feed._snapshot(stream_name("pods", "ns")) is None
    pod = _obj("a", 3, kind="Pod")
    feed._relist(stream_name("pods", "ns"), Listed([pod], 3))
    elsewhere = {**pod, "metadata": {**pod["metadata"], "namespace": "other"}}
    feed._relist(stream_name("pods", "other"), Listed([elsewhere], 4))
    listed = feed._snapshot(stream_name("pods", "ns"))
    assert listed is not None and listed.items == [pod]
