"""A client that stops reading exec output stops the pod's stream, not the operator's memory.

The relay writes output straight to the client's socket; once more than `HIGH_WATER` bytes
wait there it stops reading the Kubernetes stream (`pause_reading`) until the client has
taken them. A stand-in stream produces output for as long as it is not paused; the client
(aiohttp's WebSocket client over a real socket) reads nothing for a while, then everything.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any, cast

import aiohttp
from aiohttp.test_utils import TestClient, TestServer
from allocations_fixture import SAMPLE, sample_store

from allocbridge.api.context import PodClients
from allocbridge.api.server import create_app
from allocbridge.auth import AllowAll
from allocbridge.cluster.podexec import HIGH_WATER, Channel, Exited, PodExecutor
from allocbridge.lifecycle import Lifecycle
from allocbridge.telemetry import Metrics

RUNNING = SAMPLE[0][0]
CHUNK = 32 * 1024
TOTAL = 64 * 1024 * 1024  # far more than the socket buffers on both ends hold


class FirehoseStream:
    """Output in CHUNKs, one per turn of the loop while not paused, TOTAL bytes in all, each
    chunk's bytes its index so the client can check the order; then exit 0."""

    protocol = "v5.channel.k8s.io"
    asked_at = 0.0
    first_output_at = None
    write_buffer_size = 0

    def __init__(self) -> None:
        self.listener: Any = None
        self.paused = False
        self.pauses = 0
        self.sent = 0
        self.exited = False

    def listen(self, listener: Any) -> None:
        self.listener = listener
        asyncio.get_running_loop().call_soon(self._produce)

    def _produce(self) -> None:
        if self.paused or self.exited:
            return
        if self.sent >= TOTAL:
            self.exited = True
            self.listener.on_event(Exited(0))
            self.listener.on_end(None)
            return
        index = self.sent // CHUNK
        self.sent += CHUNK
        self.listener.on_output(Channel.STDOUT, bytes((index % 256,)) * CHUNK)
        asyncio.get_running_loop().call_soon(self._produce)

    def pause_reading(self) -> None:
        self.paused = True
        self.pauses += 1

    def resume_reading(self) -> None:
        if self.paused:
            self.paused = False
            asyncio.get_running_loop().call_soon(self._produce)

    def write_stdin(self, data: bytes) -> bool:
        return False  # never more than HIGH_WATER waiting

    def write_close_stdin(self) -> bool:
        return True

    def write_resize(self, width: int, height: int) -> None:
        pass

    async def close(self) -> None:
        pass


class FirehoseExecutor:
    def __init__(self) -> None:
        self.stream = FirehoseStream()

    @asynccontextmanager
    async def open(
        self, namespace: str, pod: str, container: str, command: Sequence[str], *, tty: bool
    ) -> AsyncIterator[FirehoseStream]:
        yield self.stream

    async def close(self) -> None:
        pass


async def test_a_client_that_does_not_read_pauses_the_stream_and_gets_everything_later() -> None:
    executor = FirehoseExecutor()
    app = create_app(
        Metrics(),
        store=sample_store(),
        authorizer=AllowAll(),
        pods=PodClients(executor=cast(PodExecutor, executor)),
        lifecycle=Lifecycle(),
    )
    client: TestClient[Any, Any] = TestClient(TestServer(app))
    await client.start_server()
    try:
        query = {"task": "server", "command": '["yes"]'}
        ws = await client.ws_connect(
            f"/v1/client/allocation/{RUNNING}/exec", params=query, max_msg_size=0
        )
        stream = executor.stream
        assert HIGH_WATER * 8 <= TOTAL  # so a stream that was not paused would be far past it
        await asyncio.sleep(1.0)  # reading nothing
        assert stream.paused
        held = stream.sent
        assert held < TOTAL / 4, "the relay kept reading the stream for a client that did not"
        await asyncio.sleep(0.5)
        assert stream.sent == held, "the stream was read on while the client read nothing"

        received = 0
        exit_code = None
        while True:
            reply = await asyncio.wait_for(ws.receive(), 30)
            if reply.type is not aiohttp.WSMsgType.TEXT:
                break
            frame = json.loads(reply.data)
            if "stdout" in frame and "data" in frame["stdout"]:
                data = base64.b64decode(frame["stdout"]["data"])
                assert data == bytes(((received // CHUNK) % 256,)) * len(data)
                received += len(data)
            elif frame.get("exited"):
                exit_code = frame["result"]["exit_code"]
        assert received == TOTAL
        assert exit_code == 0
        assert stream.pauses >= 1
        assert ws.close_code == aiohttp.WSCloseCode.OK
    finally:
        await client.close()
