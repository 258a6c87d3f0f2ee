"""`nomad alloc exec` end to end: the exec WebSocket of the running operator, onto the pod's exec
stream through the real API server and the real node's kubelet and containerd: the commands run
inside the task's container (its own PID namespace), as they do on any cluster.

Clients: aiohttp for most tests, the `websockets` package for one written without the server's
helpers, and `PodExecutor` directly for the Kubernetes side (v5 and the v4 fallback).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import signal
import socket
import struct
import time
import urllib.parse
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from kubernetes_asyncio.client import VersionApi
from running_operator import (
    Operator,
    http,
    real_node_annotations,
    service_account_kubeconfig,
)

from allocbridge import eventloop
from allocbridge.cluster.connection import Credentials, load_credentials
from allocbridge.cluster.podexec import (
    PROTOCOL_V4,
    PROTOCOL_V5,
    Exited,
    Output,
    PodExecutor,
)
from allocbridge.config import KubernetesSettings
from allocbridge_localcluster.kubectl import eventually

pytestmark = pytest.mark.cluster

TEN_MIB = 10 * 1024 * 1024
CHUNK_LIMIT = 32 * 1024
ALL_BYTES = bytes(range(256))


@dataclass(frozen=True)
class Alloc:
    namespace: str
    name: str
    id: str
    node_id: str


@dataclass
class Outcome:
    """Everything one session sent back, in order."""

    stdout: bytearray = field(default_factory=bytearray)
    stderr: bytearray = field(default_factory=bytearray)
    kinds: list[str] = field(default_factory=list)  # stdout, stderr, stdout-close, exited, ...
    chunk_sizes: list[int] = field(default_factory=list)
    exit_code: int | None = None
    close_code: int | None = None
    close_reason: str = ""

    def add(self, frame: dict[str, Any]) -> None:
        if not frame:
            self.kinds.append("heartbeat")
            return
        for stream, target in (("stdout", self.stdout), ("stderr", self.stderr)):
            if stream in frame:
                if frame[stream].get("data"):
                    data = base64.b64decode(frame[stream]["data"])
                    target.extend(data)
                    self.chunk_sizes.append(len(data))
                    self.kinds.append(stream)
                if frame[stream].get("close"):
                    self.kinds.append(f"{stream}-close")
        if frame.get("exited"):
            self.exit_code = frame["result"].get("exit_code", 0)
            self.kinds.append("exited")


# -- fixtures ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def alloc(operator: Operator, kubectl: Any, cluster: Any) -> Iterator[Alloc]:
    """One running allocation for the module, on the real node: `main` (docker), `raw`
    (raw_exec) and `init`, an ephemeral prestart task that has completed (so it is not
    running)."""
    namespace = f"exec-{uuid.uuid4().hex[:10]}"
    kubectl.apply(
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": namespace, "annotations": real_node_annotations(cluster)},
        }
    )
    eventually(
        lambda: kubectl("get", "sa", "default", "-n", namespace, check=False).returncode == 0,
        what="the namespace's default ServiceAccount",
    )
    name = "shell-0"
    kubectl.apply(
        {
            "apiVersion": "allocbridge.io/v1",
            "kind": "Allocation",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "job": {"id": "shell", "type": "service"},
                "taskGroup": {"name": "g"},
                "tasks": [
                    {
                        "name": "init",
                        "driver": "docker",
                        "lifecycle": {"hook": "prestart"},
                        "config": {"image": "busybox:1.37"},
                    },
                    {
                        "name": "main",
                        "driver": "docker",
                        "config": {"image": "busybox:1.37", "command": "sleep", "args": ["3600"]},
                    },
                    {
                        "name": "raw",
                        "driver": "raw_exec",
                        "config": {"command": "/bin/sh", "args": ["-c", "sleep 3600"]},
                    },
                ],
            },
        }
    )
    uid = kubectl.json("get", "allocation", name, "-n", namespace)["metadata"]["uid"]

    def running() -> dict[str, Any] | None:
        wire: dict[str, Any] = operator.get(f"/v1/allocation/{uid}?namespace={namespace}")
        states = {task: s["State"] for task, s in (wire.get("TaskStates") or {}).items()}
        wanted = {"init": "dead", "main": "running", "raw": "running"}
        return wire if wire["ClientStatus"] == "running" and states == wanted else None

    wire = eventually(running, timeout=60, what="the allocation to run")
    yield Alloc(namespace, name, uid, wire["NodeID"])
    kubectl("delete", "namespace", namespace, "--wait=false", check=False)


@pytest.fixture
async def client() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


@pytest.fixture(autouse=True)
def no_session_left_open(operator: Operator) -> Iterator[None]:
    """Every test must leave no exec session behind on the server."""
    yield
    eventually(lambda: operator.open_exec_sessions() == 0, timeout=20, what="no open exec session")


def exec_sessions_gauge(operator: Operator) -> float:
    _, body, _ = http(operator.ops + "/metrics")
    for line in body.decode().splitlines():
        if line.startswith("allocbridge_exec_sessions "):
            return float(line.split()[1])
    raise AssertionError("no allocbridge_exec_sessions metric")


# -- helpers ----------------------------------------------------------------------------------


def exec_url(
    operator: Operator,
    alloc_id: str,
    *,
    task: str | None = "main",
    command: list[str] | str | None = None,
    **params: str,
) -> str:
    query: dict[str, str] = dict(params)
    if task is not None:
        query["task"] = task
    if command is not None:
        query["command"] = command if isinstance(command, str) else json.dumps(command)
    base = "ws" + operator.api.removeprefix("http")
    return f"{base}/v1/client/allocation/{alloc_id}/exec?{urllib.parse.urlencode(query)}"


def stdin(data: bytes) -> dict[str, Any]:
    return {"stdin": {"data": base64.b64encode(data).decode()}}


STDIN_CLOSE = {"stdin": {"close": True}}


async def collect(
    ws: aiohttp.ClientWebSocketResponse, outcome: Outcome | None = None, seconds: float = 60
) -> Outcome:
    """Read frames until the server closes the WebSocket."""
    outcome = outcome or Outcome()
    async with asyncio.timeout(seconds):
        while True:
            message = await ws.receive()
            if message.type is aiohttp.WSMsgType.TEXT:
                outcome.add(json.loads(message.data))
            elif message.type is aiohttp.WSMsgType.CLOSE:
                outcome.close_code, outcome.close_reason = message.data, message.extra or ""
                await ws.close()
                return outcome
            else:
                outcome.close_code = ws.close_code
                return outcome


async def read_until(
    ws: aiohttp.ClientWebSocketResponse, outcome: Outcome, done: Any, seconds: float = 30
) -> None:
    """Read frames into `outcome` until `done(outcome)` holds."""
    async with asyncio.timeout(seconds):
        while not done(outcome):
            message = await ws.receive()
            assert message.type is aiohttp.WSMsgType.TEXT, (message.type, message.extra)
            outcome.add(json.loads(message.data))


async def run(
    client: aiohttp.ClientSession, url: str, frames: tuple[dict[str, Any], ...] = ()
) -> Outcome:
    async with client.ws_connect(url) as ws:
        for frame in frames:
            await ws.send_str(json.dumps(frame))
        return await collect(ws)


async def refusal(client: aiohttp.ClientSession, url: str) -> tuple[int | None, str]:
    """The close code and reason of a session the server refuses after the upgrade."""
    outcome = await run(client, url)
    assert outcome.kinds == [], outcome
    return outcome.close_code, outcome.close_reason


def processes_with(marker: str) -> list[int]:
    """PIDs on this machine whose command line holds `marker`, each checked to run in a PID
    namespace other than this test's (inside a container)."""
    ours = os.readlink("/proc/self/ns/pid")
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
                if marker.encode() in cmdline and b"pytest" not in cmdline:
                    assert os.readlink(f"/proc/{entry}/ns/pid") != ours, cmdline
                    found.append(int(entry))
            except OSError:
                continue
    return found


