"""Stop, signal, restart and pause through `/v1` on the real control plane.

Stop runs on kwok's node (it deletes and creates pods; nothing runs inside them). Signal,
restart and pause run on the real node: the commands reach the container's processes through
`pods/exec`, and each test checks what the task's process trapped or how it ended
(tests/cluster/scripted.py), the pod, and the status it leads to.
"""

from __future__ import annotations

import json
import time
import urllib.parse
from typing import Any

import pytest
from running_operator import (
    FAST_RESTARTS,
    Operator,
    allocation_manifest,
    http,
    quick_allocation,
)
from scripted import (
    IMAGE,
    end_container,
    idle_task,
    process_states,
    scripted_task,
    trapped_signals,
)

from allocbridge_localcluster.kubectl import eventually

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
# On the real node: each task runs tests/cluster/scripted.py's script, which records the signals
# it traps, so a test sees what reached the process, not what was sent.


def test_signal_reaches_the_task_and_is_recorded(
    operator: Operator, kubectl: Any, real_namespace: str
) -> None:
    ns = real_namespace
    body = quick_allocation("sig", ns, tasks=[scripted_task(traps=("USR1",))])
    uid = running(kubectl, operator, ns, body)
    code, answer = post(
        operator, f"/v1/client/allocation/{uid}/signal", {"Signal": "SIGUSR1", "Task": "main"}
    )
    assert (code, answer) == (200, {})
    eventually(lambda: trapped_signals(kubectl, ns, "sig", "main") == ["USR1"], what="the trap")
    state = status(kubectl, ns, "sig")["taskStates"]["main"]
    signaling = [e for e in state["events"] if e["type"] == "Signaling"][-1]
    assert signaling["taskSignal"] == "SIGUSR1"
    assert state["state"] == "running" and state["restarts"] == 0  # handled: no exit


def test_unhandled_terminating_signal_restarts_the_container(
    operator: Operator, kubectl: Any, real_namespace: str
) -> None:
    ns = real_namespace
    uid = running(kubectl, operator, ns, quick_allocation("term", ns, tasks=[scripted_task()]))
    assert post(operator, f"/v1/client/allocation/{uid}/signal", {"Signal": "SIGTERM"})[0] == 200
    eventually(
        lambda: status(kubectl, ns, "term")["taskStates"]["main"]["restarts"] == 1,
        what="the container to restart",
    )
    kinds = events(kubectl, ns, "term", "main")
    assert kinds.index("Signaling") < kinds.index("Terminated") < kinds.index("Restarting")
    pod = kubectl.json("get", "pod", "term", "-n", ns)
    assert pod["status"]["containerStatuses"][0]["lastState"]["terminated"]["exitCode"] == 143


def test_signal_without_task_goes_to_every_running_task(
    operator: Operator, kubectl: Any, real_namespace: str
) -> None:
    ns = real_namespace
    tasks = [scripted_task(name, traps=("HUP",)) for name in ("a", "b")]
    uid = running(kubectl, operator, ns, quick_allocation("both", ns, tasks=tasks))
    assert post(operator, f"/v1/client/allocation/{uid}/signal", {"Signal": "SIGHUP"})[0] == 200
    for task in ("a", "b"):

        def trapped(t: str = task) -> bool:
            return trapped_signals(kubectl, ns, "both", t) == ["HUP"]

        eventually(trapped, what=f"task {task}'s trap")


def test_a_signal_a_bare_pid1_would_drop_is_refused(
    operator: Operator, kubectl: Any, real_namespace: str
) -> None:
    """`sleep` as PID 1 has no handler and no child: the kernel would drop the signal."""
    ns = real_namespace
    uid = running(kubectl, operator, ns, quick_allocation("bare", ns, tasks=[idle_task()]))
    path = f"/v1/client/allocation/{uid}/signal"
    code, text = post(operator, path, {"Signal": "SIGUSR1", "Task": "main"})
    assert code == 500
    assert text.startswith("Failed to signal task: main, err: the container's PID 1 neither")
    assert "SIGUSR1" in text and "init such as tini" in text
    assert "Signaling" not in events(kubectl, ns, "bare", "main")  # nothing recorded
    code, text = post(operator, path, {"Signal": "SIGKILL"})
    assert code == 500 and "SIGKILL never reaches a container's PID 1" in text
    assert status(kubectl, ns, "bare")["taskStates"]["main"]["restarts"] == 0

    # A bare PID 1 with a handler takes the signal itself.
    body = quick_allocation("handler", ns, tasks=[scripted_task(traps=("USR1",), init="bare")])
    uid = running(kubectl, operator, ns, body)
    path = f"/v1/client/allocation/{uid}/signal"
    assert post(operator, path, {"Signal": "SIGUSR1", "Task": "main"}) == (200, {})
    eventually(lambda: trapped_signals(kubectl, ns, "handler", "main") == ["USR1"], what="trap")


