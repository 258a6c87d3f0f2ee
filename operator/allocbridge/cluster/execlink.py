"""The connection under an exec stream (`cluster.podexec.ExecStream`): bytes in, bytes out.

A keystroke crosses the API server's exec connection twice (the keystroke, then its echo).
Over asyncio's TLS layer (`sslproto`, pure Python) each crossing cost tens of µs of the
operator's CPU in buffer juggling; `SocketLink` instead reads and writes a non-blocking
`ssl.SSLSocket` from event-loop callbacks, so one crossing is one `recv` or `send` into
OpenSSL. It connects directly; with a proxy (the kubeconfig's, or HTTPS_PROXY from the
environment, which aiohttp's session honours) the stream uses aiohttp's upgraded connection
instead (`AiohttpLink`).

Both links offer the transport calls the stream uses (`write`, `get_write_buffer_size`,
`is_closing`, `pause_reading`, `resume_reading`, `close`, `abort`, `socket`) and hand what
they read to a `Consumer`: `feed_data` with the bytes, `feed_eof` once when the connection
ends (closed here or by the peer).
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections import deque
from collections.abc import Callable
from typing import Final, Protocol, TypeVar

import aiohttp
from aiohttp.client_proto import ResponseHandler

T = TypeVar("T")

#: Bytes asked of one read (a TLS record holds at most 16 KiB).
READ_SIZE: Final = 256 * 1024
#: The largest head of an HTTP answer to the upgrade.
MAX_HEAD: Final = 64 * 1024
_WOULD_BLOCK: Final = (BlockingIOError, InterruptedError, ssl.SSLWantWriteError)


class Consumer(Protocol):
    def feed_data(self, data: bytes) -> tuple[bool, bytes]: ...

    def feed_eof(self) -> None: ...


class LinkError(OSError):
    """The connection or its upgrade failed before the stream began."""


class SocketLink:
    """A connected, non-blocking socket (TLS or plain) read by a loop reader callback.

    Writes go to the socket at once; what it cannot take is kept and sent when it becomes
    writable. A TLS write that could not finish is retried with the same bytes, as OpenSSL
    requires. A TLS read or write that needs the other direction first (a renegotiation) is
    retried when that direction is ready.
    """

    def __init__(self, sock: socket.socket) -> None:
        self._loop = asyncio.get_running_loop()
        self._sock = sock
        self._fd = sock.fileno()
        self._tls = isinstance(sock, ssl.SSLSocket)
        self._consumer: Consumer | None = None
        self._out: deque[bytes] = deque()
        self._out_size = 0
        self._closing = False
        self._reading = False
        self._writing = False  # the loop's writer callback is on
        self._read_wants_write = False
        self._write_wants_read = False

    def start(self, consumer: Consumer, leftover: bytes = b"") -> None:
        """Hand `leftover` (read along with the upgrade's answer), then all that comes, to
        `consumer`."""
        self._consumer = consumer
        self._reading = True
        self._loop.add_reader(self._fd, self._on_readable)
        if leftover:
            consumer.feed_data(leftover)

    # --- reading ---------------------------------------------------------------------------

    def _on_readable(self) -> None:
        if self._write_wants_read:
            self._write_wants_read = False
            self._flush()
        while self._reading and not self._closing:
            try:
                data = self._sock.recv(READ_SIZE)
            except ssl.SSLWantWriteError:
                self._read_wants_write = True
                self._want_writable()
                return
            except (BlockingIOError, InterruptedError, ssl.SSLWantReadError):
                return
            except OSError as exc:
                self._lost(exc)
                return
            if not data:
                self._lost(None)
                return
            assert self._consumer is not None
            self._consumer.feed_data(data)
            # Decrypted bytes may wait inside OpenSSL, where the loop cannot see them.
            if not (self._tls and self._sock.pending()):  # type: ignore[attr-defined]
                return

    def pause_reading(self) -> None:
        if self._reading:
            self._reading = False
            if not self._closing:
                self._loop.remove_reader(self._fd)

    def resume_reading(self) -> None:
        if not self._reading and not self._closing:
            self._reading = True
            self._loop.add_reader(self._fd, self._on_readable)
            self._loop.call_soon(self._on_readable)  # what OpenSSL may hold already

    # --- writing -------------------------------------------------------------------------------

    def write(self, data: bytes) -> None:
        if self._closing or not data:
            return
        self._out.append(data)
        self._out_size += len(data)
        if len(self._out) == 1 and not self._write_wants_read:
            self._flush()

    def _flush(self) -> None:
        while self._out:
            data = self._out[0]
            try:
                sent = self._sock.send(data)
            except ssl.SSLWantReadError:
                self._write_wants_read = True  # retried by the next read
                return
            except _WOULD_BLOCK:
                self._want_writable()
                return
            except OSError as exc:
                self._lost(exc)
                return
            self._out_size -= sent
            if sent < len(data):  # a plain socket; TLS sends all or raises
                self._out[0] = data[sent:]
                self._want_writable()
                return
            self._out.popleft()
        if self._writing and not self._read_wants_write:
            self._writing = False
            self._loop.remove_writer(self._fd)

    def _want_writable(self) -> None:
        if not self._writing and not self._closing:
            self._writing = True
            self._loop.add_writer(self._fd, self._on_writable)

    def _on_writable(self) -> None:
        if self._read_wants_write:
            self._read_wants_write = False
            self._on_readable()
        self._flush()

    def get_write_buffer_size(self) -> int:
        return self._out_size

    # --- the end -------------------------------------------------------------------------------

    def is_closing(self) -> bool:
        return self._closing

    def socket(self) -> socket.socket | None:
        return None if self._closing else self._sock

    def close(self) -> None:
        """Drop the connection (what was not sent yet is dropped too)."""
        self._lost(None)

    def abort(self) -> None:
        self._lost(None)

    def _lost(self, exc: BaseException | None) -> None:
        if self._closing:
            return
        self._closing = True
        if self._reading:
            self._loop.remove_reader(self._fd)
        if self._writing:
            self._loop.remove_writer(self._fd)
        self._out.clear()
        self._out_size = 0
        self._sock.close()
        if self._consumer is not None:
            self._consumer.feed_eof()


class AiohttpLink:
    """aiohttp's upgraded connection (its TLS layer is asyncio's): the stream's bytes come
    through the connection protocol's payload parser (`set_parser`)."""

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        connection = response.connection
        if connection is None or connection.protocol is None or connection.transport is None:
            raise LinkError("the exec connection closed right after its upgrade")
        self._response = response
        self._handler: ResponseHandler = connection.protocol
        self._transport = connection.transport
        self._handler.read_timeout = None  # a session is quiet for as long as its process is

    def start(self, consumer: Consumer, leftover: bytes = b"") -> None:
        """Hand what came with the 101 (aiohttp holds it; `leftover` is empty), then all that
        comes, to `consumer`."""
        if leftover:
            consumer.feed_data(leftover)
        self._handler.set_parser(consumer, _Payload(consumer))

    def write(self, data: bytes) -> None:
        self._transport.write(data)

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size()

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def pause_reading(self) -> None:
        self._handler.pause_reading()

    def resume_reading(self) -> None:
        self._handler.resume_reading()

    def socket(self) -> socket.socket | None:
        sock = self._transport.get_extra_info("socket")
        return sock if isinstance(sock, socket.socket) else None

    def close(self) -> None:
        self._response.close()

    def abort(self) -> None:
        self._transport.abort()
        self._response.close()


