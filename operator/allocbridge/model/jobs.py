"""The spec rendered into Nomad's wire shapes: the `Job` copy and the resource blocks.

Plain dicts with Nomad's PascalCase keys, built directly (the API renders thousands, and a
model layer in between would only cost time). Durations are integer nanoseconds and absent
maps or lists are `null`, as Nomad's encoder writes them. Port numbers are only final once the
pod runs, so the resource renderers take `ports` (label -> `Value`) and the pod `ip`; labels
missing from `ports` fall back to the numbers `AllocationSpec.ports` picked for the pod.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from allocbridge.model.durations import parse_go_duration
from allocbridge.model.spec import (
    DEFAULT_PRIORITY,
    DEFAULT_REGION,
    AllocationSpec,
    Check,
    DriverConfig,
    ResolvedPort,
    Service,
    Task,
)

NS_PER_SECOND: Final = 1_000_000_000
#: Nomad's default update block for service and system jobs (batch jobs have none).
DEFAULT_STAGGER_NS: Final = 30 * NS_PER_SECOND
DEFAULT_MAX_PARALLEL: Final = 1
#: The network device of a pod.
POD_DEVICE: Final = "eth0"

Json = dict[str, Any]


def duration_ns(text: str | None) -> int:
    """A Go duration string as integer nanoseconds (None is 0)."""
    return 0 if text is None else round(parse_go_duration(text) * NS_PER_SECOND)


def _map_or_null(value: Mapping[str, str]) -> dict[str, str] | None:
    return dict(value) if value else None


def render_check(check: Check, *, service_name: str, task_name: str = "") -> Json:
    """A service check as Nomad's `ServiceCheck`."""
    return {
        "Name": check.display_name(service_name),
        "Type": check.type,
        "Command": check.command or "",
        "Args": list(check.args) or None,
        "Path": check.path or "",
        "Protocol": check.protocol or "",
        "PortLabel": check.port_label or "",
        "Interval": duration_ns(check.interval),
        "Timeout": duration_ns(check.timeout),
        "InitialStatus": check.initial_status or "",
        "OnUpdate": check.on_update,
        "TaskName": task_name,
    }


def render_service(service: Service, *, task_name: str = "") -> Json:
    """A Nomad-native service as Nomad's `Service`."""
    return {
        "Name": service.name,
        "TaskName": task_name,
        "PortLabel": service.port_label or "",
        "AddressMode": "auto",
        "Provider": "nomad",
        "Tags": list(service.tags) or None,
        "Checks": [
            render_check(c, service_name=service.name, task_name=task_name) for c in service.checks
        ]
        or None,
    }


def render_config(config: DriverConfig) -> Json:
    """The driver config under Nomad's own (snake_case) keys; extra keys as written."""
    out: Json = {}
    if config.image is not None:
        out["image"] = config.image
    if config.command is not None:
        out["command"] = config.command
    if config.args:
        out["args"] = list(config.args)
    if config.entrypoint is not None:
        out["entrypoint"] = list(config.entrypoint)
    if config.work_dir is not None:
        out["work_dir"] = config.work_dir
    out.update(config.extras)
    return out


def _restart_policy(spec: AllocationSpec) -> Json:
    policy = spec.restart_policy()
    return {
        "Attempts": policy.attempts,
        "Interval": round(policy.interval_seconds * NS_PER_SECOND),
        "Delay": round(policy.delay_seconds * NS_PER_SECOND),
        "Mode": policy.mode,
        "RenderTemplates": False,
    }


def render_task(spec: AllocationSpec, task: Task) -> Json:
    """One task of the `Job` copy."""
    res = task.resources
    schedule = task.schedule
    return {
        "Name": task.name,
        "Driver": task.driver,
        "User": "",
        "Lifecycle": (
            None
            if task.lifecycle is None
            else {"Hook": task.lifecycle.hook, "Sidecar": task.lifecycle.sidecar}
        ),
        "Config": render_config(task.config),
        "Env": _map_or_null(task.env),
        "Services": [render_service(s, task_name=task.name) for s in task.services] or None,
        "Vault": None,
        "Templates": None,
        "Constraints": None,
        "Affinities": None,
        "Resources": {
            "CPU": res.cpu,
            "Cores": 0,
            "MemoryMB": res.memory_mb,
            "MemoryMaxMB": res.memory_max_mb or 0,
            "DiskMB": 0,
            "Networks": None,
        },
        "RestartPolicy": _restart_policy(spec),
        "Spreads": None,
        "DispatchPayload": None,
        "Meta": _map_or_null(task.meta),
        "KillTimeout": duration_ns(task.kill_timeout),
        "KillSignal": task.kill_signal or "",
        "ShutdownDelay": duration_ns(task.shutdown_delay),
        "LogConfig": {
            "MaxFiles": task.log_config.max_files,
            "MaxFileSizeMB": task.log_config.max_file_size_mb,
            "Disabled": False,
        },
        "Artifacts": None,
        "Leader": task.leader,
        "Schedule": (
            None
            if schedule is None
            else {
                "Cron": {
                    "Start": schedule.cron.start,
                    "End": schedule.cron.end,
                    "Timezone": schedule.cron.timezone or "",
                }
            }
        ),
    }


