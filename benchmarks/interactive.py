"""Interactive exec: a shell's keystroke echo and its session setup, on the real node.

What a person at `nomad alloc exec -t ... sh` feels is not throughput but how long a keystroke
takes to show and how long the prompt takes to appear. Both are measured against a shell in a
task on the local cluster's real node (`busybox:1.37`, the local stand-in: BusyBox `sh` under
a tty allocated by containerd and runc), because kwok's pods run exec'd commands on this
machine without a tty of their own.

- allocbridge: the official Nomad Go SDK's `Allocations().Exec` with a terminal, what
  `nomad alloc exec -t` runs (`benchmarks/goclients shell`: command `["sh"]`, the terminal's
  size sent first), its stdin and stdout the slave of a pseudo-terminal read from the master
  side in the bench's event loop, exactly as the peer's.
- Peer: the built `kubectl exec -it POD -c main -- sh` through the same API server, on a
  pseudo-terminal of its own the same way (kubectl allocates a remote tty only when its stdin
  is a terminal; each client's own stderr goes to a file, shown on failure). The slave is put
  in raw mode before the client starts, so nothing is echoed locally: every echo comes from
  the pod. Both sides are thus a Go client process on a terminal, timed at the same points.
- Beside them, without a goal:
  - aiohttp's WebSocket client in the bench's own process on allocbridge's exec endpoint, in
    the frames of `allocbridge/model/execframes.py` (a `tty_size` frame first, then `stdin`
    frames; `stdout` frames base64-decoded): no client process and no terminal, which makes it
    cheaper per keystroke than either CLI (until 2026-11-26 it was the goal row's client,
    against kubectl's process and terminal).
  - a Python client straight to the API server's `pods/exec` (allocbridge's own
    `PodExecutor`, in this process, with kubectl's admin credentials): the same kind of
    client as the row above without the operator's hop, so the two tell the hop's share.
  - the peer's `kubectl exec -it` through a bare TCP forwarder (`goclients forward`, a Go
    process copying bytes both ways untouched, TLS passing through to the API server): what
    one more process on the path costs a keystroke on this machine, the least any relay adds.

Figures (rows `keystroke echo` p50 and p99, `session setup`; goal at most 1.2x kubectl each):

- Keystroke: from writing one character (a WebSocket frame; a write to the master) until its
  echo has come back: through the client, the API server, the kubelet, the container's tty and
  BusyBox's line editor, which echoes it, and back. Each one is erased (DEL, its echo awaited,
  untimed) so the line stays empty. The first `KEY_WARMUP` of each session are not counted.
- Setup: from the client's process spawn until the first output byte (the shell's prompt or
  banner): for allocbridge process start, the allocation's read, the upgrade, authorization and
  the operator's exec to the API server; for kubectl process start, kubeconfig, the pod read
  and the exec upgrade. One unrecorded session per side comes first.

Each round opens one session per side, one at a time (their setups timed apart), the order
flipping each round; then the sides' keystrokes take turns, one side's after the other's, the
order flipping each turn, with one keystroke in flight at a time. A burst of load on a shared
machine thus falls on every side alike: with whole sessions in turn (before 2026-11-26), a
burst of a tenth of a second struck the one session open, and a few such keystrokes decide a
p99 of 200.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import fcntl
import json
import math
import os
import struct
import subprocess
import termios
import time
import tty
import urllib.parse
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Protocol

import aiohttp

from allocbridge.cluster.connection import Credentials, load_credentials
from allocbridge.cluster.podexec import ExecStream, Exited, Output, PodExecutor
from allocbridge.config import KubernetesSettings
from benchmarks import golang
from benchmarks.harness import Bench, BenchError, Json, OperatorProcess, log
from benchmarks.population import BUSYBOX, collection, one_task_allocation, wait_running
from benchmarks.table import Row, median, percentile, within

SECTION: Final = "Interactive exec"
GOAL: Final = 1.2

NAME: Final = "shell"  # the allocation's
TASK: Final = "main"
SHELL: Final = ("sh",)
ROWS: Final = 24
COLUMNS: Final = 80
KEY: Final = b"x"
ERASE: Final = b"\x7f"
#: What BusyBox's line editor writes for a DEL at the end of the line: back one, clear to the end.
ERASE_ECHO: Final = b"\x08\x1b[J"
EXIT: Final = b"\x04"  # Ctrl-D on an empty line: the shell exits
KEY_WARMUP: Final = 2
QUIET: Final = 0.3  # seconds without output that end the banner and prompt after setup
PATIENCE: Final = 20.0


# --- Nomad's frames (pure) -------------------------------------------------------------------


def stdin_frame(data: bytes) -> str:
    return json.dumps({"stdin": {"data": base64.b64encode(data).decode()}})


def tty_size_frame(height: int, width: int) -> str:
    return json.dumps({"tty_size": {"height": height, "width": width}})


@dataclass(frozen=True)
class ServerFrame:
    """What one server frame carries: output bytes (stdout or stderr) and, at the end, the exit
    code (`exited` true); heartbeats `{}` carry neither."""

    output: bytes = b""
    exited: bool = False
    exit_code: int | None = None


def parse_server_frame(text: str) -> ServerFrame:
    try:
        frame = json.loads(text)
    except ValueError as exc:
        raise BenchError(f"not a JSON exec frame: {text[:120]!r}") from exc
    if not isinstance(frame, dict):
        raise BenchError(f"not an exec frame: {text[:120]!r}")
    output = b""
    for stream in ("stdout", "stderr"):
        part = frame.get(stream)
        if isinstance(part, dict) and part.get("data"):
            output += base64.b64decode(part["data"])
    if frame.get("exited"):
        code = (frame.get("result") or {}).get("exit_code", 0)
        return ServerFrame(output, exited=True, exit_code=int(code))
    return ServerFrame(output)


# --- what came back (pure) -------------------------------------------------------------------


@dataclass
class Received:
    """Output of a session so far; `take_through` consumes it up to an expected echo."""

    pending: bytearray = field(default_factory=bytearray)
    total: int = 0

    def add(self, data: bytes) -> None:
        self.pending += data
        self.total += len(data)

    def take_through(self, marker: bytes) -> bool:
        """Drop everything up to and including the first `marker`; False when it is not there."""
        at = self.pending.find(marker)
        if at < 0:
            return False
        del self.pending[: at + len(marker)]
        return True

    def clear(self) -> None:
        self.pending.clear()


def counted(samples: Sequence[float], warmup: int) -> list[float]:
    """A session's keystroke times without its first `warmup` ones."""
    return list(samples[warmup:])


