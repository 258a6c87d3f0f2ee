"""The one response path of `/v1`: JSON bodies, `?pretty`, the `X-Nomad-*` headers, errors.

A handler returns an `Answer` (what to say, and the index it reflects) or raises `NomadError`
(see `api.errors`); `respond` wraps every route's handler (`routing.add_endpoints` applies it)
and is the only code that builds a `/v1` response. The streaming endpoints (exec, logs) prepare
their own response and return it; `respond` passes it through and still answers their errors
raised before the stream starts.

- The body is compact JSON as Nomad's encoder writes it (`store.encoding`), or what the store
  pre-rendered in that form; with `?pretty` (any value but a single `0`, on every endpoint, as
  Nomad's `wrap` does) it is indented, with a trailing newline.
- A read answer (`index`) carries Nomad's `setMeta`: `X-Nomad-Index` (never below 1: the Go
  client's blocking loops would spin on 0), `X-Nomad-KnownLeader`, `X-Nomad-LastContact`, and
  the page token as `X-Nomad-NextToken` and `X-Service-NextToken` (the spec's name). A write
  answer (`write_index`) carries only `X-Nomad-Index`, as Nomad's `setIndex`.
- A large pre-rendered array goes out in pieces (see `_send_array`).
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from aiohttp import web

from allocbridge.api.errors import Failure, failure
from allocbridge.api.query import wants_pretty
from allocbridge.store import encoding

log = logging.getLogger(__name__)

#: Array bodies larger than this go out in pieces of about this size (see `_send_array`).
STREAM_BYTES: Final = 1 << 20


@dataclass(frozen=True)
class Answer:
    """What a handler answers: a JSON body and, for reads, the index it reflects.

    The body is `value`, or `encoded` (the same value already compact-encoded, sent as is unless
    `?pretty`), or `array`, a compact JSON array given as fragments to concatenate (the store's
    `stub_array`).
    """

    value: Any = None
    encoded: bytes | None = None
    array: encoding.Fragments | None = None
    index: int | None = None  # a read: Nomad's metadata headers
    next_token: str = ""  # a read's next page
    write_index: int | None = None  # a write: `X-Nomad-Index` alone


Responder = Callable[[web.Request], Awaitable[web.StreamResponse]]
AnswerHandler = Callable[[web.Request], Awaitable[Answer | web.StreamResponse]]


def respond(handler: AnswerHandler) -> Responder:
    """The aiohttp handler of `handler`: its answer rendered, its failure answered."""

    @functools.wraps(handler)
    async def responder(request: web.Request) -> web.StreamResponse:
        try:
            result = await handler(request)
            if isinstance(result, web.StreamResponse):
                return result
            return await _send(request, result)
        except web.HTTPException:
            raise  # aiohttp's own (for example a request body too large) answer themselves
        except Exception as exc:
            return error_response(request, failure(exc), exc)

    return responder


def error_response(request: web.Request, answer: Failure, exc: Exception) -> web.Response:
    """The failure as Nomad sends it (4xx logged at debug, 5xx at error)."""
    fields = {
        "method": request.method,
        "path": request.path,
        "status": answer.status,
        "error": answer.detail or ("" if answer.traceback else answer.message),
    }
    log.log(answer.level, answer.event, extra=fields, exc_info=exc if answer.traceback else None)
    headers = dict(answer.headers)
    if answer.index is not None:
        headers.update(meta_headers(answer.index))
    return web.Response(
        status=answer.status,
        text=answer.message,
        content_type="text/plain",
        charset="utf-8",
        headers=headers,
    )


def meta_headers(index: int, *, next_token: str = "") -> dict[str, str]:
    """Nomad's `setMeta`: the index, a known leader, no lag; the page token when there is one."""
    headers = {
        "X-Nomad-Index": str(max(1, index)),
        "X-Nomad-KnownLeader": "true",
        "X-Nomad-LastContact": "0",
    }
    if next_token:
        headers["X-Nomad-NextToken"] = next_token
        headers["X-Service-NextToken"] = next_token
    return headers


async def _send(request: web.Request, answer: Answer) -> web.StreamResponse:
    headers: dict[str, str] = {}
    if answer.index is not None:
        headers = meta_headers(answer.index, next_token=answer.next_token)
    elif answer.write_index is not None:
        headers = {"X-Nomad-Index": str(answer.write_index)}
    pretty = wants_pretty(request.query)
    if answer.array is not None:
        if pretty:
            return _json(encoding.pretty(json.loads(answer.array.join())), headers)
        return await _send_array(request, answer.array, headers)
    if answer.encoded is not None and not pretty:
        return _json(answer.encoded, headers)
    value = answer.value
    return _json(encoding.pretty(value) if pretty else encoding.compact(value), headers)


def _json(body: bytes, headers: Mapping[str, str]) -> web.Response:
    return web.Response(body=body, content_type="application/json", headers=headers)


async def _send_array(
    request: web.Request, array: encoding.Fragments, headers: Mapping[str, str]
) -> web.StreamResponse:
    """The JSON array given as fragments: one body when small, else streamed in pieces.

    A list of 10,000 allocations is 8-30 MB; joined whole it exists twice per client at once
    (the joined body, then the transport's copy of what the socket did not take yet), which
    made the replica's peak memory jump while a few clients listed everything. In pieces, each
    client holds about one piece; the length is known up front, so clients still get
    Content-Length.
    """
    size = array.size()
    if size <= STREAM_BYTES:
        return _json(array.join(), headers)
    response = web.StreamResponse(headers=headers)
    response.content_type = "application/json"
    response.content_length = size
    await response.prepare(request)
    parts, separator = array.parts, array.separator
    per_piece = max(1, len(parts) * STREAM_BYTES // size)
    piece = separator.join(parts[:per_piece])
    written = len(piece)
    await response.write(piece)
    for start in range(per_piece, len(parts), per_piece):
        piece = separator.join([b"", *parts[start : start + per_piece]])
        written += len(piece)
        await response.write(piece)
    if written != size:
        # A length known ahead (`Fragments.length`) was wrong: the client was promised other
        # than it got, so the connection cannot carry another answer.
        log.error(
            "a list body's length differs from its Content-Length",
            extra={"path": request.path, "content_length": size, "written": written},
        )
        response.force_close()
    await response.write_eof()
    return response