# -- streams and exit codes -------------------------------------------------------------------


async def test_stdout_stderr_and_exit_code_zero(
    operator: Operator, alloc: Alloc, client: aiohttp.ClientSession
) -> None:
    url = exec_url(operator, alloc.id, command=["sh", "-c", "echo out; echo err >&2"])
    outcome = await run(client, url)
    assert (bytes(outcome.stdout), bytes(outcome.stderr)) == (b"out\n", b"err\n")
    assert outcome.exit_code == 0
    # Both streams close, then the exit frame is the last before a normal close.
    assert sorted(outcome.kinds[-3:-1]) == ["stderr-close", "stdout-close"]
    assert outcome.kinds[-1] == "exited"
    assert outcome.close_code == aiohttp.WSCloseCode.OK


async def test_non_zero_exit_code(
    operator: Operator, alloc: Alloc, client: aiohttp.ClientSession
) -> None:
    url = exec_url(operator, alloc.id, command=["sh", "-c", "echo failing >&2; exit 7"])
    outcome = await run(client, url)
    assert outcome.exit_code == 7 and bytes(outcome.stderr) == b"failing\n"
    assert outcome.close_code == aiohttp.WSCloseCode.OK


async def test_stdin_round_trip_is_byte_exact(
    operator: Operator, alloc: Alloc, client: aiohttp.ClientSession
) -> None:
    data = ALL_BYTES * 64  # 16 KiB, every byte value, in several frames
    url = exec_url(operator, alloc.id, command=["head", "-c", str(len(data))])
    frames = tuple(stdin(data[i : i + 5000]) for i in range(0, len(data), 5000))
    outcome = await run(client, url, (*frames, {}, STDIN_CLOSE))
    assert bytes(outcome.stdout) == data
    assert outcome.exit_code == 0


