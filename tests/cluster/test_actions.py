"""Stop, signal, restart and pause through `/v1` on the real control plane.

The commands reach the container through `pods/exec` and kwok, where the harness's stand-in
`kill` records them (`cluster.signals`) and its kubelet simulation plays the container's
reaction, so each test checks the command sent, the pod and the status it leads to.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from running_operator import (
    FAST_RESTARTS,
    Operator,
    allocation_manifest,
    eventually,
    http,
    quick_allocation,
)

pytestmark = pytest.mark.cluster


def status(kubectl: Any, namespace: str, name: str) -> dict[str, Any]:
    found: dict[str, Any] = kubectl.json("get", "allocation", name, "-n", namespace)
    return found.get("status") or {}


def running(kubectl: Any, operator: Operator, namespace: str, body: dict[str, Any]) -> str:
    """Apply an allocation, wait until it runs and the API knows it; return its ID."""
    kubectl.apply(body)
    name = body["metadata"]["name"]
    eventually(
        lambda: status(kubectl, namespace, name).get("clientStatus") == "running",
        what=f"{name} running",
    )
    uid: str = kubectl.json("get", "allocation", name, "-n", namespace)["metadata"]["uid"]
    eventually(
        lambda: operator.get(f"/v1/allocation/{uid}")["ClientStatus"] == "running",
        what="the API to see it running",
    )
    return uid


def post(operator: Operator, path: str, body: Any = None) -> tuple[int, Any]:
    code, raw, _ = http(operator.api + path, method="POST", body=body)
    try:
        return code, json.loads(raw)
    except ValueError:
        return code, raw.decode()


def events(kubectl: Any, namespace: str, name: str, task: str) -> list[str]:
    state = status(kubectl, namespace, name)["taskStates"][task]
    return [e["type"] for e in state["events"] if e["type"] != "Driver"]


def displays(kubectl: Any, namespace: str, name: str, task: str = "main") -> list[str]:
    """The display messages of a task's events, oldest first (Driver events included)."""
    state = status(kubectl, namespace, name)["taskStates"][task]
    return [str(e["displayMessage"]) for e in state["events"]]


# -- stop ------------------------------------------------------------------------------------


def test_stop_ends_the_allocation_and_creates_a_linked_replacement(
    operator: Operator, kubectl: Any, namespace: str
) -> None:
    uid = running(kubectl, operator, namespace, quick_allocation("svc", namespace))
    code, raw, headers = http(operator.api + f"/v1/allocation/{uid}/stop", method="PUT")
    assert code == 200, raw
    answer = json.loads(raw)
    assert set(answer) == {"EvalID", "Index"} and len(answer["EvalID"]) == 36
    assert headers["X-Nomad-Index"] == str(answer["Index"])

    old = eventually(
        lambda: (s := status(kubectl, namespace, "svc"))["clientStatus"] == "complete" and s,
        what="the stopped allocation to complete",
    )
    assert old["desiredStatus"] == "stop"
    assert events(kubectl, namespace, "svc", "main")[-2:] == ["Killing", "Killed"]
    assert kubectl("get", "pod", "svc", "-n", namespace, check=False).returncode != 0

    new_id = old["nextAllocation"]
    replacement = eventually(
        lambda: (
            (a := operator.get(f"/v1/allocation/{new_id}?namespace={namespace}"))["ClientStatus"]
            == "running"
            and a
        ),
        what="the replacement to run",
    )
    assert replacement["PreviousAllocation"] == uid
    assert replacement["RescheduleTracker"]["Events"][0]["PrevAllocID"] == uid
    wire_old = operator.get(f"/v1/allocation/{uid}")
    assert wire_old["NextAllocation"] == new_id and wire_old["DesiredStatus"] == "stop"
    assert wire_old["DesiredTransition"]["Migrate"] is True

    again, text = post(operator, f"/v1/allocation/{uid}/stop")
    assert again == 409 and "already stopped" in text


