"""Running a command in a pod's container through the API server's `pods/<name>/exec` WebSocket.

Kubernetes' channel protocol (one channel byte, then the payload, in binary messages): 0 stdin,
1 stdout, 2 stderr, 3 status, 4 resize, and in v5 the CLOSE signal `[255, channel]`.

Protocols: `v5.channel.k8s.io` is offered first and `v4.channel.k8s.io` second. The API server
picks the first it supports (v5 on Kubernetes 1.30 and later, through its WebSocket-to-SPDY
translator; v4 on older ones, proxied to the kubelet). The framing is the same; only v5 can
half-close stdin, so on a v4 session `close_stdin` cannot reach the process and returns False:
the process sees end-of-file only when the whole stream ends. Nothing else differs.

Exit codes come from the status message on channel 3: `Success` is 0, a `NonZeroExitCode`
failure carries the code as the `ExitCode` cause. Runtimes that wrap Go's `exec.ExitError`
instead of returning it (kwok, which plays the kubelet in the local control plane, does) report
a non-zero exit as an `InternalError` whose text ends with Go's `exit status N`; that is read as
exit code N too. Any other failure (runtime error, a broken stream) is an `ExecError`; an exec
the API server refuses is the `allocbridge.cluster.errors` kind of its answer (`refused_exec`).

There is no kill in the exec API: closing a stream early half-closes stdin (v5) and drops the
connection, which ends a process that reads its stdin (EOF). On a real kubelet with containerd
a process that does not read stdin runs on, its output discarded, as after `kubectl exec` (the
runtime keeps reading its output pipe); `cluster.leftovers` ends it through a second exec.
kwok, the scale tests' fake kubelet, never closes an exec'd process's stdin, and ends a
process only through its output.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import json
import logging
import re
import socket
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Final
from urllib.parse import quote, urlencode, urlsplit, urlunsplit

import aiohttp
from kubernetes_asyncio import client

from allocbridge.cluster.connection import Credentials
from allocbridge.cluster.errors import (
    NO_ANSWER,
    KubernetesError,
    RefusedError,
    UnavailableError,
    from_status,
)

log = logging.getLogger(__name__)

PROTOCOL_V5: Final = "v5.channel.k8s.io"
PROTOCOL_V4: Final = "v4.channel.k8s.io"
#: Offered in this order; the server picks the first it supports.
PROTOCOLS: Final = (PROTOCOL_V5, PROTOCOL_V4)

#: Largest message accepted from the API server (it sends at most 32 KiB of output per message).
MAX_MESSAGE: Final = 8 * 1024 * 1024
#: aiohttp pings the API server this often and drops a connection that stops answering.
HEARTBEAT: Final = 30.0
#: Seconds a short command (`PodExecutor.run`) may take.
RUN_TIMEOUT: Final = 30.0

_GO_EXIT_STATUS: Final = re.compile(r"exit status (\d+)\s*$")
_WRAPPERS: Final = ("Internal error occurred: ", "error executing command in container: ")


class Channel(enum.IntEnum):
    STDIN = 0
    STDOUT = 1
    STDERR = 2
    STATUS = 3
    RESIZE = 4
    CLOSE = 255  # v5: `[255, channel]` half-closes that channel


class ExecError(KubernetesError):
    """The exec started but failed: ended without an exit code, a broken stream, an unusable
    answer. (Refused: `NotFoundError`, `ContainerNotRunningError`, ...; no answer:
    `UnavailableError`.)"""


class ContainerNotRunningError(RefusedError):
    """The API server's 400 to an exec: the container is not running (ended, restarting) or
    not there."""


def refused_exec(status: int, message: str) -> KubernetesError:
    """The error for the API server's refusal, with HTTP `status`, of an exec upgrade."""
    if status == 400:
        return ContainerNotRunningError(message, status=status)
    return from_status(status, message)


@dataclass(frozen=True)
class Output:
    """Bytes the process wrote to stdout or stderr."""

    channel: Channel
    data: bytes


@dataclass(frozen=True)
class OutputClosed:
    """The server half-closed stdout or stderr (v5 only; the end of the stream closes both)."""

    channel: Channel


@dataclass(frozen=True)
class Exited:
    exit_code: int


Event = Output | OutputClosed | Exited


def encode_frame(channel: Channel, payload: bytes = b"") -> bytes:
    return bytes((channel,)) + payload


def encode_close(channel: Channel) -> bytes:
    return bytes((Channel.CLOSE, channel))


def encode_resize(width: int, height: int) -> bytes:
    """Kubernetes' `TerminalSize` (capitalised fields, no tags), one JSON object per message."""
    return encode_frame(Channel.RESIZE, json.dumps({"Width": width, "Height": height}).encode())


def decode_frame(message: bytes) -> tuple[int, bytes]:
    """(channel, payload); an empty message is channel -1 with no payload."""
    if not message:
        return -1, b""
    return message[0], message[1:]


