"""`/v1/client/fs/logs`: query parsing, Nomad's frames, offsets and the batching pump.

The Kubernetes side is tests/cluster/test_alloc_logs.py (through the real API server); here a reader
that serves fixed bytes stands in for it, to check what the endpoint makes of a log.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from allocations_fixture import SAMPLE, sample_store, stored
from authorizers import GrantsOnly
from hypothesis import given
from hypothesis import strategies as st
from multidict import MultiDict

from allocbridge.api.context import PodClients
from allocbridge.api.errors import NomadError
from allocbridge.api.logs import (
    LogQuery,
    go_parse_int64,
    parse_log_query,
    pump,
)
from allocbridge.api.server import create_app
from allocbridge.auth import AllowAll
from allocbridge.cluster.errors import KubernetesError, from_status
from allocbridge.cluster.podlogs import ContainerWaitingError, PodLogReader, Stream
from allocbridge.model.streamframes import (
    MAX_FRAME,
    LogWindow,
    Tail,
    encode_frame,
    encode_frames,
    log_file,
    start_at,
)
from allocbridge.store import AllocationStore
from allocbridge.telemetry import Metrics

RUNNING = SAMPLE[0][0]  # default namespace, task "server", running


def parse(**params: str) -> LogQuery:
    return parse_log_query(MultiDict(params))


def error_of(**params: str) -> str:
    with pytest.raises(NomadError) as caught:
        parse(**params)
    assert caught.value.status == 400
    return caught.value.message


def decode_frames(body: bytes) -> list[dict[str, Any]]:
    """Frames written back to back, read as Go's json.Decoder reads them."""
    decoder = json.JSONDecoder()
    text, at, frames = body.decode(), 0, []
    while at < len(text):
        frame, at = decoder.raw_decode(text, at)
        frames.append(frame)
    return frames


def data_of(frames: list[dict[str, Any]]) -> bytes:
    return b"".join(base64.b64decode(f["Data"]) for f in frames if "Data" in f)


# -- the query ---------------------------------------------------------------------------------


def test_query_errors_in_nomads_order_with_its_texts() -> None:
    assert error_of() == "must provide task name"
    assert error_of(task="t", follow="yes", type="x") == (
        'failed to parse follow field to boolean: strconv.ParseBool: parsing "yes": invalid syntax'
    )
    assert error_of(task="t", plain="2", type="x").startswith(
        "failed to parse plain field to boolean: "
    )
    assert error_of(task="t") == "must provide log type (stdout/stderr)"
    assert error_of(task="t", type="both") == "must provide log type (stdout/stderr)"
    assert error_of(task="t", type="stdout", offset="1k", origin="x") == (
        'error parsing offset: strconv.ParseInt: parsing "1k": invalid syntax'
    )
    assert error_of(task="t", type="stdout", offset="9" * 20) == (
        f'error parsing offset: strconv.ParseInt: parsing "{"9" * 20}": value out of range'
    )
    assert error_of(task="t", type="stdout", origin="middle") == "origin must be start or end"


def test_query_defaults_and_values() -> None:
    assert parse(task="t", type="stderr") == LogQuery("t", "stderr")
    options = parse(task="t", type="stdout", follow="true", plain="1", offset="-5", origin="end")
    assert options == LogQuery("t", "stdout", True, True, -5, "end")


def test_go_parse_int64_edges() -> None:
    assert go_parse_int64("+12") == 12
    assert go_parse_int64(str(2**63 - 1)) == 2**63 - 1
    for bad in ("", "-", "1_000", "0x10", " 1", "\u0661"):
        with pytest.raises(ValueError, match="invalid syntax"):
            go_parse_int64(bad)


# -- frames and offsets ------------------------------------------------------------------------


