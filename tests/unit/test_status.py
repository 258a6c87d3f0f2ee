"""Deriving Nomad task states and events from the pod, without I/O."""

from __future__ import annotations

from typing import Any

from allocbridge.model.spec import AllocationSpec, parse_spec
from allocbridge.model.status import KubeEvent, derive, rfc3339, validation_failed

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


def test_prestart_task_completes_without_failing_the_group() -> None:
    s = spec(
        tasks=[
            {
                "name": "init",
                "driver": "docker",
                "config": {"image": "a"},
                "lifecycle": {"hook": "prestart"},
            },
            {"name": "main", "driver": "docker", "config": {"image": "b"}},
        ]
    )
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