def keys_per_session(keys: int, sessions: int) -> int:
    """Timed keystrokes in each session so that the sessions together time at least `keys`."""
    return math.ceil(keys / sessions)


# --- sessions ---------------------------------------------------------------------------------


class Session(Protocol):
    received: Received

    async def send(self, data: bytes) -> None: ...

    async def more(self, patience: float) -> bool:
        """Wait up to `patience` s for more output; False when none came (or the session ended)."""
        ...

    async def close(self) -> None: ...


async def wait_for(session: Session, marker: bytes, what: str) -> None:
    deadline = time.monotonic() + PATIENCE
    while not session.received.take_through(marker):
        left = deadline - time.monotonic()
        if left <= 0 or not await session.more(left):
            raise BenchError(
                f"interactive exec: no {what} ({marker!r}) in {PATIENCE:.0f}s; "
                f"got {bytes(session.received.pending[-200:])!r}"
            )


async def wait_first_byte(session: Session) -> None:
    deadline = time.monotonic() + PATIENCE
    while session.received.total == 0:
        left = deadline - time.monotonic()
        if left <= 0 or not await session.more(left):
            raise BenchError(f"interactive exec: no output in {PATIENCE:.0f}s")


async def drain(session: Session) -> None:
    """Read the rest of the banner and prompt: until no output comes for `QUIET` seconds."""
    while await session.more(QUIET):
        pass
    session.received.clear()


