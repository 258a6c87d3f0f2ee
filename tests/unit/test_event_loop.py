"""The process's event loop (`allocbridge.eventloop`): uvloop, whose TLS keeps a stream's tail.

A peer on loopback (a thread with a blocking TLS socket, the local cluster's PKI) sends a first
piece, waits until the other side has paused reading, sends the tail, then its close_notify and
its FIN at once, as Go's `tls.Conn.Close` does. The side under test resumes reading only after
that and must get every byte. uvloop's own TLS layer drops the tail there (uvloop's open fault,
MagicStack/uvloop pull request #661): the first tests reproduce that, so that the loop's
choice of TLS layer is shown to matter, not assumed.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import threading
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pytest
import uvloop

from allocbridge import app, eventloop
from allocbridge.config import KubernetesSettings, local_settings
from allocbridge_localcluster.pki import Pki

FIRST = b"f" * 16 * 1024
TAIL = bytes(range(256)) * 512  # 128 KiB: under either TLS layer's read high-water mark
WAIT = 10.0


@dataclass(frozen=True)
class Certificates:
    server: ssl.SSLContext
    client: ssl.SSLContext


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    pki = Pki(Path(tmp_path_factory.mktemp("pki"))).ensure()
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(pki.serving_cert, pki.serving_key)
    client = ssl.create_default_context(cafile=str(pki.ca_cert))
    return Certificates(server, client)


class Reader(asyncio.Protocol):
    """Pauses reading at its first bytes, until told to resume; collects all it gets."""

    def __init__(self) -> None:
        self.received = bytearray()
        self.paused = threading.Event()
        self.eof = False
        self.lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's are not subclasses

    def data_received(self, data: bytes) -> None:
        self.received += data
        if not self.paused.is_set():
            assert self.transport is not None
            self.transport.pause_reading()
            self.paused.set()

    def eof_received(self) -> None:
        self.eof = True

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.lost.done():
            self.lost.set_result(None)

    async def resume_after(self, hung_up: threading.Event) -> bytes:
        """Resume once the peer has hung up (and its FIN had time to arrive); all bytes."""
        assert await asyncio.to_thread(hung_up.wait, WAIT)
        await asyncio.sleep(0.3)
        assert self.transport is not None
        if not self.transport.is_closing():
            self.transport.resume_reading()
        await asyncio.wait_for(self.lost, WAIT)
        return bytes(self.received)


def _hang_up(tls: ssl.SSLSocket) -> None:
    """close_notify, then FIN, without waiting for the other side's close_notify."""
    tls.setblocking(False)
    with contextlib.suppress(ssl.SSLWantReadError, ssl.SSLWantWriteError, OSError):
        tls.unwrap()
    tls.close()


def _send_as_server(
    listener: socket.socket, context: ssl.SSLContext, reader: Reader, hung_up: threading.Event
) -> None:
    connection, _ = listener.accept()
    with context.wrap_socket(connection, server_side=True) as tls:
        tls.sendall(FIRST)
        assert reader.paused.wait(WAIT)
        tls.sendall(TAIL)
        _hang_up(tls)
    hung_up.set()


def _run(
    loop_factory: Callable[[], asyncio.AbstractEventLoop], main: Coroutine[Any, Any, bytes]
) -> bytes:
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        return runner.run(main)


@contextlib.contextmanager
def _sending_server(certificates: Certificates) -> Iterator[tuple[int, Reader, threading.Event]]:
    """A TLS server on a thread that sends to the `Reader` and hangs up while it has paused:
    its port, the reader and the event set once it hung up."""
    listener = socket.create_server(("127.0.0.1", 0))
    reader = Reader()
    hung_up = threading.Event()
    server = threading.Thread(
        target=_send_as_server, args=(listener, certificates.server, reader, hung_up)
    )
    server.start()
    try:
        yield listener.getsockname()[1], reader, hung_up
    finally:
        server.join(WAIT)
        listener.close()


async def _read_from_server(certificates: Certificates) -> bytes:
    """A client connection (`create_connection` with TLS) reading what the peer sends."""
    loop = asyncio.get_running_loop()
    with _sending_server(certificates) as (port, reader, hung_up):
        await loop.create_connection(lambda: reader, "127.0.0.1", port, ssl=certificates.client)
        return await reader.resume_after(hung_up)


# --- the fault, reproduced -----------------------------------------------------------------


def test_uvloops_own_tls_drops_the_tail_when_the_peer_hangs_up_while_reading_is_paused(
    certificates: Certificates,
) -> None:
    received = _run(uvloop.new_event_loop, _read_from_server(certificates))
    assert received == FIRST  # the tail was in uvloop's buffer when the FIN came