Link = SocketLink | AiohttpLink


class _Payload:
    """What aiohttp's connection protocol asks of a payload besides the parser."""

    def __init__(self, consumer: Consumer) -> None:
        self._consumer = consumer
        self._eof = False

    def is_eof(self) -> bool:
        return self._eof

    def set_exception(self, exc: BaseException, exc_cause: BaseException | None = None) -> None:
        if not self._eof:
            self._eof = True
            self._consumer.feed_eof()

    def feed_eof(self) -> None:
        self.set_exception(ConnectionResetError())


# --- opening a SocketLink ------------------------------------------------------------------


async def connect(
    host: str, port: int, tls: ssl.SSLContext | None, server_hostname: str | None
) -> socket.socket:
    """A connected non-blocking socket to `host`:`port`, TLS with `tls` when given (checked
    against `server_hostname`, else `host`); raises OSError."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    error: OSError = LinkError(f"no address for {host}")
    for family, kind, proto, _, address in infos:
        sock = socket.socket(family, kind, proto)
        try:
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            await loop.sock_connect(sock, address)
        except OSError as exc:
            sock.close()
            error = exc
            continue
        if tls is None:
            return sock
        wrapped = tls.wrap_socket(
            sock, server_hostname=server_hostname or host, do_handshake_on_connect=False
        )
        try:
            await _io(wrapped, wrapped.do_handshake, writing=True)
        except BaseException:
            wrapped.close()
            raise
        return wrapped
    raise error


async def send_all(sock: socket.socket, data: bytes) -> None:
    at = 0
    while at < len(data):
        rest = data[at:]
        at += await _io(sock, lambda: sock.send(rest), writing=True)  # noqa: B023 - awaited here


async def read_head(sock: socket.socket) -> tuple[bytes, bytes]:
    """The HTTP answer's head (through the blank line) and the bytes read after it."""
    buffer = b""
    while b"\r\n\r\n" not in buffer:
        if len(buffer) > MAX_HEAD:
            raise LinkError("the answer to the exec upgrade has an overlong head")
        chunk = await _io(sock, lambda: sock.recv(READ_SIZE), writing=False)
        if not chunk:
            raise LinkError("the API server closed the connection before answering the upgrade")
        buffer += chunk
    head, _, rest = buffer.partition(b"\r\n\r\n")
    return head, rest


async def read_body(sock: socket.socket, have: bytes, length: int | None, limit: int) -> bytes:
    """Up to `limit` bytes of a body of `length` (None: until the connection ends)."""
    body = have
    while len(body) < min(length if length is not None else limit, limit):
        chunk = await _io(sock, lambda: sock.recv(READ_SIZE), writing=False)
        if not chunk:
            break
        body += chunk
    return body[:limit]


async def _io(sock: socket.socket, step: Callable[[], T], *, writing: bool) -> T:
    """`step()` once the socket lets it through: a TLS step waits for the direction OpenSSL
    asks for, a plain one for `writing` or reading."""
    while True:
        try:
            return step()
        except ssl.SSLWantReadError:
            await _ready(sock, writable=False)
        except ssl.SSLWantWriteError:
            await _ready(sock, writable=True)
        except (BlockingIOError, InterruptedError):
            await _ready(sock, writable=writing)


async def _ready(sock: socket.socket, *, writable: bool) -> None:
    loop = asyncio.get_running_loop()
    future: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not future.done():
            future.set_result(None)

    fd = sock.fileno()
    if writable:
        loop.add_writer(fd, wake)
    else:
        loop.add_reader(fd, wake)
    try:
        await future
    finally:
        if writable:
            loop.remove_writer(fd)
        else:
            loop.remove_reader(fd)
