"""The exec relay's WebSocket framing (`model.websocket`): frames as RFC 6455 lays them out,
checked against aiohttp's WebSocket server over real sockets in both directions, and the
parser's answers to frames that break the protocol."""

from __future__ import annotations

import asyncio
import base64
import os
from collections.abc import AsyncIterator

import pytest
from aiohttp import WSMsgType, web

from allocbridge.model.websocket import (
    CLOSE_NO_STATUS,
    CLOSE_PROTOCOL_ERROR,
    CLOSE_TOO_BIG,
    OP_BINARY,
    OP_CLOSE,
    OP_CONTINUATION,
    OP_PING,
    OP_PONG,
    OP_TEXT,
    FrameParser,
    Message,
    ProtocolError,
    accept_key,
    close_payload,
    encode,
    mask,
    parse_close,
    valid_key,
)

SIZES = (0, 1, 125, 126, 65535, 65536, 1024 * 1024 + 3)
KEY = b"\x01\x02\xfe\xff"


def test_accept_key_is_rfc_6455s_example() -> None:
    assert accept_key("dGhlIHNhbXBsZSBub25jZQ==") == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="


def test_valid_key_is_16_bytes_of_base64() -> None:
    assert valid_key(base64.b64encode(os.urandom(16)).decode())
    assert not valid_key(base64.b64encode(os.urandom(15)).decode())
    assert not valid_key("not base64!")
    assert not valid_key("")


def test_mask_is_its_own_inverse_and_xors_the_key() -> None:
    payload = bytes(range(256)) * 3 + b"\x00\x00"
    masked = mask(KEY, payload)
    assert masked == bytes(b ^ KEY[i % 4] for i, b in enumerate(payload))
    assert mask(KEY, masked) == payload
    assert mask(KEY, b"") == b""


def test_header_lengths_follow_the_payload_size() -> None:
    assert encode(OP_TEXT, b"x" * 125)[:2] == bytes((0x81, 125))
    assert encode(OP_BINARY, b"x" * 126)[:4] == bytes((0x82, 126, 0, 126))
    assert encode(OP_BINARY, b"x" * 65536)[:10] == bytes((0x82, 127, 0, 0, 0, 0, 0, 1, 0, 0))
    assert encode(OP_TEXT, b"hi", KEY)[:6] == bytes((0x81, 0x82)) + KEY


