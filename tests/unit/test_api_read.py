"""The read side of the `/v1` API against a store fed with wire objects."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Iterable
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp.test_utils import TestClient, TestServer
from allocations_fixture import SAMPLE, alloc_id, parked, sample_store, stored

from allocbridge.api import answers
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
from allocbridge.store.feed import render
from allocbridge.telemetry import Metrics

LOOKUP = "alloc lookup failed: index error: "
META = ("X-Nomad-Index", "X-Nomad-KnownLeader", "X-Nomad-LastContact")
DEFAULT_IDS = [ident for ident, options in SAMPLE if options.get("namespace") is None]
FIRST = SAMPLE[0][0]  # default namespace, CreateIndex 101
TEAM_A = SAMPLE[4][0]  # namespace team-a


class ScopedAuthorizer:
    """Tokens grant `read-job` in some namespaces; records what it was asked."""

    def __init__(self, grants: dict[str, set[str]]) -> None:
        self.grants = grants
        self.calls: list[tuple[str | None, str, str]] = []
        self.candidates: list[frozenset[str]] = []  # what each `allowed_namespaces` weighed

    async def check(self, caller: Caller, capability: Capability, namespace: str) -> None:
        self.calls.append((caller.token, capability, namespace))
        granted = self.grants.get(caller.token or "")
        if granted is None:
            raise PermissionDeniedError("unknown token")
        if namespace == ALL_NAMESPACES and granted:
            return
        if namespace not in granted:
            raise PermissionDeniedError(f"no {capability} in {namespace}")

    async def allowed_namespaces(
        self, caller: Caller, capability: Capability, candidates: Iterable[str]
    ) -> frozenset[str] | None:
        granted = self.grants.get(caller.token or "")
        if granted is None:
            raise PermissionDeniedError("unknown token")
        self.candidates.append(frozenset(candidates))
        return frozenset(candidates) & frozenset(granted)


async def serve(
    store: AllocationStore | None = None,
    authorizer: Authorizer | None = None,
    sync_timeout: float = 1.0,
) -> TestClient[Any, Any]:
    app = create_app(
        Metrics(),
        store=sample_store() if store is None else store,
        authorizer=AllowAll() if authorizer is None else authorizer,
        sync_timeout=sync_timeout,
    )
    client: TestClient[Any, Any] = TestClient(TestServer(app))
    await client.start_server()
    return client


@pytest.fixture
async def store() -> AllocationStore:
    return sample_store()


@pytest.fixture
async def client(store: AllocationStore) -> AsyncIterator[TestClient[Any, Any]]:
    test_client = await serve(store)
    yield test_client
    await test_client.close()


async def text_of(client: TestClient[Any, Any], method: str, path: str) -> tuple[int, str]:
    response = await client.request(method, path)
    return response.status, await response.text()


# -- list ---------------------------------------------------------------------------------------


async def test_list_default_namespace_in_chronological_order(
    client: TestClient[Any, Any], store: AllocationStore
) -> None:
    response = await client.get("/v1/allocations")
    assert response.status == 200
    assert response.headers["Content-Type"] == "application/json"
    assert response.headers["X-Nomad-Index"] == str(store.index)
    assert response.headers["X-Nomad-KnownLeader"] == "true"
    assert response.headers["X-Nomad-LastContact"] == "0"
    assert "X-Nomad-NextToken" not in response.headers
    body = await response.json()
    expected = sorted(
        (options["create_index"], ident)
        for ident, options in SAMPLE
        if options.get("namespace") is None
    )
    assert [(stub["CreateIndex"], stub["ID"]) for stub in body] == expected
    first = body[0]
    assert first["Namespace"] == "default"
    assert first["TaskStates"]["server"]["State"] == "dead"  # the failed batch allocation
    assert "AllocatedResources" not in first
    assert "Job" not in first
    assert first["JobType"] == "service"


async def test_list_is_compact_and_pretty_on_request(client: TestClient[Any, Any]) -> None:
    compact = await (await client.get("/v1/allocations")).read()
    assert b"\n" not in compact and b'": ' not in compact
    pretty = await (await client.get("/v1/allocations?pretty")).read()
    assert pretty.endswith(b"]\n")
    assert b'\n    {\n        "ClientDescription": ' in pretty
    assert json.loads(pretty) == json.loads(compact)


async def test_list_everything_and_other_namespaces(client: TestClient[Any, Any]) -> None:
    everything = await (await client.get("/v1/allocations?namespace=*")).json()
    assert len(everything) == len(SAMPLE)
    assert [s["CreateIndex"] for s in everything] == sorted(s["CreateIndex"] for s in everything)
    team = await (await client.get("/v1/allocations?namespace=team-a")).json()
    assert {s["Namespace"] for s in team} == {"team-a"}
    empty = await client.get("/v1/allocations?namespace=nobody")
    assert empty.status == 200
    assert await empty.read() == b"[]"
    assert all(name in empty.headers for name in META)


async def test_list_reverse(client: TestClient[Any, Any]) -> None:
    forward = await (await client.get("/v1/allocations")).json()
    backward = await (await client.get("/v1/allocations?reverse=true")).json()
    assert backward == forward[::-1]


async def test_list_prefix_sorts_by_id(client: TestClient[Any, Any]) -> None:
    body = await (await client.get("/v1/allocations?prefix=aa&namespace=*")).json()
    assert [s["ID"] for s in body] == sorted(i for i, _ in SAMPLE if i.startswith("aa"))
    upper = await (await client.get("/v1/allocations?prefix=AA")).json()
    assert [s["ID"] for s in upper] == [FIRST]  # default namespace only
    by_id = await (await client.get("/v1/allocations?prefix=-")).json()
    assert [s["ID"] for s in by_id] == sorted(DEFAULT_IDS)


@pytest.mark.parametrize(
    ("query", "message"),
    [
        (
            "prefix=abc",
            "alloc lookup failed: index error: Input (without hyphens) must be even length",
        ),
        (
            "prefix=zz",
            LOOKUP + "Invalid UUID: encoding/hex: invalid byte: U+007A 'z'",
        ),
        (
            "prefix=" + "a" * 37,
            LOOKUP + "Invalid UUID length. UUID have 36 characters; got 37",
        ),
        ("per_page=abc", "Expect a number for `per_page` query string parameter"),
        ("wait=5&index=1", "Invalid wait time"),
        ("wait=9999999h&index=1", "Invalid wait time"),
        ("index=abc", "Invalid index"),
        ("stale=maybe", "Expect `true` or `false` for `stale` query string parameter"),
        (
            "resources=maybe",
            'Failed to parse value of "resources" (maybe) as a bool: '
            'strconv.ParseBool: parsing "maybe": invalid syntax',
        ),
        (
            "filter=NotValid",
            "failed to create result paginator: failed to read filter expression: "
            '1:9 (8): no match found, expected: "!=", ".", "==", "[", '
            "[ \\t\\r\\n] or [a-zA-Z0-9_/]",
        ),
        (
            "filter=Foo%20%3D%3D%201",
            "failed to read result page: error finding value in datum: /Foo at part 0: "
            'couldn\'t find key: struct field with name "Foo"',
        ),
    ],
)
async def test_list_bad_input_is_400_with_nomads_text(
    client: TestClient[Any, Any], query: str, message: str
) -> None:
    response = await client.get(f"/v1/allocations?{query}")
    assert response.status == 400
    assert response.headers["Content-Type"] == "text/plain; charset=utf-8"
    assert await response.text() == message


async def test_list_filter_runs_against_the_full_allocation(client: TestClient[Any, Any]) -> None:
    running = await (await client.get('/v1/allocations?filter=ClientStatus == "running"')).json()
    assert {s["ClientStatus"] for s in running} == {"running"}
    assert len(running) == 2
    by_job = await (await client.get("/v1/allocations?filter=Job.Meta.owner == platform")).json()
    assert len(by_job) == 4  # Job is not in the stub, but the filter sees it
    zero = await (await client.get('/v1/allocations?filter=NextAllocation == ""')).json()
    assert len(zero) == 4  # absent zero fields still exist for the filter
    tasks = await (await client.get('/v1/allocations?filter="sidecar" in TaskStates')).json()
    assert [s["ID"] for s in tasks] == [SAMPLE[2][0]]


async def test_list_filter_does_not_see_stub_only_fields() -> None:
    """`JobType` and `JobVersion` are `AllocListStub` fields; Nomad's filter runs on the full
    `Allocation`, which has neither, so naming one fails as any unknown field does. Fed through
    the feed's rendering, as the operator's store is."""
    obj = yaml.safe_load((Path(__file__).parents[2] / "examples" / "web.yaml").read_text())
    obj["metadata"].update(uid=FIRST, namespace="default", resourceVersion="120")
    obj["spec"]["job"]["version"] = 4
    store = AllocationStore()
    store.replace_all([render(obj, None)], 120)
    client = await serve(store)
    try:
        for field in ("JobType", "JobVersion"):
            response = await client.get(f'/v1/allocations?filter={field} == "x"')
            assert (response.status, await response.text()) == (
                400,
                f"failed to read result page: error finding value in datum: /{field} at part 0: "
                f'couldn\'t find key: struct field with name "{field}"',
            )
        found = await (await client.get('/v1/allocations?filter=Job.Type == "service"')).json()
        assert [(s["ID"], s["JobType"], s["JobVersion"]) for s in found] == [(FIRST, "service", 4)]
        read = await (await client.get(f"/v1/allocation/{FIRST}")).json()
        assert not {"JobType", "JobVersion"} & set(read)
        assert (read["Job"]["Type"], read["Job"]["Version"]) == ("service", 4)
    finally:
        await client.close()


async def test_list_field_selection(client: TestClient[Any, Any]) -> None:
    bare = await (await client.get("/v1/allocations?task_states=false")).json()
    assert all("TaskStates" in s and s["TaskStates"] is None for s in bare)
    full = await (await client.get("/v1/allocations?resources=true")).json()
    assert all(s["AllocatedResources"]["Shared"]["DiskMB"] == 300 for s in full)
    assert all(s["TaskStates"] for s in full)
    both = await (await client.get("/v1/allocations?resources=1&task_states=0&pretty")).json()
    assert all(s["AllocatedResources"] and s["TaskStates"] is None for s in both)


async def test_list_pages_with_tokens_in_both_headers(client: TestClient[Any, Any]) -> None:
    seen: list[str] = []
    token = ""
    pages = 0
    while True:
        response = await client.get(f"/v1/allocations?per_page=3&next_token={token}")
        body = await response.json()
        seen += [s["ID"] for s in body]
        pages += 1
        token = response.headers.get("X-Nomad-NextToken", "")
        assert response.headers.get("X-Service-NextToken", "") == token
        if not token:
            break
        assert len(body) == 3
        next_first = token.split(".", 1)
        assert int(next_first[0]) > 0 and next_first[1] not in seen
    assert pages == 2
    assert sorted(seen) == sorted(DEFAULT_IDS)


@pytest.mark.parametrize("task_states", ["true", "false"])
async def test_a_large_list_is_streamed_with_the_same_bytes_and_length(
    client: TestClient[Any, Any], monkeypatch: pytest.MonkeyPatch, task_states: str
) -> None:
    path = f"/v1/allocations?namespace=*&task_states={task_states}"
    whole = await (await client.get(path)).read()
    monkeypatch.setattr(answers, "STREAM_BYTES", 700)  # a few stubs per piece
    response = await client.get(path)
    streamed = await response.read()
    assert streamed == whole
    assert response.headers["Content-Length"] == str(len(whole))
    assert response.headers["Content-Type"] == "application/json"
    assert response.headers["X-Nomad-Index"]
    assert len(json.loads(streamed)) == len(SAMPLE)


async def test_whole_lists_have_the_length_of_their_bytes_after_changes(
    store: AllocationStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A whole list's Content-Length comes from the store's summed stub sizes, not from
    measuring the stubs: after replacements, moves and removals it is still the body's length,
    with and without TaskStates, in every namespace form, streamed or not."""
    ident, options = SAMPLE[0]
    store.upsert(stored(ident, **{**options, "modify_index": 130, "namespace": "team-a"}))
    store.upsert(stored(SAMPLE[1][0], **{**SAMPLE[1][1], "client_status": "failed"}))
    store.remove(SAMPLE[2][0], 140)
    client = await serve(store)
    try:
        for stream_bytes in (answers.STREAM_BYTES, 700):
            monkeypatch.setattr(answers, "STREAM_BYTES", stream_bytes)
            for query in ("namespace=*", "namespace=default", "namespace=team-a", "reverse=true"):
                for task_states in ("true", "false"):
                    path = f"/v1/allocations?{query}&task_states={task_states}"
                    response = await client.get(path)
                    body = await response.read()
                    assert response.headers["Content-Length"] == str(len(body)), path
                    assert [stub["ID"] for stub in json.loads(body)] == [
                        stub["ID"] for stub in await (await client.get(path + "&pretty")).json()
                    ]
    finally:
        await client.close()