class NomadSession:
    """A shell through allocbridge's exec WebSocket."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.received = Received()
        self.exit_code: int | None = None

    @classmethod
    async def open(
        cls, http: aiohttp.ClientSession, replica: OperatorProcess, alloc_id: str
    ) -> NomadSession:
        query = urllib.parse.urlencode(
            {"task": TASK, "tty": "true", "command": json.dumps(list(SHELL))}
        )
        url = f"{replica.api}/v1/client/allocation/{alloc_id}/exec?{query}"
        session = cls(await http.ws_connect(url))
        await session.ws.send_str(tty_size_frame(ROWS, COLUMNS))
        return session

    async def send(self, data: bytes) -> None:
        await self.ws.send_str(stdin_frame(data))

    async def more(self, patience: float) -> bool:
        while True:
            try:
                message = await self.ws.receive(timeout=patience)
            except TimeoutError:
                return False
            if message.type != aiohttp.WSMsgType.TEXT:
                return False  # closed: the shell exited, or the server ended the session
            frame = parse_server_frame(message.data)
            if frame.exited:
                self.exit_code = frame.exit_code
            if frame.output:
                self.received.add(frame.output)
                return True
            if frame.exited:
                return False

    async def close(self) -> None:
        with contextlib.suppress(aiohttp.ClientError, OSError, BenchError):
            await self.send(EXIT)
            while await self.more(PATIENCE):
                pass
        await self.ws.close()


class TerminalSession:
    """A client process (`kubectl exec -it`, the Nomad SDK's shell) on a pseudo-terminal, its
    master read in this event loop."""

    def __init__(
        self, process: subprocess.Popen[bytes], master: int, stderr: Path, client: str
    ) -> None:
        self.process = process
        self.master = master
        self.stderr = stderr
        self.client = client
        self.received = Received()
        self._ready = asyncio.Event()
        self._ended = False
        asyncio.get_running_loop().add_reader(master, self._on_readable)

    @classmethod
    def spawn(cls, argv: Sequence[str], stderr: Path, client: str) -> TerminalSession:
        """`argv` with a terminal of `ROWS`x`COLUMNS` in raw mode as its stdin and stdout, its
        stderr into the file `stderr`; `client` names it in errors."""
        master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLUMNS, 0, 0))
        tty.setraw(slave)  # no local echo: what comes back is the pod's
        os.set_blocking(master, False)
        try:
            with stderr.open("wb") as errors:
                process = subprocess.Popen(
                    argv, stdin=slave, stdout=slave, stderr=errors, start_new_session=True
                )
        except OSError:
            os.close(master)
            raise
        finally:
            os.close(slave)
        return cls(process, master, stderr, client)

    def _on_readable(self) -> None:
        try:
            data = os.read(self.master, 65536)
        except BlockingIOError:
            return
        except OSError:  # EIO: every slave descriptor is closed, kubectl has exited
            data = b""
        if data:
            self.received.add(data)
        else:
            self._ended = True
            asyncio.get_running_loop().remove_reader(self.master)
        self._ready.set()

    async def send(self, data: bytes) -> None:
        os.write(self.master, data)

    async def more(self, patience: float) -> bool:
        if self._ended:
            return False
        total = self.received.total
        self._ready.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._ready.wait(), patience)
        return self.received.total > total

    def errors(self) -> str:
        with contextlib.suppress(OSError):
            return self.stderr.read_text(errors="replace")[-2000:].strip()
        return ""

    async def close(self) -> None:
        with contextlib.suppress(OSError):
            await self.send(EXIT)
        try:
            await asyncio.to_thread(self.process.wait, PATIENCE)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        if not self._ended:
            asyncio.get_running_loop().remove_reader(self.master)
        os.close(self.master)


class DirectSession:
    """A shell through the API server's exec WebSocket, with no allocbridge in between: the
    operator's own client (`PodExecutor`) in this process. Output is read by a task into
    `received`, as `TerminalSession` reads its pty."""

    def __init__(self, opened: contextlib.AbstractAsyncContextManager[ExecStream]) -> None:
        self._opened = opened
        self.received = Received()
        self._ready = asyncio.Event()
        self._ended = False
        self._stream: ExecStream | None = None
        self._reader: asyncio.Task[None] | None = None

    @classmethod
    async def open(cls, executor: PodExecutor, target: Target) -> DirectSession:
        session = cls(executor.open(target.namespace, target.pod, TASK, SHELL, tty=True))
        stream = await session._opened.__aenter__()
        try:
            await stream.resize(COLUMNS, ROWS)
        except BaseException:
            await session._opened.__aexit__(None, None, None)
            raise
        session._stream = stream
        session._reader = asyncio.create_task(session._read(stream))
        return session

    async def _read(self, stream: ExecStream) -> None:
        try:
            async with contextlib.aclosing(stream.events()) as events:
                async for event in events:
                    if isinstance(event, Output):
                        self.received.add(event.data)
                        self._ready.set()
                    elif isinstance(event, Exited):
                        return
        finally:
            self._ended = True
            self._ready.set()

    async def send(self, data: bytes) -> None:
        if self._stream is not None:
            await self._stream.send_stdin(data)

    async def more(self, patience: float) -> bool:
        if self._ended:
            return False
        total = self.received.total
        self._ready.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._ready.wait(), patience)
        return self.received.total > total

    async def close(self) -> None:
        try:
            with contextlib.suppress(Exception):
                await self.send(EXIT)
                if self._reader is not None:
                    await asyncio.wait_for(asyncio.shield(self._reader), PATIENCE)
        finally:
            if self._reader is not None:
                self._reader.cancel()
                await asyncio.gather(self._reader, return_exceptions=True)
            await self._opened.__aexit__(None, None, None)


async def direct_executor(bench: Bench) -> PodExecutor:
    """A `PodExecutor` with the admin kubeconfig kubectl uses."""
    credentials: Credentials = await load_credentials(
        KubernetesSettings(kubeconfig=str(bench.cluster.kubeconfig))
    )
    return PodExecutor(lambda: credentials)


# --- the measurement --------------------------------------------------------------------------


#: The sides of a round: allocbridge through the Nomad SDK on a terminal, its peer, and the
#: diagnostic ones (no goal): allocbridge through aiohttp's client in this process, the same kind
#: of client straight to the API server, and the peer through a bare forwarder.
ALLOCBRIDGE: Final = "allocbridge"
KUBECTL: Final = "kubectl"
PYTHON: Final = "python"
DIRECT: Final = "direct"
FORWARDED: Final = "forwarded"


@contextlib.asynccontextmanager
async def forwarder(binary: Path, server: str) -> AsyncIterator[str]:
    """`goclients forward` to the API server `server` (an https URL) for as long as the block
    runs: yields the same URL on the forwarder's port (the API server's certificate names
    127.0.0.1, whatever the port)."""
    upstream = urllib.parse.urlsplit(server)
    argv = [str(binary), "forward", "-to", upstream.netloc]
    async with golang.listening(argv, "goclients forward", PATIENCE) as port:
        yield f"https://{upstream.hostname}:{port}"


def nomad_shell_argv(
    binary: Path, bench: Bench, replica: OperatorProcess, target: Target
) -> list[str]:
    """`goclients shell` on the allocation: `nomad alloc exec -t ... sh` through the SDK."""
    return [
        str(binary),
        "shell",
        "-addr",
        replica.api,
        "-token",
        bench.client_token,
        "-alloc",
        target.alloc_id,
        "-task",
        TASK,
        "-command",
        json.dumps(list(SHELL)),
    ]


@dataclass(frozen=True)
class Clients:
    """What the sides' sessions are opened with: the direct side's executor, the Go clients'
    binary, and the forwarder's URL for kubectl."""

    executor: PodExecutor
    binary: Path
    forwarded: str


