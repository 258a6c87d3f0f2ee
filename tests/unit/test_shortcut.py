"""The API listener's read shortcut (`api.shortcut`) answers byte for byte what aiohttp answers.

Two real listeners over the same store and authorizer: one served by `ApiRunner` (the shortcut
on, as `allocbridge run` serves), one by aiohttp's plain `AppRunner`. Each exchange goes to
both over raw keep-alive connections, and the answers are compared whole (the `Date` line
aside, which may fall in another second). A spy on the shortcut's metrics recorder tells which
requests the shortcut answered itself.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest
from aiohttp import web
from allocations_fixture import SAMPLE, sample_store

from allocbridge.api import shortcut as shortcut_module
from allocbridge.api.server import create_app
from allocbridge.api.shortcut import ROUTE, SHORTCUT, ApiRunner
from allocbridge.auth import AllowAll
from allocbridge.auth.kubernetes import KubernetesAuthorizer
from allocbridge.cluster.reviews import ReviewedUser, TokenVerdict
from allocbridge.lifecycle import Lifecycle, Phase
from allocbridge.store import AllocationStore
from allocbridge.telemetry import Metrics

FIRST = SAMPLE[0][0]  # namespace default
TEAM_A = SAMPLE[4][0]  # namespace team-a
GOOD = "good-token"  # read-job in default only
UNKNOWN = "00000000-0000-4000-8000-000000000000"


class Reviews:
    """`GOOD` authenticates and may read-job in `default`; every other token is unknown."""

    async def authenticate(self, token: str) -> TokenVerdict:
        if token != GOOD:
            return TokenVerdict(None, "invalid bearer token")
        return TokenVerdict(ReviewedUser(username="reader"))

    async def allowed(self, user: ReviewedUser, verb: str, namespace: str) -> bool:
        return verb == "read-job" and namespace == "default"

    async def namespaces(self) -> tuple[str, ...]:
        return ("default", "team-a")


@dataclass
class Listener:
    port: int
    metrics: Metrics
    lifecycle: Lifecycle
    shortcut_answers: list[str] = field(default_factory=list)  # routes the shortcut counted


@dataclass
class Pair:
    shortcut: Listener
    plain: Listener


async def serve(
    store: AllocationStore,
    *,
    with_shortcut: bool,
    extra_hook: bool = False,
    acl: bool = True,
    sync_timeout: float = 10.0,
    access_log: bool = False,
) -> tuple[web.AppRunner, Listener]:
    metrics, lifecycle = Metrics(), Lifecycle()
    authorizer = KubernetesAuthorizer(backend=Reviews()) if acl else AllowAll()
    app = create_app(
        metrics, store=store, authorizer=authorizer, lifecycle=lifecycle, sync_timeout=sync_timeout
    )
    listener = Listener(0, metrics, lifecycle)
    shortcut = app[SHORTCUT]

    def spy(route: str, method: str, code: int, seconds: float) -> None:
        listener.shortcut_answers.append(route)
        shortcut.record(route, method, code, seconds)

    app[SHORTCUT] = dataclasses.replace(shortcut, record=spy)
    if extra_hook:

        async def another_hook(_request: web.Request, _response: web.StreamResponse) -> None:
            return None

        app.on_response_prepare.append(another_hook)
    kind = ApiRunner if with_shortcut else web.AppRunner
    # Without `access_log`, aiohttp's runner writes its access log.
    runner = kind(app) if access_log else kind(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    listener.port = runner.addresses[0][1]
    return runner, listener


@pytest.fixture
async def pair() -> AsyncIterator[Pair]:
    store = sample_store()
    fast_runner, fast = await serve(store, with_shortcut=True)
    plain_runner, plain = await serve(store, with_shortcut=False)
    yield Pair(fast, plain)
    await fast_runner.cleanup()
    await plain_runner.cleanup()


class Connection:
    """One raw keep-alive connection: bytes out, whole answers back."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, port: int) -> Connection:
        return cls(*await asyncio.open_connection("127.0.0.1", port))

    async def answer(self) -> bytes:
        head = await asyncio.wait_for(self.reader.readuntil(b"\r\n\r\n"), 5)
        length = re.search(rb"\r\nContent-Length: (\d+)\r\n", head)
        body = await self.reader.readexactly(int(length[1])) if length else b""
        return re.sub(rb"\r\nDate: [^\r]*\r\n", b"\r\nDate: -\r\n", head) + body

    async def exchange(self, *requests: bytes, answers: int = 1) -> list[bytes]:
        """Each request sent once the last one's `answers` answers are in."""
        got = []
        for request in requests:
            self.writer.write(request)
            await self.writer.drain()
            got.extend([await self.answer() for _ in range(answers)])
        return got

    async def closed_by_server(self) -> bool:
        return await asyncio.wait_for(self.reader.read(), 5) == b""

    async def close(self) -> None:
        self.writer.close()
        await self.writer.wait_closed()


