"""The one response path of `/v1` (`api.answers`): what a handler's `Answer` or failure becomes.

Synthetic handlers behind `routing.add_endpoints`, so each rule is checked on its own; the real
endpoints' bodies and headers are checked in test_api_read.py and the compatibility suites.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from allocbridge.api import answers
from allocbridge.api.answers import Answer, AnswerHandler
from allocbridge.api.errors import INTERNAL_ERROR
from allocbridge.api.routing import Endpoint, add_endpoints
from allocbridge.auth import AuthUnavailableError, PermissionDeniedError
from allocbridge.cluster.errors import UnavailableError
from allocbridge.model.errors import NomadError
from allocbridge.store import encoding

ITEMS = [b'{"A":1,"B":[1.5,"x"]}', b'{"A":2,"B":[]}']
#: The same array as fragments, cut anywhere, and joined by a separator (as `stub_array` does).
FRAGMENTS = encoding.Fragments([b"[" + ITEMS[0][:5], ITEMS[0][5:] + b",", ITEMS[1] + b"]"], b"")
JOINED = encoding.Fragments([b"[" + ITEMS[0][:-1], ITEMS[1][1:] + b"]"], b"},{")


async def value(request: web.Request) -> Answer:
    return Answer({"b": 1, "a": "é"}, index=0, next_token="n1")


async def items(request: web.Request) -> Answer:
    return Answer(array=FRAGMENTS, index=7)


async def joined(request: web.Request) -> Answer:
    return Answer(array=JOINED, index=7)


async def misstated(request: web.Request) -> Answer:
    """The array with a length known ahead that is too long by 3 bytes (a bug to survive)."""
    return Answer(array=encoding.Fragments(JOINED.parts, JOINED.separator, JOINED.size() + 3))


async def written(request: web.Request) -> Answer:
    return Answer({"Index": 9}, write_index=9)


async def not_found(request: web.Request) -> Answer:
    raise NomadError(404, "alloc not found", index=12)


async def denied(request: web.Request) -> Answer:
    raise PermissionDeniedError("no role")


async def outage(request: web.Request) -> Answer:
    raise AuthUnavailableError("reviews time out")


async def kubernetes_gone(request: web.Request) -> Answer:
    raise UnavailableError("connection refused")


async def broken(request: web.Request) -> Answer:
    raise RuntimeError("a bug")


async def streamed(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse()
    await response.prepare(request)
    await response.write(b"raw")
    return response


HANDLERS: dict[str, AnswerHandler] = {
    "value": value,
    "items": items,
    "joined": joined,
    "misstated": misstated,
    "written": written,
    "not_found": not_found,
    "denied": denied,
    "outage": outage,
    "kubernetes_gone": kubernetes_gone,
    "broken": broken,
    "streamed": streamed,
}


@pytest.fixture
async def client() -> AsyncIterator[TestClient[Any, Any]]:
    app = web.Application()
    add_endpoints(app.router, [Endpoint(f"/{name}", {"GET": h}) for name, h in HANDLERS.items()])
    test_client: TestClient[Any, Any] = TestClient(TestServer(app))
    await test_client.start_server()
    yield test_client
    await test_client.close()


async def test_a_value_is_compact_sorted_json_with_the_read_metadata(
    client: TestClient[Any, Any],
) -> None:
    response = await client.get("/value")
    assert await response.read() == '{"a":"é","b":1}'.encode()
    assert response.content_type == "application/json"
    assert response.headers["X-Nomad-Index"] == "1"  # never below 1
    assert response.headers["X-Nomad-KnownLeader"] == "true"
    assert response.headers["X-Nomad-LastContact"] == "0"
    assert response.headers["X-Nomad-NextToken"] == "n1"
    assert response.headers["X-Service-NextToken"] == "n1"


async def test_pretty_indents_with_a_newline_unless_it_is_0(client: TestClient[Any, Any]) -> None:
    pretty = await (await client.get("/value?pretty")).text()
    assert pretty == '{\n    "a": "é",\n    "b": 1\n}\n'
    assert await (await client.get("/value?pretty=0")).text() == '{"a":"é","b":1}'


async def test_pre_rendered_items_are_one_array_and_pretty_reads_them_back(
    client: TestClient[Any, Any],
) -> None:
    compact = await client.get("/items")
    assert await compact.read() == b"[" + b",".join(ITEMS) + b"]"
    pretty = await (await client.get("/items?pretty=1")).text()
    expected = json.dumps([json.loads(item) for item in ITEMS], indent=4, sort_keys=True) + "\n"
    assert pretty == expected


async def test_large_item_arrays_stream_in_pieces_with_their_length(
    client: TestClient[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(answers, "STREAM_BYTES", 10)
    for name in ("items", "joined"):
        response = await client.get(f"/{name}")
        assert await response.read() == b"[" + b",".join(ITEMS) + b"]"
        assert response.headers["Content-Length"] == str(len(b"[" + b",".join(ITEMS) + b"]"))


async def test_a_write_sets_its_index_alone(client: TestClient[Any, Any]) -> None:
    response = await client.get("/written")
    assert response.headers["X-Nomad-Index"] == "9"
    assert "X-Nomad-KnownLeader" not in response.headers


async def test_a_nomad_error_is_its_text_with_the_read_metadata_when_it_has_an_index(
    client: TestClient[Any, Any],
) -> None:
    response = await client.get("/not_found?pretty")
    assert response.status == 404
    assert await response.read() == b"alloc not found"  # never indented, no newline
    assert response.headers["Content-Type"] == "text/plain; charset=utf-8"
    assert response.headers["X-Nomad-Index"] == "12"


async def test_the_authorizers_denial_and_outage_answer_403_and_503(
    client: TestClient[Any, Any],
) -> None:
    denial = await client.get("/denied")
    assert (denial.status, await denial.text()) == (403, "Permission denied")
    outage_answer = await client.get("/outage")
    assert outage_answer.status == 503
    assert await outage_answer.text() == "ACL check unavailable: reviews time out"
    assert outage_answer.headers["Retry-After"] == "1"


async def test_kubernetes_not_answering_is_a_503_to_try_again(
    client: TestClient[Any, Any],
) -> None:
    response = await client.get("/kubernetes_gone")
    assert response.status == 503
    assert await response.text() == "Kubernetes unavailable: connection refused"
    assert response.headers["Retry-After"] == "1"


async def test_anything_else_is_a_500_without_internals(client: TestClient[Any, Any]) -> None:
    response = await client.get("/broken")
    assert (response.status, await response.text()) == (500, INTERNAL_ERROR)


async def test_a_prepared_stream_passes_through(client: TestClient[Any, Any]) -> None:
    assert await (await client.get("/streamed")).read() == b"raw"


async def test_other_methods_are_405_with_allow(client: TestClient[Any, Any]) -> None:
    response = await client.post("/value")
    assert (response.status, await response.text()) == (405, "Invalid method")
    assert response.headers["Allow"] == "GET"


async def test_a_streamed_array_shorter_than_its_stated_length_ends_its_connection(
    client: TestClient[Any, Any], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Were a known length ever wrong, the client must fail at once, not wait for bytes that
    never come on a connection it would then reuse out of step."""
    monkeypatch.setattr(answers, "STREAM_BYTES", 8)  # streamed, in pieces
    response = await client.get("/misstated")
    with pytest.raises(aiohttp.ClientPayloadError):
        await asyncio.wait_for(response.read(), 10)
    assert "a list body's length differs from its Content-Length" in caplog.text


