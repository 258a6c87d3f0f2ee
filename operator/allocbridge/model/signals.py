"""Signal names as Nomad accepts them (`SIGUSR1`, also `USR1` or a number), mapped to Linux.

Nomad passes the name to the driver, which looks it up in Go's signal table; an unknown name is
an error before anything is sent. Linux numbers are used because the pods run on Linux.
"""

from __future__ import annotations

import signal

_NAMES: dict[str, int] = {
    s.name: int(s.value)
    for s in signal.Signals
    if s.name.startswith("SIG") and not s.name.startswith("SIG_")
}
NUMBERS: dict[int, str] = {}
for _name, _number in sorted(_NAMES.items()):
    NUMBERS.setdefault(_number, _name)

#: Signals whose default action ends a process (what a restart or stop relies on).
TERMINATING = frozenset({"SIGTERM", "SIGINT", "SIGKILL", "SIGQUIT", "SIGABRT", "SIGHUP"})


class UnknownSignalError(ValueError):
    """The name is not a signal; the message says so the way the API answers it."""


#: Every signal name, `SIGHUP` first (the OpenAPI document lists them).
NAMES: tuple[str, ...] = tuple(sorted(_NAMES, key=_NAMES.__getitem__))
#: What `canonical` strips around a name: ASCII whitespace only.
SPACE = " \t\n\r\f\v"


def canonical(name: str) -> str:
    """`SIGUSR1` for `SIGUSR1`, `sigusr1`, `USR1` or `10`; raises UnknownSignalError.

    ASCII only, as Go reads names and numbers: `str.isdigit` and `str.upper` would let `²`
    through to `int()` (a ValueError, so a 500) and read the long s (U+017F) as `S`."""
    text = name.strip(SPACE)
    if not text.isascii():
        raise UnknownSignalError(f"invalid signal {name!r}: not a known signal name")
    text = text.upper()
    if text.isdigit():
        number = int(text)
        if number in NUMBERS:
            return NUMBERS[number]
    else:
        full = text if text.startswith("SIG") else f"SIG{text}"
        if full in _NAMES:
            return full
    raise UnknownSignalError(f"invalid signal {name!r}: not a known signal name")


def number(name: str) -> int:
    return _NAMES[canonical(name)]