async def test_list_pages_with_prefix_use_id_tokens(client: TestClient[Any, Any]) -> None:
    response = await client.get("/v1/allocations?prefix=aa&namespace=*&per_page=1")
    ids = sorted(i for i, _ in SAMPLE if i.startswith("aa"))
    assert [s["ID"] for s in await response.json()] == ids[:1]
    assert response.headers["X-Nomad-NextToken"] == ids[1]


async def test_list_wrong_method_and_trailing_slash(client: TestClient[Any, Any]) -> None:
    assert await text_of(client, "POST", "/v1/allocations") == (405, "Invalid method")
    assert await text_of(client, "HEAD", "/v1/allocations") == (405, "")
    assert await text_of(client, "GET", "/v1/allocations/") == (404, "")


async def test_list_blocks_until_the_index_moves(
    client: TestClient[Any, Any], store: AllocationStore
) -> None:
    current = store.index
    request = asyncio.create_task(client.get(f"/v1/allocations?index={current}&wait=10s"))
    await parked(store, 1)
    assert not request.done()
    late = stored(alloc_id(77), create_index=current + 5)
    store.upsert(late)
    response = await asyncio.wait_for(request, 2)
    assert response.headers["X-Nomad-Index"] == str(current + 5)
    assert late.id in [s["ID"] for s in await response.json()]


