"""Exec: stdout throughput of `head -c <size> /dev/zero` in a running task.

allocbridge: Nomad's exec WebSocket (`/v1/client/allocation/:id/exec`). Peer: the built
`kubectl exec` of the same command in the same container through the same API server, its
stdout read from a pipe and counted. Both paths end at kwok, which runs the command in the
pod's sandbox folder on this machine as an unprivileged user.

The client shares the two cores with the server, and Nomad's protocol carries output as base64
in JSON, which CPython decodes at about 200 MB/s here, so allocbridge is read by three clients:

- Go SDK: the official Nomad Go client's `Allocations().Exec` (`benchmarks/goclients`), what
  `nomad alloc exec` runs: the node lookup, the WebSocket, every frame decoded;
- lean: every frame is checked (a stdout data frame in the form allocbridge sends, else parsed
  as JSON) and its decoded size counted from the base64 length, as a fast client's cost;
- full: every frame parsed with `json.loads` and every stdout chunk base64-decoded, what a
  Python client pays.

The goal (0.9x kubectl) binds the server through the lean client; the Go SDK's and the Python
client's rows stay beside it without a goal, each with its own decoding ceiling.

Runs alternate (lean, kubectl, full, Go, lean, ...); each figure is the median. The time covers
the whole session: connect, the command's run, and the exit status (for Go, from the SDK call
on, without the process start; kubectl's includes its process start).
"""

from __future__ import annotations

import asyncio
import binascii
import json
import subprocess
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from allocbridge.model.execframes import OUTPUT_CHUNK
from benchmarks import golang
from benchmarks.harness import Bench, BenchError, OperatorProcess, log
from benchmarks.table import Goal, Row, mb, median, share_of

SECTION: Final = "Exec"
SHARE_GOAL: Final = 0.9
READ_CHUNK: Final = 1 << 20


@dataclass(frozen=True)
class ExecTarget:
    namespace: str
    pod: str
    alloc_id: str
    task: str = "main"


def command(size: int) -> list[str]:
    return ["head", "-c", str(size), "/dev/zero"]


STDOUT_DATA: Final = '{"stdout":{"data":"'


def decoded_size(b64: str) -> int:
    """Bytes that a base64 text decodes to, from its length and padding."""
    return len(b64) * 3 // 4 - b64.count("=", len(b64) - 2)


async def through_allocbridge(
    bench: Bench, replica: OperatorProcess, target: ExecTarget, size: int, *, decode: bool
) -> float:
    """Seconds for one session; checks that exactly `size` bytes arrived and the exit was 0."""
    query = urllib.parse.urlencode(
        {"task": target.task, "tty": "false", "command": json.dumps(command(size))}
    )
    url = f"{replica.api}/v1/client/allocation/{target.alloc_id}/exec?{query}"
    received = 0
    exit_code = None
    began = time.perf_counter()
    async with bench.http.ws_connect(url, max_msg_size=0) as ws:
        async for message in ws:
            text: str = message.data
            if not decode and text.startswith(STDOUT_DATA) and text.endswith('"}}'):
                received += decoded_size(text[len(STDOUT_DATA) : -3])
                continue
            frame = json.loads(text)
            stdout = frame.get("stdout")
            if stdout and stdout.get("data"):
                received += len(binascii.a2b_base64(stdout["data"]))
            if frame.get("exited"):
                exit_code = frame["result"].get("exit_code", 0)
                break
    seconds = time.perf_counter() - began
    if received != size or exit_code != 0:
        raise BenchError(f"allocbridge exec: {received} of {size} bytes, exit code {exit_code}")
    return seconds


def through_kubectl(bench: Bench, target: ExecTarget, size: int) -> float:
    argv = bench.kubectl_argv(
        "exec", "-n", target.namespace, target.pod, "-c", target.task, "--", *command(size)
    )
    began = time.perf_counter()
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert process.stdout is not None
    received = 0
    while chunk := process.stdout.read(READ_CHUNK):
        received += len(chunk)
    _, stderr = process.communicate()
    seconds = time.perf_counter() - began
    if received != size or process.returncode != 0:
        raise BenchError(f"kubectl exec: {received} of {size} bytes, {stderr[:300]!r}")
    return seconds


async def through_go_sdk(
    binary: Path, bench: Bench, replica: OperatorProcess, target: ExecTarget, size: int
) -> tuple[float, float]:
    """Seconds for one session of the Go SDK (which checks the size and the exit code), and
    seconds the SDK takes to decode as many frames from memory: the client's own floor."""
    args = ["-addr", replica.api, "-token", bench.client_token, "-alloc", target.alloc_id]
    args += ["-task", target.task, "-command", json.dumps(command(size)), "-bytes", str(size)]
    args += ["-frame", str(OUTPUT_CHUNK)]
    result = await golang.run(binary, "exec", *args)
    return result["seconds"][0], result["decode_seconds"]


async def measure(
    bench: Bench, replica: OperatorProcess, target: ExecTarget, size: int, runs: int
) -> list[Row]:
    lean: list[float] = []
    full: list[float] = []
    go: list[float] = []
    go_decoding: list[float] = []
    peers: list[float] = []
    binary = await golang.build()
    for run in range(runs):
        log(f"exec: run {run + 1}/{runs}, {size / 2**20:.0f} MiB each way")
        lean.append(await through_allocbridge(bench, replica, target, size, decode=False))
        peers.append(await asyncio.to_thread(through_kubectl, bench, target, size))
        full.append(await through_allocbridge(bench, replica, target, size, decode=True))
        if binary is not None:
            session, decoding = await through_go_sdk(binary, bench, replica, target, size)
            go.append(session)
            go_decoding.append(decoding)
    peer = mb(size) / median(peers)
    rows = []
    goal = (share_of(SHARE_GOAL),)
    clients: list[tuple[str, list[float], tuple[Goal, ...], str]] = [
        ("lean client", lean, goal, "frames checked, decoded sizes counted"),
        (
            "Python client",
            full,
            (),
            "no goal: json.loads + base64 decode of every frame, the client's own ceiling",
        ),
    ]
    if go:
        ceiling = mb(size) / median(go_decoding)
        note = (
            "no goal: Allocations().Exec, as nomad alloc exec; the SDK's JSON decoding of the"
            f" same frames alone, from memory: {ceiling:.0f} MB/s ({ceiling / peer:.2f} of kubectl)"
        )
        clients.insert(0, ("Nomad Go SDK", go, (), note))
    for name, seconds, goals, note in clients:
        rows.append(
            Row(
                SECTION,
                f"stdout throughput, {size / 2**20:.0f} MiB, {name}",
                mb(size) / median(seconds),
                "MB/s",
                "kubectl exec, same command, same API server",
                peer,
                better="higher",
                goals=goals,
                note=f"medians of {runs}: {median(seconds):.2f} s vs {median(peers):.2f} s; {note}",
            )
        )
    return rows
