"""The interactive exec section's parts: Nomad's frames as the bench writes and reads them,
the echo it waits for, the warm-up it drops, the rows it judges against kubectl, and its
terminal sessions and forwarder as real processes."""

from __future__ import annotations

import asyncio
import base64
import json
import sys
import urllib.parse
from pathlib import Path

import pytest
from benchmarks import golang
from benchmarks.harness import BenchError
from benchmarks.interactive import (
    COLUMNS,
    GOAL,
    ROWS,
    SECTION,
    Received,
    Side,
    TerminalSession,
    counted,
    forwarder,
    keys_per_session,
    parse_server_frame,
    rows,
    stdin_frame,
    tty_size_frame,
    turn_order,
    wait_for,
)


def test_client_frames_are_nomads() -> None:
    assert json.loads(stdin_frame(b"x")) == {"stdin": {"data": base64.b64encode(b"x").decode()}}
    assert json.loads(stdin_frame(b"\x7f")) == {"stdin": {"data": "fw=="}}
    assert json.loads(tty_size_frame(24, 80)) == {"tty_size": {"height": 24, "width": 80}}


def test_output_frames_are_decoded() -> None:
    frame = parse_server_frame(json.dumps({"stdout": {"data": base64.b64encode(b"/ # ").decode()}}))
    assert frame.output == b"/ # "
    assert not frame.exited
    assert parse_server_frame('{"stderr":{"data":"eA=="}}').output == b"x"


def test_a_heartbeat_carries_nothing() -> None:
    frame = parse_server_frame("{}")
    assert (frame.output, frame.exited, frame.exit_code) == (b"", False, None)


def test_the_exit_frame_carries_the_code() -> None:
    frame = parse_server_frame('{"exited":true,"result":{"exit_code":130}}')
    assert (frame.exited, frame.exit_code) == (True, 130)
    assert parse_server_frame('{"exited":true,"result":{}}').exit_code == 0  # Nomad omits 0


def test_a_close_frame_without_data_is_no_output() -> None:
    assert parse_server_frame('{"stdout":{"close":true}}').output == b""


@pytest.mark.parametrize("text", ["not json", "[1, 2]"])
def test_a_frame_that_is_not_an_object_is_named(text: str) -> None:
    with pytest.raises(BenchError, match="exec frame"):
        parse_server_frame(text)


def test_an_echo_is_taken_through_its_marker_only() -> None:
    received = Received()
    received.add(b"\x1b[6")
    assert not received.take_through(b"\x08\x1b[J")
    received.add(b"nx\x08")
    assert received.take_through(b"x")
    assert bytes(received.pending) == b"\x08"
    received.add(b"\x1b[J")
    assert received.take_through(b"\x08\x1b[J")
    assert bytes(received.pending) == b""
    assert received.total == 9  # what arrived, consumed or not


def test_clearing_keeps_the_count() -> None:
    received = Received()
    received.add(b"banner\r\n/ # ")
    received.clear()
    assert (bytes(received.pending), received.total) == (b"", 12)


def test_warm_up_keystrokes_are_dropped_from_the_front() -> None:
    assert counted([9.0, 8.0, 0.1, 0.2], 2) == [0.1, 0.2]
    assert counted([0.1], 2) == []


@pytest.mark.parametrize(
    ("keys", "sessions", "each"), [(200, 10, 20), (201, 10, 21), (5, 10, 1), (1, 1, 1)]
)
def test_sessions_share_the_keystrokes(keys: int, sessions: int, each: int) -> None:
    assert keys_per_session(keys, sessions) == each
    assert each * sessions >= keys


def test_rows_judge_the_ratio_to_kubectl() -> None:
    ours = Side(setups=[0.30, 0.40, 0.50], keys=[0.002] * 99 + [0.010])
    peer = Side(setups=[0.40, 0.45, 0.50], keys=[0.002] * 100)
    found = {row.name: row for row in rows(ours, peer, sessions=3, per_session=34)}
    assert {row.section for row in found.values()} == {SECTION}
    p50 = found["keystroke echo round trip, p50"]
    assert p50.value == pytest.approx(2.0)
    assert p50.peer_value == pytest.approx(2.0)
    assert p50.unit == "ms"
    assert p50.result == "met"
    p99 = found["keystroke echo round trip, p99"]
    assert p99.value == pytest.approx(2.0 + 0.01 * 8.0)  # 99th of 100: interpolated
    assert p99.result == "met"
    setup = found["session setup to the first output byte, median"]
    assert setup.value == pytest.approx(400.0)
    assert setup.peer_value == pytest.approx(450.0)
    assert setup.result == "met"
    assert "100 keystrokes per side" in p50.note
    assert "on a terminal, as kubectl" in p50.note
    assert "each from its client's process spawn" in setup.note


def test_a_ratio_above_the_goal_is_missed() -> None:
    ours = Side(setups=[1.0], keys=[0.0025])
    peer = Side(setups=[1.0], keys=[0.002])
    p50 = rows(ours, peer, sessions=1, per_session=1)[0]
    assert p50.ratio == pytest.approx(1.25)
    assert GOAL < 1.25
    assert p50.result == "MISSED"


def test_the_direct_client_row_has_no_goal_and_sits_before_setup() -> None:
    ours = Side(setups=[0.05], keys=[0.0011] * 10)
    peer = Side(setups=[0.09], keys=[0.0009] * 10)
    direct = Side(setups=[0.04], keys=[0.0008] * 9 + [0.0030])
    found = rows(ours, peer, sessions=1, per_session=10, direct=direct)
    names = [row.name for row in found]
    name = "keystroke echo round trip, p50: a Python client straight to the API server"
    assert names.index(name) == names.index("session setup to the first output byte, median") - 1
    row = found[names.index(name)]
    assert row.value == pytest.approx(0.8)
    assert row.peer_value == pytest.approx(0.9)
    assert row.goals == ()
    assert row.result == ""
    assert "no operator hop" in row.note
    assert "p99 2.80 ms" in row.note  # the 99th of 10 samples, interpolated
    assert len(rows(ours, peer, sessions=1, per_session=10)) == 3  # not measured: no row


