"""Nomad's file stream framing (`/v1/client/fs/logs`, `fs/stream`), as pure functions. No I/O.

Nomad streams a file as JSON `StreamFrame` objects written back to back with no separator (the
Go client reads them with one `json.Decoder`): `Offset` (the file offset just past the frame's
data), `Data` (base64), `File` (the path in the allocation directory) and `FileEvent`, each left
out when empty; `{}` is a heartbeat. Output is batched into frames of at most `MAX_FRAME` bytes.

`LogWindow` turns Nomad's `origin`/`offset` into what to skip of a log read from its start:
Kubernetes serves a container's log only from the beginning (or by lines, which Nomad's byte
offsets cannot use), so `origin=end` needs the log's current size first (`start_at`).
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Final, Literal

#: Nomad's `streamFrameSize`: most bytes of data one frame carries.
MAX_FRAME: Final = 64 * 1024
#: Seconds Nomad's framer batches output before sending it (`streamBatchWindow`).
BATCH_WINDOW: Final = 0.2
#: Seconds a log may pause before what has arrived of it is sent rather than batched further:
#: a log that has gone quiet (or a stream that has caught up with it) is not held for the whole
#: batch window (Nomad's clients decode frames of any size alike).
LINGER: Final = 0.005
#: Seconds between heartbeats while nothing else is sent (`streamHeartbeatRate`).
HEARTBEAT_INTERVAL: Final = 1.0
HEARTBEAT: Final = b"{}"

LogType = Literal["stdout", "stderr"]
Origin = Literal["start", "end"]


def log_file(task: str, log_type: LogType) -> str:
    """The log's path in Nomad's allocation directory (the first rotated file, `.0`)."""
    return f"alloc/logs/{task}.{log_type}.0"


def encode_frame(*, offset: int, data: bytes = b"", file: str = "", event: str = "") -> bytes:
    """One `StreamFrame`, empty fields left out as Go's `omitempty` does.

    Written directly rather than through `json.dumps`: base64 needs no escaping, and the JSON
    encoder's scan of 87 KB of it per frame was most of a followed log's encoding cost.
    """
    fields: list[bytes] = []
    if offset:
        fields.append(b'"Offset":%d' % offset)
    if data:
        fields.append(b'"Data":"' + base64.b64encode(data) + b'"')
    if file:
        fields.append(b'"File":' + json.dumps(file).encode())
    if event:
        fields.append(b'"FileEvent":' + json.dumps(event).encode())
    return b"{" + b",".join(fields) + b"}"


def encode_frames(data: bytes, *, end_offset: int, file: str, size: int = MAX_FRAME) -> bytes:
    """`data` (which ends at `end_offset` in the file) as frames of at most `size` bytes each.

    `encode_frame`'s bytes for each piece (a piece's `Offset` is never 0), built as one join of
    views and base64 runs: growing one buffer frame by frame made a 130 KB batch cost several
    times what its base64 does.
    """
    if not data:
        return b""
    view = memoryview(data)
    start = end_offset - len(data)
    close = b'","File":' + json.dumps(file).encode() + b"}" if file else b'"}'
    parts: list[bytes] = []
    for at in range(0, len(data), size):
        piece = view[at : at + size]
        end = start + at + len(piece)
        parts += (b'{"Offset":%d,"Data":"' % end, base64.b64encode(piece), close)
    return b"".join(parts)


def start_at(origin: Origin, offset: int, size: int | None = None) -> int:
    """The file offset to start from: `offset` from the start, or `offset` back from the end of
    a log of `size` bytes; never below 0 (Nomad clamps too)."""
    if origin == "start":
        return max(0, offset)
    if size is None:
        raise ValueError("origin=end needs the log's size")
    return max(0, size - max(0, offset))


@dataclass
class LogWindow:
    """Skips a log read from its start up to `start`, and counts where the data is.

    `feed` takes each chunk in turn and returns the part to send; `position` is then the file
    offset just past it (what a frame's `Offset` carries).
    """

    start: int
    position: int = 0

    def feed(self, chunk: bytes) -> bytes:
        before = self.position
        self.position += len(chunk)
        if self.position <= self.start:
            return b""
        return chunk[max(0, self.start - before) :]


@dataclass
class Tail:
    """The last `keep` bytes of a log read to its end (`origin=end` without `follow`)."""

    keep: int
    size: int = 0
    data: bytes = b""

    def feed(self, chunk: bytes) -> None:
        self.size += len(chunk)
        if self.keep <= 0:
            return
        joined = self.data + chunk
        self.data = joined[-self.keep :] if len(joined) > self.keep else joined