async def test_stdin_half_close_ends_cat(
    operator: Operator, alloc: Alloc, client: aiohttp.ClientSession
) -> None:
    data = b"hello\x00world\n" * 1000
    url = exec_url(operator, alloc.id, command=["cat"])
    outcome = await run(client, url, (stdin(data[:7000]), stdin(data[7000:]), STDIN_CLOSE))
    assert bytes(outcome.stdout) == data
    assert outcome.exit_code == 0


async def test_ten_mebibytes_of_output_arrive_byte_exact(
    operator: Operator, alloc: Alloc, client: aiohttp.ClientSession
) -> None:
    # A deterministic, order-sensitive stream: the decimal numbers 1, 2, 3, ... one per line.
    expected = "".join(f"{i}\n" for i in range(1, 1_500_001)).encode()[:TEN_MIB]
    command = ["sh", "-c", f"seq 1 1500000 | head -c {TEN_MIB}"]
    started = time.monotonic()
    outcome = await run(client, exec_url(operator, alloc.id, command=command))
    assert len(outcome.stdout) == TEN_MIB
    assert hashlib.sha256(outcome.stdout).digest() == hashlib.sha256(expected).digest()
    assert outcome.exit_code == 0
    assert max(outcome.chunk_sizes) <= CHUNK_LIMIT
    print(f"10 MiB in {time.monotonic() - started:.2f}s, {len(outcome.chunk_sizes)} frames")


async def test_a_client_that_reads_late_still_gets_the_tail_and_the_exit_code(
    operator: Operator, alloc: Alloc, client: aiohttp.ClientSession
) -> None:
    """A slow link: the command ends while most of its output still waits in the connection's
    buffers, and the client keeps sending heartbeats (the Nomad SDK sends one every 10 s) before
    it has read that far. The server must not drop the connection under a client that is still
    reading: a frame that reaches a closed socket is answered with a reset, and a reset throws
    away whatever the client's kernel still held, the tail and the exit code with it."""
    # More than the client library buffers for itself (64 KiB), less than the connection holds.
    size = 1024 * 1024
    expected = "".join(f"{i}\n" for i in range(1, 200_001)).encode()[:size]
    command = ["sh", "-c", f"seq 1 200000 | head -c {size}"]
    outcome = Outcome()
    async with client.ws_connect(exec_url(operator, alloc.id, command=command)) as ws:
        await read_until(ws, outcome, lambda o: len(o.stdout) > 0)
        for _ in range(8):  # 4 s of heartbeats and no reading
            await asyncio.sleep(0.5)
            await ws.send_str("{}")
        await collect(ws, outcome)
    assert len(outcome.stdout) == size
    assert hashlib.sha256(outcome.stdout).digest() == hashlib.sha256(expected).digest()
    assert outcome.exit_code == 0
    assert outcome.close_code == 1000


async def test_tty_session_with_a_resize(
    operator: Operator, alloc: Alloc, client: aiohttp.ClientSession
) -> None:
    command = ["sh", "-c", "while read line; do stty size; echo err >&2; done"]
    async with client.ws_connect(exec_url(operator, alloc.id, command=command, tty="true")) as ws:
        await ws.send_str(json.dumps({"tty_size": {"height": 37, "width": 91}}))
        outcome = Outcome()
        # The resize and the input travel separately; ask again until the new size shows.
        async with asyncio.timeout(30):
            while b"37 91" not in outcome.stdout:
                answers = outcome.stdout.count(b"err")
                await ws.send_str(json.dumps(stdin(b"size?\n")))
                await read_until(ws, outcome, lambda o, n=answers: o.stdout.count(b"err") > n)
        await ws.send_str(json.dumps(stdin(b"\x04")))  # ^D: end of input on a terminal
        await collect(ws, outcome)
    assert outcome.exit_code == 0
    assert b"err" in outcome.stdout and not outcome.stderr  # a terminal merges stderr


# -- errors as close frames -------------------------------------------------------------------


async def test_unknown_task(
    operator: Operator, alloc: Alloc, client: aiohttp.ClientSession
) -> None:
    url = exec_url(operator, alloc.id, task="nope", command=["true"])
    assert await refusal(client, url) == (1008, 'unknown task name "nope"')


async def test_unknown_allocation(operator: Operator, client: aiohttp.ClientSession) -> None:
    unknown = str(uuid.uuid4())
    url = exec_url(operator, unknown, command=["true"])
    assert await refusal(client, url) == (1008, f'Unknown allocation "{unknown}"')


async def test_task_that_is_not_running(
    operator: Operator, alloc: Alloc, client: aiohttp.ClientSession
) -> None:
    url = exec_url(operator, alloc.id, task="init", command=["true"])
    assert await refusal(client, url) == (1008, 'task "init" is not running.')


