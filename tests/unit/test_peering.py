"""Following Kopf's pause: its own peering engine (the installed Kopf, no Kubernetes: the
peering object comes as a watch event) logs the changes that `PeeringPause` reads, and a paused
reconciler's timers make no pass.

These tests call Kopf's internal `process_peering_event`: they exist to fail when a Kopf
upgrade changes what that engine logs, which is what `allocbridge.reconcile.peering` relies on.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from collections.abc import Iterator
from typing import Any, cast

import kopf
import pytest
from kopf._cogs.aiokits.aiotoggles import Toggle
from kopf._core.engines import peering

from allocbridge.cluster.resources import Kube
from allocbridge.model.pods import PodSettings
from allocbridge.reconcile.allocations import Reconciler
from allocbridge.reconcile.peering import PEERING_LOGGER, PeeringPause, following_peering

NAME = "allocbridge"
ME = "me@here"
MY_PRIORITY = 100


def _peer(priority: int, *, seconds_ago: int = 0, lifetime: int = 60) -> dict[str, Any]:
    seen = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=seconds_ago)
    return {"priority": priority, "lifetime": lifetime, "lastseen": seen.isoformat()}


async def _kopf_sees(toggle: Toggle, peers: dict[str, dict[str, Any]]) -> None:
    """Kopf's peering engine handles one event of the ClusterKopfPeering `NAME`."""
    settings = kopf.OperatorSettings()
    settings.peering.name = NAME
    settings.peering.priority = MY_PRIORITY
    awake = asyncio.Event()
    awake.set()  # no sleeping until a blocking peer expires, no keep-alive PATCH after it
    event = {
        "type": "MODIFIED",
        "object": {
            "apiVersion": "kopf.dev/v1",
            "kind": "ClusterKopfPeering",
            "metadata": {"name": NAME},
            "status": {ME: _peer(MY_PRIORITY), **peers},
        },
    }
    await peering.process_peering_event(
        raw_event=cast(Any, event),
        namespace=None,
        resource=cast(Any, None),
        identity=peering.Identity(ME),
        settings=settings,
        autoclean=False,
        stream_pressure=awake,
        conflicts_found=toggle,
    )


@pytest.fixture
def pause() -> Iterator[PeeringPause]:
    with following_peering() as followed:
        yield followed


async def test_a_higher_priority_peer_pauses_and_its_absence_resumes(pause: PeeringPause) -> None:
    toggle = Toggle(False)
    await _kopf_sees(toggle, {"newer": _peer(MY_PRIORITY + 1)})
    assert toggle.is_on() and pause.paused

    await _kopf_sees(toggle, {})
    assert toggle.is_off() and not pause.paused


async def test_a_peer_of_the_same_priority_pauses_both(pause: PeeringPause) -> None:
    toggle = Toggle(False)
    await _kopf_sees(toggle, {"twin": _peer(MY_PRIORITY)})
    assert toggle.is_on() and pause.paused


async def test_a_dead_or_lower_peer_leaves_the_replica_leading(pause: PeeringPause) -> None:
    toggle = Toggle(False)
    await _kopf_sees(toggle, {"gone": _peer(MY_PRIORITY + 1, seconds_ago=120), "low": _peer(1)})
    assert toggle.is_off() and not pause.paused


async def test_a_replica_in_a_peering_starts_paused_until_kopf_resumes_it() -> None:
    """Kopf starts a replica in a peering with its pause on (the toggle pre-activated) and logs
    only the resumption, so the follower starts paused too and hears of the resumption; the
    reconciler's watches start on that (`watches`)."""
    with following_peering(starts_paused=True) as pause:
        told: list[bool] = []
        pause.listeners.append(told.append)
        toggle = Toggle(True)
        assert pause.paused
        await _kopf_sees(toggle, {})
        assert toggle.is_off() and not pause.paused
        assert told == [False]


async def test_a_replica_that_starts_behind_a_higher_peer_stays_paused_without_a_word() -> None:
    """Kopf says nothing when the pause it started with stays on: the follower must not take
    that silence for leading."""
    with following_peering(starts_paused=True) as pause:
        told: list[bool] = []
        pause.listeners.append(told.append)
        toggle = Toggle(True)
        await _kopf_sees(toggle, {"newer": _peer(MY_PRIORITY + 1)})
        assert toggle.is_on() and pause.paused
        assert told == []


async def test_listeners_hear_each_change_once(pause: PeeringPause) -> None:
    told: list[bool] = []
    pause.listeners.append(told.append)
    toggle = Toggle(False)
    await _kopf_sees(toggle, {"newer": _peer(MY_PRIORITY + 1)})
    await _kopf_sees(toggle, {"newer": _peer(MY_PRIORITY + 1)})
    await _kopf_sees(toggle, {})
    assert told == [True, False]


def test_records_below_the_configured_level_are_read_then_dropped() -> None:
    """The logger is lowered to INFO so Kopf makes its INFO records, but a configuration that
    shows only warnings still shows only warnings from it."""
    logger = logging.getLogger(PEERING_LOGGER)
    before = logger.level
    logger.setLevel(logging.WARNING)
    try:
        shown: list[str] = []

        class Keep(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                shown.append(record.getMessage())

        keep = Keep()
        logger.addHandler(keep)
        try:
            with following_peering() as pause:
                assert logger.level == logging.INFO
                logger.info("Pausing operations in favour of [<Peer newer>].")
                assert pause.paused
                logger.warning("Pausing all operators, including self: [...]")
                logger.info("Resuming operations after the pause. ...")
                assert not pause.paused
        finally:
            logger.removeHandler(keep)
        assert shown == ["Pausing all operators, including self: [...]"]
        assert logger.level == logging.WARNING and not logger.filters
    finally:
        logger.setLevel(before)


async def test_a_paused_reconciler_makes_no_pass_when_a_timer_fires() -> None:
    """A timer that fires while paused makes no pass (the replica's watches stand still, what it
    holds is stale); one that fires while leading does. No request is made: the reconciler's
    client is never touched, and its passes are counted where they start."""
    paused = True
    reconciler = Reconciler(cast(Kube, None), PodSettings(), paused=lambda: paused)
    passes: list[tuple[str, str]] = []

    async def count(namespace: str, name: str) -> None:
        passes.append((namespace, name))

    reconciler.reconcile = count  # type: ignore[method-assign]
    reconciler.schedule("ns", "held", delay=0.01)
    await asyncio.sleep(0.1)
    assert passes == [] and not reconciler.timers and not reconciler.workers

    paused = False
    reconciler.schedule("ns", "held", delay=0.01)
    await asyncio.sleep(0.1)
    assert passes == [("ns", "held")]
    await reconciler.stop()


async def test_events_still_make_passes_while_paused() -> None:
    """What Kopf delivers, it delivers while leading (a paused Kopf watches nothing), so an
    event's pass is never held back by a pause this replica may have read late."""
    reconciler = Reconciler(cast(Kube, None), PodSettings(), paused=lambda: True)
    passes: list[tuple[str, str]] = []

    async def count(namespace: str, name: str) -> None:
        passes.append((namespace, name))

    reconciler.reconcile = count  # type: ignore[method-assign]
    reconciler.schedule("ns", "now")
    await asyncio.sleep(0.05)
    assert passes == [("ns", "now")]
    await reconciler.stop()
