"""`GET /v1/client/fs/{stat,ls,cat,readat,stream}/:alloc_id`: `nomad alloc fs`.

The allocation directory maps onto the pod as `model.allocfs` describes (the allocation
directory and each task's directory are made up; `alloc/` is `/alloc` in a running task's
container, `<task>/local|secrets|tmp` are `/local`, `/secrets`, `/tmp` in the task's own), and
files are read inside the container (`cluster.podfs`), so a task that is not running has no
readable files: 409 `task "x" is not running.` (for `alloc/`: when none of the tasks runs).

Order of checks, as Nomad's: the query (400 `must provide a file name` where a path is
required, Nomad's texts for `offset`, `limit`, `follow`, `origin`), then the allocation (404
`Unknown allocation "<id>"`) and `read-fs` on its namespace, then the path: 400 `Path escapes
the alloc directory` for `..` above the top or a symlink that leads out of its directory, 404
`stat <path>: no such file or directory`, 400 `file "<path>" is a directory` for reading a
directory. Differences from Nomad: the escape is a 400 (Nomad: 500), reading under
`<task>/secrets` a 403 with Nomad's text `Reading secret file prohibited: <path>` (Nomad: 500),
and a missing file read by `cat`, `readat` or `stream` a 404 (Nomad: 400).

`cat` and `readat` send the bytes (`text/plain; charset=utf-8` when Go's sniffing says text,
else `application/octet-stream`, with `X-Content-Type-Options: nosniff`); `stream` sends Nomad's
frame stream like the logs (`File` is the path as asked), following by default.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, Final

from aiohttp import web

from allocbridge.api.answers import Answer
from allocbridge.api.context import context
from allocbridge.api.errors import NomadError
from allocbridge.api.logs import go_parse_int64, pump, task_names
from allocbridge.api.query import go_parse_bool, parse_query
from allocbridge.api.routing import ALLOC_ID, Endpoint
from allocbridge.api.targets import readable_allocation
from allocbridge.auth import READ_FS
from allocbridge.cluster.podfs import (
    ESCAPES,
    IS_A_DIRECTORY,
    NO_COMMAND,
    NOT_A_DIRECTORY,
    NOT_FOUND,
    FsError,
    PodFiles,
    Where,
)
from allocbridge.model import allocfs
from allocbridge.model.allocstatus import TERMINAL
from allocbridge.model.goformat import go_quote
from allocbridge.model.streamframes import encode_frames
from allocbridge.store import StoredAllocation

FILE_REQUIRED: Final = "must provide a file name"
BAD_ORIGIN: Final = "origin must be start or end"
#: Largest offset taken (the container's shell counts in 64-bit signed arithmetic).
MAX_OFFSET: Final = 2**62


# --- Query parsing, in Nomad's order -----------------------------------------------------------


def _path(request: web.Request, *, required: bool) -> str:
    path = request.query.get("path", "")
    if not path:
        if required:
            raise NomadError(400, FILE_REQUIRED)
        return "/"
    return path


def _int(request: web.Request, name: str, *, required: bool) -> int:
    raw = request.query.get(name, "")
    if not raw and not required:
        return 0
    try:
        value = go_parse_int64(raw)
    except ValueError as exc:
        raise NomadError(400, f"error parsing {name}: {exc}") from None
    return value


def _offset(request: web.Request, *, required: bool) -> int:
    offset = _int(request, "offset", required=required)
    if offset < 0:
        raise NomadError(400, f"can't seek to offset {offset}: invalid argument")
    return min(offset, MAX_OFFSET)


# --- Finding the files -------------------------------------------------------------------------


async def _located(request: web.Request, path: str) -> tuple[StoredAllocation, allocfs.Location]:
    alloc = await readable_allocation(request, READ_FS)
    try:
        return alloc, allocfs.locate(path, task_names(alloc))
    except allocfs.PathEscapesError as exc:
        raise NomadError(400, str(exc)) from None
    except allocfs.NoSuchPathError as exc:
        raise NomadError(404, str(exc.args[0])) from None


def _files(request: web.Request) -> PodFiles:
    files = context(request).pods.files
    if files is None:
        raise NomadError(503, "alloc fs is not available: no Kubernetes exec client")
    return files


def _running(alloc: StoredAllocation, task: str) -> bool:
    state = (alloc.wire.get("TaskStates") or {}).get(task) or {}
    return state.get("State") == "running"


def _container(alloc: StoredAllocation, task: str) -> str:
    """The container to read in: `task`'s, or for `alloc/` ("") the first running task's."""
    if alloc.wire.get("ClientStatus") in TERMINAL:
        raise NomadError(
            409, f"allocation {alloc.id} is {alloc.wire.get('ClientStatus')}: its files are gone"
        )
    if task:
        if not _running(alloc, task):
            raise NomadError(409, f"task {go_quote(task)} is not running.")
        return task
    for name in task_names(alloc):
        if _running(alloc, name):
            return name
    raise NomadError(409, "no task of the allocation is running: alloc/ is read inside one")


def _where(alloc: StoredAllocation, location: allocfs.Location) -> Where:
    container = _container(alloc, location.task)
    return Where(alloc.namespace, alloc.object_name, container, location.root)


def _error(exc: FsError, location: allocfs.Location, container: str) -> NomadError:
    if exc.code == NOT_FOUND:
        return NomadError(404, str(allocfs.NoSuchPathError(location.path)))
    if exc.code == ESCAPES:
        return NomadError(400, allocfs.ESCAPES)
    if exc.code == NOT_A_DIRECTORY:
        return NomadError(400, f"readdir {location.path}: not a directory")
    if exc.code == IS_A_DIRECTORY:
        return NomadError(400, f"file {go_quote(location.path)} is a directory")
    if exc.code == NO_COMMAND:  # not a fault of ours: this image cannot do it
        return NomadError(
            501,
            f"the container of task {go_quote(container)} lacks a tool alloc fs runs "
            f"(sh, realpath, stat, head, tail, cat): {exc.message}",
        )
    if exc.not_running:  # the container stopped meanwhile
        return NomadError(409, f"task {go_quote(container)} is not running.")
    return NomadError(500, f"cannot read files of task {go_quote(container)}: {exc.message}")


def _created(alloc: StoredAllocation) -> int:
    """The made-up directories' modification time: the allocation's creation, in seconds."""
    return int(alloc.wire.get("CreateTime") or 0) // 1_000_000_000


# --- The endpoints -----------------------------------------------------------------------------


async def stat(request: web.Request) -> Answer:
    path = _path(request, required=True)
    parse_query(request.query)  # its 400s
    alloc, location = await _located(request, path)
    if location.kind != "file":
        info = allocfs.virtual_dir(location.name, _created(alloc))
        return Answer({**info, "ContentType": allocfs.OCTET_STREAM})
    where = _where(alloc, location)
    try:
        found = await _files(request).stat(where, location.container_path)
    except FsError as exc:
        raise _error(exc, location, where.container) from exc
    info = allocfs.file_info(
        location.name,
        found.mode,
        found.size,
        found.mtime,
        content_type=allocfs.content_type(location.path, found.head),
    )
    return Answer(info)


async def list_directory(request: web.Request) -> Answer:
    path = _path(request, required=False)
    parse_query(request.query)  # its 400s
    alloc, location = await _located(request, path)
    files = _files(request)
    entries: list[dict[str, Any]]
    if location.kind == "root":
        created = _created(alloc)
        names = [allocfs.ALLOC, *task_names(alloc)]
        entries = [allocfs.virtual_dir(name, created) for name in names]
    elif location.kind == "task":
        entries = await _task_directory(files, alloc, location)
    else:
        where = _where(alloc, location)
        try:
            found = await files.list(where, location.container_path)
        except FsError as exc:
            raise _error(exc, location, where.container) from exc
        entries = [allocfs.file_info(e.name, e.mode, e.size, e.mtime) for e in found]
    return Answer(entries)


async def _task_directory(
    files: PodFiles, alloc: StoredAllocation, location: allocfs.Location
) -> list[dict[str, Any]]:
    """`local`, `secrets` and `tmp` as the task's container has them (absent ones left out)."""
    container = _container(alloc, location.task)

    async def one(name: str, directory: str) -> dict[str, Any] | None:
        where = Where(alloc.namespace, alloc.object_name, container, directory)
        try:
            found = await files.stat(where, directory)
        except FsError as exc:
            if exc.code == NOT_FOUND:
                return None
            raise _error(exc, location, container) from exc
        return allocfs.file_info(name, found.mode, found.size, found.mtime)

    found = await asyncio.gather(*(one(n, d) for n, d in allocfs.TASK_DIRS.items()))
    return [entry for entry in found if entry is not None]


