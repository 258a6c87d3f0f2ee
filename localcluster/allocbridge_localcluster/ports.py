"""Free ports for the local cluster's components and the operators under test.

They are chosen before the process that listens on them starts, so a port must stay free in
between. Ports from the kernel's ephemeral range do not: every outgoing connection (the
operators' watches, the kubelet's, the API server's to etcd) takes one from there, and a
listener that starts a second later can find its port taken (the operator then exits with
"address already in use"). So ports come from below that range and below Kubernetes' NodePort
range (30000-32767, which kube-proxy may answer on loopback), at random, never the same one
twice in a process, and each is checked by binding it on every address.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

LOWEST = 20000
NODE_PORTS_START = 30000
EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_handed_out: set[int] = set()


def free_ports(count: int) -> list[int]:
    """`count` distinct ports that nothing listens or connects on now, from 20000 up to the
    NodePort range or the ephemeral range, whichever starts first."""
    end = _end_of_range()
    chosen: list[int] = []
    candidates = [p for p in range(LOWEST, end) if p not in _handed_out]
    random.shuffle(candidates)
    for port in candidates:
        if _bindable(port):
            chosen.append(port)
            _handed_out.add(port)
            if len(chosen) == count:
                return chosen
    raise OSError(f"fewer than {count} free ports between {LOWEST} and {end - 1}")


def _end_of_range() -> int:
    """Where the NodePort range or the ephemeral range starts, whichever is first."""
    try:
        low = int(EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return NODE_PORTS_START
    return max(min(low, NODE_PORTS_START), LOWEST + 1000)


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True