async def test_list_block_times_out_with_current_data(
    client: TestClient[Any, Any], store: AllocationStore
) -> None:
    started = time.monotonic()
    response = await client.get(f"/v1/allocations?index={store.index}&wait=100ms")
    elapsed = time.monotonic() - started
    assert response.status == 200
    assert 0.1 <= elapsed < 5  # its own 100 ms, not the 5-minute default
    assert response.headers["X-Nomad-Index"] == str(store.index)
    assert len(await response.json()) == len(DEFAULT_IDS)


async def test_list_with_an_old_index_answers_at_once(
    client: TestClient[Any, Any], store: AllocationStore
) -> None:
    started = time.monotonic()
    response = await client.get(f"/v1/allocations?index={store.index - 1}&wait=5m")
    assert response.status == 200
    assert time.monotonic() - started < 5  # not its 5 minutes


async def test_shutdown_releases_blocked_requests(store: AllocationStore) -> None:
    client = await serve(store)
    request = asyncio.create_task(client.get(f"/v1/allocations?index={store.index}&wait=5m"))
    await parked(store, 1)
    await client.app.shutdown()  # what the runner does before waiting for handlers
    response = await asyncio.wait_for(request, 5)  # released, not held for its 5 minutes
    assert response.status == 200
    await client.close()


