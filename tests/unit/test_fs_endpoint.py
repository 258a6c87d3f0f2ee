"""`/v1/client/fs/{stat,ls,cat,readat,stream}` up to the point where a container is read: the
query's checks in Nomad's order with its texts, the allocation and `read-fs`, the path's
mapping (escapes, missing names, secrets, directories), the made-up directories served without
Kubernetes, and the 409 of a task that does not run. Reading inside a container is tested on
the real node (tests/cluster/test_alloc_fs.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from allocations_fixture import SAMPLE, sample_store, stored
from authorizers import GrantsOnly

from allocbridge.api.context import PodClients
from allocbridge.api.server import create_app
from allocbridge.auth import AllowAll
from allocbridge.cluster.podexec import PodExecutor
from allocbridge.cluster.podfs import PodFiles
from allocbridge.store import AllocationStore
from allocbridge.telemetry import Metrics

RUNNING = SAMPLE[0][0]  # task "server", running
COMPLETE = SAMPLE[1][0]
UNKNOWN = "00000000-0000-4000-8000-000000000000"
PARSE_INT = 'strconv.ParseInt: parsing "{}": invalid syntax'
PARSE_BOOL = 'strconv.ParseBool: parsing "{}": invalid syntax'
SECRET = "server/secrets/token"


async def serve(
    *, files: bool = True, authorizer: Any = None, store: AllocationStore | None = None
) -> TestClient[Any, Any]:
    # No Kubernetes behind the files: an exec would fail, which these tests never reach.
    pods = PodClients(files=PodFiles(PodExecutor(lambda: None)) if files else None)
    app = create_app(
        Metrics(),
        store=store or sample_store(),
        authorizer=authorizer or AllowAll(),
        sync_timeout=1.0,
        pods=pods,
    )
    client: TestClient[Any, Any] = TestClient(TestServer(app))
    await client.start_server()
    return client


CASES = [
    ("stat", RUNNING, "", 400, "must provide a file name"),
    ("cat", RUNNING, "", 400, "must provide a file name"),
    ("readat", RUNNING, "", 400, "must provide a file name"),
    ("stream", RUNNING, "", 400, "must provide a file name"),
    ("readat", RUNNING, "path=a", 400, f"error parsing offset: {PARSE_INT.format('')}"),
    (
        "readat",
        RUNNING,
        "path=a&offset=1&limit=x",
        400,
        f"error parsing limit: {PARSE_INT.format('x')}",
    ),
    ("readat", RUNNING, "path=a&offset=-1", 400, "can't seek to offset -1: invalid argument"),
    (
        "stream",
        RUNNING,
        "path=a&follow=maybe",
        400,
        f"failed to parse follow field to boolean: {PARSE_BOOL.format('maybe')}",
    ),
    ("stream", RUNNING, "path=a&origin=middle", 400, "origin must be start or end"),
    ("stat", UNKNOWN, "path=alloc", 404, f'Unknown allocation "{UNKNOWN}"'),
    ("ls", UNKNOWN, "", 404, f'Unknown allocation "{UNKNOWN}"'),
    ("stat", RUNNING, "path=../etc", 400, "Path escapes the alloc directory"),
    ("ls", RUNNING, "path=server/local/../../..", 400, "Path escapes the alloc directory"),
    ("stat", RUNNING, "path=nope/x", 404, "stat nope/x: no such file or directory"),
    ("ls", RUNNING, "path=server/private", 404, "stat server/private: no such file or directory"),
    ("cat", RUNNING, "path=/", 400, 'file "/" is a directory'),
    ("stream", RUNNING, "path=server", 400, 'file "server" is a directory'),
    ("cat", RUNNING, f"path={SECRET}", 403, f"Reading secret file prohibited: {SECRET}"),
    (
        "stat",
        COMPLETE,
        "path=alloc/data",
        409,
        f"allocation {COMPLETE} is complete: its files are gone",
    ),
]


@pytest.mark.parametrize(("op", "alloc", "query", "status", "text"), CASES)
async def test_refusals_before_any_container_is_read(
    op: str, alloc: str, query: str, status: int, text: str
) -> None:
    client = await serve()
    try:
        response = await client.get(f"/v1/client/fs/{op}/{alloc}?{query}")
        assert (response.status, await response.text()) == (status, text)
    finally:
        await client.close()


async def test_the_made_up_directories_need_no_container() -> None:
    client = await serve()
    try:
        response = await client.get(f"/v1/client/fs/ls/{RUNNING}")
        assert response.status == 200
        entries = await response.json()
        assert [(e["Name"], e["IsDir"], e["FileMode"]) for e in entries] == [
            ("alloc", True, "drwxrwxrwx"),
            ("server", True, "drwxrwxrwx"),
        ]
        response = await client.get(f"/v1/client/fs/stat/{RUNNING}?path=/alloc/..")
        info = await response.json()
        assert (info["Name"], info["IsDir"], info["ContentType"]) == (
            "/",
            True,
            "application/octet-stream",
        )
        response = await client.get(f"/v1/client/fs/stat/{RUNNING}?path=server&pretty=true")
        assert json.loads(await response.text())["Name"] == "server"
    finally:
        await client.close()


async def test_read_fs_is_the_capability() -> None:
    client = await serve(authorizer=GrantsOnly("read-logs"))
    try:
        response = await client.get(f"/v1/client/fs/ls/{RUNNING}")
        assert (response.status, await response.text()) == (403, "Permission denied")
    finally:
        await client.close()
    client = await serve(authorizer=GrantsOnly("read-fs"))
    try:
        assert (await client.get(f"/v1/client/fs/ls/{RUNNING}")).status == 200
    finally:
        await client.close()


async def test_without_a_file_reader_the_answer_says_so() -> None:
    client = await serve(files=False)
    try:
        response = await client.get(f"/v1/client/fs/ls/{RUNNING}?path=alloc")
        assert (response.status, await response.text()) == (
            503,
            "alloc fs is not available: no Kubernetes exec client",
        )
    finally:
        await client.close()


async def test_files_of_a_task_that_does_not_run_are_a_409() -> None:
    """`web` waits to start: its files are a 409; once `side` has stopped too, so is alloc/."""
    alloc = stored(UNKNOWN, tasks=("web", "side"))
    alloc.wire["TaskStates"]["web"]["State"] = "pending"
    store = AllocationStore()
    store.replace_all([alloc], 10)
    client = await serve(store=store)
    try:
        response = await client.get(f"/v1/client/fs/ls/{UNKNOWN}?path=web/local")
        assert (response.status, await response.text()) == (409, 'task "web" is not running.')
        response = await client.get(f"/v1/client/fs/ls/{UNKNOWN}?path=web")
        assert response.status == 409
        alloc.wire["TaskStates"]["side"]["State"] = "dead"
        response = await client.get(f"/v1/client/fs/cat/{UNKNOWN}?path=alloc/data/x")
        assert (response.status, await response.text()) == (
            409,
            "no task of the allocation is running: alloc/ is read inside one",
        )
    finally:
        await client.close()
