"""`GET /v1/client/fs/logs/:alloc_id`: a task's log, from its container's Kubernetes log.

What `nomad alloc logs` reads. The query is checked in Nomad's order with Nomad's texts (all
400): `task`, `follow`, `plain`, `type`, `offset`, `origin`. Then the allocation (404
`Unknown allocation "<id>"`), the capability (`read-logs` or `read-fs` on its namespace), the
task (400 `unknown task name "x"`) and whether it has started (404 `task "x" not started yet.
No logs available`, also when Kubernetes says the container is waiting to start).

The body is Nomad's frame stream (`model.streamframes`): frames of at most 64 KiB, sent once
64 KiB wait, once the log pauses (`LINGER`, 5 ms) or at the latest 200 ms after their first
byte (`pump`), a `{}` heartbeat each second while a followed log is idle; with
`plain=true` the raw bytes as text/plain. Without `follow` the body ends at the log's end.
`origin=end` counts `offset` back from the log's current end, which takes a first read of the
log to learn its size (Kubernetes serves byte ranges only from the start).

stdout and stderr: where the API server serves split streams (`cluster.podlogs`), each type is
its own stream. Where it does not, `type=stdout` is the container's whole log (both streams
interleaved, as `kubectl logs` shows it) and `type=stderr` is empty, so `alloc logs -f`, which
reads both, shows each line once. Offsets count bytes of what is served, not of Nomad's files.

A client that goes away ends the Kubernetes log stream: the next write fails (a heartbeat at
the latest, within a second) and the stream is closed. Shutdown ends every followed log
(`ApiContext.streams`); the log reader is the context's `pods.logs`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final

from aiohttp import web
from multidict import MultiMapping

from allocbridge.api.context import context
from allocbridge.api.errors import NomadError
from allocbridge.api.query import go_parse_bool
from allocbridge.api.routing import ALLOC_ID, Endpoint
from allocbridge.api.targets import readable_allocation
from allocbridge.auth import (
    READ_FS,
    READ_LOGS,
)
from allocbridge.cluster.errors import KubernetesError, NotFoundError, UnavailableError
from allocbridge.cluster.podlogs import ContainerWaitingError, PodLogReader, Stream
from allocbridge.model.goformat import go_quote
from allocbridge.model.streamframes import (
    BATCH_WINDOW,
    HEARTBEAT,
    HEARTBEAT_INTERVAL,
    LINGER,
    MAX_FRAME,
    LogType,
    LogWindow,
    Origin,
    Tail,
    encode_frames,
    log_file,
    start_at,
)
from allocbridge.store import StoredAllocation

log = logging.getLogger(__name__)

TASK_REQUIRED: Final = "must provide task name"
TYPE_REQUIRED: Final = "must provide log type (stdout/stderr)"
BAD_ORIGIN: Final = "origin must be start or end"
_INT64: Final = (-(2**63), 2**63 - 1)
#: Chunks read ahead of the client; the Kubernetes stream waits when the client is slow.
READ_AHEAD: Final = 16


@dataclass(frozen=True)
class LogQuery:
    task: str
    log_type: LogType
    follow: bool = False
    plain: bool = False
    offset: int = 0
    origin: Origin = "start"


def _bool(query: MultiMapping[str], name: str) -> bool:
    value = query.get(name, "")
    if not value:
        return False
    try:
        return go_parse_bool(value)
    except ValueError:
        raise NomadError(
            400,
            f"failed to parse {name} field to boolean: "
            f"strconv.ParseBool: parsing {go_quote(value)}: invalid syntax",
        ) from None


def go_parse_int64(text: str) -> int:
    """Go's `strconv.ParseInt(text, 10, 64)`; raises ValueError with Go's message."""
    digits = text[1:] if text[:1] in ("+", "-") else text
    if not digits or not digits.isascii() or not digits.isdigit():
        raise ValueError(f"strconv.ParseInt: parsing {go_quote(text)}: invalid syntax")
    value = int(text)
    if not _INT64[0] <= value <= _INT64[1]:
        raise ValueError(f"strconv.ParseInt: parsing {go_quote(text)}: value out of range")
    return value


def parse_log_query(query: MultiMapping[str]) -> LogQuery:
    """The logs options in Nomad's order of checks; the first bad one is a 400."""
    task = query.get("task", "")
    if not task:
        raise NomadError(400, TASK_REQUIRED)
    follow = _bool(query, "follow")
    plain = _bool(query, "plain")
    log_type = query.get("type", "")
    if log_type not in ("stdout", "stderr"):
        raise NomadError(400, TYPE_REQUIRED)
    offset = 0
    if raw := query.get("offset", ""):
        try:
            offset = go_parse_int64(raw)
        except ValueError as exc:
            raise NomadError(400, f"error parsing offset: {exc}") from None
    origin = query.get("origin", "") or "start"
    if origin not in ("start", "end"):
        raise NomadError(400, BAD_ORIGIN)
    return LogQuery(
        task=task,
        log_type="stdout" if log_type == "stdout" else "stderr",
        follow=follow,
        plain=plain,
        offset=offset,
        origin="end" if origin == "end" else "start",
    )