def test_inside_uvloop_tls_the_loop_uses_uvloops_tls_and_loses_the_tail(
    certificates: Certificates,
) -> None:
    async def main() -> bytes:
        with eventloop.uvloop_tls():
            return await _read_from_server(certificates)

    assert _run(eventloop.new_event_loop, main()) == FIRST


# --- the loop keeps it -----------------------------------------------------------------------


def test_a_tls_connection_keeps_its_tail(certificates: Certificates) -> None:
    received = _run(eventloop.new_event_loop, _read_from_server(certificates))
    assert received == FIRST + TAIL


def test_tail_keeping_tls_wins_inside_uvloop_tls(certificates: Certificates) -> None:
    async def main() -> bytes:
        with eventloop.uvloop_tls(), eventloop.tail_keeping_tls():
            assert not eventloop.uses_uvloop_tls()
            return await _read_from_server(certificates)

    assert _run(eventloop.new_event_loop, main()) == FIRST + TAIL


def test_the_loop_is_uvloop() -> None:
    loop = eventloop.new_event_loop()
    try:
        assert isinstance(loop, uvloop.Loop)
    finally:
        loop.close()


def test_start_tls_keeps_the_tail(certificates: Certificates) -> None:
    """TLS over a connection already open (aiohttp's upgrade through an HTTPS proxy)."""

    async def main() -> bytes:
        loop = asyncio.get_running_loop()
        with _sending_server(certificates) as (port, reader, hung_up):
            transport, _ = await loop.create_connection(asyncio.Protocol, "127.0.0.1", port)
            upgraded = await loop.start_tls(
                transport, reader, certificates.client, server_hostname="127.0.0.1"
            )
            assert upgraded is not None
            reader.connection_made(upgraded)
            return await reader.resume_after(hung_up)

    assert _run(eventloop.new_event_loop, main()) == FIRST + TAIL


def test_a_tls_listener_reads_a_clients_last_bytes(certificates: Certificates) -> None:
    """A client that sends, then hangs up while the listener's application has paused
    reading (an exec session's stdin and its close), is read to its end."""

    def client(port: int, reader: Reader, hung_up: threading.Event) -> None:
        with (
            socket.create_connection(("127.0.0.1", port)) as raw,
            certificates.client.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
        ):
            tls.sendall(FIRST)
            assert reader.paused.wait(WAIT)
            tls.sendall(TAIL)
            _hang_up(tls)
        hung_up.set()

    async def main() -> bytes:
        loop = asyncio.get_running_loop()
        reader = Reader()
        hung_up = threading.Event()
        server = await loop.create_server(lambda: reader, "127.0.0.1", 0, ssl=certificates.server)
        port = server.sockets[0].getsockname()[1]
        sender = threading.Thread(target=client, args=(port, reader, hung_up))
        sender.start()
        try:
            return await reader.resume_after(hung_up)
        finally:
            sender.join(WAIT)
            server.close()

    assert _run(eventloop.new_event_loop, main()) == FIRST + TAIL
    assert _run(uvloop.new_event_loop, main()) == FIRST  # uvloop's own TLS, for contrast


def test_a_replica_runs_on_the_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """`allocbridge run`'s main loop (listeners, store feed, exec, logs) is this one."""
    loops: list[asyncio.AbstractEventLoop] = []

    async def run(self: app.Replica) -> int:
        loops.append(asyncio.get_running_loop())
        return 0

    monkeypatch.setattr(app.Replica, "run", run)
    monkeypatch.setattr(app, "tune_garbage_collection", lambda: None)  # process-wide
    assert app.run(local_settings("loop", 1, 2, KubernetesSettings())) == 0
    assert len(loops) == 1 and isinstance(loops[0], eventloop.Loop)


def test_a_failed_handshake_raises_and_closes(certificates: Certificates) -> None:
    """A server the client does not trust: `create_connection` raises the verification error
    (what aiohttp reports as a certificate error), as asyncio's own loop does."""

    def accept(listener: socket.socket) -> None:
        connection, _ = listener.accept()
        with (
            contextlib.suppress(OSError),
            certificates.server.wrap_socket(connection, server_side=True),
        ):
            pass

    async def main() -> bytes:
        loop = asyncio.get_running_loop()
        listener = socket.create_server(("127.0.0.1", 0))
        server = threading.Thread(target=accept, args=(listener,))
        server.start()
        try:
            untrusting = ssl.create_default_context()  # the system's CAs, not the test's
            with pytest.raises(ssl.SSLCertVerificationError):
                await loop.create_connection(
                    asyncio.Protocol, "127.0.0.1", listener.getsockname()[1], ssl=untrusting
                )
            await asyncio.to_thread(server.join, WAIT)
            assert not server.is_alive()  # the client closed its end: the server's handshake ended
            return b""
        finally:
            listener.close()

    _run(eventloop.new_event_loop, main())