def test_sigkill_goes_to_the_processes_below_the_init(
    operator: Operator, kubectl: Any, real_namespace: str
) -> None:
    ns = real_namespace
    tasks = [scripted_task(init="children")]
    uid = running(kubectl, operator, ns, quick_allocation("killed", ns, tasks=tasks))
    assert post(operator, f"/v1/client/allocation/{uid}/signal", {"Signal": "SIGKILL"})[0] == 200
    eventually(
        lambda: status(kubectl, ns, "killed")["taskStates"]["main"]["restarts"] == 1,
        what="the killed container to restart",
    )
    pod = kubectl.json("get", "pod", "killed", "-n", ns)
    # tini ends with the status of its child, killed by SIGKILL: 128 + 9.
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
    kubectl: Any,
    real_namespace: str,
    body: Any,
    code: int,
    text: str,
) -> None:
    ns = real_namespace
    tasks = [scripted_task(traps=("USR1", "HUP", "TERM"))]
    uid = running(kubectl, operator, ns, quick_allocation("calm", ns, tasks=tasks))
    path = operator.api + f"/v1/client/allocation/{uid}/signal"
    if isinstance(body, str):  # malformed JSON, sent as is
        status_code, raw, _ = http(path, method="POST", raw=body.encode())
    else:
        status_code, raw, _ = http(path, method="POST", body=body)
    answer = (status_code, raw.decode())
    assert answer[0] == code and text in answer[1]
    assert trapped_signals(kubectl, ns, "calm", "main") == []
    assert "Signaling" not in events(kubectl, ns, "calm", "main")


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
    operator: Operator, kubectl: Any, real_namespace: str
) -> None:
    ns = real_namespace
    # It records SIGTERM and then exits 0, as a program that shuts down cleanly does.
    task = scripted_task(exits_on=("TERM",))
    uid = running(kubectl, operator, ns, quick_allocation("rs", ns, tasks=[task]))
    for count in (1, 2):  # the policy allows 1 attempt: user restarts must not count
        assert post(operator, f"/v1/client/allocation/{uid}/restart", {"TaskName": "main"}) == (
            200,
            {},
        )

        def restarted(c: int = count) -> bool:
            task = status(kubectl, ns, "rs")["taskStates"]["main"]
            return bool(task["restarts"] == c and task["state"] == "running")

        eventually(restarted, timeout=60, what=f"restart {count}")
    assert trapped_signals(kubectl, ns, "rs", "main") == ["TERM", "TERM"]
    kinds = events(kubectl, ns, "rs", "main")
    assert kinds[-4:] == ["Restart Signaled", "Terminated", "Restarting", "Started"]
    shown = operator.get(f"/v1/allocation/{uid}")["TaskStates"]["main"]["Events"]
    restarting = next(e for e in reversed(shown) if e["Type"] == "Restarting")
    assert restarting["DisplayMessage"] == "User requested restart - Task restarting in 0s"
    state = status(kubectl, ns, "rs")
    assert state["clientStatus"] == "running" and state["taskStates"]["main"]["lastRestart"]


def test_restart_stops_the_task_with_its_kill_signal(
    operator: Operator, kubectl: Any, real_namespace: str
) -> None:
    """SIGINT, the task's kill signal, reaches it; a task that handles it and stays up is
    killed after the kill timeout."""
    ns = real_namespace
    task = scripted_task(traps=("INT",), killSignal="SIGINT", killTimeout="1s")
    uid = running(kubectl, operator, ns, quick_allocation("ki", ns, tasks=[task]))
    assert post(operator, f"/v1/client/allocation/{uid}/restart", {"TaskName": "main"})[0] == 200
    eventually(
        lambda: status(kubectl, ns, "ki")["taskStates"]["main"]["restarts"] == 1,
        timeout=60,
        what="SIGKILL after the kill timeout",
    )
    assert trapped_signals(kubectl, ns, "ki", "main") == ["INT"]
    reasons = [
        e.get("killReason")
        for e in status(kubectl, ns, "ki")["taskStates"]["main"]["events"]
        if e["type"] == "Killing"
    ]
    assert reasons[-1] == "restart: task did not exit after SIGINT"
    assert "Sent SIGKILL after kill timeout" in displays(kubectl, ns, "ki")


