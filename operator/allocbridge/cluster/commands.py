"""Run one short command in a container through `pods/exec` and collect its result.

The lifecycle actions use it to deliver signals (`kill -s SIG 1`) without a shell: the argv is
sent as is, so a container's `kill` binary (or, on the local control plane, the harness's
recording stand-in) does the work, never a shell builtin. Interactive sessions live in
`allocbridge.cluster.podexec`.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kubernetes_asyncio import client
from kubernetes_asyncio.stream import WsApiClient

STDOUT, STDERR, STATUS = 1, 2, 3
_EXIT_STATUS = re.compile(r"exit status (\d+)\s*$")
COMMAND_TIMEOUT = 30.0  # seconds; these are short commands such as `kill`


@dataclass(frozen=True)
class CommandResult:
    exit_code: int
    stdout: str
    stderr: str
    failure: str = ""  # the API server's reason when the command could not start


class CommandError(Exception):
    """The command could not be run at all (no such container, no such binary, ...)."""


def exit_code_of(status: dict[str, Any]) -> tuple[int, str]:
    """The exit code and failure message from the exec status channel's Status object."""
    if status.get("status") == "Success":
        return 0, ""
    for cause in (status.get("details") or {}).get("causes") or []:
        if cause.get("reason") == "ExitCode":
            return int(cause.get("message", "1")), ""
    message = str(status.get("message") or status.get("reason") or "exec failed")
    # kwok (the local kubelet) reports a non-zero exit as an InternalError ending in this.
    found = _EXIT_STATUS.search(message)
    if found:
        return int(found.group(1)), ""
    return -1, message


async def run_command(
    configuration: client.Configuration,
    namespace: str,
    pod: str,
    container: str,
    argv: Sequence[str],
) -> CommandResult:
    """Run `argv` in the container; raises CommandError when it cannot start."""
    async with WsApiClient(configuration=configuration) as ws_api:
        core: Any = client.CoreV1Api(api_client=ws_api)  # the stubs do not model raw sockets
        out: list[bytes] = []
        err: list[bytes] = []
        status: dict[str, Any] = {}
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
                        status = json.loads(payload)
    code, failure = exit_code_of(status) if status else (0, "")
    if code < 0:
        raise CommandError(failure)
    return CommandResult(
        code, b"".join(out).decode(errors="replace"), b"".join(err).decode(errors="replace")
    )
