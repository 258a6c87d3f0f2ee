"""Go durations (Nomad's `wait`) and Boundary's duration-in-seconds form."""

from __future__ import annotations

import pytest

from allocbridge.model.durations import (
    DurationError,
    format_go_duration,
    parse_duration_second,
    parse_go_duration,
    parse_go_duration_ns,
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


@pytest.mark.parametrize(
    "text", ["", "5", "5 m", "s", "1d", "1x", "--1s", "1s2", ".s", "\u0665s", "1\u0665s"]
)
def test_invalid_go_durations(text: str) -> None:
    with pytest.raises(DurationError):
        parse_go_duration(text)


@pytest.mark.parametrize(
    ("text", "nanoseconds"),
    [
        ("9223372036854775807ns", 2**63 - 1),
        ("-9223372036854775808ns", -(2**63)),
        ("2562047h47m16.854775807s", 2**63 - 1),
        ("-2562047h47m16.854775808s", -(2**63)),
        ("2562047h", 2562047 * 3600 * 10**9),
        ("1.9ns", 1),  # Go truncates below a nanosecond
        ("0.1234567891s", 123456789),
        ("1.00000000000000000000000000001s", 10**9),  # extra fraction digits are dropped
        ("10\u00b5s", 10_000),  # micro sign
        ("10\u03bcs", 10_000),  # Greek mu
    ],
)
def test_go_durations_in_nanoseconds(text: str, nanoseconds: int) -> None:
    assert parse_go_duration_ns(text) == nanoseconds
    assert parse_go_duration(text) == nanoseconds / 10**9


@pytest.mark.parametrize(
    "text",
    [
        "9223372036854775808ns",  # 2^63 ns: one past Go's time.Duration
        "2562047h47m16.854775808s",
        "-9223372036854775809ns",
        "2562048h",
        "9999999h",
        "99999999999999999999ns",  # overflows while reading the digits
        "1h9223372036854775807ns",  # overflows in the sum
        "153722868m",
    ],
)
def test_go_durations_beyond_int64_nanoseconds_are_invalid(text: str) -> None:
    with pytest.raises(DurationError, match="invalid duration"):
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
