"""Realistic Nomad allocation wire dicts and a store fed with them, for the API and store tests.

The shapes follow Nomad's `GET /v1/allocation/:id` (top-level zero fields left out), with a
Job copy, TaskStates with events, resources, service registrations and check results.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from allocbridge.store import AllocationStore, StoredAllocation

NS = 1_000_000_000
T0 = 1_800_000_000 * NS
NODE_ID = "f3b1c2d4-5e6f-4a7b-8c9d-0e1f2a3b4c5d"


def alloc_id(n: int, *, head: str = "") -> str:
    """A deterministic, valid, lower-case UUID; `head` replaces its first hex digits."""
    text = uuid.UUID(int=(n * 0x9E3779B97F4A7C15 + 0x1234567) % (1 << 128)).hex
    text = (head + text[len(head) :])[:32]
    return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"


def task_state(
    state: str = "running", *, restarts: int = 0, failed: bool = False
) -> dict[str, Any]:
    events: list[dict[str, Any]] = [
        {
            "Type": "Received",
            "Time": T0,
            "DisplayMessage": "Task received by client",
            "Message": "",
            "Details": {},
            "FailsTask": False,
            "ExitCode": 0,
            "Signal": 0,
        },
        {
            "Type": "Started",
            "Time": T0 + 2 * NS,
            "DisplayMessage": "Task started by client",
            "Message": "",
            "Details": {},
            "FailsTask": False,
            "ExitCode": 0,
            "Signal": 0,
        },
    ]
    return {
        "State": state,
        "Failed": failed,
        "Restarts": restarts,
        "LastRestart": None,
        "StartedAt": "2027-01-15T08:00:02Z" if state != "pending" else None,
        "FinishedAt": "2027-01-15T09:00:00Z" if state == "dead" else None,
        "TaskHandle": None,
        "Events": events,
    }


def job(job_id: str, group: str, tasks: list[str], *, version: int = 0) -> dict[str, Any]:
    return {
        "Region": "global",
        "Namespace": "default",
        "ID": job_id,
        "Name": job_id,
        "Type": "service",
        "Priority": 50,
        "AllAtOnce": False,
        "Datacenters": ["dc1"],
        "Version": version,
        "Status": "running",
        "CreateIndex": 10,
        "ModifyIndex": 10,
        "JobModifyIndex": 10,
        "Update": {"Stagger": 30 * NS, "MaxParallel": 1},
        "Meta": {"owner": "platform"},
        "TaskGroups": [
            {
                "Name": group,
                "Count": 1,
                "RestartPolicy": {
                    "Attempts": 2,
                    "Interval": 1800 * NS,
                    "Delay": 15 * NS,
                    "Mode": "fail",
                },
                "EphemeralDisk": {"Sticky": False, "SizeMB": 300, "Migrate": False},
                "Tasks": [
                    {
                        "Name": task,
                        "Driver": "docker",
                        "Config": {"image": "nginx:1.27", "ports": ["http"]},
                        "Env": None,
                        "Services": None,
                        "Resources": {"CPU": 100, "MemoryMB": 128},
                        "KillTimeout": 5 * NS,
                        "LogConfig": {"MaxFiles": 10, "MaxFileSizeMB": 10},
                        "Leader": False,
                    }
                    for task in tasks
                ],
            }
        ],
    }


def wire(
    ident: str,
    *,
    namespace: str = "default",
    create_index: int = 100,
    modify_index: int | None = None,
    job_id: str = "web",
    group: str = "web",
    tasks: tuple[str, ...] = ("server",),
    client_status: str = "running",
    desired_status: str = "run",
    node_name: str = "node-1",
    job_version: int = 0,
) -> dict[str, Any]:
    """A full `Allocation` as `GET /v1/allocation/:id` returns it (zero fields left out)."""
    modify = create_index if modify_index is None else modify_index
    task_list = list(tasks)
    return {
        "ID": ident,
        "Namespace": namespace,
        "EvalID": alloc_id(create_index * 7 + 3),
        "Name": f"{job_id}.{group}[0]",
        "NodeID": NODE_ID,
        "NodeName": node_name,
        "JobID": job_id,
        "Job": job(job_id, group, task_list, version=job_version),
        "TaskGroup": group,
        "Resources": {
            "CPU": 100 * len(task_list),
            "MemoryMB": 128,
            "DiskMB": 300,
            "Networks": None,
        },
        "SharedResources": {"CPU": 0, "MemoryMB": 0, "DiskMB": 300, "Networks": None},
        "TaskResources": {
            task: {"CPU": 100, "MemoryMB": 128, "DiskMB": 0, "Networks": None} for task in task_list
        },
        "AllocatedResources": {
            "Tasks": {
                task: {"Cpu": {"CpuShares": 100}, "Memory": {"MemoryMB": 128}} for task in task_list
            },
            "Shared": {"DiskMB": 300, "Networks": None, "Ports": None},
        },
        "Metrics": {
            "NodesEvaluated": 1,
            "NodesFiltered": 0,
            "NodesInPool": 1,
            "NodesAvailable": {"dc1": 1},
            "ClassFiltered": None,
            "ConstraintFiltered": None,
            "NodesExhausted": 0,
            "ClassExhausted": None,
            "DimensionExhausted": None,
            "Scores": {},
            "AllocationTime": 120_000,
            "CoalescedFailures": 0,
        },
        "DesiredStatus": desired_status,
        "DesiredTransition": {"Migrate": None, "Reschedule": None, "ForceReschedule": None},
        "ClientStatus": client_status,
        "ClientDescription": "Tasks are running" if client_status == "running" else "",
        "TaskStates": {
            task: task_state("running" if client_status == "running" else "dead")
            for task in task_list
        },
        "CreateIndex": create_index,
        "ModifyIndex": modify,
        "AllocModifyIndex": create_index,
        "CreateTime": T0 + create_index,
        "ModifyTime": T0 + modify,
    }


def services_for(
    ident: str, *, namespace: str = "default", index: int = 100
) -> list[dict[str, Any]]:
    return [
        {
            "Address": "10.244.0.12",
            "AllocID": ident,
            "CreateIndex": index,
            "Datacenter": "dc1",
            "ID": f"_nomad-task-{ident}-server-web-http",
            "JobID": "web",
            "ModifyIndex": index,
            "Namespace": namespace,
            "NodeID": NODE_ID,
            "Port": 8080,
            "ServiceName": "web",
            "Tags": ["http"],
        }
    ]


def checks_for(ident: str) -> dict[str, dict[str, Any]]:
    check_id = "a" * 64
    return {
        check_id: {
            "Check": "alive",
            "Group": "web.web[0]",
            "ID": check_id,
            "Mode": "healthiness",
            "Output": "nomad: http ok",
            "Service": "web",
            "Status": "success",
            "StatusCode": 200,
            "Task": "server",
            "Timestamp": 1_800_000_100,
        }
    }


def stored(ident: str, *, with_services: bool = True, **options: Any) -> StoredAllocation:
    data = wire(ident, **options)
    namespace = data["Namespace"]
    return StoredAllocation.from_wire(
        data,
        services=services_for(ident, namespace=namespace) if with_services else (),
        checks=checks_for(ident) if with_services else {},
    )


#: A handful of allocations: two namespaces, shared create indexes, distinct ID heads.
SAMPLE: tuple[tuple[str, dict[str, Any]], ...] = (
    (alloc_id(1, head="aa"), {"create_index": 101, "job_id": "web"}),
    (alloc_id(2, head="ab"), {"create_index": 102, "job_id": "web", "client_status": "complete"}),
    (alloc_id(3, head="0c"), {"create_index": 102, "job_id": "api", "tasks": ("api", "sidecar")}),
    (alloc_id(4, head="ff"), {"create_index": 99, "job_id": "batch", "client_status": "failed"}),
    (alloc_id(5, head="aa"), {"create_index": 110, "namespace": "team-a", "job_id": "web"}),
    (alloc_id(6, head="12"), {"create_index": 105, "namespace": "team-a", "job_id": "cron"}),
)


def sample_store(*, synced: bool = True, index: int = 120) -> AllocationStore:
    store = AllocationStore()
    allocs = [stored(ident, **options) for ident, options in SAMPLE]
    if synced:
        store.replace_all(allocs, index)
    else:
        for alloc in allocs:
            store.upsert(alloc)
    return store


async def parked(store: AllocationStore, count: int, within: float = 10.0) -> None:
    """Wait until `count` blocking queries are parked on `store`.

    A request sent through the test client reaches its handler after a few turns of the loop
    and some socket I/O, so a fixed sleep is too short on a busy machine.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while store.parked != count:
        assert loop.time() < deadline, f"{store.parked} queries parked, expected {count}"
        await asyncio.sleep(0.005)