def test_frames_leave_out_empty_fields() -> None:
    assert encode_frame(offset=0) == b"{}"
    frame = json.loads(encode_frame(offset=5, data=b"hello", file="alloc/logs/web.stdout.0"))
    assert frame == {"Offset": 5, "Data": "aGVsbG8=", "File": "alloc/logs/web.stdout.0"}
    assert json.loads(encode_frame(offset=7, event="file truncated")) == {
        "Offset": 7,
        "FileEvent": "file truncated",
    }
    assert log_file("web", "stderr") == "alloc/logs/web.stderr.0"


def test_large_data_is_cut_into_64k_frames_with_running_offsets() -> None:
    data = bytes(range(256)) * 1024  # 256 KiB + change
    data += b"tail"
    frames = decode_frames(encode_frames(data, end_offset=1000 + len(data), file="f"))
    assert all(len(base64.b64decode(f["Data"])) <= MAX_FRAME for f in frames)
    assert len(frames) == 5
    assert data_of(frames) == data
    assert frames[0]["Offset"] == 1000 + MAX_FRAME
    assert frames[-1]["Offset"] == 1000 + len(data)


@given(
    data=st.binary(max_size=300),
    start=st.integers(0, 2**40),
    size=st.integers(1, 100),
    file=st.sampled_from(["", "alloc/logs/web.stdout.0", 'a "quoted"\\path']),
)
def test_a_batch_of_frames_is_each_piece_s_frame_back_to_back(
    data: bytes, start: int, size: int, file: str
) -> None:
    expected = b"".join(
        encode_frame(
            offset=start + at + len(data[at : at + size]), data=data[at : at + size], file=file
        )
        for at in range(0, len(data), size)
    )
    assert encode_frames(data, end_offset=start + len(data), file=file, size=size) == expected


def test_origin_and_offset_select_the_start() -> None:
    assert start_at("start", 10) == 10
    assert start_at("start", -3) == 0
    assert start_at("end", 4, 10) == 6
    assert start_at("end", 40, 10) == 0
    assert start_at("end", 0, 10) == 10
    with pytest.raises(ValueError):
        start_at("end", 1)


def test_window_skips_across_chunks_and_tail_keeps_the_end() -> None:
    window = LogWindow(5)
    assert [window.feed(c) for c in (b"abc", b"defg", b"hij")] == [b"", b"fg", b"hij"]
    assert window.position == 10
    tail = Tail(4)
    for chunk in (b"abc", b"defg", b"h"):
        tail.feed(chunk)
    assert (tail.data, tail.size) == (b"efgh", 8)
    nothing = Tail(0)
    nothing.feed(b"abc")
    assert (nothing.data, nothing.size) == (b"", 3)


# -- the pump ----------------------------------------------------------------------------------


async def test_pump_batches_and_ends_at_the_end_of_the_log() -> None:
    async def chunks() -> AsyncIterator[bytes]:
        for part in (b"one ", b"two ", b"three"):
            yield part

    written: list[bytes] = []

    async def write(data: bytes) -> None:
        written.append(data)

    await pump(
        chunks(),
        write,
        lambda d: d.upper(),
        heartbeat=False,
        stopping=asyncio.Event(),
        follow=False,
        batch=60.0,  # nothing is flushed by time: only the end of the log flushes
        linger=60.0,
    )
    assert written == [b"ONE TWO THREE"]


async def test_pump_sends_heartbeats_while_idle_and_stops_on_shutdown() -> None:
    release = asyncio.Event()
    beat = asyncio.Event()
    second = asyncio.Event()
    stopping = asyncio.Event()
    written: list[bytes] = []

    async def chunks() -> AsyncIterator[bytes]:
        yield b"first"
        await release.wait()
        yield b"second"
        await asyncio.Event().wait()  # a followed log that goes quiet

    async def write(data: bytes) -> None:
        written.append(data)
        if data == b"{}":
            beat.set()
        if data == b"[second]":
            second.set()

    task = asyncio.create_task(
        pump(
            chunks(),
            write,
            lambda d: b"[" + d + b"]",
            heartbeat=True,
            stopping=stopping,
            follow=True,
            batch=0.01,
            idle=0.01,
        )
    )
    await beat.wait()
    release.set()
    await second.wait()
    stopping.set()
    await task  # ends although the log never does
    assert written[0] == b"[first]"
    assert written.index(b"{}") < written.index(b"[second]")


