"""Which processes in a container an exec session left behind when its client went away.

Kubernetes' exec API has no kill, and when an exec stream ends early containerd keeps the
command running, draining its output into nothing (after `kubectl exec` too). So when a session
ends before its command exited, the operator finds the command through a second exec and ends
it (`cluster.leftovers`). There is no handle to the process, only what the container's `/proc`
shows: a process started by an exec has parent PID 0 inside the container (its parent, the
runtime, is outside the container's PID namespace), as has only PID 1 besides; and its start
time falls between the moment the session was asked for and its first output (or its end).
Several such processes in that window (sessions opened at the same moment) are told apart by
their command line; if that leaves more than one, none is ended: never another session's.

`SCAN` is the scan: POSIX shell with builtins only (`read`, `echo`, `set`), one line per
process, `pid ppid starttime`, after a line with the container's uptime and one with the
scan's own PID. Times are in the kernel's clock ticks, 100 a second on Linux (`USER_HZ`, fixed
for `/proc`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

TICKS_PER_SECOND = 100
#: Slack around the start window: /proc's times have 10 ms steps, and the clocks differ.
SLACK = 0.5

SCAN = (
    "read -r up idle < /proc/uptime; echo uptime $up; echo self $$; "
    'for d in /proc/[0-9]*; do read -r s 2>/dev/null < "$d/stat" || continue; '
    "set -- ${s##*)}; echo ${d#/proc/} $2 ${20}; done"
)
SCAN_COMMAND = ("sh", "-c", SCAN)


class ScanError(ValueError):
    """The scan's output is not what `SCAN` prints (no shell of the kind it needs)."""


@dataclass(frozen=True)
class Process:
    pid: int
    parent: int
    started: float  # seconds after boot


@dataclass(frozen=True)
class Scan:
    uptime: float
    own_pid: int
    processes: tuple[Process, ...]


def parse_scan(text: str) -> Scan:
    """The scan's output; ScanError when it is not the scan's."""
    uptime: float | None = None
    own = 0
    found: list[Process] = []
    for line in text.splitlines():
        parts = line.split()
        if not parts:
            continue
        try:
            if parts[:1] == ["uptime"]:
                uptime = float(parts[1])
            elif parts[:1] == ["self"]:
                own = int(parts[1])
            else:
                pid, parent, ticks = (int(p) for p in parts)
                found.append(Process(pid, parent, ticks / TICKS_PER_SECOND))
        except (IndexError, ValueError):  # ValueError too for a line of other than 3 fields
            raise ScanError(f"unexpected line in the process scan: {line[:80]!r}") from None
    if uptime is None:
        raise ScanError("the process scan printed no uptime")
    return Scan(uptime, own, tuple(found))


def exec_started(scan: Scan, oldest: float, youngest: float) -> list[Process]:
    """Processes started by an exec (parent 0, not PID 1, not the scan itself) whose age at
    the scan lies between `youngest` and `oldest` seconds, with `SLACK` either side."""
    return [
        p
        for p in scan.processes
        if p.parent == 0
        and p.pid not in (1, scan.own_pid)
        and youngest - SLACK <= scan.uptime - p.started <= oldest + SLACK
    ]


def with_descendants(scan: Scan, roots: Sequence[int]) -> list[int]:
    """`roots` and every process below them, parents first."""
    children: dict[int, list[int]] = {}
    for p in scan.processes:
        children.setdefault(p.parent, []).append(p.pid)
    order: list[int] = []
    pending = list(roots)
    while pending:
        pid = pending.pop(0)
        if pid not in order:
            order.append(pid)
            pending += children.get(pid, [])
    return order


def command_line(argv: Sequence[str]) -> bytes:
    """`/proc/<pid>/cmdline` of a process started with `argv` (each argument NUL-ended)."""
    return b"".join(part.encode() + b"\0" for part in argv)


def still_running(scan: Scan, pids: Sequence[int], before: Scan) -> list[int]:
    """Those of `pids` that a later scan still shows as the same processes (same start)."""
    then = {p.pid: p.started for p in before.processes}
    return [p.pid for p in scan.processes if p.pid in pids and then.get(p.pid) == p.started]
