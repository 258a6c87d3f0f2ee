"""The reconciler's own watches (`reconcile/watches.py`): what reaches the reconciler's intake,
and how they follow Kopf's peering pause (no Kubernetes: the streams are scripted; the cluster
tests `test_reconcile.py` and `test_ha.py` run them against a real API server)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any, cast

import pytest

from allocbridge.cluster.watch import Changed, Listed, ObjectWatches
from allocbridge.model.pods import MANAGED_SELECTOR
from allocbridge.reconcile.allocations import Reconciler
from allocbridge.reconcile.peering import PeeringPause
from allocbridge.reconcile.watches import POD_EVENTS, FedStreams, ReconcilerWatches
from allocbridge.store.relay import FeedRelay

Item = Listed | Changed


def _obj(name: str, **extra: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "resourceVersion": "1"}, **extra}


class ScriptedStreams:
    """Each kind's stream yields what the test puts in its queue; every start is counted, with
    the selector it was asked for."""

    def __init__(self) -> None:
        self.queues: dict[str, asyncio.Queue[Item]] = {}
        self.starts: list[tuple[str, str | None, str | None]] = []
        self.open = 0

    def queue(self, kind: str) -> asyncio.Queue[Item]:
        return self.queues.setdefault(kind, asyncio.Queue())

    async def _stream(self, kind: str) -> AsyncIterator[Item]:
        self.open += 1
        try:
            while True:
                yield await self.queue(kind).get()
        finally:
            self.open -= 1

    def allocations(self, namespace: str | None) -> AsyncIterator[Item]:
        self.starts.append(("allocations", namespace, None))
        return self._stream("allocations")

    def pods(self, namespace: str | None, label_selector: str) -> AsyncIterator[Item]:
        self.starts.append(("pods", namespace, label_selector))
        return self._stream("pods")

    def events(self, namespace: str | None, field_selector: str) -> AsyncIterator[Item]:
        self.starts.append(("events", namespace, field_selector))
        return self._stream("events")

    def nodes(self) -> AsyncIterator[Item]:
        self.starts.append(("nodes", None, None))
        return self._stream("nodes")


class Intake:
    """Records what the reconciler would be handed; a body named `bad` raises."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str | None, str]] = []

    def _take(self, what: str, event_type: str | None, body: dict[str, Any]) -> None:
        name = body["metadata"]["name"]
        if name == "bad":
            raise ValueError("cannot take this one")
        self.seen.append((what, event_type, name))

    def allocation_event(self, event_type: str | None, body: dict[str, Any]) -> None:
        self._take("allocation", event_type, body)

    def pod_event(self, event_type: str | None, body: dict[str, Any], allocation: str) -> None:
        self._take(f"pod of {allocation}", event_type, body)

    def node_event(self, event_type: str | None, body: dict[str, Any]) -> None:
        self._take("node", event_type, body)

    def kubernetes_event(self, event_type: str | None, body: dict[str, Any]) -> None:
        self._take("event", event_type, body)


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def _watches(
    streams: ScriptedStreams, intake: Intake, pause: PeeringPause | None = None
) -> ReconcilerWatches:
    return ReconcilerWatches(
        cast(Reconciler, intake), lambda _: cast(ObjectWatches, streams), ("ns",), pause
    )


async def test_listed_objects_come_as_type_none_and_changes_with_theirs() -> None:
    streams, intake = ScriptedStreams(), Intake()
    running = asyncio.create_task(_watches(streams, intake).run())
    await _settle()
    assert sorted(streams.starts) == [
        ("allocations", "ns", None),
        ("events", "ns", POD_EVENTS),
        ("nodes", None, None),
        ("pods", "ns", MANAGED_SELECTOR),
    ]
    owned = {"ownerReferences": [{"kind": "Allocation", "name": "a", "controller": True}]}
    streams.queue("allocations").put_nowait(Listed([_obj("a"), _obj("b")], 1))
    streams.queue("allocations").put_nowait(Changed("MODIFIED", _obj("a"), 2))
    streams.queue("allocations").put_nowait(Changed("BOOKMARK", {"metadata": {}}, 3))
    pod = _obj("a")
    pod["metadata"].update(owned)
    streams.queue("pods").put_nowait(Changed("ADDED", pod, 2))
    streams.queue("pods").put_nowait(Changed("ADDED", _obj("orphan"), 2))  # no controller
    about_pod = _obj("e1", involvedObject={"kind": "Pod", "name": "a"})
    streams.queue("events").put_nowait(Changed("ADDED", about_pod, 2))
    streams.queue("events").put_nowait(Changed("ADDED", _obj("e2", involvedObject={}), 2))
    streams.queue("nodes").put_nowait(Changed("DELETED", _obj("node-1"), 2))
    await _settle()
    assert sorted(intake.seen, key=str) == sorted(
        [
            ("allocation", None, "a"),
            ("allocation", None, "b"),
            ("allocation", "MODIFIED", "a"),
            ("pod of a", "ADDED", "a"),
            ("event", "ADDED", "e1"),
            ("node", "DELETED", "node-1"),
        ],
        key=str,
    )
    running.cancel()
    await asyncio.gather(running, return_exceptions=True)
    assert streams.open == 0


