"""The scale section's floor server answers each prepared body whole, on one keep-alive
connection, and nothing else: its timings are only a floor if it sends what the list sends."""

from __future__ import annotations

import http.client
import subprocess
import sys

from benchmarks import scale
from benchmarks.table import Latencies
from benchmarks.timing import Series


def test_the_floor_server_sends_each_body_whole_on_one_connection() -> None:
    server = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.floor", "10", "300000"],
        stdout=subprocess.PIPE,
        text=True,
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


def series(ms: float) -> Series:
    return Series(Latencies.of([ms / 1000] * 10), 1000)


def test_the_floor_is_shown_beside_the_goal_without_one() -> None:
    figures = scale.Figures(
        small=10_000,
        large=50_000,
        list_small=series(10.0),
        list_large=series(80.0),
        go_small=series(4.0),
        go_large=series(30.0),
        floor_small=series(2.0),
        floor_large=series(11.0),
        empty_rss=100_000_000,
        live=(800_000_000, 5_000_000_000),
        fresh=(700_000_000, 5_000_000_000),
    )
    rows = {row.name: row for row in scale.rows(figures)}
    assert rows["list all 50,000: p50"].result == "MISSED"  # 7.5x
    shown = rows["the machine's floor: a prepared body of the 50,000 list's size"]
    assert shown.ratio == 5.5 and shown.result == ""