def get(target: str, token: str | None = GOOD, *, version: str = "1.1", extra: str = "") -> bytes:
    auth = f"X-Nomad-Token: {token}\r\n" if token else ""
    return f"GET {target} HTTP/{version}\r\nHost: replica\r\n{auth}{extra}\r\n".encode()


async def both(pair: Pair, *requests: bytes, answers: int = 1) -> list[bytes]:
    """Send the same requests on a fresh connection to each listener; their answers, equal."""
    got = []
    for listener in (pair.shortcut, pair.plain):
        connection = await Connection.open(listener.port)
        try:
            got.append(await connection.exchange(*requests, answers=answers))
        finally:
            await connection.close()
    assert got[0] == got[1]
    return got[0]


async def test_a_warm_plain_read_is_answered_by_the_shortcut_as_aiohttp_answers_it(
    pair: Pair,
) -> None:
    cold, warm, again = await both(pair, *[get(f"/v1/allocation/{FIRST}")] * 3)
    assert cold == warm == again
    assert warm.startswith(b"HTTP/1.1 200 OK\r\nX-Nomad-Index: 101\r\n")
    assert b"\r\nContent-Type: application/json\r\n" in warm
    # The first read reviews the token (aiohttp's way), the next two come from the caches.
    assert pair.shortcut.shortcut_answers == [ROUTE, ROUTE]
    assert pair.plain.shortcut_answers == []


async def test_the_shortcut_counts_in_the_same_metrics_series(pair: Pair) -> None:
    await both(pair, *[get(f"/v1/allocation/{FIRST}")] * 3)
    for listener in (pair.shortcut, pair.plain):
        counts = listener.metrics.http.requests["api"]
        assert counts == {(ROUTE, "GET", 200): 3}
        assert sum(listener.metrics.http.latencies["api"][ROUTE].counts) == 3


async def test_upper_case_and_unknown_ids_answer_as_aiohttp_does(pair: Pair) -> None:
    warm = get(f"/v1/allocation/{FIRST}")
    _, upper, unknown, short = await both(
        pair,
        warm,
        get(f"/v1/allocation/{FIRST.upper()}"),
        get(f"/v1/allocation/{UNKNOWN}"),
        get("/v1/allocation/" + "-" * 36),
    )
    assert upper.startswith(b"HTTP/1.1 200 OK")
    assert unknown.startswith(b"HTTP/1.1 404 Not Found") and unknown.endswith(b"alloc not found")
    assert short.startswith(b"HTTP/1.1 400 Bad Request")
    assert pair.shortcut.shortcut_answers == [ROUTE]  # the upper-case read; errors go aiohttp's way