def _readable(location: allocfs.Location) -> None:
    if location.kind != "file":
        raise NomadError(400, f"file {go_quote(location.path or '/')} is a directory")
    if location.secret:
        raise NomadError(403, f"Reading secret file prohibited: {location.path}")


async def cat(request: web.Request) -> web.StreamResponse:
    path = _path(request, required=True)
    alloc, location = await _located(request, path)
    return await _send_bytes(request, alloc, location, offset=0, limit=0)


async def read_at(request: web.Request) -> web.StreamResponse:
    path = _path(request, required=True)
    offset = _offset(request, required=True)
    limit = _int(request, "limit", required=False)
    alloc, location = await _located(request, path)
    return await _send_bytes(request, alloc, location, offset=offset, limit=max(limit, 0))


async def _send_bytes(
    request: web.Request,
    alloc: StoredAllocation,
    location: allocfs.Location,
    *,
    offset: int,
    limit: int,
) -> web.StreamResponse:
    _readable(location)
    where = _where(alloc, location)
    files = _files(request)
    try:
        async with files.read(where, location.container_path, offset=offset, limit=limit) as (
            _,
            data,
        ):
            first = await anext(data, b"")
            response = web.StreamResponse()
            sniffed = allocfs.content_type("", first)
            text = sniffed.startswith("text/plain")
            response.content_type = "text/plain" if text else allocfs.OCTET_STREAM
            if text:
                response.charset = "utf-8"
            response.headers["X-Content-Type-Options"] = "nosniff"
            await response.prepare(request)
            with contextlib.suppress(ConnectionError, FsError):  # a failure now ends the body
                if first:
                    await response.write(first)
                async for chunk in data:
                    await response.write(chunk)
                await response.write_eof()
            return response
    except FsError as exc:
        raise _error(exc, location, where.container) from exc