# -- read ---------------------------------------------------------------------------------------


async def test_read_returns_the_wire_allocation(
    client: TestClient[Any, Any], store: AllocationStore
) -> None:
    response = await client.get(f"/v1/allocation/{FIRST}")
    assert response.status == 200
    alloc = store.get(FIRST)
    assert alloc is not None
    assert await response.read() == alloc.wire_json
    assert response.headers["X-Nomad-Index"] == str(alloc.modify_index)
    assert all(name in response.headers for name in META)
    upper = await client.get(f"/v1/allocation/{FIRST.upper()}")
    assert (await upper.json())["ID"] == FIRST
    pretty = await (await client.get(f"/v1/allocation/{FIRST}?pretty=1")).read()
    assert pretty.endswith(b"}\n") and json.loads(pretty) == alloc.wire


async def test_read_any_namespace_by_id(client: TestClient[Any, Any]) -> None:
    response = await client.get(f"/v1/allocation/{TEAM_A}")
    assert (await response.json())["Namespace"] == "team-a"


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("/v1/allocation/8c3d9a1f", "alloc lookup failed: index error: UUID must be 36 characters"),
        ("/v1/allocation/", "alloc lookup failed: index error: UUID must be 36 characters"),
        (
            "/v1/allocation/8c3d9a1f-6b1e-4d9a-9f0e-2c1b7a6d5e4z",
            LOOKUP + "Invalid UUID: encoding/hex: invalid byte: U+007A 'z'",
        ),
        (
            "/v1/allocation/8c3d9a1f/services",
            "alloc lookup failed: index error: UUID must be 36 characters",
        ),
        (
            "/v1/allocation/8c3d9a1f/checks",
            "alloc lookup failed: index error: UUID must be 36 characters",
        ),
        (
            "/v1/client/allocation/8c3d9a1f/checks",
            "alloc lookup failed: index error: UUID must be 36 characters",
        ),
    ],
)
async def test_malformed_ids_are_400(client: TestClient[Any, Any], path: str, message: str) -> None:
    assert await text_of(client, "GET", path) == (400, message)


async def test_read_unknown_is_404_with_metadata(
    client: TestClient[Any, Any], store: AllocationStore
) -> None:
    response = await client.get(f"/v1/allocation/{alloc_id(999)}")
    assert response.status == 404
    assert await response.text() == "alloc not found"
    assert response.headers["X-Nomad-Index"] == str(store.index)
    assert all(name in response.headers for name in META)


