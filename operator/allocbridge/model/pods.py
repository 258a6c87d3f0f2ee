"""The Pod that runs an allocation, rendered as a plain manifest dict (no I/O).

One Allocation is one Pod, owned by it; each task is a container (prestart tasks init
containers, prestart sidecars native sidecars, poststart tasks after the main ones; poststop
cannot be expressed and is refused). The pod's `restartPolicy` is `Always` for service and
system jobs and `OnFailure` for batch, never `Never`: the kubelet restarts containers in place,
which the in-place restart and signal actions need, while every exit stays visible to the
operator, which enforces the group's restart policy on top. Where that policy is wrong for one
poststart task, the container gets its own `restartPolicy` on clusters and kubelets that honour
it (1.35+, `kubelet_honours_container_restart_policies`).

Resources, checks as readiness probes (`probe_assignments`), ports and `NOMAD_*` variables,
and why each choice: docs/kubernetes-mapping.md.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from allocbridge.model.spec import (
    DRIVER_DOCKER,
    EXEC_DRIVERS,
    AllocationSpec,
    Check,
    ResolvedPort,
    Service,
    Task,
)

API_VERSION: Final = "allocbridge.io/v1"
KIND: Final = "Allocation"

LABEL_ALLOC_ID: Final = "allocbridge.io/alloc-id"
LABEL_JOB: Final = "allocbridge.io/job"
LABEL_GROUP: Final = "allocbridge.io/group"
LABEL_MANAGED_BY: Final = "app.kubernetes.io/managed-by"
MANAGED_BY: Final = "allocbridge"
#: The label selector of the pods this operator created, for its watches.
MANAGED_SELECTOR: Final = f"{LABEL_MANAGED_BY}={MANAGED_BY}"
# Annotations carry the exact values that labels cannot (length and character limits).
ANNOTATION_ALLOC_NAME: Final = "allocbridge.io/alloc-name"
ANNOTATION_JOB_ID: Final = "allocbridge.io/job-id"
#: JSON map of container name to the check its readiness probe runs.
ANNOTATION_PROBE_CHECKS: Final = "allocbridge.io/probe-checks"

ALLOC_DIR: Final = "/alloc"
TASK_DIR: Final = "/local"
ALLOC_VOLUME: Final = "alloc"

_LABEL_VALUE: Final = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
_IANA_SVC_NAME: Final = re.compile(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?")
_ENV_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NOMAD_REF: Final = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


@dataclass(frozen=True)
class PodSettings:
    """Operator-wide choices for rendering pods, and the one home of their defaults (the
    config file's `kubernetes` block sets them: `allocbridge.config`)."""

    #: Nomad MHz that make one Kubernetes CPU; requests are `cpu * 1000 / mhz_per_cpu` m.
    mhz_per_cpu: int = 1000
    #: CPU limit as a multiple of the request; None leaves CPU unlimited like Nomad shares.
    cpu_limit_factor: float | None = None
    #: Memory limit as a multiple of memoryMB when the task sets no memoryMaxMB.
    memory_limit_factor: float = 1.0
    #: Image in which `exec` and `raw_exec` tasks run `config.command`.
    exec_image: str = "busybox:1.36"
    image_pull_policy: str | None = None
    extra_labels: Mapping[str, str] = field(default_factory=dict)
    extra_annotations: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Mapping[str, Any], ...] = ()
    node_selector: Mapping[str, str] = field(default_factory=dict)
    service_account_name: str | None = None
    automount_service_account_token: bool = False
    #: Also publish reserved ports as host ports (Nomad static ports on the node's address).
    reserved_ports_as_host_ports: bool = False
    #: Mount Nomad's shared `/alloc` and per-task `/local` directories as emptyDir volumes.
    task_dirs: bool = True
    #: The cluster honours a regular container's own `restartPolicy` (see the module
    #: docstring); set from the API server's version when the operator starts.
    container_restart_policies: bool = False

    def __post_init__(self) -> None:
        if self.mhz_per_cpu <= 0:
            raise ValueError("mhz_per_cpu must be positive")
        if self.memory_limit_factor < 1:
            raise ValueError("memory_limit_factor must be at least 1 (limit >= request)")
        if self.cpu_limit_factor is not None and self.cpu_limit_factor < 1:
            raise ValueError("cpu_limit_factor must be at least 1 (limit >= request)")