def render_task_group(spec: AllocationSpec) -> Json:
    """The allocation's task group in the `Job` copy (the only group this copy carries)."""
    group = spec.task_group
    disk = group.ephemeral_disk
    return {
        "Name": group.name,
        "Count": group.count,
        "Constraints": None,
        "Affinities": None,
        "Spreads": None,
        "Meta": _map_or_null(group.meta),
        "RestartPolicy": _restart_policy(spec),
        "EphemeralDisk": {"Sticky": disk.sticky, "SizeMB": disk.size_mb, "Migrate": disk.migrate},
        "Networks": render_networks(spec),
        "Services": [render_service(s) for s in group.services] or None,
        "ShutdownDelay": duration_ns(group.shutdown_delay) if group.shutdown_delay else None,
        "Tasks": [render_task(spec, t) for t in spec.tasks],
    }


def render_job(
    spec: AllocationSpec,
    *,
    namespace: str,
    create_index: int = 0,
    modify_index: int = 0,
    submit_time: int = 0,
    status: str = "pending",
) -> Json:
    """The `Job` copy of an allocation.

    Nomad copies the job when it creates the allocation, when the job is usually still
    `pending`; hence that default. `submit_time` is Unix nanoseconds.
    """
    job = spec.job
    batch = job.is_batch
    return {
        "Region": job.region,
        "Namespace": namespace,
        "ID": job.id,
        "ParentID": "",
        "Name": job.display_name,
        "Type": job.type,
        "Priority": job.priority,
        "AllAtOnce": False,
        "Datacenters": list(job.datacenters),
        "NodePool": "default",
        "Constraints": None,
        "Affinities": None,
        "Spreads": None,
        "TaskGroups": [render_task_group(spec)],
        "Update": {
            "Stagger": 0 if batch else DEFAULT_STAGGER_NS,
            "MaxParallel": 0 if batch else DEFAULT_MAX_PARALLEL,
        },
        "Periodic": None,
        "ParameterizedJob": None,
        "Dispatched": False,
        "Payload": None,
        "Meta": _map_or_null(job.meta),
        "VaultToken": "",
        "Stop": False,
        "Status": status,
        "StatusDescription": "",
        "Stable": False,
        "Version": job.version,
        "SubmitTime": submit_time,
        "CreateIndex": create_index,
        "ModifyIndex": modify_index,
        "JobModifyIndex": modify_index,
    }


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _text(value: Any, default: str = "") -> str:
    return value if isinstance(value, str) else default


def render_unparsed_job(raw_spec: Mapping[str, Any], *, namespace: str) -> Json:
    """A minimal `Job` for an allocation whose spec cannot be parsed.

    The nomad CLI dereferences `alloc.Job` (its ID, Type, Version, task groups) without a nil
    check, so `"Job": null` makes `alloc status` and `alloc logs` panic; this stand-in lets it
    print the allocation or a clean error instead. Only what can be read from the raw spec is
    used: the job's ID, name and type, and the group with the names of its tasks (or none).
    """
    job = _mapping(raw_spec.get("job"))
    group = _mapping(raw_spec.get("taskGroup"))
    raw_tasks = raw_spec.get("tasks")
    if not isinstance(raw_tasks, list):
        raw_tasks = []
    tasks = [
        {"Name": t["name"], "Driver": _text(t.get("driver"))}
        for t in raw_tasks
        if isinstance(t, Mapping) and isinstance(t.get("name"), str)
    ]
    job_id = _text(job.get("id"))
    job_type = _text(job.get("type"), "service")
    groups = (
        [{"Name": group["name"], "Count": 1, "Tasks": tasks}] if _text(group.get("name")) else []
    )
    return {
        "Region": _text(job.get("region"), DEFAULT_REGION),
        "Namespace": namespace,
        "ID": job_id,
        "Name": _text(job.get("name")) or job_id,
        "Type": job_type,
        "Priority": DEFAULT_PRIORITY,
        "Version": 0,
        "Status": "dead",
        "StatusDescription": "the Allocation's spec is invalid",
        "TaskGroups": groups,
        "Stop": False,
    }


