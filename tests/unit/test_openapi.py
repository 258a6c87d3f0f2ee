"""The OpenAPI document stays true to the router: same paths, same methods, resolvable refs."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from allocations_fixture import sample_store

from allocbridge.api.openapi import DOCUMENT
from allocbridge.api.server import create_app
from allocbridge.auth import AllowAll
from allocbridge.telemetry import Metrics

_HTTP_METHODS = {"GET", "PUT", "POST", "DELETE", "PATCH", "HEAD", "OPTIONS"}


def _app() -> web.Application:
    return create_app(Metrics(), store=sample_store(), authorizer=AllowAll())


def _routed(app: web.Application) -> set[tuple[str, str]]:
    """(path, method) of every real endpoint; catch-alls and 405 fallbacks answer `*`."""
    return {
        (route.resource.canonical, route.method.lower())
        for route in app.router.routes()
        if route.resource is not None and route.method in _HTTP_METHODS
    }


def _documented() -> set[tuple[str, str]]:
    return {
        (path, method)
        for path, operations in DOCUMENT["paths"].items()
        for method in operations
        if method.upper() in _HTTP_METHODS
    }


def test_document_and_router_agree() -> None:
    assert _documented() == _routed(_app())


def test_every_endpoint_path_answers_other_methods() -> None:
    app = _app()
    for resource in app.router.resources():
        methods = {route.method for route in resource}
        if methods & _HTTP_METHODS:
            assert "*" in methods, resource.canonical


def _refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref":
                yield value
            else:
                yield from _refs(value)
    elif isinstance(node, list):
        for item in node:
            yield from _refs(item)


def test_references_resolve() -> None:
    for ref in _refs(DOCUMENT):
        assert ref.startswith("#/")
        node: Any = DOCUMENT
        for part in ref[2:].split("/"):
            assert part in node, ref
            node = node[part]


def test_path_parameters_are_declared() -> None:
    parameters = DOCUMENT["components"]["parameters"]
    for path, operations in DOCUMENT["paths"].items():
        if "{alloc_id}" not in path:
            continue
        for operation in operations.values():
            names = {
                parameters[p["$ref"].rsplit("/", 1)[1]]["name"] for p in operation["parameters"]
            }
            assert "alloc_id" in names, path


async def test_document_is_served() -> None:
    client: TestClient[Any, Any] = TestClient(TestServer(_app()))
    await client.start_server()
    try:
        response = await client.get("/v1/openapi.json")
        assert response.status == 200
        assert await response.json() == DOCUMENT
        pretty = await client.get("/v1/openapi.json?pretty")
        assert (await pretty.read()).endswith(b"}\n")
        wrong = await client.post("/v1/openapi.json")
        assert (wrong.status, await wrong.text()) == (405, "Invalid method")
        assert wrong.headers["Allow"] == "GET"
    finally:
        await client.close()


async def test_every_405_names_the_methods_its_path_takes() -> None:
    """RFC 9110: a 405 carries `Allow`; the methods are the document's for that path."""
    client: TestClient[Any, Any] = TestClient(TestServer(_app()))
    await client.start_server()
    ident = "aa000000-0000-4000-8000-000000000001"
    try:
        for path, operations in DOCUMENT["paths"].items():
            url = path.format(alloc_id=ident, eval_id=ident, node_id="n", job_id="j")
            response = await client.request("PATCH", url)
            assert response.status == 405, path
            allowed = sorted(method.upper() for method in operations)
            assert response.headers["Allow"] == ", ".join(allowed), path
    finally:
        await client.close()
