"""An exec that fails while its task stops is Nomad's "not running" close, not a fault.

The API server and the runtime report a container that ends or restarts under an exec in many
ways (a 500 upgrade "Invalid response status", a failed exec, a stream cut without an exit
status); the exec endpoint asks the actions whether the task stopped since the exec was asked
for (a pod read, `InContainer.stopped_since`), as the signal actions do.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any, NoReturn, cast

import aiohttp
import pytest
from aiohttp.test_utils import TestClient, TestServer
from allocations_fixture import SAMPLE, sample_store

from allocbridge.actions.lifecycle import Actions, ActionsSlot, Target
from allocbridge.api.context import PodClients
from allocbridge.api.server import create_app
from allocbridge.auth import AllowAll
from allocbridge.cluster.podexec import ExecError, PodExecutor
from allocbridge.lifecycle import Lifecycle
from allocbridge.telemetry import Metrics

RUNNING = SAMPLE[0][0]  # a running allocation with the task "server"
REFUSED = "Kubernetes refused the exec: 500 Invalid response status"


class FailingExecutor:
    """An API server that answers the exec's upgrade with a 500."""

    @asynccontextmanager
    async def open(
        self, namespace: str, pod: str, container: str, command: Sequence[str], *, tty: bool
    ) -> AsyncIterator[NoReturn]:
        raise ExecError(REFUSED, status=500)
        yield  # pragma: no cover - makes this an async generator

    async def close(self) -> None:
        pass


class Stopped:
    """The actions' answer to "did the task stop since?", with the questions asked."""

    def __init__(self, stopped: bool) -> None:
        self.stopped = stopped
        self.asked: list[tuple[Target, str]] = []

    async def stopped_since(self, target: Target, task: str, since: float) -> bool:
        self.asked.append((target, task))
        return self.stopped


async def close_of_failed_exec(actions: Stopped | None) -> tuple[int | None, str]:
    slot = ActionsSlot(cast(Actions, actions))
    app = create_app(
        Metrics(),
        store=sample_store(),
        authorizer=AllowAll(),
        actions=slot,
        pods=PodClients(executor=cast(PodExecutor, FailingExecutor())),
        lifecycle=Lifecycle(),
    )
    client: TestClient[Any, Any] = TestClient(TestServer(app))
    await client.start_server()
    try:
        query = {"task": "server", "command": '["echo","hi"]'}
        ws = await client.ws_connect(f"/v1/client/allocation/{RUNNING}/exec", params=query)
        reply = await ws.receive(timeout=30)
        assert reply.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED), reply
        return ws.close_code, str(reply.extra or "")
    finally:
        await client.close()


async def test_a_task_that_stopped_under_the_exec_closes_with_1008_not_running() -> None:
    stopped = Stopped(True)
    assert await close_of_failed_exec(stopped) == (1008, 'task "server" is not running.')
    assert [task for _, task in stopped.asked] == ["server"]


@pytest.mark.parametrize("actions", [Stopped(False), None])
async def test_a_task_that_ran_throughout_keeps_the_fault(actions: Stopped | None) -> None:
    """Running all along (or no Kubernetes client to ask): a real fault, 1011 with its text."""
    assert await close_of_failed_exec(actions) == (1011, REFUSED)
