"""The kubelet's rules for a container's main process in the local cluster's sandboxes.

What a kubelet does when a container's main process gets a signal or an exit request: whether it
ends, with which exit code, and the pod status after the end. Pure apart from reading and writing
the sandbox's small files, so the rules are unit-tested without a cluster; `sandbox.py` is the
process that applies them to the pods of the API server.

A container's main process ends by these rules:

* a `kill` recorded by the stand-in (see `standins.py`) that reaches the main process (to
  PID 1 or -1, by the rules below) with a signal whose default action terminates a process
  (signal(7): TERM, INT, QUIT, ABRT, KILL, HUP, USR1, USR2, ALRM, PIPE, ...; not CHLD, URG,
  WINCH, CONT or the stop signals), unless the signal is named in `<sandbox>/handles` (the
  signals the main process traps, e.g. `HUP USR1`; whitespace- or comma-separated names or
  numbers; KILL cannot be trapped), ends the main process with exit code 128 + signal number;
* a file `<sandbox>/exit` holding an integer ends it with that exit code (the file is
  consumed; `LocalCluster.container_exit` writes it atomically).

An end is written into the pod status as a kubelet would: with restartPolicy Always (or
OnFailure and a non-zero code, or a sidecar init container) the container restarts at once
(restartCount + 1, lastState.terminated {exitCode, signal, reason Error/Completed, startedAt,
finishedAt}, state.running {startedAt now}; no crash-loop back-off); otherwise it stays
terminated, the pod's Ready and ContainersReady become False and, once every regular container
has terminated, sidecars stop and the phase becomes Succeeded (all exit codes 0) or Failed. A
regular container's own restartPolicy overrides the pod's, as a kubelet 1.35+ honours it; on a
node whose `kubeletVersion` is older it is ignored, as that kubelet would
(`honours_own_restart_policy`).

Signals sent while a pod is not Running, or to a container that is not running, are ignored.
PID 1 follows the kernel's rules (`allocbridge.model.pid1`): by default a container runs its
main process under an init like tini, which forwards every signal but KILL and STOP (dropped by
the kernel) to it, and `kill -1` reaches it directly; a sandbox file `no-init` makes the main
process PID 1 itself, which only the signals it handles reach (see `standins.py`).
"""

from __future__ import annotations

import contextlib
import copy
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .standins import EXIT_FILE, HANDLES_FILE, SIGNALS_LOG, write_atomic

SIGNAL_NAMES = [
    "HUP",
    "INT",
    "QUIT",
    "ILL",
    "TRAP",
    "ABRT",
    "BUS",
    "FPE",
    "KILL",
    "USR1",
    "SEGV",
    "USR2",
    "PIPE",
    "ALRM",
    "TERM",
    "STKFLT",
    "CHLD",
    "CONT",
    "STOP",
    "TSTP",
    "TTIN",
    "TTOU",
    "URG",
    "XCPU",
    "XFSZ",
    "VTALRM",
    "PROF",
    "WINCH",
    "POLL",
    "PWR",
    "SYS",
]
SIGKILL = 9
SIGSTOP = 19
_NOT_TERMINATING = {0, 17, 18, 19, 20, 21, 22, 23, 28}  # CHLD CONT STOP TSTP TTIN TTOU URG WINCH
ACTIVITY_FILE = ".activity"


def signal_number(spec: str | int) -> int | None:
    """The number of a signal given as a name (`TERM`, `SIGTERM`, `term`) or number."""
    if isinstance(spec, int):
        return spec if 0 <= spec <= 64 else None
    text = spec.strip().upper().removeprefix("SIG")
    if text.isdigit():
        return signal_number(int(text))
    aliases = {"IOT": "ABRT", "CLD": "CHLD", "IO": "POLL"}
    text = aliases.get(text, text)
    if text in SIGNAL_NAMES:
        return SIGNAL_NAMES.index(text) + 1
    return None


def terminates(signum: int, handled: Iterable[int] = ()) -> bool:
    """Whether `signum` ends a main process that traps the signals in `handled`."""
    if signum == SIGKILL:
        return True
    return signum not in _NOT_TERMINATING and signum not in set(handled)


@dataclass(frozen=True)
class SignalRecord:
    """One line of `signals.log`, as the stand-ins write it."""

    time: str
    command: str
    signal: str | None
    number: int | None
    pids: tuple[int, ...]
    argv: tuple[str, ...]

    def reaches_main_process(self, has_init: bool = True, handled: Iterable[int] = ()) -> bool:
        """Whether this `kill` gets to the main process, by Linux's rules for PID 1.

        Under an init (the default), PID 1 forwards everything but KILL and STOP, which the
        kernel drops, and -1 reaches the main process directly. Without one, the main process
        is PID 1 and gets only the signals it handles; -1 excludes it.
        """
        if self.command != "kill" or self.number is None:
            return False
        if has_init:
            return -1 in self.pids or (1 in self.pids and self.number not in (SIGKILL, SIGSTOP))
        return 1 in self.pids and self.number in set(handled)

    @classmethod
    def parse(cls, line: str) -> SignalRecord | None:
        try:
            data = json.loads(line)
            return cls(
                time=str(data["time"]),
                command=str(data["command"]),
                signal=None if data.get("signal") is None else str(data["signal"]),
                number=None if data.get("number") is None else int(data["number"]),
                pids=tuple(int(p) for p in data.get("pids", [])),
                argv=tuple(str(a) for a in data.get("argv", [])),
            )
        except (ValueError, KeyError, TypeError):
            return None