@dataclass
class Side:
    setups: list[float] = field(default_factory=list)
    keys: list[float] = field(default_factory=list)


async def keystroke(session: Session) -> float:
    """Seconds from one keystroke to its echo; the key is then erased, untimed."""
    began = time.perf_counter()
    await session.send(KEY)
    await wait_for(session, KEY, "echo")
    seconds = time.perf_counter() - began
    await session.send(ERASE)
    await wait_for(session, ERASE_ECHO, "erase echo")
    return seconds


def turn_order(sides: Sequence[str], turn: int) -> list[str]:
    """The sides in order for an even `turn`, reversed for an odd one: no side always goes
    first or last."""
    return list(sides) if turn % 2 == 0 else list(reversed(sides))


async def open_session(
    bench: Bench,
    replica: OperatorProcess,
    target: Target,
    side: str,
    clients: Clients,
) -> tuple[Session, float]:
    """A session of `side` with its banner and prompt read, and its setup seconds."""
    session: Session
    began = time.perf_counter()
    if side == ALLOCBRIDGE:
        argv = nomad_shell_argv(clients.binary, bench, replica, target)
        session = TerminalSession.spawn(argv, bench.folder / "nomad-exec-t.stderr", "goclients")
    elif side in (KUBECTL, FORWARDED):
        server = [f"--server={clients.forwarded}"] if side == FORWARDED else []
        argv = bench.kubectl_argv(*server, "exec", "-it", "-n", target.namespace, target.pod)
        argv += ["-c", TASK, "--", *SHELL]
        stderr = bench.folder / f"kubectl-exec-it-{side}.stderr"
        session = TerminalSession.spawn(argv, stderr, "kubectl")
    elif side == PYTHON:
        session = await NomadSession.open(bench.http, replica, target.alloc_id)
    else:
        session = await DirectSession.open(clients.executor, target)
    try:
        try:
            await wait_first_byte(session)
        except BenchError as exc:
            if isinstance(session, TerminalSession):
                said = session.errors()
                raise BenchError(f"{exc}; {session.client} said: {said!r}") from exc
            raise
        setup = time.perf_counter() - began
        await drain(session)
    except BaseException:
        await session.close()
        raise
    return session, setup


