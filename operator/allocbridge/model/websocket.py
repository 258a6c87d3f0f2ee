"""WebSocket framing (RFC 6455) for the exec relay, as pure functions and a parser. No I/O.

The exec endpoint relays each keystroke and each echo between two WebSockets (the Nomad
client's and the API server's exec stream). It parses frames where the bytes arrive (a
protocol's `data_received`) and writes the answer straight to the other connection, instead
of aiohttp's reader queues, a task per direction and an await per message, which cost a
fifth of the operator's CPU per keystroke (docs/benchmarks/issue-36.md, "Interactive exec").

No extension is negotiated, so reserved bits are protocol errors. A server reads masked
frames and writes unmasked ones; a client the other way round (section 5.1: a frame masked
the wrong way is a protocol error). Fragmented messages are put together up to the parser's
size limit; control frames (close, ping, pong) may come between their fragments.
"""

from __future__ import annotations

import base64
import hashlib
import struct
from dataclasses import dataclass
from typing import Final

OP_CONTINUATION: Final = 0x0
OP_TEXT: Final = 0x1
OP_BINARY: Final = 0x2
OP_CLOSE: Final = 0x8
OP_PING: Final = 0x9
OP_PONG: Final = 0xA

CLOSE_NORMAL: Final = 1000
CLOSE_GOING_AWAY: Final = 1001
CLOSE_PROTOCOL_ERROR: Final = 1002
CLOSE_NO_STATUS: Final = 1005  # a close frame without a code (never sent)
CLOSE_ABNORMAL: Final = 1006  # the connection ended without a close frame (never sent)
CLOSE_INVALID_DATA: Final = 1007
CLOSE_TOO_BIG: Final = 1009

_GUID: Final = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
_LONG16: Final = struct.Struct("!BBH")
_LONG64: Final = struct.Struct("!BBQ")
_CODE: Final = struct.Struct("!H")
_WHOLE_OPCODES: Final = frozenset((OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG))
#: The first byte of a whole text or binary frame: FIN, no reserved bits.
_WHOLE_DATA: Final = frozenset((0x80 | OP_TEXT, 0x80 | OP_BINARY))
#: The first byte of any whole frame this parser takes in one piece.
_WHOLE_FIRST_BYTES: Final = frozenset(0x80 | opcode for opcode in _WHOLE_OPCODES)


class ProtocolError(Exception):
    """The peer broke the protocol: close with `code` and `reason`."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Message:
    """One whole message: `opcode` is OP_TEXT or OP_BINARY, or a control frame's."""

    opcode: int
    payload: bytes


def accept_key(key: str) -> str:
    """The `Sec-WebSocket-Accept` answer to a `Sec-WebSocket-Key`."""
    return base64.b64encode(hashlib.sha1(key.encode("ascii") + _GUID).digest()).decode()


def valid_key(key: str) -> bool:
    """A `Sec-WebSocket-Key` is 16 bytes in base64."""
    try:
        return len(base64.b64decode(key, validate=True)) == 16
    except ValueError:
        return False


def mask(key: bytes, payload: bytes) -> bytes:
    """`payload` XOR the 4-byte `key` repeated (masking and unmasking are the same)."""
    size = len(payload)
    if not size:
        return b""
    stream = (key * ((size >> 2) + 1))[:size]
    value = int.from_bytes(payload, "little") ^ int.from_bytes(stream, "little")
    return value.to_bytes(size, "little")


def encode(opcode: int, payload: bytes, mask_key: bytes | None = None) -> bytes:
    """One final frame of `payload`; masked with `mask_key` when given (a client's frames)."""
    size = len(payload)
    first = 0x80 | opcode
    masked = 0x80 if mask_key is not None else 0
    if size < 126:
        head = bytes((first, masked | size))
    elif size < 0x10000:
        head = _LONG16.pack(first, masked | 126, size)
    else:
        head = _LONG64.pack(first, masked | 127, size)
    if mask_key is None:
        return head + payload
    return head + mask_key + mask(mask_key, payload)


def close_payload(code: int, reason: str = "") -> bytes:
    """A close frame's payload; `reason` must already fit (`execframes.close_reason`)."""
    return _CODE.pack(code) + reason.encode("utf-8")


def parse_close(payload: bytes) -> tuple[int, str]:
    """(code, reason) of a close frame; an empty one is 1005 (section 7.1.5)."""
    if not payload:
        return CLOSE_NO_STATUS, ""
    if len(payload) < 2:
        raise ProtocolError(CLOSE_PROTOCOL_ERROR, "close frame with a 1-byte payload")
    try:
        reason = payload[2:].decode("utf-8")
    except UnicodeDecodeError:
        raise ProtocolError(CLOSE_INVALID_DATA, "close reason is not UTF-8") from None
    return _CODE.unpack_from(payload)[0], reason


