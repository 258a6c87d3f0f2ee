"""A watch on uvloop's own TLS (`eventloop.uvloop_tls()`, what the store feed runs in) that
loses its tail still delivers every event: it resumes from the last resourceVersion its
consumer took, and the API server sends the lost events again.

A peer on loopback plays the API server's list and watch of pods over TLS (a thread with
blocking sockets, the local cluster's PKI). The first watch sends events while its consumer
is not reading (aiohttp pauses the connection), then the rest, then hangs up (close_notify
and FIN, as an API server that goes away does). uvloop's TLS drops the bytes it held when the
FIN came (MagicStack/uvloop pull request #661, reproduced in `test_event_loop.py`); the test
checks that the consumer still gets every event once, in order, and that the second watch
starts from the last event it took. The product's list-and-watch code runs unchanged
(`cluster.watch`, a kubernetes_asyncio client).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import orjson
import pytest

from allocbridge import eventloop
from allocbridge.cluster.connection import Credentials
from allocbridge.cluster.watch import Changed, Listed, ObjectWatches
from allocbridge_localcluster.pki import Pki

LISTED = 1  # the list's resourceVersion
FIRST = range(2, 202)  # ~200 KiB of events: more than aiohttp buffers before it pauses
TAIL = range(202, 302)  # ~100 KiB more: under uvloop's TLS read high-water mark
PAD = "x" * 1000
WAIT = 10.0


def _event(version: int) -> bytes:
    obj = {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {"name": f"p{version}", "namespace": "ns", "resourceVersion": str(version)},
        "spec": {"pad": PAD},
    }
    return orjson.dumps({"type": "ADDED", "object": obj}) + b"\n"


def _chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


@dataclass
class ApiServerPeer:
    """The list and watch of pods in namespace `ns`; records each watch's resourceVersion."""

    context: ssl.SSLContext
    listener: socket.socket = field(init=False)
    watched_from: list[int] = field(default_factory=list)
    consumer_waiting: threading.Event = field(default_factory=threading.Event)
    hung_up: threading.Event = field(default_factory=threading.Event)
    stopping: threading.Event = field(default_factory=threading.Event)
    threads: list[threading.Thread] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.2)

    @property
    def port(self) -> int:
        port: int = self.listener.getsockname()[1]
        return port

    def start(self) -> None:
        self._spawn(self._accept)

    def stop(self) -> None:
        self.stopping.set()
        for thread in self.threads:
            thread.join(WAIT)
        self.listener.close()

    def _spawn(self, target: object, *args: object) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)  # type: ignore[arg-type]
        self.threads.append(thread)
        thread.start()

    def _accept(self) -> None:
        while not self.stopping.is_set():
            try:
                connection, _ = self.listener.accept()
            except TimeoutError:
                continue
            connection.settimeout(None)
            self._spawn(self._serve, connection)

    def _serve(self, connection: socket.socket) -> None:
        with self.context.wrap_socket(connection, server_side=True) as tls:
            buffer = b""
            while True:
                while b"\r\n\r\n" not in buffer:
                    data = tls.recv(65536)
                    if not data:
                        return
                    buffer += data
                head, _, buffer = buffer.partition(b"\r\n\r\n")
                target = head.split(b"\r\n", 1)[0].split(b" ")[1].decode()
                query = parse_qs(urlsplit(target).query)
                if "watch" not in query:
                    body = orjson.dumps(
                        {
                            "kind": "PodList",
                            "metadata": {"resourceVersion": str(LISTED)},
                            "items": [],
                        }
                    )
                    tls.sendall(
                        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                        + f"Content-Length: {len(body)}\r\n\r\n".encode()
                        + body
                    )
                    continue
                since = int(query["resourceVersion"][0])
                self.watched_from.append(since)
                tls.sendall(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    b"Transfer-Encoding: chunked\r\n\r\n"
                )
                if since == LISTED:
                    self._first_watch(tls)
                    return
                tls.sendall(b"".join(_chunk(_event(v)) for v in range(since + 1, TAIL[-1] + 1)))
                while tls.recv(65536):  # quiet until the client goes
                    pass
                return

    def _first_watch(self, tls: ssl.SSLSocket) -> None:
        tls.sendall(b"".join(_chunk(_event(v)) for v in FIRST))
        assert self.consumer_waiting.wait(WAIT)
        time.sleep(0.5)  # the client reads what it can, then pauses
        tls.sendall(b"".join(_chunk(_event(v)) for v in TAIL))
        tls.setblocking(False)
        with contextlib.suppress(ssl.SSLWantReadError, ssl.SSLWantWriteError, OSError):
            tls.unwrap()  # close_notify, then FIN, without waiting for the client's
        tls.close()
        self.hung_up.set()


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return Pki(Path(tmp_path_factory.mktemp("pki"))).ensure()


@pytest.fixture
def peer(pki: Pki) -> Iterator[ApiServerPeer]:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(pki.serving_cert, pki.serving_key)
    server = ApiServerPeer(context)
    server.start()
    yield server
    server.stop()


async def _consume(peer: ApiServerPeer, ca: Path) -> list[int]:
    """The resourceVersions the consumer gets, reading nothing while the peer hangs up."""
    credentials = Credentials(server=f"https://127.0.0.1:{peer.port}", ca_path=str(ca))
    api = credentials.api_client()
    versions: list[int] = []
    try:
        stream = ObjectWatches(api).pods("ns", "app=x")
        async for event in stream:
            if isinstance(event, Listed):
                continue
            assert isinstance(event, Changed)
            versions.append(event.resource_version)
            if len(versions) == 1:  # a slow consumer: nothing read until the peer has gone
                peer.consumer_waiting.set()
                assert await asyncio.to_thread(peer.hung_up.wait, WAIT)
                await asyncio.sleep(0.3)
            if event.resource_version >= TAIL[-1]:
                break
        await stream.aclose()  # type: ignore[attr-defined]
    finally:
        await api.close()
    return versions


def _run_watch(peer: ApiServerPeer, ca: Path, *, uvloop_tls: bool) -> list[int]:
    async def main() -> list[int]:
        if uvloop_tls:
            with eventloop.uvloop_tls():
                return await asyncio.wait_for(_consume(peer, ca), 30)
        return await asyncio.wait_for(_consume(peer, ca), 30)

    with asyncio.Runner(loop_factory=eventloop.new_event_loop) as runner:
        return runner.run(main())


@pytest.mark.parametrize("uvloop_tls", [True, False], ids=["uvloop's TLS", "asyncio's TLS"])
def test_a_watch_cut_off_resumes_from_the_last_event_taken(
    peer: ApiServerPeer, pki: Pki, uvloop_tls: bool
) -> None:
    """With either TLS layer: aiohttp, too, drops what it had buffered of a response that ends
    before its last chunk, so it is the watch's resumption that delivers the lost events, and
    a tail lost by uvloop's TLS costs nothing more."""
    versions = _run_watch(peer, pki.ca_cert, uvloop_tls=uvloop_tls)
    assert versions == [*FIRST, *TAIL]  # each once, in order
    # The second watch starts after the one event the consumer took before the hang-up.
    assert peer.watched_from == [LISTED, versions[0]]
