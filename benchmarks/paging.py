"""Paging: every allocation walked with `per_page=100` (following `X-Nomad-NextToken`).

The goal binds the client Nomad users run, the official Go SDK's `Allocations().List`: its whole
walk against one unpaged list of the same allocations on the same replica, by the same client,
interleaved with the walks. The clients that only read bytes keep their rows without a goal:
their floor is the client's own cost per request (aiohttp's, in the server too). A walk is 100
round trips where the unpaged list is one, so the client's own cost per request weighs 100
times. The walk
is measured with four clients: two in Go (`benchmarks/goclients`: the official Nomad SDK that
the nomad CLI uses, and net/http with bodies only read), a lean keep-alive HTTP/1.1 client in a
few lines of asyncio, and aiohttp's client (about 0.3 ms of Python per request on this machine).
The API server's own paging (`limit=100` and `continue`) over the same objects is the other
peer; its token is read from the tail of each page without decoding the page. The Python
clients also time as many requests for an empty page of the same endpoint: the floor a walk
pays in round trips alone, with no goal of its own, beside the same unpaged list.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from kubernetes_asyncio import client

from benchmarks import golang
from benchmarks.harness import Bench, BenchError, Json, OperatorProcess, log
from benchmarks.listing import admin_client, ours
from benchmarks.table import Goal, Row, median

SECTION: Final = "Paging"
WALK_GOAL: Final = 2.0


@dataclass(frozen=True)
class PagingOptions:
    per_page: int
    walks: int


class LeanClient:
    """One keep-alive HTTP/1.1 connection: GET, read the headers and a Content-Length body."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def connect(cls, port: int) -> LeanClient:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 20)
        return cls(reader, writer)

    async def get(self, target: str, token: str) -> tuple[dict[str, str], bytes]:
        self.writer.write(
            f"GET {target} HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Nomad-Token: {token}\r\n\r\n".encode()
        )
        head = await self.reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        if not lines[0].startswith("HTTP/1.1 200"):
            raise BenchError(f"GET {target}: {lines[0]}")
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        body = await self.reader.readexactly(int(headers["content-length"]))
        return headers, body

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(OSError):
            await self.writer.wait_closed()


def _target(per_page: int, token: str) -> str:
    query = f"namespace=*&task_states=false&per_page={per_page}"
    return "/v1/allocations?" + query + (f"&next_token={token}" if token else "")


def _seen(bodies: list[bytes]) -> int:
    """Allocations in a walk's pages, counted after its clock stopped: the check that the walk
    saw everything is the benchmark's work, not the client's (the unpaged list has none)."""
    return sum(body.count(b'"ID":') for body in bodies)


async def walk_lean(client: LeanClient, per_page: int, auth: str) -> tuple[float, int]:
    """(seconds, allocations seen) for one walk on the lean client."""
    token, bodies = "", []
    began = time.perf_counter()
    for _ in range(1_000_000):
        headers, body = await client.get(_target(per_page, token), auth)
        bodies.append(body)
        token = headers.get("x-nomad-nexttoken", "")
        if not token:
            return time.perf_counter() - began, _seen(bodies)
    raise BenchError("paging never ended")


#: The same endpoint and options with a prefix no allocation has: an empty page, so timing
#: `pages` of these gives the per-request floor of a walk before any allocation is sent.
EMPTY_TARGET: Final = "/v1/allocations?namespace=*&task_states=false&prefix=ffffffff"


async def floor_lean(client: LeanClient, requests: int, auth: str) -> float:
    """Seconds for `requests` empty pages on the lean client."""
    began = time.perf_counter()
    for _ in range(requests):
        _, body = await client.get(EMPTY_TARGET, auth)
        if body != b"[]":
            raise BenchError(f"GET {EMPTY_TARGET} was not empty: {body[:100]!r}")
    return time.perf_counter() - began


async def floor_aiohttp(bench: Bench, replica: OperatorProcess, requests: int) -> float:
    """Seconds for `requests` empty pages on aiohttp's client."""
    began = time.perf_counter()
    for _ in range(requests):
        async with bench.http.get(replica.api + EMPTY_TARGET) as response:
            body = await response.read()
        if response.status != 200 or body != b"[]":
            raise BenchError(f"GET {EMPTY_TARGET}: {response.status} {body[:100]!r}")
    return time.perf_counter() - began


async def walk_ours(bench: Bench, replica: OperatorProcess, per_page: int) -> tuple[float, int]:
    """(seconds, allocations seen) for one walk through every page on aiohttp's client."""
    base = f"{replica.api}/v1/allocations?namespace=*&task_states=false&per_page={per_page}"
    token, bodies = "", []
    began = time.perf_counter()
    for _ in range(1_000_000):
        url = base + (f"&next_token={token}" if token else "")
        async with bench.http.get(url) as response:
            body = await response.read()
            if response.status != 200:
                raise BenchError(f"GET {url}: {response.status}")
            token = response.headers.get("X-Nomad-NextToken", "")
        bodies.append(body)
        if not token:
            return time.perf_counter() - began, _seen(bodies)
    raise BenchError("paging never ended")