def _resolved(spec: AllocationSpec, ports: Mapping[str, int] | None) -> list[ResolvedPort]:
    given = ports or {}
    return [
        ResolvedPort(p.label, given.get(p.label, p.value), p.to, p.reserved) for p in spec.ports()
    ]


def _port(port: ResolvedPort) -> Json:
    return {"Label": port.label, "Value": port.value, "To": port.to, "HostNetwork": "default"}


def render_networks(
    spec: AllocationSpec, *, ports: Mapping[str, int] | None = None, ip: str = ""
) -> list[Json] | None:
    """The group network as Nomad `NetworkResource`s (`null` without a network block)."""
    if not spec.task_group.networks:
        return None
    resolved = _resolved(spec, ports)
    out: list[Json] = []
    for net in spec.task_group.networks:
        reserved = {p.label for p in net.reserved_ports}
        dynamic = {p.label for p in net.dynamic_ports}
        out.append(
            {
                "Mode": net.mode,
                "Device": POD_DEVICE,
                "CIDR": f"{ip}/32" if ip else "",
                "IP": ip,
                "MBits": 0,
                "ReservedPorts": [_port(p) for p in resolved if p.label in reserved] or None,
                "DynamicPorts": [_port(p) for p in resolved if p.label in dynamic],
            }
        )
    return out


def _resources(cpu: int, memory_mb: int, disk_mb: int, networks: list[Json] | None) -> Json:
    return {"CPU": cpu, "MemoryMB": memory_mb, "DiskMB": disk_mb, "Networks": networks}


def render_resources(
    spec: AllocationSpec, *, ports: Mapping[str, int] | None = None, ip: str = ""
) -> Json:
    """`Allocation.Resources`: every task's CPU and memory summed, the group disk and network."""
    return _resources(
        sum(t.resources.cpu for t in spec.tasks),
        sum(t.resources.memory_mb for t in spec.tasks),
        spec.task_group.ephemeral_disk.size_mb,
        render_networks(spec, ports=ports, ip=ip),
    )


def render_shared_resources(
    spec: AllocationSpec, *, ports: Mapping[str, int] | None = None, ip: str = ""
) -> Json:
    """`Allocation.SharedResources`: what the group holds beside its tasks (disk, network)."""
    return _resources(
        0, 0, spec.task_group.ephemeral_disk.size_mb, render_networks(spec, ports=ports, ip=ip)
    )


def render_task_resources(spec: AllocationSpec) -> dict[str, Json]:
    """`Allocation.TaskResources`: per task; networks belong to the group, so `null`."""
    return {t.name: _resources(t.resources.cpu, t.resources.memory_mb, 0, None) for t in spec.tasks}


def render_allocated_resources(
    spec: AllocationSpec, *, ports: Mapping[str, int] | None = None, ip: str = ""
) -> Json:
    """`AllocatedResources` in Nomad's shape (`Tasks`, `TaskLifecycles`, `Shared`)."""
    resolved = _resolved(spec, ports)
    return {
        "Tasks": {
            t.name: {
                "Cpu": {"CpuShares": t.resources.cpu},
                "Memory": {
                    "MemoryMB": t.resources.memory_mb,
                    "MemoryMaxMB": t.resources.memory_max_mb or 0,
                },
                "Networks": None,
            }
            for t in spec.tasks
        },
        "TaskLifecycles": {
            t.name: (
                None
                if t.lifecycle is None
                else {"Hook": t.lifecycle.hook, "Sidecar": t.lifecycle.sidecar}
            )
            for t in spec.tasks
        },
        "Shared": {
            "DiskMB": spec.task_group.ephemeral_disk.size_mb,
            "Networks": render_networks(spec, ports=ports, ip=ip),
            "Ports": [
                {"Label": p.label, "Value": p.value, "To": p.to, "HostIP": ip} for p in resolved
            ]
            or None,
        },
    }