DEFAULT_SETTINGS: Final = PodSettings()


@dataclass(frozen=True)
class ProbeAssignment:
    """The check a container's readiness probe stands for; `task` is "" for group services."""

    container: str
    task: str
    service: str
    check: str


def owning_allocation(pod: Mapping[str, Any]) -> str | None:
    """The name of the Allocation that controls `pod` (its controller owner reference)."""
    for owner in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if owner.get("kind") == KIND and owner.get("controller"):
            return str(owner.get("name"))
    return None


def pod_restart_policy(spec: AllocationSpec) -> str:
    """`OnFailure` for batch-like jobs (exit 0 completes), `Always` otherwise."""
    return "OnFailure" if spec.job.is_batch else "Always"


def container_restart_policy(
    spec: AllocationSpec, task: Task, settings: PodSettings = DEFAULT_SETTINGS
) -> str | None:
    """The container's own `restartPolicy`, where the pod's is wrong for the task: native
    sidecars always; poststart tasks whose exit 0 Nomad treats otherwise than the pod would,
    where the cluster honours it (see the module docstring)."""
    if task.hook == "prestart":
        return "Always" if task.is_sidecar else None
    if task.hook != "poststart" or not settings.container_restart_policies:
        return None
    wanted = "Always" if task.is_sidecar else "OnFailure"
    return wanted if wanted != pod_restart_policy(spec) else None


#: The first Kubernetes release whose API server and kubelet honour a regular container's own
#: `restartPolicy` by default (`ContainerRestartRules`, beta); older ones refuse or drop it.
CONTAINER_RESTART_POLICIES_SINCE: Final = (1, 35)


def honours_container_restart_policies(major: str, minor: str) -> bool:
    """From the API server's `/version` (`minor` may carry a suffix, as in `35+`)."""
    digits = re.match(r"\d+", minor)
    if not major.isdigit() or digits is None:
        return False
    return (int(major), int(digits.group())) >= CONTAINER_RESTART_POLICIES_SINCE


def kubelet_honours_container_restart_policies(kubelet_version: str) -> bool | None:
    """From a node's `status.nodeInfo.kubeletVersion` (`v1.34.2-eks-113cf36`): during an
    upgrade, a 1.35 API server keeps a container's own policy that an older kubelet ignores.
    None when the version is not a Kubernetes one (a simulated kubelet's)."""
    found = re.match(r"v?(\d+)\.(\d+)\.", kubelet_version)
    if found is None:
        return None
    return (int(found[1]), int(found[2])) >= CONTAINER_RESTART_POLICIES_SINCE


def cpu_millicores(mhz: int, settings: PodSettings = DEFAULT_SETTINGS) -> int:
    """Nomad MHz as Kubernetes millicores, at least 1."""
    return max(1, round(mhz * 1000 / settings.mhz_per_cpu))


def container_resources(task: Task, settings: PodSettings = DEFAULT_SETTINGS) -> dict[str, Any]:
    """Requests and limits for a task (see the module docstring for the ratios)."""
    res = task.resources
    millis = cpu_millicores(res.cpu, settings)
    memory_limit = res.memory_max_mb or math.ceil(res.memory_mb * settings.memory_limit_factor)
    limits: dict[str, str] = {"memory": f"{memory_limit}Mi"}
    if settings.cpu_limit_factor is not None:
        limits["cpu"] = f"{math.ceil(millis * settings.cpu_limit_factor)}m"
    return {"requests": {"cpu": f"{millis}m", "memory": f"{res.memory_mb}Mi"}, "limits": limits}


def termination_grace_seconds(spec: AllocationSpec) -> int:
    """The longest task kill timeout, rounded up: the kubelet's SIGTERM-to-SIGKILL wait."""
    return max((math.ceil(t.kill_timeout_seconds) for t in spec.tasks), default=0)