@pytest.mark.parametrize(
    "request_bytes",
    [
        pytest.param(get(f"/v1/allocation/{FIRST}?pretty"), id="pretty"),
        pytest.param(get(f"/v1/allocation/{FIRST}?namespace=default"), id="query"),
        pytest.param(get(f"/v1/allocation/{TEAM_A}"), id="not granted"),
        pytest.param(get(f"/v1/allocation/{FIRST}", "bad-token"), id="unknown token"),
        pytest.param(get(f"/v1/allocation/{FIRST}", None), id="no token"),
        pytest.param(get(f"/v1/allocation/{FIRST}", version="1.0"), id="HTTP/1.0"),
        pytest.param(
            get(f"/v1/allocation/{FIRST}", version="1.0", extra="Connection: keep-alive\r\n"),
            id="HTTP/1.0 keep-alive",
        ),
        pytest.param(
            get(f"/v1/allocation/{FIRST}").replace(b"GET", b"HEAD", 1),
            id="HEAD",
        ),
        pytest.param(
            get(f"/v1/allocation/{FIRST}", extra="Content-Length: 2\r\n") + b"{}", id="body"
        ),
    ],
)
async def test_what_the_shortcut_leaves_is_answered_by_aiohttp(
    pair: Pair, request_bytes: bytes
) -> None:
    warm = get(f"/v1/allocation/{FIRST}")
    await both(pair, warm, warm)  # the token is granted from the caches from here on
    before = len(pair.shortcut.shortcut_answers)
    if request_bytes.startswith(b"HEAD"):
        # aiohttp answers HEAD on a GET-only path with 405; the answer has no body to read.
        for listener in (pair.shortcut, pair.plain):
            connection = await Connection.open(listener.port)
            connection.writer.write(request_bytes)
            head = await asyncio.wait_for(connection.reader.readuntil(b"\r\n\r\n"), 5)
            assert head.startswith(b"HTTP/1.1 405")
            await connection.close()
    else:
        await both(pair, request_bytes)
    assert len(pair.shortcut.shortcut_answers) == before


async def test_connection_close_is_answered_by_aiohttp_and_closes(pair: Pair) -> None:
    warm = get(f"/v1/allocation/{FIRST}")
    await both(pair, warm, warm)
    before = len(pair.shortcut.shortcut_answers)
    (answer,) = await both(pair, get(f"/v1/allocation/{FIRST}", extra="Connection: close\r\n"))
    assert b"\r\nConnection: close\r\n" in answer
    assert len(pair.shortcut.shortcut_answers) == before


async def test_pipelined_and_split_requests_are_answered_in_order(pair: Pair) -> None:
    warm = get(f"/v1/allocation/{FIRST}")
    await both(pair, warm)
    pipelined = warm + get(f"/v1/allocation/{UNKNOWN}") + warm
    first, missing, last = await both(pair, pipelined, answers=3)
    assert first == last and first.startswith(b"HTTP/1.1 200 OK")
    assert missing.startswith(b"HTTP/1.1 404")
    # Split mid-header: the shortcut answers once the whole request is in.
    before = len(pair.shortcut.shortcut_answers)
    answers = []
    for listener in (pair.shortcut, pair.plain):
        connection = await Connection.open(listener.port)
        connection.writer.write(warm[:20])
        await connection.writer.drain()
        await asyncio.sleep(0.05)
        answers.append(await connection.exchange(warm[20:], answers=1))
        await connection.close()
    assert answers[0] == answers[1] == [first]
    assert len(pair.shortcut.shortcut_answers) == before + 1


async def test_while_draining_answers_close_their_connection(pair: Pair) -> None:
    warm = get(f"/v1/allocation/{FIRST}")
    await both(pair, warm, warm)
    before = len(pair.shortcut.shortcut_answers)
    for listener in (pair.shortcut, pair.plain):
        listener.lifecycle.phase = Phase.DRAINING
    for listener in (pair.shortcut, pair.plain):
        connection = await Connection.open(listener.port)
        (answer,) = await connection.exchange(warm)
        assert answer.startswith(b"HTTP/1.1 200 OK") and b"\r\nConnection: close\r\n" in answer
        assert await connection.closed_by_server()
        await connection.close()
    assert len(pair.shortcut.shortcut_answers) == before