def task_names(alloc: StoredAllocation) -> list[str]:
    """The allocation's tasks: its group's in the Job copy, else those with a state."""
    wire = alloc.wire
    for group in (wire.get("Job") or {}).get("TaskGroups") or []:
        if group.get("Name") == wire.get("TaskGroup"):
            return [str(t.get("Name")) for t in group.get("Tasks") or []]
    return list(wire.get("TaskStates") or {})


def task_started(alloc: StoredAllocation, task: str) -> bool:
    """Nomad serves logs once a task has started: running now, or with a start time."""
    state = (alloc.wire.get("TaskStates") or {}).get(task) or {}
    return state.get("State") == "running" or bool(state.get("StartedAt"))


def not_started(task: str) -> NomadError:
    return NomadError(404, f"task {go_quote(task)} not started yet. No logs available")


# --- The endpoint ------------------------------------------------------------------------------


async def allocation_logs(request: web.Request) -> web.StreamResponse:
    options = parse_log_query(request.query)
    alloc = await readable_allocation(request, READ_LOGS, READ_FS)
    if options.task not in task_names(alloc):
        raise NomadError(400, f"unknown task name {go_quote(options.task)}")
    if not task_started(alloc, options.task):
        raise not_started(options.task)
    ctx = context(request)
    if ctx.pods.logs is None:
        raise NomadError(503, "logs are not available: no Kubernetes log reader")
    source = _LogSource(ctx.pods.logs, alloc, options)
    return await _serve(request, source, options, ctx.streams.stopping)


class _LogSource:
    """The task's log as Nomad's options select it, read from Kubernetes."""

    def __init__(self, reader: PodLogReader, alloc: StoredAllocation, options: LogQuery) -> None:
        self.reader = reader
        self.where = (alloc.namespace, alloc.object_name, options.task)
        self.options = options
        self.stream: Stream = "Stdout" if options.log_type == "stdout" else "Stderr"

    @contextlib.asynccontextmanager
    async def _open(self, *, follow: bool) -> AsyncIterator[AsyncIterator[bytes] | None]:
        """The log's chunks, or None for a type the unsplit log does not hold (stderr)."""
        namespace, pod, container = self.where
        try:
            async with self.reader.open(
                namespace, pod, container, follow=follow, stream=self.stream
            ) as opened:
                if not opened.split and self.options.log_type == "stderr":
                    yield None
                else:
                    yield opened.chunks()
        except KubernetesError as exc:
            raise _log_error(container, exc) from exc

    async def size(self) -> int:
        """The log's current size: a read to its end (for `origin=end` with `follow`)."""
        total = 0
        async with self._open(follow=False) as chunks:
            if chunks is not None:
                async for chunk in chunks:
                    total += len(chunk)
        return total


def _log_error(task: str, exc: KubernetesError) -> NomadError:
    if isinstance(exc, ContainerWaitingError):
        return not_started(task)
    if isinstance(exc, NotFoundError):
        return NomadError(404, f"no logs available for task {go_quote(task)}: {exc.message}")
    if isinstance(exc, UnavailableError):  # no answer, or Kubernetes' own fault: try again
        return NomadError(503, exc.message)
    return NomadError(500, f"cannot read the logs of task {go_quote(task)}: {exc.message}")


async def _serve(
    request: web.Request, source: _LogSource, options: LogQuery, stopping: asyncio.Event
) -> web.StreamResponse:
    """Open the log (errors are still plain responses), then stream it."""
    file = log_file(options.task, options.log_type)
    start = None if options.origin == "end" else start_at("start", options.offset)
    if start is None and options.follow:
        start = start_at("end", options.offset, await source.size())
    async with source._open(follow=options.follow) as chunks:
        response = web.StreamResponse()
        response.content_type = "text/plain" if options.plain else "application/json"
        await response.prepare(request)
        if start is None:  # origin=end without follow: the tail of one read to the end
            tail = Tail(max(0, options.offset))
            if chunks is not None:
                async for chunk in chunks:
                    tail.feed(chunk)
            if tail.data:
                await response.write(
                    tail.data
                    if options.plain
                    else encode_frames(tail.data, end_offset=tail.size, file=file)
                )
        else:
            encode = _Encoder(file, start, plain=options.plain)
            with contextlib.suppress(ConnectionError):
                await pump(
                    _windowed(chunks, LogWindow(start)),
                    response.write,
                    encode,
                    heartbeat=options.follow and not options.plain,
                    stopping=stopping,
                    follow=options.follow,
                )
        with contextlib.suppress(ConnectionError):
            await response.write_eof()
    return response