async def test_read_blocks_until_the_allocation_changes(
    client: TestClient[Any, Any], store: AllocationStore
) -> None:
    alloc = store.get(FIRST)
    assert alloc is not None
    ident, options = SAMPLE[0]
    request = asyncio.create_task(
        client.get(f"/v1/allocation/{FIRST}?index={alloc.modify_index}&wait=10s")
    )
    await parked(store, 1)
    store.upsert(stored(alloc_id(500), create_index=store.index + 1))  # another one: keep waiting
    await asyncio.sleep(0.05)
    assert not request.done()
    changed = stored(
        ident, **{**options, "modify_index": store.index + 1, "client_status": "failed"}
    )
    store.upsert(changed)
    response = await asyncio.wait_for(request, 2)
    assert response.headers["X-Nomad-Index"] == str(changed.modify_index)
    assert (await response.json())["ClientStatus"] == "failed"


async def test_read_block_ends_when_the_allocation_goes(
    client: TestClient[Any, Any], store: AllocationStore
) -> None:
    alloc = store.get(FIRST)
    assert alloc is not None
    request = asyncio.create_task(
        client.get(f"/v1/allocation/{FIRST}?index={alloc.modify_index}&wait=10s")
    )
    await parked(store, 1)
    store.remove(FIRST, store.index + 3)
    response = await asyncio.wait_for(request, 2)
    assert response.status == 404
    assert response.headers["X-Nomad-Index"] == str(store.index)


@pytest.mark.parametrize(
    "path",
    [
        f"/v1/allocation/{FIRST}",
        f"/v1/allocation/{FIRST}/services",
        f"/v1/allocation/{FIRST}/checks",
        f"/v1/client/allocation/{FIRST}/checks",
    ],
)
@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "HEAD"])
async def test_read_endpoints_answer_other_methods_405(
    client: TestClient[Any, Any], path: str, method: str
) -> None:
    status, text = await text_of(client, method, path)
    assert status == 405
    assert text == ("" if method == "HEAD" else "Invalid method")


@pytest.mark.parametrize(
    "path",
    [
        f"/v1/allocation/{FIRST}/foo",
        f"/v1/allocation/{FIRST}/",
        f"/v1/allocation/{FIRST}/services/extra",
        f"/v1/client/allocation/{FIRST}/nope",
        f"/v1/client/allocation/{FIRST}",
        "/v1/client/allocation/",
    ],
)
async def test_unknown_sub_paths_are_resource_not_found(
    client: TestClient[Any, Any], path: str
) -> None:
    assert await text_of(client, "GET", path) == (404, "resource not found")


async def test_everything_else_is_an_empty_404(client: TestClient[Any, Any]) -> None:
    assert await text_of(client, "GET", "/v1/nodes") == (404, "")
    assert await text_of(client, "GET", "/") == (404, "")


# -- services and checks ------------------------------------------------------------------------


async def test_services(client: TestClient[Any, Any], store: AllocationStore) -> None:
    response = await client.get(f"/v1/allocation/{FIRST}/services")
    assert response.status == 200
    body = await response.json()
    assert [s["ServiceName"] for s in body] == ["web"]
    assert body[0]["AllocID"] == FIRST
    assert response.headers["X-Nomad-Index"] == str(store.index)
    assert all(name in response.headers for name in META)


async def test_services_need_the_allocations_namespace(client: TestClient[Any, Any]) -> None:
    missing = await client.get(f"/v1/allocation/{TEAM_A}/services")
    assert missing.status == 404
    assert await missing.text() == "allocation not found"
    assert all(name in missing.headers for name in META)
    found = await client.get(f"/v1/allocation/{TEAM_A}/services?namespace=team-a")
    assert [s["Namespace"] for s in await found.json()] == ["team-a"]
    unknown = await client.get(f"/v1/allocation/{alloc_id(999)}/services")
    assert await unknown.text() == "allocation not found"


async def test_services_empty_is_a_list_and_the_index_is_at_least_one() -> None:
    store = AllocationStore()
    lonely = stored(alloc_id(3), create_index=0, with_services=False)
    store.replace_all([lonely], 0)
    client = await serve(store)
    try:
        response = await client.get(f"/v1/allocation/{lonely.id}/services")
        assert await response.read() == b"[]"
        assert response.headers["X-Nomad-Index"] == "1"
    finally:
        await client.close()


async def test_services_block_until_the_store_moves(
    client: TestClient[Any, Any], store: AllocationStore
) -> None:
    current = store.index
    request = asyncio.create_task(
        client.get(f"/v1/allocation/{FIRST}/services?index={current}&wait=10s")
    )
    await parked(store, 1)
    assert not request.done()
    store.advance(current + 1)  # e.g. the pod got its address: the allocation's index stays
    response = await asyncio.wait_for(request, 2)
    assert response.headers["X-Nomad-Index"] == str(current + 1)


