"""The scale section's floor server answers each prepared body whole, on one keep-alive
connection, and nothing else: its timings are only a floor if it sends what the list sends.
(Its row in the table: `test_bench_scale.py`.)"""

from __future__ import annotations

import http.client
import subprocess
import sys

from benchmarks.harness import REPO


def test_the_floor_server_sends_each_body_whole_on_one_connection() -> None:
    server = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.floor", "10", "300000"],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        sizes = {}
        for path in ("/small", "/large", "/small"):
            connection.request("GET", path)
            response = connection.getresponse()
            sizes[path] = (response.status, len(response.read()))
        connection.request("GET", "/other")
        missing = connection.getresponse()
        assert (missing.status, missing.read()) == (404, b"")
        assert sizes == {"/small": (200, 10), "/large": (200, 300_000)}
    finally:
        server.kill()
        server.wait()
