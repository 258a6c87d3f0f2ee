"""Go durations (Nomad's `wait`) and Boundary's duration-in-seconds form."""

from __future__ import annotations

import pytest

from allocbridge.model.durations import (
    DurationError,
    format_go_duration,
    parse_duration_second,
    parse_go_duration,
)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("10s", 10),
        ("1m30s", 90),
        ("1500ms", 1.5),
        ("0.5h", 1800),
        ("0", 0),
        ("-2s", -2),
        ("300000ms", 300),
        ("1h2m3s4ms", 3723.004),
        ("10us", 1e-5),
        ("7ns", 7e-9),
        (".5s", 0.5),
    ],
)
def test_go_durations(text: str, seconds: float) -> None:
    assert parse_go_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "5", "5 m", "s", "1d", "1x", "--1s", "1s2"])
def test_invalid_go_durations(text: str) -> None:
    with pytest.raises(DurationError):
        parse_go_duration(text)


@pytest.mark.parametrize(
    ("value", "seconds"), [(15, 15), ("15", 15), ("3d", 259200), ("1m", 60), ("", 0)]
)
def test_boundary_durations(value: str | int, seconds: float) -> None:
    assert parse_duration_second(value) == seconds


@pytest.mark.parametrize(
    ("seconds", "text"), [(0, "0s"), (90, "1m30s"), (0.25, "250ms"), (3600, "1h0m0s"), (10, "10s")]
)
def test_format(seconds: float, text: str) -> None:
    assert format_go_duration(seconds) == text
    assert parse_go_duration(text) == seconds