@pytest.mark.parametrize("base", ["/v1/allocation", "/v1/client/allocation"])
async def test_checks(client: TestClient[Any, Any], base: str) -> None:
    response = await client.get(f"{base}/{FIRST}/checks")
    assert response.status == 200
    body = await response.json()
    (result,) = body.values()
    assert result["Status"] == "success"
    assert result["Group"] == "web.web[0]"
    assert not any(name in response.headers for name in META)
    lonely = await client.get(f"{base}/{TEAM_A}/checks")
    assert len(await lonely.json()) == 1


async def test_checks_unknown_allocation(client: TestClient[Any, Any]) -> None:
    unknown = alloc_id(999)
    response = await client.get(f"/v1/client/allocation/{unknown.upper()}/checks")
    assert response.status == 404
    assert await response.text() == f'Unknown allocation "{unknown.upper()}"'


# -- authorization ------------------------------------------------------------------------------


async def test_denied_requests_are_403_permission_denied() -> None:
    authorizer = ScopedAuthorizer({"team-a": {"team-a"}})
    client = await serve(authorizer=authorizer)
    try:
        paths = [
            "/v1/allocations",
            f"/v1/allocation/{FIRST}",
            f"/v1/allocation/{alloc_id(999)}",
            f"/v1/allocation/{FIRST}/services",
            f"/v1/allocation/{FIRST}/checks",
        ]
        for path in paths:
            for headers in ({"X-Nomad-Token": "team-a"}, {"X-Nomad-Token": "bogus"}, {}):
                response = await client.get(path, headers=headers)
                assert (response.status, await response.text()) == (403, "Permission denied")
        allowed = await client.get(
            f"/v1/allocation/{TEAM_A}", headers={"Authorization": "Bearer team-a"}
        )
        assert allowed.status == 200
        listed = await client.get(
            "/v1/allocations?namespace=team-a", headers={"X-Nomad-Token": "team-a"}
        )
        assert len(await listed.json()) == 2
    finally:
        await client.close()
    assert ("team-a", "read-job", "team-a") in authorizer.calls


async def test_every_namespace_shows_only_readable_ones() -> None:
    authorizer = ScopedAuthorizer({"team-a": {"team-a"}, "ghost": {"elsewhere"}, "none": set()})
    client = await serve(authorizer=authorizer)
    try:
        response = await client.get(
            "/v1/allocations?namespace=*", headers={"X-Nomad-Token": "team-a"}
        )
        assert {s["Namespace"] for s in await response.json()} == {"team-a"}
        ghost = await client.get("/v1/allocations?namespace=*", headers={"X-Nomad-Token": "ghost"})
        assert ghost.status == 200
        assert await ghost.read() == b"[]"
        none = await client.get("/v1/allocations?namespace=*", headers={"X-Nomad-Token": "none"})
        assert none.status == 403
    finally:
        await client.close()


async def test_every_namespace_block_shows_a_namespace_created_while_it_waits(
    store: AllocationStore,
) -> None:
    authorizer = ScopedAuthorizer({"a-and-b": {"team-a", "team-b"}, "a": {"team-a"}})
    client = await serve(store, authorizer)
    try:
        current = store.index
        path = f"/v1/allocations?namespace=*&index={current}&wait=10s"
        both = asyncio.create_task(client.get(path, headers={"X-Nomad-Token": "a-and-b"}))
        only_a = asyncio.create_task(client.get(path, headers={"X-Nomad-Token": "a"}))
        await parked(store, 2)
        assert set(authorizer.candidates) == {frozenset({"default", "team-a"})}
        newcomer = stored(alloc_id(90), namespace="team-b", create_index=current + 5)
        store.upsert(newcomer)  # the first allocation in team-b
        for request, readable in ((both, {"team-a", "team-b"}), (only_a, {"team-a"})):
            response = await asyncio.wait_for(request, 2)
            assert response.headers["X-Nomad-Index"] == str(current + 5)
            body = await response.json()
            assert {stub["Namespace"] for stub in body} == readable
            assert (newcomer.id in {stub["ID"] for stub in body}) == ("team-b" in readable)
        # Only the new namespace was weighed again, once per request.
        assert authorizer.candidates[2:] == [frozenset({"team-b"})] * 2
    finally:
        await client.close()


