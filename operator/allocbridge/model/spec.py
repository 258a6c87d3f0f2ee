"""The `Allocation` custom resource's `spec`, as pydantic models.

The spec carries Nomad's job, task group and task concepts in Kubernetes camelCase
(`crds/allocations.yaml` is the schema; the field names here and there must stay identical).
Models parse the plain dict Kopf hands over (`AllocationSpec.model_validate(spec)`), and accept
Python field names too (`populate_by_name`) so tests and code can build them directly.

Defaults live here, not in the CRD, so the stored object is what the user wrote and every
consumer (pods, the Nomad `Job` copy, the restart logic) reads one set of Nomad defaults.
Durations stay the Go duration strings the user wrote; the `*_seconds` helpers parse them and
raise `DurationError` on bad text, which `validation.validate` reports first.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from allocbridge.model.durations import parse_go_duration

JobType = Literal["service", "batch", "system", "sysbatch"]
RestartMode = Literal["fail", "delay"]
CheckType = Literal["http", "tcp", "script", "grpc"]
LifecycleHook = Literal["prestart", "poststart", "poststop"]

DRIVER_DOCKER: Final = "docker"
DRIVER_EXEC: Final = "exec"
DRIVER_RAW_EXEC: Final = "raw_exec"
#: Drivers the operator can run; any other driver string is a `Failed Validation`, not an error.
KNOWN_DRIVERS: Final = (DRIVER_DOCKER, DRIVER_EXEC, DRIVER_RAW_EXEC)
#: Drivers whose `config.command` runs in the configurable base image.
EXEC_DRIVERS: Final = (DRIVER_EXEC, DRIVER_RAW_EXEC)

#: Nomad's default dynamic port range (client `min_dynamic_port`/`max_dynamic_port`).
DYNAMIC_PORT_MIN: Final = 20000
DYNAMIC_PORT_MAX: Final = 32000

# Nomad's documented defaults.
DEFAULT_PRIORITY: Final = 50
DEFAULT_REGION: Final = "global"
DEFAULT_CPU_MHZ: Final = 100
DEFAULT_MEMORY_MB: Final = 300
DEFAULT_DISK_MB: Final = 300
DEFAULT_KILL_TIMEOUT: Final = "5s"
DEFAULT_LOG_MAX_FILES: Final = 10
DEFAULT_LOG_MAX_FILE_SIZE_MB: Final = 10
DEFAULT_NETWORK_MODE: Final = "host"


class _Model(BaseModel):
    """camelCase on the wire, snake_case in Python; immutable like the allocation itself."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        frozen=True,
        extra="ignore",
    )


def _seconds(text: str | None, default: float = 0.0) -> float:
    return default if text is None else parse_go_duration(text)


class Job(_Model):
    """The parts of the Nomad job this allocation belongs to (for the `Job` copy and labels)."""

    id: str
    name: str | None = None
    type: JobType = "service"
    priority: int = DEFAULT_PRIORITY
    datacenters: tuple[str, ...] = ("*",)
    region: str = DEFAULT_REGION
    meta: dict[str, str] = Field(default_factory=dict)
    version: int = 0

    @property
    def display_name(self) -> str:
        """Nomad defaults a job's name to its ID."""
        return self.name or self.id

    @property
    def is_batch(self) -> bool:
        """Batch-like jobs complete when their tasks exit successfully."""
        return self.type in ("batch", "sysbatch")


class RestartPolicy(_Model):
    """The group `restart` block as written; unset fields take the job type's defaults."""

    attempts: int | None = None
    interval: str | None = None
    delay: str | None = None
    mode: RestartMode | None = None


@dataclass(frozen=True)
class EffectiveRestartPolicy:
    """The restart policy the operator enforces, with Nomad's per-job-type defaults applied."""

    attempts: int
    interval_seconds: float
    delay_seconds: float
    mode: RestartMode


# Nomad: service and system jobs restart 2 times in 30m, batch jobs 3 times in 24h; delay 15s.
_RESTART_DEFAULTS: Final[dict[str, tuple[int, str, str]]] = {
    "service": (2, "30m", "15s"),
    "system": (2, "30m", "15s"),
    "batch": (3, "24h", "15s"),
    "sysbatch": (3, "24h", "15s"),
}


class EphemeralDisk(_Model):
    """Group scratch space; `sizeMB` bounds the shared `/alloc` volume."""

    sticky: bool = False
    size_mb: int = Field(DEFAULT_DISK_MB, alias="sizeMB")
    migrate: bool = False


