"""Go-style durations, as Nomad and Boundary read them.

Nomad's `wait` query parameter uses Go's `time.ParseDuration`; Boundary's
`graceful_shutdown_wait_duration` uses `parseutil.ParseDurationSecond`, which also takes a bare
integer as seconds and `Nd` as whole days. Both are here so config and the API agree.
"""

from __future__ import annotations

import re

_UNITS = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,  # Go accepts the micro sign and the Greek mu
    "μs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")


class DurationError(ValueError):
    """The text is not a duration; the message says why."""


def parse_go_duration(text: str) -> float:
    """Seconds in a Go duration such as `10s`, `1m30s`, `1500ms`, `-2h` or `0`."""
    s = text
    sign = 1.0
    if s[:1] in "+-" and s:
        sign = -1.0 if s[0] == "-" else 1.0
        s = s[1:]
    if s == "0":
        return 0.0
    if not s:
        raise DurationError(f"invalid duration {text!r}")
    total = 0.0
    pos = 0
    while pos < len(s):
        match = _PART.match(s, pos)
        if match is None:
            if re.match(r"(\d+(?:\.\d*)?|\.\d+)$", s[pos:]):
                raise DurationError(f"missing unit in duration {text!r}")
            raise DurationError(f"invalid duration {text!r}")
        total += float(match.group(1)) * _UNITS[match.group(2)]
        pos = match.end()
    return sign * total


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