def label_value(text: str) -> str:
    """`text` if it is a valid label value, else a readable, unique, valid stand-in."""
    if len(text) <= 63 and _LABEL_VALUE.fullmatch(text):
        return text
    digest = hashlib.sha256(text.encode()).hexdigest()[:10]
    cleaned = re.sub(r"[^-A-Za-z0-9_.]", "-", text)[:52].strip("-_.")
    return f"{cleaned}-{digest}" if cleaned else digest


def container_tasks(spec: AllocationSpec) -> tuple[list[Task], list[Task]]:
    """(init containers, containers) in pod order; poststop tasks are left out."""
    sidecars = [t for t in spec.tasks if t.hook == "prestart" and t.is_sidecar]
    init = [t for t in spec.tasks if t.hook == "prestart" and not t.is_sidecar]
    main = [t for t in spec.tasks if t.is_main]
    post = [t for t in spec.tasks if t.hook == "poststart"]
    return sidecars + init, main + post


def _containers_leader_first(spec: AllocationSpec) -> list[Task]:
    _, containers = container_tasks(spec)
    return sorted(containers, key=lambda t: not t.leader)


def _probe_plan(spec: AllocationSpec) -> dict[str, tuple[ProbeAssignment, dict[str, Any]]]:
    """Container name -> (the check it stands for, the probe); only checks that make a probe."""
    plan: dict[str, tuple[ProbeAssignment, dict[str, Any]]] = {}
    init, containers = container_tasks(spec)
    for task in [t for t in init if t.is_sidecar] + containers:
        for service, check in ((s, c) for s in task.services for c in s.checks):
            probe = probe_for_check(spec, service, check)
            if probe is not None:
                name = check.display_name(service.name)
                plan[task.name] = (ProbeAssignment(task.name, task.name, service.name, name), probe)
                break
    # Group services run outside any task in Nomad; here they borrow free containers.
    free = [t.name for t in _containers_leader_first(spec) if t.name not in plan]
    for service, check in ((s, c) for s in spec.task_group.services for c in s.checks):
        if not free:
            break
        probe = None if check.type == "script" else probe_for_check(spec, service, check)
        if probe is not None:
            container = free.pop(0)
            name = check.display_name(service.name)
            plan[container] = (ProbeAssignment(container, "", service.name, name), probe)
    return plan


def probe_assignments(spec: AllocationSpec) -> dict[str, ProbeAssignment]:
    """Container name -> the one check its readiness probe runs."""
    return {name: assignment for name, (assignment, _) in _probe_plan(spec).items()}


def _port_number(spec: AllocationSpec, label: str | None) -> int | None:
    if label is None:
        return None
    if label.isdigit():
        return int(label)
    return next((p.container_port for p in spec.ports() if p.label == label), None)


def probe_for_check(spec: AllocationSpec, service: Service, check: Check) -> dict[str, Any] | None:
    """A Kubernetes readiness probe doing what the Nomad check does, if one can."""
    probe: dict[str, Any] = {
        "periodSeconds": max(1, math.ceil(check.interval_seconds)),
        "timeoutSeconds": max(1, math.ceil(check.timeout_seconds)),
        "successThreshold": 1,
        "failureThreshold": 1,
    }
    if check.type == "script":
        if not check.command:
            return None
        probe["exec"] = {"command": [check.command, *check.args]}
        return probe
    port = _port_number(spec, check.port_label or service.port_label)
    if port is None:
        return None
    if check.type == "http":
        probe["httpGet"] = {
            "path": check.path or "/",
            "port": port,
            "scheme": "HTTPS" if check.protocol == "https" else "HTTP",
        }
    elif check.type == "tcp":
        probe["tcpSocket"] = {"port": port}
    else:
        probe["grpc"] = {"port": port}
    return probe


def nomad_interpolation(text: str) -> str:
    """Nomad `${VAR}` references as Kubernetes `$(VAR)`; a literal `$(` stays literal."""
    return _NOMAD_REF.sub(r"$(\1)", text.replace("$(", "$$("))


def _env_entry(name: str, value: str) -> dict[str, Any]:
    return {"name": name, "value": value}