class PausingAuthorizer(ScopedAuthorizer):
    """Its first `allowed_namespaces` waits for `release`, so a test can change the store then."""

    def __init__(self, grants: dict[str, set[str]]) -> None:
        super().__init__(grants)
        self.asked = asyncio.Event()
        self.release = asyncio.Event()

    async def allowed_namespaces(
        self, caller: Caller, capability: Capability, candidates: Iterable[str]
    ) -> frozenset[str] | None:
        if not self.asked.is_set():
            self.asked.set()
            await self.release.wait()
        return await super().allowed_namespaces(caller, capability, candidates)


async def test_every_namespace_weighs_a_namespace_created_while_it_authorizes(
    store: AllocationStore,
) -> None:
    authorizer = PausingAuthorizer({"a-and-b": {"team-a", "team-b"}})
    client = await serve(store, authorizer)
    try:
        request = asyncio.create_task(
            client.get("/v1/allocations?namespace=*", headers={"X-Nomad-Token": "a-and-b"})
        )
        await asyncio.wait_for(authorizer.asked.wait(), 2)
        newcomer = stored(alloc_id(91), namespace="team-b", create_index=store.index + 1)
        store.upsert(newcomer)
        authorizer.release.set()
        response = await asyncio.wait_for(request, 2)
        assert response.headers["X-Nomad-Index"] == str(store.index)
        body = await response.json()
        assert newcomer.id in {stub["ID"] for stub in body}
        assert {stub["Namespace"] for stub in body} == {"team-a", "team-b"}
    finally:
        await client.close()


# -- start-up -----------------------------------------------------------------------------------


async def test_an_unsynced_store_answers_503_after_waiting() -> None:
    store = AllocationStore()
    client = await serve(store, sync_timeout=0.05)
    try:
        response = await client.get("/v1/allocations")
        assert (response.status, await response.text()) == (503, "No cluster leader")
    finally:
        await client.close()
    store = AllocationStore()  # the first server closed its store as it shut down
    client = await serve(store, sync_timeout=10)  # long enough for any machine's pauses
    try:
        waiting = asyncio.create_task(client.get("/v1/allocations"))
        await asyncio.sleep(0.05)
        assert not waiting.done()
        store.replace_all([], 5)
        assert (await asyncio.wait_for(waiting, 1)).status == 200
    finally:
        await client.close()


async def test_every_namespace_with_a_scoped_token_waits_for_the_first_full_list() -> None:
    store = AllocationStore()
    authorizer = ScopedAuthorizer({"a": {"team-a"}})
    path, headers = "/v1/allocations?namespace=*", {"X-Nomad-Token": "a"}
    client = await serve(store, authorizer, sync_timeout=0.05)
    try:
        response = await client.get(path, headers=headers)
        assert (response.status, await response.text()) == (503, "No cluster leader")
    finally:
        await client.close()
    store = AllocationStore()  # the first server closed its store as it shut down
    client = await serve(store, authorizer, sync_timeout=10)
    try:
        waiting = asyncio.create_task(client.get(path, headers=headers))
        await asyncio.sleep(0.05)
        assert not waiting.done()
        store.replace_all([stored(ident, **options) for ident, options in SAMPLE], 120)
        response = await asyncio.wait_for(waiting, 1)
        assert response.status == 200
        assert response.headers["X-Nomad-Index"] == "120"
        assert {stub["ID"] for stub in await response.json()} == {
            ident for ident, options in SAMPLE if options.get("namespace") == "team-a"
        }
    finally:
        await client.close()


async def test_metrics_count_requests_by_route() -> None:
    metrics = Metrics()
    app = create_app(metrics, store=sample_store(), authorizer=AllowAll())
    client: TestClient[Any, Any] = TestClient(TestServer(app))
    await client.start_server()
    try:
        await client.get(f"/v1/allocation/{FIRST}")
        await client.get("/v1/allocation/short")
    finally:
        await client.close()
    route = "/v1/allocation/{alloc_id}"
    for code in ("200", "400"):
        value = metrics.registry.get_sample_value(
            "allocbridge_http_requests_total",
            {"listener": "api", "route": route, "method": "GET", "code": code},
        )
        assert value == 1


async def test_metrics_count_method_misses_and_fallthroughs_by_route() -> None:
    metrics = Metrics()
    app = create_app(metrics, store=sample_store(), authorizer=AllowAll())
    client: TestClient[Any, Any] = TestClient(TestServer(app))
    await client.start_server()
    try:
        assert (await client.delete(f"/v1/allocation/{FIRST}")).status == 405
        assert (await client.get("/v1/allocation/a/b/c")).status == 404
        assert (await client.get("/v1/nothing-here")).status == 404
    finally:
        await client.close()
    for route, method, code in (
        ("/v1/allocation/{alloc_id}", "DELETE", "405"),
        ("/v1/allocation/{tail}", "GET", "404"),
        ("/{tail}", "GET", "404"),
    ):
        labels = {"listener": "api", "route": route, "method": method, "code": code}
        assert metrics.registry.get_sample_value("allocbridge_http_requests_total", labels) == 1
        assert (
            metrics.registry.get_sample_value(
                "allocbridge_http_request_duration_seconds_count",
                {"listener": "api", "route": route},
            )
            == 1
        )