def exit_code_from_status(payload: bytes) -> int:
    """The exit code a status message reports; raises ExecError for any other failure."""
    try:
        status = json.loads(payload)
    except ValueError as exc:
        raise ExecError(f"unreadable exec status from Kubernetes: {exc}") from exc
    if not isinstance(status, dict):
        raise ExecError("unreadable exec status from Kubernetes: not an object")
    if status.get("status") == "Success":
        return 0
    message = _without_wrappers(str(status.get("message") or "exec failed without a message"))
    if status.get("reason") == "NonZeroExitCode":
        details = status.get("details") or {}
        for cause in details.get("causes") or []:
            if isinstance(cause, dict) and cause.get("reason") == "ExitCode":
                code = str(cause.get("message", ""))
                if code.isdigit():
                    return int(code)
        raise ExecError(f"exit status without an exit code: {message}")
    found = _GO_EXIT_STATUS.search(message)
    if found:
        return int(found.group(1))
    raise ExecError(message)


def _without_wrappers(message: str) -> str:
    """The message without the prefixes each hop adds (`Internal error occurred: `, once per
    hop), so that the part that says what went wrong fits a WebSocket close reason."""
    for prefix in _WRAPPERS:
        while message.startswith(prefix):
            message = message[len(prefix) :]
    return message


class ExecStream:
    """One exec session on the Kubernetes side. Writes go through one lock, so stdin, resize
    and the close signal never interleave or overtake each other."""

    def __init__(
        self, ws: aiohttp.ClientWebSocketResponse, protocol: str, asked_at: float = 0.0
    ) -> None:
        self._ws = ws
        self.protocol = protocol
        #: When the session was asked for and when its first output came (time.monotonic()):
        #: the process started between them (`cluster.leftovers` finds it by that).
        self.asked_at = asked_at
        self.first_output_at: float | None = None
        self._stdin_closed = False
        self._exited = False  # the status arrived: the process is gone
        self._write_lock = asyncio.Lock()

    async def _send(self, message: bytes) -> None:
        """Write one message; a broken connection is left to the reading side to report."""
        async with self._write_lock:
            try:
                await self._ws.send_bytes(message)
            except (aiohttp.ClientError, ConnectionError) as exc:
                log.debug("exec stream write failed", extra={"error": str(exc)})

    @property
    def exited(self) -> bool:
        """The exit status arrived: the process is gone."""
        return self._exited

    @property
    def can_close_stdin(self) -> bool:
        return self.protocol == PROTOCOL_V5

    async def send_stdin(self, data: bytes) -> None:
        if data and not self._stdin_closed:
            await self._send(encode_frame(Channel.STDIN, data))

    async def close_stdin(self) -> bool:
        """Half-close stdin; False on v4, which cannot (the process then sees no EOF)."""
        if self._stdin_closed:
            return self.can_close_stdin
        self._stdin_closed = True
        if not self.can_close_stdin:
            return False
        await self._send(encode_close(Channel.STDIN))
        return True

    async def resize(self, width: int, height: int) -> None:
        await self._send(encode_resize(width, height))

    async def events(self) -> AsyncGenerator[Event, None]:
        """Output until the exit; raises ExecError if the stream fails or ends without one."""
        async for message in self._ws:
            if message.type is aiohttp.WSMsgType.BINARY:
                channel, payload = decode_frame(message.data)
            elif message.type is aiohttp.WSMsgType.TEXT:  # not sent by Kubernetes; be lenient
                channel, payload = decode_frame(message.data.encode("utf-8"))
            elif message.type is aiohttp.WSMsgType.ERROR:
                raise ExecError(f"exec stream failed: {self._ws.exception()}")
            else:
                continue
            if channel in (Channel.STDOUT, Channel.STDERR):
                if payload:
                    if self.first_output_at is None:
                        self.first_output_at = time.monotonic()
                    yield Output(Channel(channel), payload)
            elif channel == Channel.STATUS:
                self._exited = True
                yield Exited(exit_code_from_status(payload))
                return
            elif channel == Channel.CLOSE and payload[:1] in (b"\x01", b"\x02"):
                yield OutputClosed(Channel(payload[0]))
        raise ExecError("the Kubernetes exec stream ended without an exit status")

    async def close(self) -> None:
        """End the session. After the exit status, a normal close. Before it, half-close stdin
        (v5) and drop the connection without a close frame: the API server's v5 translator
        takes a close frame as "this client is done" and keeps the command running with its
        output going nowhere, while a dropped connection ends the command's streams, so a
        process that writes output gets EPIPE (a v4 proxy ends the streams either way)."""
        if self._ws.closed:
            return
        if not self._exited:
            if self.can_close_stdin and not self._stdin_closed:
                self._stdin_closed = True
                await self._send(encode_close(Channel.STDIN))
            sock = self._ws.get_extra_info("socket")
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
        async with self._write_lock:
            await self._ws.close()