@pytest.mark.parametrize(
    ("params", "reason"),
    [
        ({"command": "echo hi"}, "failed to marshal command into json: "),
        ({"command": '"echo"'}, "failed to marshal command into json: json: cannot unmarshal"),
        ({"command": "[]"}, "command is not present"),
        ({}, "failed to marshal command into json: unexpected end of JSON input"),
        ({"command": '["true"]', "tty": "maybe"}, "tty value is not a boolean"),
        ({"command": '["true"]', "task": ""}, "must provide task name"),
    ],
)
async def test_malformed_requests(
    operator: Operator,
    alloc: Alloc,
    client: aiohttp.ClientSession,
    params: dict[str, str],
    reason: str,
) -> None:
    task = params.pop("task", "main")
    url = exec_url(operator, alloc.id, task=task, **params)
    code, text = await refusal(client, url)
    assert code == 1008 and text.startswith(reason), (code, text)


async def test_command_that_cannot_start_is_an_internal_error(
    operator: Operator, alloc: Alloc, client: aiohttp.ClientSession
) -> None:
    url = exec_url(operator, alloc.id, command=["no-such-command-here"])
    code, text = await refusal(client, url)
    assert code == 1011 and "executable file not found" in text, (code, text)


async def test_short_allocation_id(operator: Operator, client: aiohttp.ClientSession) -> None:
    url = exec_url(operator, "8c3d9a1f", command=["true"])
    code, text = await refusal(client, url)
    assert (code, text) == (1008, "alloc lookup failed: index error: UUID must be 36 characters")


def test_plain_get_answers_a_readable_400(operator: Operator, alloc: Alloc) -> None:
    path = exec_url(operator, alloc.id, command=["true"]).split("/v1/", 1)[1]
    status, body, headers = http(f"{operator.api}/v1/{path}")
    assert status == 400 and b"WebSocket" in body
    assert headers["Content-Type"].startswith("text/plain")
    status, body, _ = http(f"{operator.api}/v1/{path}", method="POST", body={})
    assert (status, body) == (405, b"Invalid method")


async def test_cross_origin_upgrade_is_refused(
    operator: Operator, alloc: Alloc, client: aiohttp.ClientSession
) -> None:
    url = exec_url(operator, alloc.id, command=["true"])
    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
        await client.ws_connect(url, headers={"Origin": "http://elsewhere.example"})
    assert refused.value.status == 403
    same = "http://" + operator.api.removeprefix("http://")
    outcome = await run_with_headers(client, url, {"Origin": same})
    assert outcome.exit_code == 0


async def run_with_headers(
    client: aiohttp.ClientSession, url: str, headers: dict[str, str]
) -> Outcome:
    async with client.ws_connect(url, headers=headers) as ws:
        return await collect(ws)


# -- the handshake frame ----------------------------------------------------------------------


async def test_handshake_frame_carries_the_token(
    operator: Operator, alloc: Alloc, client: aiohttp.ClientSession
) -> None:
    url = exec_url(operator, alloc.id, command=["echo", "shaken"], ws_handshake="true")
    outcome = await run(client, url, ({"version": 1, "auth_token": "some-token"},))
    assert bytes(outcome.stdout) == b"shaken\n" and outcome.exit_code == 0


@pytest.mark.parametrize(
    ("frame", "header", "reason"),
    [
        ({"version": 2, "auth_token": ""}, None, "unexpected handshake value: 2"),
        ({"version": 1, "auth_token": "a"}, "b", "handshake auth token mismatched auth header"),
    ],
)
async def test_bad_handshakes_close_with_1008(
    operator: Operator,
    alloc: Alloc,
    client: aiohttp.ClientSession,
    frame: dict[str, Any],
    header: str | None,
    reason: str,
) -> None:
    url = exec_url(operator, alloc.id, command=["true"], ws_handshake="true")
    headers = {"X-Nomad-Token": header} if header else {}
    async with client.ws_connect(url, headers=headers) as ws:
        await ws.send_str(json.dumps(frame))
        outcome = await collect(ws)
    assert outcome.close_code == 1008 and outcome.close_reason.startswith(reason)


# -- sessions: disconnects, concurrency, counting ---------------------------------------------


@pytest.mark.parametrize("how", ["close-frame", "dropped-connection"])
async def test_client_that_leaves_mid_stream_ends_the_process_and_the_session(
    operator: Operator, alloc: Alloc, cluster: Any, how: str
) -> None:
    # It reads stdin: on a real kubelet the end of the stream is its end of input. (One that
    # does not read it is ended by the operator: the next test.)
    marker = f"tick-{uuid.uuid4().hex[:8]}"
    command = ["sh", "-c", f"echo {marker}; echo {marker}; cat; echo {marker}-end"]
    session = aiohttp.ClientSession()
    try:
        ws = await session.ws_connect(exec_url(operator, alloc.id, command=command))
        outcome = Outcome()
        await read_until(ws, outcome, lambda o: o.stdout.count(marker.encode()) >= 2)
        assert operator.open_exec_sessions() == 1 and exec_sessions_gauge(operator) == 1
        assert processes_with(marker), "the command should run in the task's container"
        if how == "close-frame":
            await ws.close()
    finally:
        await session.close()  # without a close frame: the TCP connection just goes away
    eventually(lambda: operator.open_exec_sessions() == 0, timeout=20, what="the session to end")
    assert exec_sessions_gauge(operator) == 0
    eventually(lambda: not processes_with(marker), timeout=30, what="the command to end")