def container_folder(root: Path, namespace: str, pod: str, container: str) -> Path:
    """`<root>/<namespace>/<pod>/<container>`: the container's sandbox and exec cwd."""
    return root / namespace / pod / container


def read_signals(folder: Path) -> list[SignalRecord]:
    """Every complete record in a sandbox's `signals.log` (empty if none was written)."""
    try:
        text = (folder / SIGNALS_LOG).read_text(errors="replace")
    except FileNotFoundError:
        return []
    records = (SignalRecord.parse(line) for line in text.splitlines() if line.strip())
    return [r for r in records if r is not None]


def read_handles(folder: Path) -> set[int]:
    """The signal numbers named in `<sandbox>/handles`."""
    try:
        text = (folder / HANDLES_FILE).read_text()
    except FileNotFoundError:
        return set()
    numbers = (signal_number(t) for t in text.replace(",", " ").replace(";", " ").split())
    return {n for n in numbers if n is not None}


def request_exit(folder: Path, exit_code: int) -> None:
    """Ask the simulation to end the container's main process with `exit_code`."""
    if not folder.is_dir():
        raise FileNotFoundError(f"no sandbox at {folder} (is the pod running on a kwok node?)")
    write_atomic(folder / EXIT_FILE, f"{int(exit_code)}\n")
    note_activity(folder.parents[2] / ACTIVITY_FILE)


def note_activity(activity: Path) -> None:
    """Tell the poller to look at every sandbox now rather than at its next full scan."""
    with contextlib.suppress(OSError), open(activity, "ab") as f:
        f.write(b".")


def _set_condition(status: dict[str, Any], kind: str, value: str, reason: str, now: str) -> None:
    conditions = status.setdefault("conditions", [])
    message = ""
    if reason == "ContainersNotReady":
        unready = [s["name"] for s in status.get("containerStatuses") or [] if not s.get("ready")]
        message = f"containers with unready status: [{' '.join(unready)}]"
    for cond in conditions:
        if cond.get("type") == kind:
            if cond.get("status") != value:
                cond["lastTransitionTime"] = now
            cond.update(status=value, reason=reason, message=message)
            return
    conditions.append(
        {
            "type": kind,
            "status": value,
            "reason": reason,
            "message": message,
            "lastTransitionTime": now,
        }
    )


def honours_own_restart_policy(kubelet_version: str) -> bool:
    """Whether a kubelet of this version runs a regular container by its own restartPolicy:
    from 1.35 on; kwok's own version (`kwok-v0.8.0`) plays the current kubelet. A test gives a
    node an older version through `LocalCluster.create_node(kubelet_version=...)`."""
    found = re.match(r"v(\d+)\.(\d+)\.", kubelet_version)
    return found is None or (int(found[1]), int(found[2])) >= (1, 35)


def container_ended(
    pod: dict[str, Any],
    container: str,
    exit_code: int,
    signum: int | None,
    now: str,
    *,
    own_restart_policy: bool = True,
) -> dict[str, Any] | None:
    """The pod status after `container`'s main process ended, or None if nothing was running;
    `own_restart_policy` False for a kubelet that ignores a regular container's own policy.

    Pure, so the kubelet rules can be read (and tested) apart from the I/O.
    """
    spec = pod.get("spec") or {}
    status = copy.deepcopy(pod.get("status") or {})
    if status.get("phase") != "Running":
        return None
    sidecars = {
        c["name"] for c in spec.get("initContainers") or [] if c.get("restartPolicy") == "Always"
    }
    regular = [c["name"] for c in spec.get("containers") or []]
    if container not in sidecars and container not in regular:
        return None
    key = "initContainerStatuses" if container in sidecars else "containerStatuses"
    current = next((s for s in status.get(key) or [] if s.get("name") == container), None)
    if current is None or "running" not in (current.get("state") or {}):
        return None
    terminated: dict[str, Any] = {
        "exitCode": exit_code,
        "reason": "Completed" if exit_code == 0 else "Error",
        "startedAt": current["state"]["running"].get("startedAt") or now,
        "finishedAt": now,
    }
    if signum:
        terminated["signal"] = signum
    own = None
    if own_restart_policy:
        own = next(
            (
                c.get("restartPolicy")
                for c in spec.get("containers") or []
                if c["name"] == container
            ),
            None,
        )
    policy = own or spec.get("restartPolicy") or "Always"
    if container in sidecars or policy == "Always" or (policy == "OnFailure" and exit_code):
        current["restartCount"] = int(current.get("restartCount") or 0) + 1
        current["lastState"] = {"terminated": terminated}
        current["state"] = {"running": {"startedAt": now}}
        current.update(ready=True, started=True)
        return status
    current["state"] = {"terminated": terminated}
    current.update(ready=False, started=False)
    by_name = {s.get("name"): s for s in status.get("containerStatuses") or []}
    ended = [by_name.get(n, {}).get("state", {}).get("terminated") for n in regular]
    if all(ended):
        for side in status.get("initContainerStatuses") or []:
            running = (side.get("state") or {}).get("running")
            if side.get("name") in sidecars and running is not None:
                side["state"] = {
                    "terminated": {
                        "exitCode": 0,
                        "reason": "Completed",
                        "startedAt": running.get("startedAt") or now,
                        "finishedAt": now,
                    }
                }
                side.update(ready=False, started=False)
        failed = any(int(t.get("exitCode") or 0) != 0 for t in ended if t)
        status["phase"] = "Failed" if failed else "Succeeded"
        reason = "PodCompleted"
    else:
        reason = "ContainersNotReady"
    _set_condition(status, "ContainersReady", "False", reason, now)
    _set_condition(status, "Ready", "False", reason, now)
    return status
