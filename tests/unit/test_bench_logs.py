"""The logs section's client side: counting the data of Nomad's frame stream as it arrives in
arbitrary pieces, the log's size and the row."""

from __future__ import annotations

import pytest
from benchmarks import logstream
from benchmarks.harness import BenchError

from allocbridge.model.streamframes import HEARTBEAT, encode_frames


@pytest.mark.parametrize("piece", [1, 7, 1000, 1 << 20])
def test_frames_split_anywhere_are_counted_once(piece: int) -> None:
    data = bytes(range(256)) * 40 + b"tail"
    frames = encode_frames(data, end_offset=len(data), file="stdout.0", size=1000)
    stream = HEARTBEAT + frames + HEARTBEAT
    counter = logstream.FrameCounter()
    for at in range(0, len(stream), piece):
        counter.feed(stream[at : at + piece])
    assert counter.received == len(data)


def test_a_frame_whose_offset_does_not_follow_on_fails_the_run() -> None:
    first = encode_frames(b"a" * 10, end_offset=10, file="stdout.0")
    skipped = encode_frames(b"b" * 10, end_offset=30, file="stdout.0")  # 10 bytes lost
    counter = logstream.FrameCounter()
    counter.feed(first)
    with pytest.raises(BenchError, match="ends at offset 30, after 20 bytes"):
        counter.feed(skipped)


def test_the_log_is_whole_lines_below_kubelets_rotation() -> None:
    assert logstream.log_bytes(8) == 8_000_000
    assert logstream.log_bytes(0.0015) == 1000
    with pytest.raises(ValueError, match=r"at most 9\.5 MB"):
        logstream.log_bytes(10)


def test_the_goal_is_four_fifths_of_kubectls_throughput() -> None:
    def runs(seconds: float) -> list[logstream.Run]:
        return [logstream.Run(0.05, seconds)] * 3

    met = logstream.rows(logstream.Runs(runs(0.12), runs(0.1)), 8_000_000)[0]
    assert met.value == pytest.approx(8 / 0.12) and met.result == "met"  # 0.83x
    missed = logstream.rows(logstream.Runs(runs(0.2), runs(0.1)), 8_000_000)[0]
    assert missed.result == "MISSED"  # 0.5x
