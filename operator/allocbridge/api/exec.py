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

Each session runs two pumps (client to pod, pod to client) and a heartbeat; whichever side ends
first ends the other. A client that goes away ends the Kubernetes stream, which ends a process
that reads stdin; a command still running when its session ends (containerd keeps it) is ended
in the background through a second exec (`cluster.leftovers`: SIGHUP, then SIGKILL). Writes
to the client go through one lock. The executor and the session bookkeeping are the API
context's (`pods.executor`, `streams`): open sessions are counted in `Lifecycle.active_sessions`
and the `allocbridge_exec_sessions` gauge; on shutdown they are closed with 1001.

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
from typing import Any, Final
from urllib.parse import urlsplit

from aiohttp import WSCloseCode, WSMsgType, web

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
    Channel,
    ContainerNotRunningError,
    ExecStream,
    Exited,
    Output,
    OutputClosed,
    PodExecutor,
)
from allocbridge.model.allocstatus import TERMINAL
from allocbridge.model.execframes import (
    HEARTBEAT_FRAME,
    FrameError,
    Stream,
    close_reason,
    decode_client_frame,
    encode_exited,
    encode_output,
    encode_output_close,
    parse_handshake,
)
from allocbridge.model.goformat import go_quote

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


class _ClientGoneError(Exception):
    """The client's connection broke while a frame was being sent."""


class _ClientSocket:
    """The client's WebSocket with every write under one lock."""

    def __init__(self, ws: web.WebSocketResponse, stopping: asyncio.Event) -> None:
        self.ws = ws
        self._stopping = stopping
        self._lock = asyncio.Lock()

    async def send(self, frame: bytes) -> None:
        """Send `frame`, UTF-8 JSON text, as a text message."""
        async with self._lock:
            try:
                await self.ws.send_frame(frame, WSMsgType.TEXT)
            except ConnectionError as exc:
                raise _ClientGoneError from exc

    async def close(self, code: int, reason: str = "") -> None:
        """Send the close frame, then wait for the client's: up to `CLOSE_WAIT`, and from the
        moment the server starts stopping, up to `SHUTDOWN_CLOSE_WAIT` more."""
        async with self._lock:
            if self.ws.closed:
                return
            message = close_reason(reason).encode("utf-8")
            closing = asyncio.ensure_future(self.ws.close(code=code, message=message))
            stopping = asyncio.ensure_future(self._stopping.wait())
            try:
                await asyncio.wait(
                    (closing, stopping), timeout=CLOSE_WAIT, return_when=asyncio.FIRST_COMPLETED
                )
                if stopping.done():
                    await asyncio.wait((closing,), timeout=SHUTDOWN_CLOSE_WAIT)
            finally:
                stopping.cancel()
                closing.cancel()  # still waiting: aiohttp then drops the connection (1006)
                await asyncio.gather(closing, stopping, return_exceptions=True)


async def allocation_exec(request: web.Request) -> web.StreamResponse:
    if not _is_upgrade(request):
        raise NomadError(400, NOT_UPGRADED)
    if not _same_origin(request):
        raise NomadError(403, CROSS_ORIGIN)
    # No permessage-deflate, as Nomad (gorilla/websocket's default) offers none: a browser
    # asks for it, and deflating each keystroke and echo costs more than the bytes it saves.
    ws = web.WebSocketResponse(max_msg_size=MAX_CLIENT_FRAME, timeout=CLOSE_WAIT, compress=False)
    await ws.prepare(request)
    ctx = context(request)
    streams = ctx.streams
    client = _ClientSocket(ws, streams.stopping)
    executor = ctx.pods.executor
    if executor is None:
        await client.close(INTERNAL_ERROR, NOT_CONFIGURED)
        return ws
    done = streams.opened()
    try:
        await _session(request, client, executor, streams)
    except _CloseError as close:
        level = logging.ERROR if close.code == INTERNAL_ERROR else logging.DEBUG
        log.log(level, "exec ended with an error", extra=_fields(request, close))
        await client.close(close.code, close.reason)
    except Exception:
        log.exception("exec failed", extra={"path": request.path})
        await client.close(INTERNAL_ERROR, "Internal error: see the allocbridge log")
    finally:
        with contextlib.suppress(Exception):
            await client.close(GOING_AWAY)  # only if still open (a cancelled session)
        streams.closed(done)
    return ws


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
    request: web.Request, client: _ClientSocket, executor: PodExecutor, streams: Streams
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
                await _pump(client, stream, streams.stopping, tty=tty)
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


