"""Run one short command in a container through `pods/exec` and collect its result.

The lifecycle actions use it to deliver signals (`kill -s SIG 1`) without a shell: the argv is
sent as is, so a container's `kill` binary (or, on the local control plane, the harness's
recording stand-in) does the work, never a shell builtin. Interactive sessions live in
`allocbridge.cluster.podexec`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp
from kubernetes_asyncio import client
from kubernetes_asyncio.stream import WsApiClient

from allocbridge.cluster.errors import NO_ANSWER, KubernetesError, from_status, unreachable
from allocbridge.cluster.podexec import ExecError, exit_code_from_status, refused_exec

STDOUT, STDERR, STATUS = 1, 2, 3
COMMAND_TIMEOUT = 30.0  # seconds; these are short commands such as `kill`


@dataclass(frozen=True)
class CommandResult:
    exit_code: int
    stdout: str
    stderr: str


class CommandError(KubernetesError):
    """The exec started but the command could not be run (no such binary, the container
    ended under it, ...). An exec the API server refuses raises the `RefusedError` of its
    answer instead (`NotFoundError`: the pod is gone; `ContainerNotRunningError`, a 400: its
    container is not running, e.g. restarting); one it does not answer, `UnavailableError`."""


async def run_command(
    configuration: client.Configuration,
    namespace: str,
    pod: str,
    container: str,
    argv: Sequence[str],
) -> CommandResult:
    """Run `argv` in the container; raises a `KubernetesError` when it cannot (see
    `CommandError`)."""
    try:
        return await _run(configuration, namespace, pod, container, argv)
    except aiohttp.WSServerHandshakeError as exc:
        raise refused_exec(
            exc.status, f"the API server refused the exec: {exc.status} {exc.message}"
        ) from exc
    except client.ApiException as exc:
        raise from_status(
            exc.status, f"the API server refused the exec: {exc.status} {exc.reason}"
        ) from exc
    except TimeoutError:
        raise  # the command outlived COMMAND_TIMEOUT: not a connection failure
    except NO_ANSWER as exc:
        raise unreachable(exc) from exc


async def _run(
    configuration: client.Configuration,
    namespace: str,
    pod: str,
    container: str,
    argv: Sequence[str],
) -> CommandResult:
    async with WsApiClient(configuration=configuration) as ws_api:
        core: Any = client.CoreV1Api(api_client=ws_api)  # the stubs do not model raw sockets
        out: list[bytes] = []
        err: list[bytes] = []
        status = b""
        async with asyncio.timeout(COMMAND_TIMEOUT):
            socket = await core.connect_get_namespaced_pod_exec(
                pod,
                namespace,
                command=list(argv),
                container=container,
                stdout=True,
                stderr=True,
                stdin=False,
                tty=False,
                _preload_content=False,
            )
            async with socket as ws:
                async for message in ws:
                    data = message.data
                    if not isinstance(data, bytes | bytearray) or not data:
                        continue
                    channel, payload = data[0], bytes(data[1:])
                    if channel == STDOUT:
                        out.append(payload)
                    elif channel == STDERR:
                        err.append(payload)
                    elif channel == STATUS and payload:
                        status = payload
    try:
        code = exit_code_from_status(status) if status else 0
    except ExecError as exc:
        raise CommandError(str(exc)) from exc
    return CommandResult(
        code, b"".join(out).decode(errors="replace"), b"".join(err).decode(errors="replace")
    )