async def test_pump_sends_what_arrived_once_the_log_pauses_not_at_the_batch_windows_end() -> None:
    """A followed log that has been read to its current end goes out at once (after the short
    linger), not when the 200 ms batch window would close: what was read together is one frame."""
    sent = asyncio.Event()
    stopping = asyncio.Event()
    written: list[bytes] = []

    async def chunks() -> AsyncIterator[bytes]:
        for part in (b"one ", b"two ", b"three"):
            yield part
        await asyncio.Event().wait()  # the log goes quiet and stays open

    async def write(data: bytes) -> None:
        written.append(data)
        sent.set()

    task = asyncio.create_task(
        pump(
            chunks(),
            write,
            lambda d: b"[" + d + b"]",
            heartbeat=True,
            stopping=stopping,
            follow=True,
            batch=3600.0,
            idle=3600.0,
        )
    )
    await asyncio.wait_for(sent.wait(), 60)  # a batch-window flush would take an hour
    stopping.set()
    await task
    assert written == [b"[one two three]"]


async def test_pump_sends_whole_frames_at_once_and_keeps_the_rest_for_the_next_batch() -> None:
    big = b"x" * MAX_FRAME
    written: list[bytes] = []
    release = asyncio.Event()

    async def chunks() -> AsyncIterator[bytes]:
        yield big[:100]
        yield big[100:] + b"rest"
        await release.wait()

    async def write(data: bytes) -> None:
        written.append(data)
        release.set()

    await pump(
        chunks(),
        write,
        lambda d: d,
        heartbeat=False,
        stopping=asyncio.Event(),
        follow=False,
        batch=3600.0,
        linger=3600.0,
    )
    assert written == [big, b"rest"]


# -- the endpoint, with a stand-in reader ------------------------------------------------------


class FixedLog(PodLogReader):
    """Serves `log` (both streams, or split), or fails with `error`; records what it opened."""

    def __init__(
        self, log: bytes = b"", *, split: bool = False, error: KubernetesError | None = None
    ) -> None:
        super().__init__(lambda: None)
        self.log = log
        self.split = split
        self.error = error
        self.opened: list[tuple[str, str, str, bool, Stream | None]] = []

    @asynccontextmanager
    async def open(
        self, namespace: str, pod: str, container: str, *, follow: bool, stream: Stream | None
    ) -> AsyncIterator[Any]:
        self.opened.append((namespace, pod, container, follow, stream))
        if self.error is not None:
            raise self.error
        log = self.log

        class Opened:
            split = self.split

            async def chunks(self) -> AsyncIterator[bytes]:
                for at in range(0, len(log), 3):
                    yield log[at : at + 3]

        yield Opened()


async def serve(
    reader: PodLogReader | None, store: AllocationStore | None = None, authorizer: Any = None
) -> TestClient[Any, Any]:
    app = create_app(
        Metrics(),
        store=store or sample_store(),
        authorizer=authorizer or AllowAll(),
        sync_timeout=1.0,
        pods=PodClients(logs=reader),
    )
    client: TestClient[Any, Any] = TestClient(TestServer(app))
    await client.start_server()
    return client


async def get(client: TestClient[Any, Any], query: str, alloc: str = RUNNING) -> tuple[int, bytes]:
    response = await client.get(f"/v1/client/fs/logs/{alloc}?{query}")
    return response.status, await response.read()


