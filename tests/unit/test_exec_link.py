"""`PodExecutor` on its own TLS socket (`cluster.execlink.SocketLink`), over real sockets.

A TLS server (aiohttp, the local cluster's PKI) plays the API server's `pods/exec`: it checks
the token, picks v5, echoes stdin on stdout, answers a resize, and ends with an exit status;
other paths refuse the upgrade with a Status answer. The client side is the product's own:
the upgrade written and read by hand, frames parsed where the bytes arrive, writes straight to
the socket (and queued while it is full).
"""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from aiohttp import WSMsgType, web

from allocbridge.cluster.connection import Credentials
from allocbridge.cluster.errors import NotFoundError
from allocbridge.cluster.execlink import SocketLink
from allocbridge.cluster.podexec import (
    HIGH_WATER,
    PROTOCOL_V5,
    Channel,
    ContainerNotRunningError,
    ExecStream,
    Exited,
    Output,
    OutputClosed,
    PodExecutor,
)
from allocbridge_localcluster.pki import Pki

TOKEN = "exec-link-token"
BIG = bytes(range(256)) * 4096  # 1 MiB: more than a socket takes at once


@dataclass
class Server:
    url: str
    ca: Path
    resizes: list[object]


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Server]:
    pki = Pki(tmp_path / "pki").ensure()
    resizes: list[object] = []

    async def exec_handler(request: web.Request) -> web.StreamResponse:
        if request.headers.get("Authorization") != f"Bearer {TOKEN}":
            return web.json_response({"kind": "Status", "message": "Unauthorized"}, status=401)
        if request.match_info["pod"] == "gone":
            body = {"kind": "Status", "message": 'pods "gone" not found', "code": 404}
            return web.json_response(body, status=404)
        if request.match_info["pod"] == "stopped":
            body = {"kind": "Status", "message": "container main is not running", "code": 400}
            return web.json_response(body, status=400)
        ws = web.WebSocketResponse(protocols=(PROTOCOL_V5,))
        await ws.prepare(request)
        await ws.send_bytes(b"\x01ready\n")
        async for message in ws:
            if message.type is not WSMsgType.BINARY:
                continue
            channel, payload = message.data[0], message.data[1:]
            if channel == Channel.STDIN:
                await ws.send_bytes(b"\x01" + payload)
            elif channel == Channel.RESIZE:
                resizes.append(json.loads(payload))
            elif channel == Channel.CLOSE and payload == b"\x00":  # stdin closed: exit 3
                await ws.send_bytes(b"\xff\x01")
                status = {
                    "status": "Failure",
                    "reason": "NonZeroExitCode",
                    "details": {"causes": [{"reason": "ExitCode", "message": "3"}]},
                }
                await ws.send_bytes(b"\x03" + json.dumps(status).encode())
        return ws

    app = web.Application()
    app.router.add_get("/api/v1/namespaces/{namespace}/pods/{pod}/exec", exec_handler)
    runner = web.AppRunner(app)
    await runner.setup()
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(pki.serving_cert, pki.serving_key)
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=tls)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield Server(f"https://127.0.0.1:{port}", pki.ca_cert, resizes)
    finally:
        await runner.cleanup()


def executor(server: Server, token: str = TOKEN) -> PodExecutor:
    credentials = Credentials(server=server.url, ca_path=str(server.ca), token=token)
    return PodExecutor(lambda: credentials)


async def test_a_session_carries_stdin_resizes_output_and_the_exit_code(server: Server) -> None:
    pods = executor(server)
    try:
        async with pods.open("ns", "pod", "main", ["cat"], tty=True) as stream:
            assert stream.protocol == PROTOCOL_V5
            events = stream.events()
            assert await anext(events) == Output(Channel.STDOUT, b"ready\n")
            await stream.resize(80, 24)
            echoed = bytearray()
            await stream.send_stdin(BIG)  # queued while the socket is full, then sent
            while len(echoed) < len(BIG):
                event = await anext(events)
                assert isinstance(event, Output)
                echoed += event.data
            assert bytes(echoed) == BIG
            assert await stream.close_stdin()
            assert await anext(events) == OutputClosed(Channel.STDOUT)
            assert await anext(events) == Exited(3)
            assert stream.exited
        assert server.resizes == [{"Width": 80, "Height": 24}]
    finally:
        await pods.close()


async def test_a_listener_gets_the_events_as_they_arrive(server: Server) -> None:
    pods = executor(server)
    got: list[object] = []
    ended: asyncio.Future[object] = asyncio.get_running_loop().create_future()

    class Listener:
        def on_output(self, channel: Channel, data: bytes) -> None:
            got.append(Output(channel, data))

        def on_event(self, event: object) -> None:
            got.append(event)

        def on_end(self, error: object) -> None:
            ended.set_result(error)

    try:
        async with pods.open("ns", "pod", "main", ["cat"], tty=False) as stream:
            stream.listen(Listener())
            stream.write_stdin(b"x")
            stream.write_close_stdin()
            assert await asyncio.wait_for(ended, 10) is None
        assert got == [
            Output(Channel.STDOUT, b"ready\n"),
            Output(Channel.STDOUT, b"x"),
            OutputClosed(Channel.STDOUT),
            Exited(3),
        ]
    finally:
        await pods.close()