async def walk_go(
    binary: Path, replica: OperatorProcess, options: PagingOptions, auth: str
) -> Json:
    """The Go clients' timings (see benchmarks/goclients/walk.go for the shape)."""
    args = ["-addr", replica.api, "-token", auth, "-per-page", str(options.per_page)]
    return await golang.run(binary, "walk", *args, "-walks", str(options.walks))


async def walk_kube(api: client.ApiClient, per_page: int) -> float:
    custom: Any = client.CustomObjectsApi(api)
    token = ""
    began = time.perf_counter()
    while True:
        params: dict[str, Any] = {"limit": per_page}
        if token:
            params["_continue"] = token
        response = await custom.list_cluster_custom_object(
            "allocbridge.io", "v1", "allocations", _preload_content=False, **params
        )
        async with response:
            body = await response.read()
        token = _continue_token(body)
        if not token:
            return time.perf_counter() - began


def _continue_token(body: bytes) -> str:
    """`metadata.continue`, which the API server writes after `items`, near the end."""
    tail = body[-4096:]
    marker = b'"continue":"'
    at = tail.rfind(marker)
    if at < 0:
        return ""
    start = at + len(marker)
    return tail[start : tail.index(b'"', start)].decode()


async def measure(
    bench: Bench, replica: OperatorProcess, count: int, options: PagingOptions
) -> list[Row]:
    lean = await LeanClient.connect(replica.api_port)
    auth = bench.client_token
    unpaged_target = "/v1/allocations?namespace=*&task_states=false"
    try:
        samples: dict[str, list[float]] = {
            name: [] for name in ("lean", "lean-1", "lean-0", "aiohttp", "aiohttp-1", "aiohttp-0")
        }
        pages = -(-count // options.per_page)
        unpaged = ours(bench, replica)
        await unpaged()
        await lean.get(unpaged_target, auth)
        for walk in range(options.walks):
            log(f"paging: walk {walk + 1}/{options.walks}")
            for name, result in (
                ("lean", await walk_lean(lean, options.per_page, auth)),
                ("aiohttp", await walk_ours(bench, replica, options.per_page)),
            ):
                if result[1] != count:
                    raise BenchError(f"the walk saw {result[1]} allocations, not {count}")
                samples[name].append(result[0])
            began = time.perf_counter()
            await lean.get(unpaged_target, auth)
            samples["lean-1"].append(time.perf_counter() - began)
            began = time.perf_counter()
            await unpaged()
            samples["aiohttp-1"].append(time.perf_counter() - began)
            samples["lean-0"].append(await floor_lean(lean, pages, auth))
            samples["aiohttp-0"].append(await floor_aiohttp(bench, replica, pages))
    finally:
        await lean.close()
    binary = await golang.build()
    go_result: Json | None = None
    if binary is not None:
        log("paging: Go client walks")
        go_result = await walk_go(binary, replica, options, auth)
        if go_result["seen"] != count:
            raise BenchError(f"the Go walk saw {go_result['seen']} allocations, not {count}")
    api = await admin_client(bench)
    try:
        kube_walks = []
        for walk in range(options.walks):
            log(f"paging: API server walk {walk + 1}/{options.walks}")
            kube_walks.append(await walk_kube(api, options.per_page))
    finally:
        await api.close()
    goal = Goal("ratio", "<=", WALK_GOAL, f"≤ {WALK_GOAL:g}x one unpaged list")
    ms = {name: median(values) * 1000 for name, values in samples.items()}
    rows = []
    if go_result is not None:
        for mode, label, goals, note in (
            (
                "raw",
                "Go client",
                (),
                "no goal: net/http; bodies read, not decoded: the HTTP cost alone",
            ),
            (
                "sdk",
                "Nomad Go SDK",
                (goal,),
                "Allocations().List, every stub decoded, as the nomad CLI",
            ),
        ):
            timed = go_result[mode]
            rows.append(
                Row(
                    SECTION,
                    f"walk {count:,} with per_page={options.per_page} ({pages} requests), " + label,
                    median(timed["walks"]) * 1000,
                    "ms",
                    "one unpaged list, same client",
                    median(timed["unpaged"]) * 1000,
                    goals=goals,
                    note=f"medians of {options.walks}; {note}",
                )
            )
    return [
        *rows,
        *(
            Row(
                SECTION,
                f"same walk, {client} client",
                ms[name],
                "ms",
                "one unpaged list, same client",
                ms[f"{name}-1"],
                note=f"medians of {options.walks}; no goal: bytes only{note}",
            )
            for name, client, note in (
                ("lean", "lean Python", "; keep-alive HTTP/1.1 in a few lines of asyncio"),
                ("aiohttp", "aiohttp", ""),
            )
        ),
        *(
            Row(
                SECTION,
                f"{pages} requests for an empty page (same endpoint), {client} client",
                ms[f"{name}-0"],
                "ms",
                "one unpaged list, same client",
                ms[f"{name}-1"],
                note=f"medians of {options.walks}; no goal: the walk's floor, the cost of "
                f"{pages} round trips before any allocation is sent",
            )
            for name, client in (("lean", "lean Python"), ("aiohttp", "aiohttp"))
        ),
        Row(
            SECTION,
            "same walk (lean client) vs the API server's paging",
            ms["lean"],
            "ms",
            f"API server limit={options.per_page} + continue",
            median(kube_walks) * 1000,
            note=f"medians of {options.walks}; raw kubernetes_asyncio",
        ),
    ]
