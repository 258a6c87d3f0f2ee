"""Nomad's exec WebSocket frames (`/v1/client/allocation/:id/exec`), as pure functions. No I/O.

The client sends `ExecStreamingInput` JSON text frames: stdin data (base64) and close,
`tty_size`, or `{}` as a heartbeat; with `ws_handshake=true` its first frame is
`{"version":1,"auth_token":...}`. The server answers with `ExecStreamingOutput` frames: stdout
and stderr data (base64) and close, then `{"exited":true,"result":{"exit_code":N}}`. Errors
end the session with a close frame whose reason holds at most `MAX_REASON` bytes. The session
itself (pumps, heartbeats, authorization) is `api.exec`; the log stream's frames are
`model.streamframes`.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

import pybase64

#: Raw output bytes per frame (Nomad sends 1 KiB; bigger frames cost less for bulk output).
OUTPUT_CHUNK: Final = 32 * 1024
#: A close frame's payload is at most 125 bytes, 2 of them the code.
MAX_REASON: Final = 123
_REASON_HEAD: Final = 30  # bytes of a long reason's start kept before its end

Stream = Literal["stdout", "stderr"]


class FrameError(ValueError):
    """A client frame, handshake or parameter that cannot be used; the text is the reason."""


@dataclass(frozen=True)
class ClientFrame:
    """One client message: stdin bytes, a stdin close and/or a terminal size; else a heartbeat."""

    stdin: bytes = b""
    stdin_close: bool = False
    tty_size: tuple[int, int] | None = None  # (width, height)

    @property
    def is_heartbeat(self) -> bool:
        return not self.stdin and not self.stdin_close and self.tty_size is None


#: A keystroke's frame, `{"stdin":{"data":"<base64>"}}`, as Nomad's clients write it (Go's
#: encoder, gorilla's `WriteJSON`: compact, with a newline after it; the web UI: compact,
#: without one): the most frequent frame of an interactive session, read by slicing
#: (`keystroke_stdin`) rather than by the JSON decoder.
_STDIN_HEAD: Final = b'{"stdin":{"data":"'
_STDIN_TAILS: Final = (b'"}}\n', b'"}}')


def keystroke_stdin(message: bytes) -> bytes | None:
    """The stdin bytes of a compact `{"stdin":{"data":"<base64>"}}` frame (a newline after it
    allowed); None for any other frame, which `decode_client_frame` reads. A keystroke's frame
    thus costs no regular expression, JSON decoder or `ClientFrame`."""
    if not message.startswith(_STDIN_HEAD):
        return None
    end = message.find(b'"', 18)
    if end < 0 or message[end:] not in _STDIN_TAILS:
        return None
    try:
        return pybase64.b64decode(message[18:end], validate=True)
    except (binascii.Error, ValueError):
        return None  # decode_client_frame names what is wrong


def decode_client_frame(message: str | bytes) -> ClientFrame:
    """Nomad's `ExecStreamingInput` JSON; unknown keys are ignored, as Nomad ignores them."""
    if isinstance(message, bytes):
        keystroke = keystroke_stdin(message)
        if keystroke is not None:
            return ClientFrame(stdin=keystroke)
    frame = _json_object(message, "exec frame")
    stdin_data, stdin_close, size = b"", False, None
    stdin = frame.get("stdin")
    if stdin is not None:
        if not isinstance(stdin, dict):
            raise FrameError("invalid exec frame: stdin must be an object")
        data = stdin.get("data")
        if data is not None:
            if not isinstance(data, str):
                raise FrameError("invalid exec frame: stdin data must be a base64 string")
            try:
                stdin_data = base64.b64decode(data, validate=True)
            except (binascii.Error, ValueError) as exc:
                raise FrameError(f"invalid exec frame: stdin data is not base64: {exc}") from None
        close = stdin.get("close", False)
        if not isinstance(close, bool):
            raise FrameError("invalid exec frame: stdin close must be a boolean")
        stdin_close = close
    tty_size = frame.get("tty_size")
    if tty_size is not None:
        if not isinstance(tty_size, dict):
            raise FrameError("invalid exec frame: tty_size must be an object")
        size = (_dimension(tty_size, "width"), _dimension(tty_size, "height"))
    return ClientFrame(stdin=stdin_data, stdin_close=stdin_close, tty_size=size)


