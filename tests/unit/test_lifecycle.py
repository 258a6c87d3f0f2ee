"""The draining state machine behind `/health`; and the restart action's follow-up (the
SIGKILL after the kill timeout, `allocbridge.actions.restart`), with the cluster faked."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest
from kubernetes_asyncio import client

from allocbridge.actions import incontainer
from allocbridge.actions import restart as restarting
from allocbridge.actions.lifecycle import Actions, Target
from allocbridge.actions.records import Mutation
from allocbridge.cluster.commands import CommandError, CommandResult
from allocbridge.cluster.errors import from_status
from allocbridge.cluster.resources import Json, Kube
from allocbridge.lifecycle import Lifecycle, Next, Phase, Upstream
from allocbridge.model import pid1 as pid1_rules
from allocbridge.model.errors import NomadError
from allocbridge.model.spec import AllocationSpec, parse_spec


def test_starting_replica_is_unhealthy_until_serving() -> None:
    life = Lifecycle(grace_period=2.0)
    assert life.health_status() == 503
    assert life.worker_state == "unknown"
    life.serving()
    assert life.health_status() == 200
    assert life.worker_state == "active"


def test_first_signal_drains_when_a_grace_period_is_set() -> None:
    life = Lifecycle(grace_period=2.0)
    life.serving()
    assert life.on_signal() is Next.DRAIN
    assert life.phase is Phase.DRAINING
    assert life.health_status() == 503
    assert life.worker_state == "shutdown"


def test_second_signal_stops_and_third_forces() -> None:
    life = Lifecycle(grace_period=2.0)
    life.serving()
    life.on_signal()
    assert life.on_signal() is Next.STOP
    assert life.health_status() == 503
    assert life.on_signal() is Next.FORCE


def test_without_grace_period_there_is_no_drain_phase() -> None:
    life = Lifecycle(grace_period=None)
    life.serving()
    assert life.on_signal() is Next.STOP
    assert life.phase is Phase.STOPPING


def test_zero_grace_period_still_flips_health() -> None:
    life = Lifecycle(grace_period=0.0)
    life.serving()
    assert life.on_signal() is Next.DRAIN
    assert life.health_status() == 503


def test_draining_is_one_way() -> None:
    life = Lifecycle(grace_period=1.0)
    life.serving()
    life.on_signal()
    life.serving()
    assert life.health_status() == 503


def test_unsynced_store_keeps_the_replica_unready() -> None:
    life = Lifecycle(store_synced=False)
    life.serving()
    assert life.health_status() == 503
    life.store_synced = True
    assert life.health_status() == 200


def test_worker_info_shape() -> None:
    life = Lifecycle()
    life.serving()
    life.upstream = Upstream.TRANSIENT_FAILURE
    life.active_sessions = 2
    assert life.worker_info() == {
        "worker_process_info": {
            "state": "active",
            "active_session_count": 2,
            "upstream_connection_state": "TRANSIENT_FAILURE",
        }
    }


# -- restart: the SIGKILL after the kill timeout ---------------------------------------------

TARGET = Target("ns", "job", "alloc-uid")
TINI = pid1_rules.Pid1("tini", frozenset(), frozenset({pid1_rules.SIGTERM}), (7,))


def container_pod(uid: str, state: dict[str, Any], restarts: int = 0) -> Json:
    status = {"name": "main", "restartCount": restarts, "state": state}
    return {"metadata": {"uid": uid}, "status": {"containerStatuses": [status]}}


RUNNING = {"running": {"startedAt": "2026-01-01T00:00:00Z"}}


class FakeKube:
    """The pod as the kubelet shows it: `after_term` once the SIGTERM went out."""

    def __init__(self, after_term: Json | None, after_kill: Json | None = None) -> None:
        self.pod: Json | None = container_pod("p1", RUNNING)
        self.after_term = after_term
        self.after_kill = after_kill or self.pod

    async def get_pod(self, _namespace: str, _name: str) -> Json | None:
        return self.pod


class FakeActions(Actions):
    """The restart action against an allocation held in memory."""

    def __init__(self, kube: FakeKube, *, refuse_term: bool = False) -> None:
        super().__init__(cast(Kube, kube), cast(client.Configuration, None))
        self.fake = kube
        self.refuse_term = refuse_term
        self.status: Json = {
            "clientStatus": "running",
            "taskStates": {"main": {"state": "running", "events": []}},
        }
        self.sent: list[str] = []
        self.spec: AllocationSpec = parse_spec(
            {
                "job": {"id": "job", "type": "batch"},
                "taskGroup": {"name": "g"},
                "tasks": [
                    {
                        "name": "main",
                        "driver": "docker",
                        "config": {"image": "x"},
                        "killTimeout": "10ms",
                    }
                ],
            }
        )

    async def load(self, target: Target) -> tuple[Json, AllocationSpec]:
        return {"metadata": {"uid": target.alloc_id}, "status": self.status}, self.spec

    async def update(self, target: Target, mutate: Mutation) -> Json:
        obj, _ = await self.load(target)
        mutate(self.status, obj)
        return obj

    async def pid1(self, target: Target, task: str) -> pid1_rules.Pid1:
        return TINI

    async def kill(self, target: Target, task: str, signal: str, where: str) -> None:
        if signal == "SIGTERM" and self.refuse_term:
            raise NomadError(500, 'kill -TERM 1 in task "main" failed: no such process')
        self.sent.append(f"{signal} {where}")
        if signal == "SIGTERM":
            self.fake.pod = self.fake.after_term
        if signal == "SIGKILL":
            self.fake.pod = self.fake.after_kill

    def events(self) -> list[str]:
        return [e["type"] for e in self.status["taskStates"]["main"]["events"]]


async def restart(actions: FakeActions) -> None:
    await actions.restart(TARGET, "main", all_tasks=False)
    await asyncio.gather(*actions.escalations)


@pytest.mark.parametrize(
    "after_term",
    [
        pytest.param(
            container_pod("p1", {"terminated": {"exitCode": 0}}), id="exited-0-stays-stopped"
        ),
        pytest.param(container_pod("p1", RUNNING, restarts=1), id="restarted-in-place-at-once"),
        pytest.param(container_pod("p2", RUNNING), id="pod-replaced"),
        pytest.param(None, id="pod-gone"),
    ],
)
async def test_no_sigkill_once_the_signalled_run_has_ended(after_term: Json | None) -> None:
    actions = FakeActions(FakeKube(after_term))
    await restart(actions)
    assert actions.sent == ["SIGTERM 1"]
    assert actions.events() == ["Restart Signaled"]
    assert "recreatePod" not in actions.status


@pytest.fixture
def quick_after_sigkill(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(restarting, "AFTER_SIGKILL", 0.01)


@pytest.mark.usefixtures("quick_after_sigkill")
async def test_a_run_still_going_after_the_kill_timeout_gets_sigkill() -> None:
    restarted = container_pod("p1", RUNNING, restarts=1)
    actions = FakeActions(FakeKube(container_pod("p1", RUNNING), after_kill=restarted))
    await restart(actions)
    assert actions.sent == ["SIGTERM 1", "SIGKILL -1"]
    assert actions.events() == ["Restart Signaled", "Killing"]
    assert "recreatePod" not in actions.status


@pytest.mark.usefixtures("quick_after_sigkill")
async def test_a_pid1_that_outlives_sigkill_of_its_processes_gets_a_new_pod() -> None:
    """A shell PID 1 that traps the kill signal: SIGKILL of everything below it leaves it."""
    actions = FakeActions(FakeKube(container_pod("p1", RUNNING)))
    await restart(actions)
    assert actions.sent == ["SIGTERM 1", "SIGKILL -1"]
    assert actions.events() == ["Restart Signaled", "Killing", "Killing"]
    assert actions.status["recreatePod"] is True


async def test_a_sigterm_not_sent_takes_its_restart_back() -> None:
    """Else the task's next exit, a batch task's completion say, would count as a restart."""
    actions = FakeActions(FakeKube(None), refuse_term=True)
    with pytest.raises(NomadError):
        await restart(actions)
    assert actions.status["observed"]["main"]["userRestarts"] == 0
    assert not actions.escalations


class ExecActions(Actions):
    """`kill` as written, over an exec that answers what a container's `kill` reported."""

    def __init__(self, exit_code: int) -> None:
        super().__init__(cast(Kube, FakeKube(None)), cast(client.Configuration, None))
        self.exit_code = exit_code

    async def exec(self, target: Target, task: str, argv: list[str]) -> CommandResult:
        return CommandResult(
            stdout="", stderr="kill: boom" * (self.exit_code == 1), exit_code=self.exit_code
        )


