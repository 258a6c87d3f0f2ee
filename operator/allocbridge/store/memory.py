"""The in-memory allocation store every replica keeps, fed by a Kubernetes watch.

It holds the allocations, the current index (the etcd revision, design.md section 2), the three
orders the list endpoint walks, the allocations of each job (the read-only jobs view), and the
blocking-query waiters. It never talks to Kubernetes:
the feeder calls `replace_all` with the first full list (which marks the store synced), then
`upsert`/`remove` per change it shows, and `advance` for a pod change that alters what an
allocation shows (its index is the pod's revision, not the allocation's).

Not thread-safe: every method must run on the event loop that serves the API (a feeder on
another thread hands over with `loop.call_soon_threadsafe`). Iterators returned here walk a
snapshot, so a slow consumer never sees a half-applied change.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable, Iterator

from allocbridge.store.allocation import StoredAllocation
from allocbridge.store.ordering import SortedIndex
from allocbridge.store.waiters import IndexWatch

_UUID_GROUPS = ((0, 8), (8, 12), (12, 16), (16, 20), (20, 32))


def hyphenated_prefix(prefix_hex: str) -> str | None:
    """The canonical-UUID form of a hex prefix (`abcdef0123` -> `abcdef01-23`).

    None when the prefix is longer than a UUID's 32 hex digits: nothing can match it.
    """
    if len(prefix_hex) > 32:
        return None
    return "-".join(prefix_hex[a:b] for a, b in _UUID_GROUPS if len(prefix_hex) > a)


class AllocationStore:
    """Allocations by ID, in list orders, with the current index and its waiters."""

    def __init__(self) -> None:
        self._allocs: dict[str, StoredAllocation] = {}
        self._by_create: SortedIndex[tuple[int, str], StoredAllocation] = SortedIndex()
        self._by_namespace: dict[str, SortedIndex[tuple[int, str], StoredAllocation]] = {}
        self._by_id: SortedIndex[str, StoredAllocation] = SortedIndex()
        self._by_job: dict[tuple[str, str], dict[str, StoredAllocation]] = {}
        # Per namespace: the sum of its stubs' `stub_sizes` (with and without TaskStates).
        self._stub_sizes: dict[str, list[int]] = {}
        self._watch = IndexWatch()
        self._synced = asyncio.Event()

    # -- reading --------------------------------------------------------------------------

    @property
    def index(self) -> int:
        """The current index: the highest revision seen (writes, deletions and bookmarks)."""
        return self._watch.index

    @property
    def synced(self) -> bool:
        """True once the first full list has been loaded."""
        return self._synced.is_set()

    @property
    def closed(self) -> bool:
        return self._watch.closed

    @property
    def parked(self) -> int:
        """Blocking queries waiting right now."""
        return self._watch.parked

    def __len__(self) -> int:
        return len(self._allocs)

    def get(self, alloc_id: str) -> StoredAllocation | None:
        return self._allocs.get(alloc_id)

    def namespaces(self) -> frozenset[str]:
        """Namespaces that hold at least one allocation."""
        return frozenset(self._by_namespace)

    def chronological(
        self,
        namespace: str | None = None,
        *,
        reverse: bool = False,
        start: tuple[int, str] | None = None,
    ) -> Iterator[StoredAllocation]:
        """By `(CreateIndex, ID)`, in one namespace or (None) all; `start` as in `scan`."""
        if namespace is None:
            index = self._by_create
        else:
            found = self._by_namespace.get(namespace)
            if found is None:
                return iter(())
            index = found
        return index.scan(start=start, reverse=reverse)

    def count(self, namespace: str | None = None) -> int:
        """Allocations in one namespace, or (None) in all."""
        if namespace is None:
            return len(self._allocs)
        found = self._by_namespace.get(namespace)
        return 0 if found is None else len(found)

    def stubs_size(self, namespace: str | None = None, *, task_states: bool = True) -> int:
        """The summed length of every stub (`stub_json` without resources) in one namespace,
        or (None) in all: what a whole list sends besides brackets and commas, known without
        reading 50,000 stubs."""
        column = 0 if task_states else 1
        if namespace is None:
            return sum(sizes[column] for sizes in self._stub_sizes.values())
        found = self._stub_sizes.get(namespace)
        return 0 if found is None else found[column]

    def placed_by(self, evaluation_id: str) -> list[StoredAllocation]:
        """Allocations whose `EvalID` is `evaluation_id`, oldest first.

        A scan of every allocation (about a millisecond for 10,000): evaluations are read once
        per CLI write, so an index kept up to date on every upsert would cost more than it saves.
        """
        return [a for a in self._by_create.scan() if a.wire.get("EvalID") == evaluation_id]

    def jobs(self) -> list[tuple[str, str]]:
        """`(namespace, job ID)` of every job some allocation names, in Nomad's job order."""
        return sorted(self._by_job)

    def job_allocations(self, namespace: str, job_id: str) -> list[StoredAllocation]:
        """The allocations of one job, oldest first (`(CreateIndex, ID)`)."""
        found = self._by_job.get((namespace, job_id))
        if not found:
            return []
        return sorted(found.values(), key=lambda a: (a.create_index, a.id))

    def by_id(
        self,
        prefix_hex: str = "",
        *,
        namespace: str | None = None,
        reverse: bool = False,
        start: str | None = None,
    ) -> Iterator[StoredAllocation]:
        """By ID, restricted to IDs starting with `prefix_hex` (lower-case hex, no hyphens)."""
        prefix = hyphenated_prefix(prefix_hex)
        if prefix is None:
            return iter(())
        # IDs are lower-case hex and hyphens, all below "~", so `prefix + "~"` bounds the range.
        upper = prefix + "~" if prefix else None
        items = self._by_id.scan(lower=prefix or None, upper=upper, start=start, reverse=reverse)
        if namespace is None:
            return items
        return (alloc for alloc in items if alloc.namespace == namespace)

    # -- writing (the watch feeder) -------------------------------------------------------

    def upsert(self, alloc: StoredAllocation) -> None:
        """Add or replace an allocation; the index moves to its ModifyIndex if that is ahead."""
        self._put(alloc)
        self._watch.advance(alloc.modify_index)

    def remove(self, alloc_id: str, index: int) -> StoredAllocation | None:
        """Forget an allocation deleted at revision `index`; returns what was removed."""
        old = self._allocs.pop(alloc_id, None)
        if old is not None:
            self._unindex(old)
            self._count_stub(old, -1)
        self._watch.advance(index)
        return old

    def advance(self, index: int) -> None:
        """Move the current index (a pod change an allocation shows); never backwards."""
        self._watch.advance(index)

    def replace_all(self, allocs: Iterable[StoredAllocation], index: int) -> None:
        """Swap in a full list taken at revision `index` (first sync or re-list); marks synced."""
        self._allocs = {alloc.id: alloc for alloc in allocs}  # a later duplicate wins
        everything = list(self._allocs.values())
        self._by_create = SortedIndex.build(((a.create_index, a.id), a) for a in everything)
        self._by_id = SortedIndex.build((a.id, a) for a in everything)
        self._by_job = {}
        for alloc in everything:
            self._by_job.setdefault(_job_key(alloc), {})[alloc.id] = alloc
        grouped: dict[str, list[StoredAllocation]] = {}
        for alloc in everything:
            grouped.setdefault(alloc.namespace, []).append(alloc)
        self._by_namespace = {
            namespace: SortedIndex.build(((a.create_index, a.id), a) for a in members)
            for namespace, members in grouped.items()
        }
        self._stub_sizes = {}
        for alloc in everything:
            self._count_stub(alloc, 1)
        highest = max((alloc.modify_index for alloc in self._allocs.values()), default=0)
        self._watch.advance(max(index, highest))
        self._synced.set()

    def mark_synced(self) -> None:
        """For feeders that load the first list with `upsert` instead of `replace_all`."""
        self._synced.set()

    async def wait_synced(self, timeout: float) -> bool:  # noqa: ASYNC109
        """Wait up to `timeout` seconds for the first full list; True once synced."""
        if not self._synced.is_set() and not self.closed and timeout > 0:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._synced.wait()
        return self._synced.is_set()

    async def wait_for_index(self, min_index: int, timeout: float) -> int:  # noqa: ASYNC109
        """Park until the index passes `min_index` (or timeout, or `close`); returns the index."""
        return await self._watch.wait_for_index(min_index, timeout)

    def close(self) -> None:
        """Release every parked blocking query now and from now on (shutdown)."""
        self._watch.close()

    # -- internals ------------------------------------------------------------------------

    def _put(self, alloc: StoredAllocation) -> None:
        old = self._allocs.get(alloc.id)
        if old is not None and (
            old.create_index != alloc.create_index
            or old.namespace != alloc.namespace
            or _job_key(old) != _job_key(alloc)
        ):
            self._unindex(old)
        if old is not None:
            self._count_stub(old, -1)
        self._count_stub(alloc, 1)
        self._allocs[alloc.id] = alloc
        key = (alloc.create_index, alloc.id)
        self._by_create.put(key, alloc)
        namespace = self._by_namespace.get(alloc.namespace)
        if namespace is None:
            namespace = self._by_namespace[alloc.namespace] = SortedIndex()
        namespace.put(key, alloc)
        self._by_id.put(alloc.id, alloc)
        self._by_job.setdefault(_job_key(alloc), {})[alloc.id] = alloc

    def _count_stub(self, alloc: StoredAllocation, sign: int) -> None:
        """Add (1) or take away (-1) an allocation's stub sizes in its namespace's sums."""
        with_states, without = alloc.stub_sizes
        sizes = self._stub_sizes.get(alloc.namespace)
        if sizes is None:
            sizes = self._stub_sizes[alloc.namespace] = [0, 0]
        sizes[0] += sign * with_states
        sizes[1] += sign * without
        if sign < 0 and alloc.namespace not in self._by_namespace:
            del self._stub_sizes[alloc.namespace]

    def _unindex(self, alloc: StoredAllocation) -> None:
        key = (alloc.create_index, alloc.id)
        self._by_create.discard(key)
        self._by_id.discard(alloc.id)
        job = self._by_job.get(_job_key(alloc))
        if job is not None:
            job.pop(alloc.id, None)
            if not job:
                del self._by_job[_job_key(alloc)]
        namespace = self._by_namespace.get(alloc.namespace)
        if namespace is not None:
            namespace.discard(key)
            if not namespace:
                del self._by_namespace[alloc.namespace]


def _job_key(alloc: StoredAllocation) -> tuple[str, str]:
    return alloc.namespace, str(alloc.wire.get("JobID") or "")
