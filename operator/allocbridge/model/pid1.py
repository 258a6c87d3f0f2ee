"""Which process a signal sent from inside a container reaches, by Linux's rules for PID 1.

Kubernetes starts each container in its own PID namespace, where the main process is PID 1.
For PID 1 of a namespace, the kernel drops every signal sent from inside that namespace whose
handler is the default one: SIGKILL and SIGSTOP always (they cannot be caught), any other signal
unless PID 1 catches or blocks it (a blocked signal stays pending until the process takes it, as
tini and dumb-init do to forward signals to their child). `kill(-1)` instead reaches every
process of the namespace except PID 1 and the sender, i.e. the workload below an init or a
wrapper shell. The lifecycle actions read `/proc/1/status` and `/proc/1/task/1/children` in the
container and use `route` to choose PID 1, -1, or a clear error instead of a silent no-op.
"""

from __future__ import annotations

from dataclasses import dataclass

SIGKILL, SIGTERM, SIGCHLD, SIGSTOP = 9, 15, 17, 19

#: The command whose output `parse` reads: PID 1's status, then its children (one line).
PROBE = ("cat", "/proc/1/status", "/proc/1/task/1/children")


def _mask(value: str) -> frozenset[int]:
    """Signal numbers set in a /proc hexadecimal mask (bit N-1 is signal N)."""
    try:
        bits = int(value.strip(), 16)
    except ValueError:
        return frozenset()
    return frozenset(n + 1 for n in range(bits.bit_length()) if bits >> n & 1)


@dataclass(frozen=True)
class Pid1:
    """What /proc says about a container's PID 1."""

    name: str
    caught: frozenset[int]
    blocked: frozenset[int]
    children: tuple[int, ...] | None  # None when the kernel does not offer the children file

    def receives(self, signum: int) -> bool:
        """Whether a signal sent to PID 1 from inside its namespace reaches it."""
        if signum in (SIGKILL, SIGSTOP):
            return False
        return signum in self.caught or signum in self.blocked

    @property
    def supervises(self) -> bool:
        """Whether PID 1 has a workload below it (an init or a wrapper shell)."""
        if self.children is not None:
            return bool(self.children)
        return SIGCHLD in self.caught or SIGCHLD in self.blocked


def parse(output: str, children_readable: bool) -> Pid1:
    """Read the output of `PROBE`; `children_readable` is False when cat could not open it."""
    fields: dict[str, str] = {}
    rest: list[str] = []
    for line in output.splitlines():
        key, sep, value = line.partition(":")
        if sep and key and not key[0].isdigit():
            fields[key.strip()] = value.strip()
        elif line.strip():
            rest.append(line)
    children: tuple[int, ...] | None = None
    if children_readable:
        children = tuple(int(p) for line in rest for p in line.split() if p.isdigit())
    return Pid1(
        name=fields.get("Name", ""),
        caught=_mask(fields.get("SigCgt", "0")),
        blocked=_mask(fields.get("SigBlk", "0")),
        children=children,
    )


def route(pid1: Pid1, signum: int) -> str | None:
    """The `kill` target that delivers `signum` to the task: "1", "-1", or None if nothing can.

    PID 1 when it takes the signal (it handles it, or forwards it as an init does); otherwise
    every process below PID 1, when there are some; otherwise the signal cannot be delivered.
    """
    if pid1.receives(signum):
        return "1"
    if pid1.supervises:
        return "-1"
    return None
