"""The API listener's shortcut for its hottest request, a plain `GET /v1/allocation/:id`.

Why: aiohttp answers each request with a task of its own, a `Request`, a route lookup, a
`Response` and a stream writer; on Python 3.11 that machinery is about 47 µs of CPU where the
read itself is a few (docs/benchmarks/issue-36.md, "Single reads"). A request the shortcut can
answer is answered from the connection's `data_received`, right after aiohttp's own parser has
read it, with the bytes aiohttp would have sent (the same status line and headers in the same
order, `Date` and `Server` from aiohttp's helpers), counted in the same metrics series.

What it answers; anything else goes aiohttp's way, unchanged, errors included:

- the connection idle (no request in progress or queued) and one whole request in the data;
- `GET`, HTTP/1.1, keep-alive, no body, no `Expect`, no upgrade, the target exactly
  `/v1/allocation/<36 characters of hex digits and hyphens>` (no query string: `?pretty`,
  blocking queries and `namespace` go the ordinary way);
- the listener not draining (the draining hook must be the application's only
  `on_response_prepare`, or the runner leaves the shortcut off);
- `allocation.read_at_once` finds the allocation (store synced, the caller granted at once by
  the authorizer's caches; a token that needs a review goes the ordinary way).

It relies on aiohttp's `RequestHandler` internals (the idle connection's waiter, the message
queue, the keep-alive timer): `ApiRunner` checks they are there and otherwise serves without
the shortcut; tests/unit/test_shortcut.py compares its answers with aiohttp's, byte for byte.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from aiohttp import web
from aiohttp.helpers import rfc822_formatted_time
from aiohttp.http import SERVER_SOFTWARE, HttpRequestParser, HttpVersion11
from aiohttp.streams import EMPTY_PAYLOAD
from aiohttp.web_protocol import RequestHandler, _ErrInfo

from allocbridge.api.allocation import read_at_once
from allocbridge.api.answers import meta_headers
from allocbridge.api.context import ApiContext
from allocbridge.auth import GrantsAtOnce, extract_token
from allocbridge.lifecycle import Lifecycle

log = logging.getLogger(__name__)

#: The metrics route of the answers given here: the read's resource, as aiohttp names it.
ROUTE: Final = "/v1/allocation/{alloc_id}"
_TARGET: Final = re.compile(r"/v1/allocation/([0-9a-fA-F-]{36})")
_JSON_HEADERS: Final = "Content-Type: application/json\r\nContent-Length: "
#: `RequestHandler` attributes the shortcut reads or sets (aiohttp 3.14's names; the parser's
#: `message_consumed` too).
_INTERNALS: Final = (
    "_waiter",
    "_messages",
    "_parser",
    "_payload_parser",
    "_upgraded",
    "_manager",
    "_keepalive",
    "_keepalive_handle",
    "_keepalive_timeout",
    "_next_keepalive_close_time",
    "_process_keepalive",
    "_force_close",
    "_close",
)

Recorder = Callable[[str, str, int, float], None]  # `telemetry.RouteCounts.record`
PrepareHook = Callable[[web.Request, web.StreamResponse], Any]


@dataclass(frozen=True)
class ReadShortcut:
    """The single read answered at once, for the connections of one application."""

    ctx: ApiContext
    grants: GrantsAtOnce
    lifecycle: Lifecycle
    record: Recorder
    #: The application's `on_response_prepare` hooks the shortcut stands in for (the draining
    #: one: it answers only while not draining).
    prepare_hooks: Sequence[PrepareHook]

    def answer(self, target: str, headers: Any) -> bytes | None:
        """The whole HTTP answer to `GET target`, or None to let aiohttp answer it."""
        matched = _TARGET.fullmatch(target)
        if matched is None or self.lifecycle.draining:
            return None
        alloc = read_at_once(self.ctx, self.grants, matched[1], extract_token(headers))
        if alloc is None:
            return None
        body = alloc.wire_json
        head = ["HTTP/1.1 200 OK\r\n"]
        for name, value in meta_headers(alloc.modify_index).items():
            head.append(f"{name}: {value}\r\n")
        head.append(
            f"{_JSON_HEADERS}{len(body)}\r\n"
            f"Date: {rfc822_formatted_time()}\r\nServer: {SERVER_SOFTWARE}\r\n\r\n"
        )
        return "".join(head).encode() + body


class ShortcutRequestHandler(RequestHandler):
    """aiohttp's connection handler, answering what `ReadShortcut` can before queueing it."""

    __slots__ = ("shortcut",)

    shortcut: ReadShortcut

    def data_received(self, data: bytes) -> None:
        waiter = self._waiter
        if (
            waiter is None  # a request in progress: it comes after that one
            or waiter.done()
            or self._messages
            or self._payload_parser is not None
            or self._upgraded
        ):
            super().data_received(data)
            return
        # Parsed and queued by aiohttp as always, but without waking the connection's task yet.
        self._waiter = None
        try:
            super().data_received(data)
        finally:
            self._waiter = waiter
        if self._force_close or self._close:
            waiter.cancel()
            return
        messages = self._messages
        if len(messages) == 1 and self._answered(*messages[0]):
            messages.popleft()
            return
        if messages:
            waiter.set_result(None)

    def _answered(self, message: Any, payload: object) -> bool:
        """Answer `message` here if the shortcut can; True once it is written."""
        if (
            payload is not EMPTY_PAYLOAD
            or isinstance(message, _ErrInfo)
            or message.method != "GET"
            or message.version != HttpVersion11
            or message.should_close
            or message.upgrade
            or "Expect" in message.headers
        ):
            return False
        transport = self.transport
        if transport is None or transport.is_closing() or self.writing_paused:
            return False
        started = time.perf_counter()
        try:
            answer = self.shortcut.answer(message.path, message.headers)
        except Exception:  # a fault here: aiohttp's way answers it (500) and logs it too
            log.exception("the read shortcut failed; answering the ordinary way")
            return False
        if answer is None:
            return False
        transport.write(answer)
        self._done(started)
        return True

    def _done(self, started: float) -> None:
        """What aiohttp's connection task does after an answer: counts, keep-alive timer."""
        manager = self._manager
        if manager is not None:
            manager.requests_count += 1
        if self._parser is not None:
            self._parser.message_consumed()
        self._keepalive = True
        loop = self._loop
        close_time = loop.time() + self._keepalive_timeout
        self._next_keepalive_close_time = close_time
        if self._keepalive_handle is None:
            self._keepalive_handle = loop.call_at(close_time, self._process_keepalive)
        self.shortcut.record(ROUTE, "GET", 200, time.perf_counter() - started)