def test_the_python_client_row_has_no_goal_and_comes_before_the_direct_one() -> None:
    ours = Side(setups=[0.05], keys=[0.0012] * 10)
    peer = Side(setups=[0.09], keys=[0.0010] * 10)
    python = Side(setups=[0.03], keys=[0.0011] * 9 + [0.0040])
    direct = Side(setups=[0.04], keys=[0.0009] * 10)
    found = rows(ours, peer, sessions=1, per_session=10, direct=direct, python=python)
    names = [row.name for row in found]
    ours_python = "keystroke echo round trip, p50: aiohttp's client in the bench's process"
    ours_direct = "keystroke echo round trip, p50: a Python client straight to the API server"
    assert names.index(ours_python) == names.index(ours_direct) - 1
    row = found[names.index(ours_python)]
    assert row.value == pytest.approx(1.1)
    assert row.peer_value == pytest.approx(1.0)
    assert row.goals == ()
    assert "allocbridge's endpoint" in row.note
    assert "p99 3.74 ms" in row.note  # the 99th of 10 samples, interpolated
    assert len(found) == 5


def test_the_forwarded_kubectl_row_has_no_goal_and_comes_just_before_setup() -> None:
    ours = Side(setups=[0.05], keys=[0.0012] * 10)
    peer = Side(setups=[0.09], keys=[0.0010] * 10)
    direct = Side(setups=[0.04], keys=[0.0009] * 10)
    forwarded = Side(setups=[0.10], keys=[0.0011] * 10)
    found = rows(ours, peer, sessions=1, per_session=10, direct=direct, forwarded=forwarded)
    names = [row.name for row in found]
    name = "keystroke echo round trip, p50: kubectl through a bare TCP forwarder"
    assert names.index(name) == names.index("session setup to the first output byte, median") - 1
    assert names.index(name) > names.index(
        "keystroke echo round trip, p50: a Python client straight to the API server"
    )
    row = found[names.index(name)]
    assert row.ratio == pytest.approx(1.1)
    assert row.goals == ()
    assert row.result == ""
    assert "10 keystrokes" in row.note


def _session(argv: list[str], tmp_path: Path) -> TerminalSession:
    return TerminalSession.spawn(argv, tmp_path / "stderr", "test client")


async def test_a_terminal_session_echoes_only_what_its_client_writes(tmp_path: Path) -> None:
    """The slave is raw: a key written to the master reaches the client unchanged and comes
    back only through the client's own output (the terminal itself echoes nothing)."""
    cat = _session(["cat"], tmp_path)
    try:
        await cat.send(b"x")
        await wait_for(cat, b"x", "echo")
        await cat.send(b"\x7f")  # raw: no line editing, the byte goes through as it is
        await wait_for(cat, b"\x7f", "echo")
        assert cat.received.total == 2  # one of each: no local echo doubled them
    finally:
        cat.process.terminate()
        await cat.close()


async def test_a_terminal_session_has_the_size_the_clients_send(tmp_path: Path) -> None:
    code = "import os; print(*os.get_terminal_size(0), sep='x')"
    client = _session([sys.executable, "-c", code], tmp_path)
    try:
        await wait_for(client, f"{COLUMNS}x{ROWS}".encode(), "terminal size")
    finally:
        await client.close()


async def test_a_failed_client_says_what_it_wrote_to_stderr(tmp_path: Path) -> None:
    client = _session(
        [sys.executable, "-c", "import sys; sys.exit('no such allocation')"], tmp_path
    )
    try:
        assert not await client.more(5.0)  # the client ended without output
        assert client.errors() == "no such allocation"
    finally:
        await client.close()


def test_sides_take_turns_in_flipping_order() -> None:
    sides = ["allocbridge", "kubectl", "python", "direct"]
    assert turn_order(sides, 0) == sides
    assert turn_order(sides, 1) == sides[::-1]
    assert turn_order(sides, 2) == sides
    assert turn_order(sides, 3) == sides[::-1]
    assert sides == ["allocbridge", "kubectl", "python", "direct"]  # not reversed in place


async def test_a_forwarder_that_does_not_start_is_named_not_hidden_by_its_cleanup() -> None:
    with pytest.raises(BenchError, match="goclients forward did not start"):
        async with forwarder(Path("/bin/false"), "https://127.0.0.1:6443"):
            pass


async def test_the_forwarder_copies_bytes_both_ways_untouched() -> None:
    """kubectl's forwarded side is only fair if the forwarder adds a process and nothing else."""
    binary = await golang.build()
    assert binary is not None, "the bench's Go clients need Go on PATH, as make bench does"

    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        writer.close()

    upstream = await asyncio.start_server(echo, "127.0.0.1", 0)
    port = upstream.sockets[0].getsockname()[1]
    try:
        async with forwarder(binary, f"https://127.0.0.1:{port}") as url:
            forwarded = urllib.parse.urlsplit(url)
            assert forwarded.hostname == "127.0.0.1" and forwarded.port != port
            reader, writer = await asyncio.open_connection("127.0.0.1", forwarded.port)
            payload = bytes(range(256)) * 64
            writer.write(payload)
            await writer.drain()
            assert await reader.readexactly(len(payload)) == payload
            writer.close()
            await writer.wait_closed()
    finally:
        upstream.close()
        await upstream.wait_closed()
