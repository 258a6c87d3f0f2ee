"""Property tests of exec frames: any client frames end in a close with a reason.

A client may send anything over the exec WebSocket. Decoding a frame must give a frame or a
FrameError (never another exception), and a whole session, driven over a real WebSocket
against a stand-in for the Kubernetes stream, must end: with the exit frame and a normal
close once stdin closes, or with a 1008 close whose reason names the bad frame, never stuck
and never with the 1011 of an unhandled exception.
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
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from allocbridge.api.context import PodClients
from allocbridge.api.exec import POLICY_VIOLATION, parse_command
from allocbridge.api.server import create_app
from allocbridge.auth import AllowAll
from allocbridge.cluster.podexec import Channel, Event, Exited, Output, PodExecutor
from allocbridge.lifecycle import Lifecycle
from allocbridge.model.execframes import (
    ClientFrame,
    FrameError,
    decode_client_frame,
    parse_handshake,
)
from allocbridge.telemetry import Metrics

RUNNING = SAMPLE[0][0]  # a running allocation with the task "server"
#: Seconds a session may take; far beyond what one needs, so only a stuck one reaches it.
STUCK = 20.0

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner),
    max_leaves=6,
)
B64 = st.binary(max_size=40).map(lambda data: base64.b64encode(data).decode())
FRAME_SHAPES = st.fixed_dictionaries(
    {},
    optional={
        "stdin": st.one_of(
            st.fixed_dictionaries(
                {}, optional={"data": st.one_of(B64, JSON_VALUES), "close": JSON_VALUES}
            ),
            JSON_VALUES,
        ),
        "tty_size": st.one_of(
            st.fixed_dictionaries(
                {},
                optional={
                    "height": st.integers(-5, 70000) | JSON_VALUES,
                    "width": st.integers(-5, 70000) | JSON_VALUES,
                },
            ),
            JSON_VALUES,
        ),
    },
)
MESSAGES: st.SearchStrategy[str | bytes] = st.one_of(
    FRAME_SHAPES.map(json.dumps),
    JSON_VALUES.map(json.dumps),
    st.text(max_size=30),
    st.binary(max_size=30),
)


# -- decoding ----------------------------------------------------------------------------------


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(MESSAGES)
def test_any_message_decodes_or_is_a_frame_error(message: str | bytes) -> None:
    try:
        frame = decode_client_frame(message)
    except FrameError as exc:
        assert str(exc).startswith("invalid exec frame: ")
    else:
        assert isinstance(frame, ClientFrame)


@settings(max_examples=500, deadline=None)
@given(MESSAGES, st.none() | st.text(max_size=5))
def test_any_handshake_gives_a_token_or_a_frame_error(
    message: str | bytes, header: str | None
) -> None:
    try:
        token = parse_handshake(message, header)
    except FrameError as exc:
        assert str(exc)
    else:
        assert token is None or isinstance(token, str)


@settings(max_examples=500, deadline=None)
@given(st.none() | st.text(max_size=20) | JSON_VALUES.map(json.dumps))
def test_any_command_parameter_is_a_command_or_a_frame_error(raw: str | None) -> None:
    try:
        command = parse_command(raw)
    except FrameError as exc:
        assert str(exc)
    else:
        assert command and all(isinstance(part, str) for part in command)


# -- whole sessions ----------------------------------------------------------------------------


class CatStream:
    """`cat` in a container: echoes stdin to stdout and exits 0 when stdin closes. Like the
    real stream, it hands its events to the relay's listener on later turns of the loop."""

    protocol = "v5.channel.k8s.io"
    asked_at = 0.0
    first_output_at = None
    write_buffer_size = 0

    def __init__(self) -> None:
        self.listener: Any = None
        self.pending: list[Event] = []
        self.exited = False

    def _emit(self, event: Event) -> None:
        if self.listener is None:
            self.pending.append(event)
        else:
            asyncio.get_running_loop().call_soon(self._deliver, event)

    def _deliver(self, event: Event) -> None:
        if isinstance(event, Output):  # as the real stream hands output on
            self.listener.on_output(event.channel, event.data)
        else:
            self.listener.on_event(event)
        if isinstance(event, Exited):
            self.exited = True
            self.listener.on_end(None)

    def write_stdin(self, data: bytes) -> bool:
        self._emit(Output(Channel.STDOUT, data))
        return False  # never more than HIGH_WATER waiting

    def write_close_stdin(self) -> bool:
        self._emit(Exited(0))
        return True

    def write_resize(self, width: int, height: int) -> None:
        pass

    async def drain(self) -> None:
        pass

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def listen(self, listener: Any) -> None:
        self.listener = listener
        for event in self.pending:
            self._emit(event)
        self.pending = []

    async def close(self) -> None:
        pass


