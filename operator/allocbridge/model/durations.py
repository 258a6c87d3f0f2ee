"""Go-style durations, as Nomad and Boundary read them.

Nomad's `wait` query parameter uses Go's `time.ParseDuration`; Boundary's
`graceful_shutdown_wait_duration` uses `parseutil.ParseDurationSecond`, which also takes a bare
integer as seconds and `Nd` as whole days. Both are here so config and the API agree.

`parse_go_duration_ns` is Go's algorithm step for step, in integer nanoseconds: a value must
fit Go's `time.Duration` (int64 nanoseconds, about 292 years), so `9999999h` is invalid as in
Go, not a long wait; fractions below a nanosecond are dropped, as Go drops them.
"""

from __future__ import annotations

import functools
import re
from typing import Final

NS_PER_SECOND: Final = 1_000_000_000
_UNITS: Final = {
    "ns": 1,
    "us": 1_000,
    "\u00b5s": 1_000,  # Go accepts the micro sign and the Greek mu
    "\u03bcs": 1_000,
    "ms": 1_000_000,
    "s": NS_PER_SECOND,
    "m": 60 * NS_PER_SECOND,
    "h": 3600 * NS_PER_SECOND,
}
_LIMIT: Final = 1 << 63  # Go's bound on the magnitude while parsing; positive ends one below
_DIGITS: Final = re.compile(r"[0-9]*")
_UNIT: Final = re.compile(r"[^.0-9]*")


class DurationError(ValueError):
    """The text is not a duration; the message says why."""


def parse_go_duration(text: str) -> float:
    """Seconds in a Go duration such as `10s`, `1m30s`, `1500ms`, `-2h` or `0`."""
    return parse_go_duration_ns(text) / NS_PER_SECOND


@functools.lru_cache(maxsize=1024)
def parse_go_duration_ns(text: str) -> int:
    """Nanoseconds in a Go duration, exactly as Go's `time.ParseDuration` computes them.

    Cached: every reconciliation pass reads the same few durations of a spec (restart
    interval and delay, kill timeouts), and parsing them was 2% of the operator's CPU."""
    invalid = DurationError(f"invalid duration {text!r}")
    s = text
    negative = False
    if s[:1] in ("+", "-"):
        negative = s[0] == "-"
        s = s[1:]
    if s == "0":
        return 0
    if not s:
        raise invalid
    total = 0
    pos = 0
    while pos < len(s):
        if not (s[pos] == "." or "0" <= s[pos] <= "9"):
            raise invalid
        whole_digits = _leading(_DIGITS, s, pos)
        pos += len(whole_digits)
        whole = _whole(whole_digits)
        if whole is None:
            raise invalid
        fraction, scale, fraction_digits = 0, 1.0, ""
        if s[pos : pos + 1] == ".":
            fraction_digits = _leading(_DIGITS, s, pos + 1)
            pos += 1 + len(fraction_digits)
            fraction, scale = _fraction(fraction_digits)
        if not whole_digits and not fraction_digits:
            raise invalid  # no digits, as in `.s`
        name = _leading(_UNIT, s, pos)
        pos += len(name)
        if not name:
            raise DurationError(f"missing unit in duration {text!r}")
        unit = _UNITS.get(name)
        if unit is None:
            raise DurationError(f"unknown unit {name!r} in duration {text!r}")
        if whole > _LIMIT // unit:
            raise invalid
        value = whole * unit
        if fraction > 0:
            # Go's float64 step, nanosecond-exact for fractions of an hour.
            value += int(float(fraction) * (float(unit) / scale))
            if value > _LIMIT:
                raise invalid
        total += value
        if total > _LIMIT:
            raise invalid
    if negative:
        return -total
    if total > _LIMIT - 1:
        raise invalid
    return total


def _leading(pattern: re.Pattern[str], s: str, pos: int) -> str:
    """The run of `pattern` at `pos`, possibly empty."""
    match = pattern.match(s, pos)
    return match.group() if match else ""


def _whole(digits: str) -> int | None:
    """Go's `leadingInt`: the digits' value; None once it passes 2^63."""
    value = 0
    for digit in digits:
        if value > _LIMIT // 10:
            return None
        value = value * 10 + int(digit)
        if value > _LIMIT:
            return None
    return value


def _fraction(digits: str) -> tuple[int, float]:
    """Go's `leadingFraction`: the digits and their scale, ignoring those past int64's room."""
    value, scale = 0, 1.0
    for digit in digits:
        if value > (_LIMIT - 1) // 10:
            break
        following = value * 10 + int(digit)
        if following > _LIMIT:
            break
        value = following
        scale *= 10
    return value, scale


def parse_duration_second(value: str | int | float) -> float:
    """Seconds in Boundary's duration form: a number of seconds, `Nd` days, or a Go duration."""
    if isinstance(value, bool):
        raise DurationError(f"invalid duration {value!r}")
    if isinstance(value, int | float):
        return float(value)
    text = value.strip()
    if text == "":
        return 0.0
    if re.fullmatch(r"\d+", text):
        return float(text)
    days = re.fullmatch(r"(\d+)d", text)
    if days:
        return float(days.group(1)) * 86400.0
    return parse_go_duration(text)


def format_go_duration(seconds: float) -> str:
    """The canonical Go rendering (`1m30s`, `500ms`, `0s`) used when printing configuration."""
    if seconds == 0:
        return "0s"
    sign = "-" if seconds < 0 else ""
    seconds = abs(seconds)
    if seconds < 1:
        return f"{sign}{seconds * 1000:g}ms"
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    out = sign
    if hours:
        out += f"{int(hours)}h"
    if hours or minutes:
        out += f"{int(minutes)}m"
    return out + f"{secs:g}s"
