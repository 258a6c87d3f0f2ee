"""The kill stand-in parses like procps kill, records, and never signals anything."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from allocbridge_localcluster.kubelet import (
    SignalRecord,
    container_ended,
    honours_own_restart_policy,
    read_handles,
    read_signals,
    signal_number,
    terminates,
)
from allocbridge_localcluster.sandbox import exec_path
from allocbridge_localcluster.standins import GUARD_FOLDER, NAMES, write_standins


@pytest.fixture
def sandbox(tmp_path: Path) -> Path:
    folder = tmp_path / "sandbox"
    folder.mkdir()
    return folder


@pytest.fixture
def standins(tmp_path: Path) -> Path:
    return write_standins(tmp_path / "bin")


def run(standins: Path, sandbox: Path | None, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": exec_path(standins)}  # as kwok and every exec have it
    if sandbox is not None:
        env["ALLOCBRIDGE_SANDBOX"] = str(sandbox)
    return subprocess.run(
        [str(standins / argv[0]), *argv[1:]],
        env=env,
        cwd=sandbox or standins,
        capture_output=True,
        text=True,
        timeout=10,
        check=False,
    )


def records(sandbox: Path) -> list[dict[str, Any]]:
    log = sandbox / "signals.log"
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines()]


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["1"], ("TERM", 15, [1])),
        (["-TERM", "1"], ("TERM", 15, [1])),
        (["-SIGTERM", "1"], ("TERM", 15, [1])),
        (["-term", "1"], ("TERM", 15, [1])),
        (["-15", "1"], ("TERM", 15, [1])),
        (["-9", "1"], ("KILL", 9, [1])),
        (["-s", "HUP", "1"], ("HUP", 1, [1])),
        (["-s", "sigusr1", "1"], ("USR1", 10, [1])),
        (["-s", "2", "1"], ("INT", 2, [1])),
        (["--signal", "QUIT", "1"], ("QUIT", 3, [1])),
        (["--signal=ABRT", "1"], ("ABRT", 6, [1])),
        (["-n", "19", "1"], ("STOP", 19, [1])),
        (["-n", "CONT", "1"], ("CONT", 18, [1])),
        (["-IOT", "1"], ("ABRT", 6, [1])),
        (["-RTMIN+2", "1"], ("RTMIN+2", 36, [1])),
        (["-0", "1"], ("0", 0, [1])),
        (["-KILL", "-1"], ("KILL", 9, [-1])),
        (["-TERM", "--", "-1"], ("TERM", 15, [-1])),
        (["--", "0"], ("TERM", 15, [0])),
        (["-q", "5", "-USR2", "1"], ("USR2", 12, [1])),
    ],
)
def test_kill_records_the_signal_for_the_main_process(
    standins: Path, sandbox: Path, argv: list[str], expected: tuple[str, int, list[int]]
) -> None:
    done = run(standins, sandbox, "kill", *argv)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    [record] = records(sandbox)
    assert (record["signal"], record["number"], record["pids"]) == expected
    assert record["command"] == "kill"
    assert record["argv"] == ["kill", *argv]
    assert record["time"].endswith("Z")


def test_other_pids_do_not_exist_but_the_request_is_recorded(standins: Path, sandbox: Path) -> None:
    done = run(standins, sandbox, "kill", "-TERM", "1", "42", "--", "-7")
    assert done.returncode == 1
    assert done.stderr == "kill: (42): No such process\nkill: (-7): No such process\n"
    [record] = records(sandbox)
    assert record["pids"] == [1, 42, -7]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["-FOO", "1"], "kill: unknown signal name FOO\n"),
        (["-s", "BOGUS", "1"], "kill: unknown signal name BOGUS\n"),
        (["-65", "1"], "kill: unknown signal name 65\n"),
        (["-RTMIN+31", "1"], "kill: unknown signal name RTMIN+31\n"),
        (["abc"], "kill: failed to parse argument: 'abc'\n"),
        (["-TERM", "1x"], "kill: failed to parse argument: '1x'\n"),
    ],
)
def test_bad_arguments_are_rejected_and_not_recorded(
    standins: Path, sandbox: Path, argv: list[str], message: str
) -> None:
    done = run(standins, sandbox, "kill", *argv)
    assert (done.returncode, done.stderr) == (1, message)
    assert records(sandbox) == []


@pytest.mark.parametrize("argv", [[], ["-TERM"], ["-s"]])
def test_missing_pid_prints_usage(standins: Path, sandbox: Path, argv: list[str]) -> None:
    done = run(standins, sandbox, "kill", *argv)
    assert done.returncode == 1
    assert "Usage:" in done.stderr
    assert records(sandbox) == []


def test_list_and_convert_signal_names(standins: Path, sandbox: Path) -> None:
    listing = run(standins, sandbox, "kill", "-l")
    names = listing.stdout.split()
    assert names[:3] == ["HUP", "INT", "QUIT"] and names[14] == "TERM" and len(names) == 31
    assert len(listing.stdout.splitlines()) == 2  # 16 per line, as procps prints them
    assert run(standins, sandbox, "kill", "-l", "15").stdout == "TERM\n"
    assert run(standins, sandbox, "kill", "-l", "sigkill").stdout == "9\n"
    assert run(standins, sandbox, "kill", "--list=2").stdout == "INT\n"
    unknown = run(standins, sandbox, "kill", "-l", "143")
    assert (unknown.returncode, unknown.stderr) == (1, "kill: unknown signal name 143\n")
    table = run(standins, sandbox, "kill", "-L").stdout
    assert " 9 KILL" in table and "31 SYS" in table
    assert records(sandbox) == []


def test_stop_and_cont_keep_the_stopped_marker(standins: Path, sandbox: Path) -> None:
    marker = sandbox / "stopped"
    run(standins, sandbox, "kill", "-STOP", "1")  # the kernel drops STOP sent to PID 1
    assert not marker.exists()
    run(standins, sandbox, "kill", "-STOP", "--", "-1")  # reaches the process below the init
    assert marker.exists()
    run(standins, sandbox, "kill", "-CONT", "1")  # the init forwards CONT
    assert not marker.exists()
    run(standins, sandbox, "kill", "-STOP", "42")  # not the main process
    assert not marker.exists()
    run(standins, sandbox, "kill", "-TSTP", "1")  # forwarded; stops the main process
    assert marker.exists()
    marker.unlink()
    (sandbox / "handles").write_text("tstp\n")
    run(standins, sandbox, "kill", "-TSTP", "1")
    assert not marker.exists()


def test_without_an_init_nothing_stops_the_main_process(standins: Path, sandbox: Path) -> None:
    (sandbox / "no-init").write_text("\n")
    for argv in (["-STOP", "1"], ["-STOP", "--", "-1"], ["-TSTP", "1"]):
        run(standins, sandbox, "kill", *argv)
        assert not (sandbox / "stopped").exists(), argv
    assert len(records(sandbox)) == 3  # still recorded


def status_fields(text: str) -> dict[str, str]:
    return dict(line.split(":\t", 1) for line in text.splitlines() if ":\t" in line)


def test_cat_plays_proc_1_of_a_container_under_an_init(standins: Path, sandbox: Path) -> None:
    done = run(standins, sandbox, "cat", "/proc/1/status", "/proc/1/task/1/children")
    assert done.returncode == 0, done.stderr
    fields = status_fields(done.stdout)
    assert (fields["Name"], fields["Pid"], fields["SigCgt"]) == ("tini", "1", "0" * 16)
    assert fields["SigBlk"] == "000000007ffbfeff"  # everything but KILL (9) and STOP (19)
    assert done.stdout.endswith("7 ")  # the main process below the init


def test_cat_plays_a_bare_pid1_from_handles(standins: Path, sandbox: Path) -> None:
    (sandbox / "no-init").write_text("\n")
    (sandbox / "handles").write_text("USR1, hup\n")
    done = run(standins, sandbox, "cat", "/proc/1/status", "/proc/1/task/1/children")
    fields = status_fields(done.stdout)
    assert (fields["Name"], fields["SigBlk"]) == ("main", "0" * 16)
    assert fields["SigCgt"] == f"{(1 << 0) | (1 << 9):016x}"  # HUP and USR1
    assert done.stdout.endswith("\n")  # no children


def test_cat_passes_everything_else_to_the_real_cat(standins: Path, sandbox: Path) -> None:
    (sandbox / "file").write_text("hello\n")
    assert run(standins, sandbox, "cat", "file").stdout == "hello\n"
    mixed = run(standins, sandbox, "cat", "file", "/proc/1/cmdline")
    assert (mixed.returncode, mixed.stdout) == (1, "hello\n")
    assert "/proc/1/cmdline: No such file or directory" in mixed.stderr
    piped = subprocess.run(
        [str(standins / "cat")],
        input="through stdin",
        env={"PATH": exec_path(standins)},
        capture_output=True,
        text=True,
        timeout=10,
        check=False,
    )
    assert piped.stdout == "through stdin"  # works without a sandbox too
    assert records(sandbox) == []


def test_bare_names_on_the_exec_path_are_the_standins(standins: Path) -> None:
    for name in NAMES:
        assert shutil.which(name, path=exec_path(standins)) == str(standins / name)


@pytest.mark.parametrize("name", NAMES)
def test_a_missing_standin_leaves_its_name_to_a_guard_that_refuses(
    standins: Path, sandbox: Path, name: str
) -> None:
    (standins / name).unlink()
    guard = standins / GUARD_FOLDER / name
    assert shutil.which(name, path=exec_path(standins)) == str(guard)
    # The guard is run by its own path: never a way to the machine's command of that name.
    done = subprocess.run(
        [str(guard), "-TERM", "1"],
        env={"PATH": exec_path(standins), "ALLOCBRIDGE_SANDBOX": str(sandbox)},
        cwd=sandbox,
        capture_output=True,
        text=True,
        timeout=10,
        check=False,
    )
    assert done.returncode == 126
    assert done.stdout == ""
    assert f"the stand-in {name} is missing from {standins}" in done.stderr
    assert records(sandbox) == []


def test_argv_is_json_escaped(standins: Path, sandbox: Path) -> None:
    odd = 'we"ird\\ arg\twith\ncontrol'
    done = run(standins, sandbox, "pkill", "-HUP", odd)
    assert done.returncode == 1  # nothing matched
    [record] = records(sandbox)
    assert record["argv"] == ["pkill", "-HUP", odd]
    assert (record["signal"], record["pids"]) == ("HUP", [])


def test_killall_and_power_commands_only_record(standins: Path, sandbox: Path) -> None:
    done = run(standins, sandbox, "killall", "-s", "KILL", "nginx")
    assert (done.returncode, done.stderr) == (1, "nginx: no process found\n")
    for name in ("reboot", "shutdown", "halt", "poweroff"):
        done = run(standins, sandbox, name, "-f")
        assert done.returncode == 0
        assert "nothing was done" in done.stderr
    got = records(sandbox)
    assert [r["command"] for r in got] == ["killall", "reboot", "shutdown", "halt", "poweroff"]
    assert got[0]["signal"] == "KILL"
    assert got[1]["signal"] is None and got[1]["number"] is None


def test_refuses_without_a_sandbox(standins: Path, tmp_path: Path) -> None:
    done = run(standins, None, "kill", "-TERM", "1")
    assert done.returncode == 2
    assert "ALLOCBRIDGE_SANDBOX" in done.stderr


def test_standins_are_plain_sh_scripts(standins: Path) -> None:
    for script in [*standins.glob("*"), *(standins / GUARD_FOLDER).glob("*")]:
        if script.is_dir():
            continue
        assert script.read_text().startswith("#!/bin/sh\n")
        assert os.access(script, os.X_OK)
        assert subprocess.run(["sh", "-n", str(script)], check=False).returncode == 0


def test_simulation_reads_what_the_standin_wrote(standins: Path, sandbox: Path) -> None:
    run(standins, sandbox, "kill", "-HUP", "1")
    run(standins, sandbox, "kill", "-TERM", "-1")
    (sandbox / "handles").write_text("HUP, usr1 12\n")
    run(standins, sandbox, "kill", "-KILL", "1")
    got = read_signals(sandbox)
    under_init = [r.reaches_main_process() for r in got]
    assert [r.signal for r in got] == ["HUP", "TERM", "KILL"]
    assert under_init == [True, True, False]  # the kernel drops KILL sent to PID 1
    assert read_handles(sandbox) == {1, 10, 12}
    bare = [r.reaches_main_process(has_init=False, handled={1}) for r in got]
    assert bare == [True, False, False]  # only what PID 1 handles; -1 excludes PID 1
    assert terminates(15) and terminates(1) and not terminates(1, {1})
    assert terminates(9, {9}) and not terminates(17) and not terminates(19)
    assert signal_number("SIGTERM") == 15 and signal_number("bogus") is None
    assert SignalRecord.parse("not json") is None


def test_restart_rules() -> None:
    now = "2026-01-01T00:00:00Z"
    pod: dict[str, Any] = {
        "spec": {"restartPolicy": "Never", "containers": [{"name": "a"}, {"name": "b"}]},
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}],
            "containerStatuses": [
                {
                    "name": n,
                    "ready": True,
                    "restartCount": 0,
                    "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}},
                }
                for n in ("a", "b")
            ],
        },
    }
    after_a = container_ended(pod, "a", 143, 15, now)
    assert after_a is not None and after_a["phase"] == "Running"
    a = after_a["containerStatuses"][0]
    assert a["state"]["terminated"] == {
        "exitCode": 143,
        "signal": 15,
        "reason": "Error",
        "startedAt": "2026-01-01T00:00:00Z",
        "finishedAt": now,
    }
    assert container_ended({"spec": pod["spec"], "status": after_a}, "a", 1, None, now) is None
    after_b = container_ended({"spec": pod["spec"], "status": after_a}, "b", 0, None, now)
    assert after_b is not None and after_b["phase"] == "Failed"
    pod["spec"]["restartPolicy"] = "Always"
    restarted = container_ended(pod, "b", 0, None, now)
    assert restarted is not None
    b = restarted["containerStatuses"][1]
    assert b["restartCount"] == 1 and b["state"] == {"running": {"startedAt": now}}
    assert b["lastState"]["terminated"]["reason"] == "Completed"
    # A regular container's own restartPolicy overrides the pod's, as a kubelet 1.35+ does.
    pod["spec"]["containers"][1]["restartPolicy"] = "OnFailure"
    left = container_ended(pod, "b", 0, None, now)
    assert left is not None and left["phase"] == "Running"
    assert left["containerStatuses"][1]["state"]["terminated"]["exitCode"] == 0
    failed = container_ended(pod, "b", 1, None, now)
    assert failed is not None and failed["containerStatuses"][1]["restartCount"] == 1
    # A kubelet older than 1.35 ignores it: the pod's Always runs the container again.
    older = container_ended(pod, "b", 0, None, now, own_restart_policy=False)
    assert older is not None and older["containerStatuses"][1]["restartCount"] == 1


@pytest.mark.parametrize(
    ("version", "honours"),
    [("v1.35.0", True), ("v1.36.3", True), ("v1.34.3", False), ("v1.29.0-eks-1", False)],
)
def test_a_kubelet_older_than_1_35_ignores_a_containers_own_policy(
    version: str, honours: bool
) -> None:
    assert honours_own_restart_policy(version) is honours


def test_kwok_plays_the_current_kubelet() -> None:
    assert honours_own_restart_policy("kwok-v0.8.0") is True
