"""`GET /v1/client/allocation/:alloc_id/exec`: Nomad's exec WebSocket, carried onto the pod.

Nomad's JSON frames (`model.execframes`) are translated to and from the Kubernetes exec stream
of the task's container (`cluster.podexec`): stdin data and close, `tty_size` as a resize,
heartbeats `{}` ignored; stdout and stderr come back base64 in chunks of at most
`OUTPUT_CHUNK` raw bytes, then both close frames, then
`{"exited":true,"result":{"exit_code":N}}` and a normal close (1000).

As in Nomad since 2.0.5, the upgrade happens first and every later error is a close frame whose
reason is the error text (Nomad's texts; a reason is cut to the 123 bytes a close frame holds):
1008 for bad requests, denials, unknown allocations and tasks and tasks that do not run; 1011
for internal faults; 1013 while authorization is unavailable. The text is what `api.errors`
answers the same failure with over HTTP. A plain GET without the upgrade is answered 400 with a
readable text.
With `ws_handshake=true` the first frame `{"version":1,"auth_token":...}` carries the token.

Authorization goes through the Authorizer: `alloc-exec` on the allocation's namespace (the
request's for an unknown allocation, so a bad token is denied whether or not the ID exists),
then `alloc-node-exec` too when the task's driver is `raw_exec`.

The relay is callbacks, not tasks (`_Client`): the endpoint writes the 101 itself and the
request's connection protocol hands every later byte to its parser (`model.websocket`), which
writes what a frame asks for (stdin, a resize, a stdin close) straight to the Kubernetes stream;
the stream hands its output to `_Client.on_output`, which writes it straight to the client's
transport. A keystroke and its echo thus cost no task switch (docs/benchmarks/issue-36.md,
"Interactive exec"), and take shortcuts: a lone small frame skips the parser's `Message`, the
compact stdin frame is sliced instead of decoded (`keystroke_stdin`), an echo is one encoded
frame. Frames that come before the stream is open are kept and sent once it is. Flow control:
above `HIGH_WATER` bytes waiting for the client the stream is not read until they are below
`LOW_WATER`, and the client is not read while that much waits for the API server. A frame that
breaks the protocol closes with 1002, one over `MAX_CLIENT_FRAME` with 1009.

Whichever side ends first ends the other; the server's heartbeat is a timer. A client that goes
away ends the Kubernetes stream, which ends a process that reads stdin; a command still running
when its session ends (containerd keeps it) is ended in the background through a second exec
(`cluster.leftovers`: SIGHUP, then SIGKILL). The executor and the session bookkeeping are the
API context's (`pods.executor`, `streams`): open sessions are counted in
`Lifecycle.active_sessions` and the `allocbridge_exec_sessions` gauge; on shutdown they are
closed with 1001.

Deviations from Nomad: bad `command`, `tty` and client frames close with 1008 (Nomad: 1011), a
denial closes with 1008 (Nomad: 1011); the exit frame always carries `exit_code`, 0 included
(Nomad leaves a zero out); the server sends a heartbeat `{}` every `HEARTBEAT_INTERVAL` seconds
(Nomad sends none), which keeps idle sessions alive through proxies; the handshake frame must
arrive within `HANDSHAKE_TIMEOUT` seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Mapping
from typing import Any, Final, cast
from urllib.parse import urlsplit

from aiohttp import WSCloseCode, web

from allocbridge.actions.lifecycle import Target
from allocbridge.api.context import Streams, context, synced_store
from allocbridge.api.errors import Failure, NomadError, failure
from allocbridge.api.ids import parse_alloc_id
from allocbridge.api.query import go_parse_bool, parse_query
from allocbridge.api.routing import ALLOC_ID, Endpoint
from allocbridge.auth import (
    ALLOC_EXEC,
    ALLOC_NODE_EXEC,
    AuthUnavailableError,
    Caller,
    PermissionDeniedError,
)
from allocbridge.auth import extract_token as header_token
from allocbridge.cluster.errors import KubernetesError, NotFoundError
from allocbridge.cluster.leftovers import EndedSession, end_leftover
from allocbridge.cluster.podexec import (
    HIGH_WATER,
    LOW_WATER,
    Channel,
    ContainerNotRunningError,
    Event,
    ExecStream,
    Exited,
    OutputClosed,
    PodExecutor,
)
from allocbridge.model.allocstatus import TERMINAL
from allocbridge.model.execframes import (
    HEARTBEAT_FRAME,
    OUTPUT_CHUNK,
    FrameError,
    Stream,
    close_reason,
    decode_client_frame,
    encode_exited,
    encode_output,
    encode_output_close,
    encode_small_output,
    keystroke_stdin,
    parse_handshake,
)
from allocbridge.model.goformat import go_quote
from allocbridge.model.websocket import (
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
    valid_key,
)

log = logging.getLogger(__name__)

#: Seconds between the server's heartbeats (the Go client and the web UI send theirs as often).
HEARTBEAT_INTERVAL: Final = 10.0
HANDSHAKE_TIMEOUT: Final = 30.0
#: Largest client frame accepted; a stdin frame of 1 MiB raw is about 1.4 MB of JSON.
MAX_CLIENT_FRAME: Final = 4 * 1024 * 1024
#: Seconds a close waits for the client's answering close frame. The client answers only after
#: reading every frame sent before the close, so on a slow link this is how far behind it may
#: be. Closing the socket sooner makes whatever the client sends meanwhile (a heartbeat, stdin)
#: meet a closed socket, whose reset throws away what the client's kernel still holds: the tail
#: of the output and the exit code. A client that reads everything answers at once, and one
#: that just drops the connection (the Nomad SDK, after the exit frame) ends the wait too.
CLOSE_WAIT: Final = 30.0
#: What is left of that wait once the server starts stopping, so a slow reader cannot hold the
#: stop up (aiohttp reads nothing more then: only the client dropping the connection could end
#: the wait sooner).
SHUTDOWN_CLOSE_WAIT: Final = 2.0

POLICY_VIOLATION: Final = int(WSCloseCode.POLICY_VIOLATION)  # 1008
INTERNAL_ERROR: Final = int(WSCloseCode.INTERNAL_ERROR)  # 1011
TRY_AGAIN_LATER: Final = int(WSCloseCode.TRY_AGAIN_LATER)  # 1013
GOING_AWAY: Final = int(WSCloseCode.GOING_AWAY)  # 1001

NOT_UPGRADED: Final = (
    "websocket connection not found in context: exec is a WebSocket endpoint; send "
    "`Connection: Upgrade` and `Upgrade: websocket`"
)
CROSS_ORIGIN: Final = (
    "failed to upgrade connection: websocket: request origin not allowed by Upgrader.CheckOrigin"
)
NOT_CONFIGURED: Final = "exec is not available on this server"
RAW_EXEC: Final = "raw_exec"
#: Nomad's name of each output channel, looked up for every echo (a dict lookup: reading an
#: enum member off its class costs about twenty times as much on Python 3.11).
_STREAM_NAMES: Final[dict[int, Stream]] = {Channel.STDOUT: "stdout", Channel.STDERR: "stderr"}

# --- Request parameters (pure) ------------------------------------------------------------


def parse_command(raw: str | None) -> list[str]:
    """The `command` parameter: a JSON array of strings, not empty."""
    try:
        command = json.loads(raw or "")
    except ValueError as exc:
        detail = "unexpected end of JSON input" if not (raw or "").strip() else str(exc)
        raise FrameError(f"failed to marshal command into json: {detail}") from None
    if command is None:
        command = []
    if not isinstance(command, list) or not all(isinstance(part, str) for part in command):
        raise FrameError(
            "failed to marshal command into json: json: cannot unmarshal "
            f"{_json_kind(command)} into Go value of type []string"
        )
    if not command:
        raise FrameError("command is not present")
    return command


def _json_kind(value: Any) -> str:
    """The JSON kind Go's decoder names: the first non-string element's for an array (an
    element that is itself an array is `array`; recursing into it found nothing in `[[]]`)."""
    if isinstance(value, list):
        return next((_kind(v) for v in value if not isinstance(v, str)), "array")
    return _kind(value)


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "bool", str: "string", dict: "object", list: "array"}.get(type(value), "number")


def parse_flag(query: Mapping[str, str], name: str) -> bool:
    """A boolean parameter as Go's ParseBool reads it; absent or empty is false."""
    value = query.get(name, "")
    if not value:
        return False
    try:
        return go_parse_bool(value)
    except ValueError:
        raise FrameError(
            f"{name} value is not a boolean: strconv.ParseBool: parsing {go_quote(value)}: "
            "invalid syntax"
        ) from None