async def test_ten_thousand_stubs_list_whole_in_create_order() -> None:
    """The full list in one response, as the listing goal's load has it (its speed is measured by
    `make bench`, not here)."""
    store = AllocationStore()
    store.replace_all(
        [stored(alloc_id(n), create_index=1000 + n, with_services=False) for n in range(10_000)],
        20_000,
    )
    client = await serve(store)
    try:
        response = await client.get("/v1/allocations")
        assert response.headers["X-Nomad-Index"] == "20000"
        assert [stub["ID"] for stub in await response.json()] == [
            alloc_id(n) for n in range(10_000)
        ]
    finally:
        await client.close()


# -- evaluations --------------------------------------------------------------------------------


async def test_an_evaluation_and_the_allocations_it_placed(
    client: TestClient[Any, Any], store: AllocationStore
) -> None:
    first, second = store.get(SAMPLE[1][0]), store.get(SAMPLE[2][0])  # both CreateIndex 102
    assert first is not None and second is not None
    shared = first.wire["EvalID"]
    assert second.wire["EvalID"] == shared
    response = await client.get(f"/v1/evaluation/{shared.upper()}")
    assert response.status == 200
    found = await response.json()
    assert (found["ID"], found["Status"], found["CreateIndex"]) == (shared, "complete", 102)
    assert response.headers["X-Nomad-Index"] == str(max(first.modify_index, second.modify_index))
    placed = await client.get(f"/v1/evaluation/{shared}/allocations")
    assert placed.status == 200
    assert placed.headers["X-Nomad-Index"] == str(store.index)  # the allocations' table index
    oldest_first = [second, first]  # the same CreateIndex, then by ID
    assert await placed.read() == b"[" + b",".join(a.stub_json() for a in oldest_first) + b"]"
    pretty = await (await client.get(f"/v1/evaluation/{shared}/allocations?pretty")).read()
    assert json.loads(pretty) == [a.stub for a in oldest_first]


async def test_an_unknown_evaluation_is_404_and_placed_nothing(
    client: TestClient[Any, Any], store: AllocationStore
) -> None:
    unknown = alloc_id(4242)
    response = await client.get(f"/v1/evaluation/{unknown}")
    assert (response.status, await response.text()) == (404, "eval not found")
    assert response.headers["X-Nomad-Index"] == str(store.index)
    placed = await client.get(f"/v1/evaluation/{unknown}/allocations")
    assert (placed.status, await placed.text()) == (200, "[]")
    malformed = await client.get("/v1/evaluation/not-a-uuid")
    assert (malformed.status, await malformed.text()) == (
        400,
        "eval lookup failed: index error: UUID must be 36 characters",
    )
    wrong = await client.delete(f"/v1/evaluation/{unknown}")
    assert (wrong.status, await wrong.text()) == (405, "Invalid method")


async def test_an_evaluation_needs_read_job_in_its_namespace() -> None:
    client = await serve(authorizer=ScopedAuthorizer({"team-a": {"team-a"}}))
    token = {"X-Nomad-Token": "team-a"}
    store_alloc = sample_store().get(FIRST)
    team_alloc = sample_store().get(TEAM_A)
    assert store_alloc is not None and team_alloc is not None
    try:
        for path in ("", "/allocations"):
            denied = await client.get(
                f"/v1/evaluation/{store_alloc.wire['EvalID']}{path}", headers=token
            )
            assert (denied.status, await denied.text()) == (403, "Permission denied")
            allowed = await client.get(
                f"/v1/evaluation/{team_alloc.wire['EvalID']}{path}", headers=token
            )
            assert allowed.status == 200
    finally:
        await client.close()


async def test_an_evaluation_read_blocks_until_it_places_something(
    client: TestClient[Any, Any], store: AllocationStore
) -> None:
    later = stored(alloc_id(777), create_index=store.index + 1)
    request = asyncio.create_task(
        client.get(f"/v1/evaluation/{later.wire['EvalID']}?index={store.index}&wait=10s")
    )
    await parked(store, 1)
    assert not request.done()
    store.upsert(later)
    response = await asyncio.wait_for(request, 2)
    assert response.status == 200
    assert (await response.json())["ID"] == later.wire["EvalID"]