def test_stop_honours_the_shutdown_delay_unless_told_not_to(
    operator: Operator, kubectl: Any, namespace: str
) -> None:
    slow = quick_allocation("slow", namespace, group={"shutdownDelay": "6s"})
    quick = quick_allocation("quick", namespace, group={"shutdownDelay": "6s"})
    slow_id = running(kubectl, operator, namespace, slow)
    quick_id = running(kubectl, operator, namespace, quick)
    assert post(operator, f"/v1/allocation/{slow_id}/stop")[0] == 200
    assert post(operator, f"/v1/allocation/{quick_id}/stop?no_shutdown_delay=true")[0] == 200
    stopped = time.monotonic()
    eventually(
        lambda: kubectl("get", "pod", "quick", "-n", namespace, check=False).returncode,
        timeout=10,
        what="the no-delay pod to go",
    )
    assert time.monotonic() - stopped < 5
    assert kubectl("get", "pod", "slow", "-n", namespace, check=False).returncode == 0
    eventually(
        lambda: kubectl("get", "pod", "slow", "-n", namespace, check=False).returncode,
        timeout=20,
        what="the delayed pod to go",
    )
    assert time.monotonic() - stopped >= 5


def test_stop_errors(operator: Operator) -> None:
    unknown = "0f0f0f0f-0000-4000-8000-000000000000"
    assert post(operator, f"/v1/allocation/{unknown}/stop") == (404, "allocation not found")
    code, text = post(operator, "/v1/allocation/0f0f0f0f/stop")
    assert code == 400 and "UUID must be 36 characters" in text
    assert http(operator.api + f"/v1/allocation/{unknown}/stop")[0] == 405


# -- signal ----------------------------------------------------------------------------------


def test_signal_reaches_the_task_and_is_recorded(
    operator: Operator, cluster: Any, kubectl: Any, namespace: str
) -> None:
    uid = running(kubectl, operator, namespace, quick_allocation("sig", namespace))
    cluster.set_handled_signals(namespace, "sig", "main", ["USR1"])
    code, body = post(
        operator, f"/v1/client/allocation/{uid}/signal", {"Signal": "SIGUSR1", "Task": "main"}
    )
    assert (code, body) == (200, {})
    record = cluster.signals(namespace, "sig", "main")[-1]
    assert record.signal == "USR1" and record.pids == (1,)
    assert record.argv == ("kill", "-USR1", "--", "1")
    state = status(kubectl, namespace, "sig")["taskStates"]["main"]
    signaling = [e for e in state["events"] if e["type"] == "Signaling"][-1]
    assert signaling["taskSignal"] == "SIGUSR1"
    assert state["state"] == "running" and state["restarts"] == 0  # handled: no exit


def test_unhandled_terminating_signal_restarts_the_container(
    operator: Operator, cluster: Any, kubectl: Any, namespace: str
) -> None:
    uid = running(kubectl, operator, namespace, quick_allocation("term", namespace))
    assert post(operator, f"/v1/client/allocation/{uid}/signal", {"Signal": "SIGTERM"})[0] == 200
    eventually(
        lambda: status(kubectl, namespace, "term")["taskStates"]["main"]["restarts"] == 1,
        what="the container to restart",
    )
    kinds = events(kubectl, namespace, "term", "main")
    assert kinds.index("Signaling") < kinds.index("Terminated") < kinds.index("Restarting")


def test_signal_without_task_goes_to_every_running_task(
    operator: Operator, cluster: Any, kubectl: Any, namespace: str
) -> None:
    tasks = [{"name": n, "driver": "docker", "config": {"image": "x"}} for n in ("a", "b")]
    uid = running(kubectl, operator, namespace, quick_allocation("both", namespace, tasks=tasks))
    for task in ("a", "b"):
        cluster.set_handled_signals(namespace, "both", task, ["HUP"])
    assert post(operator, f"/v1/client/allocation/{uid}/signal", {"Signal": "SIGHUP"})[0] == 200
    for task in ("a", "b"):
        assert [r.signal for r in cluster.signals(namespace, "both", task)] == ["HUP"]