async def _read_handshake(client: _ClientSocket, header: str | None) -> str | None:
    try:
        message = await client.ws.receive(timeout=HANDSHAKE_TIMEOUT)
    except TimeoutError:
        raise _CloseError(POLICY_VIOLATION, "timed out waiting for the handshake frame") from None
    if message.type not in (WSMsgType.TEXT, WSMsgType.BINARY):
        raise _CloseError(POLICY_VIOLATION, "expected the handshake frame")  # or the client left
    try:
        return parse_handshake(message.data, header)
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


async def _pump(
    client: _ClientSocket, stream: ExecStream, stopping: asyncio.Event, *, tty: bool
) -> None:
    """Carry frames both ways until the process exits, the client leaves or the server stops."""
    to_client = asyncio.create_task(_pod_to_client(client, stream))
    to_pod = asyncio.create_task(_client_to_pod(client, stream, tty))
    heartbeat = asyncio.create_task(_heartbeats(client))
    stop = asyncio.create_task(stopping.wait())
    tasks = (to_client, to_pod, heartbeat, stop)
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    if _finished(to_client):
        try:
            to_client.result()  # raises a KubernetesError when the stream failed
        except _ClientGoneError:
            return
        await client.close(int(WSCloseCode.OK))
    elif _finished(to_pod):
        to_pod.result()  # raises _CloseError for a bad frame; returns when the client left
    elif stop.done():
        raise _CloseError(GOING_AWAY, "allocbridge is shutting down")
    # else a heartbeat found the client gone


def _finished(task: asyncio.Task[None]) -> bool:
    return task.done() and not task.cancelled()


async def _pod_to_client(client: _ClientSocket, stream: ExecStream) -> None:
    names: dict[Channel, Stream] = {Channel.STDOUT: "stdout", Channel.STDERR: "stderr"}
    open_streams: list[Stream] = ["stdout", "stderr"]
    async with contextlib.aclosing(stream.events()) as events:
        async for event in events:
            if isinstance(event, Output):
                for frame in encode_output(names[event.channel], event.data):
                    await client.send(frame)
            elif isinstance(event, OutputClosed):
                name = names[event.channel]
                if name in open_streams:
                    open_streams.remove(name)
                    await client.send(encode_output_close(name))
            elif isinstance(event, Exited):
                for name in open_streams:
                    await client.send(encode_output_close(name))
                await client.send(encode_exited(event.exit_code))
                return


async def _client_to_pod(client: _ClientSocket, stream: ExecStream, tty: bool) -> None:
    """Returns when the client leaves; raises _CloseError for a frame that cannot be used.
    Sizes are forwarded for terminals only: Kubernetes has no use for them otherwise."""
    while True:
        message = await client.ws.receive()
        if message.type not in (WSMsgType.TEXT, WSMsgType.BINARY):
            return  # close, closing, closed or a broken connection
        try:
            frame = decode_client_frame(message.data)
        except FrameError as exc:
            raise _CloseError(POLICY_VIOLATION, str(exc)) from None
        if frame.is_heartbeat:
            continue
        if frame.tty_size is not None and tty:
            await stream.resize(*frame.tty_size)
        if frame.stdin:
            await stream.send_stdin(frame.stdin)
        if frame.stdin_close and not await stream.close_stdin():
            log.debug("stdin close not delivered: the stream's protocol cannot half-close")


async def _heartbeats(client: _ClientSocket) -> None:
    while True:
        await asyncio.sleep(HEARTBEAT_INTERVAL)
        await client.send(HEARTBEAT_FRAME)


ENDPOINTS = [
    Endpoint(f"/v1/client/allocation/{ALLOC_ID}/exec", {"GET": allocation_exec}),
]