async def test_log_frames_with_origin_and_offset() -> None:
    reader = FixedLog(b"0123456789")
    client = await serve(reader)
    try:
        status, body = await get(client, "task=server&type=stdout")
        assert status == 200
        frames = decode_frames(body)
        assert data_of(frames) == b"0123456789"
        assert frames[-1]["Offset"] == 10
        assert {f["File"] for f in frames} == {"alloc/logs/server.stdout.0"}
        _, body = await get(client, "task=server&type=stdout&offset=4")
        assert data_of(decode_frames(body)) == b"456789"
        _, body = await get(client, "task=server&type=stdout&origin=end&offset=3")
        frames = decode_frames(body)
        assert (data_of(frames), frames[-1]["Offset"]) == (b"789", 10)
        status, body = await get(client, "task=server&type=stdout&plain=true&offset=8")
        assert (status, body) == (200, b"89")
        _, body = await get(client, "task=server&type=stdout&plain=true&origin=end&offset=2")
        assert body == b"89"
        namespace, _pod, container, follow, stream = reader.opened[0]
        assert (namespace, container, follow, stream) == ("default", "server", False, "Stdout")
    finally:
        await client.close()


async def test_stderr_is_empty_where_streams_are_not_split() -> None:
    client = await serve(FixedLog(b"mixed output"))
    try:
        assert await get(client, "task=server&type=stderr") == (200, b"")
        _, body = await get(client, "task=server&type=stdout&plain=1")
        assert body == b"mixed output"
    finally:
        await client.close()
    client = await serve(FixedLog(b"only errors", split=True))
    try:
        _, body = await get(client, "task=server&type=stderr&plain=1")
        assert body == b"only errors"
    finally:
        await client.close()


async def test_log_errors() -> None:
    store = sample_store()
    pending = "0badc0de-0000-4000-8000-000000000001"
    store.upsert(stored(pending, create_index=130, client_status="pending"))
    wire_state = store.get(pending)
    assert wire_state is not None
    wire_state.wire["TaskStates"]["server"].update(State="pending", StartedAt=None)
    client = await serve(FixedLog(b"x"), store)
    try:
        unknown = "00000000-0000-4000-8000-000000000000"
        assert await get(client, "task=server&type=stdout", unknown) == (
            404,
            f'Unknown allocation "{unknown}"'.encode(),
        )
        assert await get(client, "task=nope&type=stdout") == (400, b'unknown task name "nope"')
        assert await get(client, "type=stdout") == (400, b"must provide task name")
        assert await get(client, "task=server&type=stdout", pending) == (
            404,
            b'task "server" not started yet. No logs available',
        )
    finally:
        await client.close()
    waiting = ContainerWaitingError('container "server" in pod "p" is waiting to start')
    refused = from_status(403, "forbidden")
    for error, status in ((waiting, 404), (refused, 500), (from_status(500, "boom"), 503)):
        client = await serve(FixedLog(error=error))
        try:
            found, body = await get(client, "task=server&type=stdout")
            assert found == status, body
        finally:
            await client.close()
    client = await serve(None)
    try:
        assert (await get(client, "task=server&type=stdout"))[0] == 503
    finally:
        await client.close()


@pytest.mark.parametrize(
    ("capability", "status"), [("read-logs", 200), ("read-fs", 200), ("read-job", 403)]
)
async def test_logs_need_read_logs_or_read_fs(capability: str, status: int) -> None:
    client = await serve(FixedLog(b"x"), authorizer=GrantsOnly(capability))
    try:
        assert (await get(client, "task=server&type=stdout"))[0] == status
    finally:
        await client.close()


@given(
    offset=st.integers(min_value=0, max_value=2**62),
    data=st.binary(max_size=300),
    file=st.text(max_size=20),
    event=st.text(max_size=20),
)
def test_a_frame_is_the_json_encoders_compact_object(
    offset: int, data: bytes, file: str, event: str
) -> None:
    """Written by hand, a frame is byte for byte what `json.dumps` writes of the same fields."""
    fields: dict[str, object] = {}
    if offset:
        fields["Offset"] = offset
    if data:
        fields["Data"] = base64.b64encode(data).decode("ascii")
    if file:
        fields["File"] = file
    if event:
        fields["FileEvent"] = event
    expected = json.dumps(fields, separators=(",", ":")).encode()
    assert encode_frame(offset=offset, data=data, file=file, event=event) == expected
