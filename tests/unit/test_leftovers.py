"""Finding the command an exec session left running (allocbridge.model.leftovers)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from allocbridge.model.leftovers import (
    SCAN_COMMAND,
    Process,
    Scan,
    ScanError,
    command_line,
    exec_started,
    parse_scan,
    still_running,
    with_descendants,
)

# uptime 100 s; PID 1 and the scan (40) have parent 0 as every exec'd process does; 7 was
# started by an exec 3 s ago and has a child 8 and a grandchild 9; 12 is an exec of 50 s ago.
SAMPLE = "uptime 100.00\nself 40\n1 0 25\n7 0 9700\n8 7 9800\n9 8 9900\n12 0 5000\n40 0 9990\n"


def test_the_scan_is_read_with_times_in_seconds() -> None:
    scan = parse_scan(SAMPLE)
    assert scan.uptime == 100.0 and scan.own_pid == 40
    assert scan.processes[1] == Process(7, 0, 97.0)


@pytest.mark.parametrize(
    "text", ["", "self 3\n1 0 25\n", "uptime x\n", "uptime 1.0\n7 0 abc\n", "uptime 1\nsh: no\n"]
)
def test_output_that_is_not_the_scans_is_an_error(text: str) -> None:
    with pytest.raises(ScanError):
        parse_scan(text)


def test_exec_started_keeps_parent_0_processes_of_the_window_but_pid_1_and_the_scan() -> None:
    scan = parse_scan(SAMPLE)
    assert [p.pid for p in exec_started(scan, oldest=4.0, youngest=2.0)] == [7]
    assert [p.pid for p in exec_started(scan, oldest=60.0, youngest=0.0)] == [7, 12]
    assert exec_started(scan, oldest=1.0, youngest=0.0) == []  # 7 is 3 s old
    # half a second of slack either side: /proc counts in 10 ms steps and clocks differ
    assert [p.pid for p in exec_started(scan, oldest=2.6, youngest=0.0)] == [7]


def test_descendants_follow_the_parents() -> None:
    scan = parse_scan(SAMPLE)
    assert with_descendants(scan, [7]) == [7, 8, 9]
    assert with_descendants(scan, [12]) == [12]


def test_still_running_needs_the_same_start_so_a_reused_pid_is_not_taken() -> None:
    before = parse_scan(SAMPLE)
    after = Scan(103.0, 41, (Process(7, 0, 97.0), Process(8, 0, 102.0)))
    assert still_running(after, [7, 8, 9], before) == [7]


def test_command_line_is_what_proc_shows() -> None:
    assert command_line(["sh", "-c", "echo a b"]) == b"sh\0-c\0echo a b\0"


@pytest.mark.parametrize("shell", ["sh", "bash", "busybox"])
def test_the_scan_runs_in_posix_shells(shell: str) -> None:
    """The scan uses shell builtins only; here it reads this machine's /proc (read only)."""
    path = shutil.which(shell)
    if path is None:
        pytest.skip(f"no {shell} on this machine")
    argv = [path, "sh", *SCAN_COMMAND[1:]] if shell == "busybox" else [path, *SCAN_COMMAND[1:]]
    child = subprocess.Popen(["sleep", "30"])
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=True)
    finally:
        child.kill()
        child.wait()
    scan = parse_scan(done.stdout)
    assert scan.uptime > 0 and scan.own_pid > 1
    pids = {p.pid: p for p in scan.processes}
    assert pids[1].parent == 0
    assert child.pid in pids and scan.uptime - pids[child.pid].started < 30