def _dimension(size: Mapping[str, Any], name: str) -> int:
    value = size.get(name, 0)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 0xFFFF:
        raise FrameError(f"invalid exec frame: tty_size {name} must be an integer 0-65535")
    return value


def _json_object(message: str | bytes, what: str) -> dict[str, Any]:
    try:
        value = json.loads(message)
    except (ValueError, UnicodeDecodeError) as exc:
        raise FrameError(f"invalid {what}: {exc}") from None
    if not isinstance(value, dict):
        raise FrameError(f"invalid {what}: not a JSON object")
    return value


def _compact(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode("utf-8")


#: `encode_output`'s text before the base64, per stream.
OUTPUT_HEADS: Final[dict[Stream, bytes]] = {
    "stdout": b'{"stdout":{"data":"',
    "stderr": b'{"stderr":{"data":"',
}


def encode_output(stream: Stream, data: bytes, chunk: int = OUTPUT_CHUNK) -> list[bytes]:
    """Output frames of at most `chunk` raw bytes each, in order, as UTF-8 JSON text.

    The text is exactly `_compact({stream: {"data": <base64>}})`, put together directly as
    bytes: the base64 alphabet and the stream names need no JSON escaping (json.dumps scanning
    bulk output for it took 43% of the event loop), and bytes skip a decode and re-encode.
    pybase64 (SIMD) encodes about 25 times faster than the standard library, which was the
    relay's largest cost per byte.
    """
    head = OUTPUT_HEADS[stream]
    view = memoryview(data)
    return [
        head + pybase64.b64encode(view[i : i + chunk]) + b'"}}' for i in range(0, len(data), chunk)
    ]


def encode_small_output(stream: Stream, data: bytes) -> bytes:
    """The one frame of at most `OUTPUT_CHUNK` raw bytes `encode_output` gives (an echo)."""
    return OUTPUT_HEADS[stream] + pybase64.b64encode(data) + b'"}}'


def encode_output_close(stream: Stream) -> bytes:
    return _compact({stream: {"close": True}})


def encode_exited(exit_code: int) -> bytes:
    return _compact({"exited": True, "result": {"exit_code": exit_code}})


HEARTBEAT_FRAME: Final = b"{}"


def parse_handshake(message: str | bytes, header: str | None) -> str | None:
    """The token of a `{"version":1,"auth_token":...}` frame (else the header's); FrameError
    with Nomad's reasons for a bad frame, another version or a token that contradicts the
    request header's."""
    try:
        frame = json.loads(message)
    except (ValueError, UnicodeDecodeError) as exc:
        raise FrameError(str(exc)) from None
    if not isinstance(frame, dict):
        raise FrameError("json: cannot unmarshal handshake into Go value of type object")
    version = frame.get("version", 0)
    if isinstance(version, bool) or version != 1:
        raise FrameError(f"unexpected handshake value: {_go_value(version)}")
    token = frame.get("auth_token") or ""
    if not isinstance(token, str):
        raise FrameError("json: cannot unmarshal auth_token into Go value of type string")
    if token and header and token != header:
        raise FrameError("handshake auth token mismatched auth header token")
    return token or header


def _go_value(value: Any) -> str:
    return json.dumps(value) if not isinstance(value, str) else value


def close_reason(text: str) -> str:
    """`text` cut to fit a close frame, on character boundaries: its start and its end with
    "..." between, since a runtime's error chain ends with the cause (`exec: "x": executable
    file not found in $PATH`) after a long middle of wrapping and container IDs."""
    raw = text.encode("utf-8")
    if len(raw) <= MAX_REASON:
        return text
    head = raw[:_REASON_HEAD].decode("utf-8", "ignore")
    room = MAX_REASON - len(head.encode()) - 3
    tail = raw[len(raw) - room :].decode("utf-8", "ignore")
    return f"{head}...{tail}"