def test_restarting_a_batch_task_that_exits_0_runs_it_again(
    operator: Operator, kubectl: Any, real_namespace: str
) -> None:
    """Under OnFailure the kubelet leaves a container that exited 0 stopped; the exit after a
    user restart is that restart, so the task runs again in a new pod, not completes."""
    ns = real_namespace
    task = scripted_task(exits_on=("TERM",), killTimeout="5s")  # cleans up, then exits 0
    body = allocation_manifest("once", ns, job_type="batch", restart=FAST_RESTARTS, tasks=[task])
    uid = running(kubectl, operator, ns, body)
    first_pod = kubectl.json("get", "pod", "once", "-n", ns)["metadata"]["uid"]
    assert post(operator, f"/v1/client/allocation/{uid}/restart", {"TaskName": "main"}) == (200, {})

    def restarted() -> bool:
        state = status(kubectl, ns, "once")
        task = state["taskStates"]["main"]
        pod = kubectl.json("get", "pod", "once", "-n", ns)["metadata"]["uid"]
        return bool(
            task["restarts"] == 1
            and task["state"] == "running"
            and state["clientStatus"] == "running"
            and pod != first_pod
        )

    eventually(restarted, timeout=60, what="the task to run again in a new pod")
    kinds = events(kubectl, ns, "once", "main")
    assert kinds[-4:] == ["Restart Signaled", "Terminated", "Restarting", "Started"]
    time.sleep(5.5)  # past the kill timeout: the exit was seen, so no SIGKILL follows
    assert "Killing" not in events(kubectl, ns, "once", "main")
    state = status(kubectl, ns, "once")
    assert state["clientStatus"] == "running" and state["taskStates"]["main"]["restarts"] == 1


def test_restart_all_tasks_runs_prestart_tasks_again(
    operator: Operator, kubectl: Any, real_namespace: str
) -> None:
    ns = real_namespace
    setup = {
        "name": "setup",
        "driver": "docker",
        "config": {"image": IMAGE, "command": "true"},
        "lifecycle": {"hook": "prestart"},
    }
    tasks = [setup, scripted_task()]
    uid = running(kubectl, operator, ns, quick_allocation("all", ns, tasks=tasks))
    first_pod = kubectl.json("get", "pod", "all", "-n", ns)["metadata"]["uid"]
    assert post(operator, f"/v1/client/allocation/{uid}/restart", {"AllTasks": True})[0] == 200

    def replaced() -> bool:
        pod = kubectl.json("get", "pod", "all", "-n", ns)["metadata"]["uid"]
        return bool(pod != first_pod and status(kubectl, ns, "all")["clientStatus"] == "running")

    eventually(replaced, timeout=60, what="a new pod with every task")
    for task in ("setup", "main"):
        kinds = events(kubectl, ns, "all", task)
        assert "Restart Signaled" in kinds
        assert kinds.index("Restart Signaled") < len(kinds) - 1
    assert status(kubectl, ns, "all")["taskStates"]["setup"]["state"] == "dead"
    assert status(kubectl, ns, "all")["taskStates"]["setup"]["failed"] is False


def test_restart_of_a_bare_pid1_without_a_term_handler_is_refused(
    operator: Operator, kubectl: Any, real_namespace: str
) -> None:
    ns = real_namespace
    uid = running(kubectl, operator, ns, quick_allocation("stiff", ns, tasks=[idle_task()]))
    code, text = post(operator, f"/v1/client/allocation/{uid}/restart", {"TaskName": "main"})
    assert code == 500
    assert text.startswith('cannot restart task "main" in place: the container\'s PID 1')
    assert "AllTasks" in text
    assert "Restart Signaled" not in events(kubectl, ns, "stiff", "main")
    time.sleep(1)  # had anything reached it, the container would be restarting by now
    assert status(kubectl, ns, "stiff")["taskStates"]["main"]["restarts"] == 0