def test_a_signal_a_bare_pid1_would_drop_is_refused(
    operator: Operator, cluster: Any, kubectl: Any, namespace: str
) -> None:
    cluster.run_without_init(namespace, "bare", "main")  # the main process is PID 1 itself
    uid = running(kubectl, operator, namespace, quick_allocation("bare", namespace))
    path = f"/v1/client/allocation/{uid}/signal"
    code, text = post(operator, path, {"Signal": "SIGUSR1", "Task": "main"})
    assert code == 500
    assert text.startswith("Failed to signal task: main, err: the container's PID 1 neither")
    assert "SIGUSR1" in text and "init such as tini" in text
    assert cluster.signals(namespace, "bare", "main") == []  # nothing sent,
    assert "Signaling" not in events(kubectl, namespace, "bare", "main")  # nothing recorded
    code, text = post(operator, path, {"Signal": "SIGKILL"})
    assert code == 500 and "SIGKILL never reaches a container's PID 1" in text

    cluster.set_handled_signals(namespace, "bare", "main", ["USR1"])  # now it has a handler
    assert post(operator, path, {"Signal": "SIGUSR1", "Task": "main"}) == (200, {})
    [record] = cluster.signals(namespace, "bare", "main")
    assert record.argv == ("kill", "-USR1", "--", "1")


def test_sigkill_goes_to_the_processes_below_the_init(
    operator: Operator, cluster: Any, kubectl: Any, namespace: str
) -> None:
    uid = running(kubectl, operator, namespace, quick_allocation("killed", namespace))
    assert post(operator, f"/v1/client/allocation/{uid}/signal", {"Signal": "SIGKILL"})[0] == 200
    [record] = cluster.signals(namespace, "killed", "main")
    assert record.argv == ("kill", "-KILL", "--", "-1")
    eventually(
        lambda: status(kubectl, namespace, "killed")["taskStates"]["main"]["restarts"] == 1,
        what="the killed container to restart",
    )
    pod = kubectl.json("get", "pod", "killed", "-n", namespace)
    assert pod["status"]["containerStatuses"][0]["lastState"]["terminated"]["exitCode"] == 137


@pytest.mark.parametrize(
    ("body", "code", "text"),
    [
        (None, 400, "Failed to decode body: Request body is empty"),
        ("{not json", 400, "Failed to decode body:"),
        ({"Signal": "SIGNOPE"}, 400, "invalid signal 'SIGNOPE'"),
        ({"Signal": "SIGUSR1", "Task": "ghost"}, 404, "Task not found"),
    ],
)
def test_bad_signal_requests_change_nothing(
    operator: Operator,
    cluster: Any,
    kubectl: Any,
    namespace: str,
    body: Any,
    code: int,
    text: str,
) -> None:
    uid = running(kubectl, operator, namespace, quick_allocation("calm", namespace))
    path = operator.api + f"/v1/client/allocation/{uid}/signal"
    if isinstance(body, str):  # malformed JSON, sent as is
        status_code, raw, _ = http(path, method="POST", raw=body.encode())
    else:
        status_code, raw, _ = http(path, method="POST", body=body)
    answer = (status_code, raw.decode())
    assert answer[0] == code and text in answer[1]
    assert cluster.signals(namespace, "calm", "main") == []
    assert "Signaling" not in events(kubectl, namespace, "calm", "main")


@pytest.mark.parametrize(
    ("action", "body"),
    [
        ("signal", {"Signal": "SIGHUP"}),
        ("signal", {"Signal": "SIGBOGUS"}),  # the lookup comes before the payload, as in Nomad
        ("signal", {"Task": "main"}),
        ("restart", {"TaskName": "main", "AllTasks": True}),
    ],
)
def test_unknown_allocation(operator: Operator, action: str, body: Any) -> None:
    unknown = "0f0f0f0f-0000-4000-8000-000000000000"
    code, text = post(operator, f"/v1/client/allocation/{unknown}/{action}", body)
    assert code == 404 and text == f'Unknown allocation "{unknown}"'


