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
import base64
import contextlib
import enum
import json
import logging
import os
import random
import re
import socket
import ssl
import time
import urllib.request
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Final, Protocol
from urllib.parse import SplitResult, quote, urlencode, urlsplit, urlunsplit

import aiohttp
from kubernetes_asyncio import client

from allocbridge.cluster import execlink
from allocbridge.cluster.connection import Credentials
from allocbridge.cluster.errors import (
    NO_ANSWER,
    KubernetesError,
    RefusedError,
    UnavailableError,
    from_status,
)
from allocbridge.cluster.execlink import Link
from allocbridge.eventloop import tail_keeping_tls
from allocbridge.model.websocket import (
    CLOSE_NORMAL,
    OP_BINARY,
    OP_CLOSE,
    OP_PING,
    OP_PONG,
    OP_TEXT,
    FrameParser,
    ProtocolError,
    accept_key,
    close_payload,
    encode,
)

log = logging.getLogger(__name__)

PROTOCOL_V5: Final = "v5.channel.k8s.io"
PROTOCOL_V4: Final = "v4.channel.k8s.io"
#: Offered in this order; the server picks the first it supports.
PROTOCOLS: Final = (PROTOCOL_V5, PROTOCOL_V4)

#: Largest message accepted from the API server (it sends at most 32 KiB of output per message).
MAX_MESSAGE: Final = 8 * 1024 * 1024
#: Seconds of silence from the API server after which a ping goes out; a connection that
#: then stays silent for half as long again is dropped.
HEARTBEAT: Final = 30.0
#: Seconds a normal close waits for the API server's answering close.
CLOSE_TIMEOUT: Final = 10.0
#: Flow control (bytes): output waiting to be read, or input waiting to be sent, above
#: HIGH_WATER stops its source until it is below LOW_WATER.
HIGH_WATER: Final = 1024 * 1024
LOW_WATER: Final = 256 * 1024
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


_STDIN_BYTE: Final = bytes((Channel.STDIN,))
_OUTPUT_CHANNELS: Final = {
    Channel.STDOUT.value: Channel.STDOUT,
    Channel.STDERR.value: Channel.STDERR,
}


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


class _Listener(Protocol):
    """Where a relayed stream's events go as they arrive (`ExecStream.listen`): output to
    `on_output` (no `Output` made per echo), the rest to `on_event`."""

    def on_output(self, channel: Channel, data: bytes) -> None: ...

    def on_event(self, event: Event) -> None: ...

    def on_end(self, error: KubernetesError | None) -> None:
        """The stream ended: after the exit (None) or with why it failed."""