class _ShortcutServer(web.Server):
    """aiohttp's server whose connections are `ShortcutRequestHandler`s."""

    shortcut: ReadShortcut

    def __call__(self) -> RequestHandler:
        handler = ShortcutRequestHandler(self, loop=self._loop, **self._kwargs)
        handler.shortcut = self.shortcut
        return handler


#: The application key `create_app` keeps its shortcut under.
SHORTCUT: Final = web.AppKey("allocbridge_read_shortcut", ReadShortcut)


class ApiRunner(web.AppRunner):
    """`web.AppRunner` serving the application's `SHORTCUT`, when it has one and may use it
    (the access log off: the shortcut writes none)."""

    async def _make_server(self) -> web.Server:
        server = await super()._make_server()
        shortcut = self.app.get(SHORTCUT)
        logged = self._kwargs.get("access_log", True) is not None
        if shortcut is not None and not logged and usable(self.app, shortcut):
            server.__class__ = _ShortcutServer  # adds only `__call__` and this attribute
            assert isinstance(server, _ShortcutServer)
            server.shortcut = shortcut
        return server


def usable(app: web.Application, shortcut: ReadShortcut) -> bool:
    """Whether `shortcut` may answer for `app`: it stands in for every `on_response_prepare`
    hook and no middleware, and aiohttp's handler has the internals it relies on."""
    if list(app.on_response_prepare) != list(shortcut.prepare_hooks) or app.middlewares:
        return False
    missing = [name for name in _INTERNALS if not hasattr(RequestHandler, name)]
    if not hasattr(HttpRequestParser, "message_consumed"):
        missing.append("HttpRequestParser.message_consumed")
    if missing:
        log.warning("the read shortcut is off: aiohttp lacks %s", ", ".join(missing))
        return False
    return True