def test_a_task_that_ignores_sigterm_is_killed_below_its_init(
    operator: Operator, kubectl: Any, real_namespace: str
) -> None:
    ns = real_namespace
    task = scripted_task(traps=("TERM",), killTimeout="1s")  # handles it, stays up
    uid = running(kubectl, operator, ns, quick_allocation("slow", ns, tasks=[task]))
    assert post(operator, f"/v1/client/allocation/{uid}/restart", {"TaskName": "main"})[0] == 200
    eventually(
        lambda: status(kubectl, ns, "slow")["taskStates"]["main"]["restarts"] == 1,
        timeout=60,
        what="SIGKILL after the kill timeout",
    )
    assert trapped_signals(kubectl, ns, "slow", "main") == ["TERM"]
    assert "Sent SIGKILL after kill timeout" in displays(kubectl, ns, "slow")
    pod = kubectl.json("get", "pod", "slow", "-n", ns)
    assert pod["status"]["containerStatuses"][0]["lastState"]["terminated"]["exitCode"] == 137


def test_a_shell_pid1_that_outlives_sigkill_of_its_children_gets_a_new_pod(
    operator: Operator, kubectl: Any, real_namespace: str
) -> None:
    """A shell as PID 1 that traps SIGTERM and waits on a child: after the kill timeout
    SIGKILL ends the child, not the shell, so the pod is replaced."""
    ns = real_namespace
    task = scripted_task(traps=("TERM",), init="bare", killTimeout="1s")
    uid = running(kubectl, operator, ns, quick_allocation("stuck", ns, tasks=[task]))
    first_pod = kubectl.json("get", "pod", "stuck", "-n", ns)["metadata"]["uid"]
    assert post(operator, f"/v1/client/allocation/{uid}/restart", {"TaskName": "main"})[0] == 200

    def replaced() -> bool:
        pod = kubectl.json("get", "pod", "stuck", "-n", ns)["metadata"]["uid"]
        return bool(pod != first_pod and status(kubectl, ns, "stuck")["clientStatus"] == "running")

    eventually(replaced, timeout=60, what="the pod to be replaced after SIGKILL")
    shown = displays(kubectl, ns, "stuck")
    assert "Sent SIGKILL after kill timeout" in shown
    assert "PID 1 did not exit after SIGKILL of its processes; replacing the pod" in shown


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
    kubectl: Any,
    real_namespace: str,
    body: Any,
    code: int,
    text: str,
) -> None:
    ns = real_namespace
    tasks = [scripted_task(traps=("TERM",))]
    uid = running(kubectl, operator, ns, quick_allocation("steady", ns, tasks=tasks))
    assert post(operator, f"/v1/client/allocation/{uid}/restart", body) == (code, text)
    assert trapped_signals(kubectl, ns, "steady", "main") == []
    assert status(kubectl, ns, "steady")["taskStates"]["main"]["restarts"] == 0


# -- pause -----------------------------------------------------------------------------------

NEVER = {"cron": {"start": "0 0 1 1 * 2099", "end": "0 1"}}  # a window that never comes


def test_pause_schedule_and_overrides(
    operator: Operator, kubectl: Any, real_namespace: str
) -> None:
    ns = real_namespace
    tasks = [scripted_task(schedule=NEVER)]
    uid = running(kubectl, operator, ns, quick_allocation("sched", ns, tasks=tasks))
    path = f"/v1/client/allocation/{uid}/pause"

    def state() -> str:
        value: str = operator.get(f"{path}?task=main")["ScheduleState"]
        return value

    def shell_state() -> str:
        return process_states(kubectl, ns, "sched", "main").get("sh", "")

    # Outside its window the task is paused by the schedule: its process is stopped.
    eventually(lambda: state() == "scheduled_pause", what="the schedule to pause the task")
    eventually(lambda: shell_state() == "T", what="the task's shell to be stopped")
    assert process_states(kubectl, ns, "sched", "main")["tini"] != "T"  # PID 1 stays up

    code, body = post(operator, path, {"Task": "main", "ScheduleState": "run"})
    assert code == 200 and body["Index"] > 0
    assert state() == "force_run"
    eventually(lambda: shell_state() in ("S", "R"), what="the task's shell to run again")

    assert post(operator, path, {"Task": "main", "ScheduleState": "scheduled"})[0] == 200
    assert state() == "scheduled_pause"  # schedule_resume settled at once
    assert post(operator, path, {"Task": "main", "ScheduleState": "pause"})[0] == 200
    assert state() == "force_pause"

    kinds = events(kubectl, ns, "sched", "main")
    assert kinds[-3:] == ["Running", "Pausing", "Pausing"] or "Pausing" in kinds
    shown = displays(kubectl, ns, "sched")
    assert "Pausing due to schedule" in shown and "Running due to override" in shown
    wire = operator.get(f"/v1/allocation/{uid}")
    assert wire["TaskStates"]["main"]["Paused"] == "force_pause"


