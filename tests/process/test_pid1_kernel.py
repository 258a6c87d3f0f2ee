"""`allocbridge.model.pid1` against this machine's kernel, in throwaway PID namespaces.

Each test starts a process as PID 1 of a new user + PID namespace (`unshare -Urpf`), reads its
/proc the way the operator does in a container (`nsenter` joins the namespace from outside, so
the probe, like a `kubectl exec`, is not a child of PID 1) and sends `kill -SIG -- PID` from
inside. The namespace holds only the test's processes, so `kill -1` cannot reach anything else,
and `--kill-child` ends the namespace's PID 1 (and so everything in it) with `unshare`.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from allocbridge.model.pid1 import PROBE, SIGKILL, SIGSTOP, SIGTERM, Pid1, parse, route

SIGUSR1 = 10
UNSHARE = [
    "unshare",
    "--user",
    "--map-root-user",
    "--pid",
    "--fork",
    "--mount-proc",
    "--kill-child",
]


def _why_no_namespaces() -> str | None:
    for tool in ("unshare", "nsenter", "kill", "cat"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    try:
        done = subprocess.run(
            [*UNSHARE, "true"], capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unshare failed: {exc}"
    if done.returncode != 0:
        return f"this machine does not allow user+PID namespaces: {done.stderr.strip()}"
    return None


_REASON = _why_no_namespaces()
pytestmark = pytest.mark.skipif(_REASON is not None, reason=f"needs namespaces: {_REASON}")


class Namespace:
    """A PID namespace whose PID 1 runs `script`; `init` is that process's PID outside."""

    def __init__(self, unshare: subprocess.Popen[bytes], init: int) -> None:
        self.unshare = unshare
        self.init = init

    def run(self, *argv: str) -> subprocess.CompletedProcess[str]:
        """Run argv inside the namespace, as `kubectl exec` would in a container."""
        return subprocess.run(
            ["nsenter", "-t", str(self.init), "-a", *argv],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )

    def pid1(self) -> Pid1:
        probe = self.run(*PROBE)
        assert "SigCgt:" in probe.stdout, probe.stderr
        return parse(probe.stdout, children_readable=probe.returncode == 0)

    def kill(self, signum: int, where: str) -> None:
        done = self.run("kill", f"-{signum}", "--", where)
        assert done.returncode == 0, done.stderr

    def children(self) -> list[int]:
        text = Path(f"/proc/{self.init}/task/{self.init}/children").read_text()
        return [int(p) for p in text.split()]


def state(pid: int) -> str | None:
    """The State letter of a process (R, S, T, Z...), or None once it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("State:"):
                return line.split()[1]
    except FileNotFoundError:
        return None
    return None


def settle() -> None:
    time.sleep(0.3)  # signals are asynchronous; give the processes a moment to react


@contextmanager
def namespace(script: str) -> Iterator[Namespace]:
    unshare = subprocess.Popen([*UNSHARE, "sh", "-c", script])
    try:
        deadline = time.monotonic() + 10
        init: int | None = None
        while init is None and time.monotonic() < deadline:
            children = Path(f"/proc/{unshare.pid}/task/{unshare.pid}/children").read_text()
            init = int(children.split()[0]) if children.split() else None
            time.sleep(0.05)
        assert init is not None, "the namespace's PID 1 did not start"
        time.sleep(0.2)  # let the script reach its steady state (traps set, children started)
        yield Namespace(unshare, init)
    finally:
        unshare.kill()
        unshare.wait(timeout=10)


def test_a_bare_pid1_drops_what_it_does_not_handle_so_the_operator_refuses() -> None:
    with namespace("exec sleep 1000") as ns:
        pid1 = ns.pid1()
        assert pid1.children == ()
        for signum in (SIGTERM, SIGKILL, SIGSTOP):
            assert route(pid1, signum) is None
            ns.kill(signum, "1")  # `kill` exits 0: the silent success the operator avoids
            settle()
            assert state(ns.init) == "S", f"signal {signum} reached a bare PID 1"


def test_a_pid1_that_handles_the_signal_gets_it() -> None:
    script = "trap 'exit 7' USR1; while :; do sleep 0.05; done"
    with namespace(script) as ns:
        pid1 = ns.pid1()
        assert SIGUSR1 in pid1.caught
        assert route(pid1, SIGUSR1) == "1"
        ns.kill(SIGUSR1, "1")
        assert ns.unshare.wait(timeout=10) == 7


def test_below_an_init_or_wrapper_stop_cont_and_kill_go_to_minus_one() -> None:
    # sh stays PID 1 and waits for its child; the short second sleep keeps it (and so the
    # namespace, whose processes the kernel kills when its init ends) alive while `kill` exits.
    with namespace("sleep 1000; sleep 1") as ns:
        pid1 = ns.pid1()
        [child] = ns.children()
        assert pid1.supervises
        assert route(pid1, SIGSTOP) == "-1" and route(pid1, SIGKILL) == "-1"
        ns.kill(SIGSTOP, "-1")
        settle()
        assert (state(child), state(ns.init)) == ("T", "S")
        ns.kill(18, "-1")  # SIGCONT
        settle()
        assert state(child) == "S"
        ns.kill(SIGKILL, "-1")
        settle()
        assert state(child) is None and state(ns.init) == "S"  # the wrapper went on
        assert ns.unshare.wait(timeout=10) == 0