class FrameParser:
    """Turns the bytes of one direction into whole messages.

    `masked`: the frames must be masked (a server reading its client) or must not be (a
    client reading its server). `max_message`: the largest message, fragments put together;
    a bigger one is a protocol error (1009). Bytes of an incomplete frame are kept as the
    chunks that came and joined once the frame is whole, so a big frame that arrives in many
    reads is copied once.
    """

    def __init__(self, *, masked: bool, max_message: int) -> None:
        self._masked = masked
        self._max = max_message
        self._chunks: list[bytes] = []
        self._held = 0  # bytes in _chunks
        self._needed = 0  # bytes the frame at the start of _chunks needs, when known
        self._fragments: list[bytes] = []
        self._fragment_opcode = 0  # of the message being put together; 0: none
        self._fragment_size = 0

    def feed(self, data: bytes) -> list[Message]:
        """The messages that `data` completes, in order; raises ProtocolError."""
        if not self._chunks and not self._fragment_opcode:
            whole = self._one_small_frame(data)
            if whole is not None:
                return [whole]
        if self._chunks:
            self._chunks.append(data)
            self._held += len(data)
            if self._held < self._needed:
                return []
            data = b"".join(self._chunks)
            self._chunks = []
            self._held = self._needed = 0
        messages: list[Message] = []
        end = len(data)
        at = 0
        while at < end:
            frame_end = self._frame(data, at, end, messages)
            if frame_end < 0:  # incomplete: keep the rest
                rest = data[at:]
                self._chunks = [rest]
                self._held = len(rest)
                self._needed = -frame_end
                break
            at = frame_end
        return messages

    def lone_data_frame(self, data: bytes) -> bytes | None:
        """The payload when `data` is exactly one whole, final text or binary frame of at most
        125 bytes and the parser holds nothing (a keystroke, an echo), without a `Message`.
        None for anything else, which `feed` then takes."""
        if self._chunks or self._fragment_opcode:
            return None
        return self._small_payload(data, _WHOLE_DATA)

    def _one_small_frame(self, data: bytes) -> Message | None:
        """`data` as one whole unfragmented frame of at most 125 bytes (a keystroke, an
        echo, a control frame); None for anything else."""
        payload = self._small_payload(data, _WHOLE_FIRST_BYTES)
        return None if payload is None else Message(data[0] & 0x0F, payload)

    def _small_payload(self, data: bytes, first_bytes: frozenset[int]) -> bytes | None:
        """The payload when `data` is exactly one frame of at most 125 bytes whose first byte
        (FIN, reserved bits, opcode) is one of `first_bytes`, checked as `_frame` checks it."""
        if len(data) < 2:
            return None
        first = data[0]
        if first not in first_bytes:
            return None
        second = data[1]
        size = second & 0x7F
        if size > 125 or (size > self._max and first & 0x0F < OP_CLOSE):
            return None
        if self._masked:
            if not second & 0x80 or len(data) != size + 6:
                return None
            return mask(data[2:6], data[6:])
        if second & 0x80 or len(data) != size + 2:
            return None
        return data[2:]

    def _frame(self, data: bytes, at: int, end: int, messages: list[Message]) -> int:
        """Parse the frame at `at`: its end, or minus the bytes it needs when incomplete."""
        if end - at < 2:
            return -2
        first = data[at]
        second = data[at + 1]
        if first & 0x70:
            raise ProtocolError(CLOSE_PROTOCOL_ERROR, "reserved bits set without an extension")
        if bool(second & 0x80) != self._masked:
            what = "unmasked frame from a client" if self._masked else "masked frame from a server"
            raise ProtocolError(CLOSE_PROTOCOL_ERROR, what)
        size = second & 0x7F
        head = 2
        if size == 126:
            if end - at < 4:
                return -4
            size = int.from_bytes(data[at + 2 : at + 4], "big")
            head = 4
        elif size == 127:
            if end - at < 10:
                return -10
            size = int.from_bytes(data[at + 2 : at + 10], "big")
            head = 10
        if self._masked:
            head += 4
        opcode = first & 0x0F
        if opcode >= OP_CLOSE:
            if size > 125 or not first & 0x80:
                raise ProtocolError(CLOSE_PROTOCOL_ERROR, "control frame too long or fragmented")
            if opcode > OP_PONG:
                raise ProtocolError(CLOSE_PROTOCOL_ERROR, f"unknown opcode {opcode}")
        elif opcode > OP_BINARY:
            raise ProtocolError(CLOSE_PROTOCOL_ERROR, f"unknown opcode {opcode}")
        elif size + self._fragment_size > self._max:
            raise ProtocolError(CLOSE_TOO_BIG, f"message over {self._max} bytes")
        frame_end = at + head + size
        if frame_end > end:
            return -(frame_end - at)
        payload = data[at + head : frame_end]
        if self._masked:
            payload = mask(data[at + head - 4 : at + head], payload)
        if opcode >= OP_CLOSE:
            messages.append(Message(opcode, payload))
        elif opcode == OP_CONTINUATION:
            if not self._fragment_opcode:
                raise ProtocolError(CLOSE_PROTOCOL_ERROR, "continuation frame without a start")
            self._fragments.append(payload)
            self._fragment_size += size
            if first & 0x80:
                messages.append(Message(self._fragment_opcode, b"".join(self._fragments)))
                self._fragments = []
                self._fragment_opcode = self._fragment_size = 0
        elif self._fragment_opcode:
            raise ProtocolError(CLOSE_PROTOCOL_ERROR, "new message inside a fragmented one")
        elif first & 0x80:
            messages.append(Message(opcode, payload))
        else:
            self._fragments = [payload]
            self._fragment_opcode = opcode
            self._fragment_size = size
        return frame_end