class CatExecutor:
    @asynccontextmanager
    async def open(
        self, namespace: str, pod: str, container: str, command: Sequence[str], *, tty: bool
    ) -> AsyncIterator[CatStream]:
        yield CatStream()

    async def run(
        self, namespace: str, pod: str, container: str, command: Sequence[str]
    ) -> tuple[int, bytes]:
        """The search for what a session that ended early left running: nothing."""
        return 0, b"uptime 1.00\nself 2\n"

    async def close(self) -> None:
        pass


async def run_session(messages: list[str | bytes], *, handshake: bool) -> dict[str, Any]:
    """Send `messages`, then close stdin; read until the socket closes."""
    app = create_app(
        Metrics(),
        store=sample_store(),
        authorizer=AllowAll(),
        pods=PodClients(executor=cast(PodExecutor, CatExecutor())),
        lifecycle=Lifecycle(),
    )
    client: TestClient[Any, Any] = TestClient(TestServer(app))
    await client.start_server()
    try:
        query = {"task": "server", "command": '["cat"]', "ws_handshake": str(handshake).lower()}
        ws = await client.ws_connect(f"/v1/client/allocation/{RUNNING}/exec", params=query)
        if handshake:
            await ws.send_str('{"version":1,"auth_token":""}')
        for message in messages:
            if ws.closed:
                break
            if isinstance(message, bytes):
                await ws.send_bytes(message)
            else:
                await ws.send_str(message)
        if not ws.closed:
            await ws.send_str('{"stdin":{"close":true}}')
        frames: list[Any] = []
        while True:
            reply = await ws.receive()
            if reply.type is aiohttp.WSMsgType.TEXT:
                frames.append(json.loads(reply.data))
            elif reply.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED):
                break
        return {"code": ws.close_code, "reason": reply.extra or "", "frames": frames}
    finally:
        await client.close()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(MESSAGES, max_size=6), st.booleans())
def test_any_frame_sequence_ends_in_a_close_with_a_reason(
    messages: list[str | bytes], handshake: bool
) -> None:
    outcome = asyncio.run(asyncio.wait_for(run_session(messages, handshake=handshake), STUCK))
    assert outcome["code"] in (aiohttp.WSCloseCode.OK, POLICY_VIOLATION), outcome  # never 1011
    first_bad, reasons, exits_first = None, [], False
    for message in messages:
        try:
            frame = decode_client_frame(message)
        except FrameError as exc:
            reasons.append(str(exc))
            first_bad = first_bad or str(exc)
        else:
            exits_first = exits_first or (frame.stdin_close and first_bad is None)
    if outcome["code"] == POLICY_VIOLATION:
        # The first bad frame, or, when stdin closed before it, one racing the exit.
        named = outcome["reason"].split("...")[0]  # a long reason keeps its start
        candidates = reasons if exits_first else [first_bad]
        assert named and any(r and r.startswith(named) for r in candidates), outcome
    else:
        assert first_bad is None or exits_first, outcome
        assert outcome["frames"][-1] == {"exited": True, "result": {"exit_code": 0}}
