"""`send_json`: what goes over the wire, against a plain HTTP server (no Kubernetes involved:
the cluster tests cover the API server's side of pod creates and status patches)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from kubernetes_asyncio import client

from allocbridge.cluster.errors import ConflictError
from allocbridge.cluster.resources import send_json


@pytest.fixture
async def server() -> AsyncIterator[tuple[TestServer, list[dict[str, Any]]]]:
    seen: list[dict[str, Any]] = []

    async def handle(request: web.Request) -> web.Response:
        seen.append(
            {
                "method": request.method,
                "path": request.path,
                "headers": dict(request.headers),
                "body": await request.read(),
            }
        )
        if request.path.endswith("/taken"):
            return web.json_response({"kind": "Status", "code": 409}, status=409)
        return web.json_response({"echo": orjson.loads(seen[-1]["body"])}, status=201)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    test_server = TestServer(app)
    await test_server.start_server()
    yield test_server, seen
    await test_server.close()


@pytest.fixture
async def api(server: tuple[TestServer, list[dict[str, Any]]]) -> AsyncIterator[client.ApiClient]:
    """A client of the test server with a bearer token, as the operator's own is."""
    cfg = client.Configuration(host=str(server[0].make_url("")).rstrip("/"))
    cfg.api_key = {"BearerToken": "t0ken"}
    cfg.api_key_prefix = {"BearerToken": "Bearer"}
    api_client = client.ApiClient(configuration=cfg)
    yield api_client
    await api_client.close()


async def test_the_body_goes_as_json_with_the_clients_credentials(
    server: tuple[TestServer, list[dict[str, Any]]], api: client.ApiClient
) -> None:
    _, seen = server
    body = {"status": {"clientStatus": "running", "note": "ünïcode"}}
    path = "/apis/g/v1/namespaces/ns/xs/a/status"
    answer = await send_json(api, "PATCH", path, body, "application/merge-patch+json")
    assert answer == {"echo": body}
    request = seen[0]
    assert request["method"] == "PATCH" and request["path"] == path
    assert orjson.loads(request["body"]) == body
    assert request["headers"]["Content-Type"] == "application/merge-patch+json"
    assert request["headers"]["Authorization"] == "Bearer t0ken"
    assert request["headers"]["User-Agent"] == api.user_agent


async def test_an_error_status_raises_its_kind_of_kubernetes_error(api: client.ApiClient) -> None:
    with pytest.raises(ConflictError) as raised:
        await send_json(api, "POST", "/api/v1/namespaces/ns/pods/taken", {"kind": "Pod"})
    assert raised.value.status == 409
