"""Commands in a task's container (`pods/exec`), for the actions that send signals.

Signal, restart and pause run `kill -SIG TARGET` in the task's container, never through a
shell, and first read `/proc/1` there: Linux drops signals sent to a container's PID 1 from
inside unless it takes them, so the target comes from `allocbridge.model.pid1` and an action
that would be dropped answers an error instead of a false success. An exec that fails because
the task is not running is Nomad's 409 `Task not running`, told from a real fault by reading
the pod again. docs/kubernetes-mapping.md ("Signals and a container's PID 1") has the rules.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import time
from dataclasses import dataclass

from allocbridge.actions.errors import TASK_NOT_RUNNING
from allocbridge.actions.records import AllocationRecords, Target
from allocbridge.cluster.commands import CommandResult, run_command
from allocbridge.cluster.connection import ClientConfiguration
from allocbridge.cluster.errors import KubernetesError, RefusedError
from allocbridge.model import pid1 as pid1_rules
from allocbridge.model.errors import NomadError

#: Seconds a failed exec's container status gets to show an exit or a restart (see `exec`).
STATUS_SETTLE = 3.0
_KILLED_WITH_ITS_CONTAINER = 128 + 9

_WHY_BINARY = {
    "kill": "delivers signals with the container's own kill",
    "cat": "reads /proc/1/status with it to learn which signals the main process takes",
}

log = logging.getLogger(__name__)


@dataclass
class InContainer(AllocationRecords):
    """Runs commands in the containers of an allocation's pod."""

    configuration: ClientConfiguration

    async def exec(self, target: Target, task: str, argv: list[str]) -> CommandResult:
        """Run `argv` in the task's container. An exec that fails because the task is not
        running (its pod is gone; the container ended, is restarting, or restarted while the
        exec started, which the runtime reports in many ways) is Nomad's 409 `Task not
        running`: the pod is read again after a failure to tell that from a real fault."""
        began = time.time()
        try:
            return await run_command(self.configuration, target.namespace, target.name, task, argv)
        except KubernetesError as exc:
            # Refused: the pod is gone (404) or its container is not running (400).
            refused = isinstance(exc, RefusedError)
            if refused or not await self._ran_throughout(target, task, began):
                log.info(
                    "the task was not running for an exec", extra={"task": task, "error": str(exc)}
                )
                raise NomadError(409, TASK_NOT_RUNNING) from exc
            text = str(exc)
            if "executable file not found" in text or "no such file" in text.lower():
                raise NomadError(
                    500,
                    f'cannot act on task "{task}": its container has no "{argv[0]}" binary '
                    f"(allocbridge {_WHY_BINARY.get(argv[0], 'runs it in the container')})",
                ) from exc
            raise NomadError(500, f'cannot run {argv[0]} in task "{task}": {text}') from exc

    async def stopped_since(self, target: Target, task: str, since: float) -> bool:
        """Whether the task's container ended, restarted or lost its pod since `since` (Unix
        seconds): asked after a failed exec, to tell a task that is not running from a fault."""
        return not await self._ran_throughout(target, task, since)

    async def _ran_throughout(self, target: Target, task: str, since: float) -> bool:
        """Whether the task's container has run since `since` (Unix seconds) and still runs,
        in a pod that is not being deleted. The kubelet reports an exit a second or two late,
        so a container that still looks running is read again for up to `STATUS_SETTLE`
        seconds before the failure is taken for a fault."""
        deadline = time.monotonic() + STATUS_SETTLE
        while await self._runs_since(target, task, since):
            if time.monotonic() >= deadline:
                return True
            await asyncio.sleep(0.25)
        return False

    async def _runs_since(self, target: Target, task: str, since: float) -> bool:
        pod = await self.kube.get_pod(target.namespace, target.name)
        if pod is None or (pod.get("metadata") or {}).get("deletionTimestamp"):
            return False  # gone, or going: the kubelet is ending its containers
        status = pod.get("status") or {}
        for key in ("initContainerStatuses", "containerStatuses"):
            for item in status.get(key) or []:
                running = (item.get("state") or {}).get("running")
                if item.get("name") == task and running is not None:
                    started = _unix_seconds(str(running.get("startedAt") or ""))
                    return started is not None and started < since - 1
        return False

    async def pid1(self, target: Target, task: str) -> pid1_rules.Pid1:
        """What the task container's PID 1 does with signals (see `allocbridge.model.pid1`)."""
        began = time.time()
        result = await self.exec(target, task, list(pid1_rules.PROBE))
        if "SigCgt:" not in result.stdout and not await self._ran_throughout(target, task, began):
            raise NomadError(409, TASK_NOT_RUNNING)  # PID 1 was ending under the probe
        if "SigCgt:" not in result.stdout:
            detail = result.stderr.strip() or f"exit code {result.exit_code}"
            raise NomadError(500, f'cannot read /proc/1/status in task "{task}": {detail}')
        return pid1_rules.parse(result.stdout, children_readable=result.exit_code == 0)

    async def kill(self, target: Target, task: str, signal: str, where: str) -> None:
        """`kill -SIG <where>` in the task's container; a non-zero exit is an error.

        A `kill` that ends with SIGKILL's status (137) was itself killed as the container's
        PID namespace ended: the signal it had sent ended the task (`kill -1` spares its
        sender), so it was delivered. The `-SIG PID` form (PID 1 or -1) is the one procps,
        util-linux and busybox all parse the same way: busybox refuses a `--` before the PID
        ("invalid number '--'"), and procps 4 takes `-s SIG -1` for a second signal and fails.
        """
        argv = ["kill", f"-{signal.removeprefix('SIG')}", where]
        began = time.time()
        result = await self.exec(target, task, argv)
        if result.exit_code == _KILLED_WITH_ITS_CONTAINER:
            return  # the signal ended the container, whose end took the `kill` with it
        if result.exit_code != 0 and not await self._ran_throughout(target, task, began):
            raise NomadError(409, TASK_NOT_RUNNING)  # its processes were ending meanwhile
        if result.exit_code != 0:
            detail = result.stderr.strip() or f"exit code {result.exit_code}"
            raise NomadError(500, f'{" ".join(argv)} in task "{task}" failed: {detail}')


def undeliverable(name: str) -> str:
    """Why `name` cannot reach a task whose main process is PID 1 with nothing below it."""
    if name in ("SIGKILL", "SIGSTOP"):
        why = f"{name} never reaches a container's PID 1 from inside the container"
    else:
        why = (
            f"the container's PID 1 neither handles nor blocks {name}, so Linux drops it; "
            "handle the signal in the process"
        )
    return f"{why}, and no process runs below PID 1; run the task under an init such as tini"


def _unix_seconds(rfc3339: str) -> float | None:
    try:
        return datetime.datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None