class ExecStream:
    """One exec session on the Kubernetes side, a WebSocket of its own over a `cluster.execlink`
    link (a TLS socket of its own, or aiohttp's connection behind a proxy): frames are parsed
    where the bytes arrive (the link hands them to `feed_data`) and written straight to the
    link, so a keystroke and its echo cost no task switch here. Events are read either with
    `events()` or, for a relay, by a listener called as they arrive (`listen`).

    Flow control: `events()` stops reading the connection while more than `HIGH_WATER`
    bytes of output wait to be read; a listener pauses and resumes reading itself
    (`pause_reading`, `resume_reading`). Writes that find more than `HIGH_WATER` bytes
    queued for the API server wait (`drain`) until it has taken them below `LOW_WATER`.
    """

    def __init__(self, link: Link, protocol: str, asked_at: float = 0.0) -> None:
        self._link = link
        self.protocol = protocol
        #: When the session was asked for and when its first output came (time.monotonic()):
        #: the process started between them (`cluster.leftovers` finds it by that).
        self.asked_at = asked_at
        self.first_output_at: float | None = None
        self._parser = FrameParser(masked=False, max_message=MAX_MESSAGE)
        #: Client frames' masking keys: 4 random bytes each from a generator of the stream's
        #: own, its `getrandbits` held and called as `Random.randbytes` calls it (one Python
        #: call less per keystroke).
        self._mask_bits = random.Random().getrandbits
        self._stdin_closed = False
        self._exited = False  # the status arrived: the process is gone
        self._ended = False
        self._error: KubernetesError | None = None  # why it ended, when not by the exit
        self._close_sent = False
        self._peer_closed = asyncio.get_running_loop().create_future()  # its close or EOF
        self._queue: deque[Event] = deque()
        self._queued = 0  # output bytes in _queue
        self._waiter: asyncio.Future[None] | None = None
        self._listener: _Listener | None = None
        self._paused = False
        self._received = 0  # messages, for the heartbeat
        self._heartbeat: asyncio.TimerHandle | None = None
        self._arm_heartbeat(self._received)

    # --- the link's consumer ----------------------------------------------------------------

    def feed_data(self, data: bytes) -> tuple[bool, bytes]:
        if not self._ended:  # an echo: one small data frame, taken without a `Message`
            payload = self._parser.lone_data_frame(data)
            if payload is not None:
                self._received += 1
                self._message(payload)
                return False, b""
        try:
            messages = self._parser.feed(data)
        except ProtocolError as exc:
            self._fail(ExecError(f"exec stream failed: {exc.reason}"))
            self._link.abort()
            return True, b""
        self._received += len(messages)
        for message in messages:
            opcode = message.opcode
            if opcode == OP_CLOSE:  # also after the end: it answers ours
                self._closed_by_peer()
            elif self._ended:
                continue
            elif opcode in (OP_BINARY, OP_TEXT):  # text is not sent by Kubernetes
                self._message(message.payload)
            elif opcode == OP_PING:
                self._write(OP_PONG, message.payload)
        return False, b""

    def feed_eof(self) -> None:
        self._closed_by_peer()

    # --- frames ------------------------------------------------------------------------------

    def _message(self, message: bytes) -> None:
        if not message:  # no channel byte: nothing to do
            return
        channel = message[0]
        payload = message[1:]
        output = _OUTPUT_CHANNELS.get(channel)
        if output is not None:
            if payload:
                if self.first_output_at is None:
                    self.first_output_at = time.monotonic()
                if self._listener is not None:
                    self._listener.on_output(output, payload)
                else:
                    self._deliver(Output(output, payload), len(payload))
        elif channel == Channel.STATUS:
            try:
                code = exit_code_from_status(payload)
            except ExecError as exc:
                self._fail(exc)
                return
            self._exited = True
            self._deliver(Exited(code), 0)
            self._finish(None)
        elif channel == Channel.CLOSE and payload[:1] in (b"\x01", b"\x02"):
            self._deliver(OutputClosed(Channel(payload[0])), 0)

    def _deliver(self, event: Event, size: int) -> None:
        if self._listener is not None:
            self._listener.on_event(event)
            return
        self._queue.append(event)
        self._queued += size
        if self._queued > HIGH_WATER and not self._paused:
            self.pause_reading()
        self._wake()

    def _closed_by_peer(self) -> None:
        if not self._peer_closed.done():
            self._peer_closed.set_result(None)
        self._fail(ExecError("the Kubernetes exec stream ended without an exit status"))

    def _fail(self, error: KubernetesError) -> None:
        if not self._ended:
            self._finish(error)

    def _finish(self, error: KubernetesError | None) -> None:
        self._ended = True
        self._error = error
        if self._heartbeat is not None:
            self._heartbeat.cancel()
            self._heartbeat = None
        if self._listener is not None:
            self._listener.on_end(error)
        self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _write(self, opcode: int, payload: bytes) -> None:
        """Write one frame; a broken connection is left to the reading side to report."""
        if self._close_sent or self._link.is_closing():
            return
        if opcode == OP_CLOSE:
            self._close_sent = True
        self._link.write(encode(opcode, payload, self._mask_bits(32).to_bytes(4, "little")))

    # --- the heartbeat: a ping when the API server was quiet, and a deadline for any answer -

    def _arm_heartbeat(self, seen: int) -> None:
        loop = asyncio.get_running_loop()
        self._heartbeat = loop.call_later(HEARTBEAT, self._beat, seen)

    def _beat(self, seen: int) -> None:
        if self._received != seen:
            self._arm_heartbeat(self._received)
            return
        self._write(OP_PING, b"")
        loop = asyncio.get_running_loop()
        self._heartbeat = loop.call_later(HEARTBEAT / 2, self._check_answer, seen)

    def _check_answer(self, seen: int) -> None:
        if self._received != seen:
            self._arm_heartbeat(self._received)
            return
        self._fail(ExecError("the Kubernetes exec stream stopped answering pings"))
        self._link.abort()

    # --- what its users call -----------------------------------------------------------------

    @property
    def exited(self) -> bool:
        """The exit status arrived: the process is gone."""
        return self._exited

    @property
    def can_close_stdin(self) -> bool:
        return self.protocol == PROTOCOL_V5

    @property
    def write_buffer_size(self) -> int:
        """Bytes written and not yet taken by the API server."""
        return self._link.get_write_buffer_size()

    def write_stdin(self, data: bytes) -> bool:
        """Send `data` to the process's stdin now; True when more than `HIGH_WATER` bytes then
        wait to go to the API server (see `drain`). A link that is closing takes nothing."""
        if data and not self._stdin_closed and not self._close_sent:
            key = self._mask_bits(32).to_bytes(4, "little")
            return self._link.write(encode(OP_BINARY, _STDIN_BYTE + data, key)) > HIGH_WATER
        return False

    def write_resize(self, width: int, height: int) -> None:
        self._write(OP_BINARY, encode_resize(width, height))

    def write_close_stdin(self) -> bool:
        """Half-close stdin; False on v4, which cannot (the process then sees no EOF)."""
        if self._stdin_closed:
            return self.can_close_stdin
        self._stdin_closed = True
        if not self.can_close_stdin:
            return False
        self._write(OP_BINARY, encode_close(Channel.STDIN))
        return True

    async def drain(self) -> None:
        """Wait while more than `HIGH_WATER` bytes wait to go to the API server, until they
        are below `LOW_WATER`."""
        if self._link.get_write_buffer_size() > HIGH_WATER:
            await self._link.drained(LOW_WATER)

    async def send_stdin(self, data: bytes) -> None:
        self.write_stdin(data)
        await self.drain()

    async def close_stdin(self) -> bool:
        """Half-close stdin; False on v4, which cannot (the process then sees no EOF)."""
        return self.write_close_stdin()

    async def resize(self, width: int, height: int) -> None:
        self.write_resize(width, height)

    def pause_reading(self) -> None:
        """Read nothing more from the API server until `resume_reading`."""
        if not self._paused:
            self._paused = True
            self._link.pause_reading()

    def resume_reading(self) -> None:
        if self._paused:
            self._paused = False
            self._link.resume_reading()

    def listen(self, listener: _Listener) -> None:
        """Hand every event, from now on and those not read yet, to `listener` as it arrives,
        and the end to its `on_end`, instead of `events()`."""
        self._listener = listener
        while self._queue:
            event = self._queue.popleft()
            if isinstance(event, Output):
                listener.on_output(event.channel, event.data)
            else:
                listener.on_event(event)
        self._queued = 0
        if self._ended:
            listener.on_end(self._error)

    async def events(self) -> AsyncGenerator[Event, None]:
        """Output until the exit; raises ExecError if the stream fails or ends without one."""
        while True:
            while self._queue:
                event = self._queue.popleft()
                if isinstance(event, Output):
                    self._queued -= len(event.data)
                    if self._paused and self._queued <= LOW_WATER:
                        self.resume_reading()
                yield event
                if isinstance(event, Exited):
                    return
            if self._ended:
                if self._error is None:
                    return
                raise self._error
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None

    async def close(self) -> None:
        """End the session. After the exit status, a normal close. Before it, half-close stdin
        (v5) and drop the connection without a close frame: the API server's v5 translator
        takes a close frame as "this client is done" and keeps the command running with its
        output going nowhere, while a dropped connection ends the command's streams, so a
        process that writes output gets EPIPE (a v4 proxy ends the streams either way)."""
        self._fail(ExecError("the exec stream was closed"))
        if self._link.is_closing():
            self._link.close()
            return
        if not self._exited:
            if self.can_close_stdin and not self._stdin_closed:
                self._stdin_closed = True
                self._write(OP_BINARY, encode_close(Channel.STDIN))
            sock = self._link.socket()
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
        else:
            self._write(OP_CLOSE, close_payload(CLOSE_NORMAL))
            self.resume_reading()  # to see the answering close
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._peer_closed), CLOSE_TIMEOUT)
        self._link.close()


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
        self._tls: ssl.SSLContext | None = None

    def _client(self) -> client.ApiClient:
        if self._api is None:
            credentials = self._credentials()
            if credentials is None:
                raise UnavailableError("the Kubernetes API has not been reached yet")
            configuration = credentials.configuration()
            # Every open session holds a connection: no pool limit that would queue silently.
            configuration.connection_pool_maxsize = 0
            self._api = client.ApiClient(configuration=configuration)
            self._tls = tls_context(configuration)
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
            link, protocol, rest = await _connect(api, self._tls, path, query, self._protocols)
        except NO_ANSWER as exc:
            raise UnavailableError(f"cannot reach the Kubernetes API for exec: {exc}") from exc
        stream = ExecStream(link, protocol, asked_at)
        link.start(stream, rest)
        try:
            where = f"{namespace}/{pod}/{container}"
            log.debug("exec stream open", extra={"container": where, "protocol": protocol})
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
    api: client.ApiClient,
    tls: ssl.SSLContext | None,
    path: str,
    query: list[tuple[str, str]],
    protocols: Sequence[str],
) -> tuple[Link, str, bytes]:
    """An exec upgrade of `path` on the API server, authenticated as `api` is, offering
    `protocols`: the link, the protocol the server chose and the bytes that came after its
    101; a KubernetesError when it refuses.

    Directly on a socket of our own (`SocketLink`) with `tls` (the client's TLS settings),
    unless a proxy is configured: then through aiohttp's session, which knows proxies.
    kubernetes_asyncio's WsApiClient is not used: it sends a fixed protocol header and never
    learns which one the server picked.
    """
    key = base64.b64encode(os.urandom(16)).decode()
    headers: dict[str, str] = {
        "Upgrade": "websocket",
        "Connection": "Upgrade",
        "Sec-WebSocket-Version": "13",
        "Sec-WebSocket-Key": key,
        "Sec-WebSocket-Protocol": ", ".join(protocols),
    }
    await api.update_params_for_auth(headers, [], ["BearerToken"])
    parts = urlsplit(str(api.configuration.host) + path)
    target = urlunsplit(("", "", parts.path, urlencode(query), ""))
    if _proxied(api, parts):
        return await _connect_aiohttp(
            api, parts, target=target, headers=headers, key=key, protocols=protocols
        )
    port = parts.port or (443 if parts.scheme == "https" else 80)
    link = await execlink.connect(
        parts.hostname or "",
        port,
        tls if parts.scheme == "https" else None,
        api.rest_client.server_hostname or None,
    )
    try:
        lines = [f"GET {target} HTTP/1.1", f"Host: {parts.netloc}"]
        lines += [f"{name}: {value}" for name, value in headers.items()]
        await link.send_all(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        head, rest = await execlink.read_head(link)
        status, reason, answer = _parse_head(head)
        if status != 101:
            length = answer.get("content-length", "")
            body = await execlink.read_body(
                link, rest, int(length) if length.isdigit() else None, 64 * 1024
            )
            detail = _refusal_text(body) or reason or "no reason"
            raise refused_exec(status, f"Kubernetes refused the exec: {status} {detail}")
        chosen = _check_upgrade(answer.get, key, protocols)
    except BaseException:
        link.close()
        raise
    return link, chosen, rest


def _proxied(api: client.ApiClient, parts: SplitResult) -> bool:
    """Whether requests to the API server go through a proxy: the configuration's, or one
    from the environment (aiohttp's session trusts it), unless NO_PROXY exempts the host."""
    if api.rest_client.proxy:
        return True
    proxies = urllib.request.getproxies_environment()
    if not (proxies.get(parts.scheme) or proxies.get("all")):
        return False
    bypass = urllib.request.proxy_bypass_environment  # type: ignore[attr-defined]
    return not bypass(parts.hostname or "", proxies)


async def _connect_aiohttp(
    api: client.ApiClient,
    parts: SplitResult,
    *,
    target: str,
    headers: dict[str, str],
    key: str,
    protocols: Sequence[str],
) -> tuple[Link, str, bytes]:
    session: aiohttp.ClientSession = api.rest_client.pool_manager
    with tail_keeping_tls():  # the stream's end is the connection's: never uvloop's TLS
        response = await session.request(
            "GET",
            urlunsplit((parts.scheme, parts.netloc, "", "", "")) + target,
            headers=headers,
            read_until_eof=False,
            proxy=api.rest_client.proxy or None,
            server_hostname=api.rest_client.server_hostname or None,
        )
    try:
        if response.status != 101:
            detail = _refusal_text(await response.read()) or response.reason or "no reason"
            raise refused_exec(
                response.status, f"Kubernetes refused the exec: {response.status} {detail}"
            )
        chosen = _check_upgrade(response.headers.get, key, protocols)
        link = execlink.AiohttpLink(response)
    except BaseException:
        response.close()
        raise
    return link, chosen, b""


def _parse_head(head: bytes) -> tuple[int, str, dict[str, str]]:
    """(status, reason, headers with lower-case names) of an HTTP answer's head."""
    first, *lines = head.decode("latin-1").split("\r\n")
    version, _, rest = first.partition(" ")
    code, _, reason = rest.partition(" ")
    if not version.startswith("HTTP/") or not code.isdigit():
        raise execlink.LinkError(f"the answer to the exec upgrade is not HTTP: {first[:80]!r}")
    headers: dict[str, str] = {}
    for line in lines:
        name, _, value = line.partition(":")
        name = name.strip().lower()
        headers[name] = f"{headers[name]}, {value.strip()}" if name in headers else value.strip()
    return int(code), reason, headers


def _check_upgrade(header: Callable[[str, str], str], key: str, protocols: Sequence[str]) -> str:
    """The protocol a 101 answer chose; ExecError when it is not a WebSocket's answer."""
    if header("upgrade", "").lower() != "websocket" or (
        header("sec-websocket-accept", "") != accept_key(key)
    ):
        raise ExecError("the API server's answer to the exec upgrade is not a WebSocket's")
    chosen = header("sec-websocket-protocol", "").strip()
    if chosen not in protocols:
        raise ExecError(f"Kubernetes chose no supported exec protocol ({chosen!r})")
    return chosen


def _refusal_text(body: bytes) -> str:
    """The message of the API server's Status answer, else the start of its text."""
    with contextlib.suppress(ValueError):
        status = json.loads(body)
        if isinstance(status, dict) and isinstance(status.get("message"), str):
            return _without_wrappers(status["message"])
    return body[:200].decode("utf-8", "replace").strip()


def tls_context(configuration: client.Configuration) -> ssl.SSLContext:
    """The TLS settings kubernetes_asyncio's REST client uses for `configuration`."""
    context = ssl.create_default_context(cafile=configuration.ssl_ca_cert)
    if configuration.cert_file:
        context.load_cert_chain(configuration.cert_file, keyfile=configuration.key_file)
    if not configuration.verify_ssl:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if configuration.disable_strict_ssl_verification:
        context.verify_flags &= ~ssl.VERIFY_X509_STRICT
    return context
