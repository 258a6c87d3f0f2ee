"""The process's event loops: uvloop, with TLS that keeps a stream's tail unless told otherwise.

uvloop runs the loop itself (callbacks, timers, sockets) in C: an aiohttp request costs less
CPU on it than on asyncio's loop. Its TLS layer has a fault that asyncio's does not (still open
in uvloop 0.23, MagicStack/uvloop pull request #661): when the peer ends the TCP stream while
the application has paused reading, uvloop's `SSLProtocol` shuts down at once and drops the
bytes it still holds, which are the stream's tail (a 10 MiB exec lost its last 180 KB and its
exit status). asyncio's `SSLProtocol` (`asyncio.sslproto`, CPython's) keeps them for the
application to read once it resumes.

So `Loop` is uvloop with every TLS connection it makes, accepts or upgrades (`create_connection`,
`create_server`, `start_tls`) done by asyncio's `SSLProtocol` over uvloop's TCP transport. A
stream that is shown to survive a lost tail may use uvloop's own TLS, in C, instead: code that
runs it does so inside `uvloop_tls()` (a context variable: tasks started from there inherit
it). The store feed's watches are such streams: a watch that ends early for whatever reason
resumes from the last resourceVersion its consumer took, so the API server sends the lost
events again (`cluster/watch.py`); the reconciler's thread (Kopf's loop) is another, with its
watches and short requests. A stream whose end is the connection's end (exec) or whose tail
is what the user reads (logs) must not: `tail_keeping_tls()` says so where it is opened,
whatever the context it is opened in.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from asyncio import sslproto
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from ssl import SSLContext
from typing import Any

import uvloop

#: asyncio's TLS layer (its stubs type it more narrowly than the loop's methods pass it on).
_AsyncioTLS: Any = sslproto.SSLProtocol

#: Whether connections opened here may use uvloop's own TLS (see the module's docstring).
_UVLOOP_TLS: ContextVar[bool] = ContextVar("allocbridge_uvloop_tls", default=False)


@contextlib.contextmanager
def uvloop_tls() -> Iterator[None]:
    """TLS connections opened in this context (and in tasks started from it) use uvloop's
    own TLS layer: only for streams that survive losing their tail (see the docstring)."""
    token = _UVLOOP_TLS.set(True)
    try:
        yield
    finally:
        _UVLOOP_TLS.reset(token)


@contextlib.contextmanager
def tail_keeping_tls() -> Iterator[None]:
    """TLS connections opened in this context use asyncio's TLS layer, even inside
    `uvloop_tls()`: for streams whose last bytes matter."""
    token = _UVLOOP_TLS.set(False)
    try:
        yield
    finally:
        _UVLOOP_TLS.reset(token)


def uses_uvloop_tls() -> bool:
    """Whether a TLS connection opened now would use uvloop's TLS layer."""
    return _UVLOOP_TLS.get()


