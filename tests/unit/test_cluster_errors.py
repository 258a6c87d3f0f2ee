"""cluster/errors.py: which kind each answer of the API server becomes, and that raw calls
raise those kinds (a plain HTTP server stands in for the API server; the cluster tests cover
the real one's answers)."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator

import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from kubernetes_asyncio import client

from allocbridge.cluster import errors
from allocbridge.cluster.resources import raw_json


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (400, errors.RefusedError),
        (403, errors.ForbiddenError),
        (404, errors.NotFoundError),
        (409, errors.ConflictError),
        (410, errors.GoneError),
        (422, errors.RefusedError),
        (429, errors.UnavailableError),
        (500, errors.UnavailableError),
        (503, errors.UnavailableError),
        (None, errors.UnavailableError),
    ],
)
def test_each_status_becomes_its_kind(status: int | None, kind: type[Exception]) -> None:
    error = errors.from_status(status, "text")
    assert type(error) is kind
    assert (error.status, error.message) == (status, "text")
    assert isinstance(error, errors.KubernetesError)


def test_refusals_and_outages_are_told_apart_by_type() -> None:
    assert all(
        isinstance(errors.from_status(status, ""), errors.RefusedError)
        for status in (400, 403, 404, 409, 410, 422)
    )
    assert not isinstance(errors.from_status(503, ""), errors.RefusedError)


def test_the_message_is_the_status_bodys_or_else_the_body_or_the_reason() -> None:
    status_body = orjson.dumps({"kind": "Status", "message": 'pods "web-0" not found'})
    assert errors.from_answer(404, "Not Found", status_body).message == 'pods "web-0" not found'
    assert errors.from_answer(502, "Bad Gateway", b"upstream down\n").message == "upstream down"
    assert errors.from_answer(500, "Internal Server Error", b"").message == (
        "500 Internal Server Error"
    )


@pytest.fixture
async def api() -> AsyncIterator[client.ApiClient]:
    async def handle(request: web.Request) -> web.Response:
        status = int(request.match_info["status"])
        return web.json_response({"kind": "Status", "message": f"answered {status}"}, status=status)

    app = web.Application()
    app.router.add_get("/answer/{status}", handle)
    server = TestServer(app)
    await server.start_server()
    api_client = client.ApiClient(
        configuration=client.Configuration(host=str(server.make_url("")).rstrip("/"))
    )
    yield api_client
    await api_client.close()
    await server.close()


async def _get(api: client.ApiClient, path: str) -> object:
    return await api.rest_client.pool_manager.get(f"{api.configuration.host}{path}")


async def test_a_raw_call_raises_the_kind_of_its_answer(api: client.ApiClient) -> None:
    with pytest.raises(errors.ConflictError, match="answered 409"):
        await raw_json(_get(api, "/answer/409"))
    with pytest.raises(errors.UnavailableError, match="answered 503"):
        await raw_json(_get(api, "/answer/503"))
    assert await raw_json(_get(api, "/answer/200")) == {"kind": "Status", "message": "answered 200"}


async def test_a_raw_call_without_an_answer_is_unavailable() -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    api = client.ApiClient(configuration=client.Configuration(host=f"http://127.0.0.1:{port}"))
    try:
        with pytest.raises(errors.UnavailableError, match="unreachable") as raised:
            await raw_json(_get(api, "/answer/200"))
        assert raised.value.status is None
    finally:
        await api.close()
