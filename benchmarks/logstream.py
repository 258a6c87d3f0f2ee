"""Logs: the throughput of a followed task log, against `kubectl logs -f` of the same container.

The task runs on the **real node** (kwok's pods have no container log): BusyBox writes
`--logs-mb` MB of 1,000-byte lines to stdout at its start (`yes <999 x> | head -c N`), then
sleeps. kubelet rotates a container's log at 10 MiB and serves only the current file, and its
file holds each line with a CRI prefix (about 4% more), so the size stays below 10 MB.

- allocbridge: `GET /v1/client/fs/logs/:id?task=main&type=stdout&follow=true&origin=start`,
  what `nomad alloc logs -f` sends, read with aiohttp: Nomad's frame stream, every frame parsed
  as JSON (`raw_decode` of the stream), its data's decoded size counted from the base64 length
  (the lean client of the exec section; no base64 decode) and its `Offset` checked against the
  bytes counted before it;
- peer: the built `kubectl logs -f POD -c main` through the same API server, its stdout read
  from a pipe and counted.

Both follow the log, which never ends: each run stops once the whole log has arrived. The
figure is the throughput from the first byte to the last, so neither side's setup counts
(kubectl's process start, allocbridge's authorization and log lookup); the time to the first
byte is in the notes. Runs alternate sides, `--logs-runs` each; each figure is the median.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
import urllib.parse
from dataclasses import dataclass, field
from typing import Final

from benchmarks.harness import Bench, BenchError, Json, OperatorProcess, log
from benchmarks.population import collection, one_task_allocation, wait_running
from benchmarks.table import Row, mb, median, share_of

SECTION: Final = "Logs"
SHARE_GOAL: Final = 0.8
NAME: Final = "logs"
TASK: Final = "main"
LINE: Final = 1000  # bytes, the newline included
READ_CHUNK: Final = 1 << 16
PATIENCE: Final = 120.0


def log_bytes(megabytes: float) -> int:
    """The log's size: whole lines, below 10 MB (kubelet's rotation)."""
    if not 0 < megabytes <= 9.5:
        raise ValueError("the log must be more than 0 and at most 9.5 MB")
    return int(megabytes * 1_000_000) // LINE * LINE


def allocation(namespace: str, size: int) -> Json:
    script = f"yes {'x' * (LINE - 1)} | head -c {size}; exec sleep 100000"
    return one_task_allocation(
        NAME, namespace, job="bench-logs", group="logs", task=TASK, command=["sh", "-c", script]
    )


@dataclass(frozen=True)
class Target:
    namespace: str
    pod: str
    alloc_id: str
    size: int


async def create_target(
    bench: Bench, namespace: str, annotations: dict[str, str], size: int
) -> Target:
    """The logging allocation, in a namespace whose pods land on the real node."""
    await bench.ensure_namespace(namespace, annotations=annotations)
    await bench.api.post(collection(namespace), allocation(namespace, size))
    obj = await wait_running(bench, namespace, NAME, TASK)
    pod = (obj.get("status") or {}).get("podName") or NAME
    return Target(namespace, pod, obj["metadata"]["uid"], size)


@dataclass(frozen=True)
class Run:
    first_byte: float  # seconds from the request (or spawn) to the first byte
    streaming: float  # seconds from the first byte to the last


def decoded_size(b64: str) -> int:
    return len(b64) * 3 // 4 - b64.count("=", len(b64) - 2)


class FrameCounter:
    """Counts the data bytes of Nomad's frame stream (JSON objects one after another), read
    from offset 0: each data frame's `Offset` must be where its data ends, so a byte lost,
    repeated or out of order fails the run instead of being counted."""

    def __init__(self) -> None:
        self.received = 0
        self._text = ""
        self._decoder = json.JSONDecoder()

    def feed(self, chunk: bytes) -> None:
        self._text += chunk.decode("ascii")
        at, end = 0, len(self._text)
        while True:
            while at < end and self._text[at] in " \r\n\t":
                at += 1
            if at >= end:
                break
            try:
                frame, at_next = self._decoder.raw_decode(self._text, at)
            except json.JSONDecodeError:
                break  # an incomplete frame: wait for more
            if isinstance(frame, dict) and frame.get("Data"):
                self.received += decoded_size(frame["Data"])
                if frame.get("Offset") != self.received:
                    raise BenchError(
                        f"a frame ends at offset {frame.get('Offset')}, "
                        f"after {self.received} bytes of data"
                    )
            at = at_next
        self._text = self._text[at:]


async def through_allocbridge(bench: Bench, replica: OperatorProcess, target: Target) -> Run:
    query = urllib.parse.urlencode(
        {"task": TASK, "type": "stdout", "follow": "true", "origin": "start", "offset": "0"}
    )
    url = f"{replica.api}/v1/client/fs/logs/{target.alloc_id}?{query}"
    counter = FrameCounter()
    began = time.perf_counter()
    first = 0.0
    async with asyncio.timeout(PATIENCE), bench.http.get(url) as response:
        if response.status != 200:
            raise BenchError(f"GET {url}: {response.status} {(await response.read())[:300]!r}")
        async for chunk in response.content.iter_any():
            before = counter.received
            counter.feed(chunk)
            if before == 0 and counter.received:
                first = time.perf_counter()
            if counter.received >= target.size:
                break
    done = time.perf_counter()
    if counter.received != target.size:
        raise BenchError(f"allocbridge logs: {counter.received} of {target.size} bytes")
    return Run(first - began, done - first)


def through_kubectl(bench: Bench, target: Target) -> Run:
    argv = bench.kubectl_argv("logs", "-f", "-n", target.namespace, target.pod, "-c", TASK)
    began = time.perf_counter()
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert process.stdout is not None
    received = 0
    first = 0.0
    deadline = began + PATIENCE
    try:
        while received < target.size and time.perf_counter() < deadline:
            chunk = os.read(process.stdout.fileno(), READ_CHUNK)
            if not chunk:
                break
            if not received:
                first = time.perf_counter()
            received += len(chunk)
        done = time.perf_counter()
    finally:
        process.kill()
        _, stderr = process.communicate()
    if received != target.size:
        raise BenchError(f"kubectl logs -f: {received} of {target.size} bytes, {stderr[:300]!r}")
    return Run(first - began, done - first)


@dataclass
class Runs:
    ours: list[Run] = field(default_factory=list)
    peer: list[Run] = field(default_factory=list)


async def measure(bench: Bench, replica: OperatorProcess, target: Target, runs: int) -> list[Row]:
    found = Runs()
    log(f"logs: a warm-up run per side, then {runs} per side ({mb(target.size):.1f} MB each)")
    await through_allocbridge(bench, replica, target)
    await asyncio.to_thread(through_kubectl, bench, target)
    for round_ in range(runs):
        order = ("ours", "peer") if round_ % 2 == 0 else ("peer", "ours")
        for side in order:
            if side == "ours":
                found.ours.append(await through_allocbridge(bench, replica, target))
            else:
                found.peer.append(await asyncio.to_thread(through_kubectl, bench, target))
    return rows(found, target.size)


def rows(found: Runs, size: int) -> list[Row]:
    ours = median([run.streaming for run in found.ours])
    peer = median([run.streaming for run in found.peer])
    first_ours = median([run.first_byte for run in found.ours]) * 1000
    first_peer = median([run.first_byte for run in found.peer]) * 1000
    return [
        Row(
            SECTION,
            f"followed log throughput, {mb(size):.1f} MB from the start",
            mb(size) / ours,
            "MB/s",
            "kubectl logs -f, same container, same API server",
            mb(size) / peer,
            better="higher",
            goals=(share_of(SHARE_GOAL),),
            note=(
                f"medians of {len(found.ours)}: {ours:.3f} s vs {peer:.3f} s from the first "
                f"byte to the last; first byte after {first_ours:.0f} ms vs {first_peer:.0f} ms "
                "(kubectl's process start included); frames parsed, offsets checked, data sizes "
                "counted"
            ),
        )
    ]