async def test_a_kill_ended_with_its_container_delivered_its_signal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`kill -TERM -1` under tini ends the task, tini, and the PID namespace with the `kill` in
    it: its 137 is the signal's success, not a failure; another status from a container that
    ran throughout is a fault."""
    monkeypatch.setattr(incontainer, "STATUS_SETTLE", 0.01)
    await ExecActions(137).kill(TARGET, "main", "SIGTERM", "-1")
    with pytest.raises(NomadError) as failed:
        await ExecActions(1).kill(TARGET, "main", "SIGTERM", "-1")
    assert failed.value.status == 500 and "kill -TERM -1" in failed.value.message


@pytest.mark.parametrize(("status", "code"), [(404, 409), (400, 409), (None, 500), (500, 500)])
async def test_an_exec_the_api_server_refuses_is_a_task_not_running(
    monkeypatch: pytest.MonkeyPatch, status: int | None, code: int
) -> None:
    """A pod that is gone (404) or a container that is restarting (400) is Nomad's 409 `Task
    not running`; anything else stays an internal fault, with its text."""

    async def refused(*_: object) -> CommandResult:
        if status is None:  # the exec started, then failed
            raise CommandError("the exec stream failed")
        raise from_status(status, "the API server refused the exec")

    monkeypatch.setattr(incontainer, "run_command", refused)
    actions = Actions(cast(Kube, FakeKube(None)), cast(client.Configuration, None))
    with pytest.raises(NomadError) as failed:
        await actions.exec(TARGET, "main", ["kill", "-TERM", "1"])
    assert failed.value.status == code
    assert failed.value.message == "Task not running" or any(
        text in failed.value.message for text in ("refused the exec", "stream failed")
    )


@pytest.mark.parametrize(
    ("pod", "code"),
    [
        pytest.param(container_pod("p1", RUNNING), 500, id="ran-throughout-a-real-fault"),
        pytest.param(None, 409, id="pod-gone"),
        pytest.param(
            {**container_pod("p1", RUNNING), "metadata": {"uid": "p1", "deletionTimestamp": "x"}},
            409,
            id="pod-being-deleted",
        ),
        pytest.param(
            container_pod("p1", {"waiting": {"reason": "CrashLoopBackOff"}}), 409, id="waiting"
        ),
        pytest.param(
            container_pod("p1", {"running": {"startedAt": "2099-01-01T00:00:00Z"}}, restarts=1),
            409,
            id="restarted-meanwhile",
        ),
    ],
)
async def test_an_exec_that_fails_while_the_task_is_not_running_is_a_409(
    monkeypatch: pytest.MonkeyPatch, pod: Json | None, code: int
) -> None:
    monkeypatch.setattr(incontainer, "STATUS_SETTLE", 0.01)
    """The runtime's texts for a container that ended or restarted under an exec vary; the
    pod, read again after the failure, tells a task that was not running from a fault."""

    async def failed(*_: object) -> CommandResult:
        raise CommandError("failed to exec in container: OCI runtime exec failed")

    monkeypatch.setattr(incontainer, "run_command", failed)
    kube = FakeKube(None)
    kube.pod = pod
    actions = Actions(cast(Kube, kube), cast(client.Configuration, None))
    with pytest.raises(NomadError) as raised:
        await actions.exec(TARGET, "main", ["kill", "-TERM", "1"])
    assert raised.value.status == code
