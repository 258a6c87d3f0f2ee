"""Deriving Nomad task states and events from the pod, without I/O."""

from __future__ import annotations

from typing import Any

import pytest

from allocbridge.model.spec import AllocationSpec, parse_spec
from allocbridge.model.status import KubeEvent, derive, rfc3339, validation_failed
from allocbridge.reconcile.writes import urgent

NS = 1_000_000_000
T0 = 1_800_000_000 * NS


def spec(
    job_type: str = "service",
    tasks: list[dict[str, Any]] | None = None,
    restart: dict[str, Any] | None = None,
) -> AllocationSpec:
    return parse_spec(
        {
            "job": {"id": "web", "type": job_type},
            "taskGroup": {"name": "web", "restartPolicy": restart or {}},
            "tasks": tasks
            or [{"name": "server", "driver": "docker", "config": {"image": "nginx"}}],
        }
    )


def pod(
    containers: list[dict[str, Any]],
    phase: str = "Running",
    policy: str = "Always",
    init: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    return {
        "spec": {"restartPolicy": policy},
        "status": {
            "phase": phase,
            "containerStatuses": containers,
            "initContainerStatuses": init or [],
        },
    }


def running(
    name: str, started: int, restarts: int = 0, last: dict[str, Any] | None = None
) -> dict[str, Any]:
    return {
        "name": name,
        "restartCount": restarts,
        "state": {"running": {"startedAt": rfc3339(started)}},
        "lastState": {"terminated": last} if last else {},
    }


def terminated(name: str, code: int, finished: int, restarts: int = 0) -> dict[str, Any]:
    return {
        "name": name,
        "restartCount": restarts,
        "state": {"terminated": {"exitCode": code, "finishedAt": rfc3339(finished)}},
    }


def types(status: dict[str, Any], task: str) -> list[str]:
    return [e["type"] for e in status["taskStates"][task]["events"]]


def test_first_sight_records_received_and_asks_for_a_pod() -> None:
    decision = derive(spec(), {}, None, T0)
    assert decision.create_pod
    assert decision.status["clientStatus"] == "pending"
    assert decision.status["desiredStatus"] == "run"
    assert types(decision.status, "server") == ["Received", "Task Setup"]
    assert decision.status["taskStates"]["server"]["state"] == "pending"


def test_running_container_starts_the_task() -> None:
    first = derive(spec(), {}, None, T0).status
    first["podCreated"] = True
    decision = derive(spec(), first, pod([running("server", T0 + NS)]), T0 + 2 * NS)
    status = decision.status
    assert status["clientStatus"] == "running"
    assert status["taskStates"]["server"]["state"] == "running"
    assert status["taskStates"]["server"]["startedAt"] == rfc3339(T0 + NS)
    assert types(status, "server")[-1] == "Started"
    assert not decision.create_pod and not decision.delete_pod
    again = derive(spec(), status, pod([running("server", T0 + NS)]), T0 + 3 * NS).status
    assert types(again, "server") == types(status, "server"), "no duplicate Started"


def test_container_restart_gives_terminated_with_exit_code_then_restarting() -> None:
    s = derive(spec(), {"podCreated": True}, pod([running("server", T0)]), T0).status
    last = {"exitCode": 3, "finishedAt": rfc3339(T0 + 5 * NS)}
    decision = derive(spec(), s, pod([running("server", T0 + 6 * NS, 1, last)]), T0 + 7 * NS)
    state = decision.status["taskStates"]["server"]
    assert types(decision.status, "server")[-3:] == ["Terminated", "Restarting", "Started"]
    terminated_event = state["events"][-3]
    assert terminated_event["exitCode"] == 3
    assert terminated_event["displayMessage"] == "Exit Code: 3"
    restarting = state["events"][-2]
    assert restarting["restartReason"] == "Restart within policy"
    assert restarting["displayMessage"].startswith("Task restarting in "), "no reason prefix"
    assert state["restarts"] == 1
    assert state["lastRestart"] == rfc3339(T0 + 7 * NS)
    assert state["state"] == "running"
    assert decision.status["clientStatus"] == "running"


def test_exhausted_restart_policy_fails_the_allocation() -> None:
    policy = {"attempts": 1, "interval": "30m", "delay": "1s", "mode": "fail"}
    s = derive(spec(restart=policy), {"podCreated": True}, pod([running("server", T0)]), T0).status
    last = {"exitCode": 1, "finishedAt": rfc3339(T0 + NS)}
    s = derive(
        spec(restart=policy), s, pod([running("server", T0 + 2 * NS, 1, last)]), T0 + 2 * NS
    ).status
    decision = derive(
        spec(restart=policy), s, pod([running("server", T0 + 4 * NS, 2, last)]), T0 + 4 * NS
    )
    state = decision.status["taskStates"]["server"]
    assert "Not Restarting" in types(decision.status, "server")
    not_restarting = next(e for e in state["events"] if e["type"] == "Not Restarting")
    assert not_restarting["displayMessage"] == (
        'Exceeded allowed attempts 1 in interval 30m0s and mode is "fail"'
    )
    assert state["state"] == "dead" and state["failed"] is True
    assert decision.status["clientStatus"] == "failed"
    assert decision.delete_pod


def test_restart_within_the_same_second_is_still_a_new_start() -> None:
    s = derive(spec(), {"podCreated": True}, pod([running("server", T0)]), T0).status
    # The kubelet restarted the container; the new startedAt rounds to the same second.
    same = pod([running("server", T0, 1, {"exitCode": 1})])
    s = derive(spec(), s, same, T0 + NS // 2).status
    assert s["taskStates"]["server"]["state"] == "running"
    assert types(s, "server")[-3:] == ["Terminated", "Restarting", "Started"]


def test_delay_mode_keeps_restarting() -> None:
    policy = {"attempts": 1, "interval": "30m", "delay": "1s", "mode": "delay"}
    s = derive(spec(restart=policy), {"podCreated": True}, pod([running("server", T0)]), T0).status
    last = {"exitCode": 1}
    for count in (1, 2, 3):
        s = derive(
            spec(restart=policy),
            s,
            pod([running("server", T0 + count * NS, count, last)]),
            T0 + count * NS,
        ).status
    assert s["taskStates"]["server"]["restarts"] == 3
    assert s["clientStatus"] == "running"


def test_batch_allocation_completes() -> None:
    batch = spec("batch")
    s = derive(
        batch, {"podCreated": True}, pod([running("server", T0)], policy="OnFailure"), T0
    ).status
    done = pod([terminated("server", 0, T0 + 5 * NS)], phase="Succeeded", policy="OnFailure")
    decision = derive(batch, s, done, T0 + 6 * NS)
    state = decision.status["taskStates"]["server"]
    assert state["state"] == "dead" and state["failed"] is False
    assert state["finishedAt"] == rfc3339(T0 + 5 * NS)
    assert types(decision.status, "server")[-1] == "Terminated"
    assert decision.status["clientStatus"] == "complete"
    assert not decision.delete_pod


def test_deleted_pod_of_running_allocation_restarts_per_policy() -> None:
    s = derive(spec(), {"podCreated": True}, pod([running("server", T0)]), T0).status
    decision = derive(spec(), s, None, T0 + NS)
    state = decision.status["taskStates"]["server"]
    assert types(decision.status, "server")[-2:] == ["Terminated", "Restarting"]
    assert state["restarts"] == 1 and state["state"] == "pending"
    assert not decision.create_pod and decision.requeue_after is not None
    # After the policy's delay the next pass asks for the new pod, counting no second restart.
    later = T0 + NS + int(decision.requeue_after * NS)
    decision = derive(spec(), decision.status, None, later)
    assert decision.create_pod
    assert decision.status["taskStates"]["server"]["restarts"] == 1
    decision.status["podCreated"] = True
    # The new pod's container starts over at restartCount 0 and is reported as a new start.
    decision = derive(spec(), decision.status, pod([running("server", T0 + 3 * NS)]), T0 + 3 * NS)
    assert decision.status["taskStates"]["server"]["state"] == "running"
    assert types(decision.status, "server")[-1] == "Started"


def test_dead_leader_stops_its_siblings() -> None:
    leader_spec = spec(
        tasks=[
            {"name": "main", "driver": "docker", "config": {"image": "a"}, "leader": True},
            {"name": "helper", "driver": "docker", "config": {"image": "b"}},
        ],
        job_type="batch",
    )
    both = pod([running("main", T0), running("helper", T0)], policy="OnFailure")
    s = derive(leader_spec, {"podCreated": True}, both, T0).status
    leader_done = pod([terminated("main", 0, T0 + NS), running("helper", T0)], policy="OnFailure")
    decision = derive(leader_spec, s, leader_done, T0 + 2 * NS)
    assert types(decision.status, "helper")[-3:] == ["Leader Task Dead", "Killing", "Killed"]
    assert decision.status["taskStates"]["helper"]["state"] == "dead"
    assert decision.delete_pod
    assert decision.status["clientStatus"] == "complete"


def prestart_spec(restart: dict[str, Any] | None = None) -> AllocationSpec:
    return spec(
        tasks=[
            {
                "name": "init",
                "driver": "docker",
                "config": {"image": "a"},
                "lifecycle": {"hook": "prestart"},
            },
            {"name": "main", "driver": "docker", "config": {"image": "b"}},
        ],
        restart=restart,
    )


def test_prestart_task_completes_without_failing_the_group() -> None:
    s = prestart_spec()
    p = pod([running("main", T0 + NS)], init=[terminated("init", 0, T0)])
    decision = derive(s, {"podCreated": True}, p, T0 + 2 * NS)
    assert decision.status["taskStates"]["init"]["state"] == "dead"
    assert decision.status["taskStates"]["init"]["failed"] is False
    assert decision.status["clientStatus"] == "running"


def test_events_keep_only_the_latest_ten() -> None:
    s = derive(spec(), {"podCreated": True}, pod([running("server", T0)]), T0).status
    for count in range(1, 12):
        s = derive(
            spec(restart={"attempts": 100, "mode": "delay"}),
            s,
            pod([running("server", T0 + count * NS, count, {"exitCode": 1})]),
            T0 + count * NS,
        ).status
    assert len(s["taskStates"]["server"]["events"]) == 10
    assert s["taskStates"]["server"]["restarts"] == 11


def test_kubernetes_events_become_driver_events_once() -> None:
    s = derive(spec(), {"podCreated": True}, pod([running("server", T0)]), T0).status
    pulled = KubeEvent("u1", "Pulled", "Successfully pulled image", "Normal", T0, "server")
    failed = KubeEvent("u2", "Unhealthy", "Readiness probe failed", "Warning", T0 + 1, None)
    s = derive(spec(), s, pod([running("server", T0)]), T0 + NS, [pulled, failed]).status
    s = derive(spec(), s, pod([running("server", T0)]), T0 + 2 * NS, [pulled, failed]).status
    driver = [e for e in s["taskStates"]["server"]["events"] if e["type"] == "Driver"]
    assert [e["displayMessage"] for e in driver] == [
        "Pulled: Successfully pulled image",
        "Unhealthy: Readiness probe failed",
    ]


def test_failed_validation_fails_every_task() -> None:
    status = validation_failed(["a", "b"], ['task "a": unknown driver "qemu"'], T0)
    assert status["clientStatus"] == "failed"
    for name in ("a", "b"):
        event = status["taskStates"][name]["events"][-1]
        assert event["type"] == "Failed Validation"
        assert event["validationError"] == 'task "a": unknown driver "qemu"'
        assert status["taskStates"][name]["state"] == "dead"


def test_stopped_allocation_completes_with_killed_tasks() -> None:
    s = derive(spec(), {"podCreated": True}, pod([running("server", T0)]), T0).status
    s["desiredStatus"] = "stop"
    decision = derive(spec(), s, None, T0 + NS)
    assert decision.status["clientStatus"] == "complete"
    assert types(decision.status, "server")[-1] == "Killed"
    assert not decision.create_pod


def test_unknown_pod_phase_is_lost() -> None:
    s = derive(spec(), {"podCreated": True}, pod([running("server", T0)], phase="Unknown"), T0)
    assert s.status["clientStatus"] == "lost"


def test_merge_patch_is_empty_when_nested_nulls_are_already_absent() -> None:
    """A stored status never holds nested nulls; re-sending them must not patch again."""
    from allocbridge.model.status import merge_patch

    stored = {"taskStates": {"main": {"state": "running", "events": []}}, "clientStatus": "running"}
    derived = {
        "taskStates": {"main": {"state": "running", "finishedAt": None, "events": []}},
        "clientStatus": "running",
    }
    assert merge_patch(stored, derived) == {}
    assert merge_patch(stored, {**derived, "clientStatus": "complete"}) == {
        "clientStatus": "complete"
    }
    assert merge_patch({"a": 1, "b": 2}, {"a": 1}) == {"b": None}


def test_merge_patch_deletes_nested_keys() -> None:
    """An emptied bookkeeping map must reach the API server, or old values come back."""
    from allocbridge.model.status import merge_patch

    stored = {"observed": {"main": {"startedAt": 5, "restartCount": 1}}, "x": [1]}
    derived = {"observed": {"main": {}}, "x": [1, 2]}
    assert merge_patch(stored, derived) == {
        "observed": {"main": {"startedAt": None, "restartCount": None}},
        "x": [1, 2],
    }


def test_new_pod_starting_in_the_same_second_is_seen_after_a_full_restart() -> None:
    """The stored status after the patch still tells the new container's start apart."""
    from allocbridge.model.status import merge_patch

    def apply(stored: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
        out = dict(stored)
        for key, value in patch.items():
            if value is None:
                out.pop(key, None)
            elif isinstance(value, dict) and isinstance(out.get(key), dict):
                out[key] = apply(out[key], value)
            else:
                out[key] = value
        return out

    stored = derive(spec(), {"podCreated": True}, pod([running("server", T0)]), T0).status
    stored = apply({}, merge_patch({}, stored))
    stored["recreatePod"] = True
    gone = derive(spec(), stored, None, T0 + NS // 4)
    stored = apply(stored, merge_patch(stored, gone.status))
    stored["podCreated"] = True
    again = derive(spec(), stored, pod([running("server", T0)]), T0 + NS // 2)
    assert again.status["taskStates"]["server"]["state"] == "running"


# -- restarts, lifecycle tasks and stops, as a kubelet reports them --------------------------


def batch_pod(
    containers: list[dict[str, Any]],
    phase: str = "Running",
    init: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    return pod(containers, phase=phase, policy="OnFailure", init=init)


def user_restart_pending(status: dict[str, Any], task: str) -> dict[str, Any]:
    """What `Actions.restart` writes before it sends SIGTERM."""
    status = {**status, "observed": {**status.get("observed", {})}}
    seen = dict(status["observed"].get(task, {}))
    seen["userRestarts"] = int(seen.get("userRestarts", 0)) + 1
    status["observed"][task] = seen
    return status


def test_user_restart_of_a_batch_task_that_exits_0_restarts_it_in_a_new_pod() -> None:
    """Under OnFailure the kubelet leaves a container that exited 0 alone: the exit that follows
    a user restart is that restart (Nomad restarts whatever the code), so the pod is replaced."""
    batch = spec("batch")
    s = derive(batch, {"podCreated": True}, batch_pod([running("server", T0)]), T0).status
    s = user_restart_pending(s, "server")
    done = batch_pod([terminated("server", 0, T0 + 2 * NS)], phase="Succeeded")
    decision = derive(batch, s, done, T0 + 3 * NS)
    state = decision.status["taskStates"]["server"]
    assert decision.status["clientStatus"] != "complete"
    assert types(decision.status, "server")[-2:] == ["Terminated", "Restarting"]
    assert state["events"][-1]["restartReason"] == "User requested restart"
    assert state["events"][-1]["displayMessage"] == (
        "User requested restart - Task restarting in 0s"
    ), "Nomad names any reason but the within-policy one before the delay"
    assert state["restarts"] == 1 and state["state"] == "pending" and not state["failed"]
    assert decision.delete_pod, "the kubelet will not run it again: replace the pod"
    assert decision.status["observed"]["server"].get("userRestarts", 0) == 0
    # The old pod is still terminating: nothing is counted twice.
    again = derive(batch, decision.status, done, T0 + 4 * NS)
    assert again.status["taskStates"]["server"]["restarts"] == 1
    assert again.status["clientStatus"] != "complete"
    # Gone: a new pod, and the restart already counted is not counted again.
    gone = derive(batch, again.status, None, T0 + 5 * NS)
    assert gone.create_pod
    assert gone.status["taskStates"]["server"]["restarts"] == 1
    gone.status["podCreated"] = True
    new = derive(batch, gone.status, batch_pod([running("server", T0 + 6 * NS)]), T0 + 6 * NS)
    assert new.status["clientStatus"] == "running"
    assert types(new.status, "server")[-3:] == ["Terminated", "Restarting", "Started"]


def test_the_new_pod_of_a_batch_restart_restarts_the_siblings_too() -> None:
    """A pod cannot keep some containers: the siblings are killed with it and start over."""
    two = spec(
        "batch",
        tasks=[
            {"name": "a", "driver": "docker", "config": {"image": "a"}},
            {"name": "b", "driver": "docker", "config": {"image": "b"}},
        ],
    )
    both = batch_pod([running("a", T0), running("b", T0)])
    s = derive(two, {"podCreated": True}, both, T0).status
    s = user_restart_pending(s, "a")
    s = derive(two, s, batch_pod([terminated("a", 0, T0 + NS), running("b", T0)]), T0 + NS).status
    assert s["recreatePod"] and s["taskStates"]["b"]["state"] == "running"
    s = derive(two, s, batch_pod([terminated("a", 0, T0 + NS), running("b", T0)]), T0 + NS).status
    assert s["recreateKillSent"]
    killed = batch_pod([terminated("a", 0, T0 + NS), terminated("b", 143, T0 + 2 * NS)])
    s = derive(two, s, killed, T0 + 2 * NS).status
    assert s["clientStatus"] != "failed", "the kill of the old pod is no failure"
    gone = derive(two, s, None, T0 + 3 * NS)
    assert gone.create_pod
    states = gone.status["taskStates"]
    assert [states[t]["restarts"] for t in ("a", "b")] == [1, 1]
    assert types(gone.status, "a")[-2:] == ["Terminated", "Restarting"]
    assert types(gone.status, "b")[-2:] == ["Terminated", "Restarting"]
    assert states["b"]["events"][-1]["restartReason"] == 'Pod replaced to restart task "a"'
    assert "recreateFor" not in gone.status


def test_user_restart_of_a_batch_task_that_exits_non_zero_restarts_in_place() -> None:
    batch = spec("batch", restart={"attempts": 0, "mode": "fail"})
    s = derive(batch, {"podCreated": True}, batch_pod([running("server", T0)]), T0).status
    s = user_restart_pending(s, "server")
    last = {"exitCode": 143, "finishedAt": rfc3339(T0 + NS)}
    decision = derive(batch, s, batch_pod([running("server", T0 + 2 * NS, 1, last)]), T0 + 2 * NS)
    state = decision.status["taskStates"]["server"]
    assert state["restarts"] == 1 and state["state"] == "running"
    assert "Not Restarting" not in types(decision.status, "server")  # not counted
    assert not decision.delete_pod


def test_a_batch_task_that_exits_0_without_a_restart_request_still_completes() -> None:
    batch = spec("batch")
    s = derive(batch, {"podCreated": True}, batch_pod([running("server", T0)]), T0).status
    done = batch_pod([terminated("server", 0, T0 + NS)], phase="Succeeded")
    decision = derive(batch, s, done, T0 + 2 * NS)
    assert decision.status["clientStatus"] == "complete"
    assert not decision.delete_pod and "recreatePod" not in decision.status


def sidecar_spec(hook: str, sidecar_first: bool = True) -> AllocationSpec:
    tasks: list[dict[str, Any]] = [
        {
            "name": "proxy",
            "driver": "docker",
            "config": {"image": "p"},
            "lifecycle": {"hook": hook, "sidecar": True},
        },
        {"name": "main", "driver": "docker", "config": {"image": "m"}},
    ]
    return spec("batch", tasks=tasks if sidecar_first else tasks[::-1])


def test_batch_with_a_poststart_sidecar_completes_when_the_main_task_does() -> None:
    s_spec = sidecar_spec("poststart")
    both = batch_pod([running("main", T0), running("proxy", T0)])
    s = derive(s_spec, {"podCreated": True}, both, T0).status
    main_done = batch_pod([terminated("main", 0, T0 + NS), running("proxy", T0)])
    decision = derive(s_spec, s, main_done, T0 + 2 * NS)
    status = decision.status
    assert status["clientStatus"] == "complete"
    # Nomad's `Main Tasks Dead` comes first there; the spec has no such type: the reason
    # goes with `Killing`.
    assert types(status, "proxy")[-3:] == ["Started", "Killing", "Killed"]
    assert status["taskStates"]["proxy"]["events"][-2]["killReason"] == (
        "Main tasks in the group died"
    )
    proxy = status["taskStates"]["proxy"]
    assert proxy["state"] == "dead" and proxy["failed"] is False
    assert decision.delete_pod, "the sidecar still runs in the pod"
    # The kubelet's kill of the sidecar (exit 143) changes nothing.
    killed = batch_pod([terminated("main", 0, T0 + NS), terminated("proxy", 143, T0 + 3 * NS)])
    after = derive(s_spec, status, killed, T0 + 3 * NS).status
    assert after["clientStatus"] == "complete"
    assert types(after, "proxy") == types(status, "proxy")


def test_a_batch_poststart_sidecar_that_exits_0_is_dead_and_the_main_task_runs_on() -> None:
    """On a cluster without container restart policies the kubelet (`OnFailure`) leaves it
    stopped where Nomad would restart it (docs/api.md, differences from Nomad)."""
    s_spec = sidecar_spec("poststart")
    both = batch_pod([running("main", T0), running("proxy", T0)])
    s = derive(s_spec, {"podCreated": True}, both, T0).status
    proxy_done = batch_pod([running("main", T0), terminated("proxy", 0, T0 + NS)])
    decision = derive(s_spec, s, proxy_done, T0 + 2 * NS)
    proxy = decision.status["taskStates"]["proxy"]
    assert proxy["state"] == "dead" and proxy["failed"] is False
    assert types(decision.status, "proxy")[-1] == "Terminated"
    assert decision.status["clientStatus"] == "running"
    assert not decision.delete_pod


def test_an_older_kubelet_ignores_the_sidecars_own_policy_so_exit_0_leaves_it_dead() -> None:
    """During an upgrade the API server keeps the container's own `Always`, but a kubelet
    older than 1.35 runs the pod's `OnFailure`: the sidecar stays stopped, so it is dead."""
    s_spec = sidecar_spec("poststart")
    pod = batch_pod([running("main", T0), running("proxy", T0)])
    pod["spec"]["containers"] = [{"name": "main"}, {"name": "proxy", "restartPolicy": "Always"}]
    s = derive(s_spec, {"podCreated": True}, pod, T0, container_restart_policies=False).status
    ended = batch_pod([running("main", T0), terminated("proxy", 0, T0 + NS)])
    ended["spec"] = pod["spec"]
    new = derive(s_spec, s, ended, T0 + 2 * NS, container_restart_policies=False).status
    assert new["taskStates"]["proxy"]["state"] == "dead"
    assert new["taskStates"]["proxy"]["failed"] is False
    assert types(new, "proxy")[-1] == "Terminated"
    assert new["clientStatus"] == "running"
    honoured = derive(s_spec, s, ended, T0 + 2 * NS).status
    assert honoured["taskStates"]["proxy"]["state"] != "dead", "a 1.35 kubelet runs it again"


def test_a_batch_poststart_sidecar_with_its_own_always_policy_restarts_after_exit_0() -> None:
    """Where the pod carries the container's own `Always`, the kubelet runs the sidecar again
    after its exit 0, and Nomad counts that restart against the policy."""
    s_spec = sidecar_spec("poststart")

    def own_always(containers: list[dict[str, Any]]) -> dict[str, Any]:
        p = batch_pod(containers)
        p["spec"]["containers"] = [{"name": "main"}, {"name": "proxy", "restartPolicy": "Always"}]
        return p

    s = derive(
        s_spec, {"podCreated": True}, own_always([running("main", T0), running("proxy", T0)]), T0
    ).status
    between = own_always([running("main", T0), terminated("proxy", 0, T0 + NS)])
    s = derive(s_spec, s, between, T0 + 2 * NS).status
    assert s["taskStates"]["proxy"]["state"] != "dead", "the kubelet starts it again"
    ok = {"exitCode": 0, "finishedAt": rfc3339(T0 + NS)}
    again = own_always([running("main", T0), running("proxy", T0 + 3 * NS, 1, ok)])
    s = derive(s_spec, s, again, T0 + 3 * NS).status
    proxy = s["taskStates"]["proxy"]
    assert types(s, "proxy")[-3:] == ["Terminated", "Restarting", "Started"]
    assert proxy["events"][-2]["restartReason"] == "Restart within policy"
    assert proxy["state"] == "running" and proxy["restarts"] == 1
    assert s["clientStatus"] == "running"


@pytest.mark.parametrize("sidecar_first", [True, False])
def test_batch_with_a_prestart_sidecar_the_kubelet_stops_completes(sidecar_first: bool) -> None:
    """A native sidecar stopped by the kubelet after the main containers is killed, not failed,
    whichever of the two exits the same pass looks at first."""
    s_spec = sidecar_spec("prestart", sidecar_first)
    start = batch_pod([running("main", T0 + NS)], init=[running("proxy", T0)])
    s = derive(s_spec, {"podCreated": True}, start, T0 + NS).status
    finished = batch_pod(
        [terminated("main", 0, T0 + 2 * NS)],
        phase="Succeeded",
        init=[terminated("proxy", 143, T0 + 3 * NS)],
    )
    status = derive(s_spec, s, finished, T0 + 4 * NS).status
    assert status["clientStatus"] == "complete"
    proxy = status["taskStates"]["proxy"]
    assert proxy["state"] == "dead" and proxy["failed"] is False
    assert types(status, "proxy")[-2:] == ["Killing", "Killed"]
    assert status["taskStates"]["proxy"]["events"][-2]["killReason"] == (
        "Main tasks in the group died"
    )


def test_stopped_allocation_keeps_the_killed_event_when_the_kubelet_reports_the_exit() -> None:
    """A real kubelet writes the container's termination before the pod is deleted."""
    s = derive(spec(), {"podCreated": True}, pod([running("server", T0)]), T0).status
    s.update(desiredStatus="stop", stopAt=T0)
    s = derive(spec(), s, pod([running("server", T0)]), T0 + NS).status  # Killing, delete
    assert types(s, "server")[-1] == "Killing"
    exited = pod([terminated("server", 143, T0 + 2 * NS)], phase="Running")
    s = derive(spec(), s, exited, T0 + 2 * NS).status
    assert types(s, "server")[-3:] == ["Killing", "Terminated", "Killed"]
    decision = derive(spec(), s, None, T0 + 3 * NS)
    assert decision.status["clientStatus"] == "complete"
    assert types(decision.status, "server").count("Killed") == 1
    state = decision.status["taskStates"]["server"]
    assert state["state"] == "dead" and state["failed"] is False


def both_running(p_spec: AllocationSpec) -> dict[str, Any]:
    """The status once the main task and the poststart task both run."""
    both = pod([running("main", T0), running("announce", T0)])
    return derive(p_spec, {"podCreated": True}, both, T0).status


def poststart_spec(restart: dict[str, Any] | None = None) -> AllocationSpec:
    return spec(
        tasks=[
            {"name": "main", "driver": "docker", "config": {"image": "m"}},
            {
                "name": "announce",
                "driver": "docker",
                "config": {"image": "a"},
                "lifecycle": {"hook": "poststart"},
            },
        ],
        restart=restart or {"attempts": 2, "interval": "30m", "delay": "1s", "mode": "fail"},
    )


def test_a_run_once_poststart_task_completes_although_the_kubelet_reruns_it() -> None:
    p_spec = poststart_spec()
    s = both_running(p_spec)
    ok = {"exitCode": 0, "finishedAt": rfc3339(T0 + NS)}
    for count in (1, 2, 3, 4):  # under Always the kubelet starts it again after each exit 0
        again = pod([running("main", T0), running("announce", T0 + (count + 1) * NS, count, ok)])
        decision = derive(p_spec, s, again, T0 + (count + 1) * NS)
        s = decision.status
        assert not decision.delete_pod
    announce = s["taskStates"]["announce"]
    assert announce["state"] == "dead" and announce["failed"] is False
    assert announce["restarts"] == 0
    assert types(s, "announce")[-1] == "Terminated"
    assert "Not Restarting" not in types(s, "announce")
    assert s["clientStatus"] == "running"


def test_a_run_once_poststart_task_seen_exited_completes_at_once() -> None:
    p_spec = poststart_spec()
    s = both_running(p_spec)
    exited = pod([running("main", T0), terminated("announce", 0, T0 + NS)])
    s = derive(p_spec, s, exited, T0 + 2 * NS).status
    assert s["taskStates"]["announce"]["state"] == "dead"
    # The kubelet's rerun is not a restart of the task.
    rerun = pod(
        [running("main", T0), running("announce", T0 + 3 * NS, 1, {"exitCode": 0})],
    )
    s = derive(p_spec, s, rerun, T0 + 3 * NS).status
    assert s["taskStates"]["announce"]["state"] == "dead"
    assert s["taskStates"]["announce"]["restarts"] == 0
    assert s["clientStatus"] == "running"


def test_a_failing_run_once_poststart_task_restarts_per_policy() -> None:
    p_spec = poststart_spec()
    s = both_running(p_spec)
    bad = {"exitCode": 2, "finishedAt": rfc3339(T0 + NS)}
    s = derive(
        p_spec, s, pod([running("main", T0), running("announce", T0 + 2 * NS, 1, bad)]), T0 + 2 * NS
    ).status
    assert s["taskStates"]["announce"]["restarts"] == 1
    assert s["taskStates"]["announce"]["state"] == "running"


def test_a_failing_prestart_task_restarts_per_the_group_policy() -> None:
    policy = {"attempts": 1, "interval": "30m", "delay": "1s", "mode": "fail"}
    p_spec = prestart_spec(policy)
    waiting_main = {"name": "main", "restartCount": 0, "state": {"waiting": {}}}
    s = derive(
        p_spec, {"podCreated": True}, pod([waiting_main], "Pending", init=[running("init", T0)]), T0
    ).status
    # The init container exits 1; the kubelet will run it again.
    failed = pod([waiting_main], "Pending", init=[terminated("init", 1, T0 + NS)])
    decision = derive(p_spec, s, failed, T0 + 2 * NS)
    assert decision.status["clientStatus"] != "failed" and not decision.delete_pod
    s = decision.status
    last = {"exitCode": 1, "finishedAt": rfc3339(T0 + NS)}
    rerun = pod([waiting_main], "Pending", init=[running("init", T0 + 3 * NS, 1, last)])
    decision = derive(p_spec, s, rerun, T0 + 3 * NS)
    s = decision.status
    assert types(s, "init")[-3:] == ["Terminated", "Restarting", "Started"]
    assert s["taskStates"]["init"]["restarts"] == 1 and not decision.delete_pod
    assert s["clientStatus"] != "failed"
    # The second failure exhausts the policy (1 attempt).
    third = pod([waiting_main], "Pending", init=[running("init", T0 + 5 * NS, 2, last)])
    decision = derive(p_spec, s, third, T0 + 5 * NS)
    assert "Not Restarting" in types(decision.status, "init")
    assert decision.status["clientStatus"] == "failed" and decision.delete_pod


def test_more_than_fifty_kubernetes_events_are_not_recorded_twice() -> None:
    """The newest Events are remembered, whatever their UIDs sort like."""
    s = derive(spec(), {"podCreated": True}, pod([running("server", T0)]), T0).status
    # UIDs sort the other way round from their times: the oldest has the largest UID.
    events = [
        KubeEvent(f"uid-{99 - i:02d}", "Pulled", f"event {i}", "Normal", T0 + i, "server")
        for i in range(60)
    ]
    s = derive(spec(), s, pod([running("server", T0)]), T0 + NS, events).status
    shown = [e["displayMessage"] for e in s["taskStates"]["server"]["events"]]
    assert shown == [f"Pulled: event {i}" for i in range(50, 60)]
    assert set(s["seenEvents"]) == {f"uid-{99 - i:02d}" for i in range(10, 60)}
    again = derive(spec(), s, pod([running("server", T0)]), T0 + 2 * NS, events).status
    assert again["taskStates"]["server"]["events"] == s["taskStates"]["server"]["events"]
    newer = KubeEvent("uid-00", "Killing", "newest", "Normal", T0 + 100, "server")
    later = derive(spec(), again, pod([running("server", T0)]), T0 + 3 * NS, [*events, newer])
    added = [e["displayMessage"] for e in later.status["taskStates"]["server"]["events"]]
    assert added[-2:] == ["Pulled: event 59", "Killing: newest"]
    assert "uid-00" in later.status["seenEvents"] and len(later.status["seenEvents"]) == 50
    # The bookkeeping alone is not worth a status write of its own.
    assert not urgent({"seenEvents": ["uid-00"], "seenEventsUntil": T0 + 10}, {"podCreated": True})
