"""Child processes of the local control plane that can never outlive the harness.

Each component runs in its own process group (so a stop also reaches anything it forked, such
as the commands kwok runs for `kubectl exec`), logs to a file in the state directory, and, when
started from the main thread, gets `PR_SET_PDEATHSIG=SIGKILL` so that it dies even if the test
run itself is killed with SIGKILL. A stop sends SIGTERM to the group, waits, then SIGKILLs it.
Every live process is also recorded in `<state>/processes.json`, which lets the next start in the
same state directory end leftovers of a crashed run (only those whose command line names that
directory, so an unrelated process that reused a pid is never touched).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO

log = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """Runs in the child between fork and exec: ask the kernel to SIGKILL it if we die."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


class ManagedProcess:
    """One started component: its Popen, log file and name."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        log_path: Path,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_path = log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log: IO[bytes] = open(log_path, "ab")  # noqa: SIM115 - closed in stop()
        # PDEATHSIG fires when the creating *thread* exits, so only use it from the main thread.
        on_main = threading.current_thread() is threading.main_thread()
        self.popen = subprocess.Popen(
            self.argv,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            start_new_session=True,
            preexec_fn=_die_with_parent if on_main else None,  # noqa: PLW1509
        )

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def log_tail(self, lines: int = 30) -> str:
        """The end of the component's log, for error messages."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def terminate(self) -> None:
        """Send SIGTERM to the process group without waiting (to stop several at once)."""
        if self.popen.poll() is None:
            _signal_group(self.pid, signal.SIGTERM)

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM the process group, then SIGKILL it if it is still there after `timeout`."""
        try:
            if self.popen.poll() is None:
                _signal_group(self.pid, signal.SIGTERM)
                try:
                    self.popen.wait(timeout)
                except subprocess.TimeoutExpired:
                    log.warning("%s did not stop within %.0fs; killing it", self.name, timeout)
            # Whatever is left of the group (forked exec commands included) goes now.
            _signal_group(self.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(5)
        finally:
            self._log.close()


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


class ProcessRegistry:
    """The `processes.json` of one state directory."""

    def __init__(self, path: Path, marker: str) -> None:
        self.path = path
        self.marker = marker

    def write(self, processes: Sequence[ManagedProcess]) -> None:
        data = [{"name": p.name, "pid": p.pid} for p in processes if p.alive()]
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, self.path)

    def clear(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()

    def end_leftovers(self) -> list[str]:
        """Kill what a crashed earlier run left behind; returns the names it ended."""
        try:
            entries = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return []
        ended = []
        for entry in entries:
            pid = int(entry.get("pid", 0))
            if pid > 1 and self.marker in _cmdline(pid):
                _signal_group(pid, signal.SIGKILL)
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
                ended.append(str(entry.get("name", pid)))
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(
            self.marker in _cmdline(int(e.get("pid", 0))) for e in entries
        ):
            time.sleep(0.05)
        self.clear()
        return ended


def _cmdline(pid: int) -> str:
    try:
        return (
            Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        )
    except OSError:
        return ""