class DynamicPort(_Model):
    """A port whose number the operator picks; `to` is the port the task listens on, if set."""

    label: str
    to: int | None = None


class ReservedPort(_Model):
    """A static port `value`; `to` maps it to a different port inside the allocation."""

    label: str
    value: int
    to: int | None = None


class Network(_Model):
    """The group network. Whatever the `mode`, the allocation gets the pod's network."""

    mode: str = DEFAULT_NETWORK_MODE
    dynamic_ports: tuple[DynamicPort, ...] = ()
    reserved_ports: tuple[ReservedPort, ...] = ()


class Check(_Model):
    """A Nomad service check; http, tcp, grpc (and task script) checks become probes."""

    name: str | None = None
    type: CheckType
    path: str | None = None
    protocol: Literal["http", "https"] | None = None
    port_label: str | None = None
    interval: str
    timeout: str
    initial_status: Literal["passing", "warning", "critical"] | None = None
    command: str | None = None
    args: tuple[str, ...] = ()
    on_update: Literal["require_healthy", "ignore_warnings", "ignore"] = "require_healthy"

    def display_name(self, service_name: str) -> str:
        """Nomad names an unnamed check after its service."""
        return self.name or f'service: "{service_name}" check'

    @property
    def interval_seconds(self) -> float:
        return parse_go_duration(self.interval)

    @property
    def timeout_seconds(self) -> float:
        return parse_go_duration(self.timeout)


class Service(_Model):
    """A Nomad-native service registration of the group or of one task."""

    name: str
    port_label: str | None = None
    tags: tuple[str, ...] = ()
    checks: tuple[Check, ...] = ()


class TaskGroup(_Model):
    """The task group this allocation places; `index` is the allocation's count index."""

    name: str
    index: int = 0
    count: int = 1
    restart_policy: RestartPolicy = Field(default_factory=RestartPolicy)
    shutdown_delay: str | None = None
    ephemeral_disk: EphemeralDisk = Field(default_factory=EphemeralDisk)
    networks: tuple[Network, ...] = ()
    services: tuple[Service, ...] = ()
    meta: dict[str, str] = Field(default_factory=dict)

    @property
    def shutdown_delay_seconds(self) -> float:
        return _seconds(self.shutdown_delay)


class DriverConfig(_Model):
    """Driver settings; keys the operator does not know are kept for the Nomad `Job` copy."""

    model_config = ConfigDict(extra="allow")

    image: str | None = None
    command: str | None = None
    args: tuple[str, ...] = ()
    entrypoint: tuple[str, ...] | None = None
    work_dir: str | None = None

    @property
    def extras(self) -> dict[str, Any]:
        """Keys outside the known ones, exactly as written."""
        return dict(self.__pydantic_extra__ or {})


class Resources(_Model):
    """Nomad task resources: CPU in MHz, memory in MiB (Nomad's "MB")."""

    cpu: int = DEFAULT_CPU_MHZ
    memory_mb: int = Field(DEFAULT_MEMORY_MB, alias="memoryMB")
    memory_max_mb: int | None = Field(None, alias="memoryMaxMB")


class Lifecycle(_Model):
    """When the task runs relative to the main tasks, and whether it is long-lived."""

    hook: LifecycleHook
    sidecar: bool = False


class LogConfig(_Model):
    """Nomad log rotation; recorded in the `Job` copy (Kubernetes rotates logs per node)."""

    max_files: int = DEFAULT_LOG_MAX_FILES
    max_file_size_mb: int = Field(DEFAULT_LOG_MAX_FILE_SIZE_MB, alias="maxFileSizeMB")


class CronSchedule(_Model):
    """Nomad time-based execution: 6-field `start` cron, 2-field (minute hour) `end`."""

    start: str
    end: str
    timezone: str | None = None


class Schedule(_Model):
    """When a task may run (the pause feature)."""

    cron: CronSchedule