async def stream(request: web.Request) -> web.StreamResponse:
    path = _path(request, required=True)
    follow = True
    if raw := request.query.get("follow", ""):
        try:
            follow = go_parse_bool(raw)
        except ValueError:
            raise NomadError(
                400,
                f"failed to parse follow field to boolean: "
                f"strconv.ParseBool: parsing {go_quote(raw)}: invalid syntax",
            ) from None
    offset = _offset(request, required=False)
    origin = request.query.get("origin", "") or "start"
    if origin not in ("start", "end"):
        raise NomadError(400, BAD_ORIGIN)
    alloc, location = await _located(request, path)
    _readable(location)
    where = _where(alloc, location)
    files = _files(request)
    try:
        async with files.read(
            where, location.container_path, offset=offset, origin=origin, follow=follow
        ) as (start, data):
            response = web.StreamResponse()
            response.content_type = "application/json"
            await response.prepare(request)
            encoder = _Encoder(path, start)
            with contextlib.suppress(ConnectionError, FsError):
                await pump(
                    data,
                    response.write,
                    encoder,
                    heartbeat=follow,
                    stopping=context(request).streams.stopping,
                    follow=follow,
                )
            with contextlib.suppress(ConnectionError):
                await response.write_eof()
            return response
    except FsError as exc:
        raise _error(exc, location, where.container) from exc


class _Encoder:
    """Frames of data that follows on from the last; `end` is the offset past it."""

    def __init__(self, file: str, start: int) -> None:
        self.file = file
        self.end = start

    def __call__(self, data: bytes) -> bytes:
        self.end += len(data)
        return encode_frames(data, end_offset=self.end, file=self.file)


ENDPOINTS = [
    Endpoint(f"/v1/client/fs/stat/{ALLOC_ID}", {"GET": stat}),
    Endpoint(f"/v1/client/fs/ls/{ALLOC_ID}", {"GET": list_directory}),
    Endpoint(f"/v1/client/fs/cat/{ALLOC_ID}", {"GET": cat}),
    Endpoint(f"/v1/client/fs/readat/{ALLOC_ID}", {"GET": read_at}),
    Endpoint(f"/v1/client/fs/stream/{ALLOC_ID}", {"GET": stream}),
]
