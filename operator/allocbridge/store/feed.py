"""Feeds the store from watches of Allocations and their pods, on every replica.

The feed is independent of which replica leads reconciliation: each replica watches the same
objects and so sees the same resourceVersions, which is what makes indexes, blocking queries
and paging tokens portable across replicas behind one Service. An allocation is re-rendered
whenever it changes, or its pod changes in what the API shows (`wire.pod_view`: address,
readiness); such pod-only changes also move the store's index so that parked queries on
services and checks wake. Nothing else moves it: a pod change the API does not show, or a
watch bookmark, leaves parked queries parked (Nomad's index, too, moves only with its data).

What the feed reads is also handed on (`relay`): the reconciler follows the same Allocations
and pods from here instead of watching them again.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Mapping
from typing import Any

import orjson

from allocbridge.cluster.watch import Changed, Listed, ObjectWatches
from allocbridge.model import wire
from allocbridge.model.pods import MANAGED_SELECTOR, owning_allocation
from allocbridge.model.sharedspecs import SharedSpecs
from allocbridge.model.spec import AllocationSpec
from allocbridge.model.validation import parse_and_validate
from allocbridge.store.allocation import StoredAllocation
from allocbridge.store.memory import AllocationStore
from allocbridge.store.relay import ALLOCATIONS, PODS, FeedRelay, stream_name
from allocbridge.store.sharing import SharedParts

log = logging.getLogger(__name__)

Key = tuple[str, str]
Json = dict[str, Any]


def usable_spec(obj: Mapping[str, Any]) -> AllocationSpec | None:
    """The Allocation's parsed spec when it is valid, else None."""
    spec, problems = parse_and_validate(obj.get("spec") or {})
    return spec if not problems else None


def render(
    obj: Mapping[str, Any],
    pod: Mapping[str, Any] | None,
    specs: SharedSpecs | None = None,
    shared: SharedParts | None = None,
) -> StoredAllocation:
    """One Allocation object (and its pod) as the store keeps it."""
    usable = usable_spec(obj) if specs is None else specs.usable(obj.get("spec") or {})
    rendered = wire.allocation(obj, usable, pod)
    return StoredAllocation.from_wire(
        rendered if shared is None else shared.share(rendered),
        services=wire.services(obj, usable, pod),
        checks=wire.checks(obj, usable, pod),
        object_name=str(obj["metadata"]["name"]),
    )