class _Encoder:
    """Frames (or, plain, the bytes) of data that follows on from the last; `end` is the file
    offset just past what was encoded so far."""

    def __init__(self, file: str, start: int, *, plain: bool) -> None:
        self.file = file
        self.end = start
        self.plain = plain

    def __call__(self, data: bytes) -> bytes:
        self.end += len(data)
        return data if self.plain else encode_frames(data, end_offset=self.end, file=self.file)


async def _windowed(chunks: AsyncIterator[bytes] | None, window: LogWindow) -> AsyncIterator[bytes]:
    if chunks is None:
        return
    async for chunk in chunks:
        if part := window.feed(chunk):
            yield part


async def pump(
    chunks: AsyncIterator[bytes],
    write: Callable[[bytes], Awaitable[None]],
    encode: Callable[[bytes], bytes],
    *,
    heartbeat: bool,
    stopping: asyncio.Event,
    follow: bool,
    batch: float = BATCH_WINDOW,
    linger: float = LINGER,
    idle: float = HEARTBEAT_INTERVAL,
) -> None:
    """Copy `chunks` to `write`, coalesced: what arrived goes out in whole frames once
    `MAX_FRAME` bytes wait, and all of it once the log pauses for `linger` seconds (a stream
    that has caught up with its log, or a log that has ended, is not held back) or at the
    latest `batch` seconds after the first of it; `{}` after `idle` seconds with nothing sent
    (if `heartbeat`). Ends at the end of `chunks`, or when `stopping` is set (if `follow`).

    A reader task keeps up to `READ_AHEAD` chunks ahead of the client, so the upstream is read
    while a write waits for the client, and waits itself when the client is slow."""
    queue: asyncio.Queue[bytes | None] = asyncio.Queue(READ_AHEAD)

    async def produce() -> None:
        try:
            async for chunk in chunks:
                await queue.put(chunk)
        finally:
            await queue.put(None)

    loop = asyncio.get_running_loop()
    producer = asyncio.create_task(produce())
    stop = asyncio.create_task(stopping.wait()) if follow else None
    buffer = bytearray()
    oldest = 0.0  # when the first byte in `buffer` arrived
    last_sent = loop.time()

    async def flush(size: int) -> None:
        """Send the first `size` bytes waiting; the rest starts a new batch."""
        nonlocal last_sent, oldest
        await write(encode(bytes(buffer[:size])))
        del buffer[:size]
        last_sent = oldest = loop.time()

    try:
        while True:
            if queue.empty():  # wait for the log, until a flush or a heartbeat is due
                now = loop.time()
                deadline = min(oldest + batch, now + linger) if buffer else last_sent + idle
                getter = asyncio.ensure_future(queue.get())
                waiting: set[asyncio.Future[Any]] = {getter} if stop is None else {getter, stop}
                done, _ = await asyncio.wait(
                    waiting, timeout=max(0.0, deadline - now), return_when=asyncio.FIRST_COMPLETED
                )
                if stop is not None and stop in done:
                    getter.cancel()
                    break
                if getter not in done:
                    getter.cancel()
                    if buffer:
                        await flush(len(buffer))
                    elif heartbeat:
                        await write(HEARTBEAT)
                        last_sent = loop.time()
                    else:
                        last_sent = loop.time()
                    continue
                chunk = getter.result()
            else:  # already read: no task, no wait
                chunk = queue.get_nowait()
            if chunk is None:
                break
            if not buffer:
                oldest = loop.time()
            buffer += chunk
            if len(buffer) >= MAX_FRAME:  # whole frames now, what is left with what follows
                await flush(len(buffer) - len(buffer) % MAX_FRAME)
        if buffer:
            await write(encode(bytes(buffer)))
    finally:
        producer.cancel()
        if stop is not None:
            stop.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await producer


ENDPOINTS = [Endpoint(f"/v1/client/fs/logs/{ALLOC_ID}", {"GET": allocation_logs})]
