"""The read-only jobs view (`/v1/jobs`, `/v1/job/:id/allocations`) over a store of wire dicts."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from allocations_fixture import SAMPLE, alloc_id, parked, sample_store, stored

from allocbridge.api.server import create_app
from allocbridge.auth import (
    ALL_NAMESPACES,
    AllowAll,
    Authorizer,
    Caller,
    Capability,
    PermissionDeniedError,
)
from allocbridge.store import AllocationStore
from allocbridge.store.jobs import job_status
from allocbridge.telemetry import Metrics


class OneNamespace:
    """`read-job` in `team-a` only."""

    async def check(self, caller: Caller, capability: Capability, namespace: str) -> None:
        if capability != "read-job" or namespace not in ("team-a", ALL_NAMESPACES):
            raise PermissionDeniedError("no")

    async def allowed_namespaces(
        self, caller: Caller, capability: Capability, candidates: Iterable[str]
    ) -> frozenset[str] | None:
        return frozenset(candidates) & {"team-a"}


async def serve(store: AllocationStore, authorizer: Authorizer) -> TestClient[Any, Any]:
    app = create_app(Metrics(), store=store, authorizer=authorizer, sync_timeout=1.0)
    client: TestClient[Any, Any] = TestClient(TestServer(app))
    await client.start_server()
    return client


@pytest.fixture
async def store() -> AllocationStore:
    return sample_store()


@pytest.fixture
async def client(store: AllocationStore) -> AsyncIterator[TestClient[Any, Any]]:
    test_client = await serve(store, AllowAll())
    yield test_client
    await test_client.close()


async def jobs(client: TestClient[Any, Any], query: str = "") -> list[dict[str, Any]]:
    response = await client.get(f"/v1/jobs{query}")
    assert response.status == 200, await response.text()
    body: list[dict[str, Any]] = await response.json()
    return body


async def test_jobs_are_the_ones_allocations_name(client: TestClient[Any, Any]) -> None:
    listed = await jobs(client)
    assert [j["ID"] for j in listed] == ["api", "batch", "web"]  # default namespace, by ID
    web = listed[2]
    assert (web["Namespace"], web["Type"], web["Name"]) == ("default", "service", "web")
    assert web["Status"] == "running"  # one running, one complete
    assert web["JobSummary"]["Summary"] == {
        "web": {
            "Queued": 0,
            "Complete": 1,
            "Failed": 0,
            "Running": 1,
            "Starting": 0,
            "Lost": 0,
            "Unknown": 0,
        }
    }
    assert (web["CreateIndex"], web["ModifyIndex"]) == (101, 102)
    assert web["Meta"] == {"owner": "platform"}
    assert listed[1]["Status"] == "dead"  # its only allocation failed


async def test_jobs_prefix_namespace_and_paging(client: TestClient[Any, Any]) -> None:
    assert [j["ID"] for j in await jobs(client, "?prefix=w")] == ["web"]
    assert await jobs(client, "?prefix=x") == []
    assert [j["ID"] for j in await jobs(client, "?namespace=team-a")] == ["cron", "web"]
    everywhere = await jobs(client, "?namespace=*")
    assert [(j["Namespace"], j["ID"]) for j in everywhere] == [
        ("default", "api"),
        ("default", "batch"),
        ("default", "web"),
        ("team-a", "cron"),
        ("team-a", "web"),
    ]
    response = await client.get("/v1/jobs?namespace=*&per_page=2")
    assert [j["ID"] for j in await response.json()] == ["api", "batch"]
    token = response.headers["X-Nomad-NextToken"]
    assert token == "default.web"
    rest = await jobs(client, f"?namespace=*&per_page=2&next_token={token}")
    assert [(j["Namespace"], j["ID"]) for j in rest] == [("default", "web"), ("team-a", "cron")]
    backwards = await jobs(client, "?namespace=*&reverse=true&per_page=1")
    assert [(j["Namespace"], j["ID"]) for j in backwards] == [("team-a", "web")]
    assert [j["ID"] for j in await jobs(client, '?filter=Status == "dead"')] == ["batch"]


async def test_jobs_bad_input_is_400(client: TestClient[Any, Any]) -> None:
    response = await client.get("/v1/jobs?per_page=x")
    assert response.status == 400
    response = await client.get("/v1/jobs?filter=Status ==")
    assert response.status == 400
    assert "failed to read filter expression" in await response.text()


async def test_job_allocations_are_stubs_of_its_allocations(client: TestClient[Any, Any]) -> None:
    response = await client.get("/v1/job/web/allocations")
    assert response.status == 200
    assert int(response.headers["X-Nomad-Index"]) >= 1
    stubs = await response.json()
    assert [s["ID"] for s in stubs] == [SAMPLE[0][0], SAMPLE[1][0]]
    listed = await (await client.get("/v1/allocations")).json()
    by_id = {s["ID"]: s for s in listed}
    assert stubs == [by_id[s["ID"]] for s in stubs], "the same shape as /v1/allocations items"
    team = await (await client.get("/v1/job/web/allocations?namespace=team-a")).json()
    assert [s["ID"] for s in team] == [SAMPLE[4][0]]
    assert await (await client.get("/v1/job/nothing/allocations")).json() == []


async def test_jobs_need_read_job(store: AllocationStore) -> None:
    client = await serve(store, OneNamespace())
    try:
        assert (await client.get("/v1/jobs")).status == 403
        assert (await client.get("/v1/job/web/allocations")).status == 403
        listed = await (await client.get("/v1/jobs?namespace=*")).json()
        assert {j["Namespace"] for j in listed} == {"team-a"}
        team = await (await client.get("/v1/job/web/allocations?namespace=team-a")).json()
        assert len(team) == 1
    finally:
        await client.close()


async def test_job_allocations_block_until_a_change(
    client: TestClient[Any, Any], store: AllocationStore
) -> None:
    index = store.index
    waiting = asyncio.ensure_future(client.get(f"/v1/job/fresh/allocations?index={index}"))
    await parked(store, 1)
    new = alloc_id(99)
    store.upsert(stored(new, create_index=index + 1, job_id="fresh"))
    response = await waiting
    assert [s["ID"] for s in await response.json()] == [new]
    assert int(response.headers["X-Nomad-Index"]) == index + 1


def test_store_follows_a_job_through_changes() -> None:
    store = sample_store()
    first = SAMPLE[0][0]
    assert [a.id for a in store.job_allocations("default", "web")] == [first, SAMPLE[1][0]]
    store.upsert(stored(first, create_index=101, modify_index=130, job_id="moved"))
    assert [a.id for a in store.job_allocations("default", "web")] == [SAMPLE[1][0]]
    assert [a.id for a in store.job_allocations("default", "moved")] == [first]
    store.remove(first, 131)
    assert ("default", "moved") not in store.jobs()
    assert store.job_allocations("default", "moved") == []


def test_job_status_from_client_and_desired_status() -> None:
    running = stored(alloc_id(1), client_status="running")
    pending = stored(alloc_id(2), client_status="pending")
    stopping = stored(alloc_id(3), client_status="running", desired_status="stop")
    done = stored(alloc_id(4), client_status="complete")
    assert job_status([running, done]) == "running"
    assert job_status([pending]) == "running"
    assert job_status([stopping, done]) == "dead"
    assert job_status([]) == "pending"
