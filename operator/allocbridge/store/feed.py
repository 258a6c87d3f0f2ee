"""Feeds the store from watches of Allocations and their pods, on every replica.

The feed is independent of which replica leads reconciliation: each replica watches the same
objects and so sees the same resourceVersions, which is what makes indexes, blocking queries
and paging tokens portable across replicas behind one Service. An allocation is re-rendered
whenever it changes, or its pod changes in what the API shows (`wire.pod_view`: address,
readiness); such pod-only changes also move the store's index so that parked queries on
services and checks wake. Nothing else moves it: a pod change the API does not show, or a
watch bookmark, leaves parked queries parked (Nomad's index, too, moves only with its data).
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from kubernetes_asyncio import client

from allocbridge.cluster.resources import GROUP, PLURAL, VERSION
from allocbridge.cluster.watch import Changed, Listed, watch
from allocbridge.model import wire
from allocbridge.model.pods import MANAGED_SELECTOR, owning_allocation
from allocbridge.model.spec import AllocationSpec
from allocbridge.model.validation import parse_and_validate
from allocbridge.store.allocation import StoredAllocation
from allocbridge.store.memory import AllocationStore

log = logging.getLogger(__name__)

Key = tuple[str, str]
Json = dict[str, Any]


def usable_spec(obj: Mapping[str, Any]) -> AllocationSpec | None:
    """The Allocation's parsed spec when it is valid, else None."""
    spec, problems = parse_and_validate(obj.get("spec") or {})
    return spec if not problems else None


class RecentSpecs:
    """The usable specs of the allocations that changed last, so the status writes that follow
    an allocation's start (several within seconds) do not parse its spec again each time.

    A spec does not change under one uid and generation (the CRD refuses changes). Bounded:
    keeping all 10,000 specs of a large store added 66 MB.
    """

    def __init__(self, limit: int = 512) -> None:
        self.limit = limit
        self._specs: OrderedDict[tuple[str, int], AllocationSpec | None] = OrderedDict()

    def usable(self, obj: Mapping[str, Any]) -> AllocationSpec | None:
        meta = obj["metadata"]
        key = (str(meta.get("uid", "")), int(meta.get("generation") or 0))
        if key in self._specs:
            self._specs.move_to_end(key)
            return self._specs[key]
        spec = self._specs[key] = usable_spec(obj)
        if len(self._specs) > self.limit:
            self._specs.popitem(last=False)
        return spec


def render(
    obj: Mapping[str, Any], pod: Mapping[str, Any] | None, specs: RecentSpecs | None = None
) -> StoredAllocation:
    """One Allocation object (and its pod) as the store keeps it."""
    usable = usable_spec(obj) if specs is None else specs.usable(obj)
    return StoredAllocation.from_wire(
        wire.allocation(obj, usable, pod),
        services=wire.services(obj, usable, pod),
        checks=wire.checks(obj, usable, pod),
        object_name=str(obj["metadata"]["name"]),
    )


class StoreFeed:
    """Two watches (Allocations, managed pods) joined into one store."""

    def __init__(
        self, store: AllocationStore, api: client.ApiClient, namespaces: tuple[str, ...] = ()
    ) -> None:
        self.store = store
        self.custom = client.CustomObjectsApi(api)
        self.core = client.CoreV1Api(api)
        self.namespaces = namespaces
        self.allocs: dict[Key, Json] = {}
        self.pods: dict[Key, Json] = {}
        self._listed: set[str] = set()
        self._expected: set[str] = set()
        self.specs = RecentSpecs()

    async def run(self) -> None:
        streams = []
        for namespace in self.namespaces or (None,):
            streams.append(self._follow(f"allocations/{namespace}", self._alloc_call(namespace)))
            streams.append(self._follow(f"pods/{namespace}", self._pod_call(namespace)))
        self._expected = {name for name, _ in streams}
        await asyncio.gather(*(self._consume(name, stream) for name, stream in streams))

    def _alloc_call(self, namespace: str | None) -> tuple[Any, dict[str, Any]]:
        if namespace is None:
            return self.custom.list_cluster_custom_object, {
                "group": GROUP,
                "version": VERSION,
                "plural": PLURAL,
            }
        return self.custom.list_namespaced_custom_object, {
            "group": GROUP,
            "version": VERSION,
            "plural": PLURAL,
            "namespace": namespace,
        }

    def _pod_call(self, namespace: str | None) -> tuple[Any, dict[str, Any]]:
        selector = {"label_selector": MANAGED_SELECTOR}
        if namespace is None:
            return self.core.list_pod_for_all_namespaces, selector
        return self.core.list_namespaced_pod, {**selector, "namespace": namespace}

    def _follow(self, name: str, call: tuple[Any, dict[str, Any]]) -> tuple[str, Any]:
        method, params = call
        return name, watch(method, **params)

    async def _consume(self, name: str, stream: Any) -> None:
        async for event in stream:
            if isinstance(event, Listed):
                self._relist(name, event)
            else:
                self._change(event)

    def _relist(self, name: str, listed: Listed) -> None:
        target = self.allocs if name.startswith("allocations") else self.pods
        namespace = name.split("/", 1)[1]
        for key in [k for k in target if namespace == "None" or k[0] == namespace]:
            del target[key]
        for item in listed.items:
            target[_key(item)] = item
        self._listed.add(name)
        if self._listed >= self._expected:
            rendered = [
                render(obj, self.pods.get(_pod_key(obj)), self.specs)
                for obj in self.allocs.values()
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
            alloc = self.allocs.get(alloc_key)
            pod = self.pods.get(alloc_key)
            if alloc is not None and self._synced and wire.pod_view(pod) != before:
                self.store.upsert(render(alloc, pod, self.specs))
                self.store.advance(event.resource_version)
            return
        if event.kind == "DELETED":
            self.allocs.pop(key, None)
            if self._synced:
                self.store.remove(obj["metadata"]["uid"], event.resource_version)
            return
        self.allocs[key] = obj
        if self._synced:
            self.store.upsert(render(obj, self.pods.get(key), self.specs))

    @property
    def _synced(self) -> bool:
        return self._listed >= self._expected


def _key(obj: Mapping[str, Any]) -> Key:
    meta = obj["metadata"]
    return str(meta.get("namespace", "")), str(meta["name"])


def _pod_key(alloc: Mapping[str, Any]) -> Key:
    """Pods are named after their allocation (model.pods.render_pod)."""
    return _key(alloc)