def test_pause_without_schedule_and_errors(
    operator: Operator, kubectl: Any, real_namespace: str
) -> None:
    ns = real_namespace
    uid = running(kubectl, operator, ns, quick_allocation("plain", ns, tasks=[scripted_task()]))
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
    assert process_states(kubectl, ns, "plain", "main")["sh"] != "T"
    assert post(operator, path, {"Task": "main", "ScheduleState": "pause"})[0] == 200
    assert operator.get(f"{path}?task=main") == {"ScheduleState": "force_pause"}
    eventually(lambda: process_states(kubectl, ns, "plain", "main")["sh"] == "T", what="stopped")
    assert post(operator, path, {"Task": "main", "ScheduleState": "scheduled"})[0] == 200
    assert operator.get(f"{path}?task=main") == {"ScheduleState": ""}
    eventually(
        lambda: process_states(kubectl, ns, "plain", "main")["sh"] != "T", what="running again"
    )


def test_pausing_a_bare_pid1_is_refused(
    operator: Operator, kubectl: Any, real_namespace: str
) -> None:
    ns = real_namespace
    uid = running(kubectl, operator, ns, quick_allocation("solo", ns, tasks=[idle_task()]))
    path = f"/v1/client/allocation/{uid}/pause"
    code, text = post(operator, path, {"Task": "main", "ScheduleState": "pause"})
    assert code == 500
    assert text.startswith('cannot pause task "main": its main process is the container\'s PID 1')
    assert operator.get(f"{path}?task=main") == {"ScheduleState": ""}
    assert process_states(kubectl, ns, "solo", "main")["sleep"] != "T"
    assert "Pausing" not in events(kubectl, ns, "solo", "main")


def test_a_schedule_a_bare_pid1_cannot_follow_is_reported_once(
    operator: Operator, kubectl: Any, real_namespace: str
) -> None:
    ns = real_namespace
    tasks = [idle_task(schedule=NEVER)]
    running(kubectl, operator, ns, quick_allocation("nightly", ns, tasks=tasks))

    def refusals() -> list[str]:
        shown = displays(kubectl, ns, "nightly")
        return [d for d in shown if d.startswith("Schedule not followed:")]

    eventually(lambda: len(refusals()) == 1, what="the refused schedule to be recorded")
    time.sleep(2)  # passes go on (the reconciler rechecks); the refusal is not repeated
    assert len(refusals()) == 1
    assert "cannot pause task" in refusals()[0]
    assert status(kubectl, ns, "nightly")["taskStates"]["main"].get("paused", "") == ""
    assert process_states(kubectl, ns, "nightly", "main")["sleep"] != "T"


# -- races: actions while the task's container ends, restarts, or its pod goes ----------------


def test_actions_racing_a_container_restart_or_a_pod_deletion_get_nomads_answers(
    operator: Operator, kubectl: Any, real_namespace: str
) -> None:
    """While the task's container exits and waits out the kubelet's back-off, or its pod is
    deleted, every action answers 200 or Nomad's 409 `Task not running`: never a 500."""
    ns = real_namespace
    policy = {"attempts": 10, "interval": "10m", "delay": "1s", "mode": "fail"}
    task = scripted_task(traps=("USR1", "HUP"))
    uid = running(
        kubectl, operator, ns, allocation_manifest("race", ns, restart=policy, tasks=[task])
    )
    actions = [
        ("signal", {"Signal": "SIGUSR1", "Task": "main"}),
        ("pause", {"Task": "main", "ScheduleState": "pause"}),
        ("pause", {"Task": "main", "ScheduleState": "scheduled"}),
        ("signal", {"Signal": "SIGHUP"}),
    ]
    answers: list[tuple[str, int, Any]] = []

    def act(rounds: int) -> None:
        for _ in range(rounds):
            for action, body in actions:
                code, text = post(operator, f"/v1/client/allocation/{uid}/{action}", body)
                answers.append((action, code, text))

    def container() -> dict[str, Any]:
        found: dict[str, Any] = kubectl.json("get", "pod", "race", "-n", ns)["status"]
        return dict(found["containerStatuses"][0])

    for _ in range(2):  # the second exit meets the kubelet's back-off
        restarts = container()["restartCount"]
        end_container(kubectl, ns, "race", "main", 1)
        act(5)

        def restarted(before: int = restarts) -> bool:
            now = container()
            return bool(now["restartCount"] > before and "running" in now["state"])

        eventually(restarted, timeout=90, what="the container to run again")
    kubectl("delete", "pod", "race", "-n", ns, "--wait=false")
    act(5)
    unexpected = [a for a in answers if a[1] not in (200, 409)]
    assert not unexpected, unexpected
    refused = [a for a in answers if a[1] == 409]
    assert refused and all(a[2] == "Task not running" for a in refused), answers


