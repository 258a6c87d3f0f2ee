"""The machine's floor for the scale section's list growth: a minimal server sending one
prepared body of each list's size, timed by the same Go client.

The goal compares the list of 50,000 with the list of 10,000 (at most 5x). A body of 8 MB
stays in the CPU's caches from one request to the next and one of 40 MB does not, so the ratio
moves with the machine as much as with the server. This server does the least any server
can: one `sendall` of a contiguous body kept in memory, in a process of its own, one request
at a time on the client's keep-alive connection. Its ratio, shown beside the goal's row without
a goal of its own, is what moving the bytes alone costs: a server whose time grows with the
body as this one's does gets about the same ratio, and one gets a lower ratio only by
spending more time on every request whatever its size.

Run as `python -m benchmarks.floor SMALL LARGE`: it prints its port, then serves
`GET /small` and `GET /large` until it is killed.
"""

from __future__ import annotations

import socket
import sys
from pathlib import Path
from typing import Final

from benchmarks import golang
from benchmarks.table import Latencies
from benchmarks.timing import Series

HEAD: Final = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
NOT_FOUND: Final = b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"
START_PATIENCE: Final = 30.0


def serve(small: int, large: int) -> None:
    """Answer GETs of /small and /large on 127.0.0.1, one connection at a time."""
    # Every page written, so each body is real memory (`bytes(n)` would map the zero page).
    bodies = {b"/small": b"x" * small, b"/large": b"x" * large}
    listener = socket.create_server(("127.0.0.1", 0))
    print(listener.getsockname()[1], flush=True)
    while True:
        connection, _ = listener.accept()
        with connection:
            connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            _answer(connection, bodies)


def _answer(connection: socket.socket, bodies: dict[bytes, bytes]) -> None:
    pending = b""
    while True:
        while b"\r\n\r\n" not in pending:
            chunk = connection.recv(65536)
            if not chunk:
                return
            pending += chunk
        head, pending = pending.split(b"\r\n\r\n", 1)
        body = bodies.get(head.split(b" ", 2)[1])
        if body is None:
            connection.sendall(NOT_FOUND)
            continue
        connection.sendall(HEAD % len(body))
        connection.sendall(body)


async def measure(
    binary: Path, *, small: int, large: int, samples: int, budget: float, rounds: int = 3
) -> tuple[Series, Series]:
    """The floor server's (small, large) series: `rounds` runs of each, alternating, by one
    `goclients load` client (as the scale section times its lists), `samples` requests a side
    in all: the machine's speed moves between runs, so each size gets a share of every moment."""
    shares = [samples // rounds + (1 if run < samples % rounds else 0) for run in range(rounds)]
    argv = [sys.executable, "-m", "benchmarks.floor", str(small), str(large)]
    times: dict[str, list[float]] = {"small": [], "large": []}
    sizes = {"small": 0, "large": 0}
    async with golang.listening(argv, "the floor server", START_PATIENCE) as port:
        for share in shares:
            for name in times:
                series = await golang.one_client_series(
                    binary,
                    f"http://127.0.0.1:{port}/{name}",
                    requests=max(1, share),
                    seconds=budget / rounds,
                )
                times[name] += series.latencies.samples
                sizes[name] = series.body_bytes
    return (
        Series(Latencies.of(times["small"]), sizes["small"]),
        Series(Latencies.of(times["large"]), sizes["large"]),
    )


if __name__ == "__main__":
    serve(int(sys.argv[1]), int(sys.argv[2]))