class Task(_Model):
    """One Nomad task, which becomes one container of the pod."""

    name: str
    driver: str
    config: DriverConfig = Field(default_factory=DriverConfig)
    env: dict[str, str] = Field(default_factory=dict)
    resources: Resources = Field(default_factory=Resources)
    services: tuple[Service, ...] = ()
    lifecycle: Lifecycle | None = None
    leader: bool = False
    kill_timeout: str = DEFAULT_KILL_TIMEOUT
    kill_signal: str | None = None
    shutdown_delay: str | None = None
    log_config: LogConfig = Field(default_factory=LogConfig)
    meta: dict[str, str] = Field(default_factory=dict)
    schedule: Schedule | None = None

    @property
    def kill_timeout_seconds(self) -> float:
        return parse_go_duration(self.kill_timeout)

    @property
    def shutdown_delay_seconds(self) -> float:
        return _seconds(self.shutdown_delay)

    @property
    def is_main(self) -> bool:
        """Main tasks have no lifecycle block."""
        return self.lifecycle is None

    @property
    def hook(self) -> LifecycleHook | None:
        return None if self.lifecycle is None else self.lifecycle.hook

    @property
    def is_sidecar(self) -> bool:
        return self.lifecycle is not None and self.lifecycle.sidecar


@dataclass(frozen=True)
class ResolvedPort:
    """A group port with its number decided.

    `value` is Nomad's `Value` (the reserved port, or for a dynamic port its `to` or a number
    picked from the dynamic range); `container_port` is where the task listens (`to` when set).
    """

    label: str
    value: int
    to: int
    reserved: bool

    @property
    def container_port(self) -> int:
        return self.to if self.to > 0 else self.value


class AllocationSpec(_Model):
    """The whole `spec` of an `Allocation`."""

    job: Job
    task_group: TaskGroup
    tasks: tuple[Task, ...]

    @property
    def alloc_name(self) -> str:
        """Nomad's allocation name, `<job>.<group>[<index>]`."""
        return f"{self.job.id}.{self.task_group.name}[{self.task_group.index}]"

    def task(self, name: str) -> Task | None:
        """The task called `name`, if any."""
        return next((t for t in self.tasks if t.name == name), None)

    @property
    def leader(self) -> Task | None:
        return next((t for t in self.tasks if t.leader), None)

    def restart_policy(self) -> EffectiveRestartPolicy:
        """The group restart policy with the job type's defaults filled in."""
        given = self.task_group.restart_policy
        attempts, interval, delay = _RESTART_DEFAULTS[self.job.type]
        return EffectiveRestartPolicy(
            attempts=attempts if given.attempts is None else given.attempts,
            interval_seconds=parse_go_duration(given.interval or interval),
            delay_seconds=parse_go_duration(given.delay or delay),
            mode=given.mode or "fail",
        )

    def ports(self) -> tuple[ResolvedPort, ...]:
        """Every group port with a number, deterministically (same spec, same numbers).

        Dynamic ports without `to` get the lowest free numbers from Nomad's dynamic range,
        skipping every number another port of the allocation already uses. Resolved once per
        set of networks: one render of an allocation asks nine times, which was a third of the
        store's time per change. Kept in the instance's `__dict__`, as `cached_property` keeps
        its value (pydantic compares, dumps and validates fields only; a pydantic private
        attribute costs more to read than resolving the ports), with the networks it was
        resolved from, so a `model_copy` with other networks resolves its own.
        """
        networks = self.task_group.networks
        memo = self.__dict__.get(_PORTS_MEMO)
        if memo is None or memo[0] is not networks:
            memo = self.__dict__[_PORTS_MEMO] = (networks, _resolve_ports(networks))
        return memo[1]


_PORTS_MEMO: Final = "_ports_memo"


def _resolve_ports(networks: tuple[Network, ...]) -> tuple[ResolvedPort, ...]:
    taken: set[int] = set()
    for net in networks:
        for r in net.reserved_ports:
            taken.update({r.value, r.to or 0})
        for d in net.dynamic_ports:
            taken.add(d.to or 0)
    out: list[ResolvedPort] = []
    candidate = DYNAMIC_PORT_MIN
    for net in networks:
        for r in net.reserved_ports:
            out.append(ResolvedPort(r.label, r.value, max(r.to or 0, 0), reserved=True))
        for d in net.dynamic_ports:
            to = max(d.to or 0, 0)
            if to:
                out.append(ResolvedPort(d.label, to, to, reserved=False))
                continue
            while candidate in taken:
                candidate += 1
            taken.add(candidate)
            out.append(ResolvedPort(d.label, candidate, 0, reserved=False))
    return tuple(out)


def parse_spec(raw: Any) -> AllocationSpec:
    """Parse the `spec` mapping Kopf hands over; raises `pydantic.ValidationError`."""
    return AllocationSpec.model_validate(raw)