# -- restart ---------------------------------------------------------------------------------


def test_restart_a_task_in_place_without_using_the_restart_policy(
    operator: Operator, cluster: Any, kubectl: Any, namespace: str
) -> None:
    uid = running(kubectl, operator, namespace, quick_allocation("rs", namespace))
    for count in (1, 2):  # the policy allows 1 attempt: user restarts must not count
        assert post(operator, f"/v1/client/allocation/{uid}/restart", {"TaskName": "main"}) == (
            200,
            {},
        )

        def restarted(c: int = count) -> bool:
            task = status(kubectl, namespace, "rs")["taskStates"]["main"]
            return bool(task["restarts"] == c and task["state"] == "running")

        eventually(restarted, what=f"restart {count}")
    assert [r.signal for r in cluster.signals(namespace, "rs", "main")] == ["TERM", "TERM"]
    kinds = events(kubectl, namespace, "rs", "main")
    assert kinds[-4:] == ["Restart Signaled", "Terminated", "Restarting", "Started"]
    shown = operator.get(f"/v1/allocation/{uid}")["TaskStates"]["main"]["Events"]
    restarting = next(e for e in reversed(shown) if e["Type"] == "Restarting")
    assert restarting["DisplayMessage"] == "User requested restart - Task restarting in 0s"
    state = status(kubectl, namespace, "rs")
    assert state["clientStatus"] == "running" and state["taskStates"]["main"]["lastRestart"]


def test_restart_stops_the_task_with_its_kill_signal(
    operator: Operator, cluster: Any, kubectl: Any, namespace: str
) -> None:
    task = {
        "name": "main",
        "driver": "docker",
        "config": {"image": "x"},
        "killSignal": "SIGINT",
        "killTimeout": "1s",
    }
    uid = running(kubectl, operator, namespace, quick_allocation("ki", namespace, tasks=[task]))
    assert post(operator, f"/v1/client/allocation/{uid}/restart", {"TaskName": "main"})[0] == 200
    eventually(
        lambda: status(kubectl, namespace, "ki")["taskStates"]["main"]["restarts"] == 1,
        what="the restart",
    )
    assert [r.argv for r in cluster.signals(namespace, "ki", "main")] == [
        ("kill", "-INT", "--", "1")
    ]
    # A task that handles its kill signal and stays up is killed after the kill timeout.
    cluster.set_handled_signals(namespace, "ki", "main", ["INT"])
    assert post(operator, f"/v1/client/allocation/{uid}/restart", {"TaskName": "main"})[0] == 200
    eventually(
        lambda: status(kubectl, namespace, "ki")["taskStates"]["main"]["restarts"] == 2,
        what="SIGKILL after the kill timeout",
    )
    argvs = [r.argv for r in cluster.signals(namespace, "ki", "main")]
    assert argvs[1:] == [("kill", "-INT", "--", "1"), ("kill", "-KILL", "--", "-1")]
    reasons = [
        e.get("killReason")
        for e in status(kubectl, namespace, "ki")["taskStates"]["main"]["events"]
        if e["type"] == "Killing"
    ]
    assert reasons[-1] == "restart: task did not exit after SIGINT"


