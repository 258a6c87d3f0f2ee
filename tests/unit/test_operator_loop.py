"""The Kopf thread's event loop, and its creation of the peering (no Kubernetes: the operator
and the client are replaced; the cluster test `test_ha.py` creates a real peering)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any, cast

import pytest
import uvloop

from allocbridge import eventloop
from allocbridge.cluster.errors import from_status
from allocbridge.reconcile import runner
from allocbridge.reconcile.runner import OperatorThread


def test_the_kopf_thread_runs_on_uvloop_with_uvloops_tls(monkeypatch: pytest.MonkeyPatch) -> None:
    loops: list[asyncio.AbstractEventLoop] = []
    tls: list[bool] = []

    async def operate(self: OperatorThread) -> None:
        loops.append(asyncio.get_running_loop())
        tls.append(eventloop.uses_uvloop_tls())

    monkeypatch.setattr(OperatorThread, "_operate", operate)
    thread = OperatorThread(cast(Any, None), cast(Any, None), cast(Any, None))
    thread.start()
    thread.thread.join(10)
    assert thread.error is None
    assert len(loops) == 1 and isinstance(loops[0], eventloop.Loop)
    assert isinstance(loops[0], uvloop.Loop)
    assert tls == [True]


class _PeeringKube:
    """Answers `create_cluster_peering` from a script: a status to raise, or the result."""

    def __init__(self, *answers: int | bool) -> None:
        self.answers = list(answers)
        self.calls = 0

    async def create_cluster_peering(self, name: str, labels: dict[str, str]) -> bool:
        self.calls += 1
        answer = self.answers.pop(0)
        if isinstance(answer, bool):
            return answer
        raise from_status(answer, f"the API server answered {answer}")


@pytest.fixture
def no_delays(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner, "PEERING_RETRY_DELAYS", (0.0,))


async def test_the_peering_is_created_once_its_kind_is_served(
    no_delays: None, caplog: pytest.LogCaptureFixture
) -> None:
    kube = _PeeringKube(404, 404, True)  # the CRD applied in the same run is not served yet
    with caplog.at_level(logging.INFO, logger=runner.__name__):
        await runner.create_peering(cast(Any, kube), "allocbridge")
    assert kube.calls == 3
    assert [r.getMessage() for r in caplog.records][-1] == "ClusterKopfPeering created"


async def test_a_refused_peering_creation_is_logged_and_not_retried(
    no_delays: None, caplog: pytest.LogCaptureFixture
) -> None:
    kube = _PeeringKube(403)
    await runner.create_peering(cast(Any, kube), "allocbridge")
    assert kube.calls == 1
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert [getattr(r, "status", None) for r in errors] == [403]
