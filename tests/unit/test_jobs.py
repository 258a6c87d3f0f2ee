"""The spec rendered as Nomad wire shapes: `Job`, `Resources`, `AllocatedResources` (pure)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from allocbridge.model import jobs
from allocbridge.model.spec import AllocationSpec, parse_spec

S = 1_000_000_000  # nanoseconds per second

# Field lists of the spec document (spec/allocations-http-api.md).
JOB_FIELDS = {
    "Region", "ID", "ParentID", "Name", "Type", "Priority", "AllAtOnce", "Datacenters",
    "Constraints", "Affinities", "Spreads", "Periodic", "ParameterizedJob", "Payload", "Meta",
    "VaultToken", "Status", "StatusDescription", "CreateIndex", "ModifyIndex", "JobModifyIndex",
    "Update", "TaskGroups",
}  # fmt: skip
GROUP_FIELDS = {
    "Name", "Count", "Constraints", "Affinities", "Spreads", "Meta", "RestartPolicy",
    "EphemeralDisk", "Tasks",
}  # fmt: skip
TASK_FIELDS = {
    "Name", "Driver", "User", "Config", "Env", "Services", "Vault", "Templates", "Constraints",
    "Affinities", "Resources", "Spreads", "DispatchPayload", "Meta", "KillTimeout", "LogConfig",
    "Artifacts", "Leader",
}  # fmt: skip
SERVICE_FIELDS = {"Name", "PortLabel", "Tags", "Checks"}
CHECK_FIELDS = {
    "Name", "Type", "Command", "Args", "Path", "Protocol", "PortLabel", "Interval", "Timeout",
    "InitialStatus",
}  # fmt: skip
RESOURCE_FIELDS = {"CPU", "MemoryMB", "DiskMB", "Networks"}
NETWORK_FIELDS = {"Device", "CIDR", "IP", "MBits", "ReservedPorts", "DynamicPorts"}


def spec(**overrides: Any) -> AllocationSpec:
    raw: dict[str, Any] = {
        "job": {"id": "shop", "type": "service", "datacenters": ["dc1"], "meta": {"o": "me"}},
        "taskGroup": {
            "name": "api",
            "count": 3,
            "index": 1,
            "restartPolicy": {"attempts": 4, "interval": "10m", "delay": "20s", "mode": "delay"},
            "shutdownDelay": "5s",
            "ephemeralDisk": {"sticky": True, "sizeMB": 200},
            "networks": [
                {
                    "mode": "bridge",
                    "dynamicPorts": [{"label": "http", "to": 8080}, {"label": "metrics"}],
                    "reservedPorts": [{"label": "admin", "value": 9000}],
                }
            ],
            "services": [
                {
                    "name": "api-admin",
                    "portLabel": "admin",
                    "checks": [{"type": "tcp", "interval": "10s", "timeout": "2s"}],
                }
            ],
        },
        "tasks": [
            {
                "name": "init",
                "driver": "exec",
                "config": {"command": "/bin/true"},
                "lifecycle": {"hook": "prestart"},
            },
            {
                "name": "app",
                "driver": "docker",
                "leader": True,
                "config": {
                    "image": "app:1",
                    "command": "serve",
                    "args": ["-v"],
                    "workDir": "/srv",
                    "force_pull": True,
                },
                "env": {"A": "1"},
                "resources": {"cpu": 500, "memoryMB": 256, "memoryMaxMB": 512},
                "services": [
                    {
                        "name": "api",
                        "portLabel": "http",
                        "tags": ["v1"],
                        "checks": [
                            {
                                "name": "alive",
                                "type": "http",
                                "path": "/health",
                                "interval": "5s",
                                "timeout": "1500ms",
                                "initialStatus": "critical",
                            }
                        ],
                    }
                ],
                "killTimeout": "20s",
                "killSignal": "SIGINT",
                "logConfig": {"maxFiles": 3, "maxFileSizeMB": 5},
                "schedule": {"cron": {"start": "30 9 * * MON-FRI *", "end": "0 16"}},
            },
        ],
    }
    for key, value in overrides.items():
        raw["job" if key == "job_type" else key] = (
            {**raw["job"], "type": value} if key == "job_type" else value
        )
    return parse_spec(raw)


@pytest.mark.parametrize(
    ("text", "ns"),
    [(None, 0), ("0", 0), ("5s", 5 * S), ("1m30s", 90 * S), ("1500ms", 1_500_000_000), ("1ns", 1)],
)
def test_durations_are_integer_nanoseconds(text: str | None, ns: int) -> None:
    assert jobs.duration_ns(text) == ns


# --- Job copy ----------------------------------------------------------------------------------


def test_job_has_every_field_of_the_spec_document() -> None:
    job = jobs.render_job(spec(), namespace="apps")
    assert set(job) >= JOB_FIELDS
    group = job["TaskGroups"][0]
    assert set(group) >= GROUP_FIELDS
    assert all(set(t) >= TASK_FIELDS for t in group["Tasks"])
    service = group["Tasks"][1]["Services"][0]
    assert set(service) >= SERVICE_FIELDS
    assert set(service["Checks"][0]) >= CHECK_FIELDS


def test_job_values() -> None:
    job = jobs.render_job(
        spec(), namespace="apps", create_index=7, modify_index=9, submit_time=123, status="running"
    )
    assert {k: job[k] for k in ("ID", "Name", "Type", "Priority", "Region", "Namespace")} == {
        "ID": "shop",
        "Name": "shop",
        "Type": "service",
        "Priority": 50,
        "Region": "global",
        "Namespace": "apps",
    }
    assert (job["Datacenters"], job["Meta"], job["Status"]) == (["dc1"], {"o": "me"}, "running")
    assert (job["CreateIndex"], job["ModifyIndex"], job["JobModifyIndex"]) == (7, 9, 9)
    assert (job["SubmitTime"], job["Version"], job["ParentID"], job["AllAtOnce"]) == (
        123,
        0,
        "",
        False,
    )
    assert job["Periodic"] is None and job["ParameterizedJob"] is None and job["Payload"] is None


def test_job_status_defaults_to_pending_as_when_nomad_copies_it() -> None:
    assert jobs.render_job(spec(), namespace="default")["Status"] == "pending"


@pytest.mark.parametrize(
    ("job_type", "update"),
    [
        ("service", {"Stagger": 30 * S, "MaxParallel": 1}),
        ("system", {"Stagger": 30 * S, "MaxParallel": 1}),
        ("batch", {"Stagger": 0, "MaxParallel": 0}),
        ("sysbatch", {"Stagger": 0, "MaxParallel": 0}),
    ],
)
def test_update_block_depends_on_the_job_type(job_type: str, update: dict[str, int]) -> None:
    assert jobs.render_job(spec(job_type=job_type), namespace="d")["Update"] == update


def test_task_group_restart_policy_and_disk_in_nanoseconds() -> None:
    group = jobs.render_task_group(spec())
    assert group["RestartPolicy"] == {
        "Attempts": 4,
        "Interval": 600 * S,
        "Delay": 20 * S,
        "Mode": "delay",
        "RenderTemplates": False,
    }
    assert group["EphemeralDisk"] == {"Sticky": True, "SizeMB": 200, "Migrate": False}
    assert (group["Name"], group["Count"], group["ShutdownDelay"]) == ("api", 3, 5 * S)
    assert [t["Name"] for t in group["Tasks"]] == ["init", "app"]


def test_default_restart_policy_is_rendered_for_the_job_type() -> None:
    plain = parse_spec(
        {
            "job": {"id": "j", "type": "batch"},
            "taskGroup": {"name": "g"},
            "tasks": [{"name": "t", "driver": "docker", "config": {"image": "i"}}],
        }
    )
    assert jobs.render_task_group(plain)["RestartPolicy"]["Attempts"] == 3
    assert jobs.render_task_group(plain)["RestartPolicy"]["Interval"] == 24 * 3600 * S


def test_task_fields() -> None:
    task = jobs.render_task(spec(), spec().tasks[1])
    assert (task["Name"], task["Driver"], task["Leader"]) == ("app", "docker", True)
    assert task["Config"] == {
        "image": "app:1",
        "command": "serve",
        "args": ["-v"],
        "work_dir": "/srv",
        "force_pull": True,
    }
    assert task["Env"] == {"A": "1"}
    assert (task["KillTimeout"], task["KillSignal"]) == (20 * S, "SIGINT")
    assert task["LogConfig"] == {"MaxFiles": 3, "MaxFileSizeMB": 5, "Disabled": False}
    assert task["Resources"] == {
        "CPU": 500,
        "Cores": 0,
        "MemoryMB": 256,
        "MemoryMaxMB": 512,
        "DiskMB": 0,
        "Networks": None,
    }
    assert task["Lifecycle"] is None
    assert task["Schedule"] == {
        "Cron": {"Start": "30 9 * * MON-FRI *", "End": "0 16", "Timezone": ""}
    }


def test_lifecycle_and_empty_maps() -> None:
    task = jobs.render_task(spec(), spec().tasks[0])
    assert task["Lifecycle"] == {"Hook": "prestart", "Sidecar": False}
    assert (task["Env"], task["Meta"], task["Services"], task["Schedule"]) == (None,) * 4
    assert task["Config"] == {"command": "/bin/true"}


def test_services_and_checks() -> None:
    service = jobs.render_task(spec(), spec().tasks[1])["Services"][0]
    assert {k: service[k] for k in ("Name", "TaskName", "PortLabel", "Tags", "Provider")} == {
        "Name": "api",
        "TaskName": "app",
        "PortLabel": "http",
        "Tags": ["v1"],
        "Provider": "nomad",
    }
    assert service["Checks"] == [
        {
            "Name": "alive",
            "Type": "http",
            "Command": "",
            "Args": None,
            "Path": "/health",
            "Protocol": "",
            "PortLabel": "",
            "Interval": 5 * S,
            "Timeout": 1_500_000_000,
            "InitialStatus": "critical",
            "OnUpdate": "require_healthy",
            "TaskName": "app",
        }
    ]
    group_check = jobs.render_task_group(spec())["Services"][0]["Checks"][0]
    assert group_check["Name"] == 'service: "api-admin" check'
    assert group_check["TaskName"] == ""


# --- resources -------------------------------------------------------------------------------


def test_networks_take_port_values_and_ip_as_arguments() -> None:
    (network,) = jobs.render_networks(spec(), ports={"metrics": 31000}, ip="10.1.2.3") or []
    assert set(network) >= NETWORK_FIELDS
    assert (network["Mode"], network["IP"], network["CIDR"], network["MBits"]) == (
        "bridge",
        "10.1.2.3",
        "10.1.2.3/32",
        0,
    )
    assert network["ReservedPorts"] == [
        {"Label": "admin", "Value": 9000, "To": 0, "HostNetwork": "default"}
    ]
    assert network["DynamicPorts"] == [
        {"Label": "http", "Value": 8080, "To": 8080, "HostNetwork": "default"},
        {"Label": "metrics", "Value": 31000, "To": 0, "HostNetwork": "default"},
    ]


def test_networks_default_to_the_pods_port_numbers_before_the_pod_runs() -> None:
    (network,) = jobs.render_networks(spec()) or []
    assert (network["IP"], network["CIDR"]) == ("", "")
    assert [p["Value"] for p in network["DynamicPorts"]] == [8080, 20000]


def test_without_a_network_networks_are_null_and_ports_empty() -> None:
    plain = parse_spec(
        {
            "job": {"id": "j"},
            "taskGroup": {"name": "g"},
            "tasks": [{"name": "t", "driver": "docker", "config": {"image": "i"}}],
        }
    )
    assert jobs.render_networks(plain) is None
    assert jobs.render_allocated_resources(plain)["Shared"]["Ports"] is None


def test_network_without_reserved_ports_has_null_reserved_and_listed_dynamic() -> None:
    plain = parse_spec(
        {
            "job": {"id": "j"},
            "taskGroup": {"name": "g", "networks": [{"dynamicPorts": []}]},
            "tasks": [{"name": "t", "driver": "docker", "config": {"image": "i"}}],
        }
    )
    (network,) = jobs.render_networks(plain) or []
    assert (network["ReservedPorts"], network["DynamicPorts"]) == (None, [])


def test_resources_sum_the_tasks_and_add_the_group_disk() -> None:
    resources = jobs.render_resources(spec(), ip="10.0.0.1")
    assert set(resources) == RESOURCE_FIELDS
    assert (resources["CPU"], resources["MemoryMB"], resources["DiskMB"]) == (600, 556, 200)
    assert resources["Networks"][0]["IP"] == "10.0.0.1"


def test_shared_resources_hold_disk_and_network_only() -> None:
    shared = jobs.render_shared_resources(spec())
    assert set(shared) == RESOURCE_FIELDS
    assert (shared["CPU"], shared["MemoryMB"], shared["DiskMB"]) == (0, 0, 200)
    assert shared["Networks"] is not None


def test_task_resources_per_task() -> None:
    assert jobs.render_task_resources(spec()) == {
        "init": {"CPU": 100, "MemoryMB": 300, "DiskMB": 0, "Networks": None},
        "app": {"CPU": 500, "MemoryMB": 256, "DiskMB": 0, "Networks": None},
    }


def test_allocated_resources_have_nomads_shape() -> None:
    allocated = jobs.render_allocated_resources(spec(), ports={"metrics": 25000}, ip="10.0.0.9")
    assert allocated["Tasks"]["app"] == {
        "Cpu": {"CpuShares": 500},
        "Memory": {"MemoryMB": 256, "MemoryMaxMB": 512},
        "Networks": None,
    }
    assert allocated["Tasks"]["init"]["Memory"] == {"MemoryMB": 300, "MemoryMaxMB": 0}
    assert allocated["TaskLifecycles"] == {
        "init": {"Hook": "prestart", "Sidecar": False},
        "app": None,
    }
    shared = allocated["Shared"]
    assert shared["DiskMB"] == 200
    assert shared["Ports"] == [
        {"Label": "admin", "Value": 9000, "To": 0, "HostIP": "10.0.0.9"},
        {"Label": "http", "Value": 8080, "To": 8080, "HostIP": "10.0.0.9"},
        {"Label": "metrics", "Value": 25000, "To": 0, "HostIP": "10.0.0.9"},
    ]
    assert shared["Networks"][0]["DynamicPorts"][1]["Value"] == 25000


def test_everything_is_plain_json() -> None:
    s = spec()
    for rendered in (
        jobs.render_job(s, namespace="d"),
        jobs.render_resources(s),
        jobs.render_shared_resources(s),
        jobs.render_task_resources(s),
        jobs.render_allocated_resources(s),
    ):
        assert json.loads(json.dumps(rendered)) == rendered