class StoreFeed:
    """Two watches (Allocations, managed pods) joined into one store."""

    def __init__(
        self,
        store: AllocationStore,
        watches: ObjectWatches,
        namespaces: tuple[str, ...] = (),
        relay: FeedRelay | None = None,
    ) -> None:
        self.store = store
        self.watches = watches
        self.namespaces = namespaces
        self.relay = relay
        if relay is not None:
            relay.snapshot = self._snapshot
        # Allocation objects as compact JSON: read back only when their pod changes, and a
        # fifth of the dicts' size (8 KB less per allocation).
        self.allocs: dict[Key, bytes] = {}
        self.pods: dict[Key, Json] = {}
        self._listed: set[str] = set()
        self._expected: set[str] = set()
        self._versions: dict[str, int] = {}  # by stream: the resourceVersion last read
        self.specs = SharedSpecs()
        self.shared = SharedParts()

    async def run(self) -> None:
        streams: list[tuple[str, AsyncIterator[Listed | Changed]]] = []
        for namespace in self.namespaces or (None,):
            allocs = self.watches.allocations(namespace, pack=_keyed)
            streams.append((stream_name(ALLOCATIONS, namespace), allocs))
            pods = self.watches.pods(namespace, MANAGED_SELECTOR)
            streams.append((stream_name(PODS, namespace), pods))
        self._expected = {name for name, _ in streams}
        await asyncio.gather(*(self._consume(name, stream) for name, stream in streams))

    async def _consume(self, name: str, stream: AsyncIterator[Listed | Changed]) -> None:
        relay = self.relay
        async for event in stream:
            self._versions[name] = event.resource_version
            if isinstance(event, Listed):
                self._relist(name, event)
                if relay is not None and relay.following(name):
                    relay.hand(name, self._held(name))  # the list's Allocations are packed
            else:
                self._change(event)
                if relay is not None and event.kind != "BOOKMARK" and relay.following(name):
                    relay.hand(name, event)

    def _snapshot(self, name: str) -> Listed | None:
        """What the feed holds of the stream `name` now, as a list of objects for the relay's
        followers, or None before its first list."""
        return self._held(name) if name in self._listed else None

    def _held(self, name: str) -> Listed:
        """What the feed holds of the stream `name`, as a list of objects (Allocations decoded
        again from their JSON)."""
        kind, namespace = name.split("/", 1)
        held: dict[Key, Any] = self.allocs if kind == ALLOCATIONS else self.pods
        items = [
            orjson.loads(value) if kind == ALLOCATIONS else value
            for key, value in held.items()
            if namespace == "None" or key[0] == namespace
        ]
        return Listed(items, self._versions.get(name, 0))

    def _relist(self, name: str, listed: Listed) -> None:
        is_allocs = name.startswith("allocations")
        namespace = name.split("/", 1)[1]
        target: dict[Key, Any] = self.allocs if is_allocs else self.pods
        for key in [k for k in target if namespace == "None" or k[0] == namespace]:
            del target[key]
        for item in listed.items:
            if isinstance(item, tuple):  # an Allocation the watch packed (see `run`)
                key, packed = item
                target[key] = packed
            else:
                target[_key(item)] = _packed(item) if is_allocs else item
        self._listed.add(name)
        if self._listed >= self._expected:
            # One object at a time from its JSON, so they never all exist as dicts.
            rendered = [
                self._render(orjson.loads(packed), self.pods.get(key))
                for key, packed in self.allocs.items()
            ]
            self.store.replace_all(rendered, listed.resource_version)
            log.info("allocation store synced", extra={"allocations": len(rendered)})

    def _change(self, event: Changed) -> None:
        if event.kind == "BOOKMARK":
            # Only the watch resumes from it. The index moves with what the store shows, as
            # Nomad's table index does; bookmarks also reach each replica at its own moments,
            # so following them would give replicas different indexes for the same data, and
            # wake every parked query with nothing new.
            return
        obj = event.obj
        key = _key(obj)
        is_pod = obj.get("kind") == "Pod"
        if is_pod:
            alloc_key = (key[0], owning_allocation(obj) or key[1])
            before = wire.pod_view(self.pods.get(alloc_key))
            if event.kind == "DELETED":
                self.pods.pop(key, None)
            else:
                self.pods[key] = obj
            packed = self.allocs.get(alloc_key)
            pod = self.pods.get(alloc_key)
            if packed is not None and self._synced and wire.pod_view(pod) != before:
                self.store.upsert(self._render(orjson.loads(packed), pod))
                self.store.advance(event.resource_version)
            return
        if event.kind == "DELETED":
            self.allocs.pop(key, None)
            if self._synced:
                self.store.remove(obj["metadata"]["uid"], event.resource_version)
            return
        self.allocs[key] = _packed(obj)
        if self._synced:
            self.store.upsert(self._render(obj, self.pods.get(key)))

    def _render(self, obj: Mapping[str, Any], pod: Mapping[str, Any] | None) -> StoredAllocation:
        return render(obj, pod, self.specs, self.shared)

    @property
    def _synced(self) -> bool:
        return self._listed >= self._expected


def _key(obj: Mapping[str, Any]) -> Key:
    meta = obj["metadata"]
    return str(meta.get("namespace", "")), str(meta["name"])


def _keyed(obj: Mapping[str, Any]) -> tuple[Key, bytes]:
    """A listed Allocation as the feed keeps it: its key and its JSON."""
    return _key(obj), _packed(obj)


def _packed(obj: Mapping[str, Any]) -> bytes:
    """An object's compact JSON, in a buffer of its own size (orjson's has room to spare)."""
    try:
        return memoryview(orjson.dumps(obj)).tobytes()
    except TypeError:  # an integer beyond 64 bits (the watch's own decoder makes them floats)
        return json.dumps(obj, separators=(",", ":")).encode()