async def test_refused_upgrades_carry_the_api_servers_message(server: Server) -> None:
    pods = executor(server)
    try:
        with pytest.raises(NotFoundError, match='404 pods "gone" not found'):
            async with pods.open("ns", "gone", "main", ["sh"], tty=False):
                pass
        with pytest.raises(ContainerNotRunningError, match="400 container main is not running"):
            async with pods.open("ns", "stopped", "main", ["sh"], tty=False):
                pass
    finally:
        await pods.close()


class _Collected:
    """A link's consumer that keeps what it is handed."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.arrived = asyncio.Event()
        self.ended = False

    def feed_data(self, data: bytes) -> tuple[bool, bytes]:
        self.data += data
        self.arrived.set()
        return False, b""

    def feed_eof(self) -> None:
        self.ended = True
        self.arrived.set()


async def _until(collected: _Collected, size: int) -> None:
    while len(collected.data) < size:
        collected.arrived.clear()
        await asyncio.wait_for(collected.arrived.wait(), 5)


async def test_every_record_comes_out_however_its_bytes_arrive(tmp_path: Path) -> None:
    """The link hands on each record as soon as it is whole, whatever the segments: records
    one at a time (keystrokes), many in one segment (bulk output), a record split across two
    segments (nothing of it before its end, all of it then) and records of 16 KiB. The server
    is an `ssl.SSLObject` over memory, so the test decides every byte of every segment."""
    pki = Pki(tmp_path / "pki").ensure()
    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_tls.load_cert_chain(pki.serving_cert, pki.serving_key)
    client_tls = ssl.create_default_context(cafile=str(pki.ca_cert))
    ours, theirs = socket.socketpair()
    ours.setblocking(False)
    theirs.setblocking(False)
    loop = asyncio.get_running_loop()
    into, out = ssl.MemoryBIO(), ssl.MemoryBIO()
    server = server_tls.wrap_bio(into, out, server_side=True)

    async def serve_handshake() -> None:
        while True:
            try:
                server.do_handshake()
            except ssl.SSLWantReadError:
                if out.pending:
                    await loop.sock_sendall(theirs, out.read())
                into.write(await loop.sock_recv(theirs, 65536))
                continue
            await loop.sock_sendall(theirs, out.read())  # its last flight and the tickets
            return

    def records(*payloads: bytes) -> list[bytes]:
        sealed = []
        for payload in payloads:
            server.write(payload)
            sealed.append(out.read())
        return sealed

    link = SocketLink.wrap(ours, client_tls, "localhost")
    try:
        await asyncio.gather(link.handshake(), serve_handshake())
        collected = _Collected()
        link.start(collected)
        expected = bytearray()
        for key in (b"x", b"\x08\x1b[J", b"y"):  # one record per segment
            [record] = records(key)
            await loop.sock_sendall(theirs, record)
            expected += key
            await _until(collected, len(expected))
        burst = [bytes([i]) * (i + 1) for i in range(40)]  # many records in one segment
        await loop.sock_sendall(theirs, b"".join(records(*burst)))
        expected += b"".join(burst)
        await _until(collected, len(expected))
        [split] = records(b"a record in two segments")
        await loop.sock_sendall(theirs, split[:9])
        await asyncio.sleep(0.05)  # time to hand on anything it (wrongly) would
        assert collected.data == expected
        await loop.sock_sendall(theirs, split[9:])
        expected += b"a record in two segments"
        await _until(collected, len(expected))
        bulk = bytes(range(256)) * 1024  # 256 KiB: sixteen records of 16 KiB
        sealed = b"".join(records(bulk))
        for at in range(0, len(sealed), 7001):  # segments that cut records anywhere
            await loop.sock_sendall(theirs, sealed[at : at + 7001])
        expected += bulk
        await _until(collected, len(expected))
        assert collected.data == expected
        assert not collected.ended
    finally:
        link.close()
        theirs.close()


async def test_writes_tell_how_much_waits_for_the_api_server() -> None:
    """`SocketLink.write` answers the bytes it holds back while the socket takes no more, and
    `ExecStream.write_stdin` whether they are over `HIGH_WATER` (when the relay stops reading
    its client); a closed link takes nothing and holds nothing."""
    ours, theirs = socket.socketpair()
    ours.setblocking(False)
    link = SocketLink(ours)
    stream = ExecStream(link, PROTOCOL_V5)
    chunk = bytes(64 * 1024)
    try:
        assert link.write(b"taken at once") == 0
        waiting = 0
        for _ in range(1000):  # until the socket's buffers are full
            waiting = link.write(chunk)
            if waiting:
                break
        assert 0 < waiting == link.get_write_buffer_size() <= len(chunk)
        over = []
        for _ in range(HIGH_WATER // len(chunk) + 2):
            over.append(stream.write_stdin(chunk))
        assert over[0] is False and over[-1] is True
        assert link.get_write_buffer_size() > HIGH_WATER
        await stream.close()
        assert link.write(b"more") == 0
        assert stream.write_stdin(b"x") is False
        assert link.get_write_buffer_size() == 0
    finally:
        theirs.close()
