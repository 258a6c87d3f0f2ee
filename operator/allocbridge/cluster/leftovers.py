"""Ends the command an exec session left running when its client went away.

containerd keeps an exec'd command running after its stream ends (its output drained into
nothing), so a client that vanishes mid-session would leave it behind for good. After such a
session the operator finds the command through a second exec (`model.leftovers` says how and
why it can never pick another session's process), sends it and the processes below it SIGHUP,
the hang-up a terminal's end sends, and SIGKILL to whichever of them is still there
`HANGUP_GRACE` seconds later. Signals go through the container's `kill` binary as a plain
argv, as the lifecycle actions send theirs.

It needs `sh`, `cat` and `kill` in the container; without them, or when the command is not
found (it ended meanwhile, or replaced its command line), nothing is ended and the reason is
logged. Best effort: it never fails the session it follows.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from allocbridge.cluster.errors import KubernetesError
from allocbridge.cluster.podexec import PodExecutor
from allocbridge.model.leftovers import (
    SCAN_COMMAND,
    Scan,
    ScanError,
    command_line,
    exec_started,
    parse_scan,
    still_running,
    with_descendants,
)

log = logging.getLogger(__name__)

#: Seconds between the hang-up and the SIGKILL of what is left.
HANGUP_GRACE: Final = 2.0
#: At most this many candidates have their command lines read.
MAX_CANDIDATES: Final = 10


@dataclass(frozen=True)
class EndedSession:
    """A session whose command had not exited when it ended (times from time.monotonic())."""

    namespace: str
    pod: str
    container: str
    command: tuple[str, ...]
    asked_at: float
    first_output_at: float | None
    ended_at: float


async def end_leftover(executor: PodExecutor, session: EndedSession) -> list[int]:
    """End the session's command and the processes below it; the PIDs signalled (empty when
    nothing was found or could be done, which is logged)."""
    where = {"container": f"{session.namespace}/{session.pod}/{session.container}"}
    try:
        return await _end(executor, session, where)
    except (KubernetesError, ScanError) as exc:
        text = exc.message if isinstance(exc, KubernetesError) else str(exc)
        log.warning("the command a gone exec client left could not be ended: %s", text, extra=where)
    return []


async def _end(executor: PodExecutor, session: EndedSession, where: dict[str, str]) -> list[int]:
    sent = time.monotonic()
    before = await _scan(executor, session)
    back = time.monotonic()
    # The command started after the session was asked for and before its first output (or
    # the session's end): its age at the scan lies between these.
    started_by = session.first_output_at or session.ended_at
    found = exec_started(before, oldest=back - session.asked_at, youngest=sent - started_by)
    wanted = command_line(session.command)
    mine = [
        p.pid for p in found[:MAX_CANDIDATES] if await _cmdline(executor, session, p.pid) == wanted
    ]
    if len(mine) != 1:
        log.info(
            "no command of a gone exec client to end"
            if not mine
            else "several commands could be the gone exec client's: none ended",
            extra={**where, "candidates": [p.pid for p in found], "matching": mine},
        )
        return []
    pids = with_descendants(before, mine)
    await _kill(executor, session, "HUP", pids)
    await asyncio.sleep(HANGUP_GRACE)
    left = still_running(await _scan(executor, session), pids, before)
    if left:
        await _kill(executor, session, "KILL", left)
    log.info(
        "ended the command a gone exec client left",
        extra={**where, "pids": pids, "killed": left},
    )
    return pids


async def _scan(executor: PodExecutor, session: EndedSession) -> Scan:
    code, out = await executor.run(session.namespace, session.pod, session.container, SCAN_COMMAND)
    if code != 0:
        raise ScanError(f"the process scan exited with {code}")
    return parse_scan(out.decode(errors="replace"))


async def _cmdline(executor: PodExecutor, session: EndedSession, pid: int) -> bytes | None:
    argv = ("cat", f"/proc/{pid}/cmdline")
    code, out = await executor.run(session.namespace, session.pod, session.container, argv)
    return out if code == 0 else None


async def _kill(
    executor: PodExecutor, session: EndedSession, signal: str, pids: Sequence[int]
) -> None:
    argv = ("kill", f"-{signal}", *(str(pid) for pid in pids))
    # A process that ended meanwhile makes kill exit non-zero; the rescan tells what is left.
    await executor.run(session.namespace, session.pod, session.container, argv)
