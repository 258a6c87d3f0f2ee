"""`nomad alloc logs` end to end: the running operator's `/v1/client/fs/logs` onto the pod's
log through the real API server.

kwok plays the kubelet: its `Logs` objects name a file in the CRI log format that it serves
(and follows) as the container's log, so these tests write that file. kwok sends both streams
whatever `stream` asks for, so on this control plane the stdout/stderr split is checked only
as far as the API server goes (it accepts `stream`: the feature gate is on); the split content
itself needs a real kubelet.
"""

from __future__ import annotations

import asyncio
import base64
import json
import urllib.parse
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from running_operator import (
    Operator,
    allocation_manifest,
    http,
)

from allocbridge.cluster.connection import load_credentials
from allocbridge.cluster.podlogs import PodLogReader
from allocbridge.config import KubernetesSettings
from allocbridge_localcluster.kubectl import eventually

pytestmark = pytest.mark.cluster

LINES = [("stdout", "hello from main"), ("stderr", "a warning"), ("stdout", "second line")]


def cri_line(stream: str, text: str) -> str:
    return f"2026-11-25T12:00:00.000000000Z {stream} F {text}\n"


@dataclass(frozen=True)
class LogAlloc:
    namespace: str
    pod: str
    id: str
    file: Path

    def append(self, stream: str, text: str) -> None:
        with self.file.open("a") as out:
            out.write(cri_line(stream, text))


@pytest.fixture(scope="module")
def alloc(
    operator: Operator, kubectl: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LogAlloc]:
    """A running allocation whose container `main` has the log of LINES (kwok's `Logs`)."""
    namespace = f"logs-{uuid.uuid4().hex[:10]}"
    kubectl("create", "namespace", namespace)
    name = "logs-0"
    kubectl.apply(allocation_manifest(name, namespace))
    uid = kubectl.json("get", "allocation", name, "-n", namespace)["metadata"]["uid"]
    eventually(
        lambda: (
            operator.get(f"/v1/allocation/{uid}?namespace={namespace}")["ClientStatus"] == "running"
        ),
        timeout=60,
        what="the allocation to run",
    )
    file = tmp_path_factory.mktemp("logs") / "main.log"
    file.write_text("".join(cri_line(stream, text) for stream, text in LINES))
    kubectl.apply(
        {
            "apiVersion": "kwok.x-k8s.io/v1alpha1",
            "kind": "Logs",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"logs": [{"containers": ["main"], "logsFile": str(file), "follow": True}]},
        }
    )
    yield LogAlloc(namespace, name, uid, file)
    kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def logs_url(operator: Operator, alloc: LogAlloc, **params: str) -> str:
    query = {"task": "main", "type": "stdout", **params}
    return f"{operator.api}/v1/client/fs/logs/{alloc.id}?{urllib.parse.urlencode(query)}"


def frames_of(body: bytes) -> list[dict[str, Any]]:
    decoder = json.JSONDecoder()
    text, at, frames = body.decode(), 0, []
    while at < len(text):
        frame, at = decoder.raw_decode(text, at)
        frames.append(frame)
    return frames


def data_of(frames: list[dict[str, Any]]) -> bytes:
    return b"".join(base64.b64decode(f["Data"]) for f in frames if "Data" in f)


WHOLE = "".join(f"{text}\n" for _, text in LINES).encode()


def test_the_log_through_the_api_server(operator: Operator, alloc: LogAlloc) -> None:
    def served() -> bytes | None:
        status, body, _ = http(logs_url(operator, alloc, plain="true"))
        return body if status == 200 and body else None

    assert eventually(served, what="kwok to serve the log") == WHOLE
    status, body, _ = http(logs_url(operator, alloc))
    assert status == 200
    frames = frames_of(body)
    assert data_of(frames) == WHOLE
    assert frames[-1]["Offset"] == len(WHOLE)
    assert {f["File"] for f in frames} == {"alloc/logs/main.stdout.0"}
    _, body, _ = http(logs_url(operator, alloc, origin="end", offset="12"))
    assert data_of(frames_of(body)) == WHOLE[-12:]
    _, body, _ = http(logs_url(operator, alloc, plain="1", offset="6"))
    assert body == WHOLE[6:]


def test_errors_name_the_task(operator: Operator, alloc: LogAlloc) -> None:
    status, body, _ = http(logs_url(operator, alloc, task="nope"))
    assert (status, body) == (400, b'unknown task name "nope"')
    status, body, _ = http(logs_url(operator, alloc, type="both"))
    assert (status, body) == (400, b"must provide log type (stdout/stderr)")


async def test_the_api_server_splits_streams(kubeconfig: Path, alloc: LogAlloc) -> None:
    """The control plane runs with PodLogsQuerySplitStreams: `stream` is accepted (kwok then
    sends both streams anyway)."""
    credentials = await load_credentials(KubernetesSettings(kubeconfig=str(kubeconfig)))
    reader = PodLogReader(lambda: credentials)
    try:
        async with reader.open(
            alloc.namespace, alloc.pod, "main", follow=False, stream="Stderr"
        ) as log:
            assert log.split
            body = b"".join([chunk async for chunk in log.chunks()])
        assert b"a warning" in body
    finally:
        await reader.close()


def log_streams_open(kubectl: Any) -> float:
    """The API server's open `pods/log` requests (its long-running request gauge)."""
    metrics = kubectl("get", "--raw", "/metrics").stdout
    total = 0.0
    for line in metrics.splitlines():
        if line.startswith("apiserver_longrunning_requests{") and 'subresource="log"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


async def test_follow_streams_new_output_until_the_client_goes(
    operator: Operator, alloc: LogAlloc, kubectl: Any
) -> None:
    url = logs_url(operator, alloc, follow="true", origin="end", offset="0")
    received = bytearray()
    frames: list[dict[str, Any]] = []
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        assert response.status == 200
        decoder = json.JSONDecoder()
        pending = ""
        alloc.append("stdout", "written while followed")
        async with asyncio.timeout(60):
            while b"written while followed" not in received:
                pending += (await response.content.readany()).decode()
                while pending:
                    try:
                        frame, at = decoder.raw_decode(pending)
                    except ValueError:
                        break  # a frame cut in two: wait for the rest
                    pending = pending[at:]
                    frames.append(frame)
                    received += data_of([frame])
        assert b"hello from main" not in received, "origin=end, offset=0: only new output"
        assert log_streams_open(kubectl) >= 1
    # The client is gone: the operator's Kubernetes log stream must end with it.
    eventually(
        lambda: log_streams_open(kubectl) == 0, timeout=30, what="the pods/log stream to end"
    )