class Loop(uvloop.Loop):
    """uvloop's event loop whose TLS is asyncio's, except inside `uvloop_tls()`.

    Its methods take and return what asyncio's do; uvloop's own (`uvloop_`, untyped here)
    still do the TCP part, with a plain protocol or with asyncio's TLS layer as the protocol.
    """

    async def create_connection(  # type: ignore[override]
        self,
        protocol_factory: Callable[[], asyncio.BaseProtocol],
        host: str | None = None,
        port: int | None = None,
        *,
        ssl: SSLContext | bool | None = None,
        server_hostname: str | None = None,
        ssl_handshake_timeout: float | None = None,
        ssl_shutdown_timeout: float | None = None,
        sock: socket.socket | None = None,
        **kwargs: Any,
    ) -> tuple[asyncio.Transport, asyncio.BaseProtocol]:
        uvloop_: Any = super()
        if not ssl or _UVLOOP_TLS.get():
            # uvloop's own, TLS options included (without TLS it refuses them, as asyncio does)
            made: tuple[asyncio.Transport, asyncio.BaseProtocol] = await uvloop_.create_connection(
                protocol_factory,
                host,
                port,
                ssl=ssl,
                sock=sock,
                server_hostname=server_hostname,
                ssl_handshake_timeout=ssl_handshake_timeout,
                ssl_shutdown_timeout=ssl_shutdown_timeout,
                **kwargs,
            )
            return made
        if server_hostname is None:
            if not host:
                raise ValueError("You must set server_hostname when using ssl without a host")
            server_hostname = host
        application = protocol_factory()
        waiter: asyncio.Future[None] = self.create_future()
        wrapper = _AsyncioTLS(
            self,
            application,
            None if ssl is True else ssl,
            waiter,
            server_side=False,
            server_hostname=server_hostname,
            ssl_handshake_timeout=ssl_handshake_timeout,
            ssl_shutdown_timeout=ssl_shutdown_timeout,
        )
        raw, _ = await uvloop_.create_connection(lambda: wrapper, host, port, sock=sock, **kwargs)
        try:
            await waiter
        except BaseException:
            raw.close()
            raise
        transport: asyncio.Transport = wrapper._get_app_transport()
        return transport, application

    async def start_tls(
        self,
        transport: asyncio.BaseTransport,
        protocol: asyncio.BaseProtocol,
        sslcontext: SSLContext,
        *,
        server_side: bool = False,
        server_hostname: str | None = None,
        ssl_handshake_timeout: float | None = None,
        ssl_shutdown_timeout: float | None = None,
    ) -> asyncio.Transport:
        """TLS on an open connection (aiohttp's through an HTTPS proxy): asyncio's layer, as
        `create_connection`'s, unless inside `uvloop_tls()`."""
        uvloop_: Any = super()
        if _UVLOOP_TLS.get():
            upgraded: asyncio.Transport = await uvloop_.start_tls(
                transport,
                protocol,
                sslcontext,
                server_side=server_side,
                server_hostname=server_hostname,
                ssl_handshake_timeout=ssl_handshake_timeout,
                ssl_shutdown_timeout=ssl_shutdown_timeout,
            )
            return upgraded
        waiter: asyncio.Future[None] = self.create_future()
        wrapper = _AsyncioTLS(
            self,
            protocol,
            sslcontext,
            waiter,
            server_side=server_side,
            server_hostname=server_hostname,
            ssl_handshake_timeout=ssl_handshake_timeout,
            ssl_shutdown_timeout=ssl_shutdown_timeout,
            call_connection_made=False,
        )
        # As asyncio's own start_tls: no byte may reach the wrapper before connection_made.
        raw: Any = transport  # uvloop's transports subclass no asyncio type
        raw.pause_reading()
        raw.set_protocol(wrapper)
        made = self.call_soon(wrapper.connection_made, raw)
        resumed = self.call_soon(raw.resume_reading)
        try:
            await waiter
        except BaseException:
            raw.close()
            made.cancel()
            resumed.cancel()
            raise
        upgraded = wrapper._get_app_transport()
        return upgraded

    async def create_server(  # type: ignore[override]
        self,
        protocol_factory: Callable[[], asyncio.BaseProtocol],
        host: Any = None,
        port: int | None = None,
        *,
        ssl: SSLContext | None = None,
        ssl_handshake_timeout: float | None = None,
        ssl_shutdown_timeout: float | None = None,
        **kwargs: Any,
    ) -> asyncio.Server:
        """A listener whose TLS is always asyncio's: a client's last bytes before it hangs up
        (an exec session's stdin and close) are read even when reading had paused."""
        uvloop_: Any = super()
        if ssl is None:
            server: asyncio.Server = await uvloop_.create_server(
                protocol_factory, host, port, **kwargs
            )
            return server
        context = ssl

        def wrapped() -> asyncio.BaseProtocol:
            wrapper: asyncio.BaseProtocol = _AsyncioTLS(
                self,
                protocol_factory(),
                context,
                None,
                server_side=True,
                ssl_handshake_timeout=ssl_handshake_timeout,
                ssl_shutdown_timeout=ssl_shutdown_timeout,
            )
            return wrapper

        server = await uvloop_.create_server(wrapped, host, port, **kwargs)
        return server


def new_event_loop() -> Loop:
    """A new `Loop` (for `asyncio.Runner(loop_factory=...)`)."""
    return Loop()
