"""`/v1/client/allocation/:id/stats`: a kubelet summary mapped to Nomad's AllocResourceUsage."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from allocations_fixture import SAMPLE, sample_store

from allocbridge.api.context import NodeStats, PodClients
from allocbridge.api.server import create_app
from allocbridge.auth import AllowAll
from allocbridge.cluster.errors import KubernetesError, UnavailableError, from_status
from allocbridge.cluster.nodestats import NodeStatsReader
from allocbridge.model.usage import alloc_usage, find_pod
from allocbridge.store import AllocationStore
from allocbridge.telemetry import Metrics

MIB = 1024 * 1024
API = SAMPLE[2][0]  # tasks "api" and "sidecar", default namespace, on node-1


def container(name: str, *, nano_cores: int, rss: int, usage: int, working_set: int) -> Any:
    return {
        "name": name,
        "startTime": "2026-11-25T12:00:00Z",
        "cpu": {"time": "2026-11-25T12:00:10Z", "usageNanoCores": nano_cores},
        "memory": {
            "time": "2026-11-25T12:00:11.5Z",
            "usageBytes": usage,
            "workingSetBytes": working_set,
            "rssBytes": rss,
        },
    }


SUMMARY: dict[str, Any] = {
    "node": {"nodeName": "node-1"},
    "pods": [
        {"podRef": {"name": "other", "namespace": "default", "uid": "x"}, "containers": []},
        {
            "podRef": {"name": "api-0", "namespace": "default", "uid": "y"},
            "containers": [
                container(
                    "api",
                    nano_cores=250_000_000,
                    rss=40 * MIB,
                    usage=64 * MIB,
                    working_set=50 * MIB,
                ),
                container(
                    "sidecar",
                    nano_cores=50_000_000,
                    rss=8 * MIB,
                    usage=10 * MIB,
                    working_set=10 * MIB,
                ),
                container("not-a-task", nano_cores=1, rss=1, usage=1, working_set=1),
            ],
        },
    ],
}


def test_a_summary_maps_to_alloc_resource_usage() -> None:
    pod = find_pod(SUMMARY, "default", "api-0")
    assert pod is not None
    usage = alloc_usage(pod, ["api", "sidecar"], mhz_per_cpu=2000)
    api = usage["Tasks"]["api"]["ResourceUsage"]
    assert api["MemoryStats"]["RSS"] == 40 * MIB
    assert api["MemoryStats"]["Usage"] == 64 * MIB
    assert api["MemoryStats"]["Cache"] == 14 * MIB  # usage outside the working set
    assert api["MemoryStats"]["Measured"] == ["RSS", "Cache", "Usage"]
    assert api["CpuStats"]["Percent"] == pytest.approx(25.0)
    assert api["CpuStats"]["TotalTicks"] == pytest.approx(500.0)  # a quarter of 2000 MHz
    assert api["CpuStats"]["Measured"] == ["Percent"]
    assert set(usage["Tasks"]) == {"api", "sidecar"}
    total = usage["ResourceUsage"]
    assert total["MemoryStats"]["RSS"] == 48 * MIB
    assert total["CpuStats"]["TotalTicks"] == pytest.approx(600.0)
    assert usage["Timestamp"] == 1_795_608_011_500_000_000
    assert usage["Tasks"]["api"]["Timestamp"] == usage["Timestamp"]
    only = alloc_usage(pod, ["api", "sidecar"], mhz_per_cpu=2000, task="sidecar")
    assert set(only["Tasks"]) == {"sidecar"}
    assert find_pod(SUMMARY, "team-a", "api-0") is None


def test_unmeasured_fields_are_zero_and_not_measured() -> None:
    usage = alloc_usage({"containers": [{"name": "t"}]}, ["t"], mhz_per_cpu=1000)
    stats = usage["Tasks"]["t"]["ResourceUsage"]
    assert stats["MemoryStats"]["RSS"] == 0 and stats["MemoryStats"]["Measured"] is None
    assert stats["CpuStats"]["TotalTicks"] == 0 and stats["CpuStats"]["Measured"] is None
    assert usage["Tasks"]["t"]["Timestamp"] == 0


class Summaries(NodeStatsReader):
    """Answers each node's summary from a dict, or fails with `error`."""

    def __init__(
        self, summary: dict[str, Any] | None, error: KubernetesError | None = None
    ) -> None:
        super().__init__(lambda: None)
        self.document = summary
        self.error = error
        self.nodes: list[str] = []

    async def summary(self, node: str) -> dict[str, Any]:
        self.nodes.append(node)
        if self.error is not None:
            raise self.error
        assert self.document is not None
        return self.document


def store_with_pod_name() -> AllocationStore:
    store = sample_store()
    found = store.get(API)
    assert found is not None
    store.upsert(dataclasses.replace(found, object_name="api-0"))
    return store


async def stats_of(reader: NodeStatsReader | None, query: str = "") -> tuple[int, Any]:
    pods = PodClients(stats=None if reader is None else NodeStats(reader, mhz_per_cpu=1000))
    app = create_app(Metrics(), store=store_with_pod_name(), authorizer=AllowAll(), pods=pods)
    client: TestClient[Any, Any] = TestClient(TestServer(app))
    await client.start_server()
    try:
        response = await client.get(f"/v1/client/allocation/{API}/stats{query}")
        body = await response.json() if response.status == 200 else await response.text()
        return response.status, body
    finally:
        await client.close()


async def test_the_endpoint_answers_from_the_nodes_summary() -> None:
    reader = Summaries(SUMMARY)
    status, body = await stats_of(reader)
    assert status == 200, body
    assert set(body["Tasks"]) == {"api", "sidecar"}
    assert reader.nodes == ["node-1"]
    status, body = await stats_of(Summaries(SUMMARY), "?task=api")
    assert (status, set(body["Tasks"])) == (200, {"api"})
    status, body = await stats_of(Summaries(SUMMARY), "?task=nope")
    assert (status, body) == (400, 'unknown task name "nope"')


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (from_status(404, "the server could not find the requested resource"), 501),
        (from_status(500, "address not allowed"), 501),
        (UnavailableError("cannot reach the Kubernetes API for stats: refused"), 503),
        (from_status(403, "forbidden"), 500),
    ],
)
async def test_no_stats_is_a_5xx_that_says_why(error: KubernetesError, status: int) -> None:
    found, body = await stats_of(Summaries(None, error))
    assert found == status
    assert "node-1" in body and error.message in body


async def test_a_pod_the_node_does_not_report_and_no_reader() -> None:
    status, body = await stats_of(Summaries({"pods": []}))
    assert status == 503 and "no stats for the allocation's pod" in body
    assert (await stats_of(None))[0] == 503