def task_env(
    spec: AllocationSpec, task: Task, *, alloc_id: str, namespace: str
) -> list[dict[str, Any]]:
    """Nomad's runtime variables, then `meta`, then the task's own `env` (which wins)."""
    job, group = spec.job, spec.task_group
    res = task.resources
    env: dict[str, dict[str, Any]] = {}

    def put(name: str, value: str) -> None:
        env[name] = _env_entry(name, value)

    put("NOMAD_ALLOC_ID", alloc_id)
    put("NOMAD_ALLOC_NAME", spec.alloc_name)
    put("NOMAD_ALLOC_INDEX", str(group.index))
    put("NOMAD_NAMESPACE", namespace)
    put("NOMAD_REGION", job.region)
    put("NOMAD_JOB_ID", job.id)
    put("NOMAD_JOB_NAME", job.display_name)
    put("NOMAD_GROUP_NAME", group.name)
    put("NOMAD_TASK_NAME", task.name)
    put("NOMAD_CPU_LIMIT", str(res.cpu))
    put("NOMAD_MEMORY_LIMIT", str(res.memory_mb))
    if res.memory_max_mb is not None:
        put("NOMAD_MEMORY_MAX_LIMIT", str(res.memory_max_mb))
    put("NOMAD_ALLOC_DIR", ALLOC_DIR)
    put("NOMAD_TASK_DIR", TASK_DIR)
    for port in spec.ports():
        ip = f"NOMAD_IP_{port.label}"
        env[ip] = {"name": ip, "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
        put(f"NOMAD_PORT_{port.label}", str(port.container_port))
        put(f"NOMAD_HOST_PORT_{port.label}", str(port.value))
        put(f"NOMAD_ADDR_{port.label}", f"$({ip}):{port.container_port}")
    for key, value in {**job.meta, **group.meta, **task.meta}.items():
        if _ENV_NAME.fullmatch(key):
            put(f"NOMAD_META_{key}", value)
    for key, value in task.env.items():
        env.pop(key, None)
        put(key, nomad_interpolation(value))
    return list(env.values())


def _command_and_args(task: Task, settings: PodSettings) -> dict[str, Any]:
    config = task.config
    out: dict[str, Any] = {}
    args = [nomad_interpolation(a) for a in config.args]
    if task.driver in EXEC_DRIVERS:
        out["image"] = settings.exec_image
        out["command"] = [nomad_interpolation(config.command or "")]
        if args:
            out["args"] = args
        return out
    if task.driver != DRIVER_DOCKER:
        raise ValueError(f"task {task.name!r}: unsupported driver {task.driver!r}")
    # Docker's `command` replaces the image CMD and keeps its ENTRYPOINT, so in Kubernetes terms
    # it is the first argument; `entrypoint` is what Kubernetes calls `command`.
    out["image"] = config.image or ""
    if config.entrypoint is not None:
        out["command"] = [nomad_interpolation(e) for e in config.entrypoint]
    if config.command:
        out["args"] = [nomad_interpolation(config.command), *args]
    elif args:
        out["args"] = args
    return out


def _container_ports(ports: Iterable[ResolvedPort], settings: PodSettings) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    names: set[str] = set()
    for port in ports:
        entry: dict[str, Any] = {"containerPort": port.container_port, "protocol": "TCP"}
        # Kubernetes port names are IANA service names; labels that cannot be one stay unnamed.
        name = port.label.lower().replace("_", "-")
        if (
            len(name) <= 15
            and _IANA_SVC_NAME.fullmatch(name)
            and "--" not in name
            and any(c.isalpha() for c in name)
            and name not in names
        ):
            names.add(name)
            entry["name"] = name
        if port.reserved and settings.reserved_ports_as_host_ports:
            entry["hostPort"] = port.value
        out.append(entry)
    return out


def render_container(
    spec: AllocationSpec,
    task: Task,
    *,
    alloc_id: str,
    namespace: str,
    settings: PodSettings = DEFAULT_SETTINGS,
    probe: dict[str, Any] | None = None,
    ports: tuple[ResolvedPort, ...] = (),
) -> dict[str, Any]:
    """One task as a container (without its own `restartPolicy`, which `render_pod` adds)."""
    container: dict[str, Any] = {"name": task.name, **_command_and_args(task, settings)}
    if settings.image_pull_policy:
        container["imagePullPolicy"] = settings.image_pull_policy
    if task.config.work_dir:
        container["workingDir"] = task.config.work_dir
    container["env"] = task_env(spec, task, alloc_id=alloc_id, namespace=namespace)
    container["resources"] = container_resources(task, settings)
    if ports:
        container["ports"] = _container_ports(ports, settings)
    if settings.task_dirs:
        container["volumeMounts"] = [
            {"name": ALLOC_VOLUME, "mountPath": ALLOC_DIR},
            {"name": _local_volume(spec, task), "mountPath": TASK_DIR},
        ]
    if probe is not None:
        container["readinessProbe"] = probe
    return container


def _local_volume(spec: AllocationSpec, task: Task) -> str:
    return f"local-{spec.tasks.index(task)}"


def render_pod(
    *,
    name: str,
    namespace: str,
    uid: str,
    spec: AllocationSpec,
    settings: PodSettings = DEFAULT_SETTINGS,
) -> dict[str, Any]:
    """The Pod manifest for the Allocation `namespace/name` with `metadata.uid` `uid`.

    Container layout, restart policy (`Always`, or `OnFailure` for batch jobs, so the operator
    sees every exit and enforces the Nomad restart policy itself), resources and probes follow
    the module docstring.

    Expects a spec that `validation.validate` accepted: unknown drivers and poststop tasks raise
    `ValueError`, bad durations `DurationError`.
    """
    bad = [t.name for t in spec.tasks if t.hook == "poststop"]
    if bad:
        raise ValueError(f"poststop tasks cannot run in a pod: {', '.join(bad)}")
    init_tasks, main_tasks = container_tasks(spec)
    plan = _probe_plan(spec)
    port_owner = next(iter(_containers_leader_first(spec)), None)
    ports = spec.ports()

    def container(task: Task) -> dict[str, Any]:
        rendered = render_container(
            spec,
            task,
            alloc_id=uid,
            namespace=namespace,
            settings=settings,
            probe=plan[task.name][1] if task.name in plan else None,
            ports=ports if port_owner is not None and task.name == port_owner.name else (),
        )
        if (policy := container_restart_policy(spec, task, settings)) is not None:
            rendered["restartPolicy"] = policy
        return rendered

    labels = {
        **settings.extra_labels,
        LABEL_ALLOC_ID: uid,
        LABEL_JOB: label_value(spec.job.id),
        LABEL_GROUP: label_value(spec.task_group.name),
        LABEL_MANAGED_BY: MANAGED_BY,
    }
    annotations = {
        **settings.extra_annotations,
        ANNOTATION_ALLOC_NAME: spec.alloc_name,
        ANNOTATION_JOB_ID: spec.job.id,
    }
    if plan:
        annotations[ANNOTATION_PROBE_CHECKS] = json.dumps(
            {
                c: {"task": a.task, "service": a.service, "check": a.check}
                for c, (a, _) in sorted(plan.items())
            },
            separators=(",", ":"),
            sort_keys=True,
        )
    pod_spec: dict[str, Any] = {
        "restartPolicy": pod_restart_policy(spec),
        "terminationGracePeriodSeconds": termination_grace_seconds(spec),
        "enableServiceLinks": False,
        "automountServiceAccountToken": settings.automount_service_account_token,
    }
    if init_tasks:
        pod_spec["initContainers"] = [container(t) for t in init_tasks]
    pod_spec["containers"] = [container(t) for t in main_tasks]
    if settings.task_dirs:
        disk = spec.task_group.ephemeral_disk.size_mb
        pod_spec["volumes"] = [
            {"name": ALLOC_VOLUME, "emptyDir": {"sizeLimit": f"{disk}Mi"}},
            *({"name": _local_volume(spec, t), "emptyDir": {}} for t in (*init_tasks, *main_tasks)),
        ]
    if settings.service_account_name:
        pod_spec["serviceAccountName"] = settings.service_account_name
    if settings.node_selector:
        pod_spec["nodeSelector"] = dict(settings.node_selector)
    if settings.tolerations:
        pod_spec["tolerations"] = [dict(t) for t in settings.tolerations]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [
                {
                    "apiVersion": API_VERSION,
                    "kind": KIND,
                    "name": name,
                    "uid": uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": pod_spec,
    }