async def test_many_reads_on_one_connection_match(pair: Pair) -> None:
    """The connection stays usable between shortcut answers and aiohttp's ones."""
    warm = get(f"/v1/allocation/{FIRST}")
    mixed = [warm, get(f"/v1/allocation/{FIRST}?pretty"), warm, get(f"/v1/allocation/{UNKNOWN}")]
    answers = await both(pair, *(mixed * 5))
    assert len(answers) == 20
    assert len(pair.shortcut.shortcut_answers) == 10 - 1  # every plain read but the cold one


async def test_without_acl_every_plain_read_takes_the_shortcut() -> None:
    store = sample_store()
    runner, listener = await serve(store, with_shortcut=True, acl=False)
    try:
        connection = await Connection.open(listener.port)
        answers = await connection.exchange(*[get(f"/v1/allocation/{FIRST}", None)] * 2)
        await connection.close()
    finally:
        await runner.cleanup()
    assert answers[0] == answers[1] and answers[0].startswith(b"HTTP/1.1 200 OK")
    assert listener.shortcut_answers == [ROUTE, ROUTE]


async def test_an_unknown_response_hook_turns_the_shortcut_off() -> None:
    """The shortcut stands in for the draining hook only; another would be skipped."""
    runner, listener = await serve(sample_store(), with_shortcut=True, extra_hook=True)
    try:
        connection = await Connection.open(listener.port)
        answers = await connection.exchange(*[get(f"/v1/allocation/{FIRST}")] * 3)
        await connection.close()
    finally:
        await runner.cleanup()
    assert all(answer.startswith(b"HTTP/1.1 200 OK") for answer in answers)
    assert listener.shortcut_answers == []


async def test_an_unsynced_store_is_answered_by_aiohttp() -> None:
    store = sample_store(synced=False)
    runner, listener = await serve(store, with_shortcut=True, sync_timeout=0.1)
    try:
        connection = await Connection.open(listener.port)
        cold, warm = await connection.exchange(*[get(f"/v1/allocation/{FIRST}")] * 2)
        await connection.close()
    finally:
        await runner.cleanup()
    # aiohttp's way waits for the first full list, then answers 503.
    assert cold.startswith(b"HTTP/1.1 503") and warm == cold
    assert listener.shortcut_answers == []


async def plain_reads(listener: Listener, count: int = 3) -> list[bytes]:
    connection = await Connection.open(listener.port)
    try:
        return await connection.exchange(*[get(f"/v1/allocation/{FIRST}")] * count)
    finally:
        await connection.close()


async def answered_without_the_shortcut(*, access_log: bool = False) -> None:
    """Plain reads to a listener built with the shortcut succeed, all answered aiohttp's way."""
    runner, listener = await serve(sample_store(), with_shortcut=True, access_log=access_log)
    try:
        answers = await plain_reads(listener)
    finally:
        await runner.cleanup()
    assert all(answer.startswith(b"HTTP/1.1 200 OK") for answer in answers)
    assert listener.shortcut_answers == []


async def test_an_access_log_turns_the_shortcut_off() -> None:
    """The shortcut writes no access log line, so a runner that logs does not use it."""
    await answered_without_the_shortcut(access_log=True)


async def test_missing_aiohttp_internals_turn_the_shortcut_off(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(shortcut_module, "_INTERNALS", (*shortcut_module._INTERNALS, "_gone"))
    await answered_without_the_shortcut()
    assert "the read shortcut is off: aiohttp lacks _gone" in caplog.text


async def test_a_fault_in_the_shortcut_is_answered_the_ordinary_way(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(self: object, target: str, headers: object) -> bytes | None:
        raise RuntimeError("broken shortcut")

    monkeypatch.setattr(shortcut_module.ReadShortcut, "answer", broken)
    await answered_without_the_shortcut()
    assert "the read shortcut failed; answering the ordinary way" in caplog.text
