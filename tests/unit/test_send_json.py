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
from kubernetes_asyncio.client.exceptions import ApiException

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


def api_for(test_server: TestServer) -> client.ApiClient:
    cfg = client.Configuration(host=str(test_server.make_url("")).rstrip("/"))
    cfg.api_key = {"BearerToken": "t0ken"}
    cfg.api_key_prefix = {"BearerToken": "Bearer"}
    return client.ApiClient(configuration=cfg)


async def test_the_body_goes_as_json_with_the_clients_credentials(
    server: tuple[TestServer, list[dict[str, Any]]],
) -> None:
    test_server, seen = server
    api = api_for(test_server)
    try:
        body = {"status": {"clientStatus": "running", "note": "ünïcode"}}
        answer = await send_json(
            api,
            "PATCH",
            "/apis/g/v1/namespaces/ns/xs/a/status",
            body,
            "application/merge-patch+json",
        )
    finally:
        await api.close()
    assert answer == {"echo": body}
    request = seen[0]
    assert (
        request["method"] == "PATCH" and request["path"] == "/apis/g/v1/namespaces/ns/xs/a/status"
    )
    assert orjson.loads(request["body"]) == body
    assert request["headers"]["Content-Type"] == "application/merge-patch+json"
    assert request["headers"]["Authorization"] == "Bearer t0ken"
    assert request["headers"]["User-Agent"] == api.user_agent


async def test_an_error_status_raises_what_the_client_would(
    server: tuple[TestServer, list[dict[str, Any]]],
) -> None:
    test_server, _ = server
    api = api_for(test_server)
    try:
        with pytest.raises(ApiException) as raised:
            await send_json(api, "POST", "/api/v1/namespaces/ns/pods/taken", {"kind": "Pod"})
    finally:
        await api.close()
    assert raised.value.status == 409
