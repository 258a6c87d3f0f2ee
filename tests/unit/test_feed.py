"""The store feed's rendering of watch events, without Kubernetes (no stream is started)."""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client

from allocbridge.cluster.watch import Changed, Listed
from allocbridge.store import AllocationStore
from allocbridge.store.feed import StoreFeed

EXAMPLES = Path(__file__).parents[2] / "examples"
UID = "8c3d9a1f-0000-4000-8000-000000000001"


def example(generation: int, version: int) -> dict[str, Any]:
    obj: dict[str, Any] = yaml.safe_load((EXAMPLES / "web.yaml").read_text())
    obj["metadata"].update(
        uid=UID, namespace="default", resourceVersion=str(version), generation=generation
    )
    return obj


@pytest.fixture
async def api() -> AsyncIterator[client.ApiClient]:
    """A client that is never used to call anything: the feed only keeps it."""
    unused = client.ApiClient()
    yield unused
    await unused.close()


def synced_feed(api: client.ApiClient) -> tuple[StoreFeed, AllocationStore]:
    store = AllocationStore()
    feed = StoreFeed(store, api, namespaces=("default",))
    feed._expected = {"allocations/default", "pods/default"}
    feed._relist("allocations/default", Listed([], 100))
    feed._relist("pods/default", Listed([], 100))
    return feed, store


def task_names(store: AllocationStore) -> list[str]:
    stored = store.get(UID)
    assert stored is not None
    return [task["Name"] for task in stored.wire["Job"]["TaskGroups"][0]["Tasks"]]


async def test_status_and_spec_changes_both_reach_the_store(api: client.ApiClient) -> None:
    feed, store = synced_feed(api)
    first = example(generation=1, version=120)
    feed._change(Changed("ADDED", first, 120))
    before = task_names(store)
    status_only = copy.deepcopy(first)
    status_only["metadata"]["resourceVersion"] = "121"
    status_only["status"] = {"clientStatus": "running"}
    feed._change(Changed("MODIFIED", status_only, 121))
    assert task_names(store) == before
    stored = store.get(UID)
    assert stored is not None and stored.wire["ClientStatus"] == "running"
    renamed = copy.deepcopy(status_only)
    renamed["metadata"].update(generation=2, resourceVersion="122")
    renamed["spec"]["tasks"][0]["name"] = "renamed"
    feed._change(Changed("MODIFIED", renamed, 122))
    assert task_names(store)[0] == "renamed"


async def test_a_deleted_allocation_leaves_nothing_behind(api: client.ApiClient) -> None:
    feed, store = synced_feed(api)
    feed._change(Changed("ADDED", example(generation=1, version=120), 120))
    feed._change(Changed("DELETED", example(generation=1, version=123), 123))
    assert store.get(UID) is None