def test_restarting_a_batch_task_that_exits_0_runs_it_again(
    operator: Operator, cluster: Any, kubectl: Any, namespace: str
) -> None:
    """Under OnFailure the kubelet leaves a container that exited 0 stopped; the exit after a
    user restart is that restart, so the task runs again in a new pod, not completes."""
    task = {"name": "main", "driver": "docker", "config": {"image": "x"}, "killTimeout": "2s"}
    body = allocation_manifest(
        "once", namespace, job_type="batch", restart=FAST_RESTARTS, tasks=[task]
    )
    uid = running(kubectl, operator, namespace, body)
    first_pod = kubectl.json("get", "pod", "once", "-n", namespace)["metadata"]["uid"]
    cluster.set_handled_signals(namespace, "once", "main", ["TERM"])  # it cleans up, then exits 0
    assert post(operator, f"/v1/client/allocation/{uid}/restart", {"TaskName": "main"}) == (200, {})
    cluster.container_exit(namespace, "once", "main", 0)

    def restarted() -> bool:
        state = status(kubectl, namespace, "once")
        task = state["taskStates"]["main"]
        pod = kubectl.json("get", "pod", "once", "-n", namespace)["metadata"]["uid"]
        return bool(
            task["restarts"] == 1
            and task["state"] == "running"
            and state["clientStatus"] == "running"
            and pod != first_pod
        )

    eventually(restarted, what="the task to run again in a new pod")
    kinds = events(kubectl, namespace, "once", "main")
    assert kinds[-4:] == ["Restart Signaled", "Terminated", "Restarting", "Started"]
    time.sleep(2.5)  # past the kill timeout: the exit was seen, so no SIGKILL follows
    assert "Killing" not in events(kubectl, namespace, "once", "main")
    assert "KILL" not in [r.signal for r in cluster.signals(namespace, "once", "main")]
    state = status(kubectl, namespace, "once")
    assert state["clientStatus"] == "running" and state["taskStates"]["main"]["restarts"] == 1


def test_restart_all_tasks_runs_prestart_tasks_again(
    operator: Operator, kubectl: Any, namespace: str
) -> None:
    tasks = [
        {
            "name": "setup",
            "driver": "docker",
            "config": {"image": "x"},
            "lifecycle": {"hook": "prestart"},
        },
        {"name": "main", "driver": "docker", "config": {"image": "x"}},
    ]
    uid = running(kubectl, operator, namespace, quick_allocation("all", namespace, tasks=tasks))
    first_pod = kubectl.json("get", "pod", "all", "-n", namespace)["metadata"]["uid"]
    assert post(operator, f"/v1/client/allocation/{uid}/restart", {"AllTasks": True})[0] == 200

    def replaced() -> bool:
        pod = kubectl.json("get", "pod", "all", "-n", namespace)["metadata"]["uid"]
        return bool(
            pod != first_pod and status(kubectl, namespace, "all")["clientStatus"] == "running"
        )

    eventually(replaced, what="a new pod with every task")
    for task in ("setup", "main"):
        kinds = events(kubectl, namespace, "all", task)
        assert "Restart Signaled" in kinds
        assert kinds.index("Restart Signaled") < len(kinds) - 1
    assert status(kubectl, namespace, "all")["taskStates"]["setup"]["state"] == "dead"
    assert status(kubectl, namespace, "all")["taskStates"]["setup"]["failed"] is False


def test_restart_of_a_bare_pid1_without_a_term_handler_is_refused(
    operator: Operator, cluster: Any, kubectl: Any, namespace: str
) -> None:
    cluster.run_without_init(namespace, "stiff", "main")
    uid = running(kubectl, operator, namespace, quick_allocation("stiff", namespace))
    code, text = post(operator, f"/v1/client/allocation/{uid}/restart", {"TaskName": "main"})
    assert code == 500
    assert text.startswith('cannot restart task "main" in place: the container\'s PID 1')
    assert "AllTasks" in text
    assert cluster.signals(namespace, "stiff", "main") == []
    assert "Restart Signaled" not in events(kubectl, namespace, "stiff", "main")
    assert status(kubectl, namespace, "stiff")["taskStates"]["main"]["restarts"] == 0


def slow_to_exit(name: str, namespace: str) -> dict[str, Any]:
    task = {"name": "main", "driver": "docker", "config": {"image": "x"}, "killTimeout": "1s"}
    return quick_allocation(name, namespace, tasks=[task])