async def one_round(
    bench: Bench,
    replica: OperatorProcess,
    target: Target,
    order: Sequence[str],
    keys: int,
    *,
    clients: Clients,
) -> dict[str, tuple[float, list[float]]]:
    """One session per side, opened one at a time in `order`, then `keys` keystrokes each
    (after `KEY_WARMUP`) taking turns across the sessions; per side its setup seconds and its
    keystroke times, the warm-up dropped."""
    async with contextlib.AsyncExitStack() as open_sessions:
        sessions: dict[str, Session] = {}
        setups: dict[str, float] = {}
        for side in order:
            session, setups[side] = await open_session(bench, replica, target, side, clients)
            open_sessions.push_async_callback(session.close)
            sessions[side] = session
        times: dict[str, list[float]] = {side: [] for side in order}
        for turn in range(keys + KEY_WARMUP):
            for side in turn_order(order, turn):
                times[side].append(await keystroke(sessions[side]))
    return {side: (setups[side], counted(times[side], KEY_WARMUP)) for side in order}


@dataclass(frozen=True)
class Target:
    namespace: str
    pod: str
    alloc_id: str


def allocation(name: str, namespace: str) -> Json:
    """A docker task that sleeps in the real node's BusyBox image: a shell is exec'd into it."""
    return one_task_allocation(
        name,
        namespace,
        job="bench-interactive",
        group="shell",
        task=TASK,
        command=["sleep", "100000"],
    )


async def create_target(bench: Bench, namespace: str, annotations: dict[str, str]) -> Target:
    """The shell's allocation, in a namespace whose pods land on the real node."""
    await bench.ensure_namespace(namespace, annotations=annotations)
    await bench.api.post(collection(namespace), allocation(NAME, namespace))
    obj = await wait_running(bench, namespace, NAME, TASK)
    pod = (obj.get("status") or {}).get("podName") or NAME
    return Target(namespace, pod, obj["metadata"]["uid"])


