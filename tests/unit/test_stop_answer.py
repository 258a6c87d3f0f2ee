"""A stop answers once this replica's store shows it: `nomad alloc stop` reads the returned
evaluation at once, and a 404 there ends the command with an error.

The actions are a stand-in here (the stop itself is tested on the real control plane, in
tests/cluster/test_actions.py and the Go client's TestStop); this checks only when the answer
leaves, against the store the API reads.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, cast

import pytest
from aiohttp.test_utils import TestClient, TestServer
from allocations_fixture import SAMPLE, parked, sample_store

from allocbridge.actions.lifecycle import Actions, ActionsSlot, Target
from allocbridge.api.server import create_app
from allocbridge.auth import AllowAll
from allocbridge.store import AllocationStore
from allocbridge.telemetry import Metrics

ALLOC_ID = SAMPLE[0][0]
STOP_INDEX = 130  # the store starts at 120


class StopWrites:
    """Answers a stop as `Actions.stop` does: the evaluation and the index of its last write."""

    async def stop(self, target: Target, *, no_shutdown_delay: bool) -> tuple[str, int]:
        return "5d1b7c2e-0000-4000-8000-000000000001", STOP_INDEX


@pytest.fixture
async def store() -> AllocationStore:
    return sample_store(index=120)


@pytest.fixture
async def client(store: AllocationStore) -> AsyncIterator[TestClient[Any, Any]]:
    slot = ActionsSlot()
    slot.current = cast(Actions, StopWrites())
    app = create_app(Metrics(), store=store, authorizer=AllowAll(), actions=slot)
    test_client: TestClient[Any, Any] = TestClient(TestServer(app))
    await test_client.start_server()
    yield test_client
    await test_client.close()


async def test_the_answer_waits_until_the_store_shows_the_stop(
    client: TestClient[Any, Any], store: AllocationStore
) -> None:
    answer = asyncio.ensure_future(client.post(f"/v1/allocation/{ALLOC_ID}/stop"))
    await parked(store, 1)  # the answer waits on the store's index
    assert not answer.done(), "answered before the store showed the stop's write"
    store.advance(STOP_INDEX)
    response = await asyncio.wait_for(answer, 2.0)
    assert response.status == 200
    assert (await response.json())["Index"] == STOP_INDEX
    assert response.headers["X-Nomad-Index"] == str(STOP_INDEX)


async def test_a_store_already_past_the_stop_answers_at_once(
    client: TestClient[Any, Any], store: AllocationStore
) -> None:
    store.advance(STOP_INDEX + 5)
    response = await asyncio.wait_for(client.post(f"/v1/allocation/{ALLOC_ID}/stop"), 0.5)
    assert response.status == 200


async def test_pretty_indents_the_stop_answer_which_carries_its_index_alone(
    client: TestClient[Any, Any], store: AllocationStore
) -> None:
    store.advance(STOP_INDEX)
    response = await client.post(f"/v1/allocation/{ALLOC_ID}/stop?pretty")
    body = await response.text()
    assert body == (
        '{\n    "EvalID": "5d1b7c2e-0000-4000-8000-000000000001",\n'
        f'    "Index": {STOP_INDEX}\n}}\n'
    )
    assert response.headers["X-Nomad-Index"] == str(STOP_INDEX)
    assert "X-Nomad-KnownLeader" not in response.headers  # a write's setIndex, not setMeta