def test_a_task_that_ignores_sigterm_is_killed_below_its_init(
    operator: Operator, cluster: Any, kubectl: Any, namespace: str
) -> None:
    uid = running(kubectl, operator, namespace, slow_to_exit("slow", namespace))
    cluster.set_handled_signals(namespace, "slow", "main", ["TERM"])  # handles it, stays up
    assert post(operator, f"/v1/client/allocation/{uid}/restart", {"TaskName": "main"})[0] == 200
    eventually(
        lambda: status(kubectl, namespace, "slow")["taskStates"]["main"]["restarts"] == 1,
        what="SIGKILL after the kill timeout",
    )
    argvs = [r.argv for r in cluster.signals(namespace, "slow", "main")]
    assert argvs == [("kill", "-TERM", "--", "1"), ("kill", "-KILL", "--", "-1")]
    assert "Sent SIGKILL after kill timeout" in displays(kubectl, namespace, "slow")


def test_a_bare_pid1_that_ignores_sigterm_gets_a_new_pod(
    operator: Operator, cluster: Any, kubectl: Any, namespace: str
) -> None:
    cluster.run_without_init(namespace, "stuck", "main")
    uid = running(kubectl, operator, namespace, slow_to_exit("stuck", namespace))
    cluster.set_handled_signals(namespace, "stuck", "main", ["TERM"])
    first_pod = kubectl.json("get", "pod", "stuck", "-n", namespace)["metadata"]["uid"]
    assert post(operator, f"/v1/client/allocation/{uid}/restart", {"TaskName": "main"})[0] == 200

    def replaced() -> bool:
        pod = kubectl.json("get", "pod", "stuck", "-n", namespace)["metadata"]["uid"]
        return bool(
            pod != first_pod and status(kubectl, namespace, "stuck")["clientStatus"] == "running"
        )

    eventually(replaced, what="the pod to be replaced after the kill timeout")
    assert "Task did not exit after SIGTERM; replacing the pod" in displays(
        kubectl, namespace, "stuck"
    )


@pytest.mark.parametrize(
    ("body", "code", "text"),
    [
        (
            {"TaskName": "main", "AllTasks": True},
            400,
            "task name cannot be set when restarting all tasks",
        ),
        ({"TaskName": "ghost"}, 404, "Could not find task runner for task: ghost"),
    ],
)
def test_bad_restart_requests_change_nothing(
    operator: Operator,
    cluster: Any,
    kubectl: Any,
    namespace: str,
    body: Any,
    code: int,
    text: str,
) -> None:
    uid = running(kubectl, operator, namespace, quick_allocation("steady", namespace))
    assert post(operator, f"/v1/client/allocation/{uid}/restart", body) == (code, text)
    assert cluster.signals(namespace, "steady", "main") == []
    assert status(kubectl, namespace, "steady")["taskStates"]["main"]["restarts"] == 0


# -- pause -----------------------------------------------------------------------------------

NEVER = {"cron": {"start": "0 0 1 1 * 2099", "end": "0 1"}}  # a window that never comes


def test_pause_schedule_and_overrides(
    operator: Operator, cluster: Any, kubectl: Any, namespace: str
) -> None:
    tasks = [{"name": "main", "driver": "docker", "config": {"image": "x"}, "schedule": NEVER}]
    uid = running(kubectl, operator, namespace, quick_allocation("sched", namespace, tasks=tasks))
    path = f"/v1/client/allocation/{uid}/pause"

    def state() -> str:
        value: str = operator.get(f"{path}?task=main")["ScheduleState"]
        return value

    # Outside its window the task is paused by the schedule: its process is stopped.
    eventually(lambda: state() == "scheduled_pause", what="the schedule to pause the task")
    assert cluster.signals(namespace, "sched", "main")[-1].signal == "STOP"
    assert (cluster.sandbox_dir(namespace, "sched", "main") / "stopped").exists()

    code, body = post(operator, path, {"Task": "main", "ScheduleState": "run"})
    assert code == 200 and body["Index"] > 0
    assert state() == "force_run"
    assert cluster.signals(namespace, "sched", "main")[-1].signal == "CONT"
    assert not (cluster.sandbox_dir(namespace, "sched", "main") / "stopped").exists()

    assert post(operator, path, {"Task": "main", "ScheduleState": "scheduled"})[0] == 200
    assert state() == "scheduled_pause"  # schedule_resume settled at once
    assert post(operator, path, {"Task": "main", "ScheduleState": "pause"})[0] == 200
    assert state() == "force_pause"

    kinds = events(kubectl, namespace, "sched", "main")
    assert kinds[-3:] == ["Running", "Pausing", "Pausing"] or "Pausing" in kinds
    shown = displays(kubectl, namespace, "sched")
    assert "Pausing due to schedule" in shown and "Running due to override" in shown
    wire = operator.get(f"/v1/allocation/{uid}")
    assert wire["TaskStates"]["main"]["Paused"] == "force_pause"