def container_processes(kubectl: Any, alloc: Alloc) -> str:
    """`ps` in the task's container, through an exec of its own."""
    done = kubectl(
        "exec", "-n", alloc.namespace, alloc.name, "-c", "main", "--", "ps", "-o", "args"
    )
    return str(done.stdout)


@pytest.mark.parametrize("tty", [False, True])
def test_a_client_that_vanishes_mid_output_leaves_no_process_behind(
    operator: Operator, alloc: Alloc, kubectl: Any, tty: bool
) -> None:
    """The client's TCP connection is reset (SO_LINGER 0, no close frame) while the command
    writes output and reads no stdin: containerd would keep such a command running for good,
    so the operator ends it (SIGHUP, then SIGKILL) through a second exec. The session count
    drops once the operator has closed the Kubernetes stream, and the command is gone from
    the container, as `ps` there shows."""
    from websockets.sync.client import connect

    marker = f"spin-{uuid.uuid4().hex[:8]}"
    command = ["sh", "-c", f"while :; do echo {marker}; sleep 0.05; done"]
    url = exec_url(operator, alloc.id, command=command, tty="true" if tty else "false")
    with connect(url, open_timeout=30) as ws:
        seen = b""
        deadline = time.monotonic() + 30
        while seen.count(marker.encode()) < 3 and time.monotonic() < deadline:
            frame = json.loads(ws.recv(timeout=30))
            seen += base64.b64decode((frame.get("stdout") or {}).get("data") or "")
        assert seen.count(marker.encode()) >= 3, seen
        assert operator.open_exec_sessions() == 1
        assert marker in container_processes(kubectl, alloc)
        ws.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        ws.socket.close()  # a reset: the client is gone without a word
    vanished = time.monotonic()
    eventually(lambda: operator.open_exec_sessions() == 0, timeout=30, what="the session to end")
    eventually(
        lambda: marker not in container_processes(kubectl, alloc),
        timeout=30,
        what="the command to end in the container",
    )
    assert not processes_with(marker)
    print(f"command gone {time.monotonic() - vanished:.1f}s after the reset")


async def test_several_sessions_at_once(
    operator: Operator, alloc: Alloc, client: aiohttp.ClientSession
) -> None:
    count = 4
    url = exec_url(operator, alloc.id, command=["head", "-c", "6"])
    sockets = [await client.ws_connect(url) for _ in range(count)]
    try:
        # All open before any gets input: each waits for its own stdin.
        assert operator.open_exec_sessions() == count
        for i in reversed(range(count)):
            await sockets[i].send_str(json.dumps(stdin(f"sess-{i}".encode())))
        outcomes = await asyncio.gather(*(collect(ws) for ws in sockets))
    finally:
        for ws in sockets:
            await ws.close()
    for i, outcome in enumerate(outcomes):
        assert (bytes(outcome.stdout), outcome.exit_code) == (f"sess-{i}".encode(), 0)


async def test_heartbeats_are_ignored(
    operator: Operator, alloc: Alloc, client: aiohttp.ClientSession
) -> None:
    url = exec_url(operator, alloc.id, command=["head", "-c", "2"])
    outcome = await run(client, url, ({}, {}, {"unknown": 1}, stdin(b"ok"), {}))
    assert bytes(outcome.stdout) == b"ok" and outcome.exit_code == 0


@pytest.fixture
def replica(alloc: Alloc, cluster: Any, kubectl: Any, tmp_path: Path) -> Iterator[Operator]:
    """A replica of its own (watching only this module's namespace), for a test to stop."""
    kubeconfig = service_account_kubeconfig(kubectl, cluster.kubeconfig, tmp_path / "kubeconfig")
    replica = Operator(tmp_path, kubeconfig, namespaces=(alloc.namespace,))
    replica.start()
    try:
        eventually(lambda: http(f"{replica.api}/v1/allocation/{alloc.id}")[0] == 200, what="sync")
        yield replica
    finally:
        replica.stop()


async def test_shutdown_closes_open_sessions_with_1001(
    replica: Operator, alloc: Alloc, client: aiohttp.ClientSession
) -> None:
    marker = f"still-here-{uuid.uuid4().hex[:8]}"
    command = ["sh", "-c", f"echo {marker}; cat"]  # ends at the end of its input
    async with client.ws_connect(exec_url(replica, alloc.id, command=command)) as ws:
        outcome = Outcome()
        await read_until(ws, outcome, lambda o: marker.encode() in o.stdout)
        assert replica.open_exec_sessions() == 1
        process = replica.process
        assert process is not None
        signalled = time.monotonic()
        process.send_signal(signal.SIGTERM)
        # Sessions outlive the drain period (1 s here), then close as the listener stops.
        await collect(ws, outcome)
    assert (outcome.close_code, outcome.close_reason) == (1001, "allocbridge is shutting down")
    assert await asyncio.to_thread(process.wait, 30) == 0
    # Open sessions do not hold the stop up to the in-flight timeout (10 s).
    assert time.monotonic() - signalled < 8
    eventually(lambda: not processes_with(marker), timeout=30, what="the command to end")


