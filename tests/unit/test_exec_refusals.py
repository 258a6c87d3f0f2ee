"""Exec's refusals past the WebSocket upgrade: the failure `api.errors` answers over HTTP, sent
as the close frame's reason, with the close code its kind calls for (1008, 1011 or 1013).

No session opens in these tests: the executor is a stand-in that fails the test if used.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, cast

import aiohttp
from aiohttp.test_utils import TestClient, TestServer
from allocations_fixture import SAMPLE, sample_store

from allocbridge.api.context import PodClients
from allocbridge.api.exec import INTERNAL_ERROR, NOT_CONFIGURED, POLICY_VIOLATION, TRY_AGAIN_LATER
from allocbridge.api.server import create_app
from allocbridge.auth import (
    AllowAll,
    Authorizer,
    AuthUnavailableError,
    Caller,
    Capability,
    PermissionDeniedError,
)
from allocbridge.cluster.podexec import PodExecutor
from allocbridge.store import AllocationStore
from allocbridge.telemetry import Metrics

RUNNING = SAMPLE[0][0]  # a running allocation with the task "server"
UNKNOWN = "00000000-0000-4000-8000-00000000beef"


class NeverOpened:
    def open(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a refused exec opened a session")

    async def close(self) -> None:
        pass


class Refusing:
    """An authorizer that raises `error` for every check."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    async def check(self, caller: Caller, capability: Capability, namespace: str) -> None:
        raise self.error

    async def allowed_namespaces(
        self, caller: Caller, capability: Capability, candidates: Iterable[str]
    ) -> frozenset[str] | None:
        raise self.error


async def close_of(
    alloc: str,
    *,
    authorizer: Authorizer | None = None,
    store: AllocationStore | None = None,
    executor: bool = True,
) -> tuple[int | None, str]:
    pods = PodClients(executor=cast(PodExecutor, NeverOpened()) if executor else None)
    app = create_app(
        Metrics(),
        store=store or sample_store(),
        authorizer=authorizer or AllowAll(),
        pods=pods,
        sync_timeout=0.2,
    )
    client: TestClient[Any, Any] = TestClient(TestServer(app))
    await client.start_server()
    try:
        query = {"task": "server", "command": '["cat"]'}
        ws = await client.ws_connect(f"/v1/client/allocation/{alloc}/exec", params=query)
        reply = await ws.receive()
        while reply.type is aiohttp.WSMsgType.TEXT:  # a heartbeat could come first
            reply = await ws.receive()
        return ws.close_code, str(reply.extra or "")
    finally:
        await client.close()


async def test_a_denial_closes_1008_permission_denied() -> None:
    refusing = Refusing(PermissionDeniedError("no role binding"))
    assert await close_of(RUNNING, authorizer=refusing) == (POLICY_VIOLATION, "Permission denied")


async def test_an_authorization_outage_closes_1013_with_its_reason() -> None:
    refusing = Refusing(AuthUnavailableError("reviews time out"))
    expected = (TRY_AGAIN_LATER, "ACL check unavailable: reviews time out")
    assert await close_of(RUNNING, authorizer=refusing) == expected


async def test_an_unknown_allocation_closes_1008_with_nomads_text() -> None:
    assert await close_of(UNKNOWN) == (POLICY_VIOLATION, f'Unknown allocation "{UNKNOWN}"')


async def test_a_store_not_synced_closes_1011_no_cluster_leader() -> None:
    assert await close_of(RUNNING, store=sample_store(synced=False)) == (
        INTERNAL_ERROR,
        "No cluster leader",
    )


async def test_without_an_executor_exec_closes_1011() -> None:
    assert await close_of(RUNNING, executor=False) == (INTERNAL_ERROR, NOT_CONFIGURED)


async def test_the_upgrade_declines_compression_as_nomad_does() -> None:
    """A client that offers permessage-deflate (a browser does) gets plain frames."""
    app = create_app(
        Metrics(),
        store=sample_store(),
        authorizer=AllowAll(),
        pods=PodClients(executor=cast(PodExecutor, NeverOpened())),
        sync_timeout=0.2,
    )
    client: TestClient[Any, Any] = TestClient(TestServer(app))
    await client.start_server()
    try:
        query = {"task": "server", "command": '["cat"]'}
        ws = await client.ws_connect(
            f"/v1/client/allocation/{UNKNOWN}/exec", params=query, compress=15
        )
        assert ws.compress == 0
        await ws.close()
    finally:
        await client.close()
