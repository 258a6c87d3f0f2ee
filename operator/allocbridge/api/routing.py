"""Route registration with Nomad's method and fall-through rules.

Each endpoint module exports `ENDPOINTS`: paths with a handler per method. Every endpoint path
also answers any other method with 405 `Invalid method` (aiohttp's own 405 would carry its own
body, and a method miss must not fall through to the catch-alls below), with the `Allow` header
listing the methods the path takes, as RFC 9110 requires of a 405. After all endpoints,
the fall-throughs reproduce Nomad's routing for everything else:

- under `/v1/allocation/` and `/v1/client/allocation/`: 404 `resource not found`;
- anywhere else (including `/v1/allocations/` with its trailing slash): 404, empty body.

aiohttp tries resources with the longest matching path prefix first and, among those, in
registration order, so the catch-alls must be registered last.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from aiohttp import web

from allocbridge.api.answers import Answer, AnswerHandler, Responder, respond
from allocbridge.api.errors import INVALID_METHOD, RESOURCE_NOT_FOUND, NomadError

#: A path `:alloc_id`: one segment, possibly empty (Nomad reports an empty ID as too short).
ALLOC_ID = "{alloc_id:[^/]*}"
#: A path `:eval_id`, likewise.
EVAL_ID = "{eval_id:[^/]*}"


@dataclass(frozen=True)
class Endpoint:
    """One path and its handlers by method (upper-case, e.g. `GET`)."""

    path: str
    handlers: Mapping[str, AnswerHandler]


#: What wraps each route's responder, given the route's pattern (`telemetry.RouteCounts.counted`).
RouteWrapper = Callable[[str, Responder], Responder]


def _unwrapped(route: str, responder: Responder) -> Responder:
    return responder


def add_endpoints(
    router: web.UrlDispatcher, endpoints: Iterable[Endpoint], wrap: RouteWrapper = _unwrapped
) -> None:
    """Register each endpoint's handlers, every one behind `answers.respond` and `wrap`."""
    for endpoint in endpoints:
        resource = router.add_resource(endpoint.path)
        route = resource.canonical
        for method, handler in endpoint.handlers.items():
            resource.add_route(method, wrap(route, respond(handler)))
        resource.add_route("*", wrap(route, respond(method_not_allowed(endpoint.handlers))))


def add_fallthroughs(router: web.UrlDispatcher, wrap: RouteWrapper = _unwrapped) -> None:
    """Register the catch-alls; call after every `add_endpoints`."""
    for path, handler in (
        ("/v1/allocation/{tail:.*}", resource_not_found),
        ("/v1/client/allocation/{tail:.*}", resource_not_found),
        ("/{tail:.*}", root_fallthrough),
    ):
        resource = router.add_resource(path)
        resource.add_route("*", wrap(resource.canonical, respond(handler)))


def method_not_allowed(handlers: Mapping[str, AnswerHandler]) -> AnswerHandler:
    """The 405 handler of one path: Nomad's `Invalid method` plus `Allow: <its methods>`."""
    allow = {"Allow": ", ".join(sorted(method.upper() for method in handlers))}

    async def invalid_method(request: web.Request) -> Answer:
        raise NomadError(405, INVALID_METHOD, headers=allow)

    return invalid_method


async def resource_not_found(request: web.Request) -> Answer:
    raise NomadError(404, RESOURCE_NOT_FOUND)


async def root_fallthrough(request: web.Request) -> web.StreamResponse:
    """Nomad's mux answers an unknown path 404 with an empty body."""
    return web.Response(status=404)