async def test_shutdown_cuts_the_wait_for_a_late_readers_close(
    replica: Operator, alloc: Alloc, client: aiohttp.ClientSession
) -> None:
    """A session whose command has ended, waiting for the close frame of a client that has not
    read that far (see the late reader above), does not hold the stop up either."""
    command = ["sh", "-c", "seq 1 200000 | head -c 1048576"]
    async with client.ws_connect(exec_url(replica, alloc.id, command=command)) as ws:
        await read_until(ws, Outcome(), lambda o: len(o.stdout) > 0)
        await asyncio.sleep(2.0)  # the command ends; the server has sent all it can and waits
        assert replica.open_exec_sessions() == 1
        process = replica.process
        assert process is not None
        signalled = time.monotonic()
        process.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(process.wait, 60) == 0
        stopped_in = time.monotonic() - signalled
    assert stopped_in < 8


# -- a client written independently: the websockets package ------------------------------------


async def test_websockets_client(operator: Operator, alloc: Alloc) -> None:
    from websockets.asyncio.client import connect
    from websockets.exceptions import ConnectionClosed

    query = urllib.parse.urlencode(
        {"task": "main", "command": '["sh","-c","printf hi; printf oops >&2; exit 3"]'}
    )
    url = f"ws://{operator.api.removeprefix('http://')}/v1/client/allocation/{alloc.id}/exec"
    received: list[dict[str, Any]] = []
    async with connect(f"{url}?{query}", open_timeout=30) as ws:
        await ws.send("{}")
        try:
            async for message in ws:
                received.append(json.loads(message))
        except ConnectionClosed as closed:
            raise AssertionError(f"closed {closed!r} after {received}") from closed
        close_code = ws.close_code
    out = b"".join(
        base64.b64decode(f["stdout"]["data"]) for f in received if "data" in f.get("stdout", {})
    )
    err = b"".join(
        base64.b64decode(f["stderr"]["data"]) for f in received if "data" in f.get("stderr", {})
    )
    assert (out, err) == (b"hi", b"oops")
    assert received[-1] == {"exited": True, "result": {"exit_code": 3}}
    assert {"stdout": {"close": True}} in received and {"stderr": {"close": True}} in received
    assert close_code == 1000


# -- the node lookup the Go client makes before exec ------------------------------------------


def test_node_lookup_answers_404_so_the_go_client_falls_back(
    operator: Operator, alloc: Alloc
) -> None:
    assert alloc.node_id
    status, body, _ = http(f"{operator.api}/v1/node/{alloc.node_id}")
    assert (status, body) == (404, b"node not found")
    status, body, _ = http(f"{operator.api}/v1/node/{alloc.node_id}", method="PUT", body={})
    assert (status, body) == (405, b"Invalid method")


# -- the Kubernetes side: v5, and the v4 fallback ---------------------------------------------


async def test_pod_exec_v5_and_v4(alloc: Alloc, kubeconfig: Path) -> None:
    credentials = await load_credentials(KubernetesSettings(kubeconfig=str(kubeconfig)))
    for protocols, expected, can_close in (
        ((PROTOCOL_V5, PROTOCOL_V4), PROTOCOL_V5, True),
        ((PROTOCOL_V4,), PROTOCOL_V4, False),
    ):
        executor = PodExecutor(lambda: credentials, protocols=protocols)
        try:
            command = ["sh", "-c", "head -c 3; echo; echo e >&2; exit 4"]
            async with executor.open(alloc.namespace, alloc.name, "main", command, tty=False) as s:
                assert s.protocol == expected
                await s.send_stdin(b"abc")
                assert await s.close_stdin() is can_close
                events = [event async for event in s.events()]
        finally:
            await executor.close()
        out = b"".join(e.data for e in events if isinstance(e, Output) and e.channel == 1)
        err = b"".join(e.data for e in events if isinstance(e, Output) and e.channel == 2)
        assert (out, err, events[-1]) == (b"abc\n", b"e\n", Exited(4)), expected


