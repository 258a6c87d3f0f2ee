"""Free loopback ports for the local cluster's components, chosen before they start."""

from __future__ import annotations

import socket


def free_ports(count: int) -> list[int]:
    """Distinct free loopback ports (all sockets held open until every port is chosen)."""
    socks = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            socks.append(sock)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()