def exec_answer(operator: Operator, alloc_id: str) -> tuple[int, str, bool]:
    """The close code and reason of an exec of `echo raced`, and whether its exit frame came."""
    from websockets.exceptions import ConnectionClosed
    from websockets.sync.client import connect

    query = urllib.parse.urlencode({"task": "main", "command": '["echo","raced"]'})
    url = f"ws://{operator.api.removeprefix('http://')}/v1/client/allocation/{alloc_id}/exec"
    exited = False
    with connect(f"{url}?{query}", open_timeout=30) as ws:
        try:
            while True:
                frame = json.loads(ws.recv(timeout=30))
                exited = exited or bool(frame.get("exited"))
        except ConnectionClosed as closed:
            if closed.rcvd is None:
                return 1006, "no close frame", exited
            return closed.rcvd.code, closed.rcvd.reason, exited


def test_restart_and_exec_racing_a_container_restart_or_a_pod_deletion_get_nomads_answers(
    operator: Operator, kubectl: Any, real_namespace: str
) -> None:
    """Restart and exec while the task's container exits (and restarts, also from the
    restarts themselves), while its pod is deleted, and while its allocation is deleted: a
    restart answers 200, 409 `Task not running` or 404 `Unknown allocation`; an exec ends
    with its exit frame and a normal close, or closes with 1008 and Nomad's reason for a task
    that is not running or an allocation that is gone: never a 500 or a 1011."""
    ns = real_namespace
    policy = {"attempts": 10, "interval": "10m", "delay": "1s", "mode": "fail"}
    task = scripted_task(traps=("USR1", "HUP"))
    uid = running(
        kubectl, operator, ns, allocation_manifest("race", ns, restart=policy, tasks=[task])
    )
    restarts: list[tuple[int, Any]] = []
    execs: list[tuple[int, str, bool]] = []

    def act(rounds: int) -> None:
        for _ in range(rounds):
            restarts.append(
                post(operator, f"/v1/client/allocation/{uid}/restart", {"TaskName": "main"})
            )
            execs.append(exec_answer(operator, uid))

    def container() -> dict[str, Any]:
        found: dict[str, Any] = kubectl.json("get", "pod", "race", "-n", ns)["status"]
        return dict(found["containerStatuses"][0])

    before = container()["restartCount"]
    end_container(kubectl, ns, "race", "main", 1)
    act(3)
    eventually(
        lambda: container()["restartCount"] > before and "running" in container()["state"],
        timeout=90,
        what="the container to run again",
    )
    kubectl("delete", "pod", "race", "-n", ns, "--wait=false")
    act(3)
    kubectl("delete", "allocation", "race", "-n", ns, "--wait=false")
    act(2)
    eventually(
        lambda: http(f"{operator.api}/v1/allocation/{uid}")[0] == 404,
        what="the allocation to be gone from the API",
    )
    act(1)

    gone = f'Unknown allocation "{uid}"'
    allowed = {(200, ""), (409, "Task not running"), (404, gone)}
    unexpected = [r for r in restarts if (r[0], "" if r[0] == 200 else r[1]) not in allowed]
    assert not unexpected, restarts
    reasons = {'task "main" is not running.', 'task "main" not started yet.', gone}
    bad_execs = [
        e
        for e in execs
        if not (e[0] == 1000 and e[2])
        and not (
            e[0] == 1008
            and (e[1] in reasons or e[1].startswith("exec not possible, client status"))
        )
    ]
    assert not bad_execs, execs
    assert any(r[0] == 409 for r in restarts), f"no restart met a stopped task: {restarts}"
    assert restarts[-1] == (404, gone) and execs[-1][:2] == (1008, gone)
