"""The connection under an exec stream (`cluster.podexec.ExecStream`): bytes in, bytes out.

A keystroke crosses the API server's exec connection twice (the keystroke, then its echo).
Over asyncio's TLS layer (`sslproto`, pure Python) each crossing cost tens of µs of the
operator's CPU in buffer juggling; `SocketLink` instead reads and writes a non-blocking
socket from event-loop callbacks, its TLS an `ssl.SSLObject` over memory buffers, so one
crossing is one `recv` or `send` and one call into OpenSSL. (An `ssl.SSLSocket` was tried
first: it reads one TLS record of at most 16 KiB per call, each with system calls of its own,
and bulk output lost about a fifth of its throughput.) It connects directly; with a proxy
(the kubeconfig's, or HTTPS_PROXY from the environment, which aiohttp's session honours) the
stream uses aiohttp's upgraded connection instead (`AiohttpLink`).

Both links offer the transport calls the stream uses (`write`, `get_write_buffer_size`,
`drained`, `is_closing`, `pause_reading`, `resume_reading`, `close`, `abort`, `socket`) and
hand what they read to a `Consumer`: `feed_data` with the bytes, `feed_eof` once when the
connection ends (closed here or by the peer).
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections import deque
from typing import Final, Protocol

import aiohttp
from aiohttp.client_proto import ResponseHandler

#: Bytes asked of one read.
READ_SIZE: Final = 256 * 1024
#: Seconds between looks at aiohttp's write buffer while waiting for it to drain.
DRAIN_POLL: Final = 0.002
#: The largest head of an HTTP answer to the upgrade.
MAX_HEAD: Final = 64 * 1024
_WOULD_BLOCK: Final = (BlockingIOError, InterruptedError, ssl.SSLWantWriteError)


class Consumer(Protocol):
    def feed_data(self, data: bytes) -> tuple[bool, bytes]: ...

    def feed_eof(self) -> None: ...


class _Records(Protocol):
    """The calls the stream makes of a TLS session once it is set up: `ssl.SSLObject`'s, or
    those of the C object under it, which they hand on to unchanged (`SocketLink.wrap`)."""

    def read(self, size: int) -> bytes: ...

    def write(self, data: bytes) -> int: ...

    def pending(self) -> int: ...


class LinkError(OSError):
    """The connection or its upgrade failed before the stream began."""


class SocketLink:
    """A connected, non-blocking socket read by a loop reader callback; TLS, when used, is an
    `ssl.SSLObject` over memory buffers, as asyncio's own TLS layer does it, minus its layers.

    One readiness is one `recv` of up to `READ_SIZE` bytes, every TLS record in them decrypted
    at once and handed on in one piece (bulk output: one system call per 256 KiB, not two per
    16 KiB record as a TLS socket reads). Writes are encrypted and sent at once; what the
    socket cannot take is kept and sent when it becomes writable.
    """

    def __init__(self, sock: socket.socket, tls: ssl.SSLObject | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        self._sock = sock
        self._fd = sock.fileno()
        self._tls = tls
        self._records: _Records | None = tls
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._buffer = bytearray(READ_SIZE)
        self._view = memoryview(self._buffer)
        self._consumer: Consumer | None = None
        self._out: deque[bytes] = deque()
        self._out_size = 0
        self._closing = False
        self._reading = False
        self._writing = False  # the loop's writer callback is on
        self._drain_waiters: list[tuple[int, asyncio.Future[None]]] = []

    @classmethod
    def wrap(cls, sock: socket.socket, tls: ssl.SSLContext, server_hostname: str) -> SocketLink:
        """A link whose bytes go through a TLS session (handshake with `handshake`).

        A keystroke's and an echo's records are read and written on the C object under the
        `ssl.SSLObject` (`_sslobj`, whose methods the SSLObject's own only call), which skips a
        Python call per record and per check of what is pending."""
        link = cls(sock)
        link._tls = tls.wrap_bio(link._incoming, link._outgoing, server_hostname=server_hostname)
        link._records = getattr(link._tls, "_sslobj", None) or link._tls
        return link

    # --- before the stream: awaited steps ----------------------------------------------------

    async def handshake(self) -> None:
        """The TLS handshake; raises OSError (ssl.SSLError included)."""
        assert self._tls is not None
        while True:
            try:
                self._tls.do_handshake()
            except ssl.SSLWantReadError:
                self._send_raw(self._outgoing.read())
                await self.drained(0)
                if not await self._read_raw():
                    raise LinkError(
                        "the API server closed the connection during TLS setup"
                    ) from None
                continue
            self._send_raw(self._outgoing.read())
            await self.drained(0)
            return

    async def send_all(self, data: bytes) -> None:
        self.write(data)
        await self.drained(0)

    async def receive(self) -> bytes:
        """The next bytes that come; b"" once the connection ends."""
        while True:
            data, ended = self._take()
            if data or ended:
                return data
            await _ready(self._sock, writable=False)

    async def _read_raw(self) -> bool:
        """Read once into the TLS session; False at the end of the connection."""
        while True:
            try:
                count = self._sock.recv_into(self._buffer)
            except (BlockingIOError, InterruptedError):
                await _ready(self._sock, writable=False)
                continue
            if not count:
                return False
            self._incoming.write(self._view[:count])
            return True

    # --- reading -----------------------------------------------------------------------------

    def start(self, consumer: Consumer, leftover: bytes = b"") -> None:
        """Hand `leftover` (read along with the upgrade's answer), then all that comes, to
        `consumer`."""
        self._consumer = consumer
        self._reading = True
        self._loop.add_reader(self._fd, self._on_readable)
        if leftover:
            consumer.feed_data(leftover)
        if self._tls is not None and self._tls.pending():
            self._loop.call_soon(self._on_readable)

    def _take(self) -> tuple[bytes, bool]:
        """What one read brings: (bytes, whether the connection ended); raises nothing."""
        try:
            count = self._sock.recv_into(self._buffer)
        except (BlockingIOError, InterruptedError):
            count = -1
        except OSError:
            return b"", True
        if count == 0:
            return b"", True
        if self._tls is None:
            return (bytes(self._view[:count]) if count > 0 else b""), False
        if count > 0:
            self._incoming.write(self._view[:count])
        try:
            return self._decrypted(), False
        except ssl.SSLZeroReturnError:
            return b"", True
        except ssl.SSLError:
            return b"", True

    def _decrypted(self) -> bytes:
        """What the records read so far hold. OpenSSL is asked only while it holds decrypted
        bytes or encrypted ones are left, and for no more than that: a read past the last
        record raises SSLWantReadError, which cost more than a keystroke's decryption, and a
        read asked for `READ_SIZE` has Python allocate that much for every record (bulk
        output's records of 16 KiB)."""
        tls = self._records
        assert tls is not None
        incoming = self._incoming
        chunks = []
        while waiting := incoming.pending + tls.pending():
            try:
                chunk = tls.read(min(waiting, READ_SIZE))
            except ssl.SSLWantReadError:
                break  # the start of a record only: its rest comes with a later read
            if not chunk:
                break
            chunks.append(chunk)
        if self._outgoing.pending:  # what TLS itself has to say (a ticket's answer, a key update)
            self._send_raw(self._outgoing.read())
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def _on_readable(self) -> None:
        if not self._reading or self._closing:
            return
        data, ended = self._take()
        if data:
            assert self._consumer is not None
            self._consumer.feed_data(data)
        if ended:
            self._lost(None)

    def pause_reading(self) -> None:
        if self._reading:
            self._reading = False
            if not self._closing:
                self._loop.remove_reader(self._fd)

    def resume_reading(self) -> None:
        if not self._reading and not self._closing:
            self._reading = True
            self._loop.add_reader(self._fd, self._on_readable)

    # --- writing -------------------------------------------------------------------------------

    def write(self, data: bytes) -> int:
        """Send `data` (encrypted) now, keeping what the socket cannot take; the bytes that
        then wait to be sent. A closing link takes nothing."""
        if self._closing or not data:
            return self._out_size
        if self._records is None:
            self._send_raw(data)
            return self._out_size
        try:
            self._records.write(data)
        except ssl.SSLError as exc:  # a renegotiation's want-read included: not offered here
            self._lost(exc)
            return 0
        self._send_raw(self._outgoing.read())
        return self._out_size

    def _send_raw(self, data: bytes) -> None:
        if not data or self._closing:
            return
        if self._out:
            self._out.append(data)
            self._out_size += len(data)
            return
        try:
            sent = self._sock.send(data)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError as exc:
            self._lost(exc)
            return
        if sent < len(data):
            rest = data[sent:]
            self._out.append(rest)
            self._out_size += len(rest)
            self._want_writable()

    def _flush(self) -> None:
        while self._out:
            data = self._out[0]
            try:
                sent = self._sock.send(data)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                self._lost(exc)
                return
            self._out_size -= sent
            if sent < len(data):
                self._out[0] = data[sent:]
                self._wake_drained()
                return
            self._out.popleft()
        self._wake_drained()
        if self._writing:
            self._writing = False
            self._loop.remove_writer(self._fd)

    def _want_writable(self) -> None:
        if not self._writing and not self._closing:
            self._writing = True
            self._loop.add_writer(self._fd, self._flush)

    def get_write_buffer_size(self) -> int:
        return self._out_size

    async def drained(self, low: int) -> None:
        """Return once at most `low` bytes wait to be sent, or the connection ends."""
        if self._out_size <= low or self._closing:
            return
        waiter = self._loop.create_future()
        self._drain_waiters.append((low, waiter))
        await waiter

    def _wake_drained(self) -> None:
        if self._drain_waiters:
            waiting = []
            for low, waiter in self._drain_waiters:
                if self._out_size > low and not self._closing:
                    waiting.append((low, waiter))
                elif not waiter.done():
                    waiter.set_result(None)
            self._drain_waiters = waiting

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
        self._wake_drained()
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

    def write(self, data: bytes) -> int:
        """As `SocketLink.write`: nothing once the transport is closing (asyncio's would
        still buffer it)."""
        transport = self._transport
        if transport.is_closing():
            return 0
        transport.write(data)
        return transport.get_write_buffer_size()

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size()

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    async def drained(self, low: int) -> None:
        """Return once at most `low` bytes wait to be sent, or the connection ends; polled
        every `DRAIN_POLL` seconds (the transport's protocol, which alone hears its
        `resume_writing`, is aiohttp's). Only streams behind a proxy use this link."""
        while True:
            if self._transport.get_write_buffer_size() <= low or self._transport.is_closing():
                return
            await asyncio.sleep(DRAIN_POLL)

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
) -> SocketLink:
    """A link to `host`:`port`, TLS with `tls` when given (checked against `server_hostname`,
    else `host`), not reading yet; raises OSError."""
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
            return SocketLink(sock)
        link = SocketLink.wrap(sock, tls, server_hostname or host)
        try:
            await link.handshake()
        except BaseException:
            sock.close()
            raise
        return link
    raise error


async def read_head(link: SocketLink) -> tuple[bytes, bytes]:
    """The HTTP answer's head (through the blank line) and the bytes read after it."""
    buffer = b""
    while b"\r\n\r\n" not in buffer:
        if len(buffer) > MAX_HEAD:
            raise LinkError("the answer to the exec upgrade has an overlong head")
        chunk = await link.receive()
        if not chunk:
            raise LinkError("the API server closed the connection before answering the upgrade")
        buffer += chunk
    head, _, rest = buffer.partition(b"\r\n\r\n")
    return head, rest


async def read_body(link: SocketLink, have: bytes, length: int | None, limit: int) -> bytes:
    """Up to `limit` bytes of a body of `length` (None: until the connection ends)."""
    body = have
    while len(body) < min(length if length is not None else limit, limit):
        chunk = await link.receive()
        if not chunk:
            break
        body += chunk
    return body[:limit]


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