def test_pause_without_schedule_and_errors(
    operator: Operator, cluster: Any, kubectl: Any, namespace: str
) -> None:
    uid = running(kubectl, operator, namespace, quick_allocation("plain", namespace))
    path = f"/v1/client/allocation/{uid}/pause"
    assert operator.get(f"{path}?task=main") == {"ScheduleState": ""}
    assert post(operator, path, {"Task": "main", "ScheduleState": "bogus"}) == (
        400,
        "Not a valid task schedule state",
    )
    assert post(operator, path, {"Task": "ghost", "ScheduleState": "pause"}) == (
        404,
        "Task not found",
    )
    assert cluster.signals(namespace, "plain", "main") == []
    assert post(operator, path, {"Task": "main", "ScheduleState": "pause"})[0] == 200
    assert operator.get(f"{path}?task=main") == {"ScheduleState": "force_pause"}
    assert post(operator, path, {"Task": "main", "ScheduleState": "scheduled"})[0] == 200
    assert operator.get(f"{path}?task=main") == {"ScheduleState": ""}
    assert [r.argv for r in cluster.signals(namespace, "plain", "main")] == [
        ("kill", "-STOP", "--", "-1"),
        ("kill", "-CONT", "--", "-1"),
    ]


def test_pausing_a_bare_pid1_is_refused(
    operator: Operator, cluster: Any, kubectl: Any, namespace: str
) -> None:
    cluster.run_without_init(namespace, "solo", "main")
    uid = running(kubectl, operator, namespace, quick_allocation("solo", namespace))
    path = f"/v1/client/allocation/{uid}/pause"
    code, text = post(operator, path, {"Task": "main", "ScheduleState": "pause"})
    assert code == 500
    assert text.startswith('cannot pause task "main": its main process is the container\'s PID 1')
    assert operator.get(f"{path}?task=main") == {"ScheduleState": ""}
    assert cluster.signals(namespace, "solo", "main") == []
    assert "Pausing" not in events(kubectl, namespace, "solo", "main")


def test_a_schedule_a_bare_pid1_cannot_follow_is_reported_once(
    operator: Operator, cluster: Any, kubectl: Any, namespace: str
) -> None:
    cluster.run_without_init(namespace, "nightly", "main")
    tasks = [{"name": "main", "driver": "docker", "config": {"image": "x"}, "schedule": NEVER}]
    running(kubectl, operator, namespace, quick_allocation("nightly", namespace, tasks=tasks))

    def refusals() -> list[str]:
        shown = displays(kubectl, namespace, "nightly")
        return [d for d in shown if d.startswith("Schedule not followed:")]

    eventually(lambda: len(refusals()) == 1, what="the refused schedule to be recorded")
    time.sleep(2)  # passes go on (the reconciler rechecks); the refusal is not repeated
    assert len(refusals()) == 1
    assert "cannot pause task" in refusals()[0]
    assert status(kubectl, namespace, "nightly")["taskStates"]["main"].get("paused", "") == ""
    assert cluster.signals(namespace, "nightly", "main") == []