class PodExecutor:
    """Opens exec streams; owns the Kubernetes clients it needs, created on first use on the
    event loop that uses them. `credentials` returns None until Kubernetes has been reached."""

    def __init__(
        self,
        credentials: Callable[[], Credentials | None],
        *,
        protocols: Sequence[str] = PROTOCOLS,
    ) -> None:
        self._credentials = credentials
        self._protocols = tuple(protocols)  # tests offer v4 alone to check the fallback
        self._api: client.ApiClient | None = None

    def _client(self) -> client.ApiClient:
        if self._api is None:
            credentials = self._credentials()
            if credentials is None:
                raise UnavailableError("the Kubernetes API has not been reached yet")
            configuration = credentials.configuration()
            # Every open session holds a connection: no pool limit that would queue silently.
            configuration.connection_pool_maxsize = 0
            self._api = client.ApiClient(configuration=configuration)
        return self._api

    @asynccontextmanager
    async def open(
        self, namespace: str, pod: str, container: str, command: Sequence[str], *, tty: bool
    ) -> AsyncIterator[ExecStream]:
        """An exec session of `command` in `container`, closed when the block ends.

        stdin and stdout are always attached, stderr unless `tty` (a terminal merges it).
        """
        api = self._client()
        asked_at = time.monotonic()
        query = [
            *(("command", part) for part in command),
            ("container", container),
            ("stdin", "true"),
            ("stdout", "true"),
            ("stderr", "false" if tty else "true"),
            ("tty", "true" if tty else "false"),
        ]
        try:
            path = f"/api/v1/namespaces/{quote(namespace, safe='')}/pods/{quote(pod, safe='')}/exec"
            ws = await _connect(api, path, query, self._protocols)
        except aiohttp.WSServerHandshakeError as exc:
            raise refused_exec(
                exc.status, f"Kubernetes refused the exec: {exc.status} {exc.message}"
            ) from exc
        except NO_ANSWER as exc:
            raise UnavailableError(f"cannot reach the Kubernetes API for exec: {exc}") from exc
        stream = ExecStream(ws, ws.protocol or "", asked_at)
        try:
            if stream.protocol not in PROTOCOLS:
                raise ExecError(f"Kubernetes chose no supported exec protocol ({ws.protocol!r})")
            where = f"{namespace}/{pod}/{container}"
            log.debug("exec stream open", extra={"container": where, "protocol": ws.protocol})
            yield stream
        finally:
            await stream.close()

    async def run(
        self, namespace: str, pod: str, container: str, command: Sequence[str]
    ) -> tuple[int, bytes]:
        """Run a short command to its end, without stdin or a terminal: its exit code and
        stdout (stderr is dropped). A `KubernetesError` as `open` raises it; ExecError when it
        outlives `RUN_TIMEOUT`."""
        stdout = bytearray()
        try:
            async with (
                asyncio.timeout(RUN_TIMEOUT),
                self.open(namespace, pod, container, command, tty=False) as stream,
            ):
                await stream.close_stdin()
                async for event in stream.events():
                    if isinstance(event, Output) and event.channel == Channel.STDOUT:
                        stdout += event.data
                    elif isinstance(event, Exited):
                        return event.exit_code, bytes(stdout)
        except TimeoutError:
            raise ExecError(f"{command[0]} did not end within {RUN_TIMEOUT:.0f}s") from None
        raise ExecError("the Kubernetes exec stream ended without an exit status")

    async def close(self) -> None:
        if self._api is not None:
            await self._api.close()
            self._api = None


async def _connect(
    api: client.ApiClient, path: str, query: list[tuple[str, str]], protocols: Sequence[str]
) -> aiohttp.ClientWebSocketResponse:
    """A WebSocket to `path` on the API server, authenticated as `api` is, offering `protocols`.

    kubernetes_asyncio's WsApiClient sends a fixed protocol header and never learns which one
    the server picked; aiohttp's own negotiation (`protocols=`) does, so it is used here with
    the client's session (TLS, client certificate) and authentication headers.
    """
    headers: dict[str, str] = {}
    await api.update_params_for_auth(headers, [], ["BearerToken"])
    parts = urlsplit(str(api.configuration.host) + path)
    scheme = {"http": "ws", "https": "wss"}.get(parts.scheme, parts.scheme)
    url = urlunsplit((scheme, parts.netloc, parts.path, urlencode(query), ""))
    session: aiohttp.ClientSession = api.rest_client.pool_manager
    return await session.ws_connect(
        url,
        headers=headers,
        protocols=protocols,
        heartbeat=HEARTBEAT,
        max_msg_size=MAX_MESSAGE,
        proxy=api.rest_client.proxy or None,
        server_hostname=api.rest_client.server_hostname or None,
    )