class ConnectProxy:
    """An HTTP proxy on loopback that answers CONNECT and then carries the bytes both ways, as a
    corporate proxy in front of an API server does; it records the targets it was asked for."""

    def __init__(self) -> None:
        self.targets: list[str] = []
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> str:
        self._server = await asyncio.start_server(self._tunnel, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()

    async def _tunnel(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        method, target, _ = head.split(b"\r\n", 1)[0].decode().split(" ", 2)
        if method != "CONNECT":
            writer.write(b"HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n")
            writer.close()
            return
        self.targets.append(target)
        host, _, port = target.rpartition(":")
        up_reader, up_writer = await asyncio.open_connection(host, int(port))
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")

        async def carry(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            try:
                while data := await source.read(65536):
                    sink.write(data)
                    await sink.drain()
            except ConnectionError:
                pass
            finally:
                sink.close()

        await asyncio.gather(carry(reader, up_writer), carry(up_reader, writer))


async def test_pod_exec_through_the_environments_proxy(
    alloc: Alloc, kubeconfig: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With HTTPS_PROXY set (and NO_PROXY not naming the API server) the stream goes through
    the proxy, on aiohttp's connection (`cluster.execlink.AiohttpLink`), as the operator's other
    requests to the API server do; without it, straight to the API server."""
    for name in ("NO_PROXY", "no_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    credentials = await load_credentials(KubernetesSettings(kubeconfig=str(kubeconfig)))
    api_server = urllib.parse.urlsplit(credentials.server).netloc
    tunnel = ConnectProxy()
    async with tunnel as proxy_url:
        monkeypatch.setenv("HTTPS_PROXY", proxy_url)
        answer = await _echo_and_exit(alloc, credentials, b"proxy", 6)
        assert tunnel.targets and set(tunnel.targets) == {api_server}
    assert answer == (b"proxy\n", b"e\n", Exited(6))


async def _echo_and_exit(
    alloc: Alloc, credentials: Credentials, data: bytes, status: int
) -> tuple[bytes, bytes, object]:
    """Exec a shell that echoes `data` from stdin, writes `e` to stderr and exits with
    `status`: its stdout, its stderr and its last event."""
    executor = PodExecutor(lambda: credentials)
    try:
        command = ["sh", "-c", f"head -c {len(data)}; echo; echo e >&2; exit {status}"]
        async with executor.open(alloc.namespace, alloc.name, "main", command, tty=False) as s:
            await s.send_stdin(data)
            await s.close_stdin()
            events = [event async for event in s.events()]
    finally:
        await executor.close()
    out = b"".join(e.data for e in events if isinstance(e, Output) and e.channel == 1)
    err = b"".join(e.data for e in events if isinstance(e, Output) and e.channel == 2)
    return out, err, events[-1]


def _reached_by_another_address(kubeconfig: Path, copy: Path, server_name: str | None) -> Path:
    """A copy of the kubeconfig that reaches the API server at 127.0.0.2 (loopback, and the
    API server listens on every address while a real node runs, but no name on its
    certificate), with `server_name` as its clusters' `tls-server-name` when given."""
    document = yaml.safe_load(kubeconfig.read_text())
    for entry in document["clusters"]:
        port = urllib.parse.urlsplit(entry["cluster"]["server"]).port
        entry["cluster"]["server"] = f"https://127.0.0.2:{port}"
        if server_name:
            entry["cluster"]["tls-server-name"] = server_name
    copy.write_text(yaml.safe_dump(document))
    return copy


async def _api_version(credentials: Credentials) -> str:
    """The API server's version through the kubernetes_asyncio client these credentials make."""
    async with credentials.api_client() as api:
        version = await VersionApi(api).get_code()
    return str(version.git_version)


def _version_through_kopfs_login(credentials: Credentials) -> int:
    """GET /version on a session built as Kopf builds its own from our login (the login's TLS
    context and headers), on the operator's loop inside `uvloop_tls()` as on the Kopf thread."""
    login = credentials.kopf_connection()

    async def get() -> int:
        connector = aiohttp.TCPConnector(ssl=login.as_ssl_context())
        async with (
            aiohttp.ClientSession(connector=connector, headers=login.as_http_headers()) as s,
            s.get(f"{login.server}/version") as response,
        ):
            return response.status

    with eventloop.uvloop_tls(), asyncio.Runner(loop_factory=eventloop.new_event_loop) as runner:
        return runner.run(get())


async def test_the_kubeconfigs_tls_server_name_is_the_name_the_certificate_must_have(
    alloc: Alloc, kubeconfig: Path, cluster: Any, tmp_path: Path
) -> None:
    """A cluster reached at an address its certificate does not name, with `tls-server-name`
    naming one it does: the operator's clients (kubernetes_asyncio, Kopf's login, the exec
    link) check the certificate against that name; without it they refuse the server."""
    if not getattr(cluster, "is_local", True):
        pytest.skip("needs the local control plane's address and certificate names")
    unnamed = _reached_by_another_address(kubeconfig, tmp_path / "a", None)
    without = await load_credentials(KubernetesSettings(kubeconfig=str(unnamed)))
    with pytest.raises(aiohttp.ClientConnectorCertificateError):
        await _api_version(without)
    with pytest.raises(aiohttp.ClientConnectorCertificateError):
        await asyncio.to_thread(_version_through_kopfs_login, without)

    by_name = _reached_by_another_address(kubeconfig, tmp_path / "b", "localhost")
    named = await load_credentials(KubernetesSettings(kubeconfig=str(by_name)))
    assert named.tls_server_name == "localhost"
    assert (await _api_version(named)).startswith("v1.")
    assert await asyncio.to_thread(_version_through_kopfs_login, named) == 200
    assert await _echo_and_exit(alloc, named, b"named", 5) == (b"named\n", b"e\n", Exited(5))


async def test_a_replica_whose_kubeconfig_names_the_server_serves_and_execs(
    alloc: Alloc, cluster: Any, kubectl: Any, tmp_path: Path, client: aiohttp.ClientSession
) -> None:
    """The whole process with such a kubeconfig (its ServiceAccount's): it syncs, serves the
    allocation, runs a command in it, and Kopf's side logs no certificate failure."""
    if not getattr(cluster, "is_local", True):
        pytest.skip("needs the local control plane's address and certificate names")
    token_kubeconfig = service_account_kubeconfig(kubectl, cluster.kubeconfig, tmp_path / "sa")
    named = _reached_by_another_address(token_kubeconfig, tmp_path / "named", "localhost")
    replica = Operator(tmp_path, named, namespaces=(alloc.namespace,)).start()
    try:
        eventually(lambda: http(f"{replica.api}/v1/allocation/{alloc.id}")[0] == 200, what="sync")
        url = exec_url(replica, alloc.id, command=["sh", "-c", "echo named-$((6 * 7))"])
        outcome = await run(client, url)
        assert (bytes(outcome.stdout), outcome.exit_code) == (b"named-42\n", 0)
    finally:
        replica.stop()
    log = replica.log.read_text(errors="replace")
    assert "CERTIFICATE_VERIFY_FAILED" not in log and "certificate verify failed" not in log


async def test_ten_mebibytes_through_a_proxy_on_the_operators_loop(
    alloc: Alloc, kubeconfig: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through a proxy the stream rides aiohttp's connection, whose TLS is the loop's. On the
    operator's loop (uvloop, `allocbridge.eventloop`), even inside `uvloop_tls()` as on the Kopf
    thread, it is opened with asyncio's TLS layer: read slowly, so that reading pauses again
    and again while the API server sends the end and hangs up, 10 MiB arrive whole with their
    exit status (uvloop's own TLS once lost the last 180 KB and the exit status here)."""
    for name in ("NO_PROXY", "no_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    credentials = await load_credentials(KubernetesSettings(kubeconfig=str(kubeconfig)))
    expected = "".join(f"{i}\n" for i in range(1, 1_500_001)).encode()[:TEN_MIB]
    command = ["sh", "-c", f"seq 1 1500000 | head -c {TEN_MIB}"]

    async def session() -> tuple[bytes, object]:
        executor = PodExecutor(lambda: credentials)
        try:
            async with executor.open(alloc.namespace, alloc.name, "main", command, tty=False) as s:
                await s.close_stdin()
                out = bytearray()
                last: object = None
                async for event in s.events():
                    if isinstance(event, Output) and event.channel == 1:
                        before = len(out)
                        out += event.data
                        # A slow reader, slower still near the end: the stream pauses reading
                        # while the API server sends the rest and hangs up.
                        late = before < TEN_MIB - 2 * 1024 * 1024 <= len(out)
                        await asyncio.sleep(1.0 if late else 0.005)
                    last = event
                return bytes(out), last
        finally:
            await executor.close()

    def on_the_operators_loop() -> tuple[bytes, object]:
        with eventloop.uvloop_tls(), asyncio.Runner(loop_factory=eventloop.new_event_loop) as r:
            return r.run(session())

    tunnel = ConnectProxy()
    async with tunnel as proxy_url:
        monkeypatch.setenv("HTTPS_PROXY", proxy_url)
        out, last = await asyncio.to_thread(on_the_operators_loop)
        assert tunnel.targets  # the stream went through the proxy
    assert len(out) == TEN_MIB
    assert hashlib.sha256(out).digest() == hashlib.sha256(expected).digest()
    assert last == Exited(0)


def _with_proxy_url(kubeconfig: Path, proxy_url: str, copy: Path) -> Path:
    """A copy of the kubeconfig whose clusters name `proxy_url` as their `proxy-url`."""
    document = yaml.safe_load(kubeconfig.read_text())
    for entry in document["clusters"]:
        entry["cluster"]["proxy-url"] = proxy_url
    copy.write_text(yaml.safe_dump(document))
    return copy


async def test_pod_exec_through_the_kubeconfigs_proxy(
    alloc: Alloc, kubeconfig: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kubeconfig whose cluster names a `proxy-url` (and no proxy variable set): the exec
    stream goes through that proxy to the real API server and node."""
    for name in ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    tunnel = ConnectProxy()
    async with tunnel as proxy_url:
        proxied = _with_proxy_url(kubeconfig, proxy_url, tmp_path / "kubeconfig")
        credentials = await load_credentials(KubernetesSettings(kubeconfig=str(proxied)))
        api_server = urllib.parse.urlsplit(credentials.server).netloc
        answer = await _echo_and_exit(alloc, credentials, b"via", 7)
        assert tunnel.targets and set(tunnel.targets) == {api_server}
    assert answer == (b"via\n", b"e\n", Exited(7))
