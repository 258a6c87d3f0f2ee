"""The in-memory allocation store: contents, orders, pre-rendered forms and index waiters."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest
from allocations_fixture import SAMPLE, alloc_id, sample_store, stored, wire

from allocbridge.store import AllocationStore, StoredAllocation, encoding, stub_array
from allocbridge.store.allocation import RECENT_BODIES
from allocbridge.store.memory import hyphenated_prefix
from allocbridge.store.ordering import SortedIndex
from allocbridge.store.stubs import ALLOCATION_ZERO, filter_datum
from allocbridge.store.waiters import IndexWatch

STUB_KEYS = {
    "ClientDescription", "ClientStatus", "CreateIndex", "CreateTime", "DeploymentStatus",
    "DesiredDescription", "DesiredStatus", "DesiredTransition", "EvalID", "FollowupEvalID", "ID",
    "JobID", "JobType", "JobVersion", "ModifyIndex", "ModifyTime", "Name", "Namespace",
    "NextAllocation", "NodeID", "NodeName", "PreemptedAllocations", "PreemptedByAllocation",
    "RescheduleTracker", "TaskGroup", "TaskStates",
}  # fmt: skip


# -- StoredAllocation ---------------------------------------------------------------------------


def test_stub_has_every_field_with_zero_values_for_absent_ones() -> None:
    alloc = StoredAllocation.from_wire(
        {"ID": alloc_id(1), "Namespace": "default", "CreateIndex": 5}
    )
    assert set(alloc.stub) == STUB_KEYS
    assert alloc.stub["NextAllocation"] == ""
    assert alloc.stub["TaskStates"] is None
    assert alloc.stub["JobType"] == ""
    assert alloc.stub["JobVersion"] == 0
    assert alloc.stub["DesiredTransition"] == {
        "ForceReschedule": None,
        "Migrate": None,
        "MigrateDisablePlacement": None,
        "NoShutdownDelay": None,
        "Reschedule": None,
    }
    assert alloc.stub["CreateIndex"] == 5
    assert alloc.stub["ModifyIndex"] == 0


def test_stub_takes_job_type_and_version_from_the_job() -> None:
    alloc = stored(alloc_id(1), job_version=3)
    assert alloc.stub["JobType"] == "service"
    assert alloc.stub["JobVersion"] == 3
    assert alloc.stub["TaskStates"] is alloc.wire["TaskStates"]  # shared, not copied


@pytest.mark.parametrize("task_states", [True, False])
@pytest.mark.parametrize("resources", [True, False])
def test_pre_rendered_stub_json_equals_rendering_the_stub_dict(
    task_states: bool, resources: bool
) -> None:
    alloc = stored(alloc_id(1))
    rendered = alloc.stub_json(task_states=task_states, resources=resources)
    assert rendered == encoding.compact(
        alloc.stub_dict(task_states=task_states, resources=resources)
    )
    decoded = json.loads(rendered)
    assert ("AllocatedResources" in decoded) is resources
    assert (decoded["TaskStates"] is None) is not task_states
    assert list(decoded) == sorted(decoded)  # key-sorted, as Nomad's encoder writes


@pytest.mark.parametrize("task_states", [True, False])
@pytest.mark.parametrize("resources", [True, False])
@pytest.mark.parametrize("count", [0, 1, 3])
def test_stub_array_fragments_join_to_the_array_of_the_stubs(
    task_states: bool, resources: bool, count: int
) -> None:
    allocs = [stored(alloc_id(n)) for n in range(count)]
    allocs.append(StoredAllocation.from_wire({**wire(alloc_id(9)), "TaskStates": None}))
    for given in (allocs, iter(allocs)):  # a page's list, or an index's lazy scan
        fragments = stub_array(given, task_states=task_states, resources=resources)
        stubs = [a.stub_dict(task_states=task_states, resources=resources) for a in allocs]
        assert fragments.join() == encoding.compact(stubs)
        assert fragments.size() == len(fragments.join())
    assert stub_array([]).join() == b"[]"


def test_resources_are_left_out_when_the_allocation_has_none() -> None:
    data = wire(alloc_id(1))
    del data["AllocatedResources"]
    alloc = StoredAllocation.from_wire(data)
    assert "AllocatedResources" not in json.loads(alloc.stub_json(resources=True))
    assert "AllocatedResources" not in alloc.stub_dict(resources=True)


def test_wire_json_is_the_compact_wire_dict() -> None:
    alloc = stored(alloc_id(1))
    assert json.loads(alloc.wire_json) == alloc.wire
    kept = [getattr(alloc, name) for name in StoredAllocation.__slots__]
    assert alloc.wire_json not in kept, "the allocation keeps no copy of its body"
    assert not hasattr(alloc, "__dict__"), "slots only: no per-allocation dict"
    assert alloc.wire_json is alloc.wire_json, "the bodies read last are kept"


def test_only_the_bodies_read_last_are_kept() -> None:
    first = stored(alloc_id(1))
    body = first.wire_json
    for n in range(2, RECENT_BODIES + 2):  # as many others read since
        assert stored(alloc_id(n)).wire_json
    assert first.wire_json is not body and first.wire_json == body


def test_compact_json_is_the_standard_librarys_compact_form() -> None:
    """The bytes the store serves are what `json.dumps` (sorted, compact, UTF-8) would write,
    for a whole allocation and for the values only the standard library takes."""
    alloc = stored(alloc_id(1))
    expected = json.dumps(alloc.wire, separators=(",", ":"), sort_keys=True, ensure_ascii=False)
    assert alloc.wire_json == expected.encode()
    odd = {"b": "é\u2028<>&\x01", "a": [2**70, -0.0, 1.5e300]}  # 2**70: beyond orjson
    assert encoding.compact(odd) == json.dumps(
        odd, separators=(",", ":"), sort_keys=True, ensure_ascii=False
    ).encode("utf-8")


def test_filter_datum_fills_absent_top_level_fields() -> None:
    alloc = stored(alloc_id(1))
    datum = alloc.filter_datum
    assert set(ALLOCATION_ZERO) <= set(datum)
    assert datum["NextAllocation"] == ""
    assert datum["ClientStatus"] == "running"
    complete = {**ALLOCATION_ZERO, "ID": alloc_id(2)}
    assert filter_datum(complete) is complete


@pytest.mark.parametrize(
    ("ident", "override"),
    [
        ("8c3d9a1f", {}),
        (alloc_id(1).upper(), {}),
        (alloc_id(1), {"Namespace": "other"}),
        (alloc_id(1), {"CreateIndex": 7}),
        (alloc_id(1), {"ID": alloc_id(2)}),
    ],
)
def test_inconsistent_allocations_are_refused(ident: str, override: dict[str, Any]) -> None:
    data = {"ID": ident, "Namespace": "default", "CreateIndex": 100, **override}
    with pytest.raises(ValueError):
        StoredAllocation(
            id=ident,
            namespace="default",
            create_index=100,
            modify_index=0,
            alloc_modify_index=0,
            wire=data,
        )


# -- contents and orders ------------------------------------------------------------------------


def test_upsert_get_and_index() -> None:
    store = AllocationStore()
    assert store.index == 0 and not store.synced
    alloc = stored(alloc_id(1), create_index=10, modify_index=12)
    store.upsert(alloc)
    assert store.get(alloc.id) is alloc
    assert store.index == 12
    assert len(store) == 1
    store.upsert(stored(alloc_id(2), create_index=5))  # an older one does not move the index back
    assert store.index == 12


def test_upsert_replaces_in_every_order() -> None:
    store = sample_store()
    ident, options = SAMPLE[0]
    newer = stored(ident, **{**options, "modify_index": 130, "client_status": "failed"})
    store.upsert(newer)
    assert store.get(ident) is newer
    assert [a for a in store.chronological() if a.id == ident] == [newer]
    assert [a for a in store.chronological("default") if a.id == ident] == [newer]
    assert [a for a in store.by_id() if a.id == ident] == [newer]
    assert store.index == 130


def test_remove_forgets_and_moves_the_index() -> None:
    store = sample_store()
    ident, _ = SAMPLE[4]  # the team-a one with head "aa"
    removed = store.remove(ident, 150)
    assert removed is not None and removed.id == ident
    assert store.get(ident) is None
    assert store.index == 150
    assert ident not in [a.id for a in store.chronological()]
    assert ident not in [a.id for a in store.by_id("aa")]
    assert store.remove(ident, 140) is None
    assert store.index == 150


def test_namespaces_follow_contents() -> None:
    store = sample_store()
    assert store.namespaces() == {"default", "team-a"}
    for ident, options in SAMPLE:
        if options.get("namespace") == "team-a":
            store.remove(ident, 200)
    assert store.namespaces() == {"default"}
    assert list(store.chronological("team-a")) == []


def test_advance_never_goes_back() -> None:
    store = AllocationStore()
    store.advance(50)
    store.advance(40)
    assert store.index == 50


def test_replace_all_swaps_contents_and_marks_synced() -> None:
    store = sample_store(synced=False)
    assert not store.synced
    keep = stored(alloc_id(99), create_index=300)
    store.replace_all([keep], 310)
    assert store.synced
    assert [a.id for a in store.chronological()] == [keep.id]
    assert store.index == 310


def test_replace_all_keeps_the_last_of_duplicates_and_matches_upserts() -> None:
    first = stored(alloc_id(1), create_index=10)
    again = stored(alloc_id(1), create_index=10, modify_index=12)
    others = [stored(alloc_id(n), create_index=20 - n, namespace=f"ns{n % 2}") for n in range(2, 9)]
    bulk = AllocationStore()
    bulk.replace_all([first, *others, again], 0)
    one_by_one = AllocationStore()
    for alloc in [first, *others, again]:
        one_by_one.upsert(alloc)
    assert bulk.get(first.id) is again
    assert bulk.index == one_by_one.index == 20 - 2
    for namespace in (None, "default", "ns0", "ns1"):
        assert list(bulk.chronological(namespace)) == list(one_by_one.chronological(namespace))
    assert list(bulk.by_id()) == list(one_by_one.by_id())
    assert bulk.namespaces() == one_by_one.namespaces()


def _summed_stubs(store: AllocationStore, namespace: str | None, *, task_states: bool) -> int:
    return sum(len(a.stub_json(task_states=task_states)) for a in store.chronological(namespace))


def _assert_stub_sizes_are_the_stubs(store: AllocationStore) -> None:
    for namespace in (None, "default", "team-a", "elsewhere"):
        for task_states in (True, False):
            expected = _summed_stubs(store, namespace, task_states=task_states)
            assert store.stubs_size(namespace, task_states=task_states) == expected
        assert store.count(namespace) == len(list(store.chronological(namespace)))


def test_stubs_size_follows_every_change() -> None:
    """What a whole list's Content-Length is computed from: the sum of the stubs it sends,
    kept up to date by every change instead of measured per request."""
    store = sample_store()
    _assert_stub_sizes_are_the_stubs(store)
    ident, options = SAMPLE[0]
    store.upsert(stored(ident, **{**options, "modify_index": 130, "client_status": "failed"}))
    _assert_stub_sizes_are_the_stubs(store)  # replaced in place, its stub's size changed
    store.upsert(stored(ident, **{**options, "modify_index": 131, "namespace": "elsewhere"}))
    _assert_stub_sizes_are_the_stubs(store)  # moved to another namespace
    no_states = wire(alloc_id(40), create_index=140, namespace="team-a")
    no_states["TaskStates"] = None
    store.upsert(StoredAllocation.from_wire(no_states))
    _assert_stub_sizes_are_the_stubs(store)  # its tail is the constant null one
    store.remove(ident, 150)
    _assert_stub_sizes_are_the_stubs(store)  # "elsewhere" is empty again
    assert store.stubs_size("elsewhere") == 0
    for other, _ in SAMPLE[1:]:
        store.remove(other, 160)
    _assert_stub_sizes_are_the_stubs(store)
    store.replace_all([stored(alloc_id(n), create_index=200 + n) for n in range(5)], 210)
    _assert_stub_sizes_are_the_stubs(store)


def test_chronological_order_per_namespace_and_overall() -> None:
    store = sample_store()
    everything = list(store.chronological())
    assert [(a.create_index, a.id) for a in everything] == sorted(
        (a.create_index, a.id) for a in everything
    )
    default = list(store.chronological("default"))
    assert {a.namespace for a in default} == {"default"}
    assert len(default) == 4
    assert list(store.chronological("default", reverse=True)) == default[::-1]
    assert list(store.chronological("nope")) == []


def test_chronological_start_resumes_inclusively() -> None:
    store = sample_store()
    everything = list(store.chronological())
    third = everything[2]
    key = (third.create_index, third.id)
    assert list(store.chronological(start=key)) == everything[2:]
    assert list(store.chronological(start=key, reverse=True)) == everything[:3][::-1]
    # A key that is not there resumes at the next one in walking order.
    assert list(store.chronological(start=(100, ""))) == everything[1:]


def test_by_id_prefix_ranges() -> None:
    store = sample_store()
    ids = sorted(ident for ident, _ in SAMPLE)
    assert [a.id for a in store.by_id()] == ids
    assert [a.id for a in store.by_id("aa")] == [i for i in ids if i.startswith("aa")]
    assert [a.id for a in store.by_id("aa", namespace="team-a")] == [SAMPLE[4][0]]
    assert [a.id for a in store.by_id("aa", reverse=True)] == [
        i for i in ids if i.startswith("aa")
    ][::-1]
    full = SAMPLE[0][0].replace("-", "")
    assert [a.id for a in store.by_id(full)] == [SAMPLE[0][0]]
    assert list(store.by_id(full + "00")) == []  # longer than a UUID: nothing matches
    assert list(store.by_id("ee")) == []


def test_hyphenated_prefix() -> None:
    assert hyphenated_prefix("") == ""
    assert hyphenated_prefix("abcdef01") == "abcdef01"
    assert hyphenated_prefix("abcdef0123") == "abcdef01-23"
    assert hyphenated_prefix("0" * 32) == "00000000-0000-0000-0000-000000000000"
    assert hyphenated_prefix("0" * 34) is None


def test_sorted_index_scan_is_a_snapshot() -> None:
    index: SortedIndex[str, int] = SortedIndex()
    for n, key in enumerate(["c", "a", "b", "d"]):
        index.put(key, n)
    walk = index.scan()
    index.discard("a")
    index.put("b", 10)
    assert list(walk) == [1, 2, 0, 3]
    assert list(index.scan()) == [10, 0, 3]
    assert list(index.scan(lower="b", upper="d")) == [10, 0]
    assert list(index.scan(start="bb")) == [0, 3]
    assert list(index.scan(start="bb", reverse=True)) == [10]
    assert len(index) == 3


# -- waiters ------------------------------------------------------------------------------------


async def test_waiter_parked_on_the_current_index_wakes_on_upsert() -> None:
    store = sample_store()
    current = store.index
    waiter = asyncio.create_task(store.wait_for_index(current, 10))
    await asyncio.sleep(0.01)
    assert not waiter.done()
    assert store.parked == 1
    store.upsert(stored(alloc_id(50), create_index=current + 1))
    assert await asyncio.wait_for(waiter, 1) == current + 1
    assert store.parked == 0


async def test_wait_returns_at_once_when_the_index_is_already_past() -> None:
    store = sample_store()
    answer = await asyncio.wait_for(store.wait_for_index(store.index - 1, 300), 5)
    assert answer == store.index  # within 5 s: it did not wait out its 300


async def test_wait_times_out_with_the_current_index() -> None:
    store = sample_store()
    started = time.monotonic()
    assert await store.wait_for_index(store.index, 0.05) == store.index
    assert 0.04 <= time.monotonic() - started < 1
    assert store.parked == 0


async def test_waiter_ahead_of_the_index_parks_again_until_it_is_reached() -> None:
    store = sample_store()
    target = store.index + 2
    waiter = asyncio.create_task(store.wait_for_index(target, 10))
    await asyncio.sleep(0.01)
    store.advance(target)  # not past it yet
    await asyncio.sleep(0.01)
    assert not waiter.done()
    store.advance(target + 1)
    assert await asyncio.wait_for(waiter, 1) == target + 1


async def test_five_thousand_parked_waiters_all_wake() -> None:
    store = sample_store()
    current = store.index
    waiters = [asyncio.create_task(store.wait_for_index(current, 30)) for _ in range(5000)]
    await asyncio.sleep(0.05)
    assert store.parked == 5000
    started = time.monotonic()
    store.advance(current + 1)
    results = await asyncio.wait_for(asyncio.gather(*waiters), 5)
    assert results == [current + 1] * 5000
    assert time.monotonic() - started < 2
    assert store.parked == 0


async def test_cancelled_waiters_leave_nothing_behind() -> None:
    watch = IndexWatch()
    waiter = asyncio.create_task(watch.wait_for_index(0, 10))
    await asyncio.sleep(0.01)
    assert watch.parked == 1
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert watch.parked == 0


async def test_close_releases_everyone_now_and_later() -> None:
    store = sample_store()
    waiters = [asyncio.create_task(store.wait_for_index(store.index, 30)) for _ in range(10)]
    await asyncio.sleep(0.01)
    store.close()
    assert await asyncio.wait_for(asyncio.gather(*waiters), 1) == [store.index] * 10
    assert await asyncio.wait_for(store.wait_for_index(store.index, 300), 5) == store.index


async def test_wait_synced() -> None:
    store = AllocationStore()
    assert not await store.wait_synced(0.01)
    waiter = asyncio.create_task(store.wait_synced(5))
    await asyncio.sleep(0.01)
    store.replace_all([], 1)
    assert await asyncio.wait_for(waiter, 1)
    other = AllocationStore()
    other.mark_synced()
    assert await other.wait_synced(0)


def test_sorted_index_long_scans_are_lazy_snapshots_in_both_directions() -> None:
    index: SortedIndex[tuple[int, str], int] = SortedIndex()
    for n in range(1000):
        index.put((n, "x"), n)
    forward = index.scan(start=(100, "x"))
    backward = index.scan(start=(899, "x"), reverse=True)
    index.discard((500, "x"))
    index.put((2000, "x"), 2000)
    assert list(forward) == list(range(100, 1000))
    assert list(backward) == list(range(899, -1, -1))
    assert list(index.scan(lower=(10, ""), upper=(990, ""))) == [
        n for n in range(10, 990) if n != 500
    ]
    assert next(index.scan(reverse=True)) == 2000
    assert len(index) == 1000
