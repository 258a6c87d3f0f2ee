"""The latest Allocations, pods and pod Events the watches delivered, for reconcile passes.

Kopf already streams every one of these objects to the handlers in `runner`; keeping the
latest body of each lets a pass read memory instead of asking the API server (a GET of the
allocation, a GET of the pod and a LIST of its Events per pass were most of the API server's
work per allocation). The reconciler also stores what its own writes returned, so a pass never
works from something older than its last write.

A body replaces a stored one only when its resourceVersion is not older (a watch may still
deliver an event older than a write's response; versions are etcd revisions, comparable across
objects), and a deletion removes an entry only when the uid matches (the pod of a restarted
allocation keeps its name but not its uid). Nothing here
is authoritative: the reconciler treats a miss as "unknown" and asks the API server.

The Events watch sees every pod's Events (the API server cannot select them by the pod's
labels), and an Event may arrive before the allocation or the pod it is about. So Events of
a pod are kept for `UNCLAIMED_GRACE` seconds on trust; after that, only while the pod is a
watched (managed) pod, or not watched yet while an allocation of its name exists. Events of
other pods, and late Events of a deleted pod that has a successor, are dropped then instead of
living as long as the Event object (an hour by default).

Not thread-safe: every call runs on Kopf's event loop.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from allocbridge.cluster.resources import Json
from allocbridge.model.status import KubeEvent

Key = tuple[str, str]  # (namespace, name)

#: Seconds the Events of a pod are kept before an allocation must claim them: the watches of
#: Allocations, pods and Events run independently, and at start-up their lists can arrive
#: seconds apart.
UNCLAIMED_GRACE: Final = 120.0


def key_of(body: Mapping[str, Any]) -> Key:
    meta = body.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def _version(body: Mapping[str, Any]) -> int:
    """The resourceVersion as the integer it is (the etcd revision); -1 when unreadable."""
    try:
        return int((body.get("metadata") or {}).get("resourceVersion") or -1)
    except ValueError:
        return -1


def _lean(body: Json) -> Json:
    """`body` without `metadata.managedFields`, which no pass reads and which can be most of a
    small object; a shallow copy, since the watch's dict is Kopf's."""
    meta = body.get("metadata")
    if not isinstance(meta, dict) or "managedFields" not in meta:
        return body
    return {**body, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}


def _uid(body: Mapping[str, Any]) -> str:
    return str((body.get("metadata") or {}).get("uid") or "")


class _Latest:
    """Objects by (namespace, name), each the newest version seen."""

    def __init__(self) -> None:
        self.items: dict[Key, Json] = {}

    def put(self, body: Json) -> bool:
        """Keep `body` unless a newer version of the same object is stored; True if kept."""
        key = key_of(body)
        old = self.items.get(key)
        if old is not None and _version(old) > _version(body):
            return False
        self.items[key] = _lean(body)
        return True

    def drop(self, body: Mapping[str, Any]) -> None:
        """Forget the object `body` names, unless the stored one is another (same name, new uid)."""
        key = key_of(body)
        old = self.items.get(key)
        if old is not None and _uid(old) == _uid(body):
            del self.items[key]


@dataclass
class _PodEvents:
    """The Events of one pod, by Event uid, and when the first of them arrived."""

    since: float
    by_uid: dict[str, KubeEvent] = field(default_factory=dict)


class Observed:
    """What the watches (and the reconciler's own writes) last said about each object."""

    def __init__(self) -> None:
        self._allocations = _Latest()
        self._pods = _Latest()
        self._events: dict[str, _PodEvents] = {}  # by pod uid
        self._unchecked: deque[tuple[float, str, Key]] = deque()  # (since, pod uid, pod key)

    def allocation(self, key: Key) -> Json | None:
        return self._allocations.items.get(key)

    def knows(self, key: Key) -> bool:
        """True when the allocation `key` exists as far as the watch has told."""
        return key in self._allocations.items

    def put_allocation(self, body: Json) -> bool:
        return self._allocations.put(body)

    def drop_allocation(self, body: Mapping[str, Any]) -> None:
        self._allocations.drop(body)

    def forget_allocation(self, key: Key) -> None:
        """Distrust what is stored for `key`: the next pass reads it from the API server."""
        self._allocations.items.pop(key, None)

    def pod(self, key: Key) -> Json | None:
        return self._pods.items.get(key)

    def put_pod(self, body: Json) -> bool:
        return self._pods.put(body)

    def holds_pod(self, body: Mapping[str, Any]) -> bool:
        """Whether this very version of the pod is held already (a pass stored what its create
        or read returned, and the watch now delivers the same)."""
        held = self._pods.items.get(key_of(body))
        return held is not None and _uid(held) == _uid(body) and _version(held) == _version(body)

    def drop_pod(self, body: Mapping[str, Any]) -> None:
        self._pods.drop(body)
        self._events.pop(_uid(body), None)

    def pod_events(self, pod_uid: str) -> list[KubeEvent]:
        events = self._events.get(pod_uid)
        return list(events.by_uid.values()) if events is not None else []

    def put_event(self, pod_uid: str, pod_key: Key, event: KubeEvent, *, now: float) -> None:
        """Keep `event` about the pod `pod_key` (uid `pod_uid`); `now` is a monotonic time."""
        self._sweep(now)
        events = self._events.get(pod_uid)
        if events is None:
            events = self._events[pod_uid] = _PodEvents(since=now)
            self._unchecked.append((now, pod_uid, pod_key))
        events.by_uid[event.uid] = event

    def drop_event(self, pod_uid: str, event_uid: str) -> None:
        events = self._events.get(pod_uid)
        if events is not None:
            events.by_uid.pop(event_uid, None)
            if not events.by_uid:
                del self._events[pod_uid]

    def _sweep(self, now: float) -> None:
        """Drop the Events of pods past their grace that no allocation claims."""
        while self._unchecked and now - self._unchecked[0][0] >= UNCLAIMED_GRACE:
            since, pod_uid, pod_key = self._unchecked.popleft()
            events = self._events.get(pod_uid)
            # `since` differs when those Events went and others came back: theirs is later.
            if events is not None and events.since == since and not self._claims(pod_key, pod_uid):
                del self._events[pod_uid]

    def _claims(self, pod_key: Key, pod_uid: str) -> bool:
        """The pod is an allocation's pod as watched (only managed pods are), or not watched
        yet while an allocation of its name exists. The pod decides first: a pass that met a
        write conflict forgets its allocation for a moment."""
        pod = self._pods.items.get(pod_key)
        if pod is not None:
            return _uid(pod) == pod_uid
        return pod_key in self._allocations.items

    def sizes(self) -> tuple[int, int, int]:
        """(allocations, pods, pods with Events) held; for tests and debugging."""
        return len(self._allocations.items), len(self._pods.items), len(self._events)