async def measure(
    bench: Bench, replica: OperatorProcess, target: Target, keys: int, sessions: int
) -> list[Row]:
    per_session = keys_per_session(keys, sessions)
    binary = await golang.build()
    if binary is None:
        raise BenchError("interactive exec times the Nomad Go SDK's shell: no Go on PATH")
    sides = {side: Side() for side in (ALLOCBRIDGE, KUBECTL, PYTHON, DIRECT, FORWARDED)}
    log(f"interactive exec: a warm-up round, then {sessions} rounds of a session per side")
    executor = await direct_executor(bench)
    try:
        async with forwarder(binary, bench.cluster.server) as forwarded:
            clients = Clients(executor, binary, forwarded)
            await one_round(bench, replica, target, list(sides), 1, clients=clients)
            for round_ in range(sessions):
                order = turn_order(list(sides), round_)
                found = await one_round(bench, replica, target, order, per_session, clients=clients)
                for side, (setup, times) in found.items():
                    sides[side].setups.append(setup)
                    sides[side].keys += times
    finally:
        await executor.close()
    return rows(
        sides[ALLOCBRIDGE],
        sides[KUBECTL],
        sessions,
        per_session,
        direct=sides[DIRECT],
        python=sides[PYTHON],
        forwarded=sides[FORWARDED],
    )


def rows(
    ours: Side,
    peer: Side,
    sessions: int,
    per_session: int,
    *,
    direct: Side | None = None,
    python: Side | None = None,
    forwarded: Side | None = None,
) -> list[Row]:
    """The section's rows from the sides' samples (in seconds). `python`, `direct` and
    `forwarded`, when measured, give the diagnostic rows (no goal): the two clients in the
    bench's process, aiohttp's on allocbridge's endpoint and `PodExecutor` straight to the API
    server, and kubectl through a bare forwarder."""
    kubectl = f"kubectl exec -it, same pod, same API server ({BUSYBOX} sh, tty)"
    count = f"{len(ours.keys)} keystrokes per side ({per_session} per session after {KEY_WARMUP}"
    count += f" warm-up, {sessions} sessions)"
    result = [
        Row(
            SECTION,
            f"keystroke echo round trip, p{q}",
            percentile(ours.keys, q) * 1000,
            "ms",
            kubectl,
            percentile(peer.keys, q) * 1000,
            goals=(within(GOAL),),
            note=count + "; the Nomad Go SDK's exec (as nomad alloc exec -t) on a terminal, as "
            "kubectl; a key in, the shell's echo out, through the pod's tty",
        )
        for q in (50, 99)
    ]
    diagnostic = (
        (python, "aiohttp's client in the bench's process", "allocbridge's endpoint"),
        (direct, "a Python client straight to the API server", "PodExecutor, no operator hop"),
    )
    for side, who, what in diagnostic:
        if side is None or not side.keys:
            continue
        result.append(
            Row(
                SECTION,
                f"keystroke echo round trip, p50: {who}",
                percentile(side.keys, 50) * 1000,
                "ms",
                kubectl,
                percentile(peer.keys, 50) * 1000,
                note=(
                    f"no goal; {what}, no client process or terminal "
                    f"(p99 {_ms(side.keys, 99)} ms); {len(side.keys)} "
                    "keystrokes in the same rounds"
                ),
            )
        )
    if forwarded is not None and forwarded.keys:
        result.append(
            Row(
                SECTION,
                "keystroke echo round trip, p50: kubectl through a bare TCP forwarder",
                percentile(forwarded.keys, 50) * 1000,
                "ms",
                kubectl,
                percentile(peer.keys, 50) * 1000,
                note=(
                    "no goal; the peer on a terminal as it is, with one Go process copying its "
                    "bytes untouched (goclients forward, TLS passing through): what one more "
                    f"process on the path costs here (p99 {_ms(forwarded.keys, 99)} ms); "
                    f"{len(forwarded.keys)} keystrokes in the same rounds"
                ),
            )
        )
    result.append(
        Row(
            SECTION,
            "session setup to the first output byte, median",
            median(ours.setups) * 1000,
            "ms",
            kubectl,
            median(peer.setups) * 1000,
            goals=(within(GOAL),),
            note=(
                f"{sessions} sessions per side, ranges {_range(ours.setups)} vs "
                f"{_range(peer.setups)}; each from its client's process spawn (its start "
                "included)"
            ),
        )
    )
    return result


def _ms(seconds: Sequence[float], q: float) -> str:
    return f"{percentile(seconds, q) * 1000:.2f}"


def _range(seconds: Sequence[float]) -> str:
    return f"{min(seconds) * 1000:.0f}-{max(seconds) * 1000:.0f} ms"