async def test_a_client_leaving_mid_list_ends_only_its_own_answer(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A client that drops the connection in the middle of a long list (more than the socket
    buffers hold, so the server is still sending) costs nothing else: the handler finishes, no
    error is logged as the server's fault, and the next client gets the whole body, exact."""
    item = b'{"A":"' + b"x" * 1000 + b'"}'
    count = 20_000  # about 20 MB: several pieces, well beyond loopback's socket buffers
    array = encoding.Fragments([b"[" + item, *[item] * (count - 2), item + b"]"], b",")
    body = b"[" + b",".join([item] * count) + b"]"
    finished: list[int] = []

    async def large(request: web.Request) -> Answer:
        return Answer(array=array, index=3)

    @web.middleware
    async def count_finished(request: web.Request, handler: Any) -> web.StreamResponse:
        try:
            response: web.StreamResponse = await handler(request)
            return response
        finally:
            finished.append(1)

    app = web.Application(middlewares=[count_finished])
    add_endpoints(app.router, [Endpoint("/large", {"GET": large})])
    server = TestServer(app)
    await server.start_server()
    try:
        reader, writer = await asyncio.open_connection(server.host, server.port)
        writer.write(b"GET /large HTTP/1.1\r\nHost: test\r\n\r\n")
        assert (await reader.readexactly(15)) == b"HTTP/1.1 200 OK"
        await reader.readexactly(65536)
        writer.transport.abort()
        for _ in range(100):
            if finished:
                break
            await asyncio.sleep(0.1)
        assert finished == [1]
        async with (
            aiohttp.ClientSession() as session,
            session.get(server.make_url("/large")) as response,
        ):
            assert response.headers["Content-Length"] == str(len(body))
            assert await response.read() == body
    finally:
        await server.close()
    assert not [record for record in caplog.records if record.levelno >= logging.ERROR]
