"""A sorted key -> value index kept in two parallel lists (bisect to find, memmove to insert).

The list endpoint walks allocations in one of three orders (Nomad's memdb indexes `id`,
`create` and `namespace_create`); keeping each order up to date at upsert time makes a list
request a slice instead of a sort. Inserting into a Python list of 10,000 references is a
memmove of 80 KB, far cheaper than sorting per request.

Scans are lazy and copy nothing up front: a page of 100 from the middle of 10,000 must not
copy the 5,000 references behind it (paging walks did, once per page). They still walk a
snapshot: a scan marks the lists shared, and the next write copies them before changing
anything (copy-on-write), so writes pay one copy after a read instead of every read paying.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator
from itertools import chain
from typing import Final, Generic, TypeVar

#: The two key kinds in use: `(CreateIndex, ID)` and `ID`.
K = TypeVar("K", tuple[int, str], str)
V = TypeVar("V")

#: References a lazy scan copies at a time: about a page, so a page copies little and a
#: whole list still iterates in C over a few dozen slices.
CHUNK: Final = 256


class SortedIndex(Generic[K, V]):
    """Values ordered by a unique key; scans work on a snapshot, so they survive mutation."""

    def __init__(self) -> None:
        self._keys: list[K] = []
        self._values: list[V] = []
        self._shared = False  # a scan may still read the lists: copy before writing

    @classmethod
    def build(cls, pairs: Iterable[tuple[K, V]]) -> SortedIndex[K, V]:
        """One sort for a whole list (inserting one by one would be quadratic); keys unique."""
        index: SortedIndex[K, V] = cls()
        ordered = sorted(pairs, key=lambda pair: pair[0])
        index._keys = [key for key, _ in ordered]
        index._values = [value for _, value in ordered]
        return index

    def __len__(self) -> int:
        return len(self._keys)

    def _own(self) -> None:
        if self._shared:
            self._keys = list(self._keys)
            self._values = list(self._values)
            self._shared = False

    def put(self, key: K, value: V) -> None:
        """Insert, or replace the value under an existing key."""
        self._own()
        i = bisect_left(self._keys, key)
        if i < len(self._keys) and self._keys[i] == key:
            self._values[i] = value
        else:
            self._keys.insert(i, key)
            self._values.insert(i, value)

    def discard(self, key: K) -> None:
        self._own()
        i = bisect_left(self._keys, key)
        if i < len(self._keys) and self._keys[i] == key:
            del self._keys[i]
            del self._values[i]

    def scan(
        self,
        *,
        lower: K | None = None,
        upper: K | None = None,
        start: K | None = None,
        reverse: bool = False,
    ) -> Iterator[V]:
        """Values with `lower <= key < upper`, ascending or descending.

        `start` resumes a walk: ascending, at the first key `>= start`; descending, at the last
        key `<= start`. Both bounds and `start` are optional.
        """
        keys = self._keys
        lo = 0 if lower is None else bisect_left(keys, lower)
        hi = len(keys) if upper is None else bisect_left(keys, upper)
        if start is not None:
            if reverse:
                hi = min(hi, bisect_right(keys, start))
            else:
                lo = max(lo, bisect_left(keys, start))
        if lo >= hi:
            return iter(())
        values = self._values
        if hi - lo <= CHUNK:
            window = values[lo:hi]
            return reversed(window) if reverse else iter(window)
        self._shared = True
        if reverse:
            return chain.from_iterable(
                reversed(values[max(lo, end - CHUNK) : end]) for end in range(hi, lo, -CHUNK)
            )
        return chain.from_iterable(
            values[begin : min(hi, begin + CHUNK)] for begin in range(lo, hi, CHUNK)
        )