async def test_an_object_the_intake_refuses_is_logged_and_the_stream_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    streams, intake = ScriptedStreams(), Intake()
    running = asyncio.create_task(_watches(streams, intake).run())
    await _settle()
    streams.queue("allocations").put_nowait(Changed("ADDED", _obj("bad"), 2))
    streams.queue("allocations").put_nowait(Changed("ADDED", _obj("good"), 3))
    with caplog.at_level(logging.ERROR):
        await _settle()
    assert intake.seen == [("allocation", "ADDED", "good")]
    assert any(r.getMessage() == "a watch event could not be taken in" for r in caplog.records)
    running.cancel()
    await asyncio.gather(running, return_exceptions=True)


async def test_nothing_is_watched_while_paused_and_resuming_lists_again() -> None:
    """As Kopf's own watches: a paused replica keeps no stream open; on resuming every stream
    starts again, so each begins with a fresh list."""
    streams, intake = ScriptedStreams(), Intake()
    pause = PeeringPause(logging.INFO, paused=True)
    running = asyncio.create_task(_watches(streams, intake, pause).run())
    await _settle()
    assert streams.starts == [] and streams.open == 0

    pause.filter(_record("Resuming operations after the pause. ..."))
    await _settle()
    assert len(streams.starts) == 4 and streams.open == 4

    pause.filter(_record("Pausing operations in favour of [<Peer newer>]."))
    await _settle()
    assert streams.open == 0

    pause.filter(_record("Resuming operations after the pause. ..."))
    await _settle()
    assert len(streams.starts) == 8 and streams.open == 4
    running.cancel()
    await asyncio.gather(running, return_exceptions=True)
    assert streams.open == 0 and pause.listeners == []


def test_only_events_and_nodes_take_connections_of_their_own() -> None:
    """Allocations and pods come from the store feed (`FedStreams`), so the reconciler's client
    needs a connection for Nodes and one for Events per namespace (or one cluster-wide)."""
    assert ReconcilerWatches.count(()) == 2
    assert ReconcilerWatches.count(("ns",)) == 2
    assert ReconcilerWatches.count(("a", "b", "c")) == 4


async def test_fed_streams_take_allocations_and_pods_from_the_store_feed() -> None:
    """Allocations and managed pods come through the feed's relay (here with nothing listed
    yet, a change handed on as the feed read it); Events and Nodes from the watches."""
    relay = FeedRelay(asyncio.get_running_loop())
    streams = ScriptedStreams()
    fed = FedStreams(relay, cast(ObjectWatches, streams))
    allocations = fed.allocations("ns")
    pods = fed.pods("ns", MANAGED_SELECTOR)
    first = asyncio.ensure_future(anext(allocations))
    first_pod = asyncio.ensure_future(anext(pods))
    await _settle()
    assert relay.following("allocations/ns") and relay.following("pods/ns")
    change = Changed("ADDED", _obj("a"), 2)
    relay.hand("allocations/ns", change)
    relay.hand("pods/ns", change)
    assert await first is change and await first_pod is change
    await cast(Any, allocations).aclose()
    await cast(Any, pods).aclose()
    await _settle()
    assert not relay.following("allocations/ns") and not relay.following("pods/ns")
    with pytest.raises(ValueError, match="does not watch pods"):
        fed.pods("ns", "app=other")
    fed.events("ns", POD_EVENTS)
    fed.nodes()
    assert streams.starts == [("events", "ns", POD_EVENTS), ("nodes", None, None)]


def _record(message: str) -> logging.LogRecord:
    return logging.LogRecord("kopf", logging.INFO, __file__, 0, message, None, None)
