"""The store feed's rendering of watch events, without Kubernetes (no stream is started)."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client

from allocbridge.cluster.watch import Changed, Listed, ObjectWatches
from allocbridge.model.sharedspecs import SharedSpecs
from allocbridge.store import AllocationStore
from allocbridge.store.feed import StoreFeed, _keyed, render

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
    feed = StoreFeed(store, ObjectWatches(api), namespaces=("default",))
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


def pod(version: int, **status: Any) -> dict[str, Any]:
    owner = {"kind": "Allocation", "name": "web-0", "uid": UID, "controller": True}
    return {
        "kind": "Pod",
        "metadata": {
            "name": "web-0",
            "namespace": "default",
            "resourceVersion": str(version),
            "ownerReferences": [owner],
        },
        "spec": {},
        "status": status,
    }


async def test_only_pod_changes_the_api_shows_render_the_allocation_again(
    api: client.ApiClient,
) -> None:
    feed, store = synced_feed(api)
    feed._change(Changed("ADDED", example(generation=1, version=120), 120))
    rendered = store.get(UID)
    feed._change(Changed("ADDED", pod(121, phase="Pending"), 121))
    bound = pod(122, phase="Pending", conditions=[{"type": "PodScheduled", "status": "True"}])
    feed._change(Changed("MODIFIED", bound, 122))
    assert store.get(UID) is rendered, "nothing the API shows changed"
    assert store.index == 120, "nor does the index: a parked query has nothing new to see"
    feed._change(Changed("MODIFIED", pod(123, phase="Running", podIP="10.0.0.9"), 123))
    running = store.get(UID)
    assert running is not rendered
    assert store.index == 123, "the pod's revision: parked queries on services and checks wake"
    feed._change(Changed("DELETED", pod(124, phase="Running", podIP="10.0.0.9"), 124))
    assert store.get(UID) is not running, "a deleted pod takes its address with it"


async def test_a_bookmark_moves_no_index_and_wakes_no_parked_query(
    api: client.ApiClient,
) -> None:
    """Bookmarks reach each replica's watch at its own moments: following them would give two
    replicas different indexes for the same data, and answer parked queries with nothing new."""
    feed, store = synced_feed(api)
    feed._change(Changed("ADDED", example(generation=1, version=120), 120))
    parked = asyncio.create_task(store.wait_for_index(120, timeout=5.0))
    await asyncio.sleep(0)

    feed._change(Changed("BOOKMARK", {"metadata": {"resourceVersion": "500"}}, 500))
    await asyncio.sleep(0.05)

    assert store.index == 120
    assert not parked.done(), "a bookmark answered a parked query"
    status = example(generation=1, version=501)
    status["status"] = {"clientStatus": "running"}
    feed._change(Changed("MODIFIED", status, 501))
    assert await asyncio.wait_for(parked, 1.0) == 501


async def test_a_pod_change_the_api_shows_moves_the_allocations_modify_index(
    api: client.ApiClient,
) -> None:
    """As a client's update does in Nomad: a blocking read of the allocation, which waits on
    its ModifyIndex, must wake when its address changes."""
    feed, store = synced_feed(api)
    feed._change(Changed("ADDED", example(generation=1, version=120), 120))
    seen = store.get(UID)
    assert seen is not None and seen.modify_index == 120
    feed._change(Changed("ADDED", pod(121, phase="Running", podIP="10.0.0.9"), 121))
    moved = store.get(UID)
    assert moved is not None and moved.modify_index == 121
    assert moved.wire["ModifyIndex"] == moved.stub["ModifyIndex"] == 121
    assert moved.wire["NetworkStatus"]["Address"] == "10.0.0.9"
    assert moved.wire["AllocModifyIndex"] == seen.wire["AllocModifyIndex"]


def with_uid(uid: str, generation: int = 1) -> dict[str, Any]:
    obj = example(generation=generation, version=120)
    obj["metadata"]["uid"] = uid
    return obj


def with_image(uid: str, image: str) -> dict[str, Any]:
    obj = with_uid(uid)
    obj["spec"]["tasks"][0]["config"]["image"] = image
    return obj


def test_a_spec_is_parsed_once_per_content() -> None:
    specs = SharedSpecs()
    first = specs.usable(with_uid("a")["spec"])
    assert first is not None
    assert specs.usable(with_uid("a")["spec"]) is first, "a status change parses nothing again"
    assert specs.usable(with_uid("b")["spec"]) is first, "nor another allocation of an equal spec"
    changed = specs.usable(with_image("a", "busybox:1.37")["spec"])
    assert changed is not None and changed is not first
    assert changed.tasks[0].config.image == "busybox:1.37"


def test_only_the_most_recently_used_specs_are_kept() -> None:
    specs = SharedSpecs(limit=2)
    a, b = (
        specs.usable(with_image("a", "a:1")["spec"]),
        specs.usable(with_image("b", "b:1")["spec"]),
    )
    assert specs.usable(with_image("a", "a:1")["spec"]) is a  # a is now the most recent
    specs.usable(with_image("c", "c:1")["spec"])  # and b, the oldest, goes
    assert specs.usable(with_image("a", "a:1")["spec"]) is a
    assert specs.usable(with_image("b", "b:1")["spec"]) is not b


def test_an_invalid_spec_is_not_usable() -> None:
    broken = with_uid("x")
    broken["spec"]["tasks"] = []
    assert SharedSpecs().usable(broken["spec"]) is None


async def test_allocations_of_one_spec_share_their_rendered_task_groups(
    api: client.ApiClient,
) -> None:
    """The store's memory: equal spec-derived parts are one object, and what is served is the
    same as an unshared render."""
    feed, store = synced_feed(api)
    first, second = with_uid(UID), with_uid("8c3d9a1f-0000-4000-8000-000000000002")
    second["metadata"]["name"] = "web-1"
    feed._change(Changed("ADDED", first, 120))
    feed._change(Changed("ADDED", second, 121))
    a, b = store.get(UID), store.get("8c3d9a1f-0000-4000-8000-000000000002")
    assert a is not None and b is not None
    assert a.wire["Job"]["TaskGroups"] is b.wire["Job"]["TaskGroups"]
    assert a.wire["Resources"] is b.wire["Resources"]
    assert a.wire_json == render(first, None).wire_json


async def test_a_relist_renders_every_kept_allocation_again(api: client.ApiClient) -> None:
    """Allocations are kept as JSON between their events; a re-list of the pods (after the
    watch expired) renders them all from it, as they were."""
    feed, store = synced_feed(api)
    obj = example(generation=1, version=120)
    feed._change(Changed("ADDED", obj, 120))
    before = store.get(UID)
    feed._relist("pods/default", Listed([], 130))
    after = store.get(UID)
    assert before is not None and after is not None and after is not before
    assert after.wire_json == before.wire_json


async def test_a_list_of_packed_allocations_fills_the_store_as_a_list_of_objects(
    api: client.ApiClient,
) -> None:
    """The watch can hand the first list over packed (`ObjectWatches.allocations(pack=)`), so
    it never holds every object as a dict; the store gets the same allocations either way."""
    objects = [with_uid(UID), with_uid("8c3d9a1f-0000-4000-8000-000000000002")]
    objects[1]["metadata"]["name"] = "web-1"
    stores = []
    for items in (objects, [_keyed(obj) for obj in objects]):
        store = AllocationStore()
        feed = StoreFeed(store, ObjectWatches(api), namespaces=("default",))
        feed._expected = {"allocations/default", "pods/default"}
        feed._relist("pods/default", Listed([], 100))
        feed._relist("allocations/default", Listed(items, 100))
        stores.append(store)
    plain, packed = stores
    assert len(packed) == len(plain) == 2
    for obj in objects:
        uid = obj["metadata"]["uid"]
        a, b = plain.get(uid), packed.get(uid)
        assert a is not None and b is not None and a.wire_json == b.wire_json