# --- The endpoint ------------------------------------------------------------------------------


class _CloseError(Exception):
    """End the session with this close code and reason."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


class _ClientLeftError(Exception):
    """The client closed the WebSocket or its connection ended."""


class _ExitedError(Exception):
    """The process exited and its exit frame went to the client."""


class _Client:
    """The client's side of a session: a server's WebSocket over the upgraded connection.

    aiohttp's connection protocol hands the bytes to `feed_data`, which parses them into
    frames; what a frame asks for (stdin, a resize, a stdin close) goes straight to the
    Kubernetes stream, and output from it straight to the client's transport (`on_output`),
    without a task in between. Until the stream is open (`relay`), client frames are kept.

    The session's outcome is `ended`'s result: `_ExitedError`, `_ClientLeftError`, a `_CloseError`
    for a bad frame, or the stream's KubernetesError.

    Flow control: output is written while less than `HIGH_WATER` bytes wait for the client;
    above it the Kubernetes stream is not read until they are below `LOW_WATER` (the client
    transport's own marks, told by `_WritePauses`). Input is likewise not read while the
    Kubernetes stream's write buffer is above `HIGH_WATER`.
    """

    def __init__(self, transport: asyncio.Transport) -> None:
        loop = asyncio.get_running_loop()
        self._transport = transport
        self._tty = False
        self._parser = FrameParser(masked=True, max_message=MAX_CLIENT_FRAME)
        self._stream: ExecStream | None = None
        self._kept: list[bytes] = []  # data frames before the stream is open
        self._kept_size = 0
        self._broken = False  # a protocol error: the rest of the bytes mean nothing
        self._first: asyncio.Future[bytes] | None = None  # waits for the handshake frame
        self.ended: asyncio.Future[BaseException] = loop.create_future()
        self._close_sent = False
        self._close_answered: asyncio.Future[None] = loop.create_future()  # its close or EOF
        self._open_streams: list[Stream] = ["stdout", "stderr"]
        self._client_full = False  # the client's transport is over its high-water mark
        self._waits: set[asyncio.Future[None]] = set()  # for flow control; cancelled by stop
        self._heartbeat = loop.call_later(HEARTBEAT_INTERVAL, self._beat)

    # --- aiohttp's side: the connection's payload parser (`set_parser`) ----------------------

    def feed_data(self, data: bytes) -> tuple[bool, bytes]:
        stream = self._stream
        if stream is not None and not self._broken and not self._close_sent:  # relaying
            payload = self._parser.lone_data_frame(data)
            if payload is not None:
                if self.ended.done():
                    return False, b""
                stdin = keystroke_stdin(payload)
                if stdin is None:
                    self._frame(payload)
                elif stdin and stream.write_stdin(stdin):
                    self._hold_input(stream)
                return False, b""
        if self._broken:
            return False, b""
        try:
            messages = self._parser.feed(data)
        except ProtocolError as exc:
            self._broken = True  # nothing more can be parsed, the client's close included
            self._answered()
            self._end(_CloseError(exc.code, exc.reason))
            return False, b""
        for message in messages:
            opcode = message.opcode
            if opcode in (OP_TEXT, OP_BINARY):
                if self._close_sent or self.ended.done():
                    continue  # the session is over; only the client's close is awaited
                if self._first is not None and not self._first.done():
                    self._first.set_result(message.payload)
                elif self._stream is None:
                    self._kept.append(message.payload)
                    self._kept_size += len(message.payload)
                    if self._kept_size > HIGH_WATER and self._transport.is_reading():
                        self._transport.pause_reading()  # until the stream is open
                else:
                    self._frame(message.payload)
            elif opcode == OP_PING:
                self._write(OP_PONG, message.payload)
            elif opcode == OP_CLOSE:
                self._answered()
                self._end(_ClientLeftError())
        return False, b""

    def feed_eof(self) -> None:
        self._answered()
        self._end(_ClientLeftError())

    def _answered(self) -> None:
        if not self._close_answered.done():
            self._close_answered.set_result(None)
        if self._first is not None and not self._first.done():
            self._first.set_exception(_ClientLeftError())

    # --- client frames to the process ---------------------------------------------------------

    def _frame(self, message: bytes) -> None:
        stream = self._stream
        assert stream is not None
        try:
            frame = decode_client_frame(message)
        except FrameError as exc:
            self._end(_CloseError(POLICY_VIOLATION, str(exc)))
            return
        if frame.tty_size is not None and self._tty:
            stream.write_resize(*frame.tty_size)
        if frame.stdin and stream.write_stdin(frame.stdin):
            self._hold_input(stream)
        if frame.stdin_close and not stream.write_close_stdin():
            log.debug("stdin close not delivered: the stream's protocol cannot half-close")

    def _hold_input(self, stream: ExecStream) -> None:
        """More than `HIGH_WATER` bytes wait to go to the API server: read nothing more from
        the client until they are below `LOW_WATER`."""
        if self._transport.is_reading():
            self._transport.pause_reading()
            self._waits.add(asyncio.ensure_future(self._resume_when_sent(stream)))

    async def _resume_when_sent(self, stream: ExecStream) -> None:
        with contextlib.suppress(Exception):
            await stream.drain()
        if not self._transport.is_closing():
            self._transport.resume_reading()

    # --- the process's output to the client (the stream's listener) ---------------------------

    def on_output(self, channel: Channel, data: bytes) -> None:
        if self.ended.done() or self._close_sent:
            return
        transport = self._transport
        if transport.is_closing():
            return
        name = _STREAM_NAMES[channel]
        if len(data) <= OUTPUT_CHUNK:  # an echo
            transport.write(encode(OP_TEXT, encode_small_output(name, data)))
            return
        for frame in encode_output(name, data):
            self._write(OP_TEXT, frame)

    def on_event(self, event: Event) -> None:
        if self.ended.done():
            return
        if isinstance(event, OutputClosed):
            name = "stdout" if event.channel == Channel.STDOUT else "stderr"
            if name in self._open_streams:
                self._open_streams.remove(name)
                self._write(OP_TEXT, encode_output_close(name))
        elif isinstance(event, Exited):
            for name in self._open_streams:
                self._write(OP_TEXT, encode_output_close(name))
            self._write(OP_TEXT, encode_exited(event.exit_code))
            self._end(_ExitedError())

    def on_end(self, error: KubernetesError | None) -> None:
        if error is not None:
            self._end(error)

    def writing_paused(self) -> None:
        """The client's transport holds more than `HIGH_WATER` bytes: stop reading the stream."""
        self._client_full = True
        if self._stream is not None:
            self._stream.pause_reading()

    def writing_resumed(self) -> None:
        """The client took its output down to `LOW_WATER`: read the stream again."""
        self._client_full = False
        if self._stream is not None:
            self._stream.resume_reading()

    # --- writing, heartbeats, the end ---------------------------------------------------------

    def _write(self, opcode: int, payload: bytes) -> None:
        if self._close_sent or self._transport.is_closing():
            return
        self._transport.write(encode(opcode, payload))

    def _beat(self) -> None:
        self._write(OP_TEXT, HEARTBEAT_FRAME)
        self._heartbeat = asyncio.get_running_loop().call_later(HEARTBEAT_INTERVAL, self._beat)

    def _end(self, outcome: BaseException) -> None:
        if not self.ended.done():
            self.ended.set_result(outcome)
            self._heartbeat.cancel()

    async def handshake_frame(self) -> bytes:
        """The client's first data frame (within `HANDSHAKE_TIMEOUT`)."""
        if self._kept:  # sent along with the upgrade request
            self._kept_size -= len(self._kept[0])
            return self._kept.pop(0)
        if self.ended.done():
            raise _ClientLeftError
        self._first = asyncio.get_running_loop().create_future()
        return await asyncio.wait_for(self._first, HANDSHAKE_TIMEOUT)

    def relay(self, stream: ExecStream, *, tty: bool) -> None:
        """Carry frames both ways from now on, the ones the client sent meanwhile first.
        Sizes are forwarded for terminals only: Kubernetes has no use for them otherwise."""
        self._stream = stream
        self._tty = tty
        kept, self._kept = self._kept, []
        for message in kept:
            if self.ended.done():
                return
            self._frame(message)
        if not self._transport.is_reading() and stream.write_buffer_size <= HIGH_WATER:
            self._transport.resume_reading()
        stream.listen(self)
        if self._client_full:
            stream.pause_reading()

    def stop(self) -> None:
        """Take nothing more from the session's sides (it ends)."""
        self._heartbeat.cancel()
        for wait in self._waits:
            wait.cancel()
        self._end(_ClientLeftError())  # the outcome is already set, or nobody awaits it

    async def close(self, code: int, stopping: asyncio.Event, reason: str = "") -> None:
        """Send the close frame, then wait for the client's: up to `CLOSE_WAIT`, and from the
        moment the server starts stopping, up to `SHUTDOWN_CLOSE_WAIT` more; then drop the
        connection."""
        self.stop()
        if self._close_sent or self._transport.is_closing():
            self._transport.close()
            return
        self._write(OP_CLOSE, close_payload(code, close_reason(reason)))
        self._close_sent = True
        if not self._transport.is_reading():
            self._transport.resume_reading()  # to see the answering close
        waiting = asyncio.ensure_future(stopping.wait())
        try:
            await asyncio.wait(
                (self._close_answered, waiting),
                timeout=CLOSE_WAIT,
                return_when=asyncio.FIRST_COMPLETED,
            )
            if waiting.done() and not self._close_answered.done():
                await asyncio.wait((self._close_answered,), timeout=SHUTDOWN_CLOSE_WAIT)
        finally:
            waiting.cancel()
            self._transport.close()


class _WritePauses(asyncio.Protocol):
    """aiohttp's protocol on the client's connection, unchanged, with the transport's writing
    pauses and resumptions also told to the relay: its flow control then follows the
    transport's own high- and low-water marks, as a drain would, without a task."""

    def __init__(self, inner: asyncio.BaseProtocol, client: _Client) -> None:
        self._inner = cast(asyncio.Protocol, inner)
        self._client = client
        # The bytes go to the relay's parser (aiohttp's protocol would hand them on to the
        # same parser): its method itself, which the transport looks up once, not a call
        # through this protocol per read.
        self.data_received = client.feed_data  # type: ignore[method-assign,assignment]

    def data_received(self, data: bytes) -> None:
        self._client.feed_data(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self._inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self._inner.pause_writing()
        self._client.writing_paused()

    def resume_writing(self) -> None:
        self._inner.resume_writing()
        self._client.writing_resumed()


async def allocation_exec(request: web.Request) -> web.StreamResponse:
    response = await _upgrade(request)
    ctx = context(request)
    streams = ctx.streams
    transport = request.transport
    assert transport is not None  # the upgrade was just written to it
    client = _Client(transport)
    request.protocol.set_parser(cast(Any, client))  # hands over what came after the request
    transport.set_protocol(_WritePauses(transport.get_protocol(), client))
    transport.set_write_buffer_limits(high=HIGH_WATER, low=LOW_WATER)
    executor = ctx.pods.executor
    if executor is None:
        await client.close(INTERNAL_ERROR, streams.stopping, NOT_CONFIGURED)
        return response
    done = streams.opened()
    try:
        await _session(request, client, executor, streams)
    except _CloseError as close:
        level = logging.ERROR if close.code == INTERNAL_ERROR else logging.DEBUG
        log.log(level, "exec ended with an error", extra=_fields(request, close))
        await client.close(close.code, streams.stopping, close.reason)
    except Exception:
        log.exception("exec failed", extra={"path": request.path})
        await client.close(
            INTERNAL_ERROR, streams.stopping, "Internal error: see the allocbridge log"
        )
    finally:
        with contextlib.suppress(Exception):
            await client.close(GOING_AWAY, streams.stopping)  # only if still open (cancelled)
        streams.closed(done)
    return response


async def _upgrade(request: web.Request) -> web.StreamResponse:
    """The WebSocket handshake's answer (RFC 6455 4.2.2), written; without an extension (no
    permessage-deflate, as Nomad's gorilla upgrader without EnableCompression: a browser
    offers it, and deflating each keystroke and echo costs more than the bytes it saves)."""
    if not _is_upgrade(request):
        raise NomadError(400, NOT_UPGRADED)
    if not _same_origin(request):
        raise NomadError(403, CROSS_ORIGIN)
    version = request.headers.get("Sec-WebSocket-Version", "")
    if version != "13":
        raise NomadError(400, f"websocket: unsupported version {go_quote(version)}: want 13")
    key = request.headers.get("Sec-WebSocket-Key", "")
    if not valid_key(key):
        raise NomadError(400, "websocket: not a websocket handshake: 'Sec-WebSocket-Key' is bad")
    headers = {
        "Upgrade": "websocket",
        "Connection": "Upgrade",
        "Sec-WebSocket-Accept": accept_key(key),
    }
    response = web.StreamResponse(status=101, headers=headers)
    await response.prepare(request)
    request.protocol.keep_alive(False)
    return response


def _is_upgrade(request: web.Request) -> bool:
    connection = {t.strip().lower() for t in request.headers.get("Connection", "").split(",")}
    return "upgrade" in connection and request.headers.get("Upgrade", "").lower() == "websocket"


def _same_origin(request: web.Request) -> bool:
    """gorilla/websocket's default check, which Nomad keeps: no Origin, or the request's host."""
    origin = request.headers.get("Origin")
    if not origin:
        return True
    return urlsplit(origin).netloc.lower() == request.host.lower()


def _fields(request: web.Request, close: _CloseError) -> dict[str, object]:
    return {"path": request.path, "code": close.code, "error": close.reason}


async def _session(
    request: web.Request, client: _Client, executor: PodExecutor, streams: Streams
) -> None:
    query = request.query
    try:
        handshake = parse_flag(query, "ws_handshake")
    except FrameError as exc:
        raise _CloseError(POLICY_VIOLATION, str(exc)) from None
    token = header_token(request.headers)
    if handshake:
        token = await _read_handshake(client, token)
    try:
        task = query.get("task", "")
        if not task:
            raise FrameError("must provide task name")
        command = parse_command(query.get("command"))
        tty = parse_flag(query, "tty")
    except FrameError as exc:
        raise _CloseError(POLICY_VIOLATION, str(exc)) from None
    namespace, pod = await _authorize_and_locate(request, Caller(token=token), task)
    began = time.time()
    try:
        async with executor.open(namespace, pod, task, command, tty=tty) as stream:
            where = {"allocation": request.match_info["alloc_id"], "task": task, "tty": tty}
            log.info("exec session opened", extra={**where, "protocol": stream.protocol})
            started = time.monotonic()
            try:
                await _relay(client, stream, streams.stopping, tty=tty)
            finally:
                seconds = round(time.monotonic() - started, 3)
                log.info("exec session closed", extra={**where, "seconds": seconds})
                if not stream.exited:  # the client left or the server stops: end the command
                    streams.in_background(
                        end_leftover(
                            executor,
                            EndedSession(
                                namespace,
                                pod,
                                task,
                                tuple(command),
                                stream.asked_at,
                                stream.first_output_at,
                                time.monotonic(),
                            ),
                        )
                    )
    except (NotFoundError, ContainerNotRunningError) as exc:  # the pod or container is gone
        log.debug("Kubernetes refused the exec", extra={"error": exc.message})
        raise _CloseError(POLICY_VIOLATION, f"task {go_quote(task)} is not running.") from None
    except KubernetesError as exc:
        if await _stopped_since(request, Target(namespace, pod, ""), task, began):
            log.info("the task stopped under an exec", extra={"task": task, "error": exc.message})
            raise _CloseError(POLICY_VIOLATION, f"task {go_quote(task)} is not running.") from None
        raise _CloseError(INTERNAL_ERROR, exc.message) from None


async def _stopped_since(request: web.Request, target: Target, task: str, since: float) -> bool:
    """Whether the task stopped (its container ended or restarted, its pod went) since the
    exec was asked for: a runtime or the API server reports that in many ways (a 500 upgrade,
    a failed exec, a stream cut without an exit status), which are then no fault."""
    actions = context(request).actions.current
    return actions is not None and await actions.stopped_since(target, task, since)


async def _read_handshake(client: _Client, header: str | None) -> str | None:
    try:
        message = await client.handshake_frame()
    except TimeoutError:
        raise _CloseError(POLICY_VIOLATION, "timed out waiting for the handshake frame") from None
    except _ClientLeftError:
        raise _CloseError(POLICY_VIOLATION, "expected the handshake frame") from None
    try:
        return parse_handshake(message, header)
    except FrameError as exc:
        raise _CloseError(POLICY_VIOLATION, str(exc)) from None


async def _authorize_and_locate(request: web.Request, caller: Caller, task: str) -> tuple[str, str]:
    """(namespace, pod) of a running task the caller may exec into; otherwise a _CloseError
    carrying the failure as `api.errors` answers it (see `_close_error`)."""
    try:
        return await _locate(request, caller, task)
    except (NomadError, PermissionDeniedError, AuthUnavailableError) as exc:
        raise _close_error(failure(exc)) from None


def _close_error(answer: Failure) -> _CloseError:
    """A failure past the upgrade: 1013 for a passing outage (the authorizer's), 1011 for
    another 5xx, 1008 for the rest (bad requests, denials, unknown allocations and tasks)."""
    log.log(answer.level, f"exec refused: {answer.event}", extra={"error": answer.detail})
    if answer.retry_later:
        return _CloseError(TRY_AGAIN_LATER, answer.message)
    if answer.status >= 500:
        return _CloseError(INTERNAL_ERROR, answer.message)
    return _CloseError(POLICY_VIOLATION, answer.message)


async def _locate(request: web.Request, caller: Caller, task: str) -> tuple[str, str]:
    """In Nomad's order: query options, the ID, the store, `alloc-exec` on the allocation's
    namespace (the request's for an unknown one), the allocation, its status, the task (and
    `alloc-node-exec` for `raw_exec`), the task's state."""
    ctx = context(request)
    raw_id = request.match_info["alloc_id"]
    query = parse_query(request.query)
    alloc_id = parse_alloc_id(raw_id)
    store = await synced_store(ctx)
    alloc = store.get(alloc_id) if alloc_id else None
    namespace = alloc.namespace if alloc else query.namespace
    await ctx.authorizer.check(caller, ALLOC_EXEC, namespace)
    if alloc is None:
        raise NomadError(404, f"Unknown allocation {go_quote(raw_id)}")
    wire = alloc.wire
    status = wire.get("ClientStatus", "")
    if status in TERMINAL:
        raise NomadError(
            400, f"exec not possible, client status of allocation {alloc.id} is {status}"
        )
    driver = _task_driver(wire, task)
    if driver is None:
        raise NomadError(404, f"unknown task name {go_quote(task)}")
    if driver == RAW_EXEC:
        await ctx.authorizer.check(caller, ALLOC_NODE_EXEC, namespace)
    state = ((wire.get("TaskStates") or {}).get(task) or {}).get("State", "pending")
    if state == "pending":
        raise NomadError(409, f"task {go_quote(task)} not started yet.")
    if state != "running":
        raise NomadError(409, f"task {go_quote(task)} is not running.")
    return namespace, alloc.object_name  # the pod is named after its Allocation object


def _task_driver(wire: Mapping[str, Any], task: str) -> str | None:
    """The driver of `task` in the allocation's group, or None when the group has no such task."""
    for group in (wire.get("Job") or {}).get("TaskGroups") or []:
        if group.get("Name") != wire.get("TaskGroup"):
            continue
        for candidate in group.get("Tasks") or []:
            if candidate.get("Name") == task:
                return str(candidate.get("Driver") or "")
    return None


async def _relay(
    client: _Client, stream: ExecStream, stopping: asyncio.Event, *, tty: bool
) -> None:
    """Carry frames both ways until the process exits, the client leaves or the server stops."""
    client.relay(stream, tty=tty)
    stop = asyncio.ensure_future(stopping.wait())
    try:
        await asyncio.wait((client.ended, stop), return_when=asyncio.FIRST_COMPLETED)
    finally:
        stop.cancel()
        client.stop()
    outcome = client.ended.result()
    if stop.done() and not isinstance(outcome, _ExitedError):
        raise _CloseError(GOING_AWAY, "allocbridge is shutting down")
    if isinstance(outcome, _ExitedError):
        await client.close(int(WSCloseCode.OK), stopping)
    elif isinstance(outcome, _ClientLeftError):
        await client.close(int(WSCloseCode.OK), stopping)  # answers the client's close
    else:
        raise outcome  # a _CloseError for a bad frame, or the stream's KubernetesError


ENDPOINTS = [
    Endpoint(f"/v1/client/allocation/{ALLOC_ID}/exec", {"GET": allocation_exec}),
]