@pytest.mark.parametrize("masked", [True, False])
def test_every_size_round_trips_fed_whole_or_in_pieces(masked: bool) -> None:
    for size in SIZES:
        payload = os.urandom(size)
        frame = encode(OP_BINARY, payload, KEY if masked else None)
        assert FrameParser(masked=masked, max_message=2**21).feed(frame) == [
            Message(OP_BINARY, payload)
        ]
        parser = FrameParser(masked=masked, max_message=2**21)
        got: list[Message] = []
        step = max(1, len(frame) // 7)
        for at in range(0, len(frame), step):
            got += parser.feed(frame[at : at + step])
        assert got == [Message(OP_BINARY, payload)]


def test_byte_by_byte_and_several_frames_in_one_read() -> None:
    frames = encode(OP_TEXT, b"one", KEY) + encode(OP_PING, b"p", KEY) + encode(OP_TEXT, b"", KEY)
    expected = [Message(OP_TEXT, b"one"), Message(OP_PING, b"p"), Message(OP_TEXT, b"")]
    assert FrameParser(masked=True, max_message=100).feed(frames) == expected
    parser = FrameParser(masked=True, max_message=100)
    got: list[Message] = []
    for byte in frames:
        got += parser.feed(bytes((byte,)))
    assert got == expected


def fragment(opcode: int, payload: bytes, *, fin: bool) -> bytes:
    frame = bytearray(encode(opcode, payload))
    if not fin:
        frame[0] &= 0x7F
    return bytes(frame)


def test_fragments_are_joined_with_a_ping_between_them() -> None:
    frames = (
        fragment(OP_TEXT, b"ab", fin=False)
        + encode(OP_PING, b"!")
        + fragment(OP_CONTINUATION, b"cd", fin=False)
        + fragment(OP_CONTINUATION, b"e", fin=True)
    )
    assert FrameParser(masked=False, max_message=5).feed(frames) == [
        Message(OP_PING, b"!"),
        Message(OP_TEXT, b"abcde"),
    ]


@pytest.mark.parametrize(
    ("frame", "code"),
    [
        (bytes((0xC1, 0)), CLOSE_PROTOCOL_ERROR),  # RSV1 without an extension
        (encode(OP_TEXT, b"x"), CLOSE_PROTOCOL_ERROR),  # a client's frame unmasked
        (encode(0x3, b"", KEY), CLOSE_PROTOCOL_ERROR),  # reserved data opcode
        (encode(0xB, b"", KEY), CLOSE_PROTOCOL_ERROR),  # reserved control opcode
        (encode(OP_PING, b"x" * 126, KEY), CLOSE_PROTOCOL_ERROR),  # control frame too long
        (bytes((0x09, 0x80)) + KEY, CLOSE_PROTOCOL_ERROR),  # fragmented control frame
        (encode(OP_CONTINUATION, b"x", KEY), CLOSE_PROTOCOL_ERROR),  # nothing to continue
        (encode(OP_BINARY, b"x" * 11, KEY), CLOSE_TOO_BIG),
    ],
)
def test_protocol_errors_name_their_close_code(frame: bytes, code: int) -> None:
    with pytest.raises(ProtocolError) as raised:
        FrameParser(masked=True, max_message=10).feed(frame)
    assert raised.value.code == code


def test_a_message_too_big_is_refused_from_its_header_alone() -> None:
    header = bytes((0x82, 0x80 | 127)) + (2**40).to_bytes(8, "big")
    with pytest.raises(ProtocolError) as raised:
        FrameParser(masked=True, max_message=1024).feed(header)
    assert raised.value.code == CLOSE_TOO_BIG


def test_a_new_message_inside_a_fragmented_one_is_an_error() -> None:
    parser = FrameParser(masked=False, max_message=100)
    assert parser.feed(fragment(OP_TEXT, b"a", fin=False)) == []
    with pytest.raises(ProtocolError):
        parser.feed(encode(OP_TEXT, b"b"))


def test_a_server_frame_that_is_masked_is_an_error() -> None:
    with pytest.raises(ProtocolError):
        FrameParser(masked=False, max_message=100).feed(encode(OP_TEXT, b"x", KEY))


def test_close_payloads() -> None:
    assert parse_close(close_payload(1008, "bad frame")) == (1008, "bad frame")
    assert parse_close(b"") == (CLOSE_NO_STATUS, "")
    with pytest.raises(ProtocolError):
        parse_close(b"\x03")
    with pytest.raises(ProtocolError):
        parse_close(b"\x03\xe8\xff")


# --- against aiohttp's WebSocket server, over real sockets -------------------------------------


async def upgraded(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, bytes]:
    """A connection upgraded by hand, the bytes read past the 101's headers."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    key = base64.b64encode(os.urandom(16)).decode()
    writer.write(
        (
            "GET /ws HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
        ).encode()
    )
    head = await reader.readuntil(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 101 ")
    assert f"Sec-WebSocket-Accept: {accept_key(key)}".encode() in head
    return reader, writer, b""


@pytest.fixture
async def echo_server() -> AsyncIterator[int]:
    """aiohttp's WebSocket server: sends SIZES binary messages and a ping, then echoes every
    message back until the client closes."""

    async def handler(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(autoping=False)
        await ws.prepare(request)
        for size in SIZES:
            await ws.send_bytes(bytes(i % 251 for i in range(size)))
        await ws.ping(b"are you there")
        async for message in ws:
            if message.type is WSMsgType.BINARY:
                await ws.send_bytes(message.data)
            elif message.type is WSMsgType.TEXT:
                await ws.send_str(message.data)
        return ws

    app = web.Application()
    app.router.add_get("/ws", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield port
    finally:
        await runner.cleanup()


async def read_messages(
    reader: asyncio.StreamReader, parser: FrameParser, count: int
) -> list[Message]:
    got: list[Message] = []
    while len(got) < count:
        data = await asyncio.wait_for(reader.read(65536), 10)
        assert data, "the server closed early"
        got += parser.feed(data)
    return got


async def test_a_client_parser_reads_aiohttps_frames_and_its_masked_frames_are_read_back(
    echo_server: int,
) -> None:
    reader, writer, _ = await upgraded(echo_server)
    parser = FrameParser(masked=False, max_message=2**21)
    try:
        got = await read_messages(reader, parser, len(SIZES) + 1)
        assert [m.payload for m in got[:-1]] == [bytes(i % 251 for i in range(s)) for s in SIZES]
        assert got[-1] == Message(OP_PING, b"are you there")
        writer.write(encode(OP_PONG, b"are you there", os.urandom(4)))
        sent = [os.urandom(size) for size in SIZES]
        for payload in sent:
            writer.write(encode(OP_BINARY, payload, os.urandom(4)))
        writer.write(encode(OP_TEXT, "é ✓".encode(), os.urandom(4)))
        echoed = await read_messages(reader, parser, len(sent) + 1)
        assert echoed == [Message(OP_BINARY, p) for p in sent] + [Message(OP_TEXT, "é ✓".encode())]
        writer.write(encode(OP_CLOSE, close_payload(1000), os.urandom(4)))
        (answer,) = await read_messages(reader, parser, 1)
        assert answer.opcode == OP_CLOSE
        assert parse_close(answer.payload)[0] == 1000
    finally:
        writer.close()


@pytest.mark.parametrize("masked", [True, False])
def test_a_lone_small_data_frame_is_what_feed_gives_and_nothing_else_is_taken(
    masked: bool,
) -> None:
    key = KEY if masked else None
    for opcode in (OP_TEXT, OP_BINARY):
        for size in (0, 1, 30, 125):
            payload = os.urandom(size)
            frame = encode(opcode, payload, key)
            parser = FrameParser(masked=masked, max_message=2**21)
            assert parser.lone_data_frame(frame) == payload
            assert parser.feed(frame) == [Message(opcode, payload)]
    others = [
        encode(OP_BINARY, b"x" * 126, key),  # a longer header
        encode(OP_PING, b"p", key),  # control frames go through feed
        encode(OP_TEXT, b"one", key) + encode(OP_TEXT, b"two", key),  # two frames
        encode(OP_TEXT, b"one", key)[:-1],  # part of one
        encode(OP_TEXT, b"one", None if masked else KEY),  # masked the wrong way
        bytes((0x01, 0x80 if masked else 0)) + (KEY if masked else b""),  # not final
        bytes((0xC1, 0x80 if masked else 0)) + (KEY if masked else b""),  # a reserved bit
        b"\x81",
    ]
    for frame in others:
        assert FrameParser(masked=masked, max_message=2**21).lone_data_frame(frame) is None
    assert (
        FrameParser(masked=masked, max_message=2).lone_data_frame(encode(OP_TEXT, b"big", key))
        is None
    )  # feed refuses it with 1009
    parser = FrameParser(masked=masked, max_message=100)
    assert parser.feed(fragment_of(OP_TEXT, b"a", key)) == []
    assert parser.lone_data_frame(encode(OP_TEXT, b"b", key)) is None  # feed says it is wrong
    parser = FrameParser(masked=masked, max_message=100)
    assert parser.feed(encode(OP_TEXT, b"abc", key)[:3]) == []
    assert parser.lone_data_frame(encode(OP_TEXT, b"b", key)) is None  # held bytes come first


def fragment_of(opcode: int, payload: bytes, key: bytes | None) -> bytes:
    frame = bytearray(encode(opcode, payload, key))
    frame[0] &= 0x7F
    return bytes(frame)
